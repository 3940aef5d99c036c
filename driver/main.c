/* colossalc: the command line. Reads a model, runs the pass pipeline, and prints what
 * was asked for. Two tables drive it: CLI_OPTIONS, every option once with its help text,
 * from which the parser, the value checks and --help are all driven (as
 * runtime/train_opts.c does for `train`); and `passes`, the pipeline as one flat list of
 * {name, function} run in order, from which --dump-after and the verifier after each
 * pass come (STYLE.md habit 3). What to recompute and offload under a budget is
 * plan/policy.h's to decide. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "codegen/compose.h"
#include "codegen/cuda.h"
#include "codegen/llvm.h"
#include "codegen/lower.h"
#include "codegen/offload.h"
#include "codegen/pipeline.h"
#include "codegen/verify.h"
#include "codegen/zero.h"
#include "program/cpu.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "passes/recompute.h"
#include "passes/summary.h"
#include "plan/dump.h"
#include "plan/policy.h"
#include "plan/search.h"

/* Training settings of the command line, over the model's train directive (an ONNX
 * file's: adamw's defaults): --train-file, then --optimizer (its defaults), then each
 * setting given (NAN: not given). */
typedef struct TrainOptions {
  const char *file;
  int opt;      /* an OptKind, or -1 */
  int schedule; /* a SchedKind, or -1 */
  double lr, beta1, beta2, eps, weight_decay, momentum, clip, min_lr, warmup;
} TrainOptions;

typedef struct Options {
  const char *file;
  ConfigOverride *ov;
  int nov;
  int gpus;          /* --gpus: GPUs of the target cluster (0: not given) */
  int gpus_per_node; /* --gpus-per-node (0: the profile's or the file's) */
  int jobs;          /* -j: threads for LLVM (0: every core) */
  bool summary, dump_ir;
  const char *calibrate; /* --calibrate[=auto|cpu|cuda]: measure this machine's device into -o FILE (no model) */
  bool what_if;          /* --what-if: plans the code generators cannot compile yet too */
  const char *dump_after, *emit_kernels, *emit_program, *out, *emit_llvm, *emit_cuda;
  const char *gpu, *cluster, *dump_plan, *plan_out, *plan_file;
  const char *cpu;       /* --cpu: the one build of the CPU kernels (NULL: native and portable) */
  int64_t device_memory; /* --device-memory: plan offload to fit it (0: no budget) */
  int64_t host_memory;   /* --host-memory: what the host may hold of the state (0: this machine's) */
  int64_t nvme;          /* --nvme: NVMe per node a plan may use (0: the profile's) */
  PlanForce force;
  bool plan;                   /* search a plan: an option of CLI_OPTIONS marked CF_PLAN was given */
  int rc;                      /* --recompute: -1 unset, a Recompute, or RC_AUTO */
  int64_t act_mem;             /* --activation-memory bytes, 0 unset */
  int precision;               /* --precision: a DType (DT_E4M3: fp8); -1 until asked or decided (search_plan, main) */
  int fp8_history, fp8_margin; /* --fp8-history, --fp8-margin */
  bool fp8_classifier;         /* --fp8-classifier: the logits' GEMM in fp8 too */
  int classifier_fused;        /* --classifier fused (1): classifier_ce (passes/decompose.c) */
  TrainOptions train;          /* --train-file, --optimizer, --lr, ... */
} Options;

enum { RC_AUTO = RC_COUNT };

static void usage(FILE *f);
static void passes_print(FILE *f);
static void pass_check_name(const char *name);

/* ---- reading values ------------------------------------------------------------------ */

/* -o PATH can be written (its folder exists and takes files; PATH is not a folder),
 * checked before a compile that may take a while. */
static void check_output(const char *path) {
  struct stat st;
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (stat(dir, &st) != 0) error_plain("-o %s: cannot write in %s: %s", path, dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) error_plain("-o %s: %s is not a folder", path, dir);
  if (access(dir, W_OK) != 0) error_plain("-o %s: cannot write in %s: %s", path, dir, strerror(errno));
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) error_plain("-o %s: is a folder", path);
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) error_plain("-o %s: is not a regular file", path);
  free(dir);
}

/* --set NAME=VALUE: a NAME given again takes the later value, as for other flags. */
static void add_override(Options *o, const char *arg) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg || !eq[1]) {
    fprintf(stderr, "colossalc: --set takes NAME=VALUE, got '%s'\n", arg);
    exit(1);
  }
  for (int i = 0; i < o->nov; i++)
    if (strlen(o->ov[i].name) == (size_t)(eq - arg) && !strncmp(o->ov[i].name, arg, eq - arg)) {
      o->ov[i].value = eq + 1;
      return;
    }
  o->ov = realloc(o->ov, (o->nov + 1) * sizeof *o->ov);
  if (!o->ov) exit(1);
  o->ov[o->nov++] = (ConfigOverride){strndup(arg, eq - arg), eq + 1, false};
}

/* A byte count: a number with an optional suffix K, M, G, T (or KiB ... TiB: powers of
 * 1024) or KB, MB, GB, TB (powers of 1000), and an optional B; -1 if arg is none. */
static int64_t parse_size(const char *arg) {
  static const char *const suffix[] = {"", "B", "K", "KiB", "KB", "M", "MiB", "MB", "G", "GiB", "GB", "T", "TiB", "TB"};
  static const double scale[] = {1,   1,      0x1p10, 0x1p10, 1e3,    0x1p20, 0x1p20,
                                 1e6, 0x1p30, 0x1p30, 1e9,    0x1p40, 0x1p40, 1e12};
  char *end;
  double v = strtod(arg, &end);
  for (int i = 0; end != arg && i < (int)(sizeof suffix / sizeof *suffix); i++)
    if (!strcmp(end, suffix[i]) && v * scale[i] >= 1 && v * scale[i] < 0x1p60) return (int64_t)(v * scale[i]);
  return -1;
}

static long parse_positive(const char *flag, const char *arg) {
  char *end;
  long v = strtol(arg, &end, 10);
  if (*end || v <= 0 || v > (1L << 24)) {
    fprintf(stderr, "colossalc: %s takes a positive integer, got '%s'\n", flag, arg);
    exit(1);
  }
  return v;
}

/* One of names (the index), or exit 1 naming the choices. */
static int parse_choice(const char *flag, const char *arg, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(arg, names[i])) return i;
  fprintf(stderr, "colossalc: %s takes", flag);
  for (int i = 0; i < n; i++) fprintf(stderr, "%s %s", i ? (i == n - 1 ? " or" : ",") : "", names[i]);
  fprintf(stderr, ", got '%s'\n", arg);
  exit(1);
}

/* ---- the options, one table ---------------------------------------------------------- */

/* How an option's value is read: the kind column of CLI_OPTIONS, each kind one setter
 * (cli_setters). A bad value exits 1 with one line, "colossalc: FLAG takes WHAT, got
 * 'VALUE'", FLAG being the option's short form if it has one. */
typedef enum CliKind {
  CK_FLAG,   /* no value: the bool field becomes true */
  CK_STR,    /* the value itself (const char *) */
  CK_POS,    /* an int: a positive integer, at most 2^24 */
  CK_SIZE,   /* an int64_t: bytes, or 512K, 512M, 2G, 1.5GiB (binary), 2GB (decimal) */
  CK_CHOICE, /* an int: the value (or index) of one of the row's choices */
  CK_WORD,   /* a const char *: one of the row's choices, the first when no value is given */
  CK_RATE,   /* a double: a positive number */
  CK_UNIT,   /* a double: a number in [0, 1) */
  CK_NONNEG, /* a double: a number >= 0 */
  CK_STEPS,  /* a double: a whole number >= 0 */
  CK_CALL,   /* the row's function takes the value (and reports a bad one) */
  CK_COUNT
} CliKind;

typedef struct Choices {
  int n;
  const char *const *names; /* [n] as the command line spells them */
  const int *values;        /* [n] what each sets, or NULL: its index */
} Choices;

typedef struct CliOpt {
  const char *spelling; /* "-o", "-j, --jobs", "--gpus": the short form, the long one or both */
  const char *metavar;  /* the value as --help writes it: " N", "=PASS", "[=F]" (optional), "" (none) */
  CliKind kind;
  size_t off;                                /* the Options field set (not CK_CALL) */
  void (*call)(Options *o, const char *arg); /* CK_CALL */
  const Choices *choices;                    /* CK_CHOICE, CK_WORD */
  unsigned flags;                            /* CF_PLAN */
  const char *help;
} CliOpt;

enum { CF_PLAN = 1 }; /* the option describes the cluster or forces part of the plan: a plan is searched */

/* CK_CALL's functions. */
static void set_fp8_history(Options *o, const char *arg) {
  o->fp8_history = (int)parse_positive("--fp8-history", arg);
  if (o->fp8_history > 1 << 20) error_plain("--fp8-history: at most 1048576 steps");
}

static void set_fp8_margin(Options *o, const char *arg) {
  char *end;
  long v = strtol(arg, &end, 10);
  if (*end || end == arg || v < 0 || v > 64) error_plain("--fp8-margin: an integer in [0, 64], got '%s'", arg);
  o->fp8_margin = (int)v;
}

static void show_help(Options *o, const char *arg) {
  usage(stdout);
  exit(0);
}

static void show_version(Options *o, const char *arg) {
  printf("colossalc %s\n", COLOSSALC_VERSION);
  exit(0);
}

