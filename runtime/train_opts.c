/* train_opts: `train`'s flags as one table: name, value kind, field, range, help.
 * The parser, the range checks and --help are all driven from TRAIN_FLAGS.
 */
#include "runtime/train_opts.h"

#include "program/program.h"
#include "runtime/io/fileio.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum OptKind { OPT_STR, OPT_INT, OPT_U64, OPT_REAL, OPT_SCHED, OPT_FLAG, OPT_DEVICE, OPT_ONNAN } OptKind;

/* X(flag, kind, field, min, max, metavar, help); min/max bound INT and REAL values. */
#define TRAIN_FLAGS(X)                                                                                                   \
  X("--data", OPT_STR, data, 0, 0, "FILE", "training data, an llm.c token file or a record file (required to train)")    \
  X("--val", OPT_STR, val, 0, 0, "FILE", "validation data: mean loss over 4 fixed batches")                              \
  X("--val-every", OPT_INT, val_every, 1, 1e15, "N", "validate every N steps (default: after the last step)")            \
  X("--steps", OPT_INT, steps, 0, 1e15, "N", "training steps (default 10)")                                              \
  X("--lr", OPT_REAL, lr, 0, 1e9, "X", "peak learning rate")                                                             \
  X("--warmup", OPT_INT, warmup, 0, 1e15, "N", "linear warm-up steps: lr*t/N for t <= N")                                \
  X("--min-lr", OPT_REAL, min_lr, 0, 1e9, "X", "learning rate at the last step (cosine)")                                \
  X("--lr-schedule", OPT_SCHED, schedule, 0, 0, "cosine|constant",                                                       \
    "after warm-up: cosine from lr to min-lr by the last step, or constant lr")                                          \
  X("--seed", OPT_U64, seed, 0, 0, "S", "initialisation, shuffling and sampling seed (default 1337)")                    \
  X("--shuffle", OPT_FLAG, shuffle, 0, 0, "",                                                                            \
    "read --data's sequences (or records) in an order shuffled by the seed, each epoch anew")                            \
  X("--weight-decay", OPT_REAL, weight_decay, 0, 1e9, "X", "decoupled weight decay (parameters marked decay)")           \
  X("--beta1", OPT_REAL, beta1, 0, 0.999999999, "X", "AdamW beta1, in [0, 1)")                                           \
  X("--beta2", OPT_REAL, beta2, 0, 0.999999999, "X", "AdamW beta2, in [0, 1)")                                           \
  X("--eps", OPT_REAL, eps, 1e-30, 1e9, "X", "AdamW epsilon (> 0)")                                                      \
  X("--clip", OPT_REAL, clip, 0, 1e30, "X", "clip the global gradient norm to X (0: off)")                               \
  X("--loss-scale", OPT_REAL, loss_scale, 1e-30, 1e30, "X",                                                              \
    "fp16 programs: the initial loss scale (default the program's, 65536)")                                              \
  X("--threads", OPT_INT, threads, 1, 1024, "N",                                                                         \
    "CPU threads for kernels and OpenBLAS (default: online CPUs / ranks here)")                                          \
  X("--device", OPT_DEVICE, device, 0, 0, "cpu|cuda",                                                                    \
    "where to run (default: cuda when the program has CUDA kernels and a GPU is visible)")                               \
  X("--kernel-cache", OPT_STR, kernel_cache, 0, 0, "DIR",                                                                \
    "CUDA kernels compiled by NVRTC (default $XDG_CACHE_HOME/colossalc or ~/.cache/colossalc)")                          \
  X("--compile-kernels", OPT_STR, compile_kernels, 0, 0, "ARCH",                                                         \
    "compile the CUDA kernels for ARCH (sm_90) into the kernel cache and exit; no GPU needed")                           \
  X("--tf32", OPT_FLAG, tf32, 0, 0, "", "CUDA: GEMMs on TF32 tensor cores (f32 inputs rounded to 10-bit mantissas)")     \
  X("--init-from", OPT_STR, init_from, 0, 0, "PATH",                                                                     \
    "initial parameters (F32, BF16, F16): safetensors, or a transformers directory or index")                            \
  X("--save", OPT_STR, save, 0, 0, "FILE", "write the parameters at the end (safetensors, F32)")                         \
  X("--save-hf", OPT_STR, save_hf, 0, 0, "DIR",                                                                          \
    "write the parameters at the end as a transformers model (model.safetensors, config.json)")                          \
  X("--ckpt-dir", OPT_STR, ckpt_dir, 0, 0, "DIR", "checkpoints: DIR/ckpt-STEP/ (a shard per rank), DIR/latest")          \
  X("--ckpt-every", OPT_INT, ckpt_every, 1, 1e15, "N", "checkpoint every N steps (default: after the last step)")        \
  X("--keep-ckpts", OPT_INT, keep_ckpts, 1, 1e9, "N",                                                                    \
    "keep the newest N checkpoints, deleting older ones once a new one is complete (default: all)")                      \
  X("--resume", OPT_FLAG, resume, 0, 0, "", "continue from the checkpoint DIR/latest names")                             \
  X("--nvme-dir", OPT_STR, nvme_dir, 0, 0, "DIR",                                                                        \
    "offload programs: the folder of the NVMe location's files (made when missing; scratch, removed at exit)")           \
  X("--collective-timeout", OPT_REAL, collective_timeout, 0, 1e9, "S",                                                   \
    "several ranks: end the job when a rank makes no progress in a step for S s (default 600; 0: never)")                \
  X("--on-nan", OPT_ONNAN, on_nan, 0, 0, "skip|stop",                                                                    \
    "a step with a non-finite loss or gradient norm: skip its update (default), or stop (checkpointed with --ckpt-dir)") \
  X("--max-bad-steps", OPT_INT, max_bad_steps, 0, 1e15, "N",                                                             \
    "stop after N consecutive steps with a non-finite loss or gradient norm (default 10; 0: never)")                     \
  X("--log", OPT_STR, log, 0, 0, "FILE", "metrics as JSON lines (appended to with --resume)")                            \
  X("--profile", OPT_FLAG, profile, 0, 0, "",                                                                            \
    "time every rank's instructions by kind (GEMMs, kernels, sends, receives, collectives, ...) over the steps after "   \
    "the first, the device synced after each, and print where the step went")                                            \
  X("--sample", OPT_INT, sample, 0, 1e9, "N", "after training, print N tokens sampled from the model")                   \
  X("--device-info", OPT_FLAG, device_info, 0, 0, "",                                                                    \
    "print the GPU libraries this train finds (driver, NVRTC, cuBLASLt, NCCL: where, which version, or where it "        \
    "looked) and the GPUs, and exit")                                                                                    \
  X("--dump-program", OPT_FLAG, dump_program, 0, 0, "",                                                                  \
    "print the program this train carries (its lists, one instruction a line) and exit")                                 \
  X("--help", OPT_FLAG, help, 0, 0, "", "print this help")

