/* colossalc: the command line. Reads a model, runs the pass pipeline, and prints
 * what was asked for. The pipeline is `passes`, one flat list of {name, function} run
 * in order, from which --dump-after and the verifier after each pass come (STYLE.md
 * habit 3). What to recompute and offload under a budget is plan/policy.h's to decide. */
#include <errno.h>
#include <getopt.h>
#include <spawn.h>
#include <stdarg.h>
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
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "passes/recompute.h"
#include "passes/summary.h"
#include "plan/dump.h"
#include "plan/policy.h"
#include "plan/search.h"

static void usage(FILE *f) {
  fputs("usage: colossalc FILE [options]\n"
        "\n"
        "Compiles a model (the colossalc model language, see docs/language.md, or an ONNX\n"
        "file, docs/onnx.md) into a training program.\n"
        "\n"
        "options:\n"
        "  -o FILE           compile the training program into the executable FILE\n"
        "                    (run it with FILE --help); with --gpus N, the plan's program\n"
        "                    for N ranks (mpirun -np N FILE), its plan printed first\n"
        "  -j, --jobs N      threads for the CPU code generator (default: every core)\n"
        "  --emit-llvm FILE  write the CPU kernels as LLVM IR (after optimisation)\n"
        "  --emit-cuda DIR   write the CUDA C source of every kernel to DIR/kernels.cu\n"
        "  --set NAME=VALUE  override a config constant of the model (repeatable)\n"
        "  --gpus N          number of GPUs of the target cluster: search the parallel plan\n"
        "                    for them (without it: one rank, no plan)\n"
        "  --gpus-per-node K GPUs in one node (default: the profile's node, 8 for data-centre GPUs)\n"
        "  --gpu PROFILE     a100-80g (default), a100-40g, h100-sxm, h200, rtx3090 or cpu\n"
        "  --cluster FILE    describe the cluster in a JSON file instead (docs/plan.md)\n"
        "  --dump-plan[=F]   search the parallel plan and print it: text (default), json or svg\n"
        "  --plan-out FILE   write the --dump-plan output to FILE instead of standard output\n"
        "  --plan FILE       force a plan (or parts of one) from a --dump-plan=json file\n"
        "  --dp N, --tp N, --pp N   force the data, tensor and pipeline parallel degrees\n"
        "  --zero S          force the ZeRO stage (0-3)\n"
        "  --microbatch-size N      force the micro-batch size (sequences)\n"
        "  --schedule S      force the pipeline schedule: 1f1b or interleaved\n"
        "  --virtual-stages V       force the model chunks per stage of the interleaved schedule\n"
        "  --recompute R     activation recompute: none, selective (the attention core of\n"
        "                    every layer), full (every layer) or auto (the layers that fit\n"
        "                    --activation-memory with the fewest recomputed FLOPs; with a\n"
        "                    plan and no budget, the plan's choice)\n"
        "  --activation-memory SIZE  budget of the work tier (activations and workspace) for\n"
        "                    --recompute auto: bytes, or 512K, 512M, 2G, 1.5GiB (binary), 2GB (decimal)\n"
        "  --attention K     fused (default: flash_attention kernels, no scores stored) or\n"
        "                    materialized (GEMMs and a softmax, the scores in memory)\n"
        "  --classifier K    materialized (default: the logits in memory) or fused (the classifier's\n"
        "                    GEMM and cross-entropy a chunk of rows at a time; no sampling)\n"
        "  --precision P     fp32, bf16, fp16 or fp8 (default: a --plan file's; bf16 when --gpus,\n"
        "                    --gpu or --cluster asks for GPUs; else fp32): GEMMs on 16-bit copies of their\n"
        "                    inputs with f32 sums, normalisations, softmax and the loss in f32, f32\n"
        "                    master weights and optimizer state (torch.autocast's policy); fp16 adds\n"
        "                    dynamic loss scaling (train --loss-scale); fp8 is bf16 with the linear\n"
        "                    layers' GEMMs on e4m3 inputs (e5m2 gradients) scaled per tensor from an\n"
        "                    amax history (Transformer Engine's delayed scaling); meshes exchange\n"
        "                    f32 (collectives, pipeline messages)\n"
        "  --fp8-history N   fp8: the steps of amax history a scale comes from (default 1024)\n"
        "  --fp8-margin M    fp8: scales divided by 2^M (default 0)\n"
        "  --fp8-classifier  fp8: the classifier's GEMM (the logits) in fp8 too (default: bf16)\n"
        "  --offload O       force the plan's offload: none; optimizer (its state on the host,\n"
        "                    AdamW on the CPU); or state (every rank's ZeRO-3 shard of parameters,\n"
        "                    gradients and optimizer state on its node's host memory and NVMe);\n"
        "                    optimizer is --what-if only, state compiles\n"
        "  --nvme SIZE       NVMe per node the plan may use for offloaded state (default: the\n"
        "                    profile's drives); --host-memory SIZE also caps the host memory\n"
        "                    per node the plan may use\n"
        "  --what-if         search plans the code generators cannot compile yet too (optimizer\n"
        "                    offload, vocabulary-parallel embedding and loss, query-split causal\n"
        "                    attention); without it --dump-plan shows the plan -o compiles\n"
        "  --device-memory SIZE  the device memory the program must fit: parameters, gradients and\n"
        "                    optimizer state are offloaded in chunks to the host (and NVMe), planned\n"
        "                    instruction by instruction (docs/memory.md); with -o\n"
        "  --host-memory SIZE    what the host may hold of the training state (default: 80% of\n"
        "                    this machine's memory); the rest goes to NVMe files (train --nvme-dir)\n"
        "  --optimizer O     adamw or sgd, with PyTorch's defaults (overrides the model's train\n"
        "                    directive; an ONNX file's is adamw's defaults)\n"
        "  --lr X, --beta1 X, --beta2 X, --eps X, --weight-decay X, --momentum X, --clip X,\n"
        "  --warmup N, --min-lr X, --lr-schedule cosine|constant   one optimizer setting\n"
        "  --train-file FILE the training directive from a file that holds only it\n"
        "                    (train loss with adamw(lr = 6e-4, ...);), for an ONNX file\n"
        "  --summary         print parameters, FLOPs per step and a per-layer table\n"
        "                    (the default when nothing else is asked for)\n"
        "  --dump-ir         print the verified IR, one op per line with its shape\n"
        "  --dump-after=PASS print the IR after a pass: partition, decompose, autocast, autodiff or\n"
        "                    recompute; or the kernels and the program after lower, zero,\n"
        "                    compose, offload or share\n"
        "  --emit-kernels F  write the generated kernels (kernel form) and the program to F\n"
        "  -h, --help        print this help\n"
        "  --version         print the version\n",
        f);
}

