/* The ONNX ops on values computed at run time, onto IR ops (docs/onnx.md has the
 * table). Each import function reads its node's input values and sets its outputs:
 * IR nodes where an op maps onto the IR, the input value itself where the op changes
 * nothing (Identity, a Cast to the same type, Dropout off), and a deferred expression
 * (OV_DEFER) for the elementwise ops the IR lacks (Erf, Tanh, Sqrt, Sigmoid, ...) and
 * for arithmetic with a constant tensor: those become IR ops through a pattern
 * (onnx_match.c) when something reads them, or are refused there (lower_defer). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "frontend/onnx_imp.h"

/* ---- helpers ---------------------------------------------------------------------- */

static void set_node(Imp *m, ONode *n, int k, Node *x) {
  if (k < n->nout) n->out[k] = ov_of_node(m, n, x);
}

static void set_alias(ONode *n, int k, OVal *v) {
  if (k < n->nout) n->out[k] = v;
}

static OVal *in_val(Imp *m, const ONode *n, int i) {
  if (i >= n->nin || !n->in[i]) imp_error(n, "input %d is missing", i + 1);
  if (n->in[i]->kind == OV_UNSUPPORTED) ov_node(m, n->in[i]); /* refuses it */
  return n->in[i];
}

static Node *in_node(Imp *m, const ONode *n, int i) { return ov_node(m, in_val(m, n, i)); }

/* A constant that acts as a scalar where it meets a tensor of shape `other`: all its
 * elements equal, and its shape broadcasting to other's without changing it. */
static bool scalar_like(const OVal *c, const Shape *other, double *v) {
  Shape s;
  return c->kind == OV_CONST && ot_uniform(c->c, v) && shape_broadcast(&c->c->shape, other, &s) && shape_eq(&s, other);
}

static OpKind binary_kind(const char *op) {
  return !strcmp(op, "Add")   ? OP_ADD
         : !strcmp(op, "Sub") ? OP_SUB
         : !strcmp(op, "Mul") ? OP_MUL
         : !strcmp(op, "Div") ? OP_DIV
                              : OP_COUNT;
}

/* a op b as IR nodes, a scalar-like constant on either side becoming a const */
static Node *binary_node(Imp *m, const ONode *at, OpKind op, OVal *a, OVal *b) {
  double v;
  Node *x = a->kind == OV_CONST && scalar_like(a, ov_shape(b), &v) ? NULL : ov_node(m, a);
  Node *y = b->kind == OV_CONST && scalar_like(b, ov_shape(a), &v) ? NULL : ov_node(m, b);
  if (!x && !y) imp_error(at, "both operands are constants"); /* (folded before) */
  if (!x) scalar_like(a, ov_shape(b), &v), x = imp_const(m, at, v, y->dtype);
  if (!y) scalar_like(b, ov_shape(a), &v), y = imp_const(m, at, v, x->dtype);
  return imp_op2(m, at, op, x, y);
}

static void need_float_val(const ONode *n, const OVal *v) {
  if (v->kind != OV_CONST && !dtype_is_float(v->dtype))
    imp_error(n, "needs a floating-point input, got %s", dtype_name(v->dtype));
}

/* ---- elementwise ------------------------------------------------------------------- */

static void import_binary(Imp *m, ONode *n) {
  OVal *a = in_val(m, n, 0), *b = in_val(m, n, 1);
  Shape s;
  double v;
  if (!shape_broadcast(ov_shape(a), ov_shape(b), &s)) imp_error(n, "the inputs' shapes do not broadcast");
  bool tensor_const = (a->kind == OV_CONST && !scalar_like(a, ov_shape(b), &v)) ||
                      (b->kind == OV_CONST && !scalar_like(b, ov_shape(a), &v));
  if (a->kind == OV_DEFER || b->kind == OV_DEFER || tensor_const) {
    n->out[0] = ov_defer(m, n, a->kind == OV_CONST ? b->dtype : a->dtype, &s);
    return;
  }
  set_node(m, n, 0, binary_node(m, n, binary_kind(n->op), a, b));
}

/* Erf, Tanh, Sqrt, Sigmoid, ...: no IR op; kept for a pattern to take. */
static void import_deferred(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0);
  need_float_val(n, x);
  if (n->nout) n->out[0] = ov_defer(m, n, x->dtype, ov_shape(x));
}