typedef struct OptSpec {
  const char *flag;
  OptKind kind;
  size_t off;
  double lo, hi;
  const char *metavar, *help;
} OptSpec;

static const OptSpec opt_table[] = {
#define OPT_ROW(flag, kind, field, lo, hi, mv, help) {flag, kind, offsetof(TrainOpts, field), lo, hi, mv, help},
    TRAIN_FLAGS(OPT_ROW)
#undef OPT_ROW
};
enum { OPT_COUNT = sizeof opt_table / sizeof opt_table[0] };

static void opts_defaults(TrainOpts *o) {
  memset(o, 0, sizeof *o);
  o->steps = 10;
  o->val_every = o->ckpt_every = o->keep_ckpts = o->threads = o->warmup = -1;
  o->seed = 1337;
  o->lr = o->min_lr = o->weight_decay = o->beta1 = o->beta2 = o->eps = o->clip = o->loss_scale = NAN;
  o->schedule = -1;
  o->device = TRAIN_DEVICE_AUTO;
  o->collective_timeout = 600;
  o->on_nan = TRAIN_NAN_SKIP;
  o->max_bad_steps = 10;
}

static const OptSpec *opts_find(const char *arg, size_t len) {
  for (int i = 0; i < OPT_COUNT; i++)
    if (strlen(opt_table[i].flag) == len && strncmp(opt_table[i].flag, arg, len) == 0) return &opt_table[i];
  return NULL;
}