/* Training settings of the command line, over the model's train directive (an ONNX
 * file's: adamw's defaults): --train-file, then --optimizer (its defaults), then each
 * setting given (bit i of set: value[i], in train_fields' order). */
typedef struct TrainOptions {
  const char *file;
  int opt;      /* an OptKind, or -1 */
  int schedule; /* a SchedKind, or -1 */
  unsigned set;
  double value[9];
} TrainOptions;

static const char *const train_fields[] = {"lr",       "beta1", "beta2",  "eps",   "weight-decay",
                                           "momentum", "clip",  "min-lr", "warmup"};

typedef struct Options {
  const char *file;
  ConfigOverride *ov;
  int nov;
  long gpus, gpus_per_node;
  long jobs; /* -j: threads for LLVM (0: every core) */
  bool summary, dump_ir, gpus_set;
  bool what_if; /* --what-if: plans the code generators cannot compile yet too */
  const char *dump_after, *emit_kernels, *out, *emit_llvm, *emit_cuda;
  const char *gpu, *cluster, *dump_plan, *plan_out, *plan_file;
  int64_t device_memory; /* --device-memory: plan offload to fit it (0: no budget) */
  int64_t host_memory;   /* --host-memory: what the host may hold of the state (0: this machine's) */
  int64_t nvme;          /* --nvme: NVMe per node a plan may use (with nvme_set) */
  bool nvme_set;
  PlanForce force;
  bool plan;                   /* search a plan: --gpus, --cluster, --dump-plan or any option that forces part of one */
  int rc;                      /* --recompute: -1 unset, a Recompute, or RC_AUTO */
  int64_t act_mem;             /* --activation-memory bytes, 0 unset */
  int precision;               /* --precision: a DType (DT_F32 unless asked; DT_E4M3: fp8) */
  int fp8_history, fp8_margin; /* --fp8-history, --fp8-margin */
  bool fp8_classifier;         /* --fp8-classifier: the logits' GEMM in fp8 too */
  bool precision_set;          /* --precision given (else: a plan file's, bf16 on a GPU profile, fp32) */
  bool classifier_fused;       /* --classifier fused: classifier_ce (passes/decompose.c) */
  TrainOptions train;          /* --train-file, --optimizer, --lr, ... */
} Options;

