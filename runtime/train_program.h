/* train_program: the compiled program (runtime/program.h) parsed from its JSON into
 * plain structs, validated once at start-up so nothing later re-checks a field.
 *
 * Validation covers every field of the schema in program.h: presence and type
 * (a missing or ill-typed field is an internal error naming it, e.g.
 * "params[1].shape[0]"), value ranges (positive sizes, known enum strings), and
 * bounds: every parameter, input, loss, logits and gradnorm slot, every "zero"
 * range and every byte a "gemm" reads or writes lies inside its tier, and every
 * kernel id is below colossalc_nkernels. Inputs: unique names, at most one tokens and
 * one targets input (i32 [batch, seq]), every shape starting with batch, "range" and
 * "ignore" only on i32 inputs, "offset" required outside scheduled programs; an
 * "input" instruction names one of them. The parallel instructions of program.h
 * are checked the same way: every WORK range within one slot, slot and micro-batch
 * indices in range, pipeline peers in [0, pp), tags below RT_TAG_LIMIT, "comm"
 * geometry (n divisible by tp for the split kinds, src and dst apart unless in place
 * for the others, a root within its group, a stage group that exists), rank
 * conditions within the mesh and only on kernel, gemm, zero, move, drop and wait; "input"
 * and "loss" only in `step` of a scheduled program. "offload" (program.h): chunks
 * of consecutive parameters whose ranges cover PARAMS, GRADS and OPT exactly once and
 * in order (so PARAMS and GRADS have the same size, OPT one or, AdamW, two times it
 * with v at opt_v_offset = the PARAMS size; SGD without momentum may have none),
 * known homes, grads "none", each chunk's owner at ZeRO stage 3 (and its parameters'
 * owner the same) and none otherwise; offload runs at ZeRO stage 0 or 3 with one
 * micro-batch unless scheduled, and the device_capacity holds at
 * least the work tier and the parts whose home is the device. "move", "drop" and
 * "wait" name a chunk in range and known locations (a move's from differs from its
 * to, and a move from "zero" keeps nothing); where a part is when one runs is the
 * runtime's check (offload.h). They appear only in
 * `step`, `gradnorm` and `update` of an offload program; "on": "host" only on
 * kernels of `gradnorm` and `update` of one. "zero_scheduled" (program.h, "ZeRO
 * inside the step") needs zero_stage 2 or 3, an unscheduled one-stage program
 * (mesh pp 1) and no offload; "zero_gather", "zero_release", "zero_grad" and
 * "zero_reduce" name a parameter in range and appear only in `step` of such a
 * program (the first two only at zero_stage 3). A program that loads can be
 * run without further checks.
 *
 * Scalars. program.h defines scalars [0, RT_SCALARS) for `update` kernels. The
 * runtime passes a longer array, TRAIN_SCALARS values, to every kernel: the five of
 * program.h, then the optimizer hyperparameters after any command-line override
 * (TRAIN_SC_BETA1 ... TRAIN_SC_MOMENTUM), the loss scale (TRAIN_SC_LOSS_SCALE: fp16's,
 * else 1) and whether the update applies (TRAIN_SC_APPLY: 0 on a skipped step). A
 * program whose kernels read them says so
 * with the optional top-level field "scalars": 12 (TRAIN_SCALARS); without it
 * ("scalars": 5, the default) its kernels bake the "train" values in, and the
 * runtime refuses --beta1/--beta2/--eps/--weight-decay values that differ from
 * them instead of silently mixing two sets of hyperparameters.
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_PROGRAM_H
#define COLOSSALC_RUNTIME_TRAIN_PROGRAM_H

#include "program/isa.h"
#include "runtime/program.h"

#include <stddef.h>
#include <stdint.h>

enum {
  TRAIN_SC_BETA1 = RT_SC_BETA1,           /* AdamW beta1 */
  TRAIN_SC_BETA2 = RT_SC_BETA2,           /* AdamW beta2 */
  TRAIN_SC_EPS = RT_SC_EPS,               /* AdamW epsilon */
  TRAIN_SC_WD = RT_SC_WD,                 /* decoupled weight decay (parameters with "decay") */
  TRAIN_SC_MOMENTUM = RT_SC_MOMENTUM,     /* SGD momentum */
  TRAIN_SC_LOSS_SCALE = RT_SC_LOSS_SCALE, /* fp16's loss scale (1 otherwise) */
  TRAIN_SC_APPLY = RT_SC_APPLY,           /* 0 on a step fp16 skips: the update keeps every value */
  TRAIN_SCALARS = RT_SCALARS_ALL
};

