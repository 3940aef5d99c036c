/* Decomposition: composite ops become primitive ops, for backends (and autodiff)
 * that have no fused kernel for them. Today that is attention, unless it is fused
 * (pass_decompose's `fused`): then it becomes flash_attention, one kernel forward and
 * one per gradient (codegen/kernel.h, KAttn), of whose output rows the first H*hd
 * values are attention's, and the scores are never stored. Materialized:
 *
 *   attention(q [B,S,H*hd], k [B,T,H*hd], v [B,T,H*hd])
 *     = reshape(transpose(softmax(scale * qh khᵀ, causal) vh), [B,S,H*hd])
 *   with xh = transpose(reshape(x, [B,*,H,hd]), [0,2,1,3]).
 *
 * With G < H key/value heads (grouped-query attention) k and v are [B,T,G*hd] and the
 * grp = H/G query heads of a group are one GEMM's rows (decompose_attention); a window
 * goes to the softmax's mask.
 *
 * Reshapes and transposes are views when lowered, so this costs no copies where the
 * GEMMs can read strided operands. */
#include <math.h>
#include "passes/passes.h"

typedef struct Ctx {
  Graph *g;
  const Node *at;
} Ctx;

static Node *mk(Ctx *c, OpKind op, Node **in, int nin) {
  Node *n = graph_add(c->g, op, in, nin, c->at->loc);
  n->layer = c->at->layer;
  return n;
}

static Node *ints_op(Ctx *c, OpKind op, Node *x, const char *attr, const int64_t *v, int nv) {
  Node *n = mk(c, op, &x, 1);
  AttrVal *a = &n->attr[op_attr_index(op, attr)];
  a->set = true;
  a->n = nv;
  for (int i = 0; i < nv; i++) a->v[i] = v[i];
  node_infer(n);
  return n;
}

/* [B, L, H*hd] -> [B, H, L, hd] */
static Node *split_heads(Ctx *c, Node *x, int64_t heads) {
  const Shape *s = &x->shape;
  int64_t shape[4] = {s->d[0], s->d[1], heads, s->d[2] / heads}, perm[4] = {0, 2, 1, 3};
  return ints_op(c, OP_TRANSPOSE, ints_op(c, OP_RESHAPE, x, "shape", shape, 4), "perm", perm, 4);
}

/* x viewed as shape [n dims] */
static Node *view(Ctx *c, Node *x, const int64_t *shape, int n) { return ints_op(c, OP_RESHAPE, x, "shape", shape, n); }

/* With G < H key/value heads, the query heads of a group stacked as rows: q as
 * [B, G, grp*S, hd] against k and v [B, G, T, hd], the scores viewed [B, G, grp, S, T]
 * for the (causal) softmax, whose rows are then the queries again. */
static Node *decompose_attention(Ctx *c, Node **in) {
  const Node *at = c->at;
  int64_t heads = attr_int(at, "heads"), kv = attn_kv_heads(at), grp = heads / kv, hd = in[0]->shape.d[2] / heads;
  int64_t B = in[0]->shape.d[0], S = in[0]->shape.d[1], T = in[1]->shape.d[1];
  const AttrVal *sc = attr_get(at, "scale");
  double scale = sc->set ? sc->f : 1.0 / sqrt((double)hd);
  Node *q = split_heads(c, in[0], heads), *k = split_heads(c, in[1], kv), *v = split_heads(c, in[2], kv);
  if (grp > 1) q = view(c, q, (int64_t[]){B, kv, grp * S, hd}, 4);
  Node *qk[2] = {q, k};
  Node *s = mk(c, OP_MATMUL, qk, 2);
  s->attr[op_attr_index(OP_MATMUL, "transpose_b")].i = 1;
  node_infer(s);
  if (grp > 1) s = view(c, s, (int64_t[]){B, kv, grp, S, T}, 5);
  Node *cs = mk(c, OP_CONST, NULL, 0);
  cs->attr[0] = (AttrVal){.set = true, .f = scale};
  cs->dtype = s->dtype;
  node_infer(cs);
  Node *ss[2] = {s, cs};
  Node *scaled = mk(c, OP_MUL, ss, 2);
  node_infer(scaled);
  Node *p = mk(c, OP_SOFTMAX, &scaled, 1);
  p->attr[op_attr_index(OP_SOFTMAX, "causal")].i = attr_int(at, "causal");
  if (attn_window(at)) p->attr[op_attr_index(OP_SOFTMAX, "window")] = (AttrVal){.set = true, .i = attn_window(at)};
  node_infer(p);
  if (grp > 1) p = view(c, p, (int64_t[]){B, kv, grp * S, T}, 4);
  Node *pv[2] = {p, v};
  Node *o = mk(c, OP_MATMUL, pv, 2);
  node_infer(o);
  if (grp > 1) o = view(c, o, (int64_t[]){B, heads, S, hd}, 4);
  int64_t perm[4] = {0, 2, 1, 3}, shape[3] = {at->shape.d[0], at->shape.d[1], at->shape.d[2]};
  return ints_op(c, OP_RESHAPE, ints_op(c, OP_TRANSPOSE, o, "perm", perm, 4), "shape", shape, 3);
}

