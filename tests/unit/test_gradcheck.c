/* Every gradient rule, by construction (STYLE.md habit 7): the test walks the op
 * table and fails for an op with a gradient rule and no case here.
 *
 * A case is a small graph in the IR text form whose last node is the op under test,
 * on float `param`s (random values) and i32 `input`s (the case's fixed values). The
 * test appends loss = sum(op(...) * R), R a random input, runs pass_decompose and
 * pass_autodiff, interprets forward and backward in double (ir/interp.c) and
 * compares every parameter gradient with central finite differences of the loss:
 * the largest error, relative to the largest |gradient| of that parameter, must be
 * below 1e-6. Dropout cases run at a fixed step, so both sides see the same mask.
 *
 * The fp8 ops' rules are straight-through (their forward rounds, so finite differences
 * see steps, not slopes): a twin case checks them against the same graph without the
 * rounding (matmul for scaled_matmul, the identity for fp8_quantize), whose rules the
 * other cases check, on values the rounding keeps (multiples of 1/8 in [0.25, 1.25] for
 * e4m3, and loss weights e5m2 keeps, with a fresh state's scale of 1): the gradients
 * must be equal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ir/interp.h"
#include "ir/ir.h"
#include "passes/passes.h"

enum { STEP = 3 };
static const double TOL = 1e-6;

typedef struct GCase {
  const char *ir;
  const char *ints;
} GCase; /* ints: values of the i32 inputs, in order */

#define P0(t) "%0 = param a : " t "\n"
#define P1(t) "%1 = param b : " t "\n"
#define P2(t) "%2 = param c : " t "\n"

