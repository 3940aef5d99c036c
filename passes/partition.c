/* The partition pass (passes/partition.h). */
#include "passes/partition.h"
#include <stdio.h>
#include <string.h>
#include "passes/passes.h"

typedef struct Part {
  const Graph *g;
  int t, nchunks;
  const Strat *const *st; /* [g->n] NULL for sources */
  uint8_t *pl;            /* [g->n] placement of each value as produced (parameters: as stored) */
  int64_t *bsz;           /* [g->n] block size along the split dimension (S placements) */
  bool *single;           /* [g->n] the split dimension must be one block */
  int *chunk_of;          /* [g->n] chunk of each computed node */
} Part;

static int sdim(int pl) { return pl >= PL_S0 ? pl - PL_S0 : -1; }
static bool is_source(const Node *n) { return op_info(n->op)->cls == CLS_SOURCE; }
static int norm_axis(int64_t a, int nd) { return (int)(a < 0 ? a + nd : a); }
static int64_t gcd(int64_t a, int64_t b) {
  while (b) {
    int64_t r = a % b;
    a = b, b = r;
  }
  return a;
}

static Shape local_shape(const Part *P, const Node *n, int pl) {
  Shape s = n->shape;
  if (sdim(pl) >= 0) s.d[sdim(pl)] /= P->t;
  return s;
}

/* ---- placements and block sizes ------------------------------------------------- */

static void place(Part *P) {
  const Graph *g = P->g;
  bool *conflict = arena_array(g->arena, g->n, sizeof *conflict);
  bool *seen = arena_array(g->arena, g->n, sizeof *seen);
  for (int i = 0; i < g->n; i++) {
    const Node *c = g->nodes[i];
    if (is_source(c)) continue;
    P->pl[i] = P->st[i]->out;
    for (int k = 0; k < c->nin; k++) {
      const Node *in = c->in[k];
      if (in->op != OP_PARAM) continue;
      int req = P->st[i]->in[k];
      if (seen[in->id] && P->pl[in->id] != req) conflict[in->id] = true;
      P->pl[in->id] = (uint8_t)req, seen[in->id] = true;
    }
  }
  for (int i = 0; i < g->n; i++)
    if (conflict[i] || (is_source(g->nodes[i]) && g->nodes[i]->op != OP_PARAM)) P->pl[i] = PL_R;
}

static bool direct(const Part *P, const Node *c, int k) {
  int req = P->st[c->id]->in[k];
  return req >= PL_S0 && req == P->pl[c->in[k]->id];
}

static bool meet(int64_t *a, int64_t *b, int64_t extra) {
  int64_t m = gcd(gcd(*a, *b), extra);
  bool changed = m != *a || m != *b;
  *a = *b = m;
  return changed;
}

/* The block sizes: a fixed point of the constraints each op puts between its split
 * output and its split inputs (equal blocks where dimensions correspond, a slice's
 * bounds on its input's blocks), starting from one block a tensor. */
static void block_sizes(Part *P) {
  const Graph *g = P->g;
  for (int i = 0; i < g->n; i++) {
    int d = sdim(P->pl[i]);
    P->bsz[i] = d >= 0 ? g->nodes[i]->shape.d[d] : 0;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < g->n; i++) {
      const Node *c = g->nodes[i];
      if (is_source(c)) continue;
      int od = sdim(P->st[i]->out), first = -1;
      for (int k = 0; k < c->nin; k++) {
        if (!direct(P, c, k)) continue;
        const Node *in = c->in[k];
        int d = sdim(P->pl[in->id]);
        if (c->op == OP_SLICE && od == d && norm_axis(attr_int(c, "axis"), c->shape.ndim) == d)
          changed |= meet(&P->bsz[in->id], &P->bsz[i], attr_int(c, "start"));
        else if (od >= 0 && in->shape.d[d] == c->shape.d[od]) changed |= meet(&P->bsz[in->id], &P->bsz[i], 0);
        else if (od < 0 && first < 0) first = k;
        else if (od < 0 && in->shape.d[d] == c->in[first]->shape.d[sdim(P->pl[c->in[first]->id])])
          changed |= meet(&P->bsz[in->id], &P->bsz[c->in[first]->id], 0);
        else P->single[in->id] = P->single[i] = true;
      }
    }
  }
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    int d = sdim(P->pl[i]);
    if (d < 0) continue;
    if (P->single[i] && P->bsz[i] != n->shape.d[d])
      error_at(n->loc,
               "tensor parallelism: %s would need dimension %d in blocks of %lld, which an op that reads "
               "it cannot carry",
               op_info(n->op)->name, d, (long long)P->bsz[i]);
    if ((n->op == OP_ATTENTION || n->op == OP_ROTARY) && d == n->shape.ndim - 1) {
      int64_t hd = n->shape.d[d] / attr_int(n, "heads");
      if ((P->bsz[i] / P->t) % hd)
        error_at(n->loc, "tensor parallelism: %s heads of %lld do not split into %d ranks in blocks of %lld",
                 op_info(n->op)->name, (long long)hd, P->t, (long long)P->bsz[i]);
    }
  }
}

