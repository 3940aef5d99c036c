/* Shape and dtype rules (infer_<op>) and costs (cost_<op>) for every op in
 * ir/ops.def. A rule reads its inputs' shapes and the node's attributes, sets the
 * node's shape and dtype, and reports a user error at the node's source location
 * when the op does not apply. A cost gives forward and backward FLOPs and the bytes
 * the op moves; the cost model of the plan search prices kernels from these. */
#include "ir/opfuncs.h"
#include <math.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

static const char *shp(const Node *n) { /* a shape as text, for messages */
  static char buf[4][192];
  static int k;
  char *b = buf[k++ & 3];
  shape_format(b, sizeof buf[0], &n->shape);
  return b;
}

static const char *nm(const Node *n) { return op_info(n->op)->name; }

static void need_float(Node *n, int i) {
  if (!dtype_is_float(n->in[i]->dtype))
    error_at(n->loc, "%s: input %d must be a floating-point tensor, got %s", nm(n), i + 1, dtype_name(n->in[i]->dtype));
}

static void need_rank(Node *n, int i, int lo) {
  if (n->in[i]->shape.ndim < lo)
    error_at(n->loc, "%s: input %d must have at least %d dimension%s, got %s", nm(n), i + 1, lo, lo == 1 ? "" : "s",
             shp(n->in[i]));
}

static void same_dtypes(Node *n) {
  for (int i = 1; i < n->nin; i++)
    if (n->in[i]->dtype != n->in[0]->dtype)
      error_at(n->loc, "%s: inputs have different dtypes (%s and %s)", nm(n), dtype_name(n->in[0]->dtype),
               dtype_name(n->in[i]->dtype));
}

/* A possibly negative axis, checked against ndim. */
static int norm_axis(Node *n, int64_t axis, int ndim) {
  if (axis < -ndim || axis >= ndim)
    error_at(n->loc, "%s: axis %lld out of range for a tensor of %d dimension%s", nm(n), (long long)axis, ndim,
             ndim == 1 ? "" : "s");
  return (int)(axis < 0 ? axis + ndim : axis);
}

static int64_t last_dim(const Node *n) { return n->shape.ndim ? n->shape.d[n->shape.ndim - 1] : 1; }

bool shape_broadcast(const Shape *a, const Shape *b, Shape *out) {
  int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
  out->ndim = nd;
  for (int i = 0; i < nd; i++) {
    int ia = a->ndim - nd + i, ib = b->ndim - nd + i;
    int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out->d[i] = da == 1 ? db : da;
  }
  return true;
}

static double numel(const Node *n) { return (double)shape_numel(&n->shape); }
static double nbytes(const Node *n) { return numel(n) * dtype_size_bits(n->dtype) / 8.0; }

static double io_bytes(const Node *n) {
  double b = nbytes(n);
  for (int i = 0; i < n->nin; i++) b += nbytes(n->in[i]);
  return b;
}

/* Elementwise cost: k FLOPs an element forward, kb backward. */
static void cost_ew(const Node *n, Cost *c, double k, double kb) {
  c->fwd_flops = k * numel(n);
  c->bwd_flops = kb * numel(n);
  c->bytes = io_bytes(n);
}

/* ---- sources ---------------------------------------------------------------- */

void infer_input(Node *n) {}
void infer_param(Node *n) {
  if (!dtype_is_float(n->dtype)) error_at(n->loc, "parameter '%s' must have a floating-point dtype", n->name);
}
void infer_const(Node *n) { n->shape.ndim = 0; }
void infer_loss_scale(Node *n) { n->shape.ndim = 0, n->dtype = DT_F32; }
void infer_arange(Node *n) {
  int64_t len = attr_int(n, "n");
  if (len < 0) error_at(n->loc, "arange: length must not be negative, got %lld", (long long)len);
  if (len > MAX_NUMEL) error_at(n->loc, "arange: length %lld is too large", (long long)len);
  n->shape = (Shape){1, {len}};
  n->dtype = DT_I32;
}
void cost_input(const Node *n, Cost *c) {}
void cost_param(const Node *n, Cost *c) {}
void cost_const(const Node *n, Cost *c) {}
void cost_loss_scale(const Node *n, Cost *c) {}
void cost_arange(const Node *n, Cost *c) { c->bytes = nbytes(n); }

/* ---- gather and contraction -------------------------------------------------- */

/* embedding(table [V, D], index i32 [...]) -> [..., D] */
void infer_embedding(Node *n) {
  Node *t = n->in[0], *ix = n->in[1];
  if (t->shape.ndim != 2) error_at(n->loc, "embedding: table must be 2-D [rows, dim], got %s", shp(t));
  need_float(n, 0);
  if (ix->dtype != DT_I32) error_at(n->loc, "embedding: indices must be i32, got %s", dtype_name(ix->dtype));
  if (ix->shape.ndim >= MAX_DIMS) error_at(n->loc, "embedding: indices have too many dimensions");
  if (ix->op == OP_ARANGE && attr_int(ix, "n") > t->shape.d[0]) /* positions known at compile time */
    error_at(n->loc, "embedding: positions 0..%lld do not fit the table's %lld rows", (long long)attr_int(ix, "n") - 1,
             (long long)t->shape.d[0]);
  n->shape = ix->shape;
  n->shape.d[n->shape.ndim++] = t->shape.d[1];
  n->dtype = t->dtype;
}
void cost_embedding(const Node *n, Cost *c) {
  c->bwd_flops = numel(n); /* scatter-add of the output gradient into the table */
  c->bytes = 2 * nbytes(n) + nbytes(n->in[1]);
}

