/* train_loop: the training loop of `train`. A Trainer owns everything a run needs,
 * allocated once by trainer_init: the device and its tiers, the open data files, the
 * host rows of the inputs, the log file. trainer_run does the steps; trainer_finish
 * saves and samples.
 *
 * The program says what a step is (program/program.h, "Lists"): trainer_step reads this
 * rank's rows of the step's batch (data.h) and runs the compiled list `train` once,
 * which zeroes the gradients, runs the micro-batches (a pipeline's schedule), sums the
 * gradients, reduces the loss and the norm over every rank ("norm"), and updates; the
 * trainer then logs. The learning rate of step k (from 1): lr*k/warmup for k <= warmup;
 * after it, constant lr, or cosine from lr to min_lr, min_lr at k = steps.
 *
 * Ranks (`mpirun -np N train`, comm.h): the mesh dp x tp x pp of the program
 * (train_mesh.h); every rank reads its dp rank's rows of the global batch
 * (dp x microbatches x batch). Rank 0 alone prints and writes --log; every rank writes
 * its own shard of checkpoints and of --save (io/ckpt.h, io/shards.h), which rank 0
 * then indexes (and for --save, --save-hf streams into one file). Errors are agreed on (comm_agree, or the failure flag
 * of the step's "norm"), so every rank stops together; the failing rank's message is the one printed, and a function
 * that fails only because another rank did leaves err empty.
 *
 * Faults (docs/train.md, "Checkpoints and faults"): a SIGTERM or SIGINT on any rank is agreed on at the step's
 * end (with the memory figure), so every rank stops after the same step and checkpoints
 * it; a step whose loss or gradient norm is not finite skips its update (ExecStep.skip),
 * counted in bad_run for --on-nan and --max-bad-steps; the steps and validations are the
 * watchdog's timed regions (comm/watchdog.h).
 *
 * Validation (--val): the mean loss of the list `eval` over TRAIN_VAL_BATCHES fixed
 * batches (0, 1, ... of the file), after every --val-every steps and after the last.
 * Offload programs (offload.h): the state is written to and read from the parts' homes
 * through the host buffers host[] (staged); each validation brings the parts home
 * after `eval`; the end prints and logs the measured peaks beside the prediction.
 * Checkpoints (--ckpt-dir): the step blocks while the state reaches host memory; each
 * rank's shard is written on a thread (CkptJob) while training goes on, the next
 * update waiting for it where it reads the live tiers; once every rank's is written
 * (checked after each step), rank 0 writes the index and `latest`.
 * Memory (several ranks or ZeRO): the start-up line gives what each tier holds on the
 * largest rank between steps; the end, before --save, a line with the peak of each tier
 * on the largest rank during the steps and validations (--save and sampling gather
 * whole tiers under ZeRO-3 and are not counted), and a --log record {"step": N,
 * "memory_peak": {"params": B, "grads": B, "opt": B, "work": B}}.
 * The plan's step time (a program compiled with a plan: ProgStage.plan_step_s) stands in
 * every step line beside the measured one, and in the log ("predicted_ms"); after
 * TRAIN_APART_STEPS steps in a row that part from it by more than TRAIN_APART (a
 * fraction), rank 0 warns once, with their median.
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_LOOP_H
#define COLOSSALC_RUNTIME_TRAIN_LOOP_H

#include "runtime/comm/comm.h"
#include "runtime/io/data.h"
#include "runtime/executor.h"
#include "runtime/io/ckpt.h"
#include "runtime/train_mesh.h"
#include "runtime/train_opts.h"
#include "runtime/train_zero.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

enum { TRAIN_APART_STEPS = 20 };
#define TRAIN_APART 0.25

/* A checkpoint being written: this rank's shard on a thread of its own (train_loop.c),
 * committed once every rank's is. */
typedef struct CkptJob {
  pthread_t thread;
  int running, joined; /* a write started and not committed; its thread joined */
  int done;            /* set by the thread when the shard is written (atomic) */
  int live;            /* the pieces are the live tiers: the next update waits for it */
  int rc;
  char err[1024];
  MeshPieces mp;
  CkptMeta m;            /* the state's step, data position, seed, ...; m.fp8 rank 0's */
  int64_t fp8_shape[2];  /* its shape, as the piece takes it */
  double t0, blocked_ms; /* when it started; how long the steps waited for it */
  const char *dir;
  int rank, ranks;
} CkptJob;