static const Choices plan_formats = {3, (const char *const[]){"text", "json", "svg"}, NULL};
static const Choices calibrate_devices = {3, (const char *const[]){"auto", "cpu", "cuda"}, NULL};
static const Choices zero_stages = {4, (const char *const[]){"0", "1", "2", "3"}, NULL};
static const Choices pipe_schedules = {PS_KINDS, schedule_names, NULL};
static const Choices recompute_modes = {RC_COUNT + 1, (const char *const[]){"none", "selective", "full", "auto"}, NULL};
static const Choices attention_kernels = {2, attn_kernel_names, NULL};
static const Choices classifier_kernels = {2, (const char *const[]){"materialized", "fused"}, NULL};
static const Choices offload_kinds = {OFFLOAD_KINDS, offload_names, NULL};
static const Choices precisions = {4, (const char *const[]){"fp32", "bf16", "fp16", "fp8"},
                                   (const int[]){DT_F32, DT_BF16, DT_F16, DT_E4M3}};
static const Choices optimizers = {OPT_COUNT, opt_names, NULL};
static const Choices lr_schedules = {2, (const char *const[]){"cosine", "constant"},
                                     (const int[]){SCHED_COSINE, SCHED_CONSTANT}};

/* Where a row's value goes: an Options field, a field set from choices, or a function. */
#define FIELD(f) offsetof(Options, f), NULL, NULL
#define CHOOSE(f, choices) offsetof(Options, f), NULL, &choices
#define CALL(fn) 0, fn, NULL

/* X(spelling, metavar, kind, target, flags, help), in the order --help lists them. The
 * metavar also says whether the option takes a value: "" none, "[...]" optional. */
#define CLI_OPTIONS(X)                                                                                                \
  X("-o", " FILE", CK_STR, FIELD(out), 0,                                                                             \
    "compile the training program into the executable FILE (run it with FILE --help); with --gpus N, the plan's "     \
    "program for N ranks (mpirun -np N FILE), its plan printed first")                                                \
  X("-j, --jobs", " N", CK_POS, FIELD(jobs), 0, "threads for the CPU code generator (default: every core)")           \
  X("--cpu", " NAME", CK_STR, FIELD(cpu), 0,                                                                          \
    "build the CPU kernels for NAME only: portable (x86-64-v3: AVX2 and FMA), native (this machine's CPU), "          \
    "x86-64-v2, x86-64-v4, or a CPU the C compiler's -march knows (skylake-avx512, znver3...); by default train "     \
    "carries native and portable builds and runs the best its CPU has")                                               \
  X("--emit-llvm", " FILE", CK_STR, FIELD(emit_llvm), 0, "write the CPU kernels as LLVM IR (after optimisation)")     \
  X("--emit-cuda", " DIR", CK_STR, FIELD(emit_cuda), 0, "write the CUDA C source of every kernel to DIR/kernels.cu")  \
  X("--emit-kernels", " FILE", CK_STR, FIELD(emit_kernels), 0,                                                        \
    "write the generated kernels (kernel form) and the program to FILE")                                              \
  X("--emit-program", " FILE", CK_STR, FIELD(emit_program), 0,                                                        \
    "write the program train carries to FILE as people read it (train --dump-program prints the same)")               \
  X("--set", " NAME=VALUE", CK_CALL, CALL(add_override), 0,                                                           \
    "override a config constant of the model (repeatable; a NAME given twice takes the later VALUE)")                 \
  X("--summary", "", CK_FLAG, FIELD(summary), 0,                                                                      \
    "print parameters, FLOPs per step and a per-layer table (the default when nothing else is asked for)")            \
  X("--dump-ir", "", CK_FLAG, FIELD(dump_ir), 0, "print the verified IR, one op per line with its shape")             \
  X("--dump-after", "=PASS", CK_STR, FIELD(dump_after), 0,                                                            \
    "print the IR after PASS, one of the passes listed below; after lower and the passes that follow it, the "        \
    "kernels and the program (as --emit-program prints it)")                                                          \
  X("--gpus", " N", CK_POS, FIELD(gpus), CF_PLAN,                                                                     \
    "number of GPUs of the target cluster: search the parallel plan for them (without it: one rank, no plan)")        \
  X("--gpus-per-node", " K", CK_POS, FIELD(gpus_per_node), CF_PLAN,                                                   \
    "GPUs in one node (default: the profile's node, 8 for data-centre GPUs)")                                         \
  X("--gpu", " PROFILE", CK_STR, FIELD(gpu), CF_PLAN, "a100-80g (default), a100-40g, h100-sxm, h200, rtx3090 or cpu") \
  X("--cluster", " FILE", CK_STR, FIELD(cluster), CF_PLAN,                                                            \
    "describe the cluster in a JSON file instead (docs/plan.md)")                                                     \
  X("--what-if", "", CK_FLAG, FIELD(what_if), CF_PLAN,                                                                \
    "search plans the code generators cannot compile yet too (optimizer offload, vocabulary-parallel embedding and "  \
    "loss, query-split causal attention); without it --dump-plan shows the plan -o compiles")                         \
  X("--dump-plan", "[=F]", CK_WORD, CHOOSE(dump_plan, plan_formats), CF_PLAN,                                         \
    "search the parallel plan and print it: text (default), json or svg")                                             \
  X("--plan-out", " FILE", CK_STR, FIELD(plan_out), CF_PLAN,                                                          \
    "write the --dump-plan output to FILE instead of standard output")                                                \
  X("--plan", " FILE", CK_STR, FIELD(plan_file), CF_PLAN,                                                             \
    "force a plan (or parts of one) from a --dump-plan=json file")                                                    \
  X("--dp", " N", CK_POS, FIELD(force.dp), CF_PLAN, "force the data-parallel degree")                                 \
  X("--tp", " N", CK_POS, FIELD(force.tp), CF_PLAN, "force the tensor-parallel degree")                               \
  X("--pp", " N", CK_POS, FIELD(force.pp), CF_PLAN, "force the pipeline-parallel degree")                             \
  X("--zero", " S", CK_CHOICE, CHOOSE(force.zero, zero_stages), CF_PLAN, "force the ZeRO stage (0-3)")                \
  X("--microbatch-size", " N", CK_POS, FIELD(force.mbs), CF_PLAN, "force the micro-batch size (sequences)")           \
  X("--schedule", " S", CK_CHOICE, CHOOSE(force.schedule, pipe_schedules), CF_PLAN,                                   \
    "force the pipeline schedule: 1f1b, interleaved or zb-h1")                                                        \
  X("--virtual-stages", " V", CK_POS, FIELD(force.v), CF_PLAN,                                                        \
    "force the model chunks per stage of the interleaved schedule")                                                   \
  X("--offload", " O", CK_CHOICE, CHOOSE(force.offload, offload_kinds), CF_PLAN,                                      \
    "force the plan's offload: none; optimizer (its state on the host, AdamW on the CPU); or state (every rank's "    \
    "ZeRO-3 shard of parameters, gradients and optimizer state on its node's host memory and NVMe); optimizer is "    \
    "--what-if only, state compiles")                                                                                 \
  X("--nvme", " SIZE", CK_SIZE, FIELD(nvme), 0,                                                                       \
    "NVMe per node the plan may use for offloaded state (default: the profile's drives)")                             \
  X("--attention", " K", CK_CHOICE, CHOOSE(force.attn, attention_kernels), CF_PLAN,                                   \
    "fused (default: flash_attention kernels, no scores stored) or materialized (GEMMs and a softmax, the scores in " \
    "memory)")                                                                                                        \
  X("--classifier", " K", CK_CHOICE, CHOOSE(classifier_fused, classifier_kernels), 0,                                 \
    "materialized (default: the logits in memory) or fused (the classifier's GEMM and cross-entropy a chunk of rows " \
    "at a time; no sampling)")                                                                                        \
  X("--recompute", " R", CK_CHOICE, CHOOSE(rc, recompute_modes), 0,                                                   \
    "activation recompute: none, selective (the attention core of every layer), full (every layer) or auto (the "     \
    "layers that fit --activation-memory with the fewest recomputed FLOPs; with a plan and no budget, the plan's "    \
    "choice)")                                                                                                        \
  X("--activation-memory", " SIZE", CK_SIZE, FIELD(act_mem), 0,                                                       \
    "budget of the work tier (activations and workspace) for --recompute auto: bytes, or 512K, 512M, 2G, 1.5GiB "     \
    "(binary), 2GB (decimal)")                                                                                        \
  X("--device-memory", " SIZE", CK_SIZE, FIELD(device_memory), 0,                                                     \
    "the device memory the program must fit: parameters, gradients and optimizer state are offloaded in chunks to "   \
    "the host (and NVMe), planned instruction by instruction (docs/memory.md); with -o")                              \
  X("--host-memory", " SIZE", CK_SIZE, FIELD(host_memory), 0,                                                         \
    "what the host may hold of the training state (default: 80% of this machine's memory); the rest goes to NVMe "    \
    "files (train --nvme-dir); with a plan search, it also caps the host memory per node the plan may use")           \
  X("--precision", " P", CK_CHOICE, CHOOSE(precision, precisions), 0,                                                 \
    "fp32, bf16, fp16 or fp8 (default: a --plan file's; bf16 when --gpus, --gpu or --cluster asks for GPUs; else "    \
    "fp32): GEMMs on 16-bit copies of their inputs with f32 sums, activations stored in 16 bits, statistics and "     \
    "the loss in f32, f32 master weights and optimizer state; fp16 adds dynamic loss scaling (train "                 \
    "--loss-scale); fp8 is bf16 with the linear layers' GEMMs on e4m3 inputs (e5m2 gradients) scaled per tensor "     \
    "from an amax history (Transformer Engine's delayed scaling); meshes exchange f32 (collectives, pipeline "        \
    "messages)")                                                                                                      \
  X("--fp8-history", " N", CK_CALL, CALL(set_fp8_history), 0,                                                         \
    "fp8: the steps of amax history a scale comes from (default 1024, at most 1048576)")                              \
  X("--fp8-margin", " M", CK_CALL, CALL(set_fp8_margin), 0, "fp8: scales divided by 2^M, M in [0, 64] (default 0)")   \
  X("--fp8-classifier", "", CK_FLAG, FIELD(fp8_classifier), 0,                                                        \
    "fp8: the classifier's GEMM (the logits) in fp8 too (default: bf16)")                                             \
  X("--train-file", " FILE", CK_STR, FIELD(train.file), 0,                                                            \
    "the training directive from a file that holds only it (train loss with adamw(lr = 6e-4, ...);), for an ONNX "    \
    "file")                                                                                                           \
  X("--optimizer", " O", CK_CHOICE, CHOOSE(train.opt, optimizers), 0,                                                 \
    "adamw, sgd (PyTorch's defaults) or lamb (ColossalAI's) (overrides the model's train directive; an ONNX file's "  \
    "is adamw's defaults)")                                                                                           \
  X("--lr", " X", CK_RATE, FIELD(train.lr), 0, "one optimizer setting: the peak learning rate (> 0)")                 \
  X("--beta1", " X", CK_UNIT, FIELD(train.beta1), 0, "one optimizer setting: AdamW's beta1, in [0, 1)")               \
  X("--beta2", " X", CK_UNIT, FIELD(train.beta2), 0, "one optimizer setting: AdamW's beta2, in [0, 1)")               \
  X("--eps", " X", CK_NONNEG, FIELD(train.eps), 0, "one optimizer setting: AdamW's epsilon")                          \
  X("--weight-decay", " X", CK_NONNEG, FIELD(train.weight_decay), 0, "one optimizer setting: decoupled weight decay") \
  X("--momentum", " X", CK_NONNEG, FIELD(train.momentum), 0, "one optimizer setting: SGD's momentum")                 \
  X("--clip", " X", CK_NONNEG, FIELD(train.clip), 0,                                                                  \
    "one optimizer setting: clip the global gradient norm to X (0: off)")                                             \
  X("--warmup", " N", CK_STEPS, FIELD(train.warmup), 0, "one optimizer setting: linear warm-up steps")                \
  X("--min-lr", " X", CK_NONNEG, FIELD(train.min_lr), 0,                                                              \
    "one optimizer setting: the learning rate at the last step (cosine)")                                             \
  X("--lr-schedule", " cosine|constant", CK_CHOICE, CHOOSE(train.schedule, lr_schedules), 0,                          \
    "one optimizer setting: after warm-up, cosine from lr to min-lr by the last step, or constant lr")                \
  X("--calibrate", "[=D]", CK_WORD, CHOOSE(calibrate, calibrate_devices), 0,                                          \
    "measure this machine's device, auto (the GPU where one is visible, else the CPU), cpu or cuda (GEMMs by "        \
    "shape, memory bandwidth, kernel launches, all-reduce among its MPI ranks or GPUs, host-to-device and file "      \
    "bandwidth) and write it as a cluster file to -o FILE (no model file; under a minute); --cluster FILE "           \
    "--gpus N then plans for it (docs/plan.md)")                                                                      \
  X("-h, --help", "", CK_CALL, CALL(show_help), 0, "print this help")                                                 \
  X("--version", "", CK_CALL, CALL(show_version), 0, "print the version")