/* matmul(a [..., m, k], b [..., k, n]) -> [..., m, n]; transpose flags swap the last
 * two axes of an input; batch axes broadcast. */
static void matmul_shape(Node *n) {
  need_rank(n, 0, 2);
  need_rank(n, 1, 2);
  const Shape *a = &n->in[0]->shape, *b = &n->in[1]->shape;
  bool ta = attr_int(n, "transpose_a"), tb = attr_int(n, "transpose_b");
  int64_t m = a->d[a->ndim - (ta ? 1 : 2)], ka = a->d[a->ndim - (ta ? 2 : 1)];
  int64_t kb = b->d[b->ndim - (tb ? 1 : 2)], nn = b->d[b->ndim - (tb ? 2 : 1)];
  if (ka != kb)
    error_at(n->loc, "matmul: inner dimensions differ: %s%s times %s%s (%lld vs %lld)", shp(n->in[0]), ta ? "^T" : "",
             shp(n->in[1]), tb ? "^T" : "", (long long)ka, (long long)kb);
  Shape ba = *a, bb = *b;
  ba.ndim -= 2;
  bb.ndim -= 2;
  if (!shape_broadcast(&ba, &bb, &n->shape))
    error_at(n->loc, "matmul: batch dimensions of %s and %s do not broadcast", shp(n->in[0]), shp(n->in[1]));
  n->shape.d[n->shape.ndim++] = m;
  n->shape.d[n->shape.ndim++] = nn;
}
void infer_matmul(Node *n) {
  need_float(n, 0);
  same_dtypes(n);
  matmul_shape(n);
  n->dtype = n->in[0]->dtype;
}
void cost_matmul(const Node *n, Cost *c) {
  const Shape *a = &n->in[0]->shape;
  double k = (double)a->d[a->ndim - (attr_int(n, "transpose_a") ? 2 : 1)];
  c->fwd_flops = 2 * numel(n) * k;
  c->bwd_flops = 2 * c->fwd_flops; /* one GEMM for each input's gradient */
  c->bytes = io_bytes(n);
}

/* ---- fp8 (ir/ops.def) ------------------------------------------------------------ */

static bool is_fp8(DType t) { return t == DT_E4M3 || t == DT_E5M2; }

static void need_state(Node *n, int i) {
  const Node *s = n->in[i];
  if (s->op != OP_FP8_STATE) error_at(n->loc, "%s: input %d must be an fp8_state", nm(n), i + 1);
}

void infer_fp8_state(Node *n) {
  int64_t h = attr_int(n, "history");
  if (h < 1 || h > 1 << 20) error_at(n->loc, "fp8_state: history must be in [1, 2^20], got %lld", (long long)h);
  n->shape = (Shape){1, {2 + h}};
  n->dtype = DT_F32;
}
void cost_fp8_state(const Node *n, Cost *c) {}

void infer_fp8_quantize(Node *n) {
  need_float(n, 0);
  need_state(n, 1);
  DType t = (DType)attr_int(n, "dtype");
  if (!is_fp8(t)) error_at(n->loc, "fp8_quantize: dtype must be e4m3 or e5m2, got %s", dtype_name(t));
  if (attr_int(n, "margin") < 0 || attr_int(n, "margin") > 64)
    error_at(n->loc, "fp8_quantize: margin must be in [0, 64]");
  n->shape = n->in[0]->shape;
  n->dtype = t;
}
/* the amax, the scaling and the rounding; straight through backward */
void cost_fp8_quantize(const Node *n, Cost *c) { cost_ew(n, c, 3, 0); }

void infer_scaled_matmul(Node *n) {
  for (int i = 0; i < 2; i++)
    if (!is_fp8(n->in[i]->dtype))
      error_at(n->loc, "scaled_matmul: input %d must be e4m3 or e5m2, got %s", i + 1, dtype_name(n->in[i]->dtype));
  for (int i = 2; i < 5; i++) need_state(n, i);
  matmul_shape(n);
  DType t = (DType)attr_int(n, "dtype");
  if (!dtype_is_float(t) || is_fp8(t))
    error_at(n->loc, "scaled_matmul: dtype must be f32, bf16 or f16, got %s", dtype_name(t));
  n->dtype = t;
}
void cost_scaled_matmul(const Node *n, Cost *c) { cost_matmul(n, c); }

/* ---- elementwise ------------------------------------------------------------- */

static void infer_binary(Node *n) {
  same_dtypes(n);
  if (!shape_broadcast(&n->in[0]->shape, &n->in[1]->shape, &n->shape))
    error_at(n->loc, "%s: shapes %s and %s do not broadcast", nm(n), shp(n->in[0]), shp(n->in[1]));
  n->dtype = n->in[0]->dtype;
}
void infer_add(Node *n) { infer_binary(n); }
void infer_sub(Node *n) { infer_binary(n); }
void infer_mul(Node *n) { infer_binary(n); }
void infer_div(Node *n) {
  infer_binary(n);
  need_float(n, 0);
}
void cost_add(const Node *n, Cost *c) { cost_ew(n, c, 1, 1); }
void cost_sub(const Node *n, Cost *c) { cost_ew(n, c, 1, 1); }
void cost_mul(const Node *n, Cost *c) { cost_ew(n, c, 1, 2); }
void cost_div(const Node *n, Cost *c) { cost_ew(n, c, 1, 4); }

