/* train_program: the compiled program (runtime/program.h) parsed from its JSON into
 * plain structs, validated once at start-up so nothing later re-checks a field.
 *
 * Validation covers every field of the schema in program.h: presence and type
 * (a missing or ill-typed field is an internal error naming it, e.g.
 * "params[1].shape[0]"), value ranges (positive sizes, known enum strings), and
 * bounds: every parameter, input, loss, logits and gradnorm slot, every "zero"
 * range and every byte a "gemm" reads or writes lies inside its tier, and every
 * kernel id is below colossalc_nkernels. A program that loads can be run without
 * further checks.
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
typedef enum RtOp { RT_OP_KERNEL, RT_OP_ZERO, RT_OP_GEMM } RtOp;

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

typedef struct RtInstr {
    RtOp op;
    int kernel;     /* kernel */
    int64_t extent; /* kernel: parallel range [0, extent) */
    int tier;       /* zero */
    int64_t offset, bytes; /* zero */
    RtGemm gemm;    /* gemm */
} RtInstr;

typedef struct RtList {
    RtInstr *instr; /* [n] */
    int n;
} RtList;

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
} RtProgram;

/* Parses and validates json against a kernel table of nkernels entries. 0, or -1
 * with a message naming the field ("params[0].shape: ..."). On error *p is freed. */
int program_load(const char *json, int nkernels, RtProgram *p, char *err, size_t errlen);
void program_free(RtProgram *p);

/* The parameter called name, or NULL. */
const RtParam *program_find_param(const RtProgram *p, const char *name);

#endif