static Node *fuse_attention(Ctx *c, Node **in) {
  Node *f = graph_clone_node(c->g, c->at, in);
  f->op = OP_FLASH_ATTENTION;
  node_infer(f);
  Node *o = mk(c, OP_SLICE, &f, 1);
  o->attr[op_attr_index(OP_SLICE, "axis")] = (AttrVal){.set = true, .i = 2};
  o->attr[op_attr_index(OP_SLICE, "start")] = (AttrVal){.set = true, .i = 0};
  o->attr[op_attr_index(OP_SLICE, "end")] = (AttrVal){.set = true, .i = c->at->shape.d[2]};
  node_infer(o);
  return o;
}

/* cross_entropy(matmul(x, w [2-D], transpose_b), targets), the matmul read by nothing
 * else: classifier_ce, whose chunks of rows have about x's element count of logits
 * (Liger Kernel's rule: rows / ceil(V / d), rounded up to a power of two). */
static Node *fuse_classifier(Ctx *c, const Node *ce, const Node *mm, Node **map) {
  Node *in[3] = {map[mm->in[0]->id], map[mm->in[1]->id], map[ce->in[1]->id]};
  Node *f = mk(c, OP_CLASSIFIER_CE, in, 3);
  bool tb = attr_int(mm, "transpose_b");
  int64_t V = mm->in[1]->shape.d[tb ? 0 : 1], d = mm->in[1]->shape.d[tb ? 1 : 0];
  int64_t rows = shape_numel(&ce->in[1]->shape), want = (rows + (V + d - 1) / d - 1) / ((V + d - 1) / d), chunk = 1;
  while (chunk < want && chunk < rows) chunk *= 2;
  f->attr[op_attr_index(OP_CLASSIFIER_CE, "transpose_b")] = (AttrVal){.set = true, .i = tb};
  f->attr[op_attr_index(OP_CLASSIFIER_CE, "ignore_index")] = (AttrVal){.set = true, .i = attr_int(ce, "ignore_index")};
  f->attr[op_attr_index(OP_CLASSIFIER_CE, "chunk")] = (AttrVal){.set = true, .i = chunk < rows ? chunk : rows};
  node_infer(f);
  return f;
}

/* The matmul a cross_entropy n reads that classifier_ce can take in: read by n alone,
 * not a value other chunks read, on a 2-D weight; NULL otherwise. */
static const Node *classifier_of(const Graph *g, const Node *n, const int *uses) {
  const Node *m = n->op == OP_CROSS_ENTROPY ? n->in[0] : NULL;
  if (!m || m->op != OP_MATMUL || uses[m->id] != 1 || attr_int(m, "transpose_a") || m->in[1]->shape.ndim != 2)
    return NULL;
  for (int k = 0; k < g->nouts; k++)
    if (g->outs[k] == m) return NULL;
  for (int k = 0; k < g->nseeds; k++)
    if (g->seed_out[k] == m) return NULL;
  return m;
}

Graph *pass_decompose(Graph *g, unsigned fuse) {
  Graph *h = graph_new_like(g);
  Node **map = arena_array(g->arena, g->n, sizeof *map);
  Node **in = arena_array(g->arena, 64, sizeof *in);
  int *uses = arena_array(g->arena, g->n, sizeof *uses);
  for (int i = 0; i < g->n; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++) uses[g->nodes[i]->in[k]->id]++;
  for (int k = 0; k < g->nwrt; k++) uses[g->wrt[k]->id]++; /* the activations other chunks differentiate */
  /* the matmul each fused cross_entropy takes in (cls), and those matmuls (taken) */
  const Node **cls = arena_array(g->arena, g->n, sizeof *cls);
  bool *taken = arena_array(g->arena, g->n, sizeof *taken);
  for (int i = 0; i < g->n && fuse & FUSE_CLASSIFIER; i++)
    if ((cls[i] = classifier_of(g, g->nodes[i], uses))) taken[cls[i]->id] = true;
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    if (taken[i]) continue;
    ir_assert(n->nin <= 64);
    for (int k = 0; k < n->nin; k++) in[k] = map[n->in[k]->id];
    Ctx c = {h, n};
    if (cls[i]) map[i] = fuse_classifier(&c, n, cls[i], map);
    else if (n->op != OP_ATTENTION) map[i] = graph_clone_node(h, n, in);
    else map[i] = fuse & FUSE_ATTENTION ? fuse_attention(&c, in) : decompose_attention(&c, in);
  }
  if (g->loss) h->loss = map[g->loss->id];
  h->nseeds = g->nseeds, h->nwrt = g->nwrt;
  h->seed_out = arena_array(g->arena, g->nseeds + 1, sizeof(Node *));
  h->seed_grad = arena_array(g->arena, g->nseeds + 1, sizeof(Node *));
  h->wrt = arena_array(g->arena, g->nwrt + 1, sizeof(Node *));
  for (int k = 0; k < g->nseeds; k++)
    h->seed_out[k] = map[g->seed_out[k]->id], h->seed_grad[k] = map[g->seed_grad[k]->id];
  for (int k = 0; k < g->nwrt; k++) h->wrt[k] = map[g->wrt[k]->id];
  h->nouts = g->nouts;
  h->outs = arena_array(g->arena, g->nouts + 1, sizeof(Node *));
  for (int k = 0; k < g->nouts; k++) h->outs[k] = map[g->outs[k]->id];
  return h;
}