static void infer_unary(Node *n) {
  need_float(n, 0);
  n->shape = n->in[0]->shape;
  n->dtype = n->in[0]->dtype;
}
void infer_neg(Node *n) {
  n->shape = n->in[0]->shape;
  n->dtype = n->in[0]->dtype;
}
void infer_gelu(Node *n) { infer_unary(n); }
void infer_silu(Node *n) { infer_unary(n); }
void infer_gelu_erf(Node *n) { infer_unary(n); }
void infer_relu(Node *n) { infer_unary(n); }
void infer_dropout(Node *n) {
  infer_unary(n);
  double p = attr_float(n, "p");
  if (!(p >= 0 && p < 1)) error_at(n->loc, "dropout: p must be in [0, 1), got %g", p);
}
void infer_cast(Node *n) {
  n->shape = n->in[0]->shape;
  n->dtype = (DType)attr_int(n, "dtype");
}
void cost_neg(const Node *n, Cost *c) { cost_ew(n, c, 1, 1); }
void cost_gelu(const Node *n, Cost *c) { cost_ew(n, c, 8, 12); } /* tanh form */
void cost_silu(const Node *n, Cost *c) { cost_ew(n, c, 4, 6); }
void cost_gelu_erf(const Node *n, Cost *c) { cost_ew(n, c, 8, 12); } /* erf priced as tanh */
void cost_relu(const Node *n, Cost *c) { cost_ew(n, c, 1, 1); }
void cost_dropout(const Node *n, Cost *c) { cost_ew(n, c, 2, 1); }
void cost_cast(const Node *n, Cost *c) { cost_ew(n, c, 0, 0); }

/* rotary(x [..., seq, heads*hd]): rotates pairs of each head's features by the
 * position angle, as LLaMA does; hd must be even. */
void infer_rotary(Node *n) {
  infer_unary(n);
  need_rank(n, 0, 2);
  int64_t heads = attr_int(n, "heads"), d = last_dim(n->in[0]);
  if (heads <= 0) error_at(n->loc, "rotary: heads must be positive, got %lld", (long long)heads);
  if (d % heads || (d / heads) % 2)
    error_at(n->loc, "rotary: feature size %lld must split into %lld heads of an even size", (long long)d,
             (long long)heads);
  if (!(attr_float(n, "theta") > 0)) error_at(n->loc, "rotary: theta must be positive");
  double f = attr_float(n, "scaling"), lo = attr_float(n, "low_freq"), hi = attr_float(n, "high_freq");
  if (!(f >= 1)) error_at(n->loc, "rotary: scaling must be at least 1 (1: none), got %g", f);
  if (f != 1 && !(lo > 0 && hi > lo && attr_int(n, "original_ctx") > 0))
    error_at(n->loc, "rotary: scaling needs 0 < low_freq < high_freq and original_ctx > 0, got %g, %g and %lld", lo, hi,
             (long long)attr_int(n, "original_ctx"));
}

double rotary_freq(const Node *n, int64_t i, int64_t hd) {
  double freq = pow(attr_float(n, "theta"), -2.0 * (double)i / (double)hd), f = attr_float(n, "scaling");
  if (f == 1) return freq;
  double lo = attr_float(n, "low_freq"), hi = attr_float(n, "high_freq"), ctx = (double)attr_int(n, "original_ctx");
  double s = (ctx * freq / (2 * M_PI) - lo) / (hi - lo); /* 0 up to the low band's edge, 1 from the high one's */
  s = s < 0 ? 0 : s > 1 ? 1 : s;
  return freq * ((1 - s) / f + s);
}
void cost_rotary(const Node *n, Cost *c) { cost_ew(n, c, 3, 3); }

/* ---- normalisations and reductions -------------------------------------------- */

static void infer_rownorm(Node *n, int nparams) {
  need_rank(n, 0, 1);
  need_float(n, 0);
  same_dtypes(n);
  int64_t d = last_dim(n->in[0]);
  for (int i = 1; i <= nparams; i++)
    if (n->in[i]->shape.ndim != 1 || n->in[i]->shape.d[0] != d)
      error_at(n->loc, "%s: input %d must have shape [%lld] to match the last axis of %s, got %s", nm(n), i + 1,
               (long long)d, shp(n->in[0]), shp(n->in[i]));
  if (!(attr_float(n, "eps") > 0)) error_at(n->loc, "%s: eps must be positive", nm(n));
  n->shape = n->in[0]->shape;
  n->dtype = n->in[0]->dtype;
}
void infer_layernorm(Node *n) { infer_rownorm(n, 2); }
void infer_rmsnorm(Node *n) { infer_rownorm(n, 1); }
void cost_layernorm(const Node *n, Cost *c) { cost_ew(n, c, 8, 14); }
void cost_rmsnorm(const Node *n, Cost *c) { cost_ew(n, c, 5, 10); }

