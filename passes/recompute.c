/* Activation recompute: the pass that clones what a layer's backward reads, and the
 * dynamic program that chooses which layers to recompute (passes/recompute.h). */
#include "passes/recompute.h"
#include <stdlib.h>
#include <string.h>
#include "ir/analysis.h"
#include "ir/diag.h"

const char *const rc_layer_names[RCL_COUNT] = {"keep", "attention core", "full"};

static bool computed(const Node *n) { return op_info(n->op)->cls != CLS_SOURCE; }
static bool is_view(const Node *n) {
  return n->op == OP_RESHAPE || n->op == OP_TRANSPOSE || n->op == OP_SLICE || n->op == OP_BROADCAST;
}
static double bytes_of(const Node *n) { return (double)shape_numel(&n->shape) * (dtype_size_bits(n->dtype) / 8); }

/* ---- what a mode recomputes --------------------------------------------------------- */

/* A gathered activation: an all_gather over the tensor-parallel group, or a copy,
 * view or cast of one (mixed precision gathers in f32 and casts for the GEMMs). */
static bool gathered(const Node *n) {
  while (n->op == OP_TP_COPY || n->op == OP_CAST || is_view(n)) n = n->in[0];
  return n->op == OP_ALL_GATHER;
}

/* A copy of a parameter: its 16-bit copy (autocast's cast of a GEMM's weight), its
 * views, its tensor-parallel copy or part (tp_copy, split), whatever combination. */
static bool param_copy(const Node *n) {
  while (is_view(n) || n->op == OP_CAST || n->op == OP_TP_COPY || n->op == OP_SPLIT) n = n->in[0];
  return n->op == OP_PARAM;
}

/* cand[i]: forward node i may be recomputed under its layer's mode. Every mode
 * gathers a sharded activation again for the backward pass rather than keep it whole
 * (Megatron-LM's sequence parallelism does; the plan prices it so, plan/shard.c):
 * the shard stays, a tensor-parallel group's size times smaller. And every mode casts
 * a layer's weights to 16 bits again for its backward rather than keep the copies
 * from the forward pass: a pass over the weights, where keeping them would hold a
 * 16-bit copy of every layer's weights at the start of the backward pass. */
static void mark_candidates(const Graph *g, const RcLayer *mode, bool *cand) {
  for (int i = 0; i < g->n_forward; i++) {
    const Node *n = g->nodes[i];
    if (computed(n) && param_copy(n)) cand[i] = true; /* in any layer, or none (the classifier's) */
    if (n->layer < 0 || !computed(n)) continue;
    if (mode[n->layer] == RCL_FULL || gathered(n)) cand[i] = true;
    const Node *core[8];
    int k = mode[n->layer] == RCL_ATTN ? ir_attn_core(n, core) : 0;
    for (int c = 0; c < k; c++)
      if (core[c]->layer == n->layer) cand[core[c]->id] = true;
  }
}

void recompute_mark(const Graph *g, const RcLayer *mode, bool *rc) {
  int nf = g->n_forward;
  bool *cand = calloc(nf ? nf : 1, sizeof *cand);
  if (!cand) error_plain("out of memory");
  memset(rc, 0, nf * sizeof *rc);
  mark_candidates(g, mode, cand);
  for (int i = nf; i < g->n; i++) { /* what the layer's own backward reads */
    const Node *b = g->nodes[i];
    for (int k = 0; k < b->nin; k++) {
      const Node *y = b->in[k];
      if (y->id < nf && cand[y->id] && y->layer == b->layer) rc[y->id] = true;
    }
  }
  for (int i = nf - 1; i >= 0; i--) { /* and what that is computed from, inside the layer */
    const Node *x = g->nodes[i];
    if (!rc[i]) continue;
    for (int k = 0; k < x->nin; k++)
      if (cand[x->in[k]->id] && x->in[k]->layer == x->layer) rc[x->in[k]->id] = true;
  }
  free(cand);
}