/* The block size consumer c wants for its input k, placed req but resharded. */
static int64_t want_bsz(const Part *P, const Node *c, int k, int req) {
  int d = sdim(req), od = sdim(P->st[c->id]->out);
  int64_t full = c->in[k]->shape.d[d];
  if (c->op == OP_SLICE && od == d && norm_axis(attr_int(c, "axis"), c->shape.ndim) == d)
    return gcd(gcd(P->bsz[c->id], attr_int(c, "start")), full);
  if (od >= 0 && full == c->shape.d[od]) return P->bsz[c->id];
  for (int j = 0; od < 0 && j < c->nin; j++)
    if (j != k && direct(P, c, j) && c->in[j]->shape.d[sdim(P->pl[c->in[j]->id])] == full) return P->bsz[c->in[j]->id];
  return full;
}

/* ---- chunks ------------------------------------------------------------------------- */

static void assign_chunks(Part *P, const PlanResult *r, const Plan *plan) {
  const PlanModel *pm = r->pm;
  const Graph *g = P->g;
  for (int i = 0; i < g->n; i++) P->chunk_of[i] = -1;
  for (int s = 0; s < pm->nseg; s++) {
    const Segment *seg = &pm->seg[s];
    int k = seg->kind == SEG_BEFORE ? 0 : P->nchunks - 1;
    if (seg->kind == SEG_LAYER)
      for (int c = 0; c < plan->nchunks; c++)
        if (s - pm->first_layer_seg >= plan->chunk_lo[c] && s - pm->first_layer_seg < plan->chunk_hi[c]) k = c;
    for (int j = 0; j < seg->nops; j++) P->chunk_of[seg->ops[j]] = k;
  }
  for (int i = 0, last = 0; i < g->n; i++) {
    if (is_source(g->nodes[i])) continue;
    if (P->chunk_of[i] < 0) P->chunk_of[i] = last;
    if (P->chunk_of[i] < last) diag_internal(__FILE__, __LINE__, "pipeline chunks out of graph order");
    last = P->chunk_of[i];
  }
}

/* ---- building one chunk's local graph ----------------------------------------------- */

typedef struct Cached {
  int node, pl;
  int64_t bsz;
  Node *v;
} Cached;

typedef struct CB {
  Part *P;
  int k;
  Graph *h;
  Node **val; /* [g->n] each global value as produced, in this chunk */
  Cached *rc; /* resharded values */
  int nrc, caprc;
  Node **copy_of, **copy; /* tp_copy of a local value */
  int ncopy, capcopy;
  const Node *at; /* the global node being rebuilt */
} CB;

typedef struct Build {
  Part *P;
  CB *cb; /* [nchunks] */
  Boundary *bound;
  int nbound, capbound;
} Build;

static void *grow(Arena *a, void *v, int n, int *cap, size_t size) {
  if (n < *cap) return v;
  int nc = *cap ? 2 * *cap : 16;
  void *w = arena_array(a, nc, size);
  if (n) memcpy(w, v, (size_t)n * size);
  *cap = nc;
  return w;
}

static Node *add_node(CB *cb, OpKind op, Node *x) {
  Node *n = graph_add(cb->h, op, x ? &x : NULL, x ? 1 : 0, cb->at->loc);
  n->layer = cb->at->layer;
  return n;
}

static void seti(Node *n, const char *name, int64_t v) {
  AttrVal *a = &n->attr[op_attr_index(n->op, name)];
  a->i = v, a->set = true;
}