/* softmax(x, axis, causal, window): with causal, over the last axis of [..., S, T] with
 * the entries j > i + (T - S) masked out (attention scores), with a window W also the
 * entries j <= i + (T - S) - W. */
void infer_softmax(Node *n) {
  infer_unary(n);
  need_rank(n, 0, 1);
  int a = norm_axis(n, attr_int(n, "axis"), n->shape.ndim);
  if (attr_int(n, "causal") &&
      (a != n->shape.ndim - 1 || n->shape.ndim < 2 || n->shape.d[n->shape.ndim - 2] > n->shape.d[n->shape.ndim - 1]))
    error_at(n->loc, "softmax: causal masking needs the last axis of [..., S, T] with S <= T");
  if (attr_get(n, "window")->set && (attn_window(n) <= 0 || !attr_int(n, "causal")))
    error_at(n->loc, "softmax: a window must be positive and causal, got %lld", (long long)attn_window(n));
}
void cost_softmax(const Node *n, Cost *c) { cost_ew(n, c, 5, 4); }

static void infer_reduce(Node *n) {
  const Node *x = n->in[0];
  const AttrVal *ax = attr_get(n, "axis");
  bool keep = attr_int(n, "keepdim");
  n->dtype = x->dtype;
  if (!ax->set) {
    n->shape.ndim = keep ? x->shape.ndim : 0;
    for (int i = 0; i < n->shape.ndim; i++) n->shape.d[i] = 1;
    return;
  }
  int a = norm_axis(n, ax->i, x->shape.ndim);
  n->shape.ndim = 0;
  for (int i = 0; i < x->shape.ndim; i++) {
    if (i != a) n->shape.d[n->shape.ndim++] = x->shape.d[i];
    else if (keep) n->shape.d[n->shape.ndim++] = 1;
  }
}
void infer_sum(Node *n) { infer_reduce(n); }
void infer_mean(Node *n) {
  need_float(n, 0);
  infer_reduce(n);
}
void cost_sum(const Node *n, Cost *c) {
  c->fwd_flops = numel(n->in[0]);
  c->bytes = io_bytes(n);
}
void cost_mean(const Node *n, Cost *c) {
  cost_sum(n, c);
  c->bwd_flops = numel(n->in[0]);
}

/* cross_entropy(logits [..., V], targets i32 [...]) -> f32 [] : the mean over the
 * targets that are not ignore_index of -log softmax(logits)[target]. */
void infer_cross_entropy(Node *n) {
  Node *l = n->in[0], *t = n->in[1];
  need_rank(n, 0, 1);
  need_float(n, 0);
  if (t->dtype != DT_I32) error_at(n->loc, "cross_entropy: targets must be i32, got %s", dtype_name(t->dtype));
  Shape rows = l->shape;
  rows.ndim--;
  if (!shape_eq(&rows, &t->shape))
    error_at(n->loc, "cross_entropy: targets %s must match the logits %s without their last axis", shp(t), shp(l));
  n->shape.ndim = 0;
  n->dtype = DT_F32;
}
void cost_cross_entropy(const Node *n, Cost *c) {
  c->fwd_flops = 5 * numel(n->in[0]);
  c->bwd_flops = 2 * numel(n->in[0]);
  c->bytes = 2 * nbytes(n->in[0]);
}

/* ce_count(targets i32 [...]) -> f32 []: the targets other than ignore_index. */
void infer_ce_count(Node *n) {
  if (n->in[0]->dtype != DT_I32) error_at(n->loc, "ce_count: targets must be i32, got %s", dtype_name(n->in[0]->dtype));
  n->shape.ndim = 0;
  n->dtype = DT_F32;
}
void cost_ce_count(const Node *n, Cost *c) {
  c->fwd_flops = numel(n->in[0]);
  c->bwd_flops = 0;
  c->bytes = nbytes(n->in[0]);
}

/* classifier_ce(x [..., d], w [V, d] (transpose_b) or [d, V], targets i32 [...]) -> f32 []:
 * cross_entropy(matmul(x, w, transpose_b), targets) without the logits. */
