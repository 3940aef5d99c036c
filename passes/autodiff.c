/* Reverse-mode automatic differentiation over the IR.
 *
 * Walks the forward graph backwards from the loss, calling each op's gradient rule
 * (grad_<name>, found by name from ir/ops.def like the other per-op functions). A
 * rule receives the node and the gradient of its output, and adds a gradient
 * contribution to each input that needs one; contributions to the same node are
 * summed. Only nodes on a path from a parameter to the loss get gradients.
 * Backward nodes inherit the layer and source location of the forward node they
 * differentiate, so pipeline stages own their backward and errors point at the
 * model source. */
#include <string.h>
#include "passes/passes.h"

typedef struct AD {
  Graph *g;
  const Node *at; /* the forward node whose rule is running */
  Node **adj;     /* [forward nodes] accumulated output gradients */
  bool *needs;    /* [forward nodes] lies on a path from a parameter */
  int *uses;      /* [forward nodes] readers in the forward graph, outputs counted */
  bool *partial;  /* [forward nodes] a parameter whose gradient is left a tp partial sum */
} AD;

#define OP(id, name, nin, cls, flags, attrs) static void grad_##name(AD *ad, Node *n, Node *g);
#include "ir/ops.def"
#undef OP

static void (*const grad_rules[OP_COUNT])(AD *, Node *, Node *) = {
#define OP(id, name, nin, cls, flags, attrs) [OP_##id] = grad_##name,
#include "ir/ops.def"
#undef OP
};

/* ---- building backward nodes -------------------------------------------------- */

static Node *mk(AD *ad, OpKind op, Node **in, int nin) {
  Node *n = graph_add(ad->g, op, in, nin, ad->at->loc);
  n->layer = ad->at->layer;
  return n;
}

static Node *done(Node *n) {
  node_infer(n);
  return n;
}
static void set_i(Node *n, const char *attr, int64_t v) {
  n->attr[op_attr_index(n->op, attr)].i = v;
  n->attr[op_attr_index(n->op, attr)].set = true;
}
static void set_f(Node *n, const char *attr, double v) {
  n->attr[op_attr_index(n->op, attr)].f = v;
  n->attr[op_attr_index(n->op, attr)].set = true;
}
static void set_ints(Node *n, const char *attr, const int64_t *v, int nv) {
  AttrVal *a = &n->attr[op_attr_index(n->op, attr)];
  a->set = true;
  a->n = nv;
  for (int i = 0; i < nv; i++) a->v[i] = v[i];
}

static Node *op1(AD *ad, OpKind op, Node *x) { return done(mk(ad, op, &x, 1)); }
static Node *op2(AD *ad, OpKind op, Node *x, Node *y) {
  Node *in[2] = {x, y};
  return done(mk(ad, op, in, 2));
}
static Node *op3n(AD *ad, OpKind op, Node *x, Node *y, Node *z) {
  Node *in[3] = {x, y, z};
  return mk(ad, op, in, 3);
}

static Node *constant(AD *ad, double v, DType dt) {
  Node *c = mk(ad, OP_CONST, NULL, 0);
  set_f(c, "value", v);
  c->dtype = dt;
  return done(c);
}

static Node *shaped(AD *ad, OpKind op, Node *x, const Shape *s) {
  Node *n = mk(ad, op, &x, 1);
  set_ints(n, "shape", s->d, s->ndim);
  return done(n);
}

static Node *reshape_to(AD *ad, Node *x, const Shape *s) {
  return shape_eq(&x->shape, s) ? x : shaped(ad, OP_RESHAPE, x, s);
}

/* The gradient g of a broadcast result, summed back to x's shape. */
static Node *unbroadcast(AD *ad, Node *g, const Node *x) {
  return shape_eq(&g->shape, &x->shape) ? g : shaped(ad, OP_SUM_TO, g, &x->shape);
}

static void accum(AD *ad, Node *x, Node *g) {
  if (!ad->needs[x->id]) return;
  ir_assert(shape_eq(&g->shape, &x->shape));
  ad->adj[x->id] = ad->adj[x->id] ? op2(ad, OP_ADD, ad->adj[x->id], g) : g;
}

/* ---- rules: sources ------------------------------------------------------------ */

static void grad_input(AD *ad, Node *n, Node *g) {}
static void grad_param(AD *ad, Node *n, Node *g) {}
static void grad_const(AD *ad, Node *n, Node *g) {}
static void grad_loss_scale(AD *ad, Node *n, Node *g) {}
static void grad_arange(AD *ad, Node *n, Node *g) {}
static void grad_ce_count(AD *ad, Node *n, Node *g) {} /* a count of the targets: no gradient */