static const CliOpt cli_opts[] = {
#define CLI_ROW(spelling, metavar, kind, target, flags, help) {spelling, metavar, kind, target, flags, help},
    CLI_OPTIONS(CLI_ROW)
#undef CLI_ROW
};
#undef FIELD
#undef CHOOSE
#undef CALL
enum { NCLI = sizeof cli_opts / sizeof *cli_opts, CLI_LONG = 256 /* getopt_long's value for row i: CLI_LONG + i */ };

static char cli_letter(const CliOpt *c) { return c->spelling[1] != '-' ? c->spelling[1] : 0; }

static const char *cli_long(const CliOpt *c) {
  const char *l = strstr(c->spelling, "--");
  return l ? l + 2 : NULL;
}

static int cli_has_arg(const CliOpt *c) {
  return !*c->metavar ? no_argument : *c->metavar == '[' ? optional_argument : required_argument;
}

/* How an error names the option: its first spelling ("-j" of "-j, --jobs"). */
static const char *cli_name(const CliOpt *c, char *buf, size_t len) {
  snprintf(buf, len, "%.*s", (int)strcspn(c->spelling, ","), c->spelling);
  return buf;
}

static _Noreturn void cli_bad(const CliOpt *c, const char *what, const char *arg) {
  char name[32];
  fprintf(stderr, "colossalc: %s takes %s, got '%s'\n", cli_name(c, name, sizeof name), what, arg);
  exit(1);
}

static void *cli_field(Options *o, const CliOpt *c) { return (char *)o + c->off; }

static void set_flag(Options *o, const CliOpt *c, const char *arg) { *(bool *)cli_field(o, c) = true; }
static void set_str(Options *o, const CliOpt *c, const char *arg) { *(const char **)cli_field(o, c) = arg; }

static void set_positive(Options *o, const CliOpt *c, const char *arg) {
  char name[32];
  *(int *)cli_field(o, c) = (int)parse_positive(cli_name(c, name, sizeof name), arg);
}

static void set_size(Options *o, const CliOpt *c, const char *arg) {
  int64_t v = parse_size(arg);
  if (v < 0) cli_bad(c, "a size such as 512M, 2G or 1.5GiB", arg);
  *(int64_t *)cli_field(o, c) = v;
}

static int choice_index(const CliOpt *c, const char *arg) {
  char name[32];
  return parse_choice(cli_name(c, name, sizeof name), arg, c->choices->names, c->choices->n);
}

static void set_choice(Options *o, const CliOpt *c, const char *arg) {
  int i = choice_index(c, arg);
  *(int *)cli_field(o, c) = c->choices->values ? c->choices->values[i] : i;
}

static void set_word(Options *o, const CliOpt *c, const char *arg) {
  *(const char **)cli_field(o, c) = c->choices->names[arg ? choice_index(c, arg) : 0];
}

/* The training directive's numbers: >= 0 and below 1e30, each kind with its own bound. */
static void set_real(Options *o, const CliOpt *c, const char *arg) {
  static const char *const what[CK_COUNT] = {[CK_RATE] = "a positive number",
                                             [CK_UNIT] = "a number in [0, 1)",
                                             [CK_NONNEG] = "a number >= 0",
                                             [CK_STEPS] = "a whole number of steps"};
  char *end;
  double v = strtod(arg, &end);
  bool ok = end != arg && !*end && v >= 0 && v < 1e30;
  if (c->kind == CK_RATE) ok &= v > 0;
  if (c->kind == CK_UNIT) ok &= v < 1;
  if (c->kind == CK_STEPS) ok &= v == (double)(int64_t)v;
  if (!ok) cli_bad(c, what[c->kind], arg);
  *(double *)cli_field(o, c) = v;
}

static void set_call(Options *o, const CliOpt *c, const char *arg) { c->call(o, arg); }

static void (*const cli_setters[CK_COUNT])(Options *o, const CliOpt *c, const char *arg) = {
    [CK_FLAG] = set_flag,     [CK_STR] = set_str,    [CK_POS] = set_positive, [CK_SIZE] = set_size,
    [CK_CHOICE] = set_choice, [CK_WORD] = set_word,  [CK_RATE] = set_real,    [CK_UNIT] = set_real,
    [CK_NONNEG] = set_real,   [CK_STEPS] = set_real, [CK_CALL] = set_call};

/* getopt_long's tables from the rows: a long form returns CLI_LONG + its row, a short
 * one its letter; a missing value returns ':'. */
static void cli_getopt_tables(struct option *longs, char *shorts) {
  int n = 0;
  *shorts++ = ':';
  for (int i = 0; i < NCLI; i++) {
    const CliOpt *c = &cli_opts[i];
    if (cli_long(c)) longs[n++] = (struct option){cli_long(c), cli_has_arg(c), NULL, CLI_LONG + i};
    if (!cli_letter(c)) continue;
    *shorts++ = cli_letter(c);
    for (int k = no_argument; k < cli_has_arg(c); k++) *shorts++ = ':'; /* "o:" required, "o::" optional */
  }
  *shorts = 0;
  longs[n] = (struct option){0};
}

/* The row of getopt_long's answer c, or NULL ('?': an unknown option). */
static const CliOpt *cli_find(int c) {
  if (c >= CLI_LONG) return &cli_opts[c - CLI_LONG];
  for (int i = 0; i < NCLI; i++)
    if (cli_letter(&cli_opts[i]) == c) return &cli_opts[i];
  return NULL;
}