static int64_t classifier_vocab(Node *n) {
  const Node *x = n->in[0], *w = n->in[1], *t = n->in[2];
  bool tb = attr_int(n, "transpose_b");
  need_float(n, 0), need_float(n, 1);
  if (x->shape.ndim < 1 || w->shape.ndim != 2)
    error_at(n->loc, "%s: x %s and a 2-D w %s expected", op_info(n->op)->name, shp(x), shp(w));
  int64_t d = x->shape.d[x->shape.ndim - 1], V = w->shape.d[tb ? 0 : 1];
  if (w->shape.d[tb ? 1 : 0] != d) error_at(n->loc, "%s: x %s does not fit w %s", op_info(n->op)->name, shp(x), shp(w));
  Shape rows = x->shape;
  rows.ndim--;
  if (t->dtype != DT_I32 || !shape_eq(&rows, &t->shape))
    error_at(n->loc, "%s: targets %s must be i32 and match x %s without its last axis", op_info(n->op)->name, shp(t),
             shp(x));
  if (attr_int(n, "chunk") < 1) error_at(n->loc, "%s: chunk must be positive", op_info(n->op)->name);
  return V;
}
void infer_classifier_ce(Node *n) {
  classifier_vocab(n);
  n->shape.ndim = 0;
  n->dtype = DT_F32;
}
void cost_classifier_ce(const Node *n, Cost *c) {
  double V = (double)n->in[1]->shape.d[attr_int(n, "transpose_b") ? 0 : 1], rows = numel(n->in[2]);
  double d = (double)n->in[1]->shape.d[attr_int(n, "transpose_b") ? 1 : 0];
  c->fwd_flops = 2 * rows * V * d + 5 * rows * V;
  c->bwd_flops = 6 * rows * V * d + 2 * rows * V; /* the logits again, then both gradients */
  c->bytes = nbytes(n->in[0]) + nbytes(n->in[1]);
}
void infer_classifier_ce_grad(Node *n) {
  classifier_vocab(n);
  if (n->in[3]->shape.ndim != 0) error_at(n->loc, "classifier_ce_grad: the loss's gradient must be a scalar");
  n->shape.ndim = 1;
  n->shape.d[0] = shape_numel(&n->in[0]->shape) + shape_numel(&n->in[1]->shape);
  n->dtype = DT_F32;
}
void cost_classifier_ce_grad(const Node *n, Cost *c) {
  cost_classifier_ce(n, c);
  c->fwd_flops = c->bwd_flops, c->bwd_flops = 0;
}

int64_t attn_kv_heads(const Node *n) {
  const AttrVal *g = attr_get(n, "kv_heads");
  return g->set ? g->i : attr_int(n, "heads");
}
int64_t attn_window(const Node *n) {
  const AttrVal *w = attr_get(n, "window");
  return w->set ? w->i : 0;
}

/* attention(q [B, S, H*hd], k [B, T, G*hd], v [B, T, G*hd]) -> [B, S, H*hd]:
 * softmax(q kᵀ · scale [+ causal mask] [+ window]) v per head, query head h reading
 * key/value head h / (H/G); scale defaults to 1/sqrt(hd). */
void infer_attention(Node *n) {
  for (int i = 0; i < 3; i++) {
    need_float(n, i);
    if (n->in[i]->shape.ndim != 3)
      error_at(n->loc, "attention: input %d must be 3-D [batch, seq, features], got %s", i + 1, shp(n->in[i]));
  }
  same_dtypes(n);
  const Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape, *v = &n->in[2]->shape;
  if (!shape_eq(k, v))
    error_at(n->loc, "attention: keys %s and values %s differ in shape", shp(n->in[1]), shp(n->in[2]));
  int64_t heads = attr_int(n, "heads"), kv = attn_kv_heads(n), window = attn_window(n);
  if (heads <= 0 || q->d[2] % heads)
    error_at(n->loc, "attention: %lld features do not split into %lld heads", (long long)q->d[2], (long long)heads);
  if (kv <= 0 || heads % kv)
    error_at(n->loc, "attention: kv_heads = %lld does not divide heads = %lld", (long long)kv, (long long)heads);
  if (q->d[0] != k->d[0] || k->d[2] != q->d[2] / heads * kv)
    error_at(
        n->loc, "attention: keys %s do not fit queries %s: %lld key/value heads of %lld features need %lld features",
        shp(n->in[1]), shp(n->in[0]), (long long)kv, (long long)(q->d[2] / heads), (long long)(q->d[2] / heads * kv));
  if (attr_int(n, "causal") && q->d[1] != k->d[1])
    error_at(n->loc, "attention: causal attention needs as many queries as keys (%lld vs %lld)", (long long)q->d[1],
             (long long)k->d[1]);
  if (attr_get(n, "window")->set && window <= 0)
    error_at(n->loc, "attention: window must be positive (the keys a query sees), got %lld", (long long)window);
  if (window > 0 && !attr_int(n, "causal"))
    error_at(n->loc, "attention: a window needs causal = true (a query sees the %lld keys up to its own)",
             (long long)window);
  n->shape = *q;
  n->dtype = n->in[0]->dtype;
}
double attn_pairs(const Node *n) {
  const Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
  double s = (double)q->d[1], t = (double)k->d[1], w = (double)attn_window(n);
  if (w > 0 && w < t) return s * w - w * (w - 1) / 2; /* the first w queries see fewer */
  return s * t;
}
void cost_attention(const Node *n, Cost *c) {
  const Shape *q = &n->in[0]->shape;
  double b = (double)q->d[0], d = (double)q->d[2], st = attn_pairs(n);
  double scores = b * (double)attr_int(n, "heads") * st;
  c->fwd_flops = 4 * b * st * d + 5 * scores; /* q kᵀ, p v, softmax */
  c->bwd_flops = 8 * b * st * d + 4 * scores;
  c->bytes = io_bytes(n);
}

/* flash_attention(q, k, v) -> f32 [B, S, H*hd + H]: attention's output and, after it in
 * each row, the log-sum-exp of the scaled (and masked) scores of each head. */
void infer_flash_attention(Node *n) {
  infer_attention(n);
  n->shape.d[2] += attr_int(n, "heads");
  n->dtype = DT_F32;
}
void cost_flash_attention(const Node *n, Cost *c) { cost_attention(n, c); }