typedef struct Trainer {
  const Prog *prog; /* this rank's stage (mesh.prog) */
  const TrainOpts *opts;
  Device *dev;
  const ProgCpuBuild *cpu; /* the build of the CPU kernels this CPU runs (train_main) */
  char *nvme_rank_dir;     /* several ranks: this rank's folder under --nvme-dir, or NULL */
  Comm *dp_overlap;        /* the dp group on the device's communication stream, for the
                              program's "overlap" collectives (NULL: none, or the CPU) */
  Device *host_dev;        /* offload on a device the host does not see: the CPU device of
                              the host location (its memory, its on_host kernels) */
  ExecHp hp;               /* the program's optimizer settings, the flags applied (ex.step.hp) */
  Executor ex;
  Comm *comm;           /* the ranks (the world) */
  int own_comm;         /* comm was made by trainer_init (self) */
  Mesh mesh;            /* coordinates, groups, the global parameter view */
  Zero zero;            /* ownership and sharded state (--zero), over mesh.dp_comm */
  int64_t global_batch; /* rows per step over all ranks: dp x microbatches x batch */
  DataFile *data, *val;
  char *rows[PROG_MAX_INPUTS]; /* [batch * microbatches * row_elems] 4-byte values of each
                                  input, host (the device's staging memory) */
  float *logits_row;           /* [vocab], host (sampling) */
  int32_t *context;            /* [seq], host (sampling) */
  char *host[TIERS];           /* PARAMS and OPT as host memory (views or staging) */
  int staged;                  /* host[] are copies: download/upload around file I/O */
  FILE *log;
  int threads;
  uint64_t seed;
  int64_t step;                       /* training steps done (updates, and fp16's skipped steps) */
  int64_t off_steps, off_moved;       /* offload: training steps run here, bytes they moved */
  int64_t step_peak[TIERS];           /* the most bytes behind each tier during a step or a
                                         validation (checkpoints, --save, sampling not counted) */
  int64_t peak_runs;                  /* steps and validations measured */
  double step_flops;                  /* model FLOPs of one training step over all ranks */
  double peak_flops;                  /* the ranks' devices' peak FLOP/s together, 0 if any is unknown */
  double plan_mem;                    /* the compiler's step memory of the largest rank with the device's
                                         own bytes, -1 when unknown */
  double plan_ms;                     /* the plan's step time (ProgStage.plan_step_s), 0: no plan */
  double apart_ms[TRAIN_APART_STEPS]; /* the last steps' times while they part from plan_ms */
  int apart_run, apart_warned;        /* such steps in a row; the warning given */
  int64_t data_step;                  /* next training batch */
  int64_t last_val, last_ckpt;        /* steps at which they last ran (-1: never) */
  CkptJob job;                        /* the checkpoint being written, if any */
  int64_t bad_run, bad_total;         /* steps with a numerical fault: in a row, in all */
  ExecProfile prof;                   /* --profile: the steps' instructions (the first step's not) */
  double prof_ms;                     /* --profile: those steps' time */
  int64_t prof_steps, steps_run;      /* steps profiled; steps this process ran */
  int halted;                         /* trainer_run stopped early on a signal: no trainer_finish */
  int exit_status;                    /* then the process's status (0: checkpoint written) */
} Trainer;

/* All of these return 0, or -1 with a message (without "train: ") in err, empty
 * when another rank failed. */
/* The program all (its model's view, prog_open) over comm (NULL: one rank of its own;
 * not freed by trainer_free): this rank runs the stage of its pp coordinate. */
int trainer_init(Trainer *t, const Prog *all, const ProgCpuBuild *cpu, const TrainOpts *o, Comm *comm, char *err,
                 size_t errlen);
/* The steps. A SIGTERM or SIGINT (trainer_catch_signals) on any rank ends the step in
 * flight on every rank, then the run: a checkpoint with --ckpt-dir, one line on stderr,
 * halted set with exit_status (0 saved, else 128 + the signal), and 0 returned. A
 * numerical stop (--on-nan stop, --max-bad-steps) returns -1 with its message. */
int trainer_run(Trainer *t, char *err, size_t errlen);
/* SIGTERM and SIGINT noted for trainer_run; a second one exits at once (128 + it). */
void trainer_catch_signals(void);
int trainer_finish(Trainer *t, char *err, size_t errlen);
void trainer_free(Trainer *t);

/* Validation loss: mean over TRAIN_VAL_BATCHES batches of --val (all ranks). */
int trainer_validate(Trainer *t, double *loss, char *err, size_t errlen);
/* Prints n tokens sampled from the model to out (train_sample.c). */
int trainer_sample(Trainer *t, int64_t n, FILE *out, char *err, size_t errlen);

/* Reads this rank's rows of batch `index` of df (the training data: --shuffle applies)
 * into the host rows of the program's inputs, checked (data.h). */
int trainer_load_batch(Trainer *t, DataFile *df, int64_t index, char *err, size_t errlen);

#endif
