/* Activation recompute (activation checkpointing) as a pass over a differentiated
 * graph, and the choice of what to recompute under a memory budget.
 *
 * A layer (Graph.layers: one `repeat` iteration) is recomputed in one of two ways:
 *  - full: the forward values of the layer that its backward nodes read are computed
 *    again, from the values the layer takes from outside (the previous layer's
 *    output, parameters, inputs, constants: those stay kept), just before the first
 *    backward node of the layer; its backward nodes read the clones;
 *  - attention core (Megatron-LM's selective recompute): for each softmax of the
 *    layer, the core is the softmax, the scaling between it and the score GEMM, and
 *    the GEMM q·kᵀ (ir_attn_core, ir/analysis.h); the [B, H, S, T] scores and
 *    probabilities are recomputed from q and k instead of being kept.
 * Whatever the mode, a gathered activation that a layer's backward reads (an all_gather
 * over the tensor-parallel group, its copies and views: sequence parallelism's input of
 * a split GEMM) is gathered again before the layer's backward from the shard, which
 * stays, as Megatron-LM does. The originals are then read only by forward nodes, so
 * the memory plan frees them when the forward pass is done. Clones are backward-part nodes (ids >= n_forward)
 * with the layer and source location of their originals. Dropout masks are a
 * counter hash of (seed, step, element) (ir/rand.h), so recompute changes memory,
 * never values.
 *
 * The choice (recompute_choose) is a dynamic program over the layer chain, as
 * rotor (Beaumont et al. 2019) does, with the memory model documented at
 * RecomputeStats. */
#ifndef COLOSSALC_RECOMPUTE_H
#define COLOSSALC_RECOMPUTE_H
#include "ir/ir.h"

typedef enum { RCL_KEEP, RCL_ATTN, RCL_FULL, RCL_COUNT } RcLayer;
extern const char *const rc_layer_names[RCL_COUNT]; /* "keep", "attention core", "full" */

/* The forward nodes that mode recomputes in each layer: rc[i] for node i, [g->n_forward].
 * requires: pass_autodiff. */
void recompute_mark(const Graph *g, const RcLayer *mode, bool *rc);

/* requires: pass_autodiff (and pass_decompose for the attention core); mode [g->nlayers].
 * Returns the graph with the clones (a new graph in g's arena; g is left as it was), or
 * g itself when nothing is recomputed.
 * Graph.params, param_grads, loss, seed_out, seed_grad, wrt, wrt_grads and outs are
 * carried over. */
Graph *pass_recompute(Graph *g, const RcLayer *mode);

/* Forward FLOPs (node_cost) of the nodes mode recomputes: what the clones add. */
double recompute_flops(const Graph *g, const RcLayer *mode);

/* The memory model of the choice, per layer l and mode m, in bytes:
 *   keep[l][m]   values of layer l that stay alive from the forward pass to the
 *                backward of layer l: the forward values of l that backward nodes
 *                read and that m does not recompute (under full, only what other
 *                layers' backward reads, the layer's output);
 *   trans[l][m]  what m recomputes that the backward reads (keep[l][keep] - keep[l][m]),
 *                plus the largest recomputed value it does not read (scratch while
 *                the recompute runs): alive only during the backward of layer l;
 *   flops[l][m]  the forward FLOPs m recomputes.
 * Bytes are the buffers' (a view counts as the value it views, once).
 * Backward runs the layers last to first; while layer j's backward runs, the kept
 * values of layers 0..j and layer j's recomputed ones are alive (those of the layers
 * above are freed), so the predicted peak of a choice is
 *   base + max_j ( sum_{l<=j} keep[l][m_l] + trans[j][m_j] )
 * where base, what is alive whatever the choice (inputs, the part after the layers,
 * logits and their gradient, the working set of a backward, fragmentation), is
 * calibrated against the memory plan (recompute_choose): the smaller of the two
 * values that make the model exact for nothing recomputed and for every layer
 * recomputed. */
typedef struct RecomputeStats {
  int nlayers;
  bool *has_attn;                                                      /* [nlayers] the layer has an attention core */
  double (*keep)[RCL_COUNT], (*trans)[RCL_COUNT], (*flops)[RCL_COUNT]; /* [nlayers] */
  double base;
} RecomputeStats;

/* requires: pass_autodiff. base is left 0. */
RecomputeStats *recompute_stats(const Graph *g);
/* The model's peak for a choice. */
double recompute_model_peak(const RecomputeStats *st, const RcLayer *mode);
/* The DP: the choice of least recomputed FLOPs whose model peak is at most budget
 * (ties: the smaller peak). Returns false when none fits; mode [nlayers]. */
bool recompute_dp(const RecomputeStats *st, double budget, RcLayer *mode);

/* The work-tier peak of a differentiated graph as the memory plan places it
 * (the driver lowers it: codegen/lower.c); passes do not reach into codegen. */
typedef int64_t (*RecomputeMeasure)(Graph *g, void *ctx);

typedef struct RecomputeChoice {
  RcLayer *mode;    /* [nlayers] */
  int64_t peak;     /* the measured work peak of the chosen graph (bytes) */
  double predicted; /* the model's peak (bytes) */
  double flops;     /* forward FLOPs recomputed */
  Graph *graph;     /* the graph with the choice applied */
  int rounds;       /* DP runs (each after the first follows a measured overshoot) */
} RecomputeChoice;

/* The layers to recompute so that the work peak is at most budget bytes, with the
 * fewest recomputed FLOPs. Nothing recomputed and every layer recomputed are measured
 * first (the first returned as is when it fits; the second is the least memory: a
 * budget below it is an error, error_plain, naming that peak and the budget in MiB,
 * and the fallback). Then the DP on the model; its choice is measured, and when it
 * overshoots, the DP runs again with the budget less the overshoot (at most 8 runs).
 * The result is the measured choice that fits with the fewest FLOPs.
 * requires: pass_autodiff. */
void recompute_choose(Graph *g, int64_t budget, RecomputeMeasure measure, void *ctx, RecomputeChoice *out);

/* One line describing a choice: "full: h.0-h.11; attention core: none" (arena). */
const char *recompute_describe(Arena *a, const Graph *g, const RcLayer *mode);

#endif