#define RT_MAX_DIMS 8

typedef enum RtOptimizer { RT_OPT_ADAMW, RT_OPT_SGD } RtOptimizer;
typedef enum RtSchedule { RT_SCHED_COSINE, RT_SCHED_CONSTANT } RtSchedule;
typedef enum RtInit { RT_INIT_NORMAL, RT_INIT_UNIFORM, RT_INIT_ZEROS, RT_INIT_ONES, RT_INIT_CONSTANT } RtInit;
/* What train fills an input with (program.h, "inputs"). */
typedef enum RtRole { RT_ROLE_TOKENS, RT_ROLE_TARGETS, RT_ROLE_DATA } RtRole;
typedef enum RtDtype { RT_I32, RT_F32 } RtDtype;
/* The instructions and collectives: the shared instruction set (program/isa.h). The
 * ZeRO instructions of a "zero_scheduled" program, in IsaOp order from
 * ISA_ZERO_GATHER (program.h, "ZeRO inside the step"). */
enum { RT_ZERO_OPS = ISA_ZERO_REDUCE - ISA_ZERO_GATHER + 1 };
/* Offload locations (program.h, "Memory tiers and offload"): where a part's bytes
 * are. ZERO is only a move's source, NONE only the grads' home. */
typedef enum RtLoc { RT_LOC_DEVICE, RT_LOC_HOST, RT_LOC_NVME, RT_LOC_ZERO, RT_LOC_NONE, RT_LOCS } RtLoc;
/* A chunk's parts are named by their tier: RT_TIER_PARAMS, RT_TIER_GRADS, RT_TIER_OPT. */
enum { RT_PARTS = 3 };

/* A program's "tag" is below this (program/isa.h). */
#define RT_TAG_LIMIT ISA_TAG_LIMIT

typedef struct RtTrain {
  RtOptimizer optimizer;
  double lr, beta1, beta2, eps, weight_decay, momentum, clip, min_lr;
  int64_t warmup;
  RtSchedule schedule;
  /* "loss_scale" (fp16): dynamic loss scaling as PyTorch's GradScaler */
  int loss_scaling;
  double scale_init, scale_growth, scale_backoff;
  int64_t scale_interval;
} RtTrain;

typedef struct RtParam {
  char *name;
  int ndim;
  int64_t shape[RT_MAX_DIMS]; /* [ndim] */
  int64_t numel;              /* product of shape */
  int64_t offset;             /* bytes, in PARAMS, GRADS and OPT (m; v at opt_v_offset+) */
  int decay;                  /* weight decay applies */
  RtInit init;
  double a, b;       /* normal: std a, mean b; uniform: [a, b); constant: a */
  int tp_dim;        /* split over the tp group along this dimension; -1: replicated */
  int64_t tp_blocks; /* blocks of the split dimension (program.h), 1 when replicated */
  int owner;         /* ZeRO (zero_stage >= 1): the dp rank that owns it; -1 without */
} RtParam;

typedef struct RtInput {
  char *name;
  RtRole role;
  RtDtype dtype;
  int ndim;
  int64_t shape[RT_MAX_DIMS]; /* [batch, ...]: [batch, seq] for tokens and targets */
  int64_t row_elems;          /* elements of one row: the product of shape[1..] */
  int64_t offset;             /* bytes in WORK (an unscheduled program's); -1 in a scheduled
                                 one without it (its "input" instructions place it) */
  int ranged;                 /* i32: every value is in [lo, hi) ... */
  int64_t lo, hi;
  int has_ignore; /* ... or equals ignore */
  int64_t ignore;
} RtInput;

typedef struct RtGemm {
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  int tier[3];          /* a, b, c */
  int64_t offset[3];    /* bytes */
  int64_t batch[2];     /* B0, B1 */
  int64_t stride[3][2]; /* elements, per operand: [s0, s1] */
  int bias;             /* "bias": the epilogue C[i][j] += bias[j] (n f32; beta is 0) */
  int bias_tier;
  int64_t bias_offset; /* bytes */
  int gelu;            /* "gelu": then C[i][j] = gelu(C[i][j]), tanh form (bias; one batch),
                          where the device applies it (Device.gemm_gelu); elsewhere GELU's
                          input goes to aux, or C, for the "epilogue" kernel after it */
  int aux;             /* "aux": GELU's input also written there, m x n, leading dim ldc */
  int aux_tier;
  int64_t aux_offset; /* bytes */
  IsaDtype dt[3];     /* "dtypes": a, b, c (f32 unless given; a and b alike; f32 sums) */
} RtGemm;