static Node *comm(CB *cb, OpKind op, Node *x, int axis, int64_t blocks) {
  Node *n = add_node(cb, op, x);
  seti(n, "ranks", cb->P->t);
  if (axis >= 0) seti(n, "axis", axis), seti(n, "blocks", blocks);
  node_infer(n);
  return n;
}

static Node *new_input(Graph *h, const Node *like, const Shape *s, const char *name) {
  Node *n = graph_add(h, OP_INPUT, NULL, 0, like->loc);
  n->name = name;
  n->shape = *s;
  n->dtype = DT_F32;
  n->layer = like->layer;
  return n;
}

static void push(Arena *a, Node ***v, int *n, Node *x) {
  Node **w = arena_array(a, *n + 1, sizeof *w);
  if (*n) memcpy(w, *v, *n * sizeof *w);
  w[(*n)++] = x;
  *v = w;
}

/* Global value `in` in chunk k, as its producer placed it: a source is cloned, a value
 * of an earlier chunk is received. */
static Node *value(Build *B, CB *cb, const Node *in) {
  Part *P = B->P;
  if (cb->val[in->id]) return cb->val[in->id];
  Arena *a = cb->h->arena;
  Node *v;
  if (is_source(in)) {
    v = graph_clone_node(cb->h, in, NULL);
    v->shape = local_shape(P, in, P->pl[in->id]);
    int d = sdim(P->pl[in->id]);
    v->split = d + 1;
    v->split_blocks = d >= 0 ? (int32_t)(in->shape.d[d] / P->bsz[in->id]) : 0;
  } else {
    int from = P->chunk_of[in->id];
    ir_assert(from >= 0 && from < cb->k);
    Node *src = B->cb[from].val[in->id];
    if (src->dtype != DT_F32)
      error_at(in->loc, "pipeline parallelism: %s (%s) crosses a stage boundary; only f32 values can",
               op_info(in->op)->name, dtype_name(in->dtype));
    Shape s = local_shape(P, in, P->pl[in->id]);
    v = new_input(cb->h, in, &s, arena_printf(a, "pipe.act.%d.%d", in->id, cb->k));
    Graph *pg = B->cb[from].h;
    push(a, &pg->outs, &pg->nouts, src);
    push(a, &cb->h->wrt, &cb->h->nwrt, v);
    B->bound = grow(a, B->bound, B->nbound, &B->capbound, sizeof *B->bound);
    B->bound[B->nbound++] = (Boundary){from, cb->k, pg->nouts - 1, cb->h->nwrt - 1, -1, shape_numel(&s)};
  }
  return cb->val[in->id] = v;
}

/* A reshape or transpose of x (x itself when it would change nothing). */
static Node *ints_node(CB *cb, OpKind op, Node *x, const char *name, const int64_t *v, int n) {
  bool same = n == x->shape.ndim;
  for (int i = 0; i < n && same; i++) same = v[i] == (op == OP_TRANSPOSE ? i : x->shape.d[i]);
  if (same) return x;
  Node *y = add_node(cb, op, x);
  AttrVal *a = &y->attr[op_attr_index(op, name)];
  a->set = true, a->n = n;
  memcpy(a->v, v, (size_t)n * sizeof *v);
  node_infer(y);
  return y;
}

/* S(fd) -> S(td) over the T ranks (DeepSpeed-Ulysses's exchange): one all_to_all between
 * views. A rank's part v (fd its part, in fb blocks; td whole, in tb blocks) is cut
 * along td into T pieces, the t-th part of every td block going to rank t; what rank q
 * sends lands q-th in each fd block. NULL when the views need more dimensions than a
 * tensor may have. */
