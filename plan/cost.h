/* The cost model: one set of formulas that prices everything the plan search
 * compares and `--dump-plan` prints (DESIGN.md, "One cost model prices
 * everything"). Compute is a roofline with efficiency factors, collectives are
 * alpha-beta per link class and algorithm, pipelines lose a bubble, ZeRO and
 * activations have their published memory formulas. plan/shard.c and plan/search.c
 * price plans only through these functions (and plan/schedule.h's count of the
 * micro-batches a compiled pipeline stage holds). Units: seconds, bytes, FLOPs. */
#ifndef COLOSSALC_PLAN_COST_H
#define COLOSSALC_PLAN_COST_H
#include <stdbool.h>
#include "plan/cluster.h"

extern const char *const coll_names[COLL_COUNT];

typedef enum { RC_NONE, RC_SELECTIVE, RC_FULL, RC_COUNT } Recompute;
extern const char *const recompute_names[RC_COUNT];

/* A communication group of n ranks with `local` of them on each node it spans
 * (local == n: all inside one node). */
typedef struct Group {
  int n, local;
} Group;

/* Time of one collective over a group. `bytes` is the size of the whole tensor:
 * the buffer each rank reduces (all-reduce, reduce), the gathered result (all-gather),
 * the input (reduce-scatter), each rank's buffer (all-to-all), the tensor sent
 * (broadcast), the message (send/recv; n == 2, local 2 inside a node, 1 across nodes).
 *   ring, one link class:  all-reduce 2(n-1)/n·B/bw + 2(n-1)α
 *                          all-gather, reduce-scatter, all-to-all (n-1)/n·B/bw + (n-1)α
 *                          reduce, broadcast (a pipelined chain) B/bw + (n-1)α
 *   a kind measured inside a node (Cluster.coll, --calibrate) is its curve by size among
 *   the ranks it was measured on, scaled by the ring's terms to n ranks;
 *   a group spanning nodes is hierarchical: inside the node over `local` ranks on
 *   NVLink, between nodes over n/local ranks on the network with B/local each (a reduce
 *   or broadcast: the node's chain, then the nodes'). */
double cost_collective(const Cluster *c, CollKind k, double bytes, Group g);

/* Kernel time by roofline: max(FLOPs / (peak·eff), bytes / (bw·mem_eff)) plus the
 * launch overhead (none for an op with neither FLOPs nor bytes: a view). `peak` is
 * the tensor-core peak for GEMMs and attention (cluster_peak), the fp32 peak for
 * other arithmetic; `eff` the kernel's compute efficiency (cost_gemm_eff, the
 * attention factor, 1 for memory-bound kernels). */
double cost_kernel(const Cluster *c, double flops, double peak, double eff, double bytes);

/* Efficiency of an m×n×k GEMM: the device's large-GEMM factor times
 * x/(x + 128) for each dimension, so skinny GEMMs run slower. */
double cost_gemm_eff(const Cluster *c, double m, double n, double k);

/* ---- memory ---------------------------------------------------------------- */

/* Model states per device under ZeRO (Rajbhandari et al. 2020): with `w`, `g`, `o`
 * bytes per parameter of weights, gradients and optimizer states (the paper's mixed
 * precision Adam: 2, 2, 12; a compiled program's AdamW: 4, 4, 8), stage 1 shards o,
 * stage 2 also g, stage 3 also w over dp ranks (dp: the ranks' even share, or fewer
 * where one rank must own a whole parameter larger than that share). */
typedef struct ModelStates {
  double weights, grads, optimizer;
} ModelStates;
ModelStates cost_zero_states(double params, int stage, double dp, double w, double g, double o);

/* Activation bytes of one transformer layer (Korthikanti et al. 2022, Table 2):
 * s sequence, b micro-batch, h hidden, a heads, t tensor-parallel degree.
 *   none, t = 1            sbh(34 + 5as/h)
 *   tensor parallel        sbh(10 + 24/t + 5as/(ht))
 *   tensor + sequence par. sbh(34/t + 5as/(ht))
 *   selective recompute    the 5as/h terms drop
 *   full recompute         2sbh (the layer's input) */
double cost_act_layer(double s, double b, double h, double a, int t, bool seq_par, Recompute rc);

/* Training FLOPs of one step of a GPT model (Narayanan et al. 2021, eq. 3):
 * 72·B·s·l·h²(1 + s/(6h) + V/(12lh)); with full recompute (the hardware FLOPs
 * they report) 96·B·s·l·h²(1 + s/(6h) + V/(16lh)). */
double cost_gpt_flops(double B, double s, double l, double h, double V, bool full_recompute);

/* ---- pipelines ------------------------------------------------------------- */

/* Bubble over ideal time: (p-1)/m for 1F1B, (p-1)/(v·m) interleaved. */
double cost_bubble_fraction(int p, int m, int v);

/* One step of a pipeline of p stages, m micro-batches, v chunks per stage, where
 * stage i takes stage_time[i] per micro-batch (all its chunks, forward and
 * backward): m·T_max + (ΣT_i - T_max)/v. Balanced stages give (m + (p-1)/v)·T. */
double cost_pipeline_time(const double *stage_time, int p, int m, int v);

/* An op's parameter gradients (ZB-H1's W) out of its backward's compute t_bwd: half of
 * it, a weight GEMM's backward being two GEMMs of its size (dX and dW). */
static inline double cost_wgrad_time(double t_bwd) { return t_bwd / 2; }

/* The same as cost_pipeline_time under ZB-H1 (plan/schedule.h), w_time[i] being stage i's weight-gradient
 * passes (W) of a micro-batch: m·T_max + Σf_i − f_max with f_i = T_i − 2W_i (a
 * stage's forward and input-gradient passes less its W, Qi et al. 2024), which is
 * (m·T + (p−1)(F+B−W)) for balanced stages. */
double cost_pipeline_time_zb(const double *stage_time, const double *w_time, int p, int m);

/* Micro-batches (in units of a whole stage's activations) that stage i of p holds
 * at its peak: min(m, p - i) for 1F1B; interleaved, chunks in flight
 * 2(p-i-1) + (v-1)p + 1 (at most m·v), each 1/v of the stage. Stage 0 of an
 * interleaved pipeline holds p(1 + (p-1)/(pv)), Korthikanti et al.'s factor. */
double cost_inflight(int i, int p, int m, int v);

#endif