/* ---- gathers and contractions -------------------------------------------------- */

static void grad_embedding(AD *ad, Node *n, Node *g) {
  Node *e = mk(ad, OP_EMBEDDING_GRAD, (Node *[]){n->in[1], g}, 2);
  set_i(e, "rows", n->in[0]->shape.d[0]);
  accum(ad, n->in[0], done(e));
}

static Node *matmul(AD *ad, Node *a, Node *b, bool ta, bool tb) {
  Node *in[2] = {a, b};
  Node *m = mk(ad, OP_MATMUL, in, 2);
  set_i(m, "transpose_a", ta);
  set_i(m, "transpose_b", tb);
  return done(m);
}

/* [..., r, c] -> [prod(...)*r, c] */
static Node *flatten_rows(AD *ad, Node *x) {
  Shape s = {2, {shape_numel(&x->shape) / x->shape.d[x->shape.ndim - 1], x->shape.d[x->shape.ndim - 1]}};
  return reshape_to(ad, x, &s);
}

/* C = op(A) op(B). dA = G op(B)ᵀ (transposed back when ta), dB = op(A)ᵀ G (likewise).
 * A 2-D weight under a batched activation gets its gradient as one GEMM over the
 * flattened batch instead of a batched GEMM and a sum. */
static void grad_matmul(AD *ad, Node *n, Node *g) {
  Node *a = n->in[0], *b = n->in[1];
  bool ta = attr_int(n, "transpose_a"), tb = attr_int(n, "transpose_b");
  if (ad->needs[a->id]) {
    Node *da = ta ? (tb ? matmul(ad, b, g, true, true) : matmul(ad, b, g, false, true))
                  : (tb ? matmul(ad, g, b, false, false) : matmul(ad, g, b, false, true));
    accum(ad, a, unbroadcast(ad, da, a));
  }
  if (!ad->needs[b->id]) return;
  if (b->shape.ndim == 2 && a->shape.ndim > 2 && !ta) {
    Node *a2 = flatten_rows(ad, a), *g2 = flatten_rows(ad, g);
    accum(ad, b, tb ? matmul(ad, g2, a2, true, false) : matmul(ad, a2, g2, true, false));
    return;
  }
  Node *db = tb ? (ta ? matmul(ad, g, a, true, true) : matmul(ad, g, a, true, false))
                : (ta ? matmul(ad, a, g, false, false) : matmul(ad, a, g, true, false));
  accum(ad, b, unbroadcast(ad, db, b));
}

/* ---- fp8 (ir/ops.def) ------------------------------------------------------------ */

static void grad_fp8_state(AD *ad, Node *n, Node *g) {}

/* Straight through: the quantized value stands for x. */
static void grad_fp8_quantize(AD *ad, Node *n, Node *g) {
  Node *x = n->in[0];
  if (g->dtype != x->dtype) {
    Node *c = mk(ad, OP_CAST, &g, 1);
    set_i(c, "dtype", x->dtype);
    g = done(c);
  }
  accum(ad, x, g);
}

/* scaled_matmul(x, y) of quantized operands with states sx, sy (and n's sg), in f32. */
static Node *smm(AD *ad, const Node *n, Node *x, Node *y, Node *sx, Node *sy, bool tx, bool ty) {
  Node *m = mk(ad, OP_SCALED_MATMUL, (Node *[]){x, y, sx, sy, n->in[4]}, 5);
  set_i(m, "transpose_a", tx);
  set_i(m, "transpose_b", ty);
  set_i(m, "dtype", DT_F32);
  set_i(m, "margin", attr_int(n, "margin"));
  return done(m);
}

/* matmul's rule on the quantized operands, the output's gradient quantized to e5m2 with
 * state_g (Transformer Engine's backward GEMMs). */
