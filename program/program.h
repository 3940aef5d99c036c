/* The compiled program: the whole contract between the compiler and the `train`
 * runtime, as plain data. codegen/program.c writes it (prog_build below) into the object
 * file that `train` is linked from, as one constant blob:
 *     const unsigned char colossalc_program[];   the blob, 64-byte aligned
 *     const int64_t colossalc_program_bytes;     its size
 *     const ProgCpuBuild colossalc_cpu_builds[];  builds of the CPU kernels, best first
 *     const int colossalc_ncpu_builds;
 *     const int colossalc_nkernels;               kernels in each build, by code (ProgCode)
 *     const char colossalc_cuda_source[];         the CUDA C of the same codes (optional)
 * The runtime reads the structs below where they lie in the blob (prog_open): it checks
 * the format's version, the structs' layout (a hash of every field table), the blob's
 * size and a hash of its bytes, and nothing else: the compiler verified the program
 * (codegen/verify.c) before writing it. A damaged or mismatched program is refused in
 * one line. prog_print prints any of it for people (colossalc --emit-program, train
 * --dump-program) from the same field tables.
 *
 * The blob: a ProgHeader, then sections, each an array of one struct (PROG_SECTIONS),
 * 8-byte aligned; a struct names others by their index in their section (a STR field:
 * an offset into STRINGS; -1: none).
 *
 * Stages. A pipeline of pp stages is one program with pp + 1 ProgStage records: record
 * 0 is the model (stage -1: every parameter once, with its global shape, packed in
 * tiers of its own: what checkpoints and parameter files hold), records 1.. the stages.
 * A rank runs its stage's lists; every stage's record repeats the model's values
 * (batch, seq, the mesh, the optimizer's settings).
 *
 * Memory. Four tiers, each one allocation made once at start-up (WORK: work_shared
 * bytes that every slot shares, then `slots` slots of tiers[TIER_WORK] bytes) and
 * zeroed, nothing allocated in the step:
 *     TIER_PARAMS   every parameter, f32, at ProgParam.offset
 *     TIER_GRADS    every parameter's gradient, f32, at the same offset
 *     TIER_OPT      optimizer state: AdamW's m at the parameter's offset and v at
 *                   opt_v_offset + it (SGD's momentum at the offset)
 *     TIER_WORK     inputs, activations and scratch, at offsets from the memory plan
 * A kernel's buffer or an operand names a tier and a byte offset (WORK's relative to the
 * slot a "slot" instruction chose, slot 0 at a list's start; an operand of TIER_SHARED,
 * or a kernel buffer marked shared, relative to the shared region whatever the slot).
 * A pipeline stage keeps in a micro-batch's slot what outlives its forward pass (the
 * stash, the values exchanged) and in the shared region the working set of one pass,
 * as it runs one at a time (codegen/lower.c, lower_stage).
 *
 * Lists. A stage's named lists (ProgStage.list[], PROG_LIST_*), each run whole by the
 * runtime (runtime/executor.h), with the instructions of program/isa.h:
 *   train    one training step, all of it: the micro-batches (each its rows' "input"s,
 *            forward, backward, its "loss"; a pipeline's schedule), the gradients'
 *            zeroing and sums, the gradient norm and its "norm", the update
 *   eval     the micro-batches alone, their "loss"es (validation)
 *   forward  the logits of the token inputs for sampling (none: -1)
 *   gather   ZeRO-3: every parameter this rank does not own brought to it (before
 *            sampling, a checkpoint or the end); release gives them back
 * and lists other lists "call" (a pipeline chunk's forward and backward, a
 * micro-batch's step). The runtime runs train once a step after reading the batch
 * (this rank's rows of every micro-batch: ProgInput), eval once per validation batch.
 *
 * Scalars. Every kernel gets SC_COUNT f32 (ProgKernelFn's scalars):
 *   SC_LR        the learning rate of the step (warm-up, then cosine or constant)
 *   SC_BC1/BC2   AdamW's bias corrections 1 / (1 - beta^t), t the updates made
 *   SC_GSCALE    the gradients' scale: the clip's min(1, clip / (norm + 1e-6)) over
 *                the micro-batches and dp ranks summed, over the loss scale
 *   SC_STEP      t (dropout's and fp8's step)
 *   SC_BETA1 .. SC_MOMENTUM   the optimizer's settings after the command line's
 *   SC_LOSS_SCALE   fp16's loss scale (the backward pass's seed), else 1
 *   SC_APPLY     1, or 0 on a step fp16 skips (an inf or NaN norm: the update keeps
 *                every value)
 * A list starts with the step's values (gradient scale 1); "norm" sets the rest.
 *
 * Ranks. A stage runs on dp x tp ranks of the mesh dp x tp x pp (dp 0: as many as
 * mpirun gives, a multiple of tp x pp); world rank = stage * dp * tp + dp_rank * tp +
 * tp_rank. A parameter with tp_dim >= 0 is split over the tp group along that
 * dimension in tp_blocks blocks (each rank holds its part of every block); under ZeRO
 * (zero_stage 1-3) each parameter has an owner among the dp ranks (its optimizer
 * state, its reduced gradient; at stage 3 its only copy between uses), and the runtime
 * commits only what a rank owns of the tiers ZeRO shards (OPT from stage 1, GRADS from
 * 2, PARAMS at 3); the ZeRO instructions commit the rest where the step needs it.
 *
 * Offload. A stage with offload keeps its parameters, gradients and optimizer state
 * in chunks (ProgChunk) whose parts live at homes on the host or NVMe between steps and
 * come to the device only while its lists need them (move, drop, wait); the device
 * holds at most device_capacity bytes (a plan that would exceed it is an internal
 * error). Its lists end with every part at its home. */
