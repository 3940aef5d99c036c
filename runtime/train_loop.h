/* train_loop: the training loop of `train`. A Trainer owns everything a run needs,
 * allocated once by trainer_init: the device and its tiers, the open token
 * files, the host batch and read-back buffers, the log file. trainer_run does
 * the steps; trainer_finish saves and samples.
 *
 * Ranks (`mpirun -np N train`, comm.h): N data-parallel ranks run the same program;
 * the global batch is N x the program's batch and rank r reads rows [r*batch,
 * (r+1)*batch) of it (data.h). A program with a mesh (program.h) runs D x T x P
 * ranks (train_mesh.h): what follows holds for the D ranks of each dp group, every
 * rank reads its dp rank's rows, tied gradients are summed over the stages first,
 * the loss is the last stage's and the norm counts every element once. The logged loss is the mean of the ranks'
 * losses, the gradient is the ranks' mean (train_zero.h: summed, then scaled by 1/N through the update's gradient
 * scale), the norm is the mean gradient's, and every rank applies the same update, so parameters stay equal on all
 * ranks (checked at the end). Rank 0 alone prints, writes --log, --save and checkpoints. Errors are agreed on
 * (comm_agree, or a failure flag in the step's one host reduction), so every rank stops together; the failing rank's
 * message is the one printed, and a function that fails only because another rank did leaves err empty.
 *
 * One step k (k from 1; batch index data_step, 0-based):
 *   batch data_step → every input's rows (data.h: i32 values checked)
 *   zero GRADS; run `step` (a scheduled program: once, its "input" and "loss"
 *   instructions walking the micro-batches; otherwise once per micro-batch); read
 *   the loss (the loss of step k is the forward loss before step k's update); sum
 *   tied gradients over the stages; reduce over the dp group (a zero_scheduled
 *   program: `step` gathered and reduced itself, train_zero.h); run `gradnorm`; norm = sqrt(sum of the parts, in
 *   double); run `update` with the scalars of program.h + train_program.h:
 *   lr(k), 1/(1-beta1^k), 1/(1-beta2^k), min(1, clip/(norm+1e-6)) (1 without
 *   clipping), k, then beta1, beta2, eps, weight decay, momentum.
 * Learning rate: lr*k/warmup for k <= warmup; after it, constant lr, or cosine
 * from lr to min_lr: min_lr + (lr-min_lr)(1+cos(pi (k-warmup)/(steps-warmup)))/2,
 * which reaches min_lr at k = steps.
 * Validation (--val): the mean of the `step` loss over TRAIN_VAL_BATCHES fixed
 * batches (0, 1, ... of the file), without gradnorm or update, after every
 * --val-every steps and after the last step.
 * Offload programs (program.h, offload.h): one rank, no ZeRO; GRADS is not zeroed
 * (the plan's moves from "zero" create the gradients); after `update` the step ends
 * with offload_end_step (every part home, or the copy thread's error); after each
 * validation `step` offload_home brings the parts home; the state is written to and
 * read from the parts' homes through the host buffers host[] (staged); the end
 * prints and logs the measured peaks beside the prediction.
 * Memory (several ranks or ZeRO): the start-up line gives what each tier holds on
 * the largest rank between steps; the end, before --save, a line with the peak of
 * each tier on the largest rank during the steps and validations (what a ZeRO
 * program's step gathers and creates included; checkpoints, --save and sampling
 * gather whole tiers and are not counted), and a --log record {"step": N,
 * "memory_peak": {"params": B, "grads": B, "opt": B, "work": B}}.
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_LOOP_H
#define COLOSSALC_RUNTIME_TRAIN_LOOP_H

#include "runtime/comm.h"
#include "runtime/executor.h"
#include "runtime/data.h"
#include "runtime/train_mesh.h"
#include "runtime/train_opts.h"
#include "runtime/train_program.h"
#include "runtime/train_zero.h"

#include <stdint.h>
#include <stdio.h>

typedef struct Trainer {
  const RtProgram *prog;
  const TrainOpts *opts;
  RtTrain hp; /* the program's train values, command-line overrides applied */
  Device *dev;
  char *nvme_rank_dir; /* several ranks: this rank's folder under --nvme-dir, or NULL */
  Comm *dp_overlap;    /* the dp group on the device's communication stream, for the
                          program's "overlap" collectives (NULL: none, or the CPU) */
  Device *host_dev;    /* offload on a device the host does not see: the CPU device of
                          the host location (its memory, its "on": "host" kernels) */
  Executor ex;
  Comm *comm;              /* the ranks (the world) */
  int own_comm;            /* comm was made by trainer_init (self) */
  const RtProgram *stages; /* [nstages] every pipeline stage's program; prog is one */
  int nstages;
  Mesh mesh;            /* coordinates, groups, the global parameter view */
  Zero zero;            /* ownership and sharded state (--zero), over mesh.dp_comm */
  int64_t global_batch; /* rows per step over all ranks: dp x microbatches x batch */
  char *gstate[2];      /* non-trivial mesh: global PARAMS and OPT (mesh.global's
                           layout) on world rank 0 for --save and checkpoints */
  DataFile *data, *val;
  char *rows[RT_MAX_INPUTS]; /* [batch * microbatches * row_elems] 4-byte values of each
                                input, host (the device's staging memory) */
  float *gnorm_parts;        /* [gradnorm_parts], host */
  float *logits_row;         /* [vocab], host (sampling) */
  int32_t *context;          /* [seq], host (sampling) */
  char *host[RT_TIERS];      /* PARAMS and OPT as host memory (views or staging) */
  int staged;                /* host[] are copies: download/upload around file I/O */
  FILE *log;
  int threads;
  uint64_t seed;
  int64_t step;                 /* training steps done (updates, and fp16's skipped steps) */
  double loss_scale;            /* fp16 (hp.loss_scaling): the scale of the next step's gradients */
  int64_t good_steps;           /* fp16: finite steps since the scale last changed */
  int64_t skipped;              /* fp16: steps skipped for an inf or NaN gradient (no update) */
  int64_t off_steps, off_moved; /* offload: training steps run here, bytes they moved */
  int64_t step_peak[RT_TIERS];  /* the most bytes behind each tier during a step or a
                                   validation (checkpoints, --save, sampling not counted) */
  int64_t peak_runs;            /* steps and validations measured */
  double step_flops;            /* model FLOPs of one training step over all ranks */
  double peak_flops;            /* the ranks' devices' peak FLOP/s together, 0 if any is unknown */
  double plan_mem;              /* the compiler's step memory of the largest rank with the device's
                                   own bytes ("predicted_memory"), -1 when unknown */
  int64_t data_step;            /* next training batch */
  int64_t last_val, last_ckpt;  /* steps at which they last ran (-1: never) */
} Trainer;

/* Learning rate of step t (from 1) of `steps`. */
double train_lr(const RtTrain *hp, int64_t t, int64_t steps);
/* sc[TRAIN_SCALARS] for step t. */
void train_scalars(const RtTrain *hp, double lr, int64_t t, double gscale, float *sc);

/* All of these return 0, or -1 with a message (without "train: ") in err, empty
 * when another rank failed. */
int trainer_init(Trainer *t, const RtProgram *p, const RtKernelFn *kernels, const TrainOpts *o, char *err,
                 size_t errlen);
/* The same over comm (not freed by trainer_free); trainer_init is this on one rank. */
int trainer_init_comm(Trainer *t, const RtProgram *p, const RtKernelFn *kernels, const TrainOpts *o, Comm *comm,
                      char *err, size_t errlen);
/* The same for the stages of a pipeline (program_load_stages): this rank runs the
 * stage of its pp coordinate (train_mesh.h). */
int trainer_init_stages(Trainer *t, const RtProgram *stages, int nstages, const RtKernelFn *kernels, const TrainOpts *o,
                        Comm *comm, char *err, size_t errlen);
int trainer_run(Trainer *t, char *err, size_t errlen);
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