static const GCase cases[] = {
    /* gathers and contractions */
    {P0("f32[6, 4]") "%1 = input i : i32[2, 3]\n%2 = embedding %0, %1 : f32[2, 3, 4]\n", "1 4 1 0 4 4"},
    {P0("f32[6, 3]") "%1 = input i : i32[5]\n%2 = embedding %0, %1 : f32[5, 3]\n", "5 5 2 0 5"},
    {P0("f32[3, 4]") P1("f32[4, 5]") "%2 = matmul %0, %1 : f32[3, 5]\n", NULL},
    {P0("f32[4, 3]") P1("f32[4, 5]") "%2 = matmul %0, %1 transpose_a=1 : f32[3, 5]\n", NULL},
    {P0("f32[3, 4]") P1("f32[5, 4]") "%2 = matmul %0, %1 transpose_b=1 : f32[3, 5]\n", NULL},
    {P0("f32[4, 3]") P1("f32[5, 4]") "%2 = matmul %0, %1 transpose_a=1 transpose_b=1 : f32[3, 5]\n", NULL},
    {P0("f32[2, 3, 4]") P1("f32[4, 5]") "%2 = matmul %0, %1 : f32[2, 3, 5]\n", NULL},
    {P0("f32[2, 3, 4]") P1("f32[5, 4]") "%2 = matmul %0, %1 transpose_b=1 : f32[2, 3, 5]\n", NULL},
    {P0("f32[2, 4, 3]") P1("f32[4, 5]") "%2 = matmul %0, %1 transpose_a=1 : f32[2, 3, 5]\n", NULL},
    {P0("f32[2, 4, 3]") P1("f32[5, 4]") "%2 = matmul %0, %1 transpose_a=1 transpose_b=1 : f32[2, 3, 5]\n", NULL},
    {P0("f32[2, 3, 4]") P1("f32[2, 4, 5]") "%2 = matmul %0, %1 : f32[2, 3, 5]\n", NULL},
    {P0("f32[2, 1, 3, 4]") P1("f32[3, 4, 5]") "%2 = matmul %0, %1 : f32[2, 3, 3, 5]\n", NULL},
    {P0("f32[3, 4]") P1("f32[2, 4, 5]") "%2 = matmul %0, %1 : f32[2, 3, 5]\n", NULL},
    {P0("f32[4, 3]") P1("f32[2, 5, 4]") "%2 = matmul %0, %1 transpose_a=1 transpose_b=1 : f32[2, 3, 5]\n", NULL},
    {P0("f32[2, 4, 3]") P1("f32[1, 5, 4]") "%2 = matmul %0, %1 transpose_a=1 transpose_b=1 : f32[2, 3, 5]\n", NULL},
    /* elementwise */
    {P0("f32[2, 3]") P1("f32[3]") "%2 = add %0, %1 : f32[2, 3]\n", NULL},
    {P0("f32[2, 1]") P1("f32[1, 3]") "%2 = add %0, %1 : f32[2, 3]\n", NULL},
    {P0("f32[]") P1("f32[2, 3]") "%2 = add %0, %1 : f32[2, 3]\n", NULL},
    {P0("f32[4, 1, 3]") P1("f32[2, 3]") "%2 = sub %0, %1 : f32[4, 2, 3]\n", NULL},
    {P0("f32[3]") P1("f32[2, 3]") "%2 = sub %0, %1 : f32[2, 3]\n", NULL},
    {P0("f32[2, 3, 4]") P1("f32[3, 1]") "%2 = mul %0, %1 : f32[2, 3, 4]\n", NULL},
    {P0("f32[4]") P1("f32[2, 3, 4]") "%2 = mul %0, %1 : f32[2, 3, 4]\n", NULL},
    {P0("f32[2, 3]") "%1 = mul %0, %0 : f32[2, 3]\n", NULL},
    {P0("f32[2, 3]") P1("f32[3]") "%2 = div %0, %1 : f32[2, 3]\n", NULL},
    {P0("f32[3]") P1("f32[2, 3]") "%2 = div %0, %1 : f32[2, 3]\n", NULL},
    {P0("f32[2, 1]") P1("f32[1, 3]") "%2 = div %0, %1 : f32[2, 3]\n", NULL},
    {P0("f32[2, 5]") "%1 = neg %0 : f32[2, 5]\n", NULL},
    {P0("f32[2, 5]") "%1 = gelu %0 : f32[2, 5]\n", NULL},
    {P0("f32[2, 5]") "%1 = silu %0 : f32[2, 5]\n", NULL},
    {P0("f32[2, 5]") "%1 = gelu_erf %0 : f32[2, 5]\n", NULL},
    {P0("f32[2, 5]") "%1 = relu %0 : f32[2, 5]\n", NULL},
    {P0("f32[3, 4]") "%1 = dropout %0 p=0 : f32[3, 4]\n", NULL},
    {P0("f32[4, 8]") "%1 = dropout %0 p=0.3 seed=7 : f32[4, 8]\n", NULL},
    {P0("f32[2, 3]") "%1 = cast %0 dtype=f32 : f32[2, 3]\n", NULL},
    {P0("f32[2, 5, 8]") "%1 = rotary %0 heads=2 : f32[2, 5, 8]\n", NULL},
    {P0("f32[6, 4]") "%1 = rotary %0 heads=1 theta=100 inverse=1 : f32[6, 4]\n", NULL},
    /* normalisations and reductions */
    {P0("f32[2, 3, 8]") P1("f32[8]") P2("f32[8]") "%3 = layernorm %0, %1, %2 : f32[2, 3, 8]\n", NULL},
    {P0("f32[4, 5]") P1("f32[5]") P2("f32[5]") "%3 = layernorm %0, %1, %2 eps=0.01 : f32[4, 5]\n", NULL},
    {P0("f32[3, 8]") P1("f32[8]") "%2 = rmsnorm %0, %1 : f32[3, 8]\n", NULL},
    {P0("f32[2, 2, 6]") P1("f32[6]") "%2 = rmsnorm %0, %1 eps=0.001 : f32[2, 2, 6]\n", NULL},
    {P0("f32[2, 5]") "%1 = softmax %0 : f32[2, 5]\n", NULL},
    {P0("f32[3, 4, 2]") "%1 = softmax %0 axis=1 : f32[3, 4, 2]\n", NULL},
    {P0("f32[3, 2]") "%1 = softmax %0 axis=0 : f32[3, 2]\n", NULL},
    {P0("f32[2, 3, 5]") "%1 = softmax %0 causal=1 : f32[2, 3, 5]\n", NULL},
    {P0("f32[4, 4]") "%1 = softmax %0 causal=1 : f32[4, 4]\n", NULL},
    {P0("f32[2, 3, 4]") "%1 = sum %0 axis=1 : f32[2, 4]\n", NULL},
    {P0("f32[2, 3, 4]") "%1 = sum %0 : f32[]\n", NULL},
    {P0("f32[2, 3, 4]") "%1 = sum %0 axis=-1 keepdim=1 : f32[2, 3, 1]\n", NULL},
    {P0("f32[2, 3, 4]") "%1 = sum %0 keepdim=1 : f32[1, 1, 1]\n", NULL},
    {P0("f32[3, 4]") "%1 = mean %0 axis=0 : f32[4]\n", NULL},
    {P0("f32[2, 3, 4]") "%1 = mean %0 : f32[]\n", NULL},
    {P0("f32[2, 3, 4]") "%1 = mean %0 axis=1 keepdim=1 : f32[2, 1, 4]\n", NULL},
    {P0("f32[2, 3, 5]") "%1 = input t : i32[2, 3]\n%2 = cross_entropy %0, %1 : f32[]\n", "1 4 -1 0 2 4"},
    {P0("f32[4, 6]") "%1 = input t : i32[4]\n%2 = cross_entropy %0, %1 ignore_index=3 : f32[]\n", "3 0 5 1"},
    /* attention (decomposed before autodiff) */
    {P0("f32[2, 4, 8]") P1("f32[2, 4, 8]")
         P2("f32[2, 4, 8]") "%3 = attention %0, %1, %2 heads=2 causal=1 : f32[2, 4, 8]\n",
     NULL},
    {P0("f32[2, 4, 8]") P1("f32[2, 4, 8]") P2("f32[2, 4, 8]") "%3 = attention %0, %1, %2 heads=2 : f32[2, 4, 8]\n",
     NULL},
    {P0("f32[1, 3, 8]") P1("f32[1, 5, 8]")
         P2("f32[1, 5, 8]") "%3 = attention %0, %1, %2 heads=4 scale=0.5 : f32[1, 3, 8]\n",
     NULL},
    /* grouped-query attention (4 query heads on 2 and 1 key/value heads), in a window */
    {P0("f32[2, 5, 8]") P1("f32[2, 5, 4]")
         P2("f32[2, 5, 4]") "%3 = attention %0, %1, %2 heads=4 causal=1 kv_heads=2 window=2 : f32[2, 5, 8]\n",
     NULL},
    {P0("f32[1, 3, 8]") P1("f32[1, 5, 2]")
         P2("f32[1, 5, 2]") "%3 = attention %0, %1, %2 heads=4 kv_heads=1 : f32[1, 3, 8]\n",
     NULL},
    /* the fused classifier, w as [V, d] and [d, V], chunks that do not divide the rows */
    {P0("f32[2, 3, 4]")
         P1("f32[6, 4]") "%2 = input t : i32[2, 3]\n%3 = classifier_ce %0, %1, %2 transpose_b=1 chunk=4 : f32[]\n",
     "1 5 0 2 2 3"},
    {P0("f32[5, 4]")
         P1("f32[4, 6]") "%2 = input t : i32[5]\n%3 = classifier_ce %0, %1, %2 ignore_index=0 chunk=2 : f32[]\n",
     "1 0 5 2 0"},
    /* fused attention (its output rows end with each head's log-sum-exp, differentiated too) */
    {P0("f32[2, 4, 8]") P1("f32[2, 4, 8]")
         P2("f32[2, 4, 8]") "%3 = flash_attention %0, %1, %2 heads=2 causal=1 : f32[2, 4, 10]\n",
     NULL},
    {P0("f32[1, 3, 8]") P1("f32[1, 5, 8]")
         P2("f32[1, 5, 8]") "%3 = flash_attention %0, %1, %2 heads=4 scale=0.5 : f32[1, 3, 12]\n",
     NULL},
    {P0("f32[2, 6, 8]") P1("f32[2, 6, 4]")
         P2("f32[2, 6, 4]") "%3 = flash_attention %0, %1, %2 heads=4 causal=1 kv_heads=2 window=3 : f32[2, 6, 12]\n",
     NULL},
    {P0("f32[1, 3, 8]") P1("f32[1, 5, 2]")
         P2("f32[1, 5, 2]") "%3 = flash_attention %0, %1, %2 heads=4 kv_heads=1 : f32[1, 3, 12]\n",
     NULL},
    /* data movement */
    {P0("f32[2, 3, 4]") "%1 = reshape %0 shape=[6,-1] : f32[6, 4]\n", NULL},
    {P0("f32[2, 3, 4]") "%1 = transpose %0 perm=[2,0,1] : f32[4, 2, 3]\n", NULL},
    {P0("f32[3, 5]") "%1 = transpose %0 perm=[1,0] : f32[5, 3]\n", NULL},
    {P0("f32[2, 4, 3]") "%1 = slice %0 axis=1 start=1 end=3 : f32[2, 2, 3]\n", NULL},
    {P0("f32[3, 5]") "%1 = slice %0 axis=-1 start=0 end=2 : f32[3, 2]\n", NULL},
    {P0("f32[2, 3]") P1("f32[2, 1]") P2("f32[2, 2]") "%3 = concat %0, %1, %2 axis=1 : f32[2, 6]\n", NULL},
    {P0("f32[1, 3]") P1("f32[2, 3]") "%2 = concat %0, %1 axis=-2 : f32[3, 3]\n", NULL},
    /* collectives, over one rank (where each is the identity): their rules compose to it;
     * tests/multirank checks them over several */
    {P0("f32[2, 4]") "%1 = all_reduce %0 ranks=1 : f32[2, 4]\n", NULL},
    {P0("f32[2, 4]") "%1 = tp_copy %0 ranks=1 : f32[2, 4]\n", NULL},
    {P0("f32[2, 4]") "%1 = all_gather %0 axis=1 ranks=1 blocks=2 : f32[2, 4]\n", NULL},
    {P0("f32[2, 4]") "%1 = reduce_scatter %0 axis=1 ranks=1 : f32[2, 4]\n", NULL},
    {P0("f32[2, 4]") "%1 = split %0 axis=0 ranks=1 : f32[2, 4]\n", NULL},
    {P0("f32[1, 4]") "%1 = all_to_all %0 ranks=1 : f32[1, 4]\n", NULL},
    {P0("f32[1, 3]") "%1 = broadcast %0 shape=[2,4,3] : f32[2, 4, 3]\n", NULL},
    {P0("f32[3, 1]") "%1 = broadcast %0 shape=[2,3,4] : f32[2, 3, 4]\n", NULL},
};