#ifndef COLOSSALC_PROGRAM_PROGRAM_H
#define COLOSSALC_PROGRAM_PROGRAM_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "program/isa.h"

enum { PROG_VERSION = 4 };
enum { PROG_MAX_DIMS = 8, PROG_MAX_INPUTS = 16, PROG_MAX_ARGS = 16 };

/* The scalars' indices (above). */
enum {
  SC_LR,
  SC_BC1,
  SC_BC2,
  SC_GSCALE,
  SC_STEP,
  SC_BETA1,
  SC_BETA2,
  SC_EPS,
  SC_WD,
  SC_MOMENTUM,
  SC_LOSS_SCALE,
  SC_APPLY,
  SC_COUNT
};

/* A CPU kernel: bufs[i] is the address of its buffer i, [lo, hi) its part of the range. */
typedef void (*ProgKernelFn)(char *const *bufs, int64_t lo, int64_t hi, const float *scalars);

/* The tables below are laid out by hand, a row a line. */
/* clang-format off */
/* What train fills an input with: from a token file, a language model's tokens and its
 * targets (the tokens shifted by one); from a record file every input by its name. */
#define PROG_ROLES(X) X(TOKENS, "tokens") X(TARGETS, "targets") X(DATA, "data")
#define PROG_ENUM(name, text) PROG_ROLE_##name,
typedef enum ProgRole { PROG_ROLES(PROG_ENUM) } ProgRole;
#undef PROG_ENUM
/* A parameter's initialiser: normal (std a, mean b), uniform [a, b), zeros, ones,
 * constant a; Philox keyed by (seed, name) (runtime/philox.h). */
#define PROG_INITS(X) \
  X(NORMAL, "normal") X(UNIFORM, "uniform") X(ZEROS, "zeros") X(ONES, "ones") X(CONSTANT, "constant")
#define PROG_ENUM(name, text) PROG_INIT_##name,
typedef enum ProgInit { PROG_INITS(PROG_ENUM) } ProgInit;
#undef PROG_ENUM
#define PROG_OPTIMIZERS(X) X(ADAMW, "adamw") X(SGD, "sgd") X(LAMB, "lamb") /* ir/ir.h's OptKind */
#define PROG_ENUM(name, text) PROG_OPT_##name,
typedef enum ProgOptimizer { PROG_OPTIMIZERS(PROG_ENUM) } ProgOptimizer;
#undef PROG_ENUM
#define PROG_SCHEDULES(X) X(COSINE, "cosine") X(CONSTANT, "constant")
#define PROG_ENUM(name, text) PROG_SCHED_##name,
typedef enum ProgSchedule { PROG_SCHEDULES(PROG_ENUM) } ProgSchedule;
#undef PROG_ENUM
/* What the model's ops say of a kind (its norms, its activation): none, several that
 * differ (mixed), or one kind; in the order of ir/analysis.h's ArchKind. */
