/* The recompute pass and its choice (passes/recompute.h):
 *  1. values: in double precision (ir/interp.c) the loss and every parameter gradient
 *     are bit for bit those without recompute, for full, selective (attention core)
 *     and a mixed choice; and after the pass no backward node of a recomputed layer
 *     reads a value the layer recomputes;
 *  2. memory: the lowered program's work peak falls with full recompute, and with
 *     selective recompute when the model's attention scores dominate (--selective-drops);
 *  3. FLOPs: the clones' forward FLOPs equal the plan's cost model's recompute FLOPs
 *     (plan/shard.c SegCost.flops_rc) for each choice, layer by layer;
 *  4. the choice: the DP's choice is the least FLOPs among all choices whose model
 *     peak fits (brute force over every choice), and recompute_choose's choice, lowered,
 *     fits each budget; a budget below every choice is an error naming both sizes.
 * Usage: test_recompute [--selective-drops] MODEL [NAME=VALUE ...] */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/lower.h"
#include "frontend/frontend.h"
#include "ir/interp.h"
#include "passes/passes.h"
#include "passes/recompute.h"
#include "plan/shard.h"
#include "tests/common/lowered.h"

static int failures, checks;

static void check(bool ok, const char *fmt, const char *what, double a, double b) {
  checks++;
  if (ok) return;
  failures++;
  printf("FAIL ");
  printf(fmt, what, a, b);
  printf("\n");
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (rng >> 11) * 0x1.0p-53;
}

/* ---- 1. values -------------------------------------------------------------------- */

/* Parameters and inputs of g (the same in every graph the pass makes: its forward
 * nodes keep their ids). */
static double **make_values(Graph *g, const Program *p) {
  double **vals = calloc(g->n, sizeof *vals);
  for (int i = 0; i < g->n_forward; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_PARAM && n->op != OP_INPUT) continue;
    int64_t cnt = shape_numel(&n->shape), range = n->op == OP_INPUT ? lowered_index_range(p, n) : 0;
    vals[i] = malloc((cnt ? cnt : 1) * sizeof(double));
    for (int64_t e = 0; e < cnt; e++)
      vals[i][e] = n->op == OP_PARAM    ? (n->init.kind == INIT_ONES ? 1 : 0) + 0.2 * (urand() - 0.5)
                   : n->dtype == DT_I32 ? (double)(int64_t)(urand() * range)
                                        : urand();
  }
  return vals;
}

/* Runs h on the sources of g (shared) and compares loss and gradients bit for bit. */
static void check_values(const char *what, Graph *g, Graph *h, double **ref) {
  double **v = calloc(h->n, sizeof *v);
  for (int i = 0; i < g->n_forward; i++)
    if (g->nodes[i]->op == OP_PARAM || g->nodes[i]->op == OP_INPUT) v[i] = ref[i];
  interp_run(h, v, 7);
  char buf[256];
  snprintf(buf, sizeof buf, "%s: loss", what);
  check(!memcmp(v[h->loss->id], ref[g->loss->id], sizeof(double)), "%s: %.17g vs %.17g", buf, v[h->loss->id][0],
        ref[g->loss->id][0]);
  for (int k = 0; k < g->nparams; k++) {
    if (!g->param_grads[k]) continue;
    int64_t cnt = shape_numel(&g->param_grads[k]->shape), bad = 0;
    for (int64_t e = 0; e < cnt; e++)
      bad += memcmp(&v[h->param_grads[k]->id][e], &ref[g->param_grads[k]->id][e], 8) != 0;
    snprintf(buf, sizeof buf, "%s: gradient of %s", what, g->params[k]->name);
    check(bad == 0, "%s: %g of %g elements differ", buf, (double)bad, (double)cnt);
  }
  for (int i = 0; i < g->n_forward; i++)
    if (g->nodes[i]->op == OP_PARAM || g->nodes[i]->op == OP_INPUT) v[i] = NULL;
  interp_release(h, v);
  free(v);
}

/* No backward node of a recomputed layer reads an original it recomputes; the clones
 * are backward-part nodes. */
static void check_structure(const char *what, Graph *g, Graph *h, const RcLayer *mode) {
  bool *rc = calloc(g->n_forward + 1, 1);
  recompute_mark(g, mode, rc);
  int bad = 0, marked = 0;
  for (int i = 0; i < g->n_forward; i++) marked += rc[i];
  for (int i = h->n_forward; i < h->n; i++)
    for (int k = 0; k < h->nodes[i]->nin; k++) {
      const Node *y = h->nodes[i]->in[k];
      bad += y->id < h->n_forward && rc[y->id] && y->layer == h->nodes[i]->layer;
    }
  check(bad == 0, "%s: %g backward reads of recomputed originals (of %g)", what, bad, marked);
  check(h->n == g->n + marked && h->n_forward == g->n_forward, "%s: %g nodes, expected %g more", what, h->n - g->n,
        marked);
  free(rc);
}

/* ---- 3. FLOPs against the cost model ----------------------------------------------------- */