static void import_neg(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0);
  if (x->kind == OV_DEFER) import_deferred(m, n);
  else set_node(m, n, 0, imp_op1(m, n, OP_NEG, ov_node(m, x)));
}

static void import_relu(Imp *m, ONode *n) { set_node(m, n, 0, imp_op1(m, n, OP_RELU, in_node(m, n, 0))); }

/* GELU (opset 20): approximate "none" is the erf form, "tanh" the IR's gelu. */
static void import_gelu(Imp *m, ONode *n) {
  const char *a = attr_s(n, "approximate", "none");
  if (strcmp(a, "none") && strcmp(a, "tanh")) imp_error(n, "approximate='%s' is not a GELU form", a);
  set_node(m, n, 0, imp_op1(m, n, strcmp(a, "tanh") ? OP_GELU_ERF : OP_GELU, in_node(m, n, 0)));
}

/* x^e: e 1 is x, 2 to 4 products of x; other exponents are kept for a pattern (the
 * -0.5 of a hand-written rsqrt). */
static void import_pow(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0), *e = in_val(m, n, 1);
  double v;
  if (x->kind == OV_DEFER || !scalar_like(e, ov_shape(x), &v) || v != floor(v) || v < 1 || v > 4) {
    import_deferred(m, n);
    return;
  }
  Node *b = ov_node(m, x), *r = b;
  for (int k = 1; k < (int)v; k++) r = imp_op2(m, n, OP_MUL, r, b);
  if (v == 1) set_alias(n, 0, x);
  else set_node(m, n, 0, r);
}

/* Where with a run-time branch: a causal mask (the input of a Softmax), or refused. */
static void import_where(Imp *m, ONode *n) {
  Shape s1, s;
  OVal *c = in_val(m, n, 0), *x = in_val(m, n, 1), *y = in_val(m, n, 2);
  if (!shape_broadcast(ov_shape(c), ov_shape(x), &s1) || !shape_broadcast(&s1, ov_shape(y), &s))
    imp_error(n, "the inputs' shapes do not broadcast");
  n->out[0] = ov_defer(m, n, x->kind == OV_CONST ? y->dtype : x->dtype, &s);
}

static void import_softmax(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0), *s = x;
  bool causal = match_causal(m, x, &s);
  Node *xn = ov_node(m, s);
  int nd = xn->shape.ndim, a = norm_axis(n, attr_i(n, "axis", n->opset >= 13 ? -1 : 1), nd);
  if (n->opset < 13 && a != nd - 1)
    imp_error(n, "before opset 13 Softmax works on the axes from %d on, flattened: supported over the last axis only",
              a);
  Node *r = imp_node(m, n, OP_SOFTMAX, &xn, 1);
  ir_set_int(r, "axis", a == nd - 1 ? -1 : a);
  ir_set_int(r, "causal", causal);
  set_node(m, n, 0, imp_infer(r));
}

/* ---- contractions ------------------------------------------------------------------ */

/* A GEMM operand: a Transpose that swaps the last two axes becomes the GEMM's
 * transpose flag (nn.Linear's weight.t(), a tied head's wte.t()). */
static Node *gemm_operand(Imp *m, OVal *v, bool *t) {
  *t = false;
  if (ov_is(v, "Transpose") && v->kind == OV_NODE) {
    OVal *x = v->def->in[0];
    int nd = ov_shape(x)->ndim;
    int64_t perm[MAX_DIMS];
    transpose_perm(v->def, nd, perm);
    bool swap = nd >= 2 && perm[nd - 1] == nd - 2 && perm[nd - 2] == nd - 1;
    for (int i = 0; swap && i < nd - 2; i++) swap = perm[i] == i;
    if (swap) {
      *t = true;
      return ov_node(m, x);
    }
  }
  return ov_node(m, v);
}

static Node *matmul_node(Imp *m, const ONode *n, OVal *a, OVal *b, bool ta, bool tb) {
  bool sa, sb;
  Node *in[2] = {gemm_operand(m, a, &sa), gemm_operand(m, b, &sb)};
  if (in[0]->shape.ndim < 2 || in[1]->shape.ndim < 2) imp_error(n, "MatMul of a 1-D tensor is not supported");
  Node *r = imp_node(m, n, OP_MATMUL, in, 2);
  ir_set_int(r, "transpose_a", ta != sa);
  ir_set_int(r, "transpose_b", tb != sb);
  return imp_infer(r);
}