double recompute_flops(const Graph *g, const RcLayer *mode) {
  bool *rc = arena_array(g->arena, g->n_forward + 1, sizeof *rc);
  recompute_mark(g, mode, rc);
  double f = 0;
  for (int i = 0; i < g->n_forward; i++)
    if (rc[i]) {
      Cost c;
      node_cost(g->nodes[i], &c);
      f += c.fwd_flops;
    }
  return f;
}

/* ---- the pass --------------------------------------------------------------------- */

typedef struct Rebuild {
  const Graph *g;
  Graph *h;
  const bool *rc;
  Node **map;   /* [g->n] old node -> new */
  Node **clone; /* [g->n_forward] old forward node -> its clone */
  Node **in;    /* scratch for inputs */
  int nin_cap;
} Rebuild;

static Node **inputs(Rebuild *r, const Node *n) {
  if (n->nin > r->nin_cap) {
    r->nin_cap = n->nin * 2;
    r->in = arena_array(r->h->arena, r->nin_cap, sizeof *r->in);
  }
  return r->in;
}

/* The recomputed forward values of layer l, in forward order, on kept inputs. */
static void emit_clones(Rebuild *r, int l) {
  for (int i = 0; i < r->g->n_forward; i++) {
    const Node *x = r->g->nodes[i];
    if (!r->rc[i] || x->layer != l) continue;
    Node **in = inputs(r, x);
    for (int k = 0; k < x->nin; k++) {
      const Node *y = x->in[k];
      in[k] = y->id < r->g->n_forward && r->clone[y->id] && y->layer == l ? r->clone[y->id] : r->map[y->id];
    }
    r->clone[i] = graph_clone_node(r->h, x, in);
  }
}

/* The clone of a recomputed value outside the layers (a copy of a parameter,
 * param_copy: a chain of one-input ops from it), made where the backward pass first
 * reads it. */
static Node *clone_outside(Rebuild *r, const Node *y) {
  if (r->clone[y->id]) return r->clone[y->id];
  ir_assert(y->nin == 1);
  const Node *x = y->in[0];
  Node *in = x->id < r->g->n_forward && r->rc[x->id] ? clone_outside(r, x) : r->map[x->id];
  return r->clone[y->id] = graph_clone_node(r->h, y, &in);
}

/* A backward node on the clones of its own layer's values. */
static Node *copy_backward(Rebuild *r, const Node *b) {
  Node **in = inputs(r, b);
  for (int k = 0; k < b->nin; k++) {
    const Node *y = b->in[k];
    bool cl = y->id < r->g->n_forward && r->rc[y->id] && y->layer == b->layer;
    in[k] = !cl ? r->map[y->id] : y->layer < 0 ? clone_outside(r, y) : r->clone[y->id];
  }
  return graph_clone_node(r->h, b, in);
}

static Node **remap(Arena *a, Node **map, Node *const *v, int n) {
  Node **out = arena_array(a, n + 1, sizeof *out);
  for (int i = 0; i < n; i++) out[i] = v[i] ? map[v[i]->id] : NULL;
  return out;
}

static void carry_fields(const Graph *g, Graph *h, Node **map) {
  Arena *a = g->arena;
  h->loss = g->loss ? map[g->loss->id] : NULL;
  h->nparams = g->nparams;
  h->params = remap(a, map, g->params, g->nparams);
  h->param_grads = remap(a, map, g->param_grads, g->nparams);
  h->tp_sums_after_step = g->tp_sums_after_step, h->grad_tp_partial = g->grad_tp_partial; /* by parameter index */
  h->nseeds = g->nseeds;
  h->seed_out = remap(a, map, g->seed_out, g->nseeds);
  h->seed_grad = remap(a, map, g->seed_grad, g->nseeds);
  h->nwrt = g->nwrt;
  h->wrt = remap(a, map, g->wrt, g->nwrt);
  h->wrt_grads = remap(a, map, g->wrt_grads, g->nwrt);
  h->nouts = g->nouts;
  h->outs = remap(a, map, g->outs, g->nouts);
}