/* Ops without a gradient rule to check: sources, the gradient ops autodiff makes
 * (no second order), ops whose output is never floating-point (today only the
 * source arange), and ops of integer inputs alone (ce_count, a count of targets).
 * main checks this list against the table. */
static const char *const nondiff[] = {
    "input",
    "param",
    "const",
    "arange",
    "loss_scale",
    "sum_to",
    "gelu_grad",
    "gelu_erf_grad",
    "silu_grad",
    "relu_grad",
    "layernorm_grad",
    "rmsnorm_grad",
    "softmax_grad",
    "cross_entropy_grad",
    "embedding_grad",
    "pad",
    "flash_attention_grad",
    "classifier_ce_grad",
    "fp8_state",
    "ce_count",
};

static bool listed_nondiff(const char *name) {
  for (size_t i = 0; i < sizeof nondiff / sizeof *nondiff; i++)
    if (!strcmp(nondiff[i], name)) return true;
  return false;
}

/* What the list must be: sources, *_grad, sum_to and pad (the gradient ops), and
 * ce_count. */
static bool rule_nondiff(OpKind op) {
  const OpInfo *oi = op_info(op);
  size_t len = strlen(oi->name);
  return oi->cls == CLS_SOURCE || (len > 5 && !strcmp(oi->name + len - 5, "_grad")) || !strcmp(oi->name, "sum_to") ||
         !strcmp(oi->name, "pad") || op == OP_CE_COUNT;
}