static void import_matmul(Imp *m, ONode *n) {
  set_node(m, n, 0, matmul_node(m, n, in_val(m, n, 0), in_val(m, n, 1), false, false));
}

/* Gemm: alpha A' B' + beta C */
static void import_gemm(Imp *m, ONode *n) {
  Node *y = matmul_node(m, n, in_val(m, n, 0), in_val(m, n, 1), attr_i(n, "transA", 0), attr_i(n, "transB", 0));
  double alpha = attr_f(n, "alpha", 1), beta = attr_f(n, "beta", 1), v;
  if (alpha != 1) y = imp_op2(m, n, OP_MUL, y, imp_const(m, n, alpha, y->dtype));
  if (n->nin > 2 && n->in[2] && beta != 0) {
    OVal *c = in_val(m, n, 2);
    Node *cn = scalar_like(c, &y->shape, &v) ? imp_const(m, n, v, y->dtype) : ov_node(m, c);
    if (beta != 1) cn = imp_op2(m, n, OP_MUL, cn, imp_const(m, n, beta, y->dtype));
    y = imp_op2(m, n, OP_ADD, y, cn);
  }
  set_node(m, n, 0, y);
}

/* ---- gathers and data movement --------------------------------------------------------- */

static Node *slice_node(Imp *m, const ONode *n, Node *x, int axis, int64_t start, int64_t end) {
  if (start == 0 && end == x->shape.d[axis]) return x;
  Node *r = imp_node(m, n, OP_SLICE, &x, 1);
  ir_set_int(r, "axis", axis);
  ir_set_int(r, "start", start);
  ir_set_int(r, "end", end);
  return imp_infer(r);
}

/* Gather: rows of a 2-D table by run-time indices or positions 0..n-1 (an embedding),
 * or constant indices that pick one element or a run along an axis (slices). */
static void import_gather(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0), *ix = in_val(m, n, 1);
  const Shape *xs = ov_shape(x);
  int axis = norm_axis(n, attr_i(n, "axis", 0), xs->ndim);
  bool table = axis == 0 && xs->ndim == 2;
  if (ix->kind != OV_CONST) {
    if (!table) imp_error(n, "Gather by run-time indices is supported as an embedding: rows (axis 0) of a 2-D table");
    set_node(m, n, 0, imp_op2(m, n, OP_EMBEDDING, ov_node(m, x), ov_node(m, ix)));
    return;
  }
  const OTensor *c = ix->c;
  if (ot_is_float(c->type) || !c->n) imp_error(n, "the indices must be integers");
  int64_t dim = xs->d[axis], k0 = c->i[0] < 0 ? c->i[0] + dim : c->i[0];
  bool run = k0 >= 0;
  for (int64_t k = 0; run && k < c->n; k++) run = (c->i[k] < 0 ? c->i[k] + dim : c->i[k]) == k0 + k && k0 + k < dim;
  bool positions = run && k0 == 0 && c->shape.ndim >= 1;
  for (int d = 0; positions && d < c->shape.ndim - 1; d++) positions = c->shape.d[d] == 1;
  if (table && positions) { /* wpe(arange(T)) */
    set_node(m, n, 0, imp_op2(m, n, OP_EMBEDDING, ov_node(m, x), ov_node(m, ix)));
    return;
  }
  if (!run || c->shape.ndim > 1)
    imp_error(n, "Gather with constant indices is supported for one index or a run of consecutive ones");
  Node *s = slice_node(m, n, ov_node(m, x), axis, k0, k0 + c->n);
  if (c->shape.ndim == 0) { /* one index: the axis goes */
    Shape r = s->shape;
    memmove(r.d + axis, r.d + axis + 1, (r.ndim - axis - 1) * sizeof *r.d);
    r.ndim--;
    s = imp_reshape(m, n, s, &r);
  }
  set_node(m, n, 0, s);
}

/* Reshape, Unsqueeze, Squeeze, Flatten: an IR reshape (nothing where the shape stays);
 * a Reshape that ends an attention block becomes the IR's attention op. */