Graph *pass_recompute(Graph *g, const RcLayer *mode) {
  ir_assert(g->n_forward > 0);
  Arena *a = g->arena;
  bool *rc = arena_array(a, g->n_forward + 1, sizeof *rc);
  recompute_mark(g, mode, rc);
  bool *marked = arena_array(a, g->nlayers + 1, sizeof *marked), any = false; /* layers with clones */
  for (int i = 0; i < g->n_forward; i++)
    if (rc[i]) {
      any = true;
      if (g->nodes[i]->layer >= 0) marked[g->nodes[i]->layer] = true;
    }
  if (!any) return g;
  Rebuild r = {g,
               graph_new_like(g),
               rc,
               arena_array(a, g->n, sizeof(Node *)),
               arena_array(a, g->n_forward, sizeof(Node *)),
               NULL,
               0};
  bool *emitted = arena_array(a, g->nlayers + 1, sizeof *emitted);
  for (int i = 0; i < g->n_forward; i++) {
    const Node *x = g->nodes[i];
    Node **in = inputs(&r, x);
    for (int k = 0; k < x->nin; k++) in[k] = r.map[x->in[k]->id];
    r.map[i] = graph_clone_node(r.h, x, in);
  }
  r.h->n_forward = g->n_forward;
  for (int i = g->n_forward; i < g->n; i++) {
    const Node *b = g->nodes[i];
    if (b->layer >= 0 && !emitted[b->layer] && marked[b->layer]) {
      emitted[b->layer] = true;
      emit_clones(&r, b->layer);
    }
    r.map[i] = copy_backward(&r, b);
  }
  carry_fields(g, r.h, r.map);
  return r.h;
}

/* ---- the memory model ----------------------------------------------------------------- */

/* The buffer a value lives in: views (reshape, transpose, slice, broadcast) are
 * strides over their source's. */
static const Node *storage(const Node *n) {
  while (is_view(n)) n = n->in[0];
  return n;
}

/* Bytes of layer l that stay alive until its backward, under rc; stamp dedups buffers. */
static double kept_bytes(const Graph *g, int l, const bool *rc, const uint8_t *reads, int *stamp, int tag) {
  double b = 0;
  for (int i = 0; i < g->n_forward; i++) {
    const Node *x = g->nodes[i];
    if (x->layer != l || !computed(x)) continue;
    bool kept = (reads[i] & 2) || ((reads[i] & 1) && !rc[i]);
    const Node *s = storage(x);
    if (!kept || s->layer != l || !computed(s) || stamp[s->id] == tag) continue;
    stamp[s->id] = tag;
    b += bytes_of(s);
  }
  return b;
}

static void layer_costs(const Graph *g, RecomputeStats *st, int l, RcLayer m, const uint8_t *reads, int *stamp,
                        RcLayer *mode) {
  mode[l] = m;
  bool *rc = arena_array(g->arena, g->n_forward + 1, sizeof *rc);
  recompute_mark(g, mode, rc);
  mode[l] = RCL_KEEP;
  st->keep[l][m] = kept_bytes(g, l, rc, reads, stamp, l * RCL_COUNT + m + 1);
  double scratch = 0; /* the largest recomputed value the backward does not read */
  for (int i = 0; i < g->n_forward; i++) {
    if (!rc[i]) continue;
    Cost c;
    node_cost(g->nodes[i], &c);
    st->flops[l][m] += c.fwd_flops;
    if (!is_view(g->nodes[i]) && !(reads[i] & 1) && bytes_of(g->nodes[i]) > scratch) scratch = bytes_of(g->nodes[i]);
  }
  if (m != RCL_KEEP) st->trans[l][m] = st->keep[l][RCL_KEEP] - st->keep[l][m] + scratch;
}

