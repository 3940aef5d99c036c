/* Patterns of the ONNX importer: what exporters spell out op by op and the IR has as
 * one op. Matching reads the ONNX nodes that computed a value (OVal.def), so it sees
 * through what was already imported; the IR nodes a match makes unread are pruned.
 *
 *   activations  an elementwise function of one tensor x (Mul, Div, Erf, Tanh, Pow,
 *                Sigmoid, ... of x and scalar constants) that equals GELU (erf or tanh
 *                form), SiLU or ReLU: recognised by evaluating it, so that any order
 *                of the exporter's ops matches;
 *   layernorm    (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * w + b;
 *   rmsnorm      x / sqrt(mean(x^2) + eps) * w (or x * rsqrt(...), in any order);
 *   rotary       x * cos + cat(-x2, x1) * sin with cos and sin constant tables of
 *                positions that equal the IR's rotary angles for some theta;
 *   causal mask  scores + M or Where(C, scores, -inf) with a constant M or C that is
 *                the causal mask: the IR's softmax(causal);
 *   attention    softmax(q kᵀ * scale [+ causal mask]) v on heads views
 *                (Transpose(Reshape(p, [B, S, H, hd]), [0, 2, 1, 3])), rotary or not,
 *                merged back to [B, S, H*hd]: the IR's attention op. */
#include <math.h>
#include <string.h>
#include "frontend/onnx_imp.h"

enum { MAX_FACTORS = 16, MAX_CANDIDATES = 64, MAX_DEPTH = 24, VISIT_BUDGET = 512 };

static OVal *in0(const OVal *v) { return v->def->nin > 0 ? v->def->in[0] : NULL; }
static OVal *in1(const OVal *v) { return v->def->nin > 1 ? v->def->in[1] : NULL; }
static bool uniform(const OVal *v, double *c) { return v && v->kind == OV_CONST && ot_uniform(v->c, c); }

/* ---- activations: functions of one tensor, by evaluation ------------------------------------- */

/* v computed by an elementwise op (onnx_fold.c evaluates them): its arity, else 0 */
static int ew_op(const OVal *v) { return !v || v->kind == OV_CONST || !v->def ? 0 : ew_arity(v->def->op); }

/* Whether v is a function of x alone: every path down from v through the ops above
 * ends at x or at a constant all of whose elements are equal. */
static bool only_of(const OVal *v, const OVal *x, int depth, int *budget) {
  double c;
  if (v == x) return true;
  if (--*budget < 0 || depth > MAX_DEPTH) return false;
  if (v && v->kind == OV_CONST) return uniform(v, &c);
  int arity = ew_op(v);
  if (!arity || v->def->nin < arity) return false;
  for (int i = 0; i < arity; i++)
    if (!only_of(v->def->in[i], x, depth + 1, budget)) return false;
  return true;
}

static double eval_at(const OVal *v, const OVal *x, double t) {
  if (v == x) return t;
  if (v->kind == OV_CONST) return ot_get(v->c, 0);
  return ew_apply(v->def->op, eval_at(in0(v), x, t), ew_op(v) == 2 ? eval_at(in1(v), x, t) : 0);
}

static double gelu_erf_f(double x) { return 0.5 * x * (1 + erf(x * M_SQRT1_2)); }
static double gelu_tanh_f(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double silu_f(double x) { return x / (1 + exp(-x)); }
static double relu_f(double x) { return x > 0 ? x : 0; }

/* The tensors v may be a function of, nearest first (breadth first): n of them. */
static int arguments_of(OVal *v, OVal **seen) {
  int n = 0;
  seen[n++] = v;
  for (int i = 0; i < n; i++) {
    int arity = ew_op(seen[i]);
    for (int k = 0; k < arity && k < seen[i]->def->nin; k++) {
      OVal *c = seen[i]->def->in[k];
      bool dup = !c || c->kind == OV_CONST;
      for (int j = 0; !dup && j < n; j++) dup = seen[j] == c;
      if (!dup && n < MAX_CANDIDATES) seen[n++] = c;
    }
  }
  return n;
}

/* Whether v, a function of x alone, equals f (on points that tell the activations apart). */
static bool equals(const OVal *v, const OVal *x, double (*f)(double)) {
  static const double xs[] = {-6,  -4,   -3,  -2.5, -2, -1.5, -1, -0.75, -0.5, -0.25, -0.1, 0,
                              0.1, 0.25, 0.5, 0.75, 1,  1.5,  2,  2.5,   3,    4,     6};
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) {
    double want = f(xs[i]);
    if (!(fabs(eval_at(v, x, xs[i]) - want) <= 1e-5 * (1 + fabs(want)))) return false;
  }
  return true;
}