/* ---- values -------------------------------------------------------------------------- */

static uint64_t rng_state;
static double rng_unit(void) { /* splitmix64 → [0, 1) */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}
/* Magnitudes in [0.25, 1.25] with a random sign: away from relu's kink and from 0 as
 * a divisor, further than any finite-difference step. */
static double rng_value(void) {
  double m = 0.25 + rng_unit();
  return rng_unit() < 0.5 ? -m : m;
}

/* Fills the caller-given values (params, inputs) of h. */
static bool fill_inputs(const Graph *h, double **vals, const char *ints) {
  const char *p = ints ? ints : "";
  for (int i = 0; i < h->n_forward; i++) {
    const Node *n = h->nodes[i];
    if (n->op != OP_INPUT && n->op != OP_PARAM) continue;
    int64_t N = shape_numel(&n->shape);
    vals[i] = malloc((N ? N : 1) * sizeof **vals);
    for (int64_t k = 0; k < N; k++) {
      if (dtype_is_float(n->dtype)) {
        vals[i][k] = rng_value();
        continue;
      }
      char *e;
      vals[i][k] = (double)strtol(p, &e, 10);
      if (e == p) {
        printf("FAIL: too few i32 values for input %s\n", n->name);
        return false;
      }
      p = e;
    }
  }
  return true;
}

