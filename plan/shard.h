/* Intra-op sharding: the placement of every tensor on the tensor-parallel mesh axis
 * and the strategy of every op, chosen by an exact dynamic program.
 *
 * A tensor is, along the tensor-parallel axis, R (replicated), P (partial sums
 * pending) or S(d) (split along dimension d) (DESIGN.md, "Shardings are
 * placements"). Each op has legal strategies, from its op-table rule (shard_<name>):
 * for a matmul replicated, split-m, column (split n), row (split k, output P) and
 * batch splits; for elementwise ops any split its inputs allow, and P for the
 * linear ones; for norms any split but the normalised axis; vocab-parallel
 * embedding and cross-entropy; attention by heads, batch or queries. A change of
 * placement between producer and consumer is a collective (P→R all-reduce, P→S
 * reduce-scatter, S→R all-gather, S→S all-to-all) and so is its conjugate in the
 * backward pass; both are priced with plan/cost.c.
 *
 * The graph is cut into segments: the ops before the first layer, one segment per
 * layer (a `repeat` iteration: where pipelines cut), the ops after the last. Within
 * a segment the program walks the ops in order with, as state, the placements of
 * the live tensors (the frontier: the residual stream and the tensor being built,
 * at most four tensors in a transformer layer); across segments it chains the
 * per-segment tables (boundary placement in → out) over the layer chain. Segments
 * with the same structure (all layers of a `repeat`) are solved once. docs/plan.md
 * says why a DP rather than an ILP. */
#ifndef COLOSSALC_PLAN_SHARD_H
#define COLOSSALC_PLAN_SHARD_H
#include <stdint.h>
#include "ir/arena.h"
#include "ir/ir.h"
#include "plan/cluster.h"
#include "plan/cost.h"

enum { PL_R = 0, PL_P = 1, PL_S0 = 2, PL_COUNT = PL_S0 + MAX_DIMS };
/* "R", "P", "S(1)" */
const char *placement_name(int pl, char buf[16]);

typedef enum { ATTN_FUSED, ATTN_MATERIALIZED } AttnKernel;
extern const char *const attn_kernel_names[2];

typedef enum { SEG_BEFORE, SEG_LAYER, SEG_AFTER } SegKind;

typedef struct Segment {
  int lo, hi; /* node range [lo, hi) in graph order */
  SegKind kind;
  int layer;      /* Graph.layers index (SEG_LAYER), else -1 */
  int sig;        /* segments with equal sig have the same structure */
  int nin, *in;   /* [nin] tensors live on entry (node ids, ascending) */
  int nout, *out; /* [nout] live on exit */
  int nops, *ops; /* [nops] computed nodes, in order */
} Segment;

/* What the plan needs to know about a graph, computed once. */
typedef struct PlanModel {
  const Graph *g;
  int64_t batch;          /* global batch: dimension 0 of the inputs */
  int *bdim;              /* [g->n] batch dimension of each tensor, or -1 */
  bool *bdep;             /* [g->n] its size scales with the batch */
  int *nuse, **use;       /* [g->n] consumers of each node, in graph order */
  int *saver;             /* [g->n] the op that keeps the tensor for backward, or -1 */
  bool *rc_full, *rc_sel; /* [g->n] run again under full / selective recompute (pass_recompute) */
  Segment *seg;           /* [nseg] before, layers..., after (before/after may be empty) */
  int nseg, nsig;
  int first_layer_seg, nlayer_segs;
  double params;            /* parameter elements */
  const char *const *force; /* [g->n] forced strategies, or NULL (they split signatures) */
} PlanModel;

/* force: the strategies a plan forces per op (ShardCtx.force), or NULL. */
PlanModel *plan_model_new(Arena *a, const Graph *g, const char *const *force);

/* What prices a sharding: the mesh axis, the micro-batch, the precision. */
typedef struct ShardCtx {
  const PlanModel *pm;
  const Cluster *cl;
  int t;   /* tensor-parallel degree */
  int mbs; /* micro-batch size (sequences) */
  Recompute rc;
  AttnKernel attn;
  double act_bytes;         /* bytes of an activation element: 2 (bf16) or 4 (fp32) */
  double comm_bytes;        /* ... of a collective's or a pipeline message's: 2 or 4 */
  double peak;              /* FLOP/s of GEMMs and attention in the plan's precision */
  double peak_fp8;          /* FLOP/s of the linear layers' GEMMs under fp8; 0: at peak */
  bool fp8_classifier;      /* ... the classifier's GEMM among them (--fp8-classifier) */
  bool classifier_fused;    /* cross_entropy(matmul) as classifier_ce (passes/decompose.c) */
  double state_bytes;       /* model-state bytes per parameter (the DP's memory weight) */
  const char *const *force; /* [g->n] strategy name an op must use, or NULL */
  bool exec;                /* only strategies the partition pass can run (compiling a plan) */
} ShardCtx;