static Node *exchange(CB *cb, Node *v, int fd, int64_t fb, int td, int64_t tb) {
  int64_t T = cb->P->t, e[MAX_DIMS], perm[MAX_DIMS], whole[MAX_DIMS];
  const Shape *s = &v->shape;
  int n = s->ndim, ne = 0, at_t = -1, at_f = -1, k = 0;
  if (n + (tb > 1) + (fb > 1) + 1 > MAX_DIMS) return NULL;
  for (int d = 0; d < n; d++) { /* td as [tb, T, part], fd as [fb, part] (no blocks: no tb, fb) */
    if (d == td) {
      if (tb > 1) e[ne++] = tb;
      at_t = ne, e[ne++] = T, e[ne++] = s->d[d] / (tb * T);
    } else if (d == fd) {
      if (fb > 1) e[ne++] = fb;
      at_f = ne, e[ne++] = s->d[d] / fb;
    } else e[ne++] = s->d[d];
    whole[d] = d == fd ? s->d[d] * T : d == td ? s->d[d] / T : s->d[d];
  }
  perm[k++] = at_t; /* the pieces for each rank outermost */
  for (int i = 0; i < ne; i++)
    if (i != at_t) perm[k++] = i;
  Node *x = ints_node(cb, OP_TRANSPOSE, ints_node(cb, OP_RESHAPE, v, "shape", e, ne), "perm", perm, ne);
  x = comm(cb, OP_ALL_TO_ALL, x, -1, 0);
  k = 0; /* [q, the rest]: q back before the part of each fd block */
  for (int i = 0; i < ne; i++) {
    if (i == at_t) continue;
    if (i == at_f) perm[k++] = 0;
    perm[k++] = 1 + (i < at_t ? i : i - 1);
  }
  return ints_node(cb, OP_RESHAPE, ints_node(cb, OP_TRANSPOSE, x, "perm", perm, ne), "shape", whole, n);
}

static Node *reshard(CB *cb, const Node *in, Node *v, int req, int64_t want) {
  Part *P = cb->P;
  int from = P->pl[in->id];
  for (int i = 0; i < cb->nrc; i++)
    if (cb->rc[i].node == in->id && cb->rc[i].pl == req && cb->rc[i].bsz == want) return cb->rc[i].v;
  int fd = sdim(from), td = sdim(req);
  if (req == PL_P) diag_internal(__FILE__, __LINE__, "partition: nothing makes a partial sum");
  Node *out;
  if (from == PL_P)
    out = td < 0 ? comm(cb, OP_ALL_REDUCE, v, -1, 0) : comm(cb, OP_REDUCE_SCATTER, v, td, in->shape.d[td] / want);
  else if (fd >= 0 && td >= 0 && fd != td &&
           (out = exchange(cb, v, fd, in->shape.d[fd] / P->bsz[in->id], td, in->shape.d[td] / want)))
    ;
  else {
    out = v;
    if (fd >= 0) out = comm(cb, OP_ALL_GATHER, out, fd, in->shape.d[fd] / P->bsz[in->id]);
    if (td >= 0) out = comm(cb, OP_SPLIT, out, td, in->shape.d[td] / want);
  }
  cb->rc = grow(cb->h->arena, cb->rc, cb->nrc, &cb->caprc, sizeof *cb->rc);
  cb->rc[cb->nrc++] = (Cached){in->id, req, want, out};
  return out;
}

static Node *tp_copy(CB *cb, Node *v) {
  for (int i = 0; i < cb->ncopy; i++)
    if (cb->copy_of[i] == v) return cb->copy[i];
  Arena *a = cb->h->arena;
  int cap = cb->capcopy;
  cb->copy_of = grow(a, cb->copy_of, cb->ncopy, &cap, sizeof *cb->copy_of);
  cb->copy = grow(a, cb->copy, cb->ncopy, &cb->capcopy, sizeof *cb->copy);
  cb->copy_of[cb->ncopy] = v;
  return cb->copy[cb->ncopy++] = comm(cb, OP_TP_COPY, v, -1, 0);
}

static Node *binary(CB *cb, OpKind op, Node *x, Node *y) {
  Node *n = graph_add(cb->h, op, (Node *[]){x, y}, 2, cb->at->loc);
  n->layer = cb->at->layer;
  node_infer(n);
  return n;
}

static Node *scalar(CB *cb, double v) {
  Node *n = add_node(cb, OP_CONST, NULL);
  n->attr[op_attr_index(OP_CONST, "value")] = (AttrVal){.set = true, .f = v};
  n->dtype = DT_F32;
  node_infer(n);
  return n;
}

/* A loss whose rows the ranks split (cross_entropy, strategy "rows": its output a partial
 * sum): each rank's mean over its own counted targets, ce, times its share of the whole
 * count, count_r / max(count, 1) with count the sum of the ranks' ce_counts, so that the
 * parts add up to the mean over the whole batch's counted targets, ignored ones and a
 * rank with none included. */
