/* train_opts: the command line of `train`, one table (train_opts.c) that drives the
 * parser and `train --help`.
 *
 * Flags take their value as the next argument or after '=' (--steps 100,
 * --steps=100). Unset overrides are NAN (reals) or -1 (integers), and the
 * program's "train" values are used for them.
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_OPTS_H
#define COLOSSALC_RUNTIME_TRAIN_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Validation batches per --val evaluation: batches 0..TRAIN_VAL_BATCHES-1 of the
 * --val file (wrapping), the same every time, so evaluations are comparable. */
#define TRAIN_VAL_BATCHES 4

typedef struct TrainOpts {
  const char *data, *val, *init_from, *save, *save_hf, *ckpt_dir, *log;
  const char *nvme_dir; /* offload programs: where the NVMe location's files go */
  int64_t steps;        /* default 10 */
  int64_t val_every;    /* -1: only after the last step */
  int64_t ckpt_every;   /* -1: only after the last step (with --ckpt-dir) */
  int64_t keep_ckpts;   /* -1: keep every checkpoint */
  int64_t sample;       /* tokens to sample after training, 0: none */
  int64_t threads;      /* -1: the number of online CPUs */
  int64_t warmup;       /* -1: the program's */
  uint64_t seed;        /* default 1337 */
  int seed_given;
  double lr, min_lr, weight_decay, beta1, beta2, eps, clip, loss_scale; /* NAN: the program's */
  int schedule;                                                         /* ProgSchedule, -1: the program's */
  int resume, help, dump_program, device_info, profile;
  int shuffle;                 /* --data rows in a shuffled order keyed by the seed (tokens.h) */
  int device;                  /* TRAIN_DEVICE_* */
  const char *kernel_cache;    /* CUDA kernels compiled by NVRTC, or NULL: the default */
  const char *compile_kernels; /* compile the CUDA kernels for this architecture and exit */
  int tf32;                    /* CUDA GEMMs on TF32 */
  double collective_timeout;   /* seconds a rank may make no progress in a step (0: never) */
  int on_nan;                  /* TRAIN_NAN_*: a step with a non-finite loss or norm */
  int64_t max_bad_steps;       /* consecutive such steps that stop the run (0: never) */
} TrainOpts;

enum { TRAIN_DEVICE_AUTO = -1, TRAIN_DEVICE_CPU, TRAIN_DEVICE_CUDA };
enum { TRAIN_NAN_SKIP, TRAIN_NAN_STOP };

/* Parses argv into *o (defaults first). 0, or -1 with a message (no "train: "). */
int train_opts_parse(int argc, char **argv, TrainOpts *o, char *err, size_t errlen);

/* Prints the usage text. */
void train_opts_help(FILE *f);

#endif