RecomputeStats *recompute_stats(const Graph *g) {
  Arena *a = g->arena;
  int L = g->nlayers, nf = g->n_forward;
  RecomputeStats *st = arena_alloc(a, sizeof *st);
  st->nlayers = L;
  st->has_attn = arena_array(a, L + 1, sizeof *st->has_attn);
  st->keep = arena_array(a, L + 1, sizeof *st->keep);
  st->trans = arena_array(a, L + 1, sizeof *st->trans);
  st->flops = arena_array(a, L + 1, sizeof *st->flops);
  uint8_t *reads = arena_array(a, nf + 1, 1); /* 1: by its layer's backward, 2: by another's */
  for (int i = nf; i < g->n; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++) {
      const Node *y = g->nodes[i]->in[k];
      if (y->id < nf) reads[y->id] |= y->layer == g->nodes[i]->layer ? 1 : 2;
    }
  for (int i = 0; i < nf; i++) {
    const Node *core[8];
    if (g->nodes[i]->layer >= 0 && ir_attn_core(g->nodes[i], core)) st->has_attn[g->nodes[i]->layer] = true;
  }
  int *stamp = arena_array(a, g->n + 1, sizeof *stamp);
  RcLayer *mode = arena_array(a, L + 1, sizeof *mode);
  for (int l = 0; l < L; l++)
    for (int m = 0; m < RCL_COUNT; m++) layer_costs(g, st, l, (RcLayer)m, reads, stamp, mode);
  return st;
}

double recompute_model_peak(const RecomputeStats *st, const RcLayer *mode) {
  double prefix = 0, peak = 0;
  for (int j = 0; j < st->nlayers; j++) {
    prefix += st->keep[j][mode[j]];
    double v = prefix + st->trans[j][mode[j]];
    if (v > peak) peak = v;
  }
  return st->base + peak;
}

/* ---- the dynamic program over the layer chain ------------------------------------------ */

/* A partial choice for layers [0, j): kept bytes so far, FLOPs so far, how it was made. */
typedef struct DpState {
  double kept, flops;
  int parent;
  RcLayer m;
} DpState;
typedef struct Front {
  DpState *v;
  int n;
} Front;

static int by_kept(const void *pa, const void *pb) {
  const DpState *a = pa, *b = pb;
  if (a->kept != b->kept) return a->kept < b->kept ? -1 : 1;
  if (a->flops != b->flops) return a->flops < b->flops ? -1 : 1;
  return 0;
}

/* Keeps the Pareto front: ascending kept bytes, strictly falling FLOPs. */
static int prune(DpState *v, int n) {
  qsort(v, n, sizeof *v, by_kept);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (k == 0 || v[i].flops < v[k - 1].flops) v[k++] = v[i];
  return k;
}

static bool allowed(const RecomputeStats *st, int j, int m) { return m != RCL_ATTN || st->has_attn[j]; }

static Front step(const RecomputeStats *st, const Front *f, int j, double budget) {
  Front nx = {malloc(((size_t)f->n * RCL_COUNT + 1) * sizeof(DpState)), 0};
  if (!nx.v) error_plain("out of memory");
  for (int s = 0; s < f->n; s++)
    for (int m = 0; m < RCL_COUNT; m++) {
      if (!allowed(st, j, m)) continue;
      double kept = f->v[s].kept + st->keep[j][m];
      if (kept + st->trans[j][m] > budget) continue; /* the peak while layer j's backward runs */
      nx.v[nx.n++] = (DpState){kept, f->v[s].flops + st->flops[j][m], s, (RcLayer)m};
    }
  nx.n = prune(nx.v, nx.n);
  return nx;
}

bool recompute_dp(const RecomputeStats *st, double budget, RcLayer *mode) {
  int L = st->nlayers;
  Front *fr = calloc(L + 1, sizeof *fr);
  if (!fr) error_plain("out of memory");
  fr[0] = (Front){malloc(sizeof(DpState)), 1};
  if (!fr[0].v) error_plain("out of memory");
  fr[0].v[0] = (DpState){0, 0, -1, RCL_KEEP};
  budget -= st->base;
  bool ok = budget >= 0;
  for (int j = 0; j < L && ok; j++) {
    fr[j + 1] = step(st, &fr[j], j, budget);
    ok = fr[j + 1].n > 0;
  }
  if (ok) { /* the least FLOPs is the last of the front; walk back */
    int s = fr[L].n - 1;
    for (int j = L; j > 0; j--) {
      mode[j - 1] = fr[j].v[s].m;
      s = fr[j].v[s].parent;
    }
  }
  for (int j = 0; j <= L; j++) free(fr[j].v);
  free(fr);
  return ok;
}