static void import_reshape(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0);
  const Shape *xs = ov_shape(x);
  Shape s;
  int64_t v[MAX_DIMS];
  if (!strcmp(n->op, "Reshape"))
    shape_reshape(n, xs, v, (int)ot_ints(n, need_const(n, 1, "the shape"), v, MAX_DIMS, "the shape"),
                  attr_i(n, "allowzero", 0), &s);
  else if (!strcmp(n->op, "Unsqueeze")) shape_unsqueeze(n, xs, v, node_axes(n, 1, 13, v), &s);
  else if (!strcmp(n->op, "Squeeze")) shape_squeeze(n, xs, v, node_axes(n, 1, 13, v), &s);
  else shape_flatten(n, xs, &s);
  if (shape_eq(&s, xs)) {
    set_alias(n, 0, x);
    return;
  }
  if (x->kind == OV_DEFER) { /* a pattern may look through it (a flattened log-softmax) */
    n->out[0] = ov_defer(m, n, x->dtype, &s);
    return;
  }
  Node *att = strcmp(n->op, "Reshape") ? NULL : match_attention(m, n, &s);
  set_node(m, n, 0, att ? att : imp_reshape(m, n, ov_node(m, x), &s));
}

static void import_transpose(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0);
  int nd = ov_shape(x)->ndim;
  int64_t perm[MAX_DIMS];
  transpose_perm(n, nd, perm);
  bool same = true;
  for (int i = 0; i < nd; i++) same &= perm[i] == i;
  if (same) {
    set_alias(n, 0, x);
    return;
  }
  Node *r = imp_node(m, n, OP_TRANSPOSE, (Node *[]){ov_node(m, x)}, 1);
  ir_set_ints(r, "perm", perm, nd);
  set_node(m, n, 0, imp_infer(r));
}

static void import_expand(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0);
  int64_t v[MAX_DIMS];
  Shape want = {(int)ot_ints(n, need_const(n, 1, "the shape"), v, MAX_DIMS, "the shape"), {0}}, s;
  memcpy(want.d, v, sizeof v);
  if (!shape_broadcast(ov_shape(x), &want, &s)) imp_error(n, "the input does not broadcast to the shape");
  if (shape_eq(&s, ov_shape(x))) {
    set_alias(n, 0, x);
    return;
  }
  Node *r = imp_node(m, n, OP_BROADCAST, (Node *[]){ov_node(m, x)}, 1);
  ir_set_ints(r, "shape", s.d, s.ndim);
  set_node(m, n, 0, imp_infer(r));
}

static void import_slice(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0);
  SliceAx r[MAX_DIMS];
  slice_ranges(n, ov_shape(x), r);
  Node *y = ov_node(m, x);
  for (int d = 0; d < y->shape.ndim; d++) {
    if (r[d].step != 1 && r[d].count > 1) imp_error(n, "a slice with step %lld is not supported", (long long)r[d].step);
    if (!r[d].count) imp_error(n, "an empty slice of axis %d", d);
    y = slice_node(m, n, y, d, r[d].start, r[d].start + r[d].count);
  }
  set_node(m, n, 0, y);
}

static void import_split(Imp *m, ONode *n) {
  Node *x = in_node(m, n, 0);
  int axis = norm_axis(n, attr_i(n, "axis", 0), x->shape.ndim);
  int64_t sizes[MAX_SPLIT], off = 0;
  int parts = split_sizes(n, &x->shape, axis, sizes);
  for (int p = 0; p < parts; p++) {
    if (!sizes[p]) imp_error(n, "an empty part");
    set_node(m, n, p, slice_node(m, n, x, axis, off, off + sizes[p]));
    off += sizes[p];
  }
}

static void import_concat(Imp *m, ONode *n) {
  Node **in = arena_array(m->a, n->nin ? n->nin : 1, sizeof *in);
  int k = 0;
  for (int i = 0; i < n->nin; i++) {
    OVal *v = in_val(m, n, i);
    if (v->kind != OV_CONST || v->c->n) in[k++] = ov_node(m, v); /* empty constants add nothing */
  }
  if (!k) imp_error(n, "nothing to concatenate");
  if (k == 1) {
    set_node(m, n, 0, in[0]);
    return;
  }
  Node *r = imp_node(m, n, OP_CONCAT, in, k);
  ir_set_int(r, "axis", norm_axis(n, attr_i(n, "axis", 0), in[0]->shape.ndim));
  set_node(m, n, 0, imp_infer(r));
}