static Node *loss_share(CB *cb, Node *ce) {
  Node *mine = add_node(cb, OP_CE_COUNT, ce->in[1]);
  seti(mine, "ignore_index", attr_int(ce, "ignore_index"));
  node_infer(mine);
  Node *all = comm(cb, OP_ALL_REDUCE, mine, -1, 0);
  Node *one = scalar(cb, 1);
  Node *excess = add_node(cb, OP_RELU, binary(cb, OP_SUB, all, one));
  node_infer(excess);
  Node *at_least_one = binary(cb, OP_ADD, excess, one);
  return binary(cb, OP_MUL, ce, binary(cb, OP_DIV, mine, at_least_one));
}

/* Consumer c's input k, placed as c's strategy wants it. */
static Node *input_of(Build *B, CB *cb, const Node *c, int k) {
  Part *P = B->P;
  const Strat *s = P->st[c->id];
  const Node *in = c->in[k];
  Node *v = value(B, cb, in);
  int req = s->in[k];
  if (P->pl[in->id] != req) v = reshard(cb, in, v, req, sdim(req) >= 0 ? want_bsz(P, c, k, req) : 0);
  if (req == PL_R && dtype_is_float(v->dtype) && shard_grad_placement(c, s, k) == PL_P) v = tp_copy(cb, v);
  return v;
}

static void set_ints(Node *n, const char *name, const Shape *s) {
  AttrVal *a = &n->attr[op_attr_index(n->op, name)];
  a->set = true, a->n = s->ndim;
  for (int i = 0; i < s->ndim; i++) a->v[i] = s->d[i];
}

/* Input x [..., G*hd] of an op that regroups it (Strat.regroup): `repeat` copies of
 * each of its G heads side by side, [..., G*repeat*hd], then the rank's block of them:
 * the head the rank's query heads share. Its gradient comes back whole through the
 * split's all-gather and the broadcast's sum. */
static Node *regroup(CB *cb, Node *x, int64_t heads, int repeat) {
  int nd = x->shape.ndim;
  int64_t e[MAX_DIMS], hd = x->shape.d[nd - 1] / heads;
  if (nd + 2 > MAX_DIMS) diag_internal(__FILE__, __LINE__, "partition: regrouped heads need too many dimensions");
  memcpy(e, x->shape.d, (size_t)(nd - 1) * sizeof *e);
  e[nd - 1] = heads, e[nd] = 1, e[nd + 1] = hd;
  Node *v = ints_node(cb, OP_RESHAPE, x, "shape", e, nd + 2);
  e[nd] = repeat;
  v = ints_node(cb, OP_BROADCAST, v, "shape", e, nd + 2);
  e[nd - 1] = heads * repeat * hd;
  return comm(cb, OP_SPLIT, ints_node(cb, OP_RESHAPE, v, "shape", e, nd), nd - 1, 1);
}

/* Global node c rebuilt in chunk k on its local inputs, its size attributes local. */
static void rebuild(Build *B, CB *cb, const Node *c) {
  Part *P = B->P;
  const Strat *s = P->st[c->id];
  cb->at = c;
  Node *in[64];
  ir_assert(c->nin <= 64);
  for (int k = 0; k < c->nin; k++) in[k] = input_of(B, cb, c, k);
  for (int k = 0; k < c->nin; k++)
    if (s->regroup >> k & 1) in[k] = regroup(cb, in[k], attn_kv_heads(c), s->repeat);
  Node *x = graph_clone_node(cb->h, c, in);
  Shape want = local_shape(P, c, s->out);
  int od = sdim(s->out);
  if (c->op == OP_RESHAPE || c->op == OP_BROADCAST) set_ints(x, "shape", &want);
  if (c->op == OP_SLICE && sdim(s->in[0]) == norm_axis(attr_int(c, "axis"), c->shape.ndim)) {
    seti(x, "start", attr_int(c, "start") / P->t);
    seti(x, "end", attr_int(c, "end") / P->t);
  }
  if ((c->op == OP_ATTENTION || c->op == OP_ROTARY) && od == c->shape.ndim - 1) {
    seti(x, "heads", attr_int(c, "heads") / P->t);
    if (c->op == OP_ATTENTION && attr_get(c, "kv_heads")->set)
      seti(x, "kv_heads", s->regroup ? 1 : attn_kv_heads(c) / P->t);
  }
  node_infer(x);
  if (c->op == OP_CROSS_ENTROPY && s->out == PL_P) x = loss_share(cb, x);
  if (!shape_eq(&x->shape, &want)) {
    char a[96], b[96];
    shape_format(a, sizeof a, &x->shape);
    shape_format(b, sizeof b, &want);
    diag_internal(__FILE__, __LINE__,
                  arena_printf(cb->h->arena, "partition: local %s is %s, not %s", op_info(c->op)->name, a, b));
  }
  cb->val[c->id] = x;
}