/* v = f(x) for an activation f, x the nearest tensor v is a function of that makes it one. */
static Node *match_activation(Imp *m, OVal *v) {
  static const struct {
    OpKind op;
    double (*f)(double);
  } acts[] = {{OP_GELU_ERF, gelu_erf_f}, {OP_GELU, gelu_tanh_f}, {OP_SILU, silu_f}, {OP_RELU, relu_f}};
  OVal *seen[MAX_CANDIDATES];
  int n = arguments_of(v, seen);
  for (int i = 1; i < n; i++) {
    OVal *x = seen[i];
    int budget = VISIT_BUDGET;
    if (!shape_eq(ov_shape(x), &v->shape) || !dtype_is_float(x->dtype) || !only_of(v, x, 0, &budget)) continue;
    for (size_t a = 0; a < sizeof acts / sizeof *acts; a++)
      if (equals(v, x, acts[a].f)) return imp_op1(m, v->def, acts[a].op, ov_node(m, x));
  }
  return NULL;
}

/* ---- products: normalisations ------------------------------------------------------------ */

typedef struct Factor {
  OVal *base;
  double pow;
} Factor;
typedef struct Product {
  Factor f[MAX_FACTORS];
  int n;
  double coef;
} Product;

/* v^p as factors and a coefficient, through Mul, Div, Reciprocal, Sqrt, Neg and Pow by
 * a constant; stop (if any) is kept whole, and so is a constant tensor. */
static bool product(OVal *v, double p, const OVal *stop, Product *pr, int depth) {
  double c;
  if (!v || depth > MAX_DEPTH) return false;
  if (v != stop && uniform(v, &c)) {
    pr->coef *= pow(c, p);
    return true;
  }
  const char *op = v != stop && v->kind != OV_CONST && v->def ? v->def->op : "";
  if (!strcmp(op, "Mul")) return product(in0(v), p, stop, pr, depth + 1) && product(in1(v), p, stop, pr, depth + 1);
  if (!strcmp(op, "Div")) return product(in0(v), p, stop, pr, depth + 1) && product(in1(v), -p, stop, pr, depth + 1);
  if (!strcmp(op, "Reciprocal")) return product(in0(v), -p, stop, pr, depth + 1);
  if (!strcmp(op, "Sqrt")) return product(in0(v), p / 2, stop, pr, depth + 1);
  if (!strcmp(op, "Pow") && uniform(in1(v), &c)) return product(in0(v), p * c, stop, pr, depth + 1);
  if (!strcmp(op, "Neg") && fabs(p) == 1) {
    pr->coef = -pr->coef;
    return product(in0(v), p, stop, pr, depth + 1);
  }
  for (int i = 0; i < pr->n; i++)
    if (pr->f[i].base == v) return pr->f[i].pow += p, true;
  if (pr->n == MAX_FACTORS) return false;
  pr->f[pr->n++] = (Factor){v, p};
  return true;
}

static bool product_of(OVal *v, const OVal *stop, Product *pr) {
  *pr = (Product){.coef = 1};
  return product(v, 1, stop, pr, 0);
}

/* The one factor of a power, or NULL. */
static OVal *factor(const Product *pr, double p) {
  OVal *f = NULL;
  for (int i = 0; i < pr->n; i++)
    if (fabs(pr->f[i].pow - p) < 1e-9) {
      if (f) return NULL;
      f = pr->f[i].base;
    }
  return f;
}

/* v = ReduceMean(x) over x's last axis, keeping it: x, or NULL. */
static OVal *mean_last(OVal *v) {
  if (!ov_is(v, "ReduceMean") || v->kind == OV_CONST) return NULL;
  int64_t axes[MAX_DIMS];
  OVal *x = in0(v);
  int k = node_axes(v->def, 1, 18, axes), nd = ov_shape(x)->ndim;
  if (k != 1 || !attr_i(v->def, "keepdims", 1) || (axes[0] != -1 && axes[0] != nd - 1)) return NULL;
  return x;
}

