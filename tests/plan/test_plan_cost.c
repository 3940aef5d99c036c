/* The cost model against the published formulas (issue 4, "Tests"):
 *  - ZeRO model states for 7.5B parameters over 64 data-parallel ranks: 120, 31.4,
 *    16.6 and 1.88 GB for stages 0-3 (Rajbhandari et al. 2020, Figure 1);
 *  - activation memory of a GPT-3 175B layer: sbh(34 + 5as/h) and its tensor- and
 *    sequence-parallel and recompute forms (Korthikanti et al. 2022, Table 2), both
 *    as formulas and as the sum the sharding program makes from the graph;
 *  - training FLOPs per step against 72·B·s·l·h²(1 + s/6h + V/12lh) (Narayanan et
 *    al. 2021);
 *  - the 1F1B bubble (p-1)/m, interleaved (p-1)/(vm), in-flight micro-batches;
 *  - alpha-beta collectives, and measured ones (--calibrate's curves) scaled to a group. */
#include <string.h>
#include "ir/analysis.h"
#include "plan/search.h"
#include "tests/plan/plan_test.h"

static void test_zero(void) {
  const double want[4] = {120e9, 31.4e9, 16.6e9, 1.88e9};
  for (int s = 0; s < 4; s++) {
    ModelStates m = cost_zero_states(7.5e9, s, 64, 2, 2, 12);
    char what[64];
    snprintf(what, sizeof what, "ZeRO-%d model states, 7.5B params, 64-way DP", s);
    check_rel(what, m.weights + m.grads + m.optimizer, want[s], 0.005);
  }
}

/* GPT-3 175B: s = 2048, h = 12288, a = 96, b = 1, t = 8 */
static const double S = 2048, H = 12288, A = 96, Bm = 1;

static void test_activation_formulas(void) {
  double sbh = S * Bm * H;
  check_rel("activations, no parallelism: sbh(34 + 5as/h)", cost_act_layer(S, Bm, H, A, 1, false, RC_NONE),
            sbh * (34 + 5 * A * S / H), 1e-12);
  check_rel("activations, t = 8: sbh(10 + 24/t + 5as/(ht))", cost_act_layer(S, Bm, H, A, 8, false, RC_NONE),
            sbh * (10 + 3 + 10), 1e-12);
  check_rel("activations, t = 8 + SP: sbh(34/t + 5as/(ht))", cost_act_layer(S, Bm, H, A, 8, true, RC_NONE),
            sbh * (34.0 / 8 + 10), 1e-12);
  check_rel("activations, t = 8 + SP + selective: sbh 34/t", cost_act_layer(S, Bm, H, A, 8, true, RC_SELECTIVE),
            sbh * 34 / 8, 1e-12);
  check_rel("activations, full recompute: 2sbh", cost_act_layer(S, Bm, H, A, 8, true, RC_FULL), 2 * sbh, 1e-12);
  /* the numbers themselves: 2.869 GB a layer without parallelism */
  check_rel("activations, no parallelism, bytes", cost_act_layer(S, Bm, H, A, 1, false, RC_NONE), 2.86890e9, 1e-4);
}

/* The layer's stash as the sharding program sums it from the graph, for the
 * candidate with the least memory, or for the forced Megatron (no SP) strategies. */
static double layer_stash(const Graph *g, int t, AttnKernel attn, Recompute rc, const char **force) {
  Arena *a = arena_new();
  Cluster cl;
  cluster_from_profile(&cl, "a100-80g", 8, 8);
  PlanModel *pm = plan_model_new(a, g, force);
  ShardCtx x = {.pm = pm,
                .cl = &cl,
                .t = t,
                .mbs = 1,
                .rc = rc,
                .attn = attn,
                .act_bytes = 2,
                .comm_bytes = 2,
                .peak = cluster_peak(&cl),
                .state_bytes = 16,
                .force = force};
  ShardCand *c;
  int n = shard_candidates(a, &x, &c);
  double best = INFINITY;
  for (int i = 0; i < n; i++) {
    const SegCost *s = &c[i].seg[pm->first_layer_seg + 1];
    if (s->stash < best) best = s->stash;
  }
  arena_free(a);
  return best;
}

/* Megatron's tensor parallelism without SP, op by op in a GPT layer. */
static const char **megatron_force(Arena *a, const Graph *g) {
  static const char *names[] = {"replicated", "column", "split",      "split",      "split",      "split",
                                "heads",      "row",    "replicated", "replicated", "replicated", "column",
                                "split",      "split",  "row",        "replicated", "replicated"};
  const char **f = arena_array(a, g->n, sizeof *f);
  PlanModel *pm = plan_model_new(a, g, NULL);
  for (int k = 0; k < pm->nseg; k++)
    for (int j = 0; pm->seg[k].kind == SEG_LAYER && j < pm->seg[k].nops && j < 17; j++) f[pm->seg[k].ops[j]] = names[j];
  return f;
}

