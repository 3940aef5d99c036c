/* Lowering: a differentiated graph becomes a Program — kernels in the kernel form
 * (codegen/kernel.h), GEMM calls, and the instruction lists of runtime/program.h —
 * with every buffer placed by the memory plan.
 *
 * Fusion is by inlining: elementwise ops (and embedding lookups, broadcasts, rotary)
 * are expressions that their consumers compute in their own loops; a value becomes a
 * buffer only when a GEMM or a view needs memory, when several ops read it, or when
 * it is an output. Reductions and normalisations are kernels of their own. Views
 * (reshape, transpose, slice, broadcast) of buffers are strides, not copies. */
#ifndef COLOSSALC_LOWER_H
#define COLOSSALC_LOWER_H
#include "codegen/kernel.h"
#include "ir/ir.h"

typedef enum { PI_KERNEL, PI_GEMM, PI_ZERO } PInstrKind;

typedef struct PGemm {
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  int tier[3];              /* a, b, c */
  int64_t off[3];           /* bytes */
  int64_t batch[2];
  int64_t stride[3][2];     /* elements per batch step, for a, b, c */
} PGemm;

typedef struct PInstr {
  PInstrKind kind;
  int kernel;               /* PI_KERNEL */
  int64_t extent;           /* PI_KERNEL */
  PGemm gemm;               /* PI_GEMM */
  int tier;                 /* PI_ZERO */
  int64_t offset, bytes;    /* PI_ZERO */
  int node;                 /* the IR node this computes (for the forward subset) */
} PInstr;

typedef struct PSeq { PInstr *v; int n, cap; } PSeq;

typedef struct PParam { const Node *node; int64_t offset; bool decay; } PParam;
typedef enum { PIN_TOKENS, PIN_TARGETS, PIN_OTHER } PInputRole;
typedef struct PInput { const Node *node; int64_t offset; PInputRole role; } PInput;

typedef struct Program {
  Arena *arena;
  const Graph *g;
  Kernel **kernels;
  int nkernels, kernels_cap;
  PSeq step, gradnorm, update, forward;
  int64_t tiers[4];
  int64_t opt_v_offset;
  PParam *params;
  int nparams;
  PInput *inputs;
  int ninputs;
  int64_t loss_offset, logits_offset, gradnorm_offset, gradnorm_parts;
  int64_t batch, seq, vocab;
  int64_t microbatches;     /* runs of `step` per training step (gradient accumulation) */
  int64_t dp, zero_stage;   /* the plan's data-parallel ranks (0: any) and ZeRO stage */
  double flops_per_step;
  int64_t work_peak;        /* bytes of the work tier: the memory plan's peak */
} Program;

/* requires: pass_decompose, pass_autodiff. Errors (an op the code generators do
 * not support yet) are reported at the op's source location. */
Program *lower_program(Graph *g);

/* The program as JSON (runtime/program.h); malloc'd. */
char *program_to_json(const Program *p);

#endif