/* The plan's recompute FLOPs of each layer under rc, on the decomposed forward graph. */
static double *plan_flops(Arena *a, const Graph *fwd, Recompute rc) {
  Cluster cl;
  cluster_from_profile(&cl, "cpu", 1, 0);
  PlanModel *pm = plan_model_new(a, fwd, NULL);
  ShardCtx x = {.pm = pm,
                .cl = &cl,
                .t = 1,
                .mbs = (int)pm->batch,
                .rc = rc,
                .attn = ATTN_MATERIALIZED,
                .act_bytes = 4,
                .peak = cl.dev.peak_fp32,
                .state_bytes = 16,
                .exec = true};
  ShardCand *c;
  shard_candidates(a, &x, &c);
  double *f = arena_array(a, fwd->nlayers + 1, sizeof *f);
  for (int k = 0; k < pm->nseg; k++)
    if (pm->seg[k].kind == SEG_LAYER) f[pm->seg[k].layer] += c[0].seg[k].flops_rc;
  return f;
}

static double clone_flops(const Graph *g, const Graph *h) {
  double f = 0;
  for (int i = g->n_forward; i < h->n; i++) {
    Cost c;
    node_cost(h->nodes[i], &c);
    f += c.fwd_flops;
  }
  for (int i = g->n_forward; i < g->n; i++) {
    Cost c;
    node_cost(g->nodes[i], &c);
    f -= c.fwd_flops;
  }
  return f;
}

/* An attention core to recompute: scores and their softmax (a model of MLPs has none). */
static bool has_attention_core(const Graph *g) {
  for (int i = 0; i < g->n; i++)
    if (g->nodes[i]->op == OP_SOFTMAX || g->nodes[i]->op == OP_ATTENTION || g->nodes[i]->op == OP_FLASH_ATTENTION)
      return true;
  return false;
}

static void check_flops(const char *what, const Graph *g, const Graph *h, const RcLayer *mode,
                        double *const pf[RCL_COUNT]) {
  double want = 0, got = clone_flops(g, h), pass = recompute_flops(g, mode);
  for (int l = 0; l < g->nlayers; l++) want += mode[l] == RCL_KEEP ? 0 : pf[mode[l]][l];
  bool some = want > 0 || (!strcmp(what, "selective") && !has_attention_core(g));
  check(fabs(got - want) <= 1e-9 * want && some, "%s: clones %.6g FLOPs, cost model %.6g", what, got, want);
  check(fabs(pass - got) <= 1e-9 * got, "%s: recompute_flops %.6g, clones %.6g", what, pass, got);
}

/* ---- 4. the choice ------------------------------------------------------------------- */

static int64_t measure(Graph *g, void *ctx) {
  (void)ctx;
  return lower_program(g)->work_peak;
}

static double choice_flops(const RecomputeStats *st, const RcLayer *m) {
  double f = 0;
  for (int l = 0; l < st->nlayers; l++) f += st->flops[l][m[l]];
  return f;
}

/* The least FLOPs over every choice whose model peak fits (INFINITY: none). */
static double brute_force(const RecomputeStats *st, double budget) {
  int L = st->nlayers;
  long total = 1;
  for (int l = 0; l < L; l++) total *= RCL_COUNT;
  RcLayer m[16];
  double best = INFINITY;
  for (long c = 0; c < total; c++) {
    long r = c;
    bool ok = true;
    for (int l = 0; l < L; l++, r /= RCL_COUNT) {
      m[l] = (RcLayer)(r % RCL_COUNT);
      ok &= m[l] != RCL_ATTN || st->has_attn[l];
    }
    if (ok && recompute_model_peak(st, m) <= budget && choice_flops(st, m) < best) best = choice_flops(st, m);
  }
  return best;
}

static void check_dp(Graph *g, int64_t peak_keep) {
  RecomputeStats *st = recompute_stats(g);
  double kept = 0;
  for (int l = 0; l < st->nlayers; l++) kept += st->keep[l][RCL_KEEP];
  st->base = (double)peak_keep - kept;
  RcLayer m[16];
  for (int t = 0; t <= 20 && st->nlayers <= 6; t++) {
    double budget = st->base + kept * t / 20.0, want = brute_force(st, budget);
    bool ok = recompute_dp(st, budget, m);
    check(ok == isfinite(want), "%sDP feasibility at %g bytes: %g, not brute force's", "", budget, ok);
    if (ok)
      check(fabs(choice_flops(st, m) - want) <= 1e-9 * want && recompute_model_peak(st, m) <= budget,
            "%sDP %.6g FLOPs, brute force %.6g", "", choice_flops(st, m), want);
  }
}

/* recompute_choose under a handler: false (the message in diag_last) on an error. */
static bool try_choose(Graph *g, int64_t budget, RecomputeChoice *c) {
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) return false;
  recompute_choose(g, budget, measure, NULL, c);
  diag_pop(&j);
  return true;
}