/* a = mean(q) + eps over the last axis: q, and eps */
static OVal *variance_of(OVal *a, double *eps) {
  if (!ov_is(a, "Add") || a->kind == OV_CONST) return NULL;
  OVal *x = in0(a), *y = in1(a), *q;
  if (uniform(x, eps) && (q = mean_last(y))) return *eps > 0 ? q : NULL;
  if (uniform(y, eps) && (q = mean_last(x))) return *eps > 0 ? q : NULL;
  return NULL;
}

/* q = x^2 (Pow(x, 2) or x * x): x, or NULL */
static OVal *square_of(OVal *q) {
  double c;
  if (ov_is(q, "Pow") && q->kind != OV_CONST && uniform(in1(q), &c) && c == 2) return in0(q);
  if (ov_is(q, "Mul") && q->kind != OV_CONST && in0(q) == in1(q)) return in0(q);
  return NULL;
}

/* p = x * a^-0.5 * w with w [d] (d x's last axis): w, or NULL */
static OVal *scaled_by(OVal *p, OVal *x, OVal *a) {
  Product pr;
  if (!product_of(p, x, &pr) || pr.n != 3 || fabs(pr.coef - 1) > 1e-6 || factor(&pr, 1) || factor(&pr, -0.5) != a)
    return NULL;
  OVal *w = NULL;
  for (int i = 0; i < 3; i++)
    if (pr.f[i].base != x && pr.f[i].base != a && fabs(pr.f[i].pow - 1) < 1e-9) w = pr.f[i].base;
  const Shape *xs = ov_shape(x);
  bool has_x = false;
  for (int i = 0; i < 3; i++) has_x |= pr.f[i].base == x && fabs(pr.f[i].pow - 1) < 1e-9;
  if (!w || !has_x || w->kind == OV_CONST || ov_shape(w)->ndim != 1 || ov_shape(w)->d[0] != xs->d[xs->ndim - 1])
    return NULL;
  return w;
}

static Node *match_rmsnorm(Imp *m, OVal *v) {
  Product pr;
  double eps;
  OVal *a, *q, *x, *w;
  if (!product_of(v, NULL, &pr) || !(a = factor(&pr, -0.5)) || !(q = variance_of(a, &eps)) || !(x = square_of(q)) ||
      !shape_eq(ov_shape(x), &v->shape) || !(w = scaled_by(v, x, a)))
    return NULL;
  Node *r = imp_op2(m, v->def, OP_RMSNORM, ov_node(m, x), ov_node(m, w));
  ir_set_float(r, "eps", f32_short(eps));
  return imp_infer(r);
}

static Node *match_layernorm(Imp *m, OVal *v) {
  if (!ov_is(v, "Add")) return NULL;
  for (int side = 0; side < 2; side++) {
    OVal *p = side ? in1(v) : in0(v), *b = side ? in0(v) : in1(v), *a, *q, *d, *x, *w;
    Product pr;
    double eps;
    if (!b || b->kind == OV_CONST || ov_shape(b)->ndim != 1 || !product_of(p, NULL, &pr) || !(a = factor(&pr, -0.5)) ||
        !(q = variance_of(a, &eps)) || !(d = square_of(q)) || !ov_is(d, "Sub") || d->kind == OV_CONST ||
        !(x = in0(d)) || mean_last(in1(d)) != x || !shape_eq(ov_shape(x), &v->shape) || !(w = scaled_by(p, d, a)) ||
        ov_shape(b)->d[0] != ov_shape(w)->d[0])
      continue;
    Node *in[3] = {ov_node(m, x), ov_node(m, w), ov_node(m, b)};
    Node *r = imp_node(m, v->def, OP_LAYERNORM, in, 3);
    ir_set_float(r, "eps", f32_short(eps));
    return imp_infer(r);
  }
  return NULL;
}

/* ---- rotary embeddings ------------------------------------------------------------------- */

/* v = Slice(x) along x's last axis only, step 1: x and the range */
static OVal *slice_last(OVal *v, int64_t *start, int64_t *end) {
  if (!ov_is(v, "Slice") || v->kind == OV_CONST) return NULL;
  OVal *x = in0(v);
  const Shape *xs = ov_shape(x);
  SliceAx r[MAX_DIMS];
  slice_ranges(v->def, xs, r);
  for (int d = 0; d < xs->ndim - 1; d++)
    if (r[d].start || r[d].count != xs->d[d]) return NULL;
  const SliceAx *l = &r[xs->ndim - 1];
  if (l->step != 1) return NULL;
  *start = l->start, *end = l->start + l->count;
  return x;
}