enum { RC_AUTO = RC_COUNT };

static void pass_check_name(const char *name);

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

static const char *const rc_option_names[RC_COUNT + 1] = {"none", "selective", "full", "auto"};

static void add_override(Options *o, const char *arg) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg || !eq[1]) {
    fprintf(stderr, "colossalc: --set takes NAME=VALUE, got '%s'\n", arg);
    exit(1);
  }
  for (int i = 0; i < o->nov; i++) /* given again: the later value wins, as for other flags */
    if (strlen(o->ov[i].name) == (size_t)(eq - arg) && !strncmp(o->ov[i].name, arg, eq - arg)) {
      o->ov[i].value = eq + 1;
      return;
    }
  o->ov = realloc(o->ov, (o->nov + 1) * sizeof *o->ov);
  if (!o->ov) exit(1);
  o->ov[o->nov++] = (ConfigOverride){strndup(arg, eq - arg), eq + 1, false};
}

/* A byte count: a number with an optional suffix K, M, G, T (or KiB ... TiB: powers of
 * 1024) or KB, MB, GB, TB (powers of 1000), and an optional B. */
static int64_t parse_size(const char *flag, const char *arg) {
  static const char *const suffix[] = {"", "B", "K", "KiB", "KB", "M", "MiB", "MB", "G", "GiB", "GB", "T", "TiB", "TB"};
  static const double scale[] = {1,   1,      0x1p10, 0x1p10, 1e3,    0x1p20, 0x1p20,
                                 1e6, 0x1p30, 0x1p30, 1e9,    0x1p40, 0x1p40, 1e12};
  char *end;
  double v = strtod(arg, &end);
  for (int i = 0; end != arg && i < (int)(sizeof suffix / sizeof *suffix); i++)
    if (!strcmp(end, suffix[i]) && v * scale[i] >= 1 && v * scale[i] < 0x1p60) return (int64_t)(v * scale[i]);
  fprintf(stderr, "colossalc: %s takes a size such as 512M, 2G or 1.5GiB, got '%s'\n", flag, arg);
  exit(1);
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

enum {
  O_SET = 256,
  O_GPUS,
  O_SUMMARY,
  O_DUMP_IR,
  O_VERSION,
  O_DUMP_AFTER,
  O_EMIT_KERNELS,
  O_EMIT_LLVM,
  O_EMIT_CUDA,
  O_GPN,
  O_GPU,
  O_CLUSTER,
  O_DUMP_PLAN,
  O_PLAN_OUT,
  O_PLAN,
  O_DP,
  O_TP,
  O_PP,
  O_ZERO,
  O_MBS,
  O_SCHEDULE,
  O_VSTAGES,
  O_RECOMPUTE,
  O_ATTENTION,
  O_ACT_MEM,
  O_DEV_MEM,
  O_HOST_MEM,
  O_OFFLOAD,
  O_WHAT_IF,
  O_NVME,
  O_PRECISION,
  O_CLASSIFIER,
  O_FP8_HISTORY,
  O_FP8_MARGIN,
  O_FP8_CLASSIFIER,
  O_OPTIMIZER,
  O_LR_SCHEDULE,
  O_TRAIN_FILE,
  O_TRAIN_FIELD
};

/* The options that describe the cluster or force part of the plan. */
static bool parse_plan_option(int c, const char *arg, Options *o) {
  static const char *const zero[] = {"0", "1", "2", "3"};
  PlanForce *f = &o->force;
  switch (c) {
  case O_GPN: o->gpus_per_node = parse_positive("--gpus-per-node", arg); break;
  case O_GPU: o->gpu = arg; break;
  case O_CLUSTER: o->cluster = arg; break;
  case O_WHAT_IF: o->what_if = true; break;
  case O_PLAN_OUT: o->plan_out = arg; break;
  case O_PLAN: o->plan_file = arg; break;
  case O_DP: f->dp = (int)parse_positive("--dp", arg); break;
  case O_TP: f->tp = (int)parse_positive("--tp", arg); break;
  case O_PP: f->pp = (int)parse_positive("--pp", arg); break;
  case O_ZERO: f->zero = parse_choice("--zero", arg, zero, 4); break;
  case O_MBS: f->mbs = (int)parse_positive("--microbatch-size", arg); break;
  case O_VSTAGES: f->v = (int)parse_positive("--virtual-stages", arg); break;
  case O_SCHEDULE: f->schedule = parse_choice("--schedule", arg, schedule_names, 2); break;
  case O_ATTENTION: f->attn = parse_choice("--attention", arg, attn_kernel_names, 2); break;
  case O_OFFLOAD: {
    f->offload = parse_choice("--offload", arg, offload_names, OFFLOAD_KINDS);
    break;
  }
  case O_DUMP_PLAN: {
    static const char *const fmts[] = {"text", "json", "svg"};
    o->dump_plan = fmts[arg ? parse_choice("--dump-plan", arg, fmts, 3) : 0];
    break;
  }
  default: return false;
  }
  o->plan = true;
  return true;
}

/* --lr, --beta1, ...: a number >= 0 (betas below 1, lr above 0, warmup whole). */
static double parse_train_value(int field, const char *arg) {
  char *end;
  double v = strtod(arg, &end);
  bool ok = end != arg && !*end && v >= 0 && v < 1e30;
  if (field == 0) ok &= v > 0;
  if (field == 1 || field == 2) ok &= v < 1;
  if (field == 8) ok &= v == (double)(int64_t)v;
  if (!ok) {
    fprintf(stderr, "colossalc: --%s takes %s, got '%s'\n", train_fields[field],
            field == 0   ? "a positive number"
            : field <= 2 ? "a number in [0, 1)"
            : field == 8 ? "a whole number of steps"
                         : "a number >= 0",
            arg);
    exit(1);
  }
  return v;
}

static bool parse_train_option(int c, const char *arg, TrainOptions *t) {
  static const char *const opts[] = {"adamw", "sgd"}, *const scheds[] = {"cosine", "constant"};
  if (c == O_OPTIMIZER) t->opt = parse_choice("--optimizer", arg, opts, 2) ? OPT_SGD : OPT_ADAMW;
  else if (c == O_LR_SCHEDULE)
    t->schedule = parse_choice("--lr-schedule", arg, scheds, 2) ? SCHED_CONSTANT : SCHED_COSINE;
  else if (c == O_TRAIN_FILE) t->file = arg;
  else if (c >= O_TRAIN_FIELD && c < O_TRAIN_FIELD + 9) {
    t->value[c - O_TRAIN_FIELD] = parse_train_value(c - O_TRAIN_FIELD, arg);
    t->set |= 1u << (c - O_TRAIN_FIELD);
  } else {
    return false;
  }
  return true;
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
  for (int i = 0; i < 8; i++)
    if (o->set >> i & 1) *field[i] = o->value[i];
  if (o->set >> 8 & 1) t->warmup = (int64_t)o->value[8];
  if (o->schedule >= 0) t->schedule = (SchedKind)o->schedule;
  return true;
}

static void parse_options(int argc, char **argv, Options *o) {
  static const struct option longs[] = {{"set", required_argument, 0, O_SET},
                                        {"gpus", required_argument, 0, O_GPUS},
                                        {"summary", no_argument, 0, O_SUMMARY},
                                        {"dump-ir", no_argument, 0, O_DUMP_IR},
                                        {"dump-after", required_argument, 0, O_DUMP_AFTER},
                                        {"emit-kernels", required_argument, 0, O_EMIT_KERNELS},
                                        {"emit-llvm", required_argument, 0, O_EMIT_LLVM},
                                        {"emit-cuda", required_argument, 0, O_EMIT_CUDA},
                                        {"gpus-per-node", required_argument, 0, O_GPN},
                                        {"gpu", required_argument, 0, O_GPU},
                                        {"cluster", required_argument, 0, O_CLUSTER},
                                        {"dump-plan", optional_argument, 0, O_DUMP_PLAN},
                                        {"plan-out", required_argument, 0, O_PLAN_OUT},
                                        {"plan", required_argument, 0, O_PLAN},
                                        {"dp", required_argument, 0, O_DP},
                                        {"tp", required_argument, 0, O_TP},
                                        {"pp", required_argument, 0, O_PP},
                                        {"zero", required_argument, 0, O_ZERO},
                                        {"microbatch-size", required_argument, 0, O_MBS},
                                        {"schedule", required_argument, 0, O_SCHEDULE},
                                        {"virtual-stages", required_argument, 0, O_VSTAGES},
                                        {"recompute", required_argument, 0, O_RECOMPUTE},
                                        {"attention", required_argument, 0, O_ATTENTION},
                                        {"activation-memory", required_argument, 0, O_ACT_MEM},
                                        {"device-memory", required_argument, 0, O_DEV_MEM},
                                        {"host-memory", required_argument, 0, O_HOST_MEM},
                                        {"nvme", required_argument, 0, O_NVME},
                                        {"offload", required_argument, 0, O_OFFLOAD},
                                        {"jobs", required_argument, 0, 'j'},
                                        {"what-if", no_argument, 0, O_WHAT_IF},
                                        {"precision", required_argument, 0, O_PRECISION},
                                        {"classifier", required_argument, 0, O_CLASSIFIER},
                                        {"fp8-history", required_argument, 0, O_FP8_HISTORY},
                                        {"fp8-margin", required_argument, 0, O_FP8_MARGIN},
                                        {"fp8-classifier", no_argument, 0, O_FP8_CLASSIFIER},
                                        {"optimizer", required_argument, 0, O_OPTIMIZER},
                                        {"lr-schedule", required_argument, 0, O_LR_SCHEDULE},
                                        {"train-file", required_argument, 0, O_TRAIN_FILE},
                                        {"lr", required_argument, 0, O_TRAIN_FIELD + 0},
                                        {"beta1", required_argument, 0, O_TRAIN_FIELD + 1},
                                        {"beta2", required_argument, 0, O_TRAIN_FIELD + 2},
                                        {"eps", required_argument, 0, O_TRAIN_FIELD + 3},
                                        {"weight-decay", required_argument, 0, O_TRAIN_FIELD + 4},
                                        {"momentum", required_argument, 0, O_TRAIN_FIELD + 5},
                                        {"clip", required_argument, 0, O_TRAIN_FIELD + 6},
                                        {"min-lr", required_argument, 0, O_TRAIN_FIELD + 7},
                                        {"warmup", required_argument, 0, O_TRAIN_FIELD + 8},
                                        {"help", no_argument, 0, 'h'},
                                        {"version", no_argument, 0, O_VERSION},
                                        {0, 0, 0, 0}};
  *o = (Options){.gpus = 1, .rc = -1, .precision = DT_F32, .fp8_history = 1024, .train = {.opt = -1, .schedule = -1}};
  plan_force_init(&o->force);
  o->force.attn = -1; /* not asked: the plan file's, else what the plan may use */
  int c;
  opterr = 0; /* one line of our own for a bad option */
  while ((c = getopt_long(argc, argv, ":ho:j:", longs, NULL)) != -1) {
    if (parse_plan_option(c, optarg, o) || parse_train_option(c, optarg, &o->train)) continue;
    switch (c) {
    case O_SET: add_override(o, optarg); break;
    case O_GPUS: o->gpus = parse_positive("--gpus", optarg), o->gpus_set = o->plan = true; break;
    case 'j': o->jobs = parse_positive("-j", optarg); break;
    case O_SUMMARY: o->summary = true; break;
    case O_DUMP_IR: o->dump_ir = true; break;
    case O_DUMP_AFTER: o->dump_after = optarg; break;
    case O_EMIT_KERNELS: o->emit_kernels = optarg; break;
    case O_EMIT_LLVM: o->emit_llvm = optarg; break;
    case O_EMIT_CUDA: o->emit_cuda = optarg; break;
    case O_RECOMPUTE: o->rc = parse_choice("--recompute", optarg, rc_option_names, RC_COUNT + 1); break;
    case O_ACT_MEM: o->act_mem = parse_size("--activation-memory", optarg); break;
    case O_DEV_MEM: o->device_memory = parse_size("--device-memory", optarg); break;
    case O_HOST_MEM: o->host_memory = parse_size("--host-memory", optarg); break;
    case O_NVME: o->nvme = parse_size("--nvme", optarg), o->nvme_set = true; break;
    case O_PRECISION: {
      static const char *const names[] = {"fp32", "bf16", "fp16", "fp8"};
      static const int dts[] = {DT_F32, DT_BF16, DT_F16, DT_E4M3};
      o->precision = dts[parse_choice("--precision", optarg, names, 4)];
      o->precision_set = true;
      break;
    }
    case O_FP8_HISTORY:
      o->fp8_history = parse_positive("--fp8-history", optarg);
      if (o->fp8_history > 1 << 20) error_plain("--fp8-history: at most 1048576 steps");
      break;
    case O_FP8_MARGIN: {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (*end || end == optarg || v < 0 || v > 64)
        error_plain("--fp8-margin: an integer in [0, 64], got '%s'", optarg);
      o->fp8_margin = (int)v;
      break;
    }
    case O_FP8_CLASSIFIER: o->fp8_classifier = true; break;
    case O_CLASSIFIER: {
      static const char *const names[] = {"materialized", "fused"};
      o->classifier_fused = parse_choice("--classifier", optarg, names, 2) == 1;
      break;
    }
    case 'o': o->out = optarg; break;
    case 'h': usage(stdout); exit(0);
    case O_VERSION: printf("colossalc %s\n", COLOSSALC_VERSION); exit(0);
    case ':': error_plain("%s needs a value (see colossalc --help)", argv[optind - 1]);
    default: error_plain("unknown option '%s' (see colossalc --help)", argv[optind - 1]);
    }
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
            rc_option_names[o->rc]);
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
  if (!o->dump_ir && !o->dump_after && !o->emit_kernels && !o->out && !o->emit_llvm && !o->emit_cuda && !o->dump_plan)
    o->summary = true;
  if (o->out) check_output(o->out);
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
  int gpus = o->gpus_set || !o->cluster ? (int)o->gpus : 0;
  if (o->cluster) cluster_load_json(cl, o->cluster, gpus, (int)o->gpus_per_node);
  else cluster_from_profile(cl, o->gpu ? o->gpu : "a100-80g", gpus, (int)o->gpus_per_node);
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
  if (f.v > 1 && f.schedule == PS_1F1B) error_plain("--virtual-stages %d needs --schedule interleaved", f.v);
  /* Only what code generation runs (so that --dump-plan shows the plan -o compiles),
   * unless --what-if asks for what the code generators cannot emit yet. */
  bool compiling = o->out || o->emit_kernels || o->emit_llvm || o->emit_cuda || o->dump_after;
  f.exec = !o->what_if;
  if (compiling && o->what_if)
    error_plain("--what-if plans may use what the code generators cannot emit yet; compile without --what-if");
  if (f.exec && f.offload == OFFLOAD_OPTIMIZER)
    error_plain("offloading the optimizer state alone is priced, not compiled yet: add --what-if to explore it, or "
                "--offload state to compile the whole state's offload (ZeRO-3, data parallelism)");
  if (o->host_memory) cl->host_memory = (double)o->host_memory; /* what the state may use of a node's */
  if (o->nvme_set) cl->nvme = (double)o->nvme;
  /* the precision: --precision, else the plan file's, else bf16 where --gpus, --gpu,
   * --cluster or --what-if asks for GPUs, else fp32 (a plan option alone, the cpu
   * profile); 16-bit programs exchange f32 (tensor-parallel collectives, pipeline sends) */
  bool on_gpus = (o->gpus_set || o->gpu || o->cluster || o->what_if) && !cl->dev.fp32_only;
  if (!o->precision_set) o->precision = f.precision >= 0 ? f.precision : on_gpus ? DT_BF16 : DT_F32;
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

/* The kernels (their text form) and the programs' JSON (freed here). */
static void write_kernels(FILE *f, Program **ps, char *json) {
  const Program *p = ps[0];
  if (p->code) {
    fprintf(f, "# %d kernels share %d codes (codegen/share.c)\n", p->nkernels, p->ncode);
    for (int i = 0; i < p->ncode; i++) kernel_print_code(f, p->code[i]);
  } else {
    for (int i = 0; i < p->nkernels; i++) kernel_print(f, p->kernels[i]);
  }
  fprintf(f, "program %s\n", json);
  free(json);
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

/* `train` from the shared kernel codes and the program JSON (freed here): the codes
 * compiled by LLVM on every core (codegen/llvm.h), their CUDA C carried beside them,
 * the objects linked with the runtime. */
static void build_train(const Options *o, const Program *p, char *json) {
  char err[512], prefix[4200];
  snprintf(prefix, sizeof prefix, "%s.tmp%d", o->out, (int)getpid());
  char **objs = NULL, libs[64];
  char *cuda = cuda_emit_units((const Kernel *const *)p->code, p->ncode); /* for NVRTC when train starts on a GPU */
  int rc = llvm_compile_program((const Kernel *const *)p->code, p->ncode, json, cuda, jobs(o), prefix, llvm_progress,
                                NULL, &objs, libs, sizeof libs, err, sizeof err);
  free(json);
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
static void write_llvm(const Options *o, const Program *p, char *json) {
  char err[512];
  LlvmModule *m = llvm_module_new(p->g->name);
  llvm_emit_program(m, (const Kernel *const *)p->code, p->ncode, json);
  free(json);
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

static char *programs_json(const Build *b) {
  return b->nps == 1 ? program_to_json(b->ps[0]) : programs_to_json(b->ps, b->nps);
}

/* The program verifier after every pass that writes the programs (codegen/verify.h). */
static void after_program(const Build *b, const char *pass) {
  char err[512];
  if (program_verify(b->ps, b->nps, err, sizeof err))
    diag_internal(__FILE__, __LINE__, arena_printf(b->ps[0]->arena, "the program after pass %s: %s", pass, err));
  if (dump_after(b, pass)) write_kernels(stdout, b->ps, programs_json(b));
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
    b->ps = lower_pipeline(b->part, ch->m, ch->sched == PS_INTERLEAVED);
  } else {
    b->nps = 1;
    b->ps = arena_array(b->part->chunk[0]->arena, 1, sizeof *b->ps);
    b->ps[0] = lower_program(b->part->chunk[0]);
  }
  for (int s = 0; s < b->nps && b->r; s++) {
    Program *p = b->ps[s];
    p->microbatches = ch->m, p->dp = ch->dp, p->zero_stage = ch->zero, p->tp = ch->tp, p->pp = ch->pp, p->stage = s;
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
  for (int s = 0; s < b->nps; s++)
    if (b->ps[s]->microbatches > 1 && !b->ps[s]->scheduled) pipe_unroll_microbatches(b->ps[s]);
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
    write_kernels(f, b->ps, programs_json(b));
    if (fclose(f)) error_plain("cannot write %s: %s", o->emit_kernels, strerror(errno));
  }
  if (o->emit_cuda) write_cuda(o->emit_cuda, p);
  if (o->emit_llvm) write_llvm(o, p, programs_json(b));
  if (!o->out) return;
  build_train(o, p, programs_json(b));
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

int main(int argc, char **argv) {
  t_start = now_s();
  tty = isatty(STDERR_FILENO);
  Options o;
  diag_stream = stderr;
  parse_options(argc, argv, &o);
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
  volatile bool lowering = o.emit_kernels || o.out || o.emit_llvm || o.emit_cuda || o.device_memory || program_dump;
  volatile bool compiling = lowering || o.dump_after;
  /* --device-memory alone (no cluster): --dump-plan shows the offload plan, not a parallel one */
  if (o.device_memory && !o.gpus_set && !o.cluster) o.plan = false;
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
