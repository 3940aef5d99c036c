/* train_program: the compiled program (runtime/program.h) parsed from its JSON into
 * plain structs, validated once at start-up so nothing later re-checks a field.
 *
 * Validation covers every field of the schema in program.h: presence and type
 * (a missing or ill-typed field is an internal error naming it, e.g.
 * "params[1].shape[0]"), value ranges (positive sizes, known enum strings), and
 * bounds: every parameter, input, loss, logits and gradnorm slot, every "zero"
 * range and every byte a "gemm" reads or writes lies inside its tier, and every
 * kernel id is below colossalc_nkernels. The parallel instructions of program.h
 * are checked the same way: every WORK range within one slot, slot and micro-batch
 * indices in range, pipeline peers in [0, pp), tags below RT_TAG_LIMIT, "comm"
 * geometry (n divisible by tp, src and dst apart except for all_reduce); "input"
 * and "loss" only in `step` of a scheduled program. A program that loads can be
 * run without further checks.
 *
 * Scalars. program.h defines scalars [0, RT_SCALARS) for `update` kernels. The
 * runtime passes a longer array, TRAIN_SCALARS values, to every kernel: the five of
 * program.h, then the optimizer hyperparameters after any command-line override
 * (TRAIN_SC_BETA1 ... TRAIN_SC_MOMENTUM). A program whose kernels read them says so
 * with the optional top-level field "scalars": 10 (TRAIN_SCALARS); without it
 * ("scalars": 5, the default) its kernels bake the "train" values in, and the
 * runtime refuses --beta1/--beta2/--eps/--weight-decay values that differ from
 * them instead of silently mixing two sets of hyperparameters.
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_PROGRAM_H
#define COLOSSALC_RUNTIME_TRAIN_PROGRAM_H

#include "runtime/program.h"

#include <stddef.h>
#include <stdint.h>

enum {
    TRAIN_SC_BETA1 = RT_SC_BETA1,       /* AdamW beta1 */
    TRAIN_SC_BETA2 = RT_SC_BETA2,       /* AdamW beta2 */
    TRAIN_SC_EPS = RT_SC_EPS,           /* AdamW epsilon */
    TRAIN_SC_WD = RT_SC_WD,             /* decoupled weight decay (parameters with "decay") */
    TRAIN_SC_MOMENTUM = RT_SC_MOMENTUM, /* SGD momentum */
    TRAIN_SCALARS = RT_SCALARS_ALL
};

#define RT_MAX_DIMS 8

typedef enum RtOptimizer { RT_OPT_ADAMW, RT_OPT_SGD } RtOptimizer;
typedef enum RtSchedule { RT_SCHED_COSINE, RT_SCHED_CONSTANT } RtSchedule;
typedef enum RtInit { RT_INIT_NORMAL, RT_INIT_UNIFORM, RT_INIT_ZEROS, RT_INIT_ONES,
                      RT_INIT_CONSTANT } RtInit;
typedef enum RtRole { RT_ROLE_TOKENS, RT_ROLE_TARGETS } RtRole;
typedef enum RtOp { RT_OP_KERNEL, RT_OP_ZERO, RT_OP_GEMM, RT_OP_SLOT, RT_OP_INPUT, RT_OP_LOSS,
                    RT_OP_SEND, RT_OP_RECV, RT_OP_COMM, RT_OPS } RtOp;
typedef enum RtCommKind { RT_COMM_ALL_REDUCE, RT_COMM_ALL_GATHER, RT_COMM_REDUCE_SCATTER,
                          RT_COMM_SPLIT, RT_COMM_KINDS } RtCommKind;

/* Tags at or above this are the runtime's own (tied gradients); a program's "tag"
 * is below it. */
#define RT_TAG_LIMIT 16384

typedef struct RtTrain {
    RtOptimizer optimizer;
    double lr, beta1, beta2, eps, weight_decay, momentum, clip, min_lr;
    int64_t warmup;
    RtSchedule schedule;
} RtTrain;