/* The graph has no dropout, so Korthikanti's two hidden dropout masks (2sbh/t)
 * and the attention dropout (mask and output, 3as²b/t) are absent; a fused
 * attention keeps no scores (2as²b/t) but a log-sum-exp (4abs/t); layernorms keep
 * their statistics (2 x 8sb). */
static void test_activation_graph(void) {
  Arena *a = arena_new();
  const char *set[] = {"batch=8", NULL};
  Graph *g = load_model(a, "models/gpt3.model", set);
  double sbh = S * Bm * H, sb = S * Bm, as2b = A * S * S * Bm, t = 8;
  double f_sp = cost_act_layer(S, Bm, H, A, 8, true, RC_NONE), f_tp = cost_act_layer(S, Bm, H, A, 8, false, RC_NONE);
  double f_1 = cost_act_layer(S, Bm, H, A, 1, false, RC_NONE);
  check_rel("graph stash, t = 8 + SP, materialized attention", layer_stash(g, 8, ATTN_MATERIALIZED, RC_NONE, NULL),
            f_sp - (2 * sbh + 3 * as2b) / t + 16 * sb / t, 1e-9);
  check_rel("graph stash, t = 8 + SP, fused attention", layer_stash(g, 8, ATTN_FUSED, RC_NONE, NULL),
            f_sp - (2 * sbh + 5 * as2b) / t + (16 * sb + 4 * A * sb) / t, 1e-9);
  check_rel("graph stash, t = 8 Megatron (no SP), materialized",
            layer_stash(g, 8, ATTN_MATERIALIZED, RC_NONE, megatron_force(a, g)),
            f_tp - 2 * sbh - 3 * as2b / t + 16 * sb, 1e-9);
  check_rel("graph stash, t = 1, materialized", layer_stash(g, 1, ATTN_MATERIALIZED, RC_NONE, NULL),
            f_1 - 2 * sbh - 3 * as2b + 16 * sb, 1e-9);
  check_rel("graph stash, t = 8 + SP, selective, materialized",
            layer_stash(g, 8, ATTN_MATERIALIZED, RC_SELECTIVE, NULL),
            cost_act_layer(S, Bm, H, A, 8, true, RC_SELECTIVE) - 2 * sbh / t + 16 * sb / t, 1e-9);
  check_rel("graph stash, t = 1, full recompute: 2sbh", layer_stash(g, 1, ATTN_FUSED, RC_FULL, NULL), 2 * sbh, 1e-9);
  arena_free(a);
}

static void test_flops(void) {
  Arena *a = arena_new();
  Graph *g = load_model(a, "models/gpt3.model", NULL);
  GraphStats st;
  graph_stats(g, &st);
  check_rel("GPT-3 FLOPs per step vs 72Bslh^2(1+s/6h+V/12lh)", st.train_flops,
            cost_gpt_flops(1536, 2048, 96, 12288, 50257, false), 0.005);
  check_rel("with full recompute: 96Bslh^2(1+s/6h+V/16lh) = 4/3 minus logits",
            cost_gpt_flops(1536, 2048, 96, 12288, 50257, true),
            cost_gpt_flops(1536, 2048, 96, 12288, 0, false) * 4 / 3 + 6.0 * 1536 * 2048 * 12288 * 50257, 1e-9);
  arena_free(a);
}

