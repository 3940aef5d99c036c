/* The partition pass: a plan (plan/search.h) becomes the programs of the ranks.
 *
 * Tensor parallelism. Every tensor-parallel rank runs the same local graph on its part
 * of each tensor: the plan gives every op a strategy (plan/shard.h), so every value a
 * placement on the tensor-parallel axis, R, P or S(d). The local graph has each value
 * at its local shape (S(d): dimension d divided by the group size), the attributes
 * that name sizes rewritten (reshape and broadcast shapes, slice bounds along a split
 * axis, attention and rotary heads), and a collective wherever a consumer needs its
 * input placed otherwise than its producer made it (DESIGN.md, "Shardings are
 * placements"): P->R all_reduce, P->S reduce_scatter, S->R all_gather, R->S split,
 * S->S' both. The backward pass follows from each collective's gradient rule
 * (passes/autodiff.c); a replicated value read by an op whose work was divided (its
 * input gradient is a partial sum there) is read through tp_copy, identity forward and
 * all-reduce backward, once for all such readers, as Megatron-LM's f operator.
 * A parameter is stored as its readers want it (R when they disagree); a split axis
 * may hold blocks, so that a slice of it is every rank's part of that slice (q, k and
 * v of one fused projection, as Megatron-LM lays them out): the block sizes are the
 * coarsest that every slice boundary along the chain of split values allows.
 *
 * Pipeline parallelism. The layers are cut into the plan's chunks; chunk k runs on
 * stage k % pp. A value one chunk computes and a later one reads is a Boundary: the
 * producer lists it in its graph's outs and the reader gets it as an input (its wrt,
 * whose gradient autodiff returns), and when a gradient flows back the producer is
 * seeded with it (seed_grad, an input). Parameters are cloned into every chunk that
 * reads them, under their own names, so a tied one is held by several stages.
 *
 * The driver then decomposes each chunk graph (pass_decompose) and differentiates
 * them (partition_autodiff), the last chunk first (its boundary gradients decide the
 * earlier chunks' seeds). The one-rank plan (no plan, or tp 1 and pp 1) is the
 * trivial partition: the graph itself is the one chunk. */
#ifndef COLOSSALC_PARTITION_H
#define COLOSSALC_PARTITION_H
#include "plan/search.h"

/* A value chunk `from` sends chunk `to`, and its gradient the other way. */
typedef struct Boundary {
  int from, to;
  int out;       /* index in the producer's graph outs */
  int wrt;       /* index in the reader's graph wrt */
  int seed;      /* index in the producer's seed_grad; -1 when no gradient flows back */
  int64_t count; /* f32 elements on one rank */
} Boundary;

typedef struct Partition {
  int tp, pp, v;
  int nchunks;
  Graph **chunk; /* [nchunks] chunk graphs, model order (the passes replace them) */
  int nbound;
  Boundary *bound;
} Partition;

/* requires: g verified, the forward graph of the plan's micro-batch, with the same
 * nodes as the graph the plan was searched on (r->pm->g); r and plan NULL for the
 * one-rank plan. The chunks are forward graphs, verified. Errors go through
 * error_plain / error_at. */
Partition *pass_partition(Graph *g, const PlanResult *r, const Plan *plan);

/* requires: each chunk decomposed (pass_decompose). Seeds each chunk with the
 * gradients of the values later chunks read, then differentiates it (pass_autodiff),
 * the last chunk first; verifies each. */
void partition_autodiff(Partition *part);

#endif