/* text from column col on, broken at spaces before column 100, the rest from column 26. */
static void print_wrapped(FILE *f, int col, const char *text) {
  while (*text) {
    int n = (int)strlen(text), room = 100 - col;
    if (n > room) {
      n = room;
      while (n > 0 && text[n] != ' ') n--;
      if (n == 0) n = (int)strcspn(text, " ");
    }
    fprintf(f, "%.*s\n", n, text);
    for (text += n; *text == ' ';) text++;
    if (*text) col = fprintf(f, "%25s ", "");
  }
}

static void usage(FILE *f) {
  fputs("usage: colossalc FILE [options]\n"
        "\n"
        "Compiles a model (the colossalc model language, see docs/language.md, or an ONNX\n"
        "file, docs/onnx.md) into a training program.\n"
        "\n"
        "options:\n",
        f);
  for (int i = 0; i < NCLI; i++) {
    char lhs[64];
    snprintf(lhs, sizeof lhs, "%s%s", cli_opts[i].spelling, cli_opts[i].metavar);
    if (strlen(lhs) <= 23) fprintf(f, "  %-23s ", lhs);
    else fprintf(f, "  %s\n%26s", lhs, ""); /* a long spelling: its help on the next line */
    print_wrapped(f, 26, cli_opts[i].help);
  }
  passes_print(f);
}

static void options_init(Options *o) {
  *o = (Options){.rc = -1, .precision = -1, .fp8_history = 1024, .train = {.opt = -1, .schedule = -1}};
  TrainOptions *t = &o->train;
  t->lr = t->beta1 = t->beta2 = t->eps = t->weight_decay = t->momentum = t->clip = t->min_lr = t->warmup = NAN;
  plan_force_init(&o->force);
  o->force.attn = -1; /* not asked: the plan file's, else what the plan may use */
}

/* What no one option can check: the model file, and options that need or exclude
 * others. */
static void check_options(int argc, char **argv, Options *o) {
  if (o->calibrate) {
    if (optind != argc) error_plain("--calibrate measures this machine: it takes no model file (got %s)", argv[optind]);
    if (!o->out) error_plain("--calibrate needs -o FILE, the cluster file it writes");
    return;
  }
  if (optind != argc - 1)
    error_plain(optind >= argc ? "no model file given (usage: colossalc FILE [options]; see colossalc --help)"
                               : "more than one model file given: %s and %s",
                argv[optind], optind + 1 < argc ? argv[optind + 1] : "");
  o->file = argv[optind];
  if (o->dump_after) pass_check_name(o->dump_after);
  if (o->act_mem && o->rc < 0) o->rc = RC_AUTO;
  if (o->rc == RC_AUTO && !o->act_mem && !o->plan) {
    fprintf(stderr, "colossalc: --recompute auto needs --activation-memory SIZE (or a plan: --gpus N ...)\n");
    exit(1);
  }
  if (o->act_mem && o->rc != RC_AUTO) {
    fprintf(stderr, "colossalc: --activation-memory is the budget of --recompute auto, not of --recompute %s\n",
            recompute_modes.names[o->rc]);
    exit(1);
  }
  if (o->plan_out && !o->dump_plan) {
    fprintf(stderr, "colossalc: --plan-out needs --dump-plan\n");
    exit(1);
  }
  if (o->cluster && o->gpu) {
    fprintf(stderr, "colossalc: give --gpu or --cluster, not both\n");
    exit(1);
  }
  if (!o->dump_ir && !o->dump_after && !o->emit_kernels && !o->emit_program && !o->out && !o->emit_llvm &&
      !o->emit_cuda && !o->dump_plan)
    o->summary = true;
  if (o->out) check_output(o->out);
}

static void parse_options(int argc, char **argv, Options *o) {
  struct option longs[NCLI + 1];
  char shorts[3 * NCLI + 2];
  cli_getopt_tables(longs, shorts);
  options_init(o);
  int c;
  opterr = 0; /* one line of our own for a bad option */
  while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    if (c == ':') error_plain("%s needs a value (see colossalc --help)", argv[optind - 1]);
    const CliOpt *opt = cli_find(c);
    if (!opt) error_plain("unknown option '%s' (see colossalc --help)", argv[optind - 1]);
    cli_setters[opt->kind](o, opt, optarg);
    if (opt->flags & CF_PLAN) o->plan = true;
  }
  check_options(argc, argv, o);
}

/* The command line's training settings over g's directive; false after a reported
 * error (in the training file). */
static bool apply_train_options(Arena *a, const TrainOptions *o, Graph *g) {
  if (o->file && !frontend_train_file(a, o->file, g)) return false;
  TrainSpec *t = &g->train;
  if (o->opt >= 0 && (int)t->opt != o->opt) {
    SrcLoc loc = t->loc;
    frontend_train_defaults(t, (OptKind)o->opt);
    t->loc = loc;
  }
  double *field[] = {&t->lr, &t->beta1, &t->beta2, &t->eps, &t->weight_decay, &t->momentum, &t->clip, &t->min_lr};
  const double given[] = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->momentum, o->clip, o->min_lr};
  for (int i = 0; i < 8; i++)
    if (!isnan(given[i])) *field[i] = given[i];
  if (!isnan(o->warmup)) t->warmup = (int64_t)o->warmup;
  if (o->schedule >= 0) t->schedule = (SchedKind)o->schedule;
  return true;
}

/* --fp8-classifier asks for fp8, and for a classifier whose GEMM is a matmul. */
static void check_fp8_classifier(const Options *o) {
  if (o->fp8_classifier && o->precision != DT_E4M3)
    error_plain("--fp8-classifier: the classifier's GEMM in fp8 needs --precision fp8");
  if (o->fp8_classifier && o->classifier_fused)
    error_plain("--fp8-classifier: the fused classifier (--classifier fused) computes its GEMM in bf16 chunks of rows; "
                "use --classifier materialized");
}

/* The cluster of --gpu (or --cluster), the forced parts, the search. */
static PlanResult *search_plan(Arena *arena, const Graph *g, Options *o, Cluster *cl) {
  int gpus = o->gpus ? o->gpus : o->cluster ? 0 : 1; /* a cluster file's own without --gpus */
  if (o->cluster) cluster_load_json(cl, o->cluster, gpus, o->gpus_per_node);
  else cluster_from_profile(cl, o->gpu ? o->gpu : "a100-80g", gpus, o->gpus_per_node);
  PlanForce f;
  plan_force_init(&f);
  if (o->plan_file) plan_read_json(arena, o->plan_file, g, &f);
  const PlanForce *c = &o->force; /* flags override the file */
  if (c->dp > 0) f.dp = c->dp;
  if (c->tp > 0) f.tp = c->tp;
  if (c->pp > 0) f.pp = c->pp;
  if (c->zero >= 0) f.zero = c->zero;
  if (c->mbs > 0) f.mbs = c->mbs;
  if (c->v > 0) f.v = c->v;
  if (c->schedule >= 0) f.schedule = c->schedule;
  if (o->rc >= 0 && o->rc < RC_COUNT) f.rc = o->rc;
  if (c->attn >= 0) f.attn = c->attn;
  if (c->offload >= 0) f.offload = c->offload;
  f.classifier_fused = o->classifier_fused;
  if (f.v > 1 && f.schedule < 0) f.schedule = PS_INTERLEAVED;
  if (f.v > 1 && f.schedule != PS_INTERLEAVED && f.schedule >= 0)
    error_plain("--virtual-stages %d needs --schedule interleaved", f.v);
  /* Only what code generation runs (so that --dump-plan shows the plan -o compiles),
   * unless --what-if asks for what the code generators cannot emit yet. */
  bool compiling = o->out || o->emit_kernels || o->emit_program || o->emit_llvm || o->emit_cuda || o->dump_after;
  f.exec = !o->what_if;
  if (compiling && o->what_if)
    error_plain("--what-if plans may use what the code generators cannot emit yet; compile without --what-if");
  if (f.exec && f.offload == OFFLOAD_OPTIMIZER)
    error_plain("offloading the optimizer state alone is priced, not compiled yet: add --what-if to explore it, or "
                "--offload state to compile the whole state's offload (ZeRO-3, data parallelism)");
  if (o->host_memory) cl->host_memory = (double)o->host_memory; /* what the state may use of a node's */
  if (o->nvme) cl->nvme = (double)o->nvme;
  /* the precision: --precision, else the plan file's, else bf16 where --gpus, --gpu,
   * --cluster or --what-if asks for GPUs, else fp32 (a plan option alone, the cpu
   * profile); 16-bit programs exchange f32 (tensor-parallel collectives, pipeline sends) */
  bool on_gpus = (o->gpus || o->gpu || o->cluster || o->what_if) && !cl->dev.fp32_only;
  if (o->precision < 0) o->precision = f.precision >= 0 ? f.precision : on_gpus ? DT_BF16 : DT_F32;
  f.precision = o->precision;
  f.lowp = o->precision != DT_F32;
  f.fp8 = o->precision == DT_E4M3;
  check_fp8_classifier(o);
  f.fp8_classifier = o->fp8_classifier;
  return plan_search(arena, g, cl, &f);
}

static void dump_plan(const PlanResult *r, const Options *o) {
  FILE *f = o->plan_out ? fopen(o->plan_out, "w") : stdout;
  if (!f) error_plain("cannot write %s: %s", o->plan_out, strerror(errno));
  if (!strcmp(o->dump_plan, "json")) {
    char *json = plan_to_json(r);
    fprintf(f, "%s\n", json);
    free(json);
  } else if (!strcmp(o->dump_plan, "svg")) {
    plan_dump_svg(f, r);
  } else {
    plan_dump_text(f, r);
  }
  if (o->plan_out && fclose(f)) error_plain("cannot write %s: %s", o->plan_out, strerror(errno));
}