/* flash_attention_grad(q, k, v, out, dout, delta, which) -> the gradient of q, k or v,
 * in that input's type. */
void infer_flash_attention_grad(Node *n) {
  const Node *q = n->in[0], *o = n->in[3], *g = n->in[4], *dl = n->in[5];
  if (!shape_eq(&n->in[1]->shape, &n->in[2]->shape) ||
      n->in[1]->shape.d[2] * attr_int(n, "heads") != q->shape.d[2] * attn_kv_heads(n))
    error_at(n->loc, "flash_attention_grad: keys %s or values %s do not fit queries %s", shp(n->in[1]), shp(n->in[2]),
             shp(q));
  int64_t which = attr_int(n, "which"), heads = attr_int(n, "heads");
  if (which < 0 || which > 2) error_at(n->loc, "flash_attention_grad: which must be 0, 1 or 2");
  Shape os = q->shape, ds = q->shape;
  os.d[2] += heads;
  ds.d[2] = heads;
  if (!shape_eq(&o->shape, &os) || !shape_eq(&g->shape, &os) || !shape_eq(&dl->shape, &ds))
    error_at(n->loc, "flash_attention_grad: output %s, its gradient %s or delta %s do not fit queries %s", shp(o),
             shp(g), shp(dl), shp(q));
  n->shape = n->in[which]->shape;
  n->dtype = n->in[which]->dtype;
}
void cost_flash_attention_grad(const Node *n, Cost *c) {
  const Shape *q = &n->in[0]->shape;
  double b = (double)q->d[0], d = (double)q->d[2];
  c->fwd_flops = (attr_int(n, "which") == 2 ? 4 : 6) * b * attn_pairs(n) * d; /* scores recomputed; dv needs no dP */
  c->bytes = io_bytes(n);
}

/* ---- data movement ------------------------------------------------------------ */

/* reshape(x, shape): one entry may be -1 and is inferred. */
void infer_reshape(Node *n) {
  const AttrVal *s = attr_get(n, "shape");
  int64_t known = 1, total = shape_numel(&n->in[0]->shape);
  int infer = -1;
  n->shape.ndim = s->n;
  for (int i = 0; i < s->n; i++) {
    int64_t v = s->v[i];
    if (v == -1 && infer < 0) {
      infer = i;
      continue;
    }
    if (v < 0) error_at(n->loc, "reshape: bad dimension %lld in the new shape", (long long)v);
    if (v && known > MAX_NUMEL / v) error_at(n->loc, "reshape: the new shape is too large");
    known *= v;
    n->shape.d[i] = v;
  }
  if (infer >= 0) {
    if (known == 0 || total % known)
      error_at(n->loc, "reshape: cannot infer the -1 dimension: %lld elements of %s do not divide by %lld",
               (long long)total, shp(n->in[0]), (long long)known);
    n->shape.d[infer] = total / known;
    known = total;
  }
  if (known != total)
    error_at(n->loc, "reshape: %s has %lld elements, the new shape has %lld", shp(n->in[0]), (long long)total,
             (long long)known);
  n->dtype = n->in[0]->dtype;
}
void cost_reshape(const Node *n, Cost *c) {} /* a view: no kernel */

void infer_transpose(Node *n) {
  const AttrVal *p = attr_get(n, "perm");
  const Shape *x = &n->in[0]->shape;
  if (p->n != x->ndim)
    error_at(n->loc, "transpose: permutation has %d entries for a tensor of %d dimensions", p->n, x->ndim);
  bool seen[MAX_DIMS] = {0};
  for (int i = 0; i < p->n; i++) {
    if (p->v[i] < 0 || p->v[i] >= x->ndim || seen[p->v[i]])
      error_at(n->loc, "transpose: perm must be a permutation of 0..%d", x->ndim - 1);
    seen[p->v[i]] = true;
    n->shape.d[i] = x->d[p->v[i]];
  }
  n->shape.ndim = x->ndim;
  n->dtype = n->in[0]->dtype;
}
void cost_transpose(const Node *n, Cost *c) { c->bytes = io_bytes(n); }

/* slice(x, axis, start, end): elements start..end-1 along axis. */
void infer_slice(Node *n) {
  const Shape *x = &n->in[0]->shape;
  int a = norm_axis(n, attr_int(n, "axis"), x->ndim);
  int64_t s = attr_int(n, "start"), e = attr_int(n, "end");
  if (s < 0 || e < s || e > x->d[a])
    error_at(n->loc, "slice: range %lld..%lld is outside 0..%lld of axis %d of %s", (long long)s, (long long)e,
             (long long)x->d[a], a, shp(n->in[0]));
  n->shape = *x;
  n->shape.d[a] = e - s;
  n->dtype = n->in[0]->dtype;
}
void cost_slice(const Node *n, Cost *c) { c->bytes = 2 * nbytes(n); }