static void test_pipeline(void) {
  check_rel("1F1B bubble (p-1)/m, p 8, m 32", cost_bubble_fraction(8, 32, 1), 7.0 / 32, 1e-12);
  check_rel("interleaved bubble (p-1)/(vm), v 4", cost_bubble_fraction(8, 32, 4), 7.0 / 128, 1e-12);
  double T[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  check_rel("pipeline time (m + p - 1)T, balanced", cost_pipeline_time(T, 8, 32, 1), 39, 1e-12);
  check_rel("pipeline time (m + (p-1)/v)T, interleaved", cost_pipeline_time(T, 8, 32, 4), 32 + 7.0 / 4, 1e-12);
  check_rel("bubble / ideal = (p-1)/m", cost_pipeline_time(T, 8, 32, 1) / 32 - 1, cost_bubble_fraction(8, 32, 1),
            1e-12);
  check_rel("1F1B stage 0 holds p micro-batches", cost_inflight(0, 8, 32, 1), 8, 1e-12);
  check_rel("1F1B last stage holds 1", cost_inflight(7, 8, 32, 1), 1, 1e-12);
  check_rel("interleaved stage 0: p(1 + (p-1)/(pv))", cost_inflight(0, 8, 32, 2), 8 * (1 + 7.0 / 16), 1e-12);
}

static void test_collectives(void) {
  Cluster c;
  cluster_from_profile(&c, "a100-80g", 64, 8);
  double bw = 300e9 * 0.8, a = 2e-6, net = 200e9 * 0.85 / 8, an = 5e-6, B = 1e9;
  check_rel("ring all-reduce, 8 in a node: 2(n-1)/n S/bw + 2(n-1)a",
            cost_collective(&c, COLL_ALL_REDUCE, B, (Group){8, 8}), 2 * 7.0 / 8 * B / bw + 14 * a, 1e-12);
  check_rel("all-gather, 8 in a node: (n-1)/n S/bw + (n-1)a", cost_collective(&c, COLL_ALL_GATHER, B, (Group){8, 8}),
            7.0 / 8 * B / bw + 7 * a, 1e-12);
  check_rel("all-reduce over 8 nodes, 1 per node", cost_collective(&c, COLL_ALL_REDUCE, B, (Group){8, 1}),
            2 * 7.0 / 8 * B / net + 14 * an, 1e-12);
  check_rel("hierarchical all-reduce, 64 = 8 nodes x 8", cost_collective(&c, COLL_ALL_REDUCE, B, (Group){64, 8}),
            2 * (7.0 / 8 * B / bw + 7 * a) + 2 * 7.0 / 8 * (B / 8) / net + 14 * an, 1e-12);
  check_rel("reduce, 8 in a node: a pipelined chain, S/bw + (n-1)a", cost_collective(&c, COLL_REDUCE, B, (Group){8, 8}),
            B / bw + 7 * a, 1e-12);
  check_rel("broadcast over 8 nodes x 8: the node's chain, then the nodes'",
            cost_collective(&c, COLL_BROADCAST, B, (Group){64, 8}), B / bw + 7 * a + B / net + 7 * an, 1e-12);

  /* measured curves (--calibrate) among 2 ranks replace the link's figures inside a node:
   * exact at their points, linear between them and along the last segment beyond */
  c.coll_ranks = 2;
  c.coll[COLL_REDUCE] = (CollCurve){3, {1e3, 1e6, 1e8}, {2e-6, 0.5e-3, 80e-3}};
  check_rel("measured reduce at a point", cost_collective(&c, COLL_REDUCE, 1e6, (Group){2, 2}), 0.5e-3, 1e-12);
  check_rel("measured reduce between points", cost_collective(&c, COLL_REDUCE, 5.05e7, (Group){2, 2}),
            0.5e-3 + 0.5 * 79.5e-3, 1e-12);
  check_rel("measured reduce beyond the last point", cost_collective(&c, COLL_REDUCE, 2e8, (Group){2, 2}),
            80e-3 + 79.5e-3 / 99e6 * 1e8, 1e-12);
  check_rel("measured reduce below the first point: its latency", cost_collective(&c, COLL_REDUCE, 10, (Group){2, 2}),
            2e-6, 1e-12);
  /* on 4 ranks a chain carries the same bytes a link and takes 3 steps, not 1 */
  check_rel("measured reduce scaled to 4 ranks", cost_collective(&c, COLL_REDUCE, 1e6, (Group){4, 4}),
            0.5e-3 + 2 * 2e-6, 1e-12);
  c.coll[COLL_ALL_REDUCE] = (CollCurve){2, {1e3, 1e8}, {4e-6, 40e-3}};
  /* all-reduce on 4: 2(n-1)/n = 1.5 of the bytes a link against 1 on 2, 6 steps against 2 */
  check_rel("measured all-reduce scaled to 4 ranks", cost_collective(&c, COLL_ALL_REDUCE, 4e7, (Group){4, 4}),
            4e-6 + (40e-3 - 4e-6) * (6e7 - 1e3) / (1e8 - 1e3) + 2 * 4e-6, 1e-12);
  check_rel("a kind not measured keeps the link's figures", cost_collective(&c, COLL_ALL_GATHER, B, (Group){8, 8}),
            7.0 / 8 * B / bw + 7 * a, 1e-12);
  check_rel("between nodes the network's figures", cost_collective(&c, COLL_ALL_REDUCE, B, (Group){8, 1}),
            2 * 7.0 / 8 * B / net + 14 * an, 1e-12);
}

int main(void) {
  diag_stream = stderr;
  test_zero();
  test_activation_formulas();
  test_activation_graph();
  test_flops();
  test_pipeline();
  test_collectives();
  printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
  return failures != 0;
}