/* ---- progress and output ------------------------------------------------------------- */

static bool tty;       /* standard error is a terminal: long work reports progress there */
static double t_start; /* when main started (seconds, monotonic) */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One line of progress, overwritten by the next (only on a terminal). */
static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...) {
  if (!tty) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "\rcolossalc: %5.1f s: ", now_s() - t_start);
  vfprintf(stderr, fmt, ap);
  fputs("\033[K", stderr);
  va_end(ap);
}

static void progress_end(void) {
  if (tty) fputs("\r\033[K", stderr);
}

static void llvm_progress(int done, int total, void *ctx) {
  (void)ctx;
  progress("LLVM: %d of %d kernels compiled", done, total);
}

/* The program as people read it: written as train carries it, then printed from it
 * (program/program.h, prog_print). */
static void write_program(FILE *f, Program **ps, int nps) {
  int64_t bytes;
  char err[256];
  void *blob = program_write(ps, nps, &bytes);
  Prog p;
  if (prog_open(blob, bytes, &p, err, sizeof err)) diag_internal(__FILE__, __LINE__, err);
  prog_print(f, &p);
  free(blob);
}

/* The kernels (their text form), then the program as people read it. */
static void write_kernels(FILE *f, Program **ps, int nps) {
  const Program *p = ps[0];
  if (p->code) {
    fprintf(f, "# %d kernels share %d codes (codegen/share.c)\n", p->nkernels, p->ncode);
    for (int i = 0; i < p->ncode; i++) kernel_print_code(f, p->code[i]);
  } else {
    for (int i = 0; i < p->nkernels; i++) kernel_print(f, p->kernels[i]);
  }
  write_program(f, ps, nps);
}

static void write_cuda(const char *dir, const Program *p) {
  if (mkdir(dir, 0777) && errno != EEXIST) error_plain("cannot create %s: %s", dir, strerror(errno));
  char path[4096];
  snprintf(path, sizeof path, "%s/kernels.cu", dir);
  char *src = cuda_emit_source((const Kernel *const *)p->code, p->ncode);
  FILE *f = fopen(path, "w");
  if (!f || fputs(src, f) < 0 || fclose(f)) error_plain("cannot write %s: %s", path, strerror(errno));
  free(src);
}

/* The linker command: the C compiler, the objects, the runtime's link flags. 0, or -1
 * with the message in err. */
static int link_train(char **objs, const char *out, const char *libs, char *err, size_t errlen) {
  FILE *f = fopen(COLOSSALC_LINK_FLAGS_FILE, "r");
  if (!f) {
    snprintf(err, errlen, "cannot read the runtime's link flags %s: %s", COLOSSALC_LINK_FLAGS_FILE, strerror(errno));
    return -1;
  }
  int nobj = 0;
  while (objs[nobj]) nobj++;
  char **argv = calloc((size_t)nobj + 80, sizeof *argv), line[4096];
  ir_assert(argv);
  int argc = 0;
  argv[argc++] = (char *)COLOSSALC_LINK_CC;
  for (int i = 0; i < nobj; i++) argv[argc++] = objs[i];
  int first_flag = argc;
  while (argc < nobj + 64 && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (*line) argv[argc++] = strdup(line);
  }
  int last_flag = argc;
  fclose(f);
  char *libcopy = strdup(libs);
  for (char *t = strtok(libcopy, " "); t && argc < nobj + 76; t = strtok(NULL, " ")) argv[argc++] = t;
  argv[argc++] = "-o";
  argv[argc++] = (char *)out;
  argv[argc] = NULL;
  extern char **environ;
  pid_t pid;
  int status = 0;
  bool ok = !posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ) && waitpid(pid, &status, 0) >= 0 &&
            WIFEXITED(status) && !WEXITSTATUS(status);
  for (int i = first_flag; i < last_flag; i++) free(argv[i]);
  free(libcopy);
  free(argv);
  if (ok) return 0;
  snprintf(err, errlen, "linking %s failed (%s)", out, COLOSSALC_LINK_CC);
  return -1;
}

