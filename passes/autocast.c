/* Mixed precision: the casts of a 16-bit program, written into the forward graph
 * before autodiff, so that every rounding point is a node (the lowering rounds a
 * 16-bit node where it is stored or, fused, where it is computed) and the gradients
 * autodiff builds follow them as autograd's do. The activations are 16-bit, as
 * Megatron-LM keeps them (and PyTorch under autocast, mostly); the statistics, the
 * losses and the training state are f32:
 *
 *   - OPF_LOWP ops (GEMMs) take their float inputs cast to the low precision, and
 *     their result is low: f32 accumulation, rounded once;
 *   - OPF_F32 ops (normalisations, softmax, losses, sums) take them cast to f32 (a
 *     widening the kernels do as they load a 16-bit buffer);
 *   - OPF_LOWOUT ops (normalisations, softmax, embeddings) have their result rounded
 *     to the low precision: an activation, stored in 16 bits;
 *   - any other op with float inputs of different precisions computes in f32 (the
 *     low ones cast up) and its result is rounded to the low precision when one of
 *     the activations it reads is low: neither a parameter (a bias) nor a 0-d constant
 *     nor an f32 activation (a collective's result) widens the stream it joins;
 *   - the rest (elementwise ops of one input, views) keep their input's precision;
 *   - a float input (a batch's values, or what another pipeline chunk sent) is read
 *     in the low precision.
 *
 * A value read in another precision by several ops of one layer is cast once for all of
 * them (shared_cast): the GEMMs that read a tensor-parallel copy of a norm's output keep
 * one 16-bit copy for their backward, not one each.
 *
 * Parameters stay f32 (the master weights; a cast feeds each GEMM a 16-bit copy) and
 * so do their gradients, summed in f32 after each cast back. What pipeline chunks
 * exchange is f32: the values a chunk sends are cast up, exactly, and the receiver
 * rounds them back.
 *
 * fp8 (pass_autocast_fp8) is bf16 but for the linear layers' GEMMs (a matmul with a
 * parameter operand, not the classifier's, whose logits a loss reads), which become
 * Transformer Engine's: both operands quantized to e4m3 (fp8_quantize, each with its
 * own scaling state), a scaled_matmul of them giving bf16, and in backward the output's
 * gradient quantized to e5m2 with a third state (ir/ops.def). */
#include "passes/passes.h"

typedef struct Ctx {
  Graph *h;
  const Node *at;
} Ctx;

static Node *cast(Ctx *c, Node *x, DType t) {
  if (x->dtype == t || !dtype_is_float(x->dtype)) return x;
  Node *n = graph_add(c->h, OP_CAST, &x, 1, c->at->loc);
  n->layer = c->at->layer;
  n->attr[op_attr_index(OP_CAST, "dtype")] = (AttrVal){.set = true, .i = t};
  node_infer(n);
  return n;
}

/* Value v (the readers' value of source node id) cast to t for a reader in layer
 * `layer`: the cast an earlier reader of the same layer made, else a new one (memo:
 * [source nodes][DT_COUNT]). */
static Node *shared_cast(Ctx *c, Node **memo, int id, Node *v, DType t) {
  Node **m = &memo[(size_t)id * DT_COUNT + t];
  if (*m && (*m)->layer == c->at->layer) return *m;
  Node *x = cast(c, v, t);
  if (x != v) *m = x;
  return x;
}

/* The precision a promoting op computes in and the one its result takes: f32 when its
 * float inputs differ (*back: low when an activation it reads, an input that
 * `varies` with the batch, is low), else their precision. */
static DType promote(Node **in, const bool *varies, int nin, DType low, DType *back) {
  DType t = DT_COUNT;
  bool mixed = false, low_act = false;
  for (int k = 0; k < nin; k++) {
    if (!dtype_is_float(in[k]->dtype)) continue;
    mixed |= t != DT_COUNT && in[k]->dtype != t;
    t = t == DT_COUNT || in[k]->dtype == DT_F32 ? in[k]->dtype : t;
    low_act |= varies[k] && in[k]->dtype == low;
  }
  *back = mixed && low_act ? low : DT_COUNT;
  return mixed ? DT_F32 : t;
}

/* The logits a loss reads: the classifier's GEMM, which fp8 leaves in bf16. */
static bool *loss_logits(const Graph *g) {
  bool *v = arena_array(g->arena, g->n, sizeof *v);
  for (int i = 0; i < g->n; i++)
    if (g->nodes[i]->op == OP_CROSS_ENTROPY) v[g->nodes[i]->in[0]->id] = true;
  return v;
}

static Node *fp8_state(Ctx *c, int64_t history) {
  Node *n = graph_add(c->h, OP_FP8_STATE, NULL, 0, c->at->loc);
  n->layer = c->at->layer;
  n->attr[op_attr_index(OP_FP8_STATE, "history")] = (AttrVal){.set = true, .i = history};
  node_infer(n);
  return n;
}

