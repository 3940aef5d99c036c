/* The cost model's formulas (plan/cost.h); docs/plan.md derives each and names its
 * source. */
#include "plan/cost.h"
#include <math.h>

const char *const coll_names[COLL_COUNT] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send/recv"};
const char *const recompute_names[RC_COUNT] = {"none", "selective", "full"};

/* One ring over n ranks on one link class of per-rank bandwidth bw. */
static double ring(CollKind k, double bytes, int n, double bw, double alpha) {
  if (n <= 1 || bytes <= 0) return 0;
  double steps = n - 1, frac = (double)(n - 1) / n;
  switch (k) {
  case COLL_ALL_REDUCE: return 2 * frac * bytes / bw + 2 * steps * alpha;
  case COLL_ALL_GATHER:
  case COLL_REDUCE_SCATTER:
  case COLL_ALL_TO_ALL: return frac * bytes / bw + steps * alpha;
  case COLL_SEND_RECV: return bytes / bw + alpha;
  case COLL_COUNT: break;
  }
  return 0;
}

double cost_collective(const Cluster *c, CollKind k, double bytes, Group g) {
  if (g.n <= 1 || bytes <= 0) return 0;
  double bw_in = c->intra.bandwidth * c->intra.efficiency;
  /* each device's share of its node's network bandwidth */
  double bw_out = c->inter.bandwidth * c->inter.efficiency / c->gpus_per_node;
  double a_in = c->intra.latency, a_out = c->inter.latency;
  int local = g.local < 1 ? 1 : g.local > g.n ? g.n : g.local, nodes = (g.n + local - 1) / local;
  if (k == COLL_SEND_RECV) return local >= 2 ? ring(k, bytes, 2, bw_in, a_in) : ring(k, bytes, 2, bw_out, a_out);
  if (nodes == 1) return ring(k, bytes, g.n, bw_in, a_in);
  if (local == 1) return ring(k, bytes, g.n, bw_out, a_out);
  switch (k) {
  case COLL_ALL_REDUCE: /* reduce-scatter in the node, all-reduce across nodes on 1/local, all-gather in the node */
    return 2 * ring(COLL_REDUCE_SCATTER, bytes, local, bw_in, a_in) +
           ring(COLL_ALL_REDUCE, bytes / local, nodes, bw_out, a_out);
  case COLL_ALL_GATHER:
  case COLL_REDUCE_SCATTER: return ring(k, bytes, local, bw_in, a_in) + ring(k, bytes / local, nodes, bw_out, a_out);
  case COLL_ALL_TO_ALL: /* the part for other nodes crosses the network */
    return (double)(local - 1) / g.n * bytes / bw_in + (double)(g.n - local) / g.n * bytes / bw_out + (g.n - 1) * a_out;
  case COLL_SEND_RECV:
  case COLL_COUNT: break;
  }
  return 0;
}

double cost_kernel(const Cluster *c, double flops, double peak, double eff, double bytes) {
  if (flops <= 0 && bytes <= 0) return 0;
  double tc = flops / (peak * eff), tm = bytes / (c->dev.memory_bw * c->dev.mem_eff);
  return (tc > tm ? tc : tm) + c->dev.kernel_overhead;
}

static double dim_eff(double x, double h) { return x / (x + h); }

double cost_gemm_eff(const Cluster *c, double m, double n, double k) {
  double h = c->dev.gemm_half_dim > 0 ? c->dev.gemm_half_dim : 128;
  return c->dev.gemm_eff * dim_eff(m, h) * dim_eff(n, h) * dim_eff(k, h);
}

ModelStates cost_zero_states(double params, int stage, double dp, double w, double g, double o) {
  double d = dp < 1 ? 1 : dp;
  return (ModelStates){params * w / (stage >= 3 ? d : 1), params * g / (stage >= 2 ? d : 1),
                       params * o / (stage >= 1 ? d : 1)};
}

double cost_act_layer(double s, double b, double h, double a, int t, bool seq_par, Recompute rc) {
  double sbh = s * b * h, attn = 5 * a * s / h;
  if (rc == RC_FULL) return 2 * sbh;
  if (rc == RC_SELECTIVE) attn = 0;
  if (t <= 1) return sbh * (34 + attn);
  if (seq_par) return sbh * (34.0 / t + attn / t);
  return sbh * (10 + 24.0 / t + attn / t);
}

double cost_gpt_flops(double B, double s, double l, double h, double V, bool full_recompute) {
  if (full_recompute) return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

double cost_bubble_fraction(int p, int m, int v) { return (double)(p - 1) / ((double)(v < 1 ? 1 : v) * m); }

double cost_pipeline_time(const double *stage_time, int p, int m, int v) {
  double tmax = 0, sum = 0;
  for (int i = 0; i < p; i++) {
    sum += stage_time[i];
    if (stage_time[i] > tmax) tmax = stage_time[i];
  }
  return m * tmax + (sum - tmax) / (v < 1 ? 1 : v);
}

double cost_inflight(int i, int p, int m, int v) {
  if (v <= 1) return (double)(m < p - i ? m : p - i);
  double chunks = 2.0 * (p - i - 1) + (double)(v - 1) * p + 1;
  if (chunks > (double)m * v) chunks = (double)m * v;
  return chunks / v;
}