static void check_choose(Graph *g, int64_t peak_keep, int64_t peak_full) {
  for (int t = 0; t <= 4; t++) {
    int64_t budget = peak_full + (peak_keep - peak_full) * t / 4;
    RecomputeChoice c;
    if (!try_choose(g, budget, &c)) {
      check(false, "%s: no choice for a budget of %g bytes (full: %g)", "choose", (double)budget, (double)peak_full);
      continue;
    }
    int64_t lowered = lower_program(c.graph)->work_peak;
    check(lowered <= budget && lowered == c.peak, "%s: work peak %g over the budget %g", "choose", (double)lowered,
          (double)budget);
    printf("budget %8.3f MiB: peak %8.3f MiB (model %8.3f), %.4g FLOPs recomputed, %d DP runs: %s\n",
           budget / 1048576.0, c.peak / 1048576.0, c.predicted / 1048576.0, c.flops, c.rounds,
           recompute_describe(g->arena, g, c.mode));
  }
  /* below every choice: an error naming the budget and the smallest peak */
  FILE *saved = diag_stream;
  diag_stream = NULL;
  RecomputeChoice c;
  bool failed = !try_choose(g, peak_full / 2, &c);
  diag_stream = saved;
  check(failed && strstr(diag_last, "MiB") && strstr(diag_last, "smallest"), "%s (budget %g, smallest %g)",
        "a budget nothing fits is an error", (double)(peak_full / 2), (double)peak_full);
  if (failed) printf("error for %.3f MiB: %s\n", peak_full / 2 / 1048576.0, diag_last);
}

/* ---- main ----------------------------------------------------------------------------------- */

static RcLayer *modes(Arena *a, int L, RcLayer m) {
  RcLayer *v = arena_array(a, L + 1, sizeof *v);
  for (int l = 0; l < L; l++) v[l] = m;
  return v;
}

static void run(Arena *a, Graph *g, bool sel_drops) {
  Graph *fwd = pass_decompose(g, false);
  g = pass_decompose(g, false);
  pass_autodiff(g);
  ir_verify(g);
  int L = g->nlayers;
  RcLayer *mixed = modes(a, L, RCL_KEEP);
  for (int l = 0; l < L; l++) mixed[l] = (RcLayer)((l + 1) % RCL_COUNT); /* attn, full, keep, ... */
  struct {
    const char *name;
    RcLayer *m;
  } cases[] = {{"full", modes(a, L, RCL_FULL)}, {"selective", modes(a, L, RCL_ATTN)}, {"mixed", mixed}};
  double *pf[RCL_COUNT] = {NULL, plan_flops(a, fwd, RC_SELECTIVE), plan_flops(a, fwd, RC_FULL)};
  Program *p0 = lower_program(g);
  double **ref = make_values(g, p0);
  interp_run(g, ref, 7);
  int64_t peak[3];
  for (int c = 0; c < 3; c++) {
    Graph *h = pass_recompute(g, cases[c].m);
    ir_verify(h);
    check_structure(cases[c].name, g, h, cases[c].m);
    check_values(cases[c].name, g, h, ref);
    check_flops(cases[c].name, g, h, cases[c].m, pf);
    peak[c] = lower_program(h)->work_peak;
    printf("%-9s work peak %10lld bytes (none: %lld), %.4g forward FLOPs recomputed\n", cases[c].name,
           (long long)peak[c], (long long)p0->work_peak, recompute_flops(g, cases[c].m));
  }
  check(peak[0] < p0->work_peak, "%s: full recompute's work peak %g is not below %g", "memory", peak[0], p0->work_peak);
  if (sel_drops)
    check(peak[1] < p0->work_peak, "%s: selective recompute's work peak %g is not below %g", "memory", peak[1],
          p0->work_peak);
  check_dp(g, p0->work_peak);
  check_choose(g, p0->work_peak, peak[0]);
  interp_release(g, ref);
  for (int i = 0; i < g->n_forward; i++) free(ref[i]);
  free(ref);
}

int main(int argc, char **argv) {
  int first = argc > 1 && !strcmp(argv[1], "--selective-drops") ? 2 : 1;
  if (argc <= first) {
    fprintf(stderr, "usage: test_recompute [--selective-drops] MODEL [NAME=VALUE ...]\n");
    return 2;
  }
  diag_stream = stderr;
  Arena *a = arena_new();
  ConfigOverride ov[16];
  int nov = 0;
  for (int i = first + 1; i < argc && nov < 16; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) return 2;
    *eq = 0;
    ov[nov++] = (ConfigOverride){argv[i], eq + 1, false};
  }
  size_t len;
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    printf("0 passed, 1 failed\n");
    arena_free(a);
    return 1;
  }
  char *text = frontend_read_file(a, argv[first], &len);
  Graph *g = frontend_compile(a, argv[first], text, len, ov, nov);
  if (g) run(a, g, first == 2);
  diag_pop(&j);
  arena_free(a);
  if (!g) return 1;
  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures ? 1 : 0;
}