#define PROG_ARCHKINDS(X)                                                                           \
  X(ARCH_NONE, "none") X(ARCH_MIXED, "mixed") X(ARCH_LAYERNORM, "layernorm") X(ARCH_RMSNORM, "rmsnorm") \
  X(ARCH_GELU_TANH, "gelu_tanh") X(ARCH_SILU, "silu") X(ARCH_RELU, "relu")
#define PROG_ENUM(name, text) PROG_##name,
typedef enum ProgArchKind { PROG_ARCHKINDS(PROG_ENUM) } ProgArchKind;
#undef PROG_ENUM
/* A stage's named lists (above). */
#define PROG_LISTS(X) X(TRAIN, "train") X(EVAL, "eval") X(FORWARD, "forward") X(GATHER, "gather") X(RELEASE, "release")
#define PROG_LIST_ENUM(name, text) PROG_LIST_##name,
typedef enum ProgListKind { PROG_LISTS(PROG_LIST_ENUM) PROG_NLISTS } ProgListKind;
#undef PROG_LIST_ENUM
extern const char *const prog_role_names[];
extern const char *const prog_init_names[];
extern const char *const prog_opt_names[];
extern const char *const prog_sched_names[];
extern const char *const prog_archkind_names[];
extern const char *const prog_list_names[];

/* ---- the structs (F(S, TYPE, name, dims, count) rows: program/isa.h) -------------------- */