/* "comm" over a group: a global A x N x I f32 tensor, N split in T parts (the split
 * kinds, over the tp group). */
typedef struct RtComm {
  IsaCommKind kind;
  IsaGroup group;          /* tp, dp, or the stage group stage_group */
  int stage_group;         /* index in RtProgram.stage_groups */
  int root;                /* broadcast, reduce: a rank of the group */
  IsaRed red;              /* all_reduce: sum or max ("reduction") */
  int tier[2];             /* src, dst */
  int64_t offset[2];       /* bytes (WORK: in the current slot) */
  int64_t outer, n, inner; /* A, N, I */
} RtComm;

/* A kernel's buffer: where its bytes start (program.h, "args"). */
typedef struct RtArg {
  int tier;
  int64_t offset; /* bytes (WORK: in the current slot) */
  int64_t bytes;  /* the buffer's extent */
  int shared;     /* WORK: slot 0's bytes, whatever slot is current */
} RtArg;
#define RT_MAX_ARGS 16

typedef struct RtInstr {
  IsaOp op;
  int kernel;     /* kernel */
  int64_t extent; /* kernel: parallel range [0, extent) */
  int nargs;      /* kernel: its buffers, each passed as tiers[tier] + offset */
  RtArg args[RT_MAX_ARGS];
  int tier;              /* zero; send, recv: the buffer's tier */
  int64_t offset, bytes; /* zero; send, recv (bytes = 4 count); input, loss: WORK offset */
  int64_t index;         /* slot: the slot; input: the micro-batch */
  int input;             /* input: the program's input (RtProgram.inputs) */
  int peer, tag;         /* send, recv: pipeline stage and tag */
  int64_t count;         /* send, recv: floats */
  RtGemm gemm;           /* gemm */
  RtComm comm;           /* comm */
  int chunk, part;       /* move, drop, wait: the chunk and its part (a tier, < RT_PARTS) */
  RtLoc from, to;        /* move: from -> to; drop: the location in from */
  int keep;              /* move: the source keeps its memory and copy */
  int on_host;           /* kernel "on": "host": the host location's PARAMS, GRADS, OPT */
  int epilogue;          /* kernel "epilogue": the GELU of the "gelu" GEMM before it, skipped
                            on a device whose GEMMs apply it (Device.gemm_gelu) */
  int param;             /* zero_gather, zero_release, zero_grad, zero_reduce: the parameter */
  int dp_rank, tp_rank;  /* kernel, gemm, zero: run only where the rank's coordinate is
                            this ("dp_rank", "tp_rank"); -1: everywhere */
  int last_mb;           /* "last_microbatch": in `step`, run on the step's last micro-batch only */
  int overlap;           /* comm "overlap": may run beside what follows in the list */
} RtInstr;

typedef struct RtList {
  RtInstr *instr; /* [n] */
  int n;
  int sends;        /* the list holds a "send" (the runtime completes them after it) */
  const char *name; /* "step", "sync", "gradnorm", "update", "forward" (messages); may be NULL */
} RtList;

/* One offload chunk: parameters [lo, hi) and the byte range its parts cover. */
typedef struct RtChunk {
  int lo, hi;           /* parameters, program order */
  int64_t start, end;   /* [start, end) of PARAMS and GRADS; of OPT (and, AdamW, OPT
                           at opt_v_offset + the range) */
  RtLoc home[RT_PARTS]; /* params and opt: device, host or nvme; grads: none */
  int owner;            /* ZeRO-3: the dp rank holding it at its homes; -1: every rank */
} RtChunk;

/* "offload" (program.h); on = 0 for a program without it. */
typedef struct RtOffload {
  int on;
  int64_t device_capacity; /* bytes the four tiers may hold on the device at once */
  RtChunk *chunks;         /* [nchunks], in tier order, covering every byte */
  int nchunks;
  int has_predicted;       /* "predicted" given: */
  int64_t (*predicted)[4]; /* [npredicted]: device_peak, host_peak, nvme_peak,
                              transfer_bytes of each dp rank (ZeRO-3), or of all (one) */
  int npredicted;
} RtOffload;