static void set_attr(Node *n, const char *name, int64_t v) {
  n->attr[op_attr_index(n->op, name)] = (AttrVal){.set = true, .i = v};
}

static Node *fp8_linear(Ctx *c, const Node *mm, Node *a, Node *b, int history, int margin) {
  Node *st[3] = {fp8_state(c, history), fp8_state(c, history), fp8_state(c, history)}, *q[2];
  Node *ops[2] = {a, b};
  for (int k = 0; k < 2; k++) {
    q[k] = graph_add(c->h, OP_FP8_QUANTIZE, (Node *[]){ops[k], st[k]}, 2, mm->loc);
    q[k]->layer = mm->layer;
    set_attr(q[k], "dtype", DT_E4M3);
    set_attr(q[k], "margin", margin);
    node_infer(q[k]);
  }
  Node *m = graph_add(c->h, OP_SCALED_MATMUL, (Node *[]){q[0], q[1], st[0], st[1], st[2]}, 5, mm->loc);
  m->layer = mm->layer;
  set_attr(m, "transpose_a", attr_int(mm, "transpose_a"));
  set_attr(m, "transpose_b", attr_int(mm, "transpose_b"));
  set_attr(m, "dtype", DT_BF16);
  set_attr(m, "margin", margin);
  node_infer(m);
  return m;
}

static Graph *autocast(Graph *g, DType low, int fp8_history, int fp8_margin, bool fp8_classifier) {
  Graph *h = graph_new_like(g);
  bool *logits = !fp8_history ? NULL : fp8_classifier ? arena_array(g->arena, g->n, sizeof *logits) : loss_logits(g);
  h->train.loss_scaling = low == DT_F16;                   /* f16's narrow range: the gradients scaled (autodiff) */
  Node **map = arena_array(g->arena, g->n, sizeof *map);   /* the value its readers read */
  Node **self = arena_array(g->arena, g->n, sizeof *self); /* the node itself (an input, not its cast) */
  Node **in = arena_array(g->arena, 64, sizeof *in);
  Node **memo = arena_array(g->arena, (size_t)g->n * DT_COUNT, sizeof *memo);
  bool *varies = arena_array(g->arena, g->n, sizeof *varies), vin[64];
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    Ctx c = {h, n};
    ir_assert(n->nin <= 64);
    varies[i] = n->op == OP_INPUT;
    for (int k = 0; k < n->nin; k++) {
      in[k] = map[n->in[k]->id];
      vin[k] = varies[n->in[k]->id];
      varies[i] |= vin[k];
    }
    unsigned f = op_info(n->op)->flags;
    if (logits && n->op == OP_MATMUL && !logits[n->id] && (n->in[0]->op == OP_PARAM || n->in[1]->op == OP_PARAM)) {
      map[i] = self[i] = fp8_linear(&c, n, in[0], in[1], fp8_history, fp8_margin);
      continue;
    }
    DType to = DT_COUNT, back = DT_COUNT;
    if (f & OPF_LOWP) to = low;
    else if (f & OPF_F32) to = DT_F32;
    else if (n->nin > 1) to = promote(in, vin, n->nin, low, &back);
    if (f & OPF_LOWOUT) back = low;
    for (int k = 0; k < n->nin && to != DT_COUNT; k++) in[k] = shared_cast(&c, memo, n->in[k]->id, in[k], to);
    Node *m = graph_clone_node(h, n, in);
    if (n->nin > 0) node_infer(m);
    self[i] = m;
    map[i] = back != DT_COUNT ? cast(&c, m, back) : n->op == OP_INPUT ? cast(&c, m, low) : m;
  }
  if (g->loss) h->loss = map[g->loss->id];
  ir_assert(g->nseeds == 0); /* before autodiff */
  /* the values other pipeline chunks read go out in f32 (their inputs are f32, and the
   * gradients that come back seed the casts) */
  h->nouts = g->nouts;
  h->outs = arena_array(g->arena, g->nouts + 1, sizeof(Node *));
  for (int k = 0; k < g->nouts; k++) {
    Ctx c = {h, g->outs[k]};
    h->outs[k] = cast(&c, map[g->outs[k]->id], DT_F32);
  }
  h->nwrt = g->nwrt;
  h->wrt = arena_array(g->arena, g->nwrt + 1, sizeof(Node *));
  for (int k = 0; k < g->nwrt; k++) h->wrt[k] = self[g->wrt[k]->id];
  return h;
}

Graph *pass_autocast(Graph *g, DType low) { return autocast(g, low, 0, 0, false); }

Graph *pass_autocast_fp8(Graph *g, int history, int margin, bool classifier) {
  ir_assert(history > 0 && margin >= 0);
  return autocast(g, DT_BF16, history, margin, classifier);
}