/* Casts between float types (the IR's cast) or between integer types (nothing: integer
 * tensors are i32); a cast between the two kinds of a run-time value is refused. */
static void import_cast(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0);
  int to = (int)attr_i(n, "to", 0);
  if (to == OT_BOOL || to == OT_DOUBLE) imp_error(n, "a cast of a run-time value to ONNX type %d is not supported", to);
  DType t = imp_dtype(n, to, "the result");
  if (dtype_is_float(t) != dtype_is_float(x->dtype))
    imp_error(n, "a cast between integers and floats of a run-time value is not supported");
  if (t == x->dtype) {
    set_alias(n, 0, x);
    return;
  }
  Node *r = imp_node(m, n, OP_CAST, (Node *[]){ov_node(m, x)}, 1);
  ir_set_int(r, "dtype", t);
  set_node(m, n, 0, imp_infer(r));
}

static void import_identity(Imp *m, ONode *n) { set_alias(n, 0, in_val(m, n, 0)); }

/* Dropout: the IR's dropout in training mode with p > 0 (its own random mask), else
 * nothing. Before opset 12 Dropout is the identity when a model is run. */
static void import_dropout(Imp *m, ONode *n) {
  OVal *x = in_val(m, n, 0);
  double p = n->opset >= 12 ? 0.5 : 0;
  bool training = false;
  if (n->opset >= 12 && n->nin > 1 && n->in[1]) p = ot_get(need_const(n, 1, "ratio"), 0);
  if (n->opset >= 12 && n->nin > 2 && n->in[2]) training = ot_get(need_const(n, 2, "training_mode"), 0) != 0;
  if (!training || p == 0) {
    set_alias(n, 0, x);
    return;
  }
  Node *r = imp_node(m, n, OP_DROPOUT, (Node *[]){ov_node(m, x)}, 1);
  ir_set_float(r, "p", p);
  ir_set_int(r, "seed", r->id);
  set_node(m, n, 0, imp_infer(r));
}

/* ReduceMean, ReduceSum over the axes (all when none are given), one IR reduction each. */
static void import_reduce(Imp *m, ONode *n) {
  Node *x = in_node(m, n, 0);
  int64_t axes[MAX_DIMS];
  int k = node_axes(n, 1, strcmp(n->op, "ReduceSum") ? 18 : 13, axes);
  bool keep = attr_i(n, "keepdims", 1);
  OpKind op = strcmp(n->op, "ReduceSum") ? OP_MEAN : OP_SUM;
  if (k <= 0 && attr_i(n, "noop_with_empty_axes", 0)) {
    set_node(m, n, 0, x);
    return;
  }
  bool on[MAX_DIMS] = {0};
  for (int i = 0; i < k; i++) on[norm_axis(n, axes[i], x->shape.ndim)] = true;
  if (k <= 0) {
    Node *r = imp_node(m, n, op, &x, 1);
    ir_set_int(r, "keepdim", keep);
    set_node(m, n, 0, imp_infer(r));
    return;
  }
  for (int a = x->shape.ndim - 1; a >= 0; a--) { /* last first: the others keep their index */
    if (!on[a]) continue;
    Node *r = imp_node(m, n, op, &x, 1);
    ir_set_int(r, "axis", a);
    ir_set_int(r, "keepdim", keep);
    x = imp_infer(r);
  }
  set_node(m, n, 0, x);
}

static void import_layernorm(Imp *m, ONode *n) {
  Node *x = in_node(m, n, 0);
  if (norm_axis(n, attr_i(n, "axis", -1), x->shape.ndim) != x->shape.ndim - 1)
    imp_error(n, "layer normalisation over more than the last axis is not supported");
  if (n->nin < 3 || !n->in[2]) imp_error(n, "layer normalisation without a bias is not supported");
  Node *in[3] = {x, in_node(m, n, 1), in_node(m, n, 2)};
  Node *r = imp_node(m, n, OP_LAYERNORM, in, 3);
  ir_set_float(r, "eps", f32_short(attr_f(n, "epsilon", 1e-5)));
  set_node(m, n, 0, imp_infer(r));
}

/* ---- losses ------------------------------------------------------------------------------ */