/* r = cat(-x[..., h:], x[..., :h]) on the last axis (rotate_half): x, or NULL */
static OVal *rotate_half_of(OVal *r) {
  if (!ov_is(r, "Concat") || r->kind == OV_CONST || r->def->nin != 2) return NULL;
  int nd = ov_shape(r)->ndim;
  if (norm_axis(r->def, attr_i(r->def, "axis", 0), nd) != nd - 1 || !ov_is(in0(r), "Neg")) return NULL;
  int64_t s1, e1, s0, e0;
  OVal *x = slice_last(in0(in0(r)), &s1, &e1), *x0 = slice_last(in1(r), &s0, &e0);
  if (!x || x != x0) return NULL;
  int64_t hd = ov_shape(x)->d[nd - 1];
  return hd % 2 == 0 && s0 == 0 && e0 == hd / 2 && s1 == hd / 2 && e1 == hd ? x : NULL;
}

/* The table t (cos or sin) over positions and features of x [..., T, hd]: t's element
 * (pos, i), or NaN where t does not have that layout. */
static bool table_layout(const OTensor *t, const Shape *xs) {
  int nd = xs->ndim;
  Shape b;
  if (!ot_is_float(t->type) || t->shape.ndim < 2 || t->shape.ndim > nd || !shape_broadcast(&t->shape, xs, &b) ||
      !shape_eq(&b, xs))
    return false;
  for (int d = 0; d < t->shape.ndim - 2; d++)
    if (t->shape.d[d] != 1) return false;
  return t->shape.d[t->shape.ndim - 2] == xs->d[nd - 2] && t->shape.d[t->shape.ndim - 1] == xs->d[nd - 1];
}

/* Whether cos and sin are the tables of the IR's rotary angles pos * theta^(-2i/hd)
 * (each frequency twice, as rotate_half pairs them), for the theta they imply. */
static bool rotary_tables(const OTensor *c, const OTensor *s, const Shape *xs, double *theta) {
  if (!table_layout(c, xs) || !table_layout(s, xs)) return false;
  int64_t T = xs->d[xs->ndim - 2], hd = xs->d[xs->ndim - 1], h = hd / 2;
  if (hd < 2 || hd % 2) return false; /* rotate_half pairs the features */
  *theta = 10000;
  if (hd >= 4 && T >= 2) { /* position 1, frequency 1: theta^(-2/hd) */
    double ang = atan2(s->f[hd + 1], c->f[hd + 1]);
    if (!(ang > 0 && ang < 1)) return false;
    *theta = pow(ang, -(double)hd / 2);
    if (fabs(*theta - round(*theta)) < 1e-4 * *theta) *theta = round(*theta);
  }
  for (int64_t p = 0; p < T; p++)
    for (int64_t i = 0; i < hd; i++) {
      double a = (double)p * pow(*theta, -2.0 * (double)(i % h) / (double)hd), tol = 1e-4 + 1e-6 * (double)p;
      if (fabs(c->f[p * hd + i] - cos(a)) > tol || fabs(s->f[p * hd + i] - sin(a)) > tol) return false;
    }
  return true;
}

/* v = x * cos + rotate_half(x) * sin: x and theta */
static bool rotary_parts(OVal *v, OVal **x, double *theta) {
  if (!ov_is(v, "Add") || v->kind != OV_DEFER) return false;
  for (int side = 0; side < 2; side++) {
    OVal *t1 = side ? in1(v) : in0(v), *t2 = side ? in0(v) : in1(v), *r = NULL, *sin = NULL, *cos = NULL;
    Product p2, p1;
    if (!product_of(t2, NULL, &p2) || p2.n != 2 || p2.coef != 1) continue;
    for (int i = 0; i < 2; i++) {
      if (p2.f[i].pow != 1) break;
      if (p2.f[i].base->kind == OV_CONST) sin = p2.f[i].base;
      else r = p2.f[i].base;
    }
    OVal *X = r && sin ? rotate_half_of(r) : NULL;
    if (!X || !product_of(t1, X, &p1) || p1.n != 2 || p1.coef != 1) continue;
    for (int i = 0; i < 2; i++)
      if (p1.f[i].pow == 1 && p1.f[i].base->kind == OV_CONST) cos = p1.f[i].base;
    bool has_x = (p1.f[0].base == X && p1.f[0].pow == 1) || (p1.f[1].base == X && p1.f[1].pow == 1);
    if (!cos || !has_x || !shape_eq(ov_shape(X), &v->shape) || !rotary_tables(cos->c, sin->c, ov_shape(X), theta))
      continue;
    *x = X;
    return true;
  }
  return false;
}