/* ---- the choice, measured ---------------------------------------------------------------- */

static double mib(double b) { return b / (1024.0 * 1024.0); }

static RcLayer *modes_all(Arena *a, int L, RcLayer m) {
  RcLayer *v = arena_array(a, L + 1, sizeof *v);
  for (int l = 0; l < L; l++) v[l] = m;
  return v;
}

/* The model's peak, less base, of the same mode in every layer. */
static double model_uniform(const RecomputeStats *st, RcLayer m) {
  double peak = 0, prefix = 0;
  for (int j = 0; j < st->nlayers; j++) {
    prefix += st->keep[j][m];
    if (prefix + st->trans[j][m] > peak) peak = prefix + st->trans[j][m];
  }
  return peak;
}

void recompute_choose(Graph *g, int64_t budget, RecomputeMeasure measure, void *ctx, RecomputeChoice *out) {
  RecomputeStats *st = recompute_stats(g);
  int L = g->nlayers;
  int64_t peak = measure(g, ctx);
  *out = (RecomputeChoice){modes_all(g->arena, L, RCL_KEEP), peak, (double)peak, 0, g, 0};
  if (peak <= budget) return;
  /* every layer recomputed: the least memory, the fallback, and the model's second anchor */
  RcLayer *full = modes_all(g->arena, L, RCL_FULL);
  Graph *hf = pass_recompute(g, full);
  int64_t least = measure(hf, ctx);
  if (least > budget)
    error_plain("no recompute choice fits the activation memory budget of %.1f MiB: the smallest work peak, "
                "with every layer recomputed, is %.1f MiB",
                mib((double)budget), mib((double)least));
  double b0 = (double)peak - model_uniform(st, RCL_KEEP), b1 = (double)least - model_uniform(st, RCL_FULL);
  st->base = b0 < b1 ? b0 : b1; /* optimistic; a measured overshoot tightens the budget below */
  *out = (RecomputeChoice){full, least, recompute_model_peak(st, full), recompute_flops(g, full), hf, 0};
  RcLayer *mode = modes_all(g->arena, L, RCL_KEEP);
  double eff = (double)budget;
  for (int round = 1; round <= 8; round++) {
    if (!recompute_dp(st, eff, mode)) break;
    out->rounds = round;
    double flops = recompute_flops(g, mode);
    if (flops >= out->flops) break; /* no better than what already fits */
    Graph *h = pass_recompute(g, mode);
    int64_t p = measure(h, ctx);
    if (p <= budget) {
      *out = (RecomputeChoice){mode, p, recompute_model_peak(st, mode), flops, h, round};
      break;
    }
    eff -= (double)(p - budget);
  }
}

/* ---- description ---------------------------------------------------------------------------- */

/* "h.0-h.3, h.5" for the layers of g (a pipeline chunk holds some) in mode m, or "none". */
static const char *layer_list(Arena *a, const Graph *g, const bool *here, const RcLayer *mode, RcLayer m) {
  const char *s = "";
  for (int l = 0; l < g->nlayers; l++) {
    if (!here[l] || mode[l] != m || (l > 0 && here[l - 1] && mode[l - 1] == m)) continue;
    int e = l;
    while (e + 1 < g->nlayers && here[e + 1] && mode[e + 1] == m) e++;
    s = e > l ? arena_printf(a, "%s%s%s-%s", s, *s ? ", " : "", g->layers[l].name, g->layers[e].name)
              : arena_printf(a, "%s%s%s", s, *s ? ", " : "", g->layers[l].name);
  }
  return *s ? s : "none";
}

const char *recompute_describe(Arena *a, const Graph *g, const RcLayer *mode) {
  bool *here = arena_array(a, g->nlayers + 1, sizeof *here);
  for (int i = 0; i < g->n; i++)
    if (g->nodes[i]->layer >= 0 && computed(g->nodes[i])) here[g->nodes[i]->layer] = true;
  return arena_printf(a, "full: %s; attention core: %s", layer_list(a, g, here, mode, RCL_FULL),
                      layer_list(a, g, here, mode, RCL_ATTN));
}