static int opts_bad(const OptSpec *s, const char *v, const char *want, char *err, size_t errlen) {
  return file_set_error(err, errlen, "%s: expected %s, got '%s'", s->flag, want, v);
}

static int opts_set_int(const OptSpec *s, const char *v, void *field, char *err, size_t errlen) {
  char *end, want[96];
  errno = 0;
  long long x = strtoll(v, &end, 10);
  snprintf(want, sizeof want, "an integer in [%.0f, %.0f]", s->lo, s->hi);
  if (!v[0] || *end || errno || x < s->lo || x > s->hi) return opts_bad(s, v, want, err, errlen);
  *(int64_t *)field = x;
  return 0;
}

static int opts_set_real(const OptSpec *s, const char *v, void *field, char *err, size_t errlen) {
  char *end, want[96];
  errno = 0;
  double x = strtod(v, &end);
  snprintf(want, sizeof want, "a number in [%g, %g]", s->lo, s->hi);
  if (!v[0] || *end || errno || !isfinite(x) || x < s->lo || x > s->hi) return opts_bad(s, v, want, err, errlen);
  *(double *)field = x;
  return 0;
}

static int opts_set_u64(const OptSpec *s, const char *v, TrainOpts *o, char *err, size_t errlen) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 0);
  if (!v[0] || *end || errno || v[0] == '-') return opts_bad(s, v, "an unsigned 64-bit integer", err, errlen);
  o->seed = x;
  o->seed_given = 1;
  return 0;
}

static int opts_set(const OptSpec *s, const char *v, TrainOpts *o, char *err, size_t errlen) {
  void *field = (char *)o + s->off;
  switch (s->kind) {
  case OPT_STR:
    if (!v[0]) return opts_bad(s, v, s->metavar, err, errlen);
    *(const char **)field = v;
    return 0;
  case OPT_INT: return opts_set_int(s, v, field, err, errlen);
  case OPT_REAL: return opts_set_real(s, v, field, err, errlen);
  case OPT_U64: return opts_set_u64(s, v, o, err, errlen);
  case OPT_SCHED:
    if (strcmp(v, "cosine") != 0 && strcmp(v, "constant") != 0)
      return opts_bad(s, v, "cosine or constant", err, errlen);
    *(int *)field = strcmp(v, "cosine") == 0 ? PROG_SCHED_COSINE : PROG_SCHED_CONSTANT;
    return 0;
  case OPT_FLAG: *(int *)field = 1; return 0;
  case OPT_DEVICE:
    if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) return opts_bad(s, v, "cpu or cuda", err, errlen);
    *(int *)field = strcmp(v, "cpu") == 0 ? TRAIN_DEVICE_CPU : TRAIN_DEVICE_CUDA;
    return 0;
  case OPT_ONNAN:
    if (strcmp(v, "skip") != 0 && strcmp(v, "stop") != 0) return opts_bad(s, v, "skip or stop", err, errlen);
    *(int *)field = strcmp(v, "skip") == 0 ? TRAIN_NAN_SKIP : TRAIN_NAN_STOP;
    return 0;
  }
  return -1;
}

/* One argument at argv[*i] (and its value); advances *i. */
static int opts_one(int argc, char **argv, int *i, TrainOpts *o, char *err, size_t errlen) {
  const char *arg = argv[*i], *eq = strchr(arg, '=');
  size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
  const OptSpec *s = strncmp(arg, "--", 2) == 0 ? opts_find(arg, len) : NULL;
  if (len == 6 && !strncmp(arg, "--zero", 6))
    return file_set_error(err, errlen,
                          "--zero: the ZeRO stage is part of the plan, decided when "
                          "compiling: colossalc MODEL --gpus N --zero S -o train");
  if (!s)
    return file_set_error(err, errlen, "%s '%s' (see train --help)",
                          arg[0] == '-' ? "unknown flag" : "unexpected argument", arg);
  if (s->kind == OPT_FLAG) {
    if (eq) return file_set_error(err, errlen, "%s takes no value", s->flag);
    return opts_set(s, "", o, err, errlen);
  }
  if (!eq && *i + 1 >= argc) return file_set_error(err, errlen, "%s needs a value (%s)", s->flag, s->metavar);
  return opts_set(s, eq ? eq + 1 : argv[++*i], o, err, errlen);
}