/* The IR's cross_entropy of logits x [..., C] (classes last) and targets y [...]; with
 * ONNX's layout, scores [N, C, d1, ...] have their classes on axis 1. The flattening
 * reshapes torch writes on both sides (view(-1, C), view(-1)) are looked through, so
 * that the loss reads [batch, seq, C] logits and the targets input itself, as the
 * model language's models do. */
static Node *cross_entropy(Imp *m, ONode *n, OVal *x, bool classes_last, OVal *y) {
  const char *red = attr_s(n, "reduction", "mean");
  if (strcmp(red, "mean")) imp_error(n, "reduction '%s' is not supported: the loss must be the mean", red);
  if (n->nin > 2 && n->in[2]) imp_error(n, "class weights are not supported");
  const Shape *xs = ov_shape(x);
  if (xs->ndim == 2 && ov_is(x, "Reshape") && ov_is(y, "Reshape")) {
    OVal *x0 = x->def->in[0], *y0 = y->def->in[0];
    Shape rows = *ov_shape(x0);
    rows.ndim--;
    if (rows.ndim >= 1 && ov_shape(x0)->d[rows.ndim] == xs->d[1] && shape_eq(&rows, ov_shape(y0)))
      x = x0, y = y0, classes_last = true;
  }
  Node *logits = ov_node(m, x), *targets = ov_node(m, y);
  int nd = logits->shape.ndim;
  if (!classes_last && nd > 2) {
    int64_t perm[MAX_DIMS] = {0};
    for (int i = 1; i < nd - 1; i++) perm[i] = i + 1;
    perm[nd - 1] = 1;
    Node *t = imp_node(m, n, OP_TRANSPOSE, &logits, 1);
    ir_set_ints(t, "perm", perm, nd);
    logits = imp_infer(t);
  }
  if (ov_is(y, "Reshape") && y->def->in[0]->kind != OV_CONST && ov_shape(y->def->in[0])->ndim < MAX_DIMS) {
    /* labels flattened from the targets (view(-1)) against logits that were not: the
     * logits take the targets' shape, so that the loss reads the targets input */
    OVal *y0 = y->def->in[0];
    Shape want = *ov_shape(y0);
    want.d[want.ndim++] = logits->shape.d[logits->shape.ndim - 1];
    if (shape_numel(&want) == shape_numel(&logits->shape))
      logits = imp_reshape(m, n, logits, &want), targets = ov_node(m, y0);
  }
  if (targets->dtype != DT_I32) imp_error(n, "the labels must be integers");
  Node *r = imp_op2(m, n, OP_CROSS_ENTROPY, logits, targets);
  const Onnx__AttributeProto *ig = attr_find(n, "ignore_index");
  if (ig) ir_set_int(r, "ignore_index", ig->i);
  return r;
}

static void import_sce(Imp *m, ONode *n) {
  set_node(m, n, 0, cross_entropy(m, n, in_val(m, n, 0), false, in_val(m, n, 1)));
}

/* NegativeLogLikelihoodLoss of a LogSoftmax over the classes (maybe flattened to
 * [N, C] between them): a cross-entropy of the LogSoftmax's input. */
static void import_nll(Imp *m, ONode *n) {
  OVal *lp = in_val(m, n, 0), *ls = lp, *y = in_val(m, n, 1);
  bool flat = ov_is(lp, "Reshape") && lp->kind == OV_DEFER;
  if (flat) ls = lp->def->in[0];
  if (!ov_is(ls, "LogSoftmax") || ls->kind != OV_DEFER)
    imp_error(n, "NegativeLogLikelihoodLoss is supported on a LogSoftmax's output (a cross-entropy)");
  OVal *x = ls->def->in[0];
  int nd = ov_shape(x)->ndim, axis = norm_axis(ls->def, attr_i(ls->def, "axis", ls->def->opset >= 13 ? -1 : 1), nd);
  bool last = axis == nd - 1;
  if (flat) { /* LogSoftmax over the last axis of [..., C], flattened to [N, C] */
    const Shape *fs = ov_shape(lp);
    if (!last || fs->ndim != 2 || fs->d[1] != ov_shape(x)->d[nd - 1])
      imp_error(n, "the log-probabilities are reshaped across classes");
    Node *xf = imp_reshape(m, n, ov_node(m, x), fs);
    Shape rows = *ov_shape(x);
    rows.ndim--;
    if (ov_is(y, "Reshape") && shape_eq(ov_shape(y->def->in[0]), &rows)) {
      set_node(m, n, 0, cross_entropy(m, n, x, true, y->def->in[0]));
      return;
    }
    set_node(m, n, 0, cross_entropy(m, n, ov_of_node(m, n, xf), true, y));
    return;
  }
  if (axis != 1) imp_error(n, "the LogSoftmax is not over the classes (axis 1)");
  set_node(m, n, 0, cross_entropy(m, n, x, nd == 2, y));
}