typedef struct RtParam {
    char *name;
    int ndim;
    int64_t shape[RT_MAX_DIMS]; /* [ndim] */
    int64_t numel;              /* product of shape */
    int64_t offset;             /* bytes, in PARAMS, GRADS and OPT (m; v at opt_v_offset+) */
    int decay;                  /* weight decay applies */
    RtInit init;
    double a, b; /* normal: std a, mean b; uniform: [a, b); constant: a */
    int tp_dim;        /* split over the tp group along this dimension; -1: replicated */
    int64_t tp_blocks; /* blocks of the split dimension (program.h), 1 when replicated */
} RtParam;

typedef struct RtInput {
    char *name;
    RtRole role;
    int64_t offset; /* bytes in WORK of an i32 [batch, seq] */
} RtInput;

typedef struct RtGemm {
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    int tier[3];         /* a, b, c */
    int64_t offset[3];   /* bytes */
    int64_t batch[2];    /* B0, B1 */
    int64_t stride[3][2]; /* elements, per operand: [s0, s1] */
} RtGemm;

/* "comm" over the tp group: a global A x N x I f32 tensor, N split in T parts. */
typedef struct RtComm {
    RtCommKind kind;
    int tier[2];       /* src, dst */
    int64_t offset[2]; /* bytes (WORK: in the current slot) */
    int64_t outer, n, inner; /* A, N, I */
} RtComm;

typedef struct RtInstr {
    RtOp op;
    int kernel;     /* kernel */
    int64_t extent; /* kernel: parallel range [0, extent) */
    int tier;       /* zero; send, recv: the buffer's tier */
    int64_t offset, bytes; /* zero; send, recv (bytes = 4 count); input, loss: WORK offset */
    int64_t index;  /* slot: the slot; input: the micro-batch */
    RtRole role;    /* input */
    int peer, tag;  /* send, recv: pipeline stage and tag */
    int64_t count;  /* send, recv: floats */
    RtGemm gemm;    /* gemm */
    RtComm comm;    /* comm */
} RtInstr;

typedef struct RtList {
    RtInstr *instr; /* [n] */
    int n;
    int sends;      /* the list holds a "send" (the runtime completes them after it) */
} RtList;

/* The mesh of program.h: data-, tensor- and pipeline-parallel group sizes. */
typedef struct RtMesh {
    int64_t dp; /* 0: any */
    int64_t tp, pp;
} RtMesh;

typedef struct RtProgram {
    int version;
    char *model;
    int64_t batch, seq, vocab;
    int64_t microbatches;    /* runs of `step` per step, each on `batch` rows (default 1) */
    int64_t dp;              /* data-parallel ranks the plan was made for (0: any) */
    int64_t zero_stage;      /* the plan's ZeRO stage (default 0) */
    int64_t tiers[RT_TIERS]; /* bytes */
    int64_t opt_v_offset;
    RtTrain train;
    RtParam *params; /* [nparams] */
    int nparams;
    int64_t param_elems; /* sum of numel */
    RtInput tokens, targets;
    int64_t loss_offset, logits_offset, gradnorm_offset, gradnorm_parts;
    double flops_per_step;
    int nscalars; /* RT_SCALARS, or TRAIN_SCALARS when kernels read the hyperparameters */
    int nkernels;
    RtList step, gradnorm, update, forward;
    RtMesh mesh;     /* the same in every stage */
    int stage;       /* this program's pipeline stage, in [0, mesh.pp) */
    int scheduled;   /* `step` walks all micro-batches itself (input/loss instructions) */
    int64_t slots;   /* WORK is slots x tiers[RT_TIER_WORK] bytes (default 1) */
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
int program_load_stages(const char *json, int nkernels, RtProgram **stages, int *nstages,
                        char *err, size_t errlen);
void program_free_stages(RtProgram *stages, int nstages);

/* The global shape of q (its "tp" dimension T times longer) into shape. */
void program_global_shape(const RtProgram *p, const RtParam *q, int64_t *shape);

/* The parameter called name, or NULL. */
const RtParam *program_find_param(const RtProgram *p, const char *name);

#endif