static Node *rotary_node(Imp *m, const ONode *at, Node *x, int64_t heads, double theta) {
  Node *r = imp_node(m, at, OP_ROTARY, &x, 1);
  ir_set_int(r, "heads", heads);
  ir_set_float(r, "theta", theta);
  return imp_infer(r);
}

/* x [..., T, hd] rotated as one head per row of hd */
static Node *match_rotary(Imp *m, OVal *v) {
  OVal *x;
  double theta;
  if (!rotary_parts(v, &x, &theta) || ov_shape(x)->ndim < 2) return NULL;
  return rotary_node(m, v->def, ov_node(m, x), 1, theta);
}

Node *match_defer(Imp *m, OVal *v) {
  Node *r = match_activation(m, v);
  if (!r) r = match_rmsnorm(m, v);
  if (!r) r = match_layernorm(m, v);
  if (!r) r = match_rotary(m, v);
  return r;
}

/* ---- causal masks ------------------------------------------------------------------------- */

/* mask (added, or Where's condition) at row i, column j of the last two axes */
static double mask_at(const OTensor *t, int64_t i, int64_t j) {
  return ot_get(t, i * t->shape.d[t->shape.ndim - 1] + j);
}

bool match_causal(Imp *m, OVal *v, OVal **scores) {
  if (!v || v->kind != OV_DEFER || !v->def) return false;
  OVal *s = NULL;
  const OTensor *mask = NULL;
  bool where = !strcmp(v->def->op, "Where"), keep_if_true = false;
  double f;
  if (ov_is(v, "Add")) {
    OVal *a = in0(v), *b = in1(v);
    if (a->kind == OV_CONST && b->kind != OV_CONST) mask = a->c, s = b;
    else if (b->kind == OV_CONST && a->kind != OV_CONST) mask = b->c, s = a;
  } else if (where && v->def->nin == 3 && v->def->in[0]->kind == OV_CONST) {
    OVal *x = v->def->in[1], *y = v->def->in[2];
    if (uniform(x, &f) && f <= -1e4 && y->kind != OV_CONST) s = y, keep_if_true = false;
    else if (uniform(y, &f) && f <= -1e4 && x->kind != OV_CONST) s = x, keep_if_true = true;
    mask = v->def->in[0]->c;
  }
  if (!s || !mask) return false;
  const Shape *ss = ov_shape(s);
  Shape b;
  int nd = ss->ndim;
  if (nd < 2 || mask->shape.ndim < 2 || !shape_broadcast(&mask->shape, ss, &b) || !shape_eq(&b, ss)) return false;
  int64_t S = ss->d[nd - 2], T = ss->d[nd - 1];
  for (int d = 0; d < mask->shape.ndim - 2; d++)
    if (mask->shape.d[d] != 1) return false;
  if (mask->shape.d[mask->shape.ndim - 2] != S || mask->shape.d[mask->shape.ndim - 1] != T) return false;
  for (int64_t i = 0; i < S; i++)
    for (int64_t j = 0; j < T; j++) {
      bool allowed = j <= i + (T - S);
      double x = mask_at(mask, i, j);
      if (where ? ((x != 0) == keep_if_true) != allowed : allowed ? x != 0 : !(x <= -1e4)) return false;
    }
  *scores = s;
  return true;
}

/* ---- attention ------------------------------------------------------------------------------ */

static bool perm_is(const OVal *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t p[MAX_DIMS];
  return ov_is(t, "Transpose") && t->kind == OV_NODE && attr_ints(t->def, "perm", p, MAX_DIMS) == 4 && p[0] == a &&
         p[1] == b && p[2] == c && p[3] == d;
}