/* ---- deferred expressions without a pattern ------------------------------------------------ */

/* An OV_DEFER value op by op: arithmetic on IR nodes and scalar constants, reshapes;
 * everything else is refused here, naming the node that has no IR op. */
Node *lower_defer(Imp *m, OVal *v) {
  ONode *d = v->def;
  OpKind op = binary_kind(d->op);
  if (op != OP_COUNT) {
    for (int i = 0; i < 2; i++) {
      double c;
      OVal *x = d->in[i], *other = d->in[1 - i];
      if (x->kind == OV_CONST && !scalar_like(x, ov_shape(other), &c)) {
        char s[96];
        shape_format(s, sizeof s, &x->c->shape);
        imp_error(d,
                  "a constant tensor operand of shape %s: the IR's constants are scalars, so it must be part of a "
                  "pattern colossalc recognises (a causal mask before a Softmax, the cos and sin tables of rotary "
                  "embeddings)",
                  s);
      }
    }
    return binary_node(m, d, op, d->in[0], d->in[1]);
  }
  if (!strcmp(d->op, "Neg")) return imp_op1(m, d, OP_NEG, ov_node(m, d->in[0]));
  if (!strcmp(d->op, "Reshape") || !strcmp(d->op, "Unsqueeze") || !strcmp(d->op, "Squeeze") ||
      !strcmp(d->op, "Flatten"))
    return imp_reshape(m, d, ov_node(m, d->in[0]), &v->shape);
  if (!strcmp(d->op, "Where"))
    imp_error(d, "Where on values computed at run time is supported as a causal mask (the input of a Softmax) only");
  if (!strcmp(d->op, "LogSoftmax"))
    imp_error(d, "LogSoftmax is supported as the input of NegativeLogLikelihoodLoss (a cross-entropy) only");
  imp_error(d,
            "%s has no IR op, and this use of it is not a pattern colossalc recognises (GELU in its erf or tanh form, "
            "SiLU, layernorm, RMSNorm, rotary embeddings; docs/onnx.md)",
            d->op);
}

/* ---- the table -------------------------------------------------------------------------------- */

static const struct {
  const char *op;
  ImportFn fn;
} imports[] = {
    {"Add", import_binary},
    {"Sub", import_binary},
    {"Mul", import_binary},
    {"Div", import_binary},
    {"Pow", import_pow},
    {"Neg", import_neg},
    {"Relu", import_relu},
    {"Gelu", import_gelu},
    {"Sigmoid", import_deferred},
    {"Tanh", import_deferred},
    {"Erf", import_deferred},
    {"Sqrt", import_deferred},
    {"Reciprocal", import_deferred},
    {"Exp", import_deferred},
    {"Log", import_deferred},
    {"LogSoftmax", import_deferred},
    {"Where", import_where},
    {"Softmax", import_softmax},
    {"MatMul", import_matmul},
    {"Gemm", import_gemm},
    {"Gather", import_gather},
    {"Reshape", import_reshape},
    {"Unsqueeze", import_reshape},
    {"Squeeze", import_reshape},
    {"Flatten", import_reshape},
    {"Transpose", import_transpose},
    {"Expand", import_expand},
    {"Slice", import_slice},
    {"Split", import_split},
    {"Concat", import_concat},
    {"Cast", import_cast},
    {"Identity", import_identity},
    {"Dropout", import_dropout},
    {"ReduceMean", import_reduce},
    {"ReduceSum", import_reduce},
    {"LayerNormalization", import_layernorm},
    {"SoftmaxCrossEntropyLoss", import_sce},
    {"NegativeLogLikelihoodLoss", import_nll},
};

ImportFn import_fn(const char *op) {
  for (size_t i = 0; i < sizeof imports / sizeof *imports; i++)
    if (!strcmp(imports[i].op, op)) return imports[i].fn;
  return NULL;
}