static void grad_scaled_matmul(AD *ad, Node *n, Node *g) {
  Node *a = n->in[0], *b = n->in[1], *sa = n->in[2], *sb = n->in[3], *sg = n->in[4];
  bool ta = attr_int(n, "transpose_a"), tb = attr_int(n, "transpose_b");
  Node *q = mk(ad, OP_FP8_QUANTIZE, (Node *[]){g, sg}, 2);
  set_i(q, "dtype", DT_E5M2);
  set_i(q, "margin", attr_int(n, "margin"));
  g = done(q);
  if (ad->needs[a->id]) {
    Node *da = ta ? (tb ? smm(ad, n, b, g, sb, sg, true, true) : smm(ad, n, b, g, sb, sg, false, true))
                  : (tb ? smm(ad, n, g, b, sg, sb, false, false) : smm(ad, n, g, b, sg, sb, false, true));
    accum(ad, a, unbroadcast(ad, da, a));
  }
  if (!ad->needs[b->id]) return;
  if (b->shape.ndim == 2 && a->shape.ndim > 2 && !ta) {
    Node *a2 = flatten_rows(ad, a), *g2 = flatten_rows(ad, g);
    accum(ad, b, tb ? smm(ad, n, g2, a2, sg, sa, true, false) : smm(ad, n, a2, g2, sa, sg, true, false));
    return;
  }
  Node *db = tb ? (ta ? smm(ad, n, g, a, sg, sa, true, true) : smm(ad, n, g, a, sg, sa, true, false))
                : (ta ? smm(ad, n, a, g, sa, sg, false, false) : smm(ad, n, a, g, sa, sg, true, false));
  accum(ad, b, unbroadcast(ad, db, b));
}

/* ---- elementwise --------------------------------------------------------------- */

static void grad_add(AD *ad, Node *n, Node *g) {
  if (ad->needs[n->in[0]->id]) accum(ad, n->in[0], unbroadcast(ad, g, n->in[0]));
  if (ad->needs[n->in[1]->id]) accum(ad, n->in[1], unbroadcast(ad, g, n->in[1]));
}
static void grad_sub(AD *ad, Node *n, Node *g) {
  if (ad->needs[n->in[0]->id]) accum(ad, n->in[0], unbroadcast(ad, g, n->in[0]));
  if (ad->needs[n->in[1]->id]) accum(ad, n->in[1], unbroadcast(ad, op1(ad, OP_NEG, g), n->in[1]));
}
static void grad_mul(AD *ad, Node *n, Node *g) {
  if (ad->needs[n->in[0]->id]) accum(ad, n->in[0], unbroadcast(ad, op2(ad, OP_MUL, g, n->in[1]), n->in[0]));
  if (ad->needs[n->in[1]->id]) accum(ad, n->in[1], unbroadcast(ad, op2(ad, OP_MUL, g, n->in[0]), n->in[1]));
}
/* d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b */
static void grad_div(AD *ad, Node *n, Node *g) {
  if (ad->needs[n->in[0]->id]) accum(ad, n->in[0], unbroadcast(ad, op2(ad, OP_DIV, g, n->in[1]), n->in[0]));
  if (ad->needs[n->in[1]->id]) {
    Node *t = op1(ad, OP_NEG, op2(ad, OP_DIV, op2(ad, OP_MUL, g, n), n->in[1]));
    accum(ad, n->in[1], unbroadcast(ad, t, n->in[1]));
  }
}
static void grad_neg(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], op1(ad, OP_NEG, g)); }
static void grad_gelu(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], op2(ad, OP_GELU_GRAD, n->in[0], g)); }
static void grad_silu(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], op2(ad, OP_SILU_GRAD, n->in[0], g)); }
static void grad_gelu_erf(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], op2(ad, OP_GELU_ERF_GRAD, n->in[0], g)); }
static void grad_relu(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], op2(ad, OP_RELU_GRAD, n->in[0], g)); }

/* dropout scales kept elements by 1/(1-p): its gradient is the same mask on g. */
static void grad_dropout(AD *ad, Node *n, Node *g) {
  Node *d = mk(ad, OP_DROPOUT, &g, 1);
  memcpy(d->attr, n->attr, sizeof d->attr);
  accum(ad, n->in[0], done(d));
}
static void grad_cast(AD *ad, Node *n, Node *g) {
  Node *c = mk(ad, OP_CAST, &g, 1);
  set_i(c, "dtype", n->in[0]->dtype);
  accum(ad, n->in[0], done(c));
}
/* rotary is a rotation: its gradient rotates back. */
static void grad_rotary(AD *ad, Node *n, Node *g) {
  Node *r = mk(ad, OP_ROTARY, &g, 1);
  memcpy(r->attr, n->attr, sizeof r->attr);
  set_i(r, "inverse", !attr_int(n, "inverse"));
  accum(ad, n->in[0], done(r));
}

/* ---- normalisations and reductions --------------------------------------------- */