/* A stage (or the model: stage -1). The model's values first, then the stage's. */
#define PROG_STAGE_FIELDS(F, S)                                                                                  \
  F(S, STR, model, , 1)              /* the model's name */                                                     \
  F(S, I64, batch, , 1)              /* rows of a micro-batch */                                                \
  F(S, I64, seq, , 1)                /* the tokens' length, 1 without tokens */                                 \
  F(S, I64, vocab, , 1)              /* the classes the loss scores */                                          \
  F(S, I64, microbatches, , 1)       /* per step, each of batch rows on every dp rank */                        \
  F(S, I64, dp, , 1)                 /* the mesh (dp 0: any number of ranks) */                                 \
  F(S, I64, tp, , 1)                                                                                            \
  F(S, I64, pp, , 1)                                                                                            \
  F(S, I64, zero_stage, , 1)                                                                                    \
  F(S, OPTIMIZER, optimizer, , 1)    /* the model's train directive, the compiler's options */                  \
  F(S, SCHEDULE, schedule, , 1)                                                                                 \
  F(S, F64, lr, , 1)                                                                                            \
  F(S, F64, beta1, , 1)                                                                                         \
  F(S, F64, beta2, , 1)                                                                                         \
  F(S, F64, eps, , 1)                                                                                           \
  F(S, F64, weight_decay, , 1)                                                                                  \
  F(S, F64, momentum, , 1)                                                                                      \
  F(S, F64, clip, , 1)                                                                                          \
  F(S, F64, min_lr, , 1)                                                                                        \
  F(S, I64, warmup, , 1)                                                                                        \
  F(S, I64, loss_scaling, , 1)       /* fp16: dynamic loss scaling as PyTorch's GradScaler, */                  \
  F(S, F64, scale_init, , 1)         /* from scale_init, times backoff after a skipped */                       \
  F(S, F64, scale_growth, , 1)       /* step, times growth after interval good ones */                          \
  F(S, F64, scale_backoff, , 1)                                                                                 \
  F(S, I64, scale_interval, , 1)                                                                                \
  F(S, I64, arch, , 1)               /* 1: what the model's ops say (checkpoint formats, */                     \
  F(S, I64, heads, , 1)              /* runtime/io/hf.h): attention heads (-1 differ), */                       \
  F(S, I64, kv_heads, , 1)           /* key/value heads (-1 differ), */                                         \
  F(S, I64, window, , 1)             /* the window (0 none, -1 differ), */                                      \
  F(S, I64, causal, , 1)             /* causal (1 all, 0 none, -1 some), */                                     \
  F(S, I64, attention_scale, , 1)    /* one gives its own scale, */                                             \
  F(S, ARCHKIND, norm, , 1)          /* the norms' kind and eps, */                                             \
  F(S, F64, norm_eps, , 1)                                                                                      \
  F(S, ARCHKIND, activation, , 1)    /* the activation, */                                                      \
  F(S, F64, rope_theta, , 1)         /* the rotary base (0: none) */                                            \
  F(S, F64, rope_scaling, [4], 4)    /* and its scaling (GraphArch.rope_scaling) */                             \
  F(S, I64, fp8_total, , 1)          /* fp8: the model's scaling states, each fp8_width f32 */                  \
  F(S, I64, fp8_width, , 1)                                                                                     \
  F(S, I64, stage, , 1)              /* -1: the model */                                                        \
  F(S, I64, tiers, [TIERS], TIERS)   /* bytes (WORK: one slot) */                                               \
  F(S, I64, opt_v_offset, , 1)                                                                                  \
  F(S, I64, slots, , 1)              /* WORK slots, one per micro-batch in flight */                            \
  F(S, I64, work_shared, , 1)        /* WORK's bytes before the slots, which they share */                      \
  F(S, I64, staging, , 1)            /* device scratch of the collectives' reorders */                          \
  F(S, I64, norm_parts, , 1)         /* the gradient norm's partial sums ("norm") */                            \
  F(S, I64, trust_ends, , 1)         /* LAMB: INTS[trust_ends]: each parameter's end of the slots of */         \
                                     /* "trust" (program/isa.h), -1: no LAMB */                                 \
  F(S, I64, param0, , 1)             /* params: PARAMS[param0, param0 + nparams) */                             \
  F(S, I64, nparams, , 1)                                                                                       \
  F(S, I64, param_elems, , 1)        /* their elements */                                                       \
  F(S, I64, input0, , 1)             /* the inputs its lists place: INPUTS[input0, ...) */                      \
  F(S, I64, ninputs, , 1)                                                                                       \
  F(S, I64, tokens, , 1)             /* the inputs of those roles, -1: none */                                  \
  F(S, I64, targets, , 1)                                                                                       \
  F(S, I64, logits_offset, , 1)      /* forward's logits, batch x seq x vocab at WORK */                        \
  F(S, DTYPE, logits_dtype, , 1)                                                                                \
  F(S, I64, list, [PROG_NLISTS], PROG_NLISTS) /* the named lists (LISTS index, -1) */                          \
  F(S, I64, fp8_offset, , 1)         /* fp8: this stage's fp8_rows states at TIER_SHARED */                     \
  F(S, I64, fp8_rows, , 1)           /* (slot 0); INTS[fp8_runs]: fp8_nruns triples */                          \
  F(S, I64, fp8_runs, , 1)           /* {the model's row, this stage's, count} */                               \
  F(S, I64, fp8_nruns, , 1)                                                                                     \
  F(S, F64, flops_per_step, , 1)     /* the model's FLOPs of one micro-batch on this stage */                   \
  F(S, I64, peers, , 1)              /* INTS[peers]: the npeers stages it sends to or */                        \
  F(S, I64, npeers, , 1)             /* receives from */                                                        \
  F(S, I64, groups, , 1)             /* INTS[groups]: ngroups stage groups, each its count */                   \
  F(S, I64, ngroups, , 1)            /* then its stages (the same in every stage) */                            \
  F(S, I64, offload, , 1)            /* 1: offload (chunks below) */                                            \
  F(S, I64, capacity, , 1)           /* the device's bytes for the four tiers */                                \
  F(S, I64, nvme, , 1)               /* 1: a home or a move uses NVMe (train --nvme-dir) */                      \
  F(S, I64, host_work, , 1)          /* the most WORK bytes one on_host kernel reads */                         \
  F(S, I64, chunk0, , 1)             /* CHUNKS[chunk0, chunk0 + nchunks) */                                     \
  F(S, I64, nchunks, , 1)                                                                                       \
  F(S, I64, predicted, , 1)          /* INTS[predicted]: offload's device peak, then per */                     \
  F(S, I64, npredicted, , 1)         /* dp rank (npredicted) host peak, nvme peak, bytes moved */                \
  F(S, I64, memory, , 1)             /* INTS[memory]: a step's device memory on each of */                      \
  F(S, I64, nmemory, , 1)            /* nmemory dp ranks (one: all), 0: not predicted */                       \
  F(S, STR, no_sample, , 1)          /* why `train --sample` cannot run it (-1: it can) */                      \
  F(S, I64, overlaps, , 1)           /* 1: a collective overlaps compute ("overlap") */                         \
  F(S, I64, reserved, , 1)           /* the tiers (1 << tier) held in part: ZeRO's, offload's */               \
  F(S, F64, plan_step_s, , 1)        /* the plan's predicted step time (s), 0: compiled without a plan */       \
  F(S, F64, plan_compute_s, , 1)     /* the plan's compute of a step on this stage (s): its micro-batches' */   \
                                     /* forward, backward and recompute, and the update; 0: no plan */          \
  F(S, STR, plan_cluster, , 1)       /* the cluster it was planned for (-1: none) */

