/* The pass pipeline's passes. Each takes the graph and rewrites or annotates it; the
 * driver runs them in order, with the verifier between them in debug builds. */
#ifndef COLOSSALC_PASSES_H
#define COLOSSALC_PASSES_H
#include "ir/ir.h"

/* requires: a verified forward graph. Rewrites composite ops that a backend has no
 * fused kernel for into primitive ops: attention into GEMMs and a softmax, or with
 * FUSE_ATTENTION into flash_attention; with FUSE_CLASSIFIER, the cross-entropy of a
 * GEMM read by nothing else becomes classifier_ce. Returns the new graph. */
enum { FUSE_ATTENTION = 1, FUSE_CLASSIFIER = 2 };
Graph *pass_decompose(Graph *g, unsigned fuse);

/* requires: a verified forward graph of one stage, no composite ops (decompose).
 * Mixed precision in `low` (DT_BF16, DT_F16): casts around every op by its
 * OPF_LOWP / OPF_F32 flag, as torch.autocast's CUDA policy (passes/autocast.c).
 * Returns the new graph. */
Graph *pass_autocast(Graph *g, DType low);
/* bf16 with the linear layers' GEMMs in fp8, delayed scaling over `history` steps with
 * `margin`, the classifier's GEMM too when `classifier` (passes/autocast.c). */
Graph *pass_autocast_fp8(Graph *g, int history, int margin, bool classifier);

/* requires: a verified forward graph with a loss, no composite ops (decompose).
 * Appends the backward pass: the gradient of the loss with respect to every
 * parameter (Graph.params, Graph.param_grads), built from each op's gradient rule. */
void pass_autodiff(Graph *g);

#endif