/* ---- one case ---------------------------------------------------------------------------- */

/* The case's graph with loss = sum(y * R) appended, decomposed and differentiated. */
static Graph *build(Arena *a, const GCase *c, OpKind *op) {
  SrcFile *src = arena_alloc(a, sizeof *src);
  src->name = "case.ir";
  src->text = arena_printf(a, "graph gradcheck\n%s", c->ir);
  src->len = strlen(src->text);
  Graph *g = ir_parse(a, src);
  Node *y = g->nodes[g->n - 1];
  *op = y->op;
  Node *r = graph_add(g, OP_INPUT, NULL, 0, y->loc);
  r->name = "R";
  r->dtype = y->dtype;
  r->shape = y->shape;
  node_infer(r);
  Node *m = graph_add(g, OP_MUL, (Node *[]){y, r}, 2, y->loc);
  node_infer(m);
  Node *s = graph_add(g, OP_SUM, &m, 1, y->loc);
  node_infer(s);
  g->loss = s;
  ir_verify(g);
  Graph *h = pass_decompose(g, false);
  ir_verify(h);
  pass_autodiff(h);
  ir_verify(h);
  return h;
}

static double loss_at(const Graph *h, double **vals) {
  Graph fwd = *h;
  fwd.n = h->n_forward;
  interp_run(&fwd, vals, STEP);
  return vals[h->loss->id][0];
}

/* max |analytic - numeric| / max |numeric| over one parameter. */
static double check_param(const Graph *h, double **vals, int k) {
  const Node *p = h->params[k];
  const double *an = vals[h->param_grads[k]->id];
  double *x = vals[p->id], maxerr = 0, maxg = 0;
  for (int64_t i = 0, N = shape_numel(&p->shape); i < N; i++) {
    double x0 = x[i], step = 1e-6 * fmax(1, fabs(x0));
    x[i] = x0 + step;
    double lp = loss_at(h, vals);
    x[i] = x0 - step;
    double lm = loss_at(h, vals);
    x[i] = x0;
    double num = (lp - lm) / (2 * step);
    maxerr = fmax(maxerr, fabs(an[i] - num));
    maxg = fmax(maxg, fabs(num));
  }
  return maxg > 0 ? maxerr / maxg : maxerr;
}

/* Dropout with p > 0 must drop some elements and keep others. */
static bool dropout_drops(const Graph *h, double **vals) {
  const Node *y = h->loss->in[0]->in[0];
  if (y->op != OP_DROPOUT || attr_float(y, "p") == 0) return true;
  int64_t N = shape_numel(&y->shape), zeros = 0;
  for (int64_t i = 0; i < N; i++) zeros += vals[y->id][i] == 0;
  if (zeros == 0 || zeros == N)
    printf("FAIL dropout p=%g dropped %lld of %lld\n", attr_float(y, "p"), (long long)zeros, (long long)N);
  return zeros > 0 && zeros < N;
}