static void norm_grads(AD *ad, Node *n, Node *g, OpKind op, int outputs) {
  for (int which = 0; which < outputs; which++) {
    if (!ad->needs[n->in[which]->id]) continue;
    Node *d = op3n(ad, op, n->in[0], n->in[1], g);
    set_i(d, "which", which);
    set_f(d, "eps", attr_float(n, "eps"));
    accum(ad, n->in[which], done(d));
  }
}
static void grad_layernorm(AD *ad, Node *n, Node *g) { norm_grads(ad, n, g, OP_LAYERNORM_GRAD, 3); }
static void grad_rmsnorm(AD *ad, Node *n, Node *g) { norm_grads(ad, n, g, OP_RMSNORM_GRAD, 2); }

static void grad_softmax(AD *ad, Node *n, Node *g) {
  Node *d = mk(ad, OP_SOFTMAX_GRAD, (Node *[]){n, g}, 2);
  set_i(d, "axis", attr_int(n, "axis"));
  accum(ad, n->in[0], done(d));
}

/* sum and mean: the gradient broadcasts back over the reduced axes. */
static Node *unreduce(AD *ad, Node *n, Node *g) {
  const Node *x = n->in[0];
  const AttrVal *ax = attr_get(n, "axis");
  Shape kept = x->shape;
  for (int i = 0; i < kept.ndim; i++)
    if (!ax->set || i == (ax->i < 0 ? ax->i + kept.ndim : ax->i)) kept.d[i] = 1;
  return shaped(ad, OP_BROADCAST, reshape_to(ad, g, &kept), &x->shape);
}
static void grad_sum(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], unreduce(ad, n, g)); }
static void grad_mean(AD *ad, Node *n, Node *g) {
  double count = (double)shape_numel(&n->in[0]->shape) / (double)shape_numel(&n->shape);
  Node *scaled = op2(ad, OP_MUL, g, constant(ad, 1.0 / count, g->dtype));
  accum(ad, n->in[0], unreduce(ad, n, scaled));
}

static void grad_cross_entropy(AD *ad, Node *n, Node *g) {
  Node *d = op3n(ad, OP_CROSS_ENTROPY_GRAD, n->in[0], n->in[1], g);
  set_i(d, "ignore_index", attr_int(n, "ignore_index"));
  accum(ad, n->in[0], done(d));
}

/* classifier_ce: one node computes both gradients (one pass over the chunks, the
 * logits recomputed); x's and w's are slices of its output. */
static void grad_classifier_ce(AD *ad, Node *n, Node *g) {
  Node *d = mk(ad, OP_CLASSIFIER_CE_GRAD, (Node *[]){n->in[0], n->in[1], n->in[2], g}, 4);
  for (int a = 0; a < 3; a++) d->attr[a] = n->attr[a];
  done(d);
  int64_t nx = shape_numel(&n->in[0]->shape);
  for (int i = 0; i < 2; i++) {
    if (!ad->needs[n->in[i]->id]) continue;
    Node *sl = mk(ad, OP_SLICE, &d, 1);
    set_i(sl, "axis", 0), set_i(sl, "start", i ? nx : 0), set_i(sl, "end", i ? d->shape.d[0] : nx);
    accum(ad, n->in[i], shaped(ad, OP_RESHAPE, done(sl), &n->in[i]->shape));
  }
}

static void grad_attention(AD *ad, Node *n, Node *g) {
  diag_internal(__FILE__, __LINE__, "attention reached autodiff: run pass_decompose first");
}

/* flash_attention: delta = the row sums of dO∘O per head less the log-sum-exps'
 * gradient (d lse_i / d s_ij = p_ij), then one kernel for each input's gradient, which
 * recomputes the scores from q, k and the kept log-sum-exp: dS = P (dP - delta). */
static void grad_flash_attention(AD *ad, Node *n, Node *g) {
  const Shape *q = &n->in[0]->shape;
  int64_t heads = attr_int(n, "heads");
  Shape split = {4, {q->d[0], q->d[1], heads, q->d[2] / heads}};
  Node *part[2];
  for (int i = 0; i < 2; i++) { /* the output's part of g and of the output, per head */
    Node *sl = mk(ad, OP_SLICE, i ? &n : &g, 1);
    set_i(sl, "axis", 2), set_i(sl, "start", 0), set_i(sl, "end", q->d[2]);
    part[i] = shaped(ad, OP_RESHAPE, done(sl), &split);
  }
  Node *sum = mk(ad, OP_SUM, (Node *[]){op2(ad, OP_MUL, part[0], part[1])}, 1);
  set_i(sum, "axis", 3);
  Node *gl = mk(ad, OP_SLICE, &g, 1); /* the log-sum-exps' gradient (zero when only the output is read) */
  set_i(gl, "axis", 2), set_i(gl, "start", q->d[2]), set_i(gl, "end", q->d[2] + heads);
  Node *delta = op2(ad, OP_SUB, done(sum), done(gl));
  for (int w = 0; w < 3; w++) {
    if (!ad->needs[n->in[w]->id]) continue;
    Node *d = mk(ad, OP_FLASH_ATTENTION_GRAD, (Node *[]){n->in[0], n->in[1], n->in[2], n, g, delta}, 6);
    for (int a = 0; a < 5; a++) d->attr[a] = n->attr[a]; /* heads causal scale kv_heads window */
    set_i(d, "which", w);
    accum(ad, n->in[w], done(d));
  }
}

