/* The cost model's formulas (plan/cost.h); docs/plan.md derives each and names its
 * source. */
#include "plan/cost.h"
#include <math.h>

const char *const coll_names[COLL_COUNT] = {
#define X(kind, name) name,
    COLL_KINDS(X)
#undef X
};
const char *const recompute_names[RC_COUNT] = {"none", "selective", "full"};

/* A link class as the ring formulas read it: a rank's bandwidth, the latency of a step,
 * and (inside a node) the cluster whose measured kinds replace them. */
typedef struct Link {
  double bw, alpha;
  const Cluster *measured;
} Link;

/* The terms of kind k's ring over n ranks: frac·bytes/bw + steps·alpha. A reduce or a
 * broadcast is pipelined along a chain of the ranks: each byte crosses every link once.
 * An all-to-all of a tensor of `bytes` moves a rank's part (1/n of it) but its own
 * piece, n-1 messages. */
static void ring_terms(CollKind k, int n, double *frac, double *steps) {
  double f = (double)(n - 1) / n, s = n - 1;
  *frac = f, *steps = s;
  switch (k) {
  case COLL_ALL_REDUCE: *frac = 2 * f, *steps = 2 * s; break;
  case COLL_REDUCE:
  case COLL_BROADCAST: *frac = 1; break;
  case COLL_SEND_RECV: *frac = 1, *steps = 1; break;
  case COLL_ALL_TO_ALL: *frac = f / n; break;
  case COLL_ALL_GATHER:
  case COLL_REDUCE_SCATTER:
  case COLL_COUNT: break;
  }
}

/* A measured curve's seconds at `bytes`: linear between its points, along its last
 * segment beyond them, its first point's (the latency) below. */
static double curve_at(const CollCurve *m, double bytes) {
  if (bytes <= m->bytes[0] || m->n < 2) return m->secs[0];
  int i = 1;
  while (i < m->n - 1 && m->bytes[i] < bytes) i++;
  double t =
      m->secs[i - 1] + (m->secs[i] - m->secs[i - 1]) * (bytes - m->bytes[i - 1]) / (m->bytes[i] - m->bytes[i - 1]);
  return t > m->secs[0] ? t : m->secs[0];
}

/* One ring over n ranks on link l. A kind measured there (Cluster.coll) is its curve among
 * coll_ranks ranks, scaled by the ring's terms: at the bytes that cross a link on n ranks
 * as many as `bytes` do on coll_ranks, plus the further steps' latency (the curve's first
 * point). */
static double ring(const Link *l, CollKind k, double bytes, int n) {
  if (n <= 1 || bytes <= 0) return 0;
  double frac, steps, f0, s0;
  ring_terms(k, n, &frac, &steps);
  const CollCurve *m = l->measured ? &l->measured->coll[k] : NULL;
  if (!m || m->n == 0) return frac * bytes / l->bw + steps * l->alpha;
  ring_terms(k, l->measured->coll_ranks, &f0, &s0);
  return curve_at(m, bytes * frac / f0) + (steps / s0 - 1) * m->secs[0];
}

double cost_collective(const Cluster *c, CollKind k, double bytes, Group g) {
  if (g.n <= 1 || bytes <= 0) return 0;
  /* each device's share of its node's network bandwidth between nodes */
  Link in = {c->intra.bandwidth * c->intra.efficiency, c->intra.latency, c->coll_ranks >= 2 ? c : NULL},
       out = {c->inter.bandwidth * c->inter.efficiency / c->gpus_per_node, c->inter.latency, NULL};
  int local = g.local < 1 ? 1 : g.local > g.n ? g.n : g.local, nodes = (g.n + local - 1) / local;
  if (k == COLL_SEND_RECV) return ring(local >= 2 ? &in : &out, k, bytes, 2);
  if (nodes == 1) return ring(&in, k, bytes, g.n);
  if (local == 1) return ring(&out, k, bytes, g.n);
  switch (k) {
  case COLL_ALL_REDUCE: /* reduce-scatter in the node, all-reduce across nodes on 1/local, all-gather in the node */
    return ring(&in, COLL_REDUCE_SCATTER, bytes, local) + ring(&in, COLL_ALL_GATHER, bytes, local) +
           ring(&out, COLL_ALL_REDUCE, bytes / local, nodes);
  case COLL_ALL_GATHER:
  case COLL_REDUCE_SCATTER: return ring(&in, k, bytes, local) + ring(&out, k, bytes / local, nodes);
  case COLL_REDUCE:
  case COLL_BROADCAST: /* along the node's ranks, then the nodes' */
    return ring(&in, k, bytes, local) + ring(&out, k, bytes, nodes);
  case COLL_ALL_TO_ALL: /* of a rank's part (1/n), the pieces for other nodes cross the network */
    return ((double)(local - 1) / g.n * bytes / in.bw + (double)(g.n - local) / g.n * bytes / out.bw) / g.n +
           (g.n - 1) * out.alpha;
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

double cost_pipeline_time_zb(const double *stage_time, const double *w_time, int p, int m) {
  double tmax = 0, sum = 0, fmax = 0;
  for (int i = 0; i < p; i++) {
    double f = stage_time[i] - 2 * w_time[i];
    if (f < 0) f = 0;
    sum += f;
    if (f > fmax) fmax = f;
    if (stage_time[i] > tmax) tmax = stage_time[i];
  }
  return m * tmax + sum - fmax;
}

double cost_inflight(int i, int p, int m, int v) {
  if (v <= 1) return (double)(m < p - i ? m : p - i);
  double chunks = 2.0 * (p - i - 1) + (double)(v - 1) * p + 1;
  if (chunks > (double)m * v) chunks = (double)m * v;
  return chunks / v;
}