/* One collective of a segment, per micro-batch. */
typedef struct CollUse {
  CollKind kind;
  double bytes, count, time;
} CollUse;
enum { SEG_MAX_COLL = 12 };

/* A parameter as one device holds it. */
typedef struct ParamUse {
  int node;
  uint8_t pl;
  double elems;
  bool dptp;
} ParamUse;

/* A segment under a chosen sharding, per device and micro-batch. */
typedef struct SegCost {
  double t_fwd, t_bwd; /* compute, s */
  double t_w;          /* of t_bwd, what a split backward's W runs: half the backward of each
                          op with a parameter (its weight's GEMM), the classifier's kept in B */
  double c_fwd, c_bwd; /* tensor-parallel communication, s (exposed: on the critical path) */
  double t_rc;         /* recompute (compute and its communication), s */
  double stash;        /* activation bytes kept from forward to backward */
  double wgrad_hold;   /* what a split backward's weight-gradient pass (ZB-H1's W) reads after
                          its B: the inputs and output gradients of its ops with a parameter */
  double wgrad_first;  /* ... of which the output gradient of its last such op, the first B makes */
  double transient;    /* bytes alive only while the segment runs (full recompute) */
  double grad_work;    /* its backward's gradients beside its stash: the gradient of its
                          largest tensor and the one entering it (the compiled program frees
                          each gradient and stashed tensor after its last reader) */
  double grad_work_w;  /* ... under a split backward, where W keeps the output gradients of the
                          ops with a parameter but the classifier: of the largest other tensor */
  double wcopy;        /* mixed precision: the largest 16-bit copy of a weight its GEMMs read
                          (cast for the forward pass and again for the backward, codegen) */
  double xfer_split;   /* bytes per device of split tensors passed to the next segment */
  double xfer_whole;   /* bytes of replicated (or partial) ones: Megatron scatters them */
  double flops_rc;     /* FLOPs recomputed per device */
  int nparam;
  ParamUse *param;
  int ncoll;
  CollUse coll[SEG_MAX_COLL];
} SegCost;

/* A strategy of one op (placements of its output and of each input). */
typedef struct Strat {
  const char *name;
  uint8_t out;
  uint8_t *in;         /* [nin] required placement of each input */
  bool divided;        /* the work is split over the tensor-parallel ranks */
  double t_fwd, t_bwd; /* compute, s */
  double c_intr;       /* communication inside the op (a cross-entropy's all-reduces), s */
  double c_intr_bytes; /* bytes of each of its n_intr all-reduces */
  int n_intr;
  double stash_extra; /* bytes saved beyond inputs and output (masks, statistics, scores) */
  /* inputs (bit i) read whole but used in part: each rank takes its block of `repeat`
   * copies of the input's last axis (grouped-query attention's key/value heads when the
   * tensor-parallel ranks outnumber them, passes/partition.c), so the gradient comes
   * back whole through that split's all-gather, not as a partial sum */
  uint8_t regroup;
  int repeat;
  double t_sel;     /* forward time recomputed under selective recompute */
  double flops_fwd; /* per device */
} Strat;

/* A sharding of the whole graph. */
typedef struct ShardCand {
  const Strat **st; /* [g->n] chosen strategy of each op (NULL for sources) */
  SegCost *seg;     /* [nseg] */
} ShardCand;

/* The placement of the gradient op n's backward produces for its input i under s: a
 * split input gets a split gradient, a partial one the whole gradient, a replicated
 * one a partial sum when the op's work was divided (the partition pass reduces it),
 * unless the op regroups it (Strat.regroup: whole). */
int shard_grad_placement(const Node *n, const Strat *s, int i);

/* The candidate shardings for ctx: the fastest (λ = 0), the smallest, and the
 * trade-offs between (the DP's objective is time + λ·memory for a sweep of λ);
 * duplicates removed. Returns the count; *out is arena-allocated. Errors (a forced
 * strategy that is not legal) go through error_plain. */
int shard_candidates(Arena *a, const ShardCtx *ctx, ShardCand **out);

#endif