/* Runs case c; returns its max relative error (INFINITY on a structural failure). */
static double run_case(const GCase *c, int index, OpKind *op) {
  Arena *a = arena_new();
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    diag_pop(&j);
    printf("FAIL case %d: %s\n%s", index, diag_last, c->ir);
    arena_free(a);
    return INFINITY;
  }
  Graph *h = build(a, c, op);
  diag_pop(&j);
  rng_state = 0x5eed0000u + (uint64_t)index;
  double **vals = calloc(h->n, sizeof *vals), worst = 0;
  if (!fill_inputs(h, vals, c->ints)) worst = INFINITY;
  if (worst == 0) interp_run(h, vals, STEP);
  if (worst == 0 && !dropout_drops(h, vals)) worst = INFINITY;
  for (int k = 0; k < h->nparams && worst < INFINITY; k++) {
    if (!h->param_grads[k]) {
      printf("FAIL case %d: no gradient for %s\n", index, h->params[k]->name);
      worst = INFINITY;
      break;
    }
    double e = check_param(h, vals, k);
    if (e > TOL || isnan(e))
      printf("FAIL case %d (%s): gradient of %s: max rel err %.3g\n%s", index, op_info(*op)->name, h->params[k]->name,
             e, c->ir);
    worst = isnan(e) ? INFINITY : fmax(worst, e);
  }
  interp_release(h, vals);
  for (int i = 0; i < h->n; i++) free(vals[i]); /* the inputs and params */
  free(vals);
  arena_free(a);
  return worst;
}

/* ---- straight-through rules: twins ------------------------------------------------------------- */

typedef struct Twin {
  const char *ir, *twin;
} Twin; /* the same params a, b (and input R) in both */

#define FP8_AB(ta, tb)                                                     \
  P0(ta)                                                                   \
  P1(tb)                                                                   \
  "%2 = fp8_state history=4 : f32[6]\n%3 = fp8_state history=4 : f32[6]\n" \
  "%4 = fp8_state history=4 : f32[6]\n"

static const Twin twins[] = {
    {FP8_AB(
         "f32[2, 3, 4]",
         "f32[4, 5]") "%5 = fp8_quantize %0, %2 dtype=e4m3 : e4m3[2, 3, 4]\n"
                      "%6 = fp8_quantize %1, %3 dtype=e4m3 : e4m3[4, 5]\n%7 = scaled_matmul %5, %6, %2, %3, %4 dtype=f32 : f32[2, 3, 5]\n",
     P0("f32[2, 3, 4]") P1("f32[4, 5]") "%2 = matmul %0, %1 : f32[2, 3, 5]\n"},
    {FP8_AB("f32[3, 4]",
            "f32[5, 4]") "%5 = fp8_quantize %0, %2 dtype=e4m3 : e4m3[3, 4]\n"
                         "%6 = fp8_quantize %1, %3 dtype=e4m3 : e4m3[5, 4]\n"
                         "%7 = scaled_matmul %5, %6, %2, %3, %4 transpose_b=1 dtype=bf16 margin=1 : bf16[3, 5]\n",
     P0("f32[3, 4]") P1("f32[5, 4]") "%2 = matmul %0, %1 transpose_b=1 : f32[3, 5]\n"},
    {FP8_AB(
         "f32[4, 3]",
         "f32[4, 5]") "%5 = fp8_quantize %0, %2 dtype=e4m3 : e4m3[4, 3]\n"
                      "%6 = fp8_quantize %1, %3 dtype=e4m3 : e4m3[4, 5]\n%7 = scaled_matmul %5, %6, %2, %3, %4 transpose_a=1 dtype=f32 : f32[3, 5]\n",
     P0("f32[4, 3]") P1("f32[4, 5]") "%2 = matmul %0, %1 transpose_a=1 : f32[3, 5]\n"},
    {P0("f32[3, 4]") "%1 = fp8_state history=2 : f32[4]\n%2 = fp8_quantize %0, %1 dtype=e5m2 : e5m2[3, 4]\n",
     P0("f32[3, 4]") "%1 = reshape %0 shape=[3, 4] : f32[3, 4]\n"},
};

/* A value both fp8 types keep: a multiple of 1/4 in [0.25, 1.25] (2 significant bits). */
static double grid_value(void) {
  double m = 0.25 * (1 + floor(rng_unit() * 5));
  return rng_unit() < 0.5 ? -m : m;
}

/* The gradients of t's case and of its twin, from the same grid values; returns the
 * largest difference (INFINITY on a structural failure). *op: the case's op. */