/* A parameter of a stage (at its offset in PARAMS, GRADS, OPT) or of the model. */
#define PROG_PARAM_FIELDS(F, S)                                                                     \
  F(S, STR, name, , 1)                                                                              \
  F(S, I64, ndim, , 1)                                                                              \
  F(S, I64, shape, [PROG_MAX_DIMS], PROG_MAX_DIMS) /* this stage's part; the model: global */      \
  F(S, I64, numel, , 1)                            /* a piece's: elements [start, start + numel) */ \
  F(S, I64, start, , 1)                            /* of shape's, whole rows of dimension 0 */      \
  F(S, I64, offset, , 1)                                                                            \
  F(S, I64, decay, , 1)                            /* weight decay applies */                       \
  F(S, INIT, init, , 1)                                                                             \
  F(S, F64, a, , 1)                                                                                 \
  F(S, F64, b, , 1)                                                                                 \
  F(S, I64, tp_dim, , 1)                           /* split over tp along it; -1 replicated */      \
  F(S, I64, tp_blocks, , 1)                        /* blocks of the split dimension */              \
  F(S, I64, owner, , 1)                            /* ZeRO: the dp rank that owns it; -1 */         \
  F(S, I64, global, , 1)                           /* its index among the model's */

/* An input of a stage: 4-byte values, row-major, the rows of one micro-batch; i32 values
 * are checked to lie in [lo, hi) or equal ignore (has_ignore) when ranged. */
#define PROG_INPUT_FIELDS(F, S)                                                                        \
  F(S, STR, name, , 1)                                                                                 \
  F(S, ROLE, role, , 1)                                                                                \
  F(S, I64, is_f32, , 1)                                                                               \
  F(S, I64, ndim, , 1)                                                                                 \
  F(S, I64, shape, [PROG_MAX_DIMS], PROG_MAX_DIMS) /* [batch, ...] */                                 \
  F(S, I64, row_elems, , 1)                                                                            \
  F(S, I64, offset, , 1)                           /* WORK (forward's), -1 */                          \
  F(S, I64, ranged, , 1)                                                                               \
  F(S, I64, lo, , 1)                                                                                   \
  F(S, I64, hi, , 1)                                                                                   \
  F(S, I64, has_ignore, , 1)                                                                           \
  F(S, I64, ignore, , 1)

/* A kernel code (colossalc_kernels[i], its CUDA C function of that name): launched
 * with block threads per block and grid blocks on a GPU. */
#define PROG_CODE_FIELDS(F, S) F(S, STR, name, , 1) F(S, I64, block, , 1) F(S, I64, grid, , 1)
/* A kernel: a code with its buffers, ARGS[arg0, arg0 + nargs). */
#define PROG_KERNEL_FIELDS(F, S) F(S, I64, code, , 1) F(S, I64, arg0, , 1) F(S, I64, nargs, , 1)
/* A kernel's buffer: tier + offset, bytes long (shared: WORK slot 0's). */
#define PROG_ARG_FIELDS(F, S) F(S, TIER, tier, , 1) F(S, I32, shared, , 1) F(S, I64, offset, , 1) F(S, I64, bytes, , 1)
/* A list: INSTRS[first, first + n); sends: it (or a list it calls) sends. */
#define PROG_LIST_FIELDS(F, S) F(S, STR, name, , 1) F(S, I64, first, , 1) F(S, I64, n, , 1) F(S, I64, sends, , 1)
/* An offload chunk: parameters [lo, hi) of its stage, bytes [start, end) of PARAMS and
 * GRADS (and of OPT, and AdamW's OPT + opt_v_offset); home of each part; owner: under
 * ZeRO-3 the one dp rank holding it between steps, else -1. */