static int jobs(const Options *o) {
  long n = o->jobs ? o->jobs : sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

/* ---- the builds of the CPU kernels ------------------------------------------------- */

typedef struct CpuBuild {
  char name[160], features[CPU_FEATURES_MAX], tune[64];
  int nfeat;
} CpuBuild;

static int count_features(const char *f) {
  int n = *f != 0;
  for (; *f; f++) n += *f == ',';
  return n;
}

/* The features of a CPU the C compiler knows: the macros `cc -march=NAME -dM -E` defines,
 * with x86-64's own. */
static void named_cpu(const char *name, CpuBuild *b) {
  for (const char *c = name; *c; c++)
    if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_' && *c != '.')
      error_plain("--cpu %s: not a CPU name", name);
  char cmd[512], line[256], one[64];
  snprintf(cmd, sizeof cmd, "%s -march=%s -dM -E -x c /dev/null 2>/dev/null", COLOSSALC_LINK_CC, name);
  FILE *p = popen(cmd, "r");
  if (!p) error_plain("--cpu %s: cannot run %s: %s", name, COLOSSALC_LINK_CC, strerror(errno));
  cpu_level_features("x86-64", b->features, sizeof b->features);
  while (fgets(line, sizeof line, p)) {
    char macro[128];
    const char *f;
    if (sscanf(line, "#define %127s", macro) != 1 || !(f = cpu_feature_of_macro(macro))) continue;
    snprintf(one, sizeof one, ",%s,", f);
    char have[CPU_FEATURES_MAX + 2];
    snprintf(have, sizeof have, ",%s,", b->features);
    if (!strstr(have, one))
      snprintf(b->features + strlen(b->features), sizeof b->features - strlen(b->features), ",%s", f);
  }
  if (pclose(p) != 0)
    error_plain("--cpu %s: the C compiler (%s) knows no such -march CPU (use portable, native, x86-64-v2, x86-64-v3, "
                "x86-64-v4, or one of `%s --help=target`'s)",
                name, COLOSSALC_LINK_CC, COLOSSALC_LINK_CC);
  snprintf(b->name, sizeof b->name, "%s", name);
  snprintf(b->tune, sizeof b->tune, "%s", name);
}

/* The builds train carries, best (most features) first: --cpu's one, or the build
 * host's CPU (the --cluster file's host.cpu where it names one) and the portable
 * baseline, one when they have the same features. On an architecture whose features
 * program/cpu.h does not know, one build for the host. */
static int cpu_builds(const Options *o, CpuBuild b[2]) {
  char host[64], host_f[CPU_FEATURES_MAX];
  llvm_host(host, sizeof host, host_f, sizeof host_f);
  Cluster cl;
  if (o->cluster && !o->cpu) cluster_load_json(&cl, o->cluster, 1, 1);
  memset(b, 0, 2 * sizeof *b);
  if (!cpu_table_known()) {
    if (o->cpu && strcmp(o->cpu, "native"))
      error_plain("--cpu %s: only native on this architecture (colossalc checks CPU features on x86-64)", o->cpu);
    snprintf(b[0].name, sizeof b[0].name, "%s (native)", host);
    return 1;
  }
  const char *want[2] = {"native", "portable"};
  int n = o->cpu ? 1 : 2;
  if (o->cpu) want[0] = o->cpu;
  else if (o->cluster && cl.cpu[0]) want[0] = cl.cpu;
  for (int i = 0; i < n; i++) {
    if (!strcmp(want[i], "native")) {
      snprintf(b[i].name, sizeof b[i].name, "%s (native)", host);
      snprintf(b[i].features, sizeof b[i].features, "%s", host_f);
      snprintf(b[i].tune, sizeof b[i].tune, "%s", host);
    } else if (!strcmp(want[i], "portable") || !cpu_level_features(want[i], b[i].features, sizeof b[i].features)) {
      bool portable = !strcmp(want[i], "portable");
      if (portable) cpu_level_features("x86-64-v3", b[i].features, sizeof b[i].features);
      snprintf(b[i].name, sizeof b[i].name, "%s", portable ? "x86-64-v3 (portable)" : want[i]);
      snprintf(b[i].tune, sizeof b[i].tune, "generic");
    } else {
      named_cpu(want[i], &b[i]);
    }
    b[i].nfeat = count_features(b[i].features);
  }
  if (n == 2 && !strcmp(b[0].features, b[1].features)) n = 1; /* this host is the baseline */
  if (n == 2 && b[1].nfeat > b[0].nfeat) {
    CpuBuild t = b[0];
    b[0] = b[1], b[1] = t;
  }
  return n;
}

/* `train` from the shared kernel codes and the program (freed here): the codes
 * compiled by LLVM on every core (codegen/llvm.h), their CUDA C carried beside them,
 * the objects linked with the runtime. */
static void build_train(const Options *o, const Program *p, void *prog, int64_t prog_bytes) {
  char err[512], prefix[4200];
  snprintf(prefix, sizeof prefix, "%s.tmp%d", o->out, (int)getpid());
  char **objs = NULL, libs[64];
  char *cuda = cuda_emit_units((const Kernel *const *)p->code, p->ncode); /* for NVRTC when train starts on a GPU */
  CpuBuild cb[2];
  int nb = cpu_builds(o, cb);
  LlvmCpu cpus[2];
  for (int i = 0; i < nb; i++)
    cpus[i] = (LlvmCpu){cb[i].name, cpu_table_known() ? cb[i].features : NULL, cb[i].tune[0] ? cb[i].tune : NULL,
                        i ? ".b1" : ""};
  int rc = llvm_compile_program((const Kernel *const *)p->code, p->ncode, cpus, nb, prog, prog_bytes, cuda, jobs(o),
                                prefix, llvm_progress, NULL, &objs, libs, sizeof libs, err, sizeof err);
  free(prog);
  free(cuda);
  if (!rc) {
    progress("linking %s", o->out);
    rc = link_train(objs, o->out, libs, err, sizeof err);
  }
  for (int i = 0; objs && objs[i]; i++) unlink(objs[i]), free(objs[i]);
  free(objs);
  if (rc) error_plain("%s", err);
}

/* --emit-llvm: every code in one module, optimised at O3, as LLVM IR text. */
static void write_llvm(const Options *o, const Program *p, void *prog, int64_t prog_bytes) {
  char err[512];
  LlvmModule *m = llvm_module_new(p->g->name);
  llvm_emit_program(m, (const Kernel *const *)p->code, p->ncode, prog, prog_bytes);
  free(prog);
  if (llvm_optimize(m, 3)) error_plain("LLVM optimisation failed");
  if (llvm_write_ir(m, o->emit_llvm, err, sizeof err)) error_plain("%s", err);
  llvm_module_free(m);
}

/* ---- the plan ------------------------------------------------------------------------ */

/* The model recompiled for one data-parallel rank of a plan: its config constant
 * `batch` set to the plan's micro-batch size (the rank runs the plan's micro-batches
 * one after another); the partition pass cuts it for tensor and pipeline ranks. */
static Graph *graph_for_plan(Arena *arena, const char *text, size_t len, Options *o, const PlanChoice *ch) {
  char value[32];
  snprintf(value, sizeof value, "%d", ch->mbs);
  int k = 0;
  while (k < o->nov && strcmp(o->ov[k].name, "batch")) k++;
  if (k == o->nov) add_override(o, "batch=1");
  o->ov[k].value = arena_strdup(arena, value);
  for (int i = 0; i < o->nov; i++) o->ov[i].used = false;
  Graph *g = frontend_compile(arena, o->file, text, len, o->ov, o->nov);
  if (!g)
    error_plain("%s: compiling the plan's micro-batch of %d sequences needs a config constant 'batch' (in an ONNX "
                "file, a symbolic batch dimension: dynamic_axes={0: 'batch'})",
                o->file, ch->mbs);
  if (!apply_train_options(arena, &o->train, g)) error_plain("%s: the training settings failed", o->file);
  return g;
}

/* How to run what was compiled. */
static void print_compiled(const PlanResult *r, const char *out) {
  const PlanChoice *c = &r->best.ch;
  int ranks = c->dp * c->tp * c->pp;
  if (ranks == 1) fprintf(stderr, "  run it with `%s%s` (one rank)\n", strchr(out, '/') ? "" : "./", out);
  else fprintf(stderr, "  run it with `mpirun -np %d`\n", ranks);
}

/* ---- the passes ---------------------------------------------------------------------- */

/* What one compilation carries from pass to pass. */
typedef struct Build {
  Options *o;
  const PlanResult *r; /* the plan searched (or read), or NULL: one rank, one micro-batch */
  PlanChoice ch;       /* the plan compiled: r->best.ch, or the one-rank plan */
  Graph *g;            /* the verified forward graph (of the plan's micro-batch) that partition cuts */
  Partition *part;     /* the chunks, one per pipeline chunk (one for pp 1) */
  Program **ps;        /* [nps] one program, or one per pipeline stage */
  int nps;
  bool planned_offload; /* the plan offloads the state */
  bool offload;         /* ... and it does not fit: offload_plan plans each program */
  Cluster off_cl;       /* what offload plans for (offload_options) */
  OffloadOptions off;
  OffloadPlan **ops; /* [nps] each program's chunks, or NULL where it fits */
  GraphArch arch;    /* the whole model's, before partition: the programs' "arch" */
} Build;

static bool dump_after(const Build *b, const char *pass) { return b->o->dump_after && !strcmp(b->o->dump_after, pass); }

static void after_ir(const Build *b, const char *pass) {
  for (int k = 0; k < b->part->nchunks; k++) ir_verify(b->part->chunk[k]);
  if (!dump_after(b, pass)) return;
  for (int k = 0; k < b->part->nchunks; k++) {
    if (b->part->nchunks > 1 || b->part->tp > 1)
      printf("# chunk %d of %d (stage %d), one tensor-parallel rank of %d\n", k, b->part->nchunks, k % b->part->pp,
             b->part->tp);
    ir_print(stdout, b->part->chunk[k]);
  }
}

/* The program verifier after every pass that writes the programs (codegen/verify.h). */
static void after_program(const Build *b, const char *pass) {
  char err[512];
  if (program_verify(b->ps, b->nps, err, sizeof err))
    diag_internal(__FILE__, __LINE__, arena_printf(b->ps[0]->arena, "the program after pass %s: %s", pass, err));
  if (dump_after(b, pass)) write_kernels(stdout, b->ps, b->nps);
}

static int64_t measure_work_peak(Graph *g, void *ctx) {
  (void)ctx;
  return lower_program(g)->work_peak;
}

static const RcLayer rc_layer_of[RC_COUNT] = {[RC_NONE] = RCL_KEEP, [RC_SELECTIVE] = RCL_ATTN, [RC_FULL] = RCL_FULL};

static const char *recompute_set = "none"; /* what was chosen, for --dump-plan */

/* The recompute of one differentiated chunk (passes/recompute.h): --recompute, else the
 * plan's choice; auto with --activation-memory chooses layers by the DP under that
 * budget (one program only). The choice goes to standard error. */
static Graph *apply_recompute(Graph *g, const Build *b) {
  const Options *o = b->o;
  int rc = o->rc >= 0 && o->rc != RC_AUTO ? o->rc : (int)b->ch.rc;
  if (o->rc == RC_AUTO && o->act_mem) {
    if (b->part->nchunks > 1 || b->part->tp > 1)
      error_plain("--activation-memory budgets the work tier of one program; a tensor- or pipeline-parallel plan "
                  "recomputes as the plan chooses (or force --recompute none, selective or full)");
    RecomputeChoice c;
    recompute_choose(g, o->act_mem, measure_work_peak, NULL, &c);
    fprintf(stderr,
            "colossalc: recompute auto (%s): %.4g forward FLOPs recomputed, work peak %.1f MiB of %.1f MiB "
            "(model %.1f MiB, %d DP run%s)\n",
            recompute_describe(g->arena, g, c.mode), c.flops, (double)c.peak / 1048576.0,
            (double)o->act_mem / 1048576.0, c.predicted / 1048576.0, c.rounds, c.rounds == 1 ? "" : "s");
    recompute_set = recompute_describe(g->arena, g, c.mode);
    return c.graph;
  }
  if (g->nlayers == 0) return g;
  RcLayer *mode = arena_array(g->arena, g->nlayers, sizeof *mode);
  for (int l = 0; l < g->nlayers; l++) mode[l] = rc_layer_of[rc];
  if (rc == RC_NONE) return pass_recompute(g, mode); /* gathered activations, gathered again */
  if (!b->r || o->rc >= 0)                           /* a searched plan's choice is in its summary */
    fprintf(stderr, "colossalc: recompute %s (%s): %.4g forward FLOPs recomputed\n", recompute_names[rc],
            recompute_describe(g->arena, g, mode), recompute_flops(g, mode));
  recompute_set = recompute_describe(g->arena, g, mode);
  return pass_recompute(g, mode);
}

/* --device-memory without --recompute: the layers plan/policy.h says to recompute so
 * that the activations fit beside offload's chunks, reported on standard error. */
static Graph *recompute_for_device(Graph *g, const Options *o) {
  RecomputeChoice c;
  int64_t budget;
  if (!policy_recompute_for_device(g, o->device_memory, measure_work_peak, NULL, &c, &budget)) return g;
  recompute_set = recompute_describe(g->arena, g, c.mode);
  fprintf(stderr,
          "colossalc: recompute for --device-memory (%s): %.4g forward FLOPs recomputed, work peak %.1f MiB of "
          "%.1f MiB\n",
          recompute_set, c.flops, (double)c.peak / 1048576.0, (double)budget / 1048576.0);
  return c.graph;
}

static Graph *recompute_chunk(Graph *g, const Build *b) {
  g = apply_recompute(g, b);
  if (b->o->device_memory && b->o->rc < 0 && b->part->nchunks == 1) /* a pipeline's: --recompute */
    g = recompute_for_device(g, b->o);
  return g;
}

/* The programs: one (pp 1) or one per pipeline stage with its schedule written into
 * its step (codegen/pipeline.h); each told its plan. The one-rank plan leaves the
 * data-parallel size open (dp 0: `train` takes the ranks it is started on). */
static void lower(Build *b) {
  const PlanChoice *ch = &b->ch;
  if (ch->pp > 1) {
    b->nps = ch->pp;
    b->ps = lower_pipeline(b->part, ch->m, (PipeSchedule)ch->sched);
  } else {
    b->nps = 1;
    b->ps = arena_array(b->part->chunk[0]->arena, 1, sizeof *b->ps);
    b->ps[0] = lower_program(b->part->chunk[0]);
  }
  for (int s = 0; s < b->nps && b->r; s++) {
    Program *p = b->ps[s];
    p->microbatches = ch->m, p->dp = ch->dp, p->zero_stage = ch->zero, p->tp = ch->tp, p->pp = ch->pp, p->stage = s;
    p->plan_step = b->r->best.pr.step, p->plan_cluster = b->r->cl->name;
    if (b->r->best.stage) p->plan_compute = plan_stage_compute(&b->r->best, s);
    if (p->zero_stage > 0 && b->nps == 1 && !policy_offload_wanted(b->r, b->o->device_memory)) zero_split_params(p);
    if (p->zero_stage > 0) zero_assign_owners(p);
  }
  for (int s = 0; s < b->nps; s++) b->ps[s]->arch = &b->arch;
}

/* What offload plans for (plan/policy.h) and on which cluster: the plan's, else the one
 * device of --cluster or --gpu (cpu by default). */
static OffloadOptions offload_options(const Build *b, Cluster *cl) {
  const Options *o = b->o;
  if (b->r) *cl = *b->r->cl;
  else if (o->cluster) cluster_load_json(cl, o->cluster, 1, 1);
  else cluster_from_profile(cl, o->gpu ? o->gpu : "cpu", 1, 1);
  OffloadBudget ob = policy_offload_budget(b->r, cl, o->device_memory, o->host_memory);
  return (OffloadOptions){
      .device_memory = ob.device, .host_memory = ob.host, .cl = cl, .ranks_per_node = ob.ranks_per_node};
}

/* After lowering: each stage's offload chunks (and under ZeRO-3 their owners, which
 * compose then reads), NULL for a stage that fits; when some stage is offloaded, the
 * unscheduled micro-batches are unrolled into `step`, so that the offload plan sees the
 * whole step. */
static void decide_offload(Build *b) {
  b->planned_offload = policy_offload_planned(b->r);
  if (!policy_offload_wanted(b->r, b->o->device_memory)) return;
  b->off = offload_options(b, &b->off_cl);
  b->ops = arena_array(b->ps[0]->arena, b->nps, sizeof *b->ops);
  for (int s = 0; s < b->nps; s++) b->offload |= (b->ops[s] = offload_chunks(b->ps[s], &b->off)) != NULL;
  if (!b->offload) {
    double mib = b->off.device_memory / 1048576.0;
    if (b->o->dump_plan) printf("offload: none needed (the state and the activations fit %.1f MiB)\n", mib);
    else if (b->planned_offload)
      fprintf(stderr, "colossalc: offload: none needed (the state and the activations fit %.1f MiB)\n", mib);
    return;
  }
  for (int s = 0; s < b->nps; s++) { /* the offload plan walks the whole step, instruction by instruction */
    if (b->ps[s]->microbatches > 1 && !b->ps[s]->scheduled) pipe_unroll_microbatches(b->ps[s]);
    else if (b->ps[s]->scheduled && b->ops[s]) pipe_flatten(b->ps[s]);
  }
}

/* ---- the pass pipeline --------------------------------------------------------------- */

/* Each pass takes the compilation and rewrites its chunk graphs (b->part) or, from
 * lower on, its programs (b->ps); `passes` below runs them in order. */

/* requires: the verified forward graph of the plan's micro-batch (b->g), the plan (b->r) */
static void run_partition(Build *b) {
  graph_arch(b->g, &b->arch); /* the whole model's, before it is cut */
  b->part = pass_partition(b->g, b->r, b->r ? &b->r->best : NULL);
}

/* requires: partition */
static void run_decompose(Build *b) {
  unsigned fuse = (b->ch.attn == ATTN_FUSED ? FUSE_ATTENTION : 0) | (b->o->classifier_fused ? FUSE_CLASSIFIER : 0);
  for (int k = 0; k < b->part->nchunks; k++) b->part->chunk[k] = pass_decompose(b->part->chunk[k], fuse);
}

static bool mixed_precision(const Build *b) { return b->o->precision != DT_F32; }

/* Mixed precision, chunk by chunk (only when mixed_precision).
 * requires: decompose */
static void run_autocast(Build *b) {
  const Options *o = b->o;
  for (int k = 0; k < b->part->nchunks; k++) {
    Graph *g = b->part->chunk[k];
    b->part->chunk[k] = o->precision == DT_E4M3 ? pass_autocast_fp8(g, o->fp8_history, o->fp8_margin, o->fp8_classifier)
                                                : pass_autocast(g, (DType)o->precision);
  }
}

/* requires: decompose (autocast) */
static void run_autodiff(Build *b) {
  /* replicated weights' partial gradients summed over tp once a step as the plan prices
   * it (--device-memory offloads too, which places every sum) */
  bool tp_after = b->ch.tp > 1 && plan_tp_sums_once(&b->ch) && !b->o->device_memory;
  for (int k = 0; k < b->part->nchunks; k++) b->part->chunk[k]->tp_sums_after_step = tp_after;
  partition_autodiff(b->part);
}

/* requires: autodiff */
static void run_recompute(Build *b) {
  for (int k = 0; k < b->part->nchunks; k++) b->part->chunk[k] = recompute_chunk(b->part->chunk[k], b);
}

/* requires: autodiff (recompute) */
static void run_lower(Build *b) {
  progress("lowering to kernels");
  lower(b);
  decide_offload(b);
}

/* ZeRO-2/3 of one unscheduled program without offload: the gathers and reductions go
 * into its step (codegen/zero.h), so the runtime's peak falls with the dp ranks.
 * requires: lower; not offloaded (ZeRO-3 offload places its own) */
static void run_zero(Build *b) {
  Program *p = b->ps[0];
  if (b->nps == 1 && p->zero_stage >= 2 && !p->scheduled && !b->offload) zero_schedule(p);
}

/* requires: the plan, zero */
static void run_compose(Build *b) { compose_step(b->ps, b->nps, b->offload); }

/* Offload (codegen/offload.h), each stage's program; --dump-plan shows the plans (the SVG
 * form draws memory per tier over the step).
 * requires: compose */
static void run_offload(Build *b) {
  if (!b->offload) return;
  const Options *o = b->o;
  for (int s = 0; s < b->nps; s++) {
    Program *p = b->ps[s];
    OffloadPlan *op = b->ops[s];
    if (!op) continue; /* this stage fits */
    offload_plan(p, op, &b->off);
    if (b->nps > 1 && o->dump_plan) printf("pipeline stage %d:\n", s);
    if (o->dump_plan && !strcmp(o->dump_plan, "svg")) offload_svg(stdout, p, op);
    else if (o->dump_plan) offload_print(stdout, p, op), printf("  recompute: %s\n", recompute_set);
    else
      fprintf(stderr,
              "colossalc: offload%s: %d chunks, predicted peak device %.1f MiB, host %.1f MiB, nvme %.1f MiB%s "
              "(--dump-plan shows the plan)\n",
              b->nps > 1 ? " of a stage" : "", op->nchunks, op->device_peak / 1048576.0, op->host_peak / 1048576.0,
              op->nvme_peak / 1048576.0, op->ranks > 1 ? " (per rank: the most of one; ZeRO-3)" : "");
  }
}

/* The lists train carries (codegen/compose.h: train, eval, forward, ZeRO-3's gather
 * and release) from the step's parts.
 * requires: every pass that writes the step */
static void run_lists(Build *b) { compose_lists(b->ps, b->nps); }

/* requires: every pass that adds kernels */
static void run_share(Build *b) {
  program_share_kernels(b->ps[0]);
  for (int s = 1; s < b->nps; s++) /* the stages have one kernel table */
    b->ps[s]->code = b->ps[0]->code, b->ps[s]->ncode = b->ps[0]->ncode, b->ps[s]->code_of = b->ps[0]->code_of;
}

typedef enum { PASS_IR, PASS_PROGRAM } PassWrites;

typedef struct Pass {
  const char *name; /* --dump-after=NAME */
  void (*run)(Build *b);
  PassWrites writes;            /* the chunk graphs (after_ir follows) or the programs (after_program) */
  bool (*when)(const Build *b); /* NULL: always */
} Pass;

/* The pipeline of every compilation, one rank or a plan, in order. */
static const Pass passes[] = {
    {"partition", run_partition, PASS_IR, NULL},
    {"decompose", run_decompose, PASS_IR, NULL},
    {"autocast", run_autocast, PASS_IR, mixed_precision},
    {"autodiff", run_autodiff, PASS_IR, NULL},
    {"recompute", run_recompute, PASS_IR, NULL},
    {"lower", run_lower, PASS_PROGRAM, NULL},
    {"zero", run_zero, PASS_PROGRAM, NULL},
    {"compose", run_compose, PASS_PROGRAM, NULL},
    {"offload", run_offload, PASS_PROGRAM, NULL},
    {"lists", run_lists, PASS_PROGRAM, NULL},
    {"share", run_share, PASS_PROGRAM, NULL},
};
enum { NPASSES = sizeof passes / sizeof *passes };

static const Pass *pass_find(const char *name) {
  for (int i = 0; i < NPASSES; i++)
    if (!strcmp(passes[i].name, name)) return &passes[i];
  return NULL;
}

/* --dump-after's PASS: one of the passes, or exit 1 naming them. */
static void pass_check_name(const char *name) {
  const char *names[NPASSES];
  for (int i = 0; i < NPASSES; i++) names[i] = passes[i].name;
  parse_choice("--dump-after", name, names, NPASSES);
}

/* The end of --help: the passes in order, by what --dump-after prints after them. */
static void passes_print(FILE *f) {
  fputs("\npasses, in the order they run, and what --dump-after=PASS prints after them:\n", f);
  for (PassWrites w = PASS_IR; w <= PASS_PROGRAM; w++) {
    fprintf(f, "  %-23s", w == PASS_IR ? "the IR" : "the kernels and program");
    for (int i = 0; i < NPASSES; i++)
      if (passes[i].writes == w) fprintf(f, " %s", passes[i].name);
    fputc('\n', f);
  }
}

/* The pass pipeline (STYLE.md habit 3): each pass of `passes` in order, then the
 * verifier of what it rewrote, --dump-after=PASS printing the IR (or, from lower on, the
 * kernels and the program) after it. The program passes run when a program is wanted
 * (lowering). */
static void run_passes(Build *b, bool lowering) {
  progress("front end done; partition, autodiff, recompute");
  for (const Pass *p = passes; p < passes + NPASSES; p++) {
    if (p->writes == PASS_PROGRAM && !lowering) return;
    if (p->when && !p->when(b)) continue;
    p->run(b);
    if (p->writes == PASS_IR) after_ir(b, p->name);
    else after_program(b, p->name);
  }
}

/* What was asked for: the kernels' text, the CUDA C, the LLVM IR, `train`. */
static void emit(const Build *b) {
  const Options *o = b->o;
  const Program *p = b->ps[0];
  if (o->emit_kernels) {
    FILE *f = fopen(o->emit_kernels, "w");
    if (!f) error_plain("cannot write %s: %s", o->emit_kernels, strerror(errno));
    write_kernels(f, b->ps, b->nps);
    if (fclose(f)) error_plain("cannot write %s: %s", o->emit_kernels, strerror(errno));
  }
  if (o->emit_program) {
    FILE *f = fopen(o->emit_program, "w");
    if (!f) error_plain("cannot write %s: %s", o->emit_program, strerror(errno));
    write_program(f, b->ps, b->nps);
    if (fclose(f)) error_plain("cannot write %s: %s", o->emit_program, strerror(errno));
  }
  if (o->emit_cuda) write_cuda(o->emit_cuda, p);
  int64_t bytes;
  if (o->emit_llvm) {
    void *prog = program_write(b->ps, b->nps, &bytes);
    write_llvm(o, p, prog, bytes);
  }
  if (!o->out) return;
  void *prog = program_write(b->ps, b->nps, &bytes);
  build_train(o, p, prog, bytes);
  progress_end();
  fprintf(stderr, "colossalc: wrote %s: %d kernel%s sharing %d code%s, %d program%s, in %.1f s\n", o->out, p->nkernels,
          p->nkernels == 1 ? "" : "s", p->ncode, p->ncode == 1 ? "" : "s", b->nps, b->nps == 1 ? "" : "s",
          now_s() - t_start);
}

static void options_free(Options *o) {
  for (int i = 0; i < o->nov; i++) free((char *)o->ov[i].name);
  free(o->ov);
}

/* Exit status 1 after an error, with everything freed (so sanitizers see no leak). */
static int fail(Arena *arena, Options *o) {
  arena_free(arena);
  options_free(o);
  return 1;
}

/* Standard output gets the summary; with a plan, its two lines under it. */
static void print_summary(const Options *o, const Graph *g, const Program *p, const PlanResult *r) {
  summary_print(stdout, g);
  if (o->precision == DT_F32) printf("precision: fp32\n");
  else if (o->precision == DT_E4M3)
    printf("precision: fp8 mixed (the linear layers' GEMMs on e4m3 copies, e5m2 gradients, per-tensor delayed "
           "scaling over %d steps, margin %d%s; the rest bf16 mixed; f32 master weights and optimizer state)\n",
           o->fp8_history, o->fp8_margin, o->fp8_classifier ? "; the classifier's GEMM too" : "");
  else
    printf("precision: %s mixed (GEMMs on %s copies with f32 sums; normalisations, softmax and the loss in f32; "
           "f32 master weights and optimizer state%s)\n",
           o->precision == DT_BF16 ? "bf16" : "fp16", dtype_name((DType)o->precision),
           o->precision == DT_F16 ? "; dynamic loss scaling" : "");
  printf("attention: %s; classifier: %s\n",
         o->force.attn == ATTN_MATERIALIZED ? "materialized (GEMMs and a softmax, the scores stored)"
                                            : "fused (flash_attention kernels, no scores stored)",
         o->classifier_fused ? "fused (its GEMM and cross-entropy a chunk of rows at a time)"
                             : "materialized (the logits stored)");
  if (p) summary_print_memory(stdout, p->tiers, p->work_peak);
  else printf("memory plan: not available (%s)\n", diag_last);
  if (r && !o->dump_plan) plan_dump_brief(stdout, r);
}

/* The one-rank plan: one micro-batch, the attention asked (fused by default). */
static Build build_one_rank(Options *o) {
  AttnKernel attn = o->force.attn >= 0 ? (AttnKernel)o->force.attn : ATTN_FUSED;
  return (Build){.o = o, .ch = {.dp = 1, .tp = 1, .pp = 1, .m = 1, .v = 1, .rc = RC_NONE, .attn = attn}};
}

/* --summary with the memory plan of the model's own program, one rank (b->r NULL); a
 * model that cannot be lowered still summarises. */
static void summarise(Build *b, const PlanResult *shown) {
  FILE *saved = diag_stream;
  DiagJump j;
  diag_stream = NULL;
  diag_push(&j);
  if (!setjmp(j.jb)) run_passes(b, true);
  else b->ps = NULL;
  diag_pop(&j);
  diag_stream = saved;
  print_summary(b->o, b->g, b->ps ? b->ps[0] : NULL, shown);
}

/* --calibrate: this build's colossalc-calibrate (runtime/calibrate.c), which starts its
 * MPI ranks with this build's mpirun; its exit status. */
static int calibrate(const char *device, const char *out) {
  const char *tmp = getenv("TMPDIR");
  char *argv[] = {COLOSSALC_CALIBRATE,
                  "-o",
                  (char *)out,
                  "--mpirun",
                  COLOSSALC_MPIRUN,
                  "--device",
                  (char *)device,
                  "--dir",
                  (char *)(tmp ? tmp : "/tmp"),
                  NULL};
  execv(argv[0], argv);
  fprintf(stderr, "colossalc: cannot run %s: %s\n", argv[0], strerror(errno));
  return 1;
}

int main(int argc, char **argv) {
  t_start = now_s();
  tty = isatty(STDERR_FILENO);
  Options o;
  diag_stream = stderr;
  parse_options(argc, argv, &o);
  if (o.calibrate) return calibrate(o.calibrate, o.out);
  Arena *arena = arena_new();
  size_t len = 0;
  const char *text = NULL;
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) return fail(arena, &o);
  text = frontend_read_file(arena, o.file, &len);
  diag_pop(&j);
  Graph *volatile g = frontend_compile(arena, o.file, text, len, o.ov, o.nov); /* parse, elaborate, verify */
  if (!g || !apply_train_options(arena, &o.train, g)) return fail(arena, &o);
  if (o.dump_ir) ir_print(stdout, g);
  bool program_dump = o.dump_after && pass_find(o.dump_after)->writes == PASS_PROGRAM;
  volatile bool lowering =
      o.emit_kernels || o.emit_program || o.out || o.emit_llvm || o.emit_cuda || o.device_memory || program_dump;
  volatile bool compiling = lowering || o.dump_after;
  /* --device-memory alone (no cluster): --dump-plan shows the offload plan, not a parallel one */
  if (o.device_memory && !o.gpus && !o.cluster) o.plan = false;
  Build b = build_one_rank(&o);
  const PlanResult *volatile shown = NULL; /* the plan printed under the summary */
  Cluster cl;                              /* the plan's (PlanResult.cl), for the passes too */
  if (o.plan) {                            /* requires: verified forward graph */
    diag_push(&j);
    if (setjmp(j.jb)) return fail(arena, &o);
    progress("searching the plan");
    PlanResult *r = search_plan(arena, g, &o, &cl);
    progress_end();
    if (o.dump_plan) dump_plan(r, &o);
    if (compiling) {
      if (lowering && !o.dump_plan) plan_dump_brief(stderr, r), print_compiled(r, o.out ? o.out : "train");
      b.r = r, b.ch = r->best.ch;
      g = graph_for_plan(arena, text, len, &o, &b.ch);
    } else if (o.summary) {
      shown = r;
    }
    diag_pop(&j);
  }
  if (o.precision < 0) o.precision = DT_F32; /* no plan searched: fp32 unless --precision asks */
  b.g = g;
  if (compiling) {
    diag_push(&j);
    if (setjmp(j.jb)) return progress_end(), fail(arena, &o);
    check_fp8_classifier(&o);
    run_passes(&b, lowering);
    if (lowering) emit(&b);
    diag_pop(&j);
  } else if (o.summary) {
    summarise(&b, shown);
  }
  progress_end();
  arena_free(arena);
  options_free(&o);
  return 0;
}