/* ---- data movement -------------------------------------------------------------- */

static void grad_reshape(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], reshape_to(ad, g, &n->in[0]->shape)); }

static void grad_transpose(AD *ad, Node *n, Node *g) {
  const AttrVal *p = attr_get(n, "perm");
  int64_t inv[MAX_DIMS];
  for (int i = 0; i < p->n; i++) inv[p->v[i]] = i;
  Node *t = mk(ad, OP_TRANSPOSE, &g, 1);
  set_ints(t, "perm", inv, p->n);
  accum(ad, n->in[0], done(t));
}

static void grad_slice(AD *ad, Node *n, Node *g) {
  const Node *x = n->in[0];
  int axis = (int)attr_int(n, "axis");
  if (axis < 0) axis += x->shape.ndim;
  Node *p = mk(ad, OP_PAD, &g, 1);
  set_i(p, "axis", axis);
  set_i(p, "before", attr_int(n, "start"));
  set_i(p, "after", x->shape.d[axis] - attr_int(n, "end"));
  accum(ad, n->in[0], done(p));
}

static void grad_concat(AD *ad, Node *n, Node *g) {
  int axis = (int)attr_int(n, "axis");
  if (axis < 0) axis += n->shape.ndim;
  int64_t off = 0;
  for (int i = 0; i < n->nin; i++) {
    int64_t len = n->in[i]->shape.d[axis];
    if (ad->needs[n->in[i]->id]) {
      Node *s = mk(ad, OP_SLICE, &g, 1);
      set_i(s, "axis", axis);
      set_i(s, "start", off);
      set_i(s, "end", off + len);
      accum(ad, n->in[i], done(s));
    }
    off += len;
  }
}

static void grad_broadcast(AD *ad, Node *n, Node *g) {
  if (ad->needs[n->in[0]->id]) accum(ad, n->in[0], unbroadcast(ad, g, n->in[0]));
}

/* ---- collectives: each one's gradient is its conjugate ------------------------------ */

/* op over the tensor-parallel group on g, with n's group size (and axis and blocks). */
static Node *comm_of(AD *ad, OpKind op, const Node *n, Node *g) {
  Node *c = mk(ad, op, &g, 1);
  set_i(c, "ranks", attr_int(n, "ranks"));
  if (op_attr_index(op, "axis") >= 0) {
    set_i(c, "axis", attr_int(n, "axis"));
    set_i(c, "blocks", attr_int(n, "blocks"));
  }
  return done(c);
}
/* P -> R: every rank's part contributed with weight 1, so each gets the whole gradient. */
static void grad_all_reduce(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], g); }
/* Identity forward, whose consumers' gradients are partial sums: all-reduced. The copy
 * of an all-gather that nothing else reads (S -> R before a split contraction, as
 * sequence parallelism has) sends the sums straight back to the gathered parts: a
 * reduce-scatter, half an all-reduce's bytes and no split after it (the plan prices
 * this conversion so, plan/shard.c). */
static void grad_tp_copy(AD *ad, Node *n, Node *g) {
  Node *x = n->in[0];
  if (ad->g->tp_sums_after_step && x->op == OP_PARAM && ad->uses[x->id] == 1) {
    accum(ad, x, g); /* its only gradient: summed after the step (Graph.tp_sums_after_step) */
    ad->partial[x->id] = true;
    return;
  }
  if (x->op == OP_ALL_GATHER && ad->uses[x->id] == 1 && attr_int(x, "ranks") == attr_int(n, "ranks")) {
    accum(ad, x->in[0], comm_of(ad, OP_REDUCE_SCATTER, x, g));
    return;
  }
  accum(ad, x, comm_of(ad, OP_ALL_REDUCE, n, g));
}
/* S -> R: the whole gradient is on every rank; each keeps its part. */
static void grad_all_gather(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], comm_of(ad, OP_SPLIT, n, g)); }
/* R -> S and P -> S: the parts' gradients, gathered, are the whole gradient. */
static void grad_split(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], comm_of(ad, OP_ALL_GATHER, n, g)); }
static void grad_reduce_scatter(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], comm_of(ad, OP_ALL_GATHER, n, g)); }
/* The exchange sends back what it received: block t of rank r's result came from block
 * r of rank t's input, so block r of rank t's gradient is block t of rank r's. */