/* The mesh of program.h: data-, tensor- and pipeline-parallel group sizes. */
typedef struct RtMesh {
  int64_t dp; /* 0: any */
  int64_t tp, pp;
} RtMesh;

typedef struct RtProgram {
  int version;
  char *model;
  char *arch; /* "arch" as JSON text (runtime/program.h; runtime/hf.h reads it), or NULL */
  int64_t batch, seq, vocab;
  int64_t microbatches;    /* runs of `step` per step, each on `batch` rows (default 1) */
  int64_t dp;              /* data-parallel ranks the plan was made for (0: any) */
  int64_t zero_stage;      /* the plan's ZeRO stage (default 0) */
  int zero_scheduled;      /* `step` holds ZeRO's gathers and reductions (program.h) */
  int64_t tiers[RT_TIERS]; /* bytes */
  int64_t opt_v_offset;
  RtTrain train;
  RtParam *params; /* [nparams] */
  int nparams;
  int64_t param_elems; /* sum of numel */
  RtInput *inputs;     /* [ninputs] */
  int ninputs;
  int tokens, targets; /* the inputs with those roles, -1 for none */
  int64_t loss_offset, logits_offset, gradnorm_offset, gradnorm_parts;
  IsaDtype logits_dtype; /* f32, bf16 or f16 */
  struct {
    int64_t offset, rows, width; /* this program's states: rows x width f32 at offset of WORK */
    int64_t total;               /* the model's (all stages') */
    int64_t (*runs)[3];          /* [nruns] {model row, this program's row, count} */
    int nruns;
  } fp8; /* "fp8": the scaling states (rows 0: none) */
  double flops_per_step;
  int nscalars; /* RT_SCALARS, or TRAIN_SCALARS when kernels read the hyperparameters */
  int nkernels;
  char **kernel_names;   /* [nkernels] */
  int (*cuda_launch)[2]; /* [nkernels] threads per block and blocks of each CUDA kernel, or NULL */
  RtList step, sync, gradnorm, update, forward;
  RtMesh mesh;        /* the same in every stage */
  int nstage_groups;  /* "stage_groups": groups of pipeline stages, the same in every stage */
  int **stage_groups; /* [nstage_groups][pp + 1]: count, then the stages ascending */
  int stage;          /* this program's pipeline stage, in [0, mesh.pp) */
  int scheduled;      /* `step` walks all micro-batches itself (input/loss instructions) */
  int64_t slots;      /* WORK is slots x tiers[RT_TIER_WORK] bytes (default 1) */
  RtOffload offload;
  int64_t *predicted_mem; /* [npredicted_mem] "predicted_memory": a step's device memory
                             per dp rank (1 value without ZeRO), or NULL */
  int npredicted_mem;
} RtProgram;

/* Parses and validates json (one program object) against a kernel table of
 * nkernels entries. 0, or -1 with a message naming the field ("params[0].shape:
 * ..."). On error *p is freed. */
int program_load(const char *json, int nkernels, RtProgram *p, char *err, size_t errlen);
void program_free(RtProgram *p);

/* The same for a pipeline: json is one object (*nstages = 1) or an array of
 * mesh.pp stage objects, element s with "stage": s ("[1].params[0].shape: ..." on
 * error). Stages must agree on the model, mesh, batch, seq, vocab, micro-batches,
 * "scheduled" and "train", and a parameter held by several stages (tied) must have
 * the same shape, split, init and decay in each. *stages is an array of
 * *nstages programs, freed by program_free_stages. */
int program_load_stages(const char *json, int nkernels, RtProgram **stages, int *nstages, char *err, size_t errlen);
void program_free_stages(RtProgram *stages, int nstages);

/* The global shape of q (its "tp" dimension T times longer) into shape. */
void program_global_shape(const RtProgram *p, const RtParam *q, int64_t *shape);

/* Bytes of part (a tier < RT_PARTS) of chunk c: its range, twice for AdamW's OPT. */
int64_t program_part_bytes(const RtProgram *p, int c, int part);
/* The byte ranges of the part in its tier: n (0, 1 or 2) offsets into off, each of
 * the chunk's end - start bytes (0: SGD without momentum has no optimizer state). */
int program_part_ranges(const RtProgram *p, int c, int part, int64_t off[2]);
/* "device", "host", ... */
extern const char *const rt_loc_names[RT_LOCS];
extern const char *const rt_part_names[RT_PARTS];

/* The parameter called name, or NULL. */
const RtParam *program_find_param(const RtProgram *p, const char *name);

#endif