#define PROG_CHUNK_FIELDS(F, S)                                                                     \
  F(S, I64, lo, , 1)                                                                                \
  F(S, I64, hi, , 1) F(S, I64, start, , 1) F(S, I64, end, , 1) F(S, LOC, home, [PART_COUNT], PART_COUNT) \
      F(S, I64, owner, , 1)

#define PROG_DECL_STRUCT(type, fields) \
  typedef struct type {                \
    fields(ISA_DECL, type)             \
  } type;
PROG_DECL_STRUCT(ProgStage, PROG_STAGE_FIELDS)
PROG_DECL_STRUCT(ProgParam, PROG_PARAM_FIELDS)
PROG_DECL_STRUCT(ProgInput, PROG_INPUT_FIELDS)
PROG_DECL_STRUCT(ProgCode, PROG_CODE_FIELDS)
PROG_DECL_STRUCT(ProgKernel, PROG_KERNEL_FIELDS)
PROG_DECL_STRUCT(ProgArg, PROG_ARG_FIELDS)
PROG_DECL_STRUCT(ProgList, PROG_LIST_FIELDS)
PROG_DECL_STRUCT(ProgChunk, PROG_CHUNK_FIELDS)
#undef PROG_DECL_STRUCT

/* X(NAME, struct): the sections of the blob, in order. */
#define PROG_SECTIONS(X)  \
  X(STAGES, ProgStage)    \
  X(PARAMS, ProgParam)    \
  X(INPUTS, ProgInput)    \
  X(CODES, ProgCode)      \
  X(KERNELS, ProgKernel)  \
  X(ARGS, ProgArg)        \
  X(INSTRS, IsaInstr)     \
  X(LISTS, ProgList)      \
  X(CHUNKS, ProgChunk)    \
  X(INTS, int64_t)        \
  X(STRINGS, char)
/* clang-format on */
#define PROG_SEC_ENUM(name, type) PROG_SEC_##name,
typedef enum ProgSectionKind { PROG_SECTIONS(PROG_SEC_ENUM) PROG_NSECTIONS } ProgSectionKind;
#undef PROG_SEC_ENUM

typedef struct ProgSection {
  int64_t offset, count; /* bytes from the blob's start; records */
} ProgSection;

typedef struct ProgHeader {
  char magic[8];    /* "colossal" */
  uint32_t version; /* PROG_VERSION */
  uint32_t layout;  /* prog_layout(): the structs' sizes and fields */
  int64_t bytes;    /* the whole blob */
  uint64_t hash;    /* prog_hash: FNV-1a (64-bit) of the whole blob, this field as 0 */
  ProgSection sec[PROG_NSECTIONS];
} ProgHeader;

/* ---- reading -------------------------------------------------------------------------- */

/* A program as the runtime reads it: pointers into the blob, and one stage's view. */
typedef struct Prog {
  const ProgHeader *h;
  const ProgStage *stages; /* [nstages]: the model, then each stage */
  int nstages;
  const ProgStage *s;      /* this view's record */
  const ProgParam *params; /* [s->nparams] */
  const ProgInput *inputs; /* [s->ninputs] */
  const ProgChunk *chunks; /* [s->nchunks] */
  const ProgCode *codes;
  const ProgKernel *kernels;
  const ProgArg *args;
  const IsaInstr *instrs;
  const ProgList *lists;
  const int64_t *ints;
  const char *strings;
  int64_t count[PROG_NSECTIONS]; /* records of each section */
} Prog;

/* The moments a stage's optimizer keeps per element in TIER_OPT (ir/ir.h's train_moments):
 * m, then v at opt_v_offset. */
static inline int prog_moments(const ProgStage *s) { return s->optimizer == PROG_OPT_SGD ? s->momentum > 0 : 2; }