void infer_concat(Node *n) {
  same_dtypes(n);
  const Shape *x = &n->in[0]->shape;
  int a = norm_axis(n, attr_int(n, "axis"), x->ndim);
  n->shape = *x;
  for (int i = 1; i < n->nin; i++) {
    const Shape *y = &n->in[i]->shape;
    bool ok = y->ndim == x->ndim;
    for (int j = 0; ok && j < x->ndim; j++) ok = j == a || y->d[j] == x->d[j];
    if (!ok) error_at(n->loc, "concat: %s and %s differ outside axis %d", shp(n->in[0]), shp(n->in[i]), a);
    if (n->shape.d[a] > MAX_NUMEL - y->d[a]) error_at(n->loc, "concat: result too large");
    n->shape.d[a] += y->d[a];
  }
  n->dtype = n->in[0]->dtype;
}
void cost_concat(const Node *n, Cost *c) { c->bytes = io_bytes(n); }

/* broadcast(x, shape): numpy broadcasting of x to exactly shape. */
void infer_broadcast(Node *n) {
  const AttrVal *s = attr_get(n, "shape");
  Shape want = {s->n, {0}}, got;
  for (int i = 0; i < s->n; i++) {
    if (s->v[i] < 0) error_at(n->loc, "broadcast: bad dimension %lld", (long long)s->v[i]);
    want.d[i] = s->v[i];
  }
  if (!shape_broadcast(&n->in[0]->shape, &want, &got) || !shape_eq(&got, &want)) {
    char w[96];
    shape_format(w, sizeof w, &want);
    error_at(n->loc, "broadcast: %s does not broadcast to %s", shp(n->in[0]), w);
  }
  n->shape = want;
  n->dtype = n->in[0]->dtype;
}
void cost_broadcast(const Node *n, Cost *c) {
  c->bytes = nbytes(n);
  c->bwd_flops = numel(n);
}

/* ---- gradient ops (made by autodiff) ------------------------------------------ */

static void same_shape_inputs(Node *n) {
  for (int i = 1; i < n->nin; i++)
    if (!shape_eq(&n->in[0]->shape, &n->in[i]->shape))
      error_at(n->loc, "%s: inputs %s and %s differ in shape", nm(n), shp(n->in[0]), shp(n->in[i]));
}

/* sum_to(x, shape): sums the axes along which shape broadcasts to x's shape. */
void infer_sum_to(Node *n) {
  const AttrVal *s = attr_get(n, "shape");
  Shape want = {s->n, {0}}, got;
  for (int i = 0; i < s->n; i++) want.d[i] = s->v[i];
  if (!shape_broadcast(&want, &n->in[0]->shape, &got) || !shape_eq(&got, &n->in[0]->shape)) {
    char w[96];
    shape_format(w, sizeof w, &want);
    error_at(n->loc, "sum_to: %s does not broadcast to %s", w, shp(n->in[0]));
  }
  n->shape = want;
  n->dtype = n->in[0]->dtype;
}
void cost_sum_to(const Node *n, Cost *c) {
  c->fwd_flops = numel(n->in[0]);
  c->bytes = io_bytes(n);
}

static void infer_act_grad(Node *n) {
  need_float(n, 0);
  same_dtypes(n);
  same_shape_inputs(n);
  n->shape = n->in[0]->shape;
  n->dtype = n->in[0]->dtype;
}
void infer_gelu_grad(Node *n) { infer_act_grad(n); }
void infer_silu_grad(Node *n) { infer_act_grad(n); }
void infer_gelu_erf_grad(Node *n) { infer_act_grad(n); }
void infer_relu_grad(Node *n) { infer_act_grad(n); }
void cost_gelu_grad(const Node *n, Cost *c) { cost_ew(n, c, 12, 0); }
void cost_silu_grad(const Node *n, Cost *c) { cost_ew(n, c, 6, 0); }
void cost_gelu_erf_grad(const Node *n, Cost *c) { cost_ew(n, c, 12, 0); }
void cost_relu_grad(const Node *n, Cost *c) { cost_ew(n, c, 1, 0); }

/* layernorm_grad(x, w, g): which 0 gives dx, 1 dw, 2 db. */
static void infer_norm_grad(Node *n, int outputs) {
  Node *x = n->in[0], *w = n->in[1], *g = n->in[2];
  need_rank(n, 0, 1);
  need_float(n, 0);
  same_dtypes(n);
  int64_t d = last_dim(x), which = attr_int(n, "which");
  if (w->shape.ndim != 1 || w->shape.d[0] != d || !shape_eq(&x->shape, &g->shape))
    error_at(n->loc, "%s: expects x, w [%lld] and a gradient shaped like x", nm(n), (long long)d);
  if (which < 0 || which >= outputs) error_at(n->loc, "%s: which must be in 0..%d", nm(n), outputs - 1);
  n->shape = which ? w->shape : x->shape;
  n->dtype = x->dtype;
}
void infer_layernorm_grad(Node *n) { infer_norm_grad(n, 3); }
void infer_rmsnorm_grad(Node *n) { infer_norm_grad(n, 2); }
void cost_layernorm_grad(const Node *n, Cost *c) { cost_ew(n->in[0], c, 10, 0); }
void cost_rmsnorm_grad(const Node *n, Cost *c) { cost_ew(n->in[0], c, 8, 0); }

/* softmax_grad(y, g) = y * (g - sum(g * y)) along axis. */
void infer_softmax_grad(Node *n) {
  infer_act_grad(n);
  norm_axis(n, attr_int(n, "axis"), n->shape.ndim);
}
void cost_softmax_grad(const Node *n, Cost *c) { cost_ew(n, c, 4, 0); }