/* ---- the pass -------------------------------------------------------------------------- */

static Node *seed_input(Graph *h, const Node *o, int b) {
  return new_input(h, o, &o->shape, arena_printf(h->arena, "pipe.grad.%d", b));
}

/* The one-rank plan: the graph is the one chunk. */
static Partition *whole(Graph *g) {
  Partition *out = arena_alloc(g->arena, sizeof *out);
  *out = (Partition){.tp = 1, .pp = 1, .v = 1, .nchunks = 1, .chunk = arena_array(g->arena, 1, sizeof(Graph *))};
  out->chunk[0] = g;
  return out;
}

Partition *pass_partition(Graph *g, const PlanResult *r, const Plan *plan) {
  if (!plan || (plan->ch.tp == 1 && plan->ch.pp == 1)) return whole(g);
  Arena *a = g->arena;
  const Graph *pg = r->pm->g;
  if (pg->n != g->n) diag_internal(__FILE__, __LINE__, "partition: the compiled graph differs from the planned one");
  for (int i = 0; i < g->n; i++)
    if (pg->nodes[i]->op != g->nodes[i]->op)
      diag_internal(__FILE__, __LINE__, "partition: the compiled graph differs from the planned one");
  Part P = {.g = g, .t = plan->ch.tp, .nchunks = plan->nchunks, .st = (const Strat *const *)plan->sc->st};
  P.pl = arena_array(a, g->n, sizeof *P.pl);
  P.bsz = arena_array(a, g->n, sizeof *P.bsz);
  P.single = arena_array(a, g->n, sizeof *P.single);
  P.chunk_of = arena_array(a, g->n, sizeof *P.chunk_of);
  place(&P);
  block_sizes(&P);
  assign_chunks(&P, r, plan);

  Build B = {.P = &P, .cb = arena_array(a, P.nchunks, sizeof(CB))};
  for (int k = 0; k < P.nchunks; k++) {
    CB *cb = &B.cb[k];
    *cb = (CB){.P = &P, .k = k, .h = graph_new_like(g), .val = arena_array(a, g->n, sizeof(Node *))};
    for (int i = 0; i < g->n; i++)
      if (!is_source(g->nodes[i]) && P.chunk_of[i] == k) rebuild(&B, cb, g->nodes[i]);
    if (g->loss && P.chunk_of[g->loss->id] == k) { /* whole on every rank: a partial sum is summed */
      cb->at = g->loss;
      Node *loss = cb->val[g->loss->id];
      cb->h->loss = P.pl[g->loss->id] == PL_P ? comm(cb, OP_ALL_REDUCE, loss, -1, 0) : loss;
    }
  }

  Partition *out = arena_alloc(a, sizeof *out);
  *out = (Partition){.tp = plan->ch.tp,
                     .pp = plan->ch.pp,
                     .v = plan->ch.v,
                     .nchunks = P.nchunks,
                     .chunk = arena_array(a, P.nchunks, sizeof(Graph *)),
                     .nbound = B.nbound,
                     .bound = B.bound};
  for (int k = 0; k < P.nchunks; k++) ir_verify(out->chunk[k] = B.cb[k].h);
  return out;
}

void partition_autodiff(Partition *out) {
  Arena *a = out->chunk[0]->arena;
  for (int k = out->nchunks - 1; k >= 0; k--) {
    Graph *h = out->chunk[k];
    for (int b = 0; b < out->nbound; b++) {
      Boundary *bd = &out->bound[b];
      if (bd->from != k || !out->chunk[bd->to]->wrt_grads[bd->wrt]) continue;
      Node *o = h->outs[bd->out];
      push(a, &h->seed_out, &h->nseeds, o);
      int ns = h->nseeds - 1;
      push(a, &h->seed_grad, &ns, seed_input(h, o, b));
      bd->seed = h->nseeds - 1;
    }
    if (!h->loss && !h->nseeds)
      error_plain("pipeline chunk %d of %d: no gradient reaches it from the loss", k, out->nchunks);
    pass_autodiff(h);
    ir_verify(h);
  }
}