/* The tiers (bit 1 << tier) a stage holds in part, which the runtime reserves as
 * address space (ProgStage.reserved, written by the compiler): an offload program's
 * PARAMS, GRADS and OPT (at their homes); else ZeRO's OPT from stage 1, GRADS from 2
 * (the step creates and reduces the others' gradients), PARAMS at 3. */
static inline int64_t prog_reserved_tiers(int64_t zero_stage, int offload) {
  if (offload) return 1 << TIER_PARAMS | 1 << TIER_GRADS | 1 << TIER_OPT;
  return (zero_stage >= 1 ? 1 << TIER_OPT : 0) | (zero_stage >= 2 ? 1 << TIER_GRADS : 0) |
         (zero_stage >= 3 ? 1 << TIER_PARAMS : 0);
}

/* FNV-1a over the blob's 64-bit words, the header's hash as 0 (ProgHeader.hash). */
uint64_t prog_hash(const void *blob, int64_t bytes);
/* The hash of every struct's layout: sizes, field names, types and offsets. */
uint32_t prog_layout(void);
/* Checks blob (bytes long): magic, version, layout, size, hash, each section within the
 * blob and aligned, the strings NUL-terminated, at least one stage. 0 and *p the model's
 * view, or -1 with one line in err ("the program ...: ..."). */
int prog_open(const void *blob, int64_t bytes, Prog *p, char *err, size_t errlen);
/* The view of stage s (0 .. pp-1), or of the model (s -1). */
Prog prog_stage(const Prog *p, int s);
/* A STR field's text ("" for -1). */
const char *prog_str(const Prog *p, int64_t off);
/* The list of stage view p named k, or NULL. */
const ProgList *prog_list(const Prog *p, ProgListKind k);
/* The parameter of p called name, or NULL. */
const ProgParam *prog_find_param(const Prog *p, const char *name);
/* The byte ranges of a chunk's part in its tier: n (0, 1 or 2) offsets into off, each
 * of the chunk's end - start bytes (AdamW's OPT: m's and v's; SGD without momentum: 0). */
int prog_part_ranges(const Prog *p, const ProgChunk *c, int part, int64_t off[2]);

/* The whole program for people: every stage, its parameters, inputs, kernels and lists,
 * one instruction a line, every field by name (the field tables). */
void prog_print(FILE *f, const Prog *p);

/* ---- writing -------------------------------------------------------------------------- */

/* Sections filled in any order (records appended; their index returned), then
 * prog_build_finish lays them out, hashes them and returns the malloc'd blob. */
typedef struct ProgBuild ProgBuild;
ProgBuild *prog_build_new(void);
/* Appends n records to the section; returns the first one's index. */
int64_t prog_build_add(ProgBuild *b, ProgSectionKind sec, const void *records, int64_t n);
/* Appends a string (NUL-terminated) to STRINGS; returns its offset (-1 for NULL). */
int64_t prog_build_str(ProgBuild *b, const char *s);
/* The section's records so far (valid until the next add to it), and their count. */
void *prog_build_at(ProgBuild *b, ProgSectionKind sec, int64_t index);
int64_t prog_build_count(const ProgBuild *b, ProgSectionKind sec);
/* The blob (malloc'd, *bytes long); frees b. NULL when out of memory. */
void *prog_build_finish(ProgBuild *b, int64_t *bytes);
void prog_build_free(ProgBuild *b);
/* The blob as C source defining colossalc_program and colossalc_program_bytes (for
 * programs written by hand in tests). 0, or -1 when the write fails. */
int prog_write_c(FILE *f, const void *blob, int64_t bytes);

/* One build of the CPU kernels: its name for people, the CPU features it uses
 * (program/cpu.h's names, comma-separated; "": any CPU of the architecture), and its
 * kernels, by code. `train` calls the first build whose features its CPU has. */
typedef struct ProgCpuBuild {
  const char *name, *features;
  const ProgKernelFn *kernels;
} ProgCpuBuild;

/* The symbols `train` is linked with (above). */
extern const unsigned char colossalc_program[];
extern const int64_t colossalc_program_bytes;
extern const ProgCpuBuild colossalc_cpu_builds[];
extern const int colossalc_ncpu_builds;
extern const int colossalc_nkernels;
extern const char colossalc_cuda_source[] __attribute__((weak));

#endif