/* cross_entropy_grad(logits, targets, g) = g * (softmax(logits) - onehot) / count. */
void infer_cross_entropy_grad(Node *n) {
  Node saved = *n;
  Node *in[2] = {n->in[0], n->in[1]};
  saved.in = in;
  saved.nin = 2;
  infer_cross_entropy(&saved);
  if (n->in[2]->shape.ndim != 0) error_at(n->loc, "cross_entropy_grad: the incoming gradient must be a scalar");
  n->shape = n->in[0]->shape;
  n->dtype = n->in[0]->dtype;
}
void cost_cross_entropy_grad(const Node *n, Cost *c) { cost_ew(n, c, 4, 0); }

/* embedding_grad(index i32 [...], g [..., D]) -> [rows, D]: scatter-add of g. */
void infer_embedding_grad(Node *n) {
  Node *ix = n->in[0], *g = n->in[1];
  if (ix->dtype != DT_I32) error_at(n->loc, "embedding_grad: indices must be i32");
  Shape rows = g->shape;
  rows.ndim--;
  if (g->shape.ndim < 1 || !shape_eq(&rows, &ix->shape))
    error_at(n->loc, "embedding_grad: gradient %s does not match indices %s", shp(g), shp(ix));
  int64_t r = attr_int(n, "rows");
  if (r <= 0) error_at(n->loc, "embedding_grad: rows must be positive");
  n->shape = (Shape){2, {r, last_dim(g)}};
  n->dtype = g->dtype;
}
void cost_embedding_grad(const Node *n, Cost *c) {
  c->fwd_flops = numel(n->in[1]);
  c->bytes = io_bytes(n);
}

/* pad(x, axis, before, after): zeros around x along axis (the gradient of slice). */
void infer_pad(Node *n) {
  const Shape *x = &n->in[0]->shape;
  int a = norm_axis(n, attr_int(n, "axis"), x->ndim);
  int64_t b = attr_int(n, "before"), e = attr_int(n, "after");
  if (b < 0 || e < 0 || b > MAX_NUMEL || e > MAX_NUMEL) error_at(n->loc, "pad: amounts must be non-negative");
  n->shape = *x;
  n->shape.d[a] += b + e;
  n->dtype = n->in[0]->dtype;
}
void cost_pad(const Node *n, Cost *c) { c->bytes = io_bytes(n); }

/* ---- collectives over the tensor-parallel group ----------------------------------- */

/* The input's shape and dtype, with dimension `axis` multiplied (mul > 0) or divided
 * (mul < 0) by the group size; the axis holds `blocks` equal blocks, each of which
 * must split evenly. Collectives move f32; a split, which moves nothing between ranks
 * (each takes its block), also parts i32 data (token ids and targets). */
static void infer_comm(Node *n, int mul) {
  const Shape *x = &n->in[0]->shape;
  if (n->in[0]->dtype != DT_F32 && !(n->op == OP_SPLIT && n->in[0]->dtype == DT_I32))
    error_at(n->loc, "%s: collectives move f32 tensors, got %s", nm(n), dtype_name(n->in[0]->dtype));
  int64_t r = attr_int(n, "ranks");
  if (r < 1) error_at(n->loc, "%s: ranks must be positive", nm(n));
  n->shape = *x;
  n->dtype = n->in[0]->dtype;
  if (!mul) return;
  int a = norm_axis(n, attr_int(n, "axis"), x->ndim);
  int64_t b = attr_int(n, "blocks"), whole = mul > 0 ? x->d[a] * r : x->d[a];
  if (b < 1 || whole % (b * r))
    error_at(n->loc, "%s: dimension %d (%lld) does not split into %lld blocks over %lld ranks", nm(n), a,
             (long long)whole, (long long)b, (long long)r);
  n->shape.d[a] = mul > 0 ? whole : whole / r;
}
void infer_all_reduce(Node *n) { infer_comm(n, 0); }
void infer_tp_copy(Node *n) { infer_comm(n, 0); }
void infer_all_gather(Node *n) { infer_comm(n, 1); }
void infer_reduce_scatter(Node *n) { infer_comm(n, -1); }
void infer_split(Node *n) { infer_comm(n, -1); }
void infer_all_to_all(Node *n) {
  infer_comm(n, 0);
  if (n->shape.ndim < 1 || n->shape.d[0] != attr_int(n, "ranks"))
    error_at(n->loc, "%s: dimension 0 must be the ranks (%lld)", nm(n), (long long)attr_int(n, "ranks"));
}
/* Bytes moved through memory; the cost model prices the communication itself. */
void cost_all_reduce(const Node *n, Cost *c) { c->bytes = io_bytes(n); }
void cost_tp_copy(const Node *n, Cost *c) {
  (void)n;
  (void)c;
}
void cost_all_gather(const Node *n, Cost *c) { c->bytes = io_bytes(n); }
void cost_reduce_scatter(const Node *n, Cost *c) {
  c->fwd_flops = numel(n->in[0]);
  c->bytes = io_bytes(n);
}
void cost_split(const Node *n, Cost *c) { c->bytes = io_bytes(n); }
void cost_all_to_all(const Node *n, Cost *c) { c->bytes = io_bytes(n); }