static double run_twin(const Twin *t, int index, OpKind *op) {
  Arena *a = arena_new();
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    diag_pop(&j);
    printf("FAIL twin %d: %s\n%s", index, diag_last, t->ir);
    arena_free(a);
    return INFINITY;
  }
  OpKind top;
  Graph *h[2] = {build(a, &(GCase){t->ir, NULL}, op), build(a, &(GCase){t->twin, NULL}, &top)};
  diag_pop(&j);
  double **vals[2], worst = 0;
  for (int g = 0; g < 2; g++) {
    rng_state = 0x7e1e0000u + (uint64_t)index; /* the same draws, in the same order, for both */
    vals[g] = calloc(h[g]->n, sizeof **vals);
    for (int i = 0; i < h[g]->n_forward; i++) {
      const Node *n = h[g]->nodes[i];
      if (n->op != OP_INPUT && n->op != OP_PARAM) continue;
      int64_t N = shape_numel(&n->shape);
      vals[g][i] = malloc((N ? N : 1) * sizeof ***vals);
      for (int64_t k = 0; k < N; k++) vals[g][i][k] = grid_value();
    }
    interp_run(h[g], vals[g], STEP);
  }
  for (int k = 0; k < h[0]->nparams; k++) {
    const Node *p = h[0]->params[k], *q = h[1]->params[k];
    if (strcmp(p->name, q->name) || !h[0]->param_grads[k] || !h[1]->param_grads[k]) {
      printf("FAIL twin %d: parameters or gradients differ\n", index);
      worst = INFINITY;
      break;
    }
    const double *x = vals[0][h[0]->param_grads[k]->id], *y = vals[1][h[1]->param_grads[k]->id];
    for (int64_t i = 0, N = shape_numel(&p->shape); i < N; i++) worst = fmax(worst, fabs(x[i] - y[i]));
  }
  if (worst > 0)
    printf("FAIL twin %d (%s): gradients differ from the twin's by %.3g\n%s", index, op_info(*op)->name, worst, t->ir);
  for (int g = 0; g < 2; g++) {
    interp_release(h[g], vals[g]);
    for (int i = 0; i < h[g]->n; i++) free(vals[g][i]);
    free(vals[g]);
  }
  arena_free(a);
  return worst;
}

/* ---- the table walk -------------------------------------------------------------------------- */

static int check_coverage(const int *ncases) {
  int failures = 0;
  for (int k = 0; k < OP_COUNT; k++) {
    const char *name = op_info((OpKind)k)->name;
    bool listed = listed_nondiff(name);
    if (listed != rule_nondiff((OpKind)k)) {
      printf("FAIL op %s: %s a source or gradient op\n", name,
             listed ? "listed non-differentiable but not" : "not listed non-differentiable but");
      failures++;
    }
    if (!listed && !ncases[k]) {
      printf("FAIL op %s has a gradient rule but no gradcheck case\n", name);
      failures++;
    }
    if (listed && ncases[k]) {
      printf("FAIL op %s has a gradcheck case but is listed non-differentiable\n", name);
      failures++;
    }
  }
  return failures;
}

int main(void) {
  diag_stream = stdout;
  op_table_init();
  int ncases[OP_COUNT] = {0}, failures = 0, n = sizeof cases / sizeof *cases;
  double maxerr[OP_COUNT] = {0};
  for (int i = 0; i < n; i++) {
    OpKind op = OP_COUNT;
    double e = run_case(&cases[i], i, &op);
    if (!(e <= TOL)) failures++;
    if (op == OP_COUNT) continue;
    ncases[op]++;
    maxerr[op] = fmax(maxerr[op], e);
  }
  int ntwins = sizeof twins / sizeof *twins;
  for (int i = 0; i < ntwins; i++) {
    OpKind op = OP_COUNT;
    double e = run_twin(&twins[i], i, &op);
    if (!(e == 0)) failures++;
    if (op == OP_COUNT) continue;
    ncases[op]++;
    maxerr[op] = fmax(maxerr[op], e);
  }
  for (int k = 0; k < OP_COUNT; k++)
    if (ncases[k])
      printf("%-14s %2d case%s  max rel err %.2e\n", op_info((OpKind)k)->name, ncases[k], ncases[k] == 1 ? " " : "s",
             maxerr[k]);
  failures += check_coverage(ncases);
  printf("%d gradient cases and %d twins: %d failed\n", n, ntwins, failures);
  return failures != 0;
}