/* Combinations the table cannot express. */
static int opts_check(const TrainOpts *o, char *err, size_t errlen) {
  if (o->help || o->dump_program || o->device_info) return 0;
  if (o->compile_kernels)
    return strncmp(o->compile_kernels, "sm_", 3) == 0
               ? 0
               : file_set_error(err, errlen, "--compile-kernels: expected an architecture such as sm_90, got '%s'",
                                o->compile_kernels);
  if (o->steps > 0 && !o->data)
    return file_set_error(err, errlen, "--data FILE is required for training (or pass --steps 0)");
  if (o->val_every > 0 && !o->val) return file_set_error(err, errlen, "--val-every needs --val FILE");
  if (o->ckpt_every > 0 && !o->ckpt_dir) return file_set_error(err, errlen, "--ckpt-every needs --ckpt-dir DIR");
  if (o->resume && !o->ckpt_dir) return file_set_error(err, errlen, "--resume needs --ckpt-dir DIR");
  if (o->resume && o->init_from) return file_set_error(err, errlen, "--resume and --init-from exclude each other");
  return 0;
}

int train_opts_parse(int argc, char **argv, TrainOpts *o, char *err, size_t errlen) {
  opts_defaults(o);
  for (int i = 1; i < argc; i++)
    if (opts_one(argc, argv, &i, o, err, errlen) != 0) return -1;
  return opts_check(o, err, errlen);
}

void train_opts_help(FILE *f) {
  fprintf(f, "usage: train --data FILE [flags]\n"
             "  Trains the model compiled into this executable (colossalc). Values not\n"
             "  given here come from the model's train directive.\n\nflags:\n");
  for (int i = 0; i < OPT_COUNT; i++) {
    char lhs[64];
    snprintf(lhs, sizeof lhs, "%s%s%s", opt_table[i].flag, opt_table[i].metavar[0] ? " " : "", opt_table[i].metavar);
    fprintf(f, "  %-30s %s\n", lhs, opt_table[i].help);
  }
  fprintf(f, "\nsampling: the context starts with the first token of --data (token 0 without\n"
             "  data); the window holds the last seq tokens of row 0 at positions 0.., padded\n"
             "  after the end with token 0; the next token is drawn from softmax(logits) at\n"
             "  the last filled position (temperature 1) with a Philox uniform keyed by the\n"
             "  seed. A vocabulary of 256 prints bytes as text, others print token ids.\n"
             "checkpoints: DIR/ckpt-STEP/ holds a shard per rank (param/NAME, opt_m/NAME,\n"
             "  opt_v/NAME, F32 pieces with checksums) and index.json (step, data_step, seed,\n"
             "  ...); DIR/latest names it. Any plan of the model resumes it.\n"
             "  A resumed run repeats the uninterrupted run's losses bit for bit (same\n"
             "  --threads).\n"
             "ranks: `mpirun -np N train ...` trains N data-parallel ranks of this program\n"
             "  on a global batch of N x its batch; rank 0 prints, logs and writes files.\n"
             "overrides: --lr, --warmup, --min-lr, --lr-schedule and --clip act in the\n"
             "  runtime; --beta1, --beta2, --eps and --weight-decay reach only programs whose\n"
             "  update kernels read them (others refuse a value that differs from theirs).\n"
             "devices: --device cuda runs the kernels on the GPU of the rank's local rank\n"
             "  (libcuda.so.1, NVRTC and cuBLASLt are opened when asked for); the kernels are\n"
             "  compiled by NVRTC at start-up and cached (--kernel-cache).\n");
}