static void grad_all_to_all(AD *ad, Node *n, Node *g) { accum(ad, n->in[0], comm_of(ad, OP_ALL_TO_ALL, n, g)); }

/* ---- gradient ops have no gradients (no second order) ---------------------------- */

static void no_second_order(AD *ad, Node *n, Node *g) {
  diag_internal(__FILE__, __LINE__, "second-order gradients are not supported");
}
static void grad_sum_to(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_gelu_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_silu_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_gelu_erf_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_relu_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_layernorm_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_rmsnorm_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_softmax_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_flash_attention_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_classifier_ce_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_cross_entropy_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_embedding_grad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }
static void grad_pad(AD *ad, Node *n, Node *g) { no_second_order(ad, n, g); }

/* ---- the pass -------------------------------------------------------------------- */

static void mark_needs(AD *ad, const Graph *g) {
  for (int k = 0; k < g->nwrt; k++) ad->needs[g->wrt[k]->id] = true;
  for (int k = 0; k < g->nouts; k++) ad->uses[g->outs[k]->id]++;
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    for (int k = 0; k < n->nin; k++) ad->uses[n->in[k]->id]++;
    bool need = n->op == OP_PARAM || ad->needs[i];
    for (int k = 0; k < n->nin && !need; k++) need = ad->needs[n->in[k]->id];
    ad->needs[i] = need && dtype_is_float(n->dtype);
  }
}

static void collect_params(AD *ad, Graph *g) {
  for (int i = 0; i < g->n_forward; i++) g->nparams += g->nodes[i]->op == OP_PARAM;
  g->params = arena_array(g->arena, g->nparams, sizeof *g->params);
  g->param_grads = arena_array(g->arena, g->nparams, sizeof *g->param_grads);
  if (g->tp_sums_after_step) g->grad_tp_partial = arena_array(g->arena, g->nparams, sizeof *g->grad_tp_partial);
  for (int i = 0, k = 0; i < g->n_forward; i++)
    if (g->nodes[i]->op == OP_PARAM) {
      g->params[k] = g->nodes[i];
      if (g->grad_tp_partial) g->grad_tp_partial[k] = ad->partial[i];
      g->param_grads[k++] = ad->adj[i];
    }
}

void pass_autodiff(Graph *g) {
  ir_assert((g->loss || g->nseeds) && g->n_forward == 0);
  int n = g->n_forward = g->n, last = -1;
  AD ad = {g,
           NULL,
           arena_array(g->arena, n, sizeof(Node *)),
           arena_array(g->arena, n, sizeof(bool)),
           arena_array(g->arena, n, sizeof(int)),
           arena_array(g->arena, n, sizeof(bool))};
  mark_needs(&ad, g);
  if (g->loss) {
    ad.at = g->loss;
    /* fp16: the gradients come scaled by the run's loss scale (the runtime unscales them) */
    ad.adj[g->loss->id] =
        g->train.loss_scaling ? done(mk(&ad, OP_LOSS_SCALE, NULL, 0)) : constant(&ad, 1.0, g->loss->dtype);
    last = g->loss->id;
  }
  for (int k = 0; k < g->nseeds; k++) {
    ad.at = g->seed_out[k];
    accum(&ad, g->seed_out[k], g->seed_grad[k]);
    if (g->seed_out[k]->id > last) last = g->seed_out[k]->id;
  }
  for (int i = last; i >= 0; i--) {
    Node *x = g->nodes[i];
    if (!ad.adj[i] || !ad.needs[i]) continue;
    ad.at = x;
    grad_rules[x->op](&ad, x, ad.adj[i]);
  }
  collect_params(&ad, g);
  g->wrt_grads = arena_array(g->arena, g->nwrt ? g->nwrt : 1, sizeof *g->wrt_grads);
  for (int k = 0; k < g->nwrt; k++) g->wrt_grads[k] = ad.adj[g->wrt[k]->id];
}