/* r = Reshape(p, [B, S, H, hd]) with p [B, S, H*hd]: p and H */
static OVal *split_heads(OVal *r, int64_t *heads) {
  if (!ov_is(r, "Reshape") || r->kind != OV_NODE) return NULL;
  OVal *p = in0(r);
  const Shape *ps = ov_shape(p), *rs = ov_shape(r);
  if (p->kind == OV_CONST || ps->ndim != 3 || rs->ndim != 4 || rs->d[0] != ps->d[0] || rs->d[1] != ps->d[1] ||
      rs->d[2] * rs->d[3] != ps->d[2])
    return NULL;
  *heads = rs->d[2];
  return p;
}

/* x = the heads view Transpose(Reshape(p, [B, S, H, hd]), [0, 2, 1, 3]), rotary
 * embeddings applied to it or not: p, H, and whether (and with which theta) rotated */
static OVal *projection_of(OVal *x, int64_t *heads, double *theta, bool *rot) {
  OVal *r;
  *rot = false;
  if (perm_is(x, 0, 2, 1, 3)) return split_heads(in0(x), heads);
  if (!rotary_parts(x, &r, theta) || !perm_is(r, 0, 2, 1, 3)) return NULL;
  *rot = true;
  return split_heads(in0(r), heads);
}

/* kt = the keys' heads view transposed for q kᵀ: Transpose(view, [0, 1, 3, 2]), or
 * Transpose(Reshape(k, [B, T, H, hd]), [0, 2, 3, 1]) */
static OVal *keys_of(OVal *kt, int64_t *heads, double *theta, bool *rot) {
  *rot = false;
  if (perm_is(kt, 0, 1, 3, 2)) return projection_of(in0(kt), heads, theta, rot);
  if (perm_is(kt, 0, 2, 3, 1)) return split_heads(in0(kt), heads);
  return NULL;
}

/* s = sc / c, sc * c or sc: sc and the scale */
static OVal *unscaled(OVal *s, double *scale) {
  double c;
  *scale = 1;
  if (ov_is(s, "Div") && s->kind != OV_CONST && uniform(in1(s), &c) && c != 0) return *scale = 1 / c, in0(s);
  if (ov_is(s, "Mul") && s->kind != OV_CONST && uniform(in1(s), &c)) return *scale = c, in0(s);
  if (ov_is(s, "Mul") && s->kind != OV_CONST && uniform(in0(s), &c)) return *scale = c, in1(s);
  return s;
}

Node *match_attention(Imp *m, ONode *n, const Shape *out) {
  OVal *y = n->in[0];
  if (!perm_is(y, 0, 2, 1, 3) || !ov_is(in0(y), "MatMul")) return NULL;
  OVal *o = in0(y), *p = in0(o), *vh = in1(o), *s, *sc;
  if (!ov_is(p, "Softmax") || p->kind != OV_NODE) return NULL;
  int64_t ax = attr_i(p->def, "axis", p->def->opset >= 13 ? -1 : 1);
  if (ax != -1 && ax != 3) return NULL;
  bool causal = match_causal(m, in0(p), &s);
  if (!causal) s = in0(p);
  double scale, tq = 0, tk = 0, tv = 0;
  if (!ov_is(sc = unscaled(s, &scale), "MatMul")) return NULL;
  int64_t hq = 0, hk = 0, hv = 0;
  bool rq, rk, rv;
  OVal *q = projection_of(in0(sc), &hq, &tq, &rq), *k = keys_of(in1(sc), &hk, &tk, &rk),
       *v = projection_of(vh, &hv, &tv, &rv);
  if (!q || !k || !v || rv || hq != hk || hq != hv) return NULL;
  const Shape *qs = ov_shape(q), *ks = ov_shape(k);
  if (!shape_eq(ks, ov_shape(v)) || qs->d[0] != ks->d[0] || qs->d[2] != ks->d[2] || !shape_eq(out, qs) ||
      (causal && qs->d[1] != ks->d[1]))
    return NULL;
  Node *in[3] = {ov_node(m, q), ov_node(m, k), ov_node(m, v)};
  if (rq) in[0] = rotary_node(m, n, in[0], hq, tq);
  if (rk) in[1] = rotary_node(m, n, in[1], hq, tk);
  Node *r = imp_node(m, n, OP_ATTENTION, in, 3);
  ir_set_int(r, "heads", hq);
  ir_set_int(r, "causal", causal);
  double hd = (double)(qs->d[2] / hq);
  if (fabs(scale * sqrt(hd) - 1) > 1e-6) ir_set_float(r, "scale", f32_short(scale));
  return imp_infer(r);
}
