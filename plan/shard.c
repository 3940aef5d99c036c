/* Intra-op sharding (plan/shard.h): the model analysis the plan needs (batch
 * dimensions, each op's from bdim_<name>; consumers, saved tensors, segments and their
 * signatures), the legal strategies of each op (its rule shard_<name>), their prices,
 * and the dynamic program that picks one strategy per op. Both per-op functions are
 * found by name from ir/ops.def, in tables like the other per-op functions. */
#include "plan/shard.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ir/analysis.h"

const char *const attn_kernel_names[2] = {"fused", "materialized"};

const char *placement_name(int pl, char buf[16]) {
  if (pl == PL_R) return "R";
  if (pl == PL_P) return "P";
  snprintf(buf, 16, "S(%d)", (pl - PL_S0) & 15);
  return buf;
}

/* ---- model analysis ----------------------------------------------------------- */

static bool is_computed(const Node *n) { return op_info(n->op)->cls != CLS_SOURCE; }

/* The output dimension that input dimension `d` of an input with `nin` dims lands
 * on when shapes align to the right (elementwise broadcasting), or -1. */
static int aligned(const Node *n, const Node *in, int d) {
  int o = d + n->shape.ndim - in->shape.ndim;
  return d >= 0 && o >= 0 && o < n->shape.ndim && n->shape.d[o] == in->shape.d[d] ? o : -1;
}

static int64_t prefix(const Shape *s, int d) {
  int64_t p = 1;
  for (int i = 0; i < d; i++) p *= s->d[i];
  return p;
}

/* The output dimension of a reshape that input dimension d maps to whole (its
 * leading factor or a merge that starts with it), or -1. */
static int reshape_dim(const Node *n, int d) {
  const Shape *in = &n->in[0]->shape, *out = &n->shape;
  int64_t pre = prefix(in, d);
  for (int o = 0; o < out->ndim; o++)
    if (prefix(out, o) == pre && out->d[o] > 1 && in->d[d] > 1 &&
        (in->d[d] % out->d[o] == 0 || out->d[o] % in->d[d] == 0))
      return o;
  return -1;
}

static int norm_axis(int64_t axis, int ndim) { return (int)(axis < 0 ? axis + ndim : axis); }

static int reduce_axis(const Node *n) { /* -1: all axes */
  const AttrVal *a = attr_get(n, "axis");
  return a && a->set ? norm_axis(a->i, n->in[0]->shape.ndim) : -1;
}

/* ---- batch dimensions: bdim_<name>, found by name from ir/ops.def --------------- */

/* Each bdim_<name> says where the batch dimension of n is, from its inputs', or -1: data
 * inputs carry it in dimension 0 and ops carry it through. Nodes are analysed in
 * order, so pm->bdim holds every input's. analyse_nodes calls them through bdim_rules. */

/* The first input of n that has a batch dimension, or NULL. */
static const Node *batched_input(const PlanModel *pm, const Node *n) {
  for (int i = 0; i < n->nin; i++)
    if (pm->bdim[n->in[i]->id] >= 0) return n->in[i];
  return NULL;
}

/* The batch dimension of that input, or -1. */
static int first_bdim(const PlanModel *pm, const Node *n) {
  const Node *in = batched_input(pm, n);
  return in ? pm->bdim[in->id] : -1;
}

/* No batch dimension: sources other than inputs, the scalar losses, and those of the
 * ops decompose, autocast and autodiff make after planning that the aliases below name. */
static int bdim_none(const PlanModel *pm, const Node *n) { return -1; }

/* The first batched input's, unchanged (the collectives). */
static int bdim_first(const PlanModel *pm, const Node *n) { return first_bdim(pm, n); }

/* The first batched input's, where it lands when shapes align to the right
 * (elementwise ops, norms, softmax, attention and their gradients). */
static int bdim_aligned(const PlanModel *pm, const Node *n) {
  const Node *in = batched_input(pm, n);
  return in ? aligned(n, in, pm->bdim[in->id]) : -1;
}

/* slice, pad, concat: the input's, unless the op works along it. */
static int bdim_along_axis(const PlanModel *pm, const Node *n) {
  int b = first_bdim(pm, n);
  return b >= 0 && norm_axis(attr_int(n, "axis"), n->shape.ndim) != b ? b : -1;
}

/* sum, mean: gone when reduced, one lower past the reduced axis unless kept. */
static int bdim_reduce(const PlanModel *pm, const Node *n) {
  int b = first_bdim(pm, n), ax = reduce_axis(n);
  if (b < 0 || ax < 0 || ax == b) return -1;
  return attr_int(n, "keepdim") || b < ax ? b : b - 1;
}

/* Dimension 0 of a data input whose size is the batch. */
static int bdim_input(const PlanModel *pm, const Node *n) {
  return n->shape.ndim >= 1 && n->shape.d[0] == pm->batch ? 0 : -1;
}

/* The index's: the table has none. */
static int bdim_embedding(const PlanModel *pm, const Node *n) { return pm->bdim[n->in[1]->id]; }

/* a's rows or batch axes, or b's columns. */
static int bdim_matmul(const PlanModel *pm, const Node *n) {
  const Node *a = n->in[0], *b = n->in[1];
  int na = a->shape.ndim, no = n->shape.ndim, ba = pm->bdim[a->id], bb = pm->bdim[b->id];
  bool ta = attr_int(n, "transpose_a"), tb = attr_int(n, "transpose_b");
  if (ba >= 0 && ba == (ta ? na - 1 : na - 2)) return no - 2;
  if (ba >= 0 && ba < na - 2) return aligned(n, a, ba) >= 0 ? ba + no - na : -1;
  if (bb >= 0 && bb == (tb ? b->shape.ndim - 2 : b->shape.ndim - 1)) return no - 1;
  return -1;
}

/* The output dimension the input's maps to whole, if it still divides by the batch. */
static int bdim_reshape(const PlanModel *pm, const Node *n) {
  int b = first_bdim(pm, n), o = b >= 0 ? reshape_dim(n, b) : -1;
  return o >= 0 && n->shape.d[o] % pm->batch == 0 ? o : -1;
}

static int bdim_transpose(const PlanModel *pm, const Node *n) {
  int b = first_bdim(pm, n);
  const AttrVal *perm = attr_get(n, "perm");
  for (int j = 0; b >= 0 && j < perm->n; j++)
    if (perm->v[j] == b) return j;
  return -1;
}

/* The input's, aligned; from an unbatched input, dimension 0 where the new leading
 * axes (or a size-1 one) grow to the batch. */
static int bdim_broadcast(const PlanModel *pm, const Node *n) {
  const Node *in = batched_input(pm, n);
  if (in) return aligned(n, in, pm->bdim[in->id]);
  return n->shape.ndim >= 1 && n->shape.d[0] == pm->batch && pm->batch > 1 &&
                 (n->in[0]->shape.ndim < n->shape.ndim || n->in[0]->shape.d[0] == 1)
             ? 0
             : -1;
}

#define bdim_param bdim_none
#define bdim_const bdim_none
#define bdim_arange bdim_none
#define bdim_loss_scale bdim_none
#define bdim_add bdim_aligned
#define bdim_sub bdim_aligned
#define bdim_mul bdim_aligned
#define bdim_div bdim_aligned
#define bdim_neg bdim_aligned
#define bdim_gelu bdim_aligned
#define bdim_silu bdim_aligned
#define bdim_gelu_erf bdim_aligned
#define bdim_relu bdim_aligned
#define bdim_dropout bdim_aligned
#define bdim_cast bdim_aligned
#define bdim_rotary bdim_aligned
#define bdim_layernorm bdim_aligned
#define bdim_rmsnorm bdim_aligned
#define bdim_softmax bdim_aligned
#define bdim_sum bdim_reduce
#define bdim_mean bdim_reduce
#define bdim_cross_entropy bdim_none /* a scalar */
#define bdim_ce_count bdim_none      /* a scalar */
#define bdim_classifier_ce bdim_none
#define bdim_attention bdim_aligned
#define bdim_flash_attention bdim_none
#define bdim_slice bdim_along_axis
#define bdim_concat bdim_along_axis
#define bdim_sum_to bdim_none
#define bdim_gelu_grad bdim_aligned
#define bdim_silu_grad bdim_aligned
#define bdim_gelu_erf_grad bdim_aligned
#define bdim_relu_grad bdim_aligned
#define bdim_layernorm_grad bdim_aligned
#define bdim_rmsnorm_grad bdim_aligned
#define bdim_softmax_grad bdim_aligned
#define bdim_cross_entropy_grad bdim_none
#define bdim_embedding_grad bdim_none
#define bdim_classifier_ce_grad bdim_none
#define bdim_flash_attention_grad bdim_none
#define bdim_pad bdim_along_axis
#define bdim_fp8_state bdim_none
#define bdim_fp8_quantize bdim_none
#define bdim_scaled_matmul bdim_none
#define bdim_all_reduce bdim_first
#define bdim_all_gather bdim_first
#define bdim_reduce_scatter bdim_first
#define bdim_split bdim_first
#define bdim_tp_copy bdim_first
#define bdim_all_to_all bdim_first

static int (*const bdim_rules[OP_COUNT])(const PlanModel *, const Node *) = {
#define OP(id, name, nin, cls, flags, attrs) [OP_##id] = bdim_##name,
#include "ir/ops.def"
#undef OP
};

/* Tensors an op's backward reads (STYLE: one switch on the op kind). */
static bool saves_output(OpKind op) { return op == OP_SOFTMAX || op == OP_ATTENTION; }
static bool saves_input(OpKind op, int i) {
  if (op == OP_MATMUL || op == OP_MUL || op == OP_DIV) return i < 2;
  if (op == OP_GELU || op == OP_GELU_ERF || op == OP_SILU || op == OP_RELU || op == OP_LAYERNORM || op == OP_RMSNORM)
    return i == 0;
  return op == OP_ATTENTION && i < 3;
}

static void analyse_nodes(Arena *a, PlanModel *pm) {
  const Graph *g = pm->g;
  pm->bdim = arena_array(a, g->n, sizeof *pm->bdim);
  pm->bdep = arena_array(a, g->n, sizeof *pm->bdep);
  pm->nuse = arena_array(a, g->n, sizeof *pm->nuse);
  pm->use = arena_array(a, g->n, sizeof *pm->use);
  pm->saver = arena_array(a, g->n, sizeof *pm->saver);
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    pm->bdim[i] = bdim_rules[n->op](pm, n);
    pm->bdep[i] = pm->bdim[i] >= 0;
    for (int k = 0; k < n->nin; k++) {
      pm->bdep[i] |= pm->bdep[n->in[k]->id];
      pm->nuse[n->in[k]->id]++;
    }
    if (n->op == OP_PARAM) pm->params += (double)shape_numel(&n->shape);
  }
  for (int i = 0; i < g->n; i++) {
    pm->use[i] = arena_array(a, pm->nuse[i] + 1, sizeof(int));
    pm->nuse[i] = 0;
    pm->saver[i] = saves_output(g->nodes[i]->op) ? i : -1;
  }
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    for (int k = 0; k < n->nin; k++) {
      int x = n->in[k]->id;
      pm->use[x][pm->nuse[x]++] = i;
      if (pm->saver[x] < 0 && is_computed(n->in[k]) && saves_input(n->op, k)) pm->saver[x] = i;
    }
  }
}

static int last_use(const PlanModel *pm, int x) { return pm->nuse[x] ? pm->use[x][pm->nuse[x] - 1] : -1; }

/* Computed tensors produced before node index pos and used at or after it. */
static int live_at(const PlanModel *pm, int pos, int *out) {
  int k = 0;
  for (int x = 0; x < pos; x++)
    if (is_computed(pm->g->nodes[x]) && last_use(pm, x) >= pos) {
      if (out) out[k] = x;
      k++;
    }
  return k;
}

static void seg_add(Arena *a, PlanModel *pm, int lo, int hi, SegKind kind, int layer) {
  Segment *s = &pm->seg[pm->nseg++];
  *s = (Segment){.lo = lo, .hi = hi, .kind = kind, .layer = layer};
  s->nin = live_at(pm, lo, NULL);
  s->in = arena_array(a, s->nin + 1, sizeof(int));
  live_at(pm, lo, s->in);
  s->nout = live_at(pm, hi, NULL);
  s->out = arena_array(a, s->nout + 1, sizeof(int));
  live_at(pm, hi, s->out);
  s->ops = arena_array(a, hi - lo + 1, sizeof(int));
  for (int i = lo; i < hi; i++)
    if (is_computed(pm->g->nodes[i])) s->ops[s->nops++] = i;
}

/* Before (layer -1 until the first layer), one segment per layer (ops outside any
 * layer between two layers join the layer before them), after. */
static void cut_segments(Arena *a, PlanModel *pm) {
  const Graph *g = pm->g;
  int first = -1, last = -1;
  for (int i = 0; i < g->n; i++)
    if (g->nodes[i]->layer >= 0) {
      if (first < 0) first = i;
      last = i;
    }
  pm->seg = arena_array(a, g->nlayers + 3, sizeof *pm->seg);
  if (first < 0) {
    seg_add(a, pm, 0, g->n, SEG_BEFORE, -1);
    return;
  }
  seg_add(a, pm, 0, first, SEG_BEFORE, -1);
  pm->first_layer_seg = pm->nseg;
  int start = first;
  for (int i = first + 1; i <= last + 1; i++) {
    int l = i <= last ? g->nodes[i]->layer : -2;
    if (l == -1 || l == g->nodes[start]->layer) continue;
    seg_add(a, pm, start, i, SEG_LAYER, g->nodes[start]->layer);
    pm->nlayer_segs++;
    start = i;
  }
  seg_add(a, pm, last + 1, g->n, SEG_AFTER, -1);
}

/* ---- segment signatures: layers of one `repeat` are solved once -------------- */

/* A node of segment s as seen from inside it: its offset, the index of a boundary
 * tensor (shifted), or an outside source by id (negative). */
static long seg_ref(const Segment *s, int x) {
  if (x >= s->lo && x < s->hi) return x - s->lo;
  for (int k = 0; k < s->nin; k++)
    if (s->in[k] == x) return 1000000000L + k;
  return -1L - x;
}

static bool attrs_equal(const Node *a, const Node *b) {
  for (int i = 0; i < op_nattrs(a->op); i++) {
    const AttrVal *x = &a->attr[i], *y = &b->attr[i];
    if (x->set != y->set || x->i != y->i || x->f != y->f || x->n != y->n) return false;
    if (memcmp(x->v, y->v, sizeof x->v) || (x->s != y->s && (!x->s || !y->s || strcmp(x->s, y->s)))) return false;
  }
  return true;
}

static bool uses_equal(const PlanModel *pm, const Segment *a, const Segment *b, int xa, int xb) {
  if (pm->nuse[xa] != pm->nuse[xb]) return false;
  for (int u = 0; u < pm->nuse[xa]; u++) {
    int ua = pm->use[xa][u], ub = pm->use[xb][u];
    bool ina = ua >= a->lo && ua < a->hi, inb = ub >= b->lo && ub < b->hi;
    if (ina != inb || (ina && ua - a->lo != ub - b->lo) || (!ina && (ua >= a->hi) != (ub >= b->hi))) return false;
  }
  long sa = pm->saver[xa] < 0 ? -1 : seg_ref(a, pm->saver[xa]), sb = pm->saver[xb] < 0 ? -1 : seg_ref(b, pm->saver[xb]);
  return sa == sb || (sa < -1 && sb < -1);
}

static bool node_equal(const PlanModel *pm, const Segment *a, const Segment *b, const Node *na, const Node *nb) {
  if (na->op != nb->op || na->dtype != nb->dtype || !shape_eq(&na->shape, &nb->shape) || na->nin != nb->nin)
    return false;
  if (pm->bdim[na->id] != pm->bdim[nb->id] || pm->bdep[na->id] != pm->bdep[nb->id] || !attrs_equal(na, nb))
    return false;
  const char *fa = pm->force ? pm->force[na->id] : NULL, *fb = pm->force ? pm->force[nb->id] : NULL;
  if ((fa || fb) && (!fa || !fb || strcmp(fa, fb))) return false; /* forced differently: solved apart */
  for (int k = 0; k < na->nin; k++)
    if (seg_ref(a, na->in[k]->id) != seg_ref(b, nb->in[k]->id)) return false;
  return uses_equal(pm, a, b, na->id, nb->id);
}

static bool seg_equal(const PlanModel *pm, const Segment *a, const Segment *b) {
  if (a->kind != b->kind || a->hi - a->lo != b->hi - b->lo || a->nin != b->nin || a->nout != b->nout) return false;
  const Graph *g = pm->g;
  for (int k = 0; k < a->nin; k++) {
    const Node *x = g->nodes[a->in[k]], *y = g->nodes[b->in[k]];
    if (!shape_eq(&x->shape, &y->shape) || x->dtype != y->dtype || pm->bdim[x->id] != pm->bdim[y->id] ||
        !uses_equal(pm, a, b, x->id, y->id))
      return false;
  }
  for (int k = 0; k < a->nout; k++)
    if (seg_ref(a, a->out[k]) != seg_ref(b, b->out[k])) return false;
  for (int o = 0; o < a->hi - a->lo; o++)
    if (!node_equal(pm, a, b, g->nodes[a->lo + o], g->nodes[b->lo + o])) return false;
  return true;
}

/* The first segment of each signature stands for it. */
static void assign_signatures(Arena *a, PlanModel *pm) {
  int *rep = arena_array(a, pm->nseg + 1, sizeof *rep);
  for (int i = 0; i < pm->nseg; i++) {
    Segment *s = &pm->seg[i];
    s->sig = -1;
    for (int k = 0; k < pm->nsig && s->sig < 0; k++)
      if (seg_equal(pm, &pm->seg[rep[k]], s)) s->sig = k;
    if (s->sig < 0) {
      rep[pm->nsig] = i;
      s->sig = pm->nsig++;
    }
  }
}

/* What recompute runs again (pass_recompute does the same on the differentiated
 * graph): under full recompute, the ops of a layer whose output the layer's own
 * backward reads (as saves_input and saves_output say) and the ops of the layer they
 * are computed from; under selective recompute, the attention cores. */
static void mark_recompute(Arena *a, PlanModel *pm) {
  const Graph *g = pm->g;
  pm->rc_full = arena_array(a, g->n + 1, sizeof *pm->rc_full);
  pm->rc_sel = arena_array(a, g->n + 1, sizeof *pm->rc_sel);
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i], *core[8];
    if (n->layer < 0) continue;
    if (saves_output(n->op)) pm->rc_full[i] = true;
    for (int k = 0; k < n->nin; k++)
      if (saves_input(n->op, k) && n->in[k]->layer == n->layer && is_computed(n->in[k]))
        pm->rc_full[n->in[k]->id] = true;
    for (int c = ir_attn_core(n, core) - 1; c >= 0; c--)
      if (core[c]->layer == n->layer) pm->rc_sel[core[c]->id] = true;
  }
  for (int i = g->n - 1; i >= 0; i--)
    for (int k = 0; pm->rc_full[i] && k < g->nodes[i]->nin; k++) {
      const Node *in = g->nodes[i]->in[k];
      if (in->layer == g->nodes[i]->layer && is_computed(in)) pm->rc_full[in->id] = true;
    }
}

PlanModel *plan_model_new(Arena *a, const Graph *g, const char *const *force) {
  PlanModel *pm = arena_alloc(a, sizeof *pm);
  pm->g = g;
  pm->force = force;
  pm->batch = 1;
  for (int i = 0; i < g->n; i++)
    if (g->nodes[i]->op == OP_INPUT && g->nodes[i]->shape.ndim >= 1) {
      pm->batch = g->nodes[i]->shape.d[0];
      break;
    }
  analyse_nodes(a, pm);
  mark_recompute(a, pm);
  cut_segments(a, pm);
  assign_signatures(a, pm);
  return pm;
}

/* ---- sizes under a context ------------------------------------------------------ */

static double micro_dim(const ShardCtx *x, const Node *n, int d) {
  double v = (double)n->shape.d[d];
  return d == x->pm->bdim[n->id] ? v / (double)x->pm->batch * x->mbs : v;
}

/* Scale of an op's cost from the global batch to one micro-batch. */
static double cost_scale(const ShardCtx *x, const Node *n) {
  return x->pm->bdep[n->id] ? (double)x->mbs / (double)x->pm->batch : 1;
}

static double elem_bytes(const ShardCtx *x, const Node *n) {
  return dtype_is_float(n->dtype) ? x->act_bytes : dtype_size_bits(n->dtype) / 8.0;
}

static double numel_micro(const ShardCtx *x, const Node *n) {
  double e = (double)shape_numel(&n->shape);
  return x->pm->bdim[n->id] >= 0 ? e / (double)x->pm->batch * x->mbs : e;
}

/* Bytes of the whole tensor (all ranks' parts together) in one micro-batch. */
static double tensor_bytes(const ShardCtx *x, const Node *n) { return numel_micro(x, n) * elem_bytes(x, n); }

/* ... as a collective or a pipeline message carries it. */
static double comm_tensor_bytes(const ShardCtx *x, const Node *n) {
  return dtype_is_float(n->dtype) ? numel_micro(x, n) * x->comm_bytes : tensor_bytes(x, n);
}

static double split(const ShardCtx *x, int pl) { return pl >= PL_S0 ? x->t : 1; }

static bool legal(const ShardCtx *x, const Node *n, int pl) {
  if (pl == PL_R) return true;
  if (x->t <= 1) return false;
  if (pl == PL_P) return is_computed(n) && dtype_is_float(n->dtype);
  int d = pl - PL_S0;
  if (d >= n->shape.ndim) return false;
  double v = micro_dim(x, n, d);
  return v >= x->t && fmod(v, x->t) == 0;
}

/* ---- legal strategies of each op --------------------------------------------- */

enum { MAX_IN = 64 };

typedef struct SB {
  Arena *a;
  const ShardCtx *x;
  const Node *n;
  Strat *s;
  int ns, cap;
} SB;

/* Under ShardCtx.exec only strategies the partition pass (pass_partition) can run
 * are offered: every tensor-parallel rank's part must come from the same local
 * program, so no kernel may need the rank's own offset into a position, a causal mask,
 * a dropout mask or a vocabulary range. Each shard_<name> leaves out what its op
 * forbids; the rule for every op is this one, which sb_add applies: a data input split
 * by a strategy is every rank's whole input parted by a `split` (each rank takes its
 * block of the buffer train fills), but constants and positions (const, arange) are
 * computed where they are read, so they stay whole. */
static bool exec_inputs(const Node *n, const uint8_t *in) {
  for (int i = 0; i < n->nin; i++) {
    OpKind src = n->in[i]->op;
    if ((src == OP_CONST || src == OP_ARANGE) && in[i] != PL_R) return false;
  }
  return true;
}

/* Adds the strategy unless illegal here or already there; the one added, or NULL. */
static Strat *sb_add(SB *b, const char *name, int out, const uint8_t *in, bool divided) {
  const Node *n = b->n;
  if (b->x->exec && !exec_inputs(n, in)) return NULL;
  if (!legal(b->x, n, out)) return NULL;
  for (int i = 0; i < n->nin; i++)
    if (!legal(b->x, n->in[i], in[i])) return NULL;
  for (int k = 0; k < b->ns; k++)
    if (b->s[k].out == out && !memcmp(b->s[k].in, in, n->nin)) return NULL;
  if (b->ns == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 8;
    Strat *s = arena_array(b->a, b->cap, sizeof *s);
    if (b->ns) memcpy(s, b->s, b->ns * sizeof *s);
    b->s = s;
  }
  Strat *s = &b->s[b->ns++];
  *s = (Strat){.name = name, .out = (uint8_t)out, .divided = divided};
  s->in = arena_alloc(b->a, n->nin + 1);
  memcpy(s->in, in, n->nin);
  return s;
}

static void all_in(const Node *n, uint8_t *in, int pl) { memset(in, pl, n->nin); }

/* Output split along d, each input split along its matching dimension or whole. */
static void gen_follow(SB *b, const char *name, int d) {
  const Node *n = b->n;
  uint8_t in[MAX_IN];
  for (int i = 0; i < n->nin; i++) {
    int di = d - (n->shape.ndim - n->in[i]->shape.ndim);
    in[i] = di >= 0 && n->in[i]->shape.d[di] == n->shape.d[d] ? PL_S0 + di : PL_R;
  }
  sb_add(b, name, PL_S0 + d, in, true);
}

/* Every output dimension split, as the inputs follow. */
static void gen_splits(SB *b) {
  for (int d = 0; d < b->n->shape.ndim; d++) gen_follow(b, "split", d);
}

/* Linear ops carry partial sums through: out P from inputs P. */
static void gen_partial(SB *b) {
  uint8_t in[MAX_IN];
  all_in(b->n, in, PL_P);
  sb_add(b, "partial", PL_P, in, false);
}

/* ---- per-op rules: shard_<name>, found by name from ir/ops.def ------------------ */

/* Each rule adds the op's strategies beyond "replicated" (gen_strategies adds that
 * one first, for every op). Ops with no strategy of their own: sources, gradient ops
 * (made after the plan, by autodiff) and collectives (made by the partition pass). */
static void shard_none(SB *b) {}

/* Elementwise ops: any split their inputs allow; linear ones carry partial sums. */
static void shard_elementwise(SB *b) { gen_splits(b); }

static void shard_linear(SB *b) {
  gen_splits(b);
  gen_partial(b);
}

/* a · b: a partial sum times a whole factor, either way round. */
static void shard_mul(SB *b) {
  gen_splits(b);
  uint8_t in[2] = {PL_P, PL_R};
  sb_add(b, "partial", PL_P, in, false);
  in[0] = PL_R, in[1] = PL_P;
  sb_add(b, "partial", PL_P, in, false);
}

/* a / b: a partial sum over a whole divisor. */
static void shard_div(SB *b) {
  gen_splits(b);
  uint8_t in[2] = {PL_P, PL_R};
  sb_add(b, "partial", PL_P, in, false);
}

/* Not split under exec: each rank would need its own offset into the mask. */
static void shard_dropout(SB *b) {
  if (!b->x->exec) gen_splits(b);
  gen_partial(b);
}

/* x [..., seq, H·hd]: features split by whole heads only; under exec not along
 * positions (each rank would need its own position offset). */
static void shard_rotary(SB *b) {
  const Node *n = b->n;
  int nd = n->shape.ndim;
  for (int d = 0; d < nd; d++) {
    if (d == nd - 1 && attr_int(n, "heads") % b->x->t) continue;
    if (d == nd - 2 && b->x->exec) continue;
    gen_follow(b, "split", d);
  }
  gen_partial(b);
}

/* Normalisations: split anything but the normalised axis; weights whole. */
static void gen_norm_split(SB *b, int d) {
  uint8_t in[MAX_IN];
  all_in(b->n, in, PL_R);
  in[0] = PL_S0 + d;
  sb_add(b, "split", PL_S0 + d, in, true);
}

static void shard_rownorm(SB *b) {
  for (int d = 0; d + 1 < b->n->shape.ndim; d++) gen_norm_split(b, d);
}

/* Under exec, a causal one is not split along queries (each rank would need its own
 * offset into the mask). */
static void shard_softmax(SB *b) {
  const Node *n = b->n;
  int nd = n->shape.ndim, ax = norm_axis(attr_int(n, "axis"), nd);
  bool causal = b->x->exec && attr_int(n, "causal");
  for (int d = 0; d < nd; d++)
    if (d != ax && !(causal && d == nd - 2)) gen_norm_split(b, d);
}

/* matmul a[..., m, k] · b[..., k, n]: split m, column (split n), row (split k:
 * partial sums), or a batch dimension. */
static void shard_matmul(SB *b) {
  const Node *n = b->n, *A = n->in[0], *B = n->in[1];
  int na = A->shape.ndim, nb = B->shape.ndim, no = n->shape.ndim;
  bool ta = attr_int(n, "transpose_a"), tb = attr_int(n, "transpose_b");
  int am = ta ? na - 1 : na - 2, ak = ta ? na - 2 : na - 1, bk = tb ? nb - 1 : nb - 2, bn = tb ? nb - 2 : nb - 1;
  uint8_t in[2];
  in[0] = PL_S0 + am, in[1] = PL_R;
  sb_add(b, "split-m", PL_S0 + no - 2, in, true);
  in[0] = PL_R, in[1] = PL_S0 + bn;
  sb_add(b, "column", PL_S0 + no - 1, in, true);
  in[0] = PL_S0 + ak, in[1] = PL_S0 + bk;
  sb_add(b, "row", PL_P, in, true);
  for (int j = 0; j < no - 2; j++) {
    int ja = j - (no - na), jb = j - (no - nb);
    in[0] = ja >= 0 && A->shape.d[ja] == n->shape.d[j] ? PL_S0 + ja : PL_R;
    in[1] = jb >= 0 && B->shape.d[jb] == n->shape.d[j] ? PL_S0 + jb : PL_R;
    if (in[0] != PL_R || in[1] != PL_R) sb_add(b, "batch", PL_S0 + j, in, true);
  }
}

/* attention(q, k, v) on [B, S, H·hd] (k, v [B, T, G·hd]): by batch, by heads, or by
 * queries (under exec not when causal: each rank would need its own offset into the
 * mask). By heads, the key/value heads split with the query heads where the ranks
 * divide them; where the ranks are a multiple of them instead, k and v stay whole and
 * each rank takes the one head its query heads share (Strat.regroup). */
static void shard_attention(SB *b) {
  uint8_t in[3] = {PL_S0, PL_S0, PL_S0};
  int64_t t = b->x->t, kv = attn_kv_heads(b->n);
  sb_add(b, "batch", PL_S0, in, true);
  if (attr_int(b->n, "heads") % t == 0 && (kv % t == 0 || t % kv == 0)) {
    in[0] = PL_S0 + 2;
    in[1] = in[2] = kv % t == 0 ? PL_S0 + 2 : PL_R;
    Strat *s = sb_add(b, "heads", PL_S0 + 2, in, true);
    if (s && kv % t) s->regroup = 1 << 1 | 1 << 2, s->repeat = (int)(t / kv); /* k and v */
  }
  if (b->x->exec && attr_int(b->n, "causal")) return;
  in[0] = PL_S0 + 1, in[1] = in[2] = PL_R;
  sb_add(b, "queries", PL_S0 + 1, in, true);
}

/* embedding(table [V, D], index): rows of the index, vocab-parallel (P; not under
 * exec: each rank would need its own vocabulary range), or D split. */
static void shard_embedding(SB *b) {
  const Node *ix = b->n->in[1];
  uint8_t in[2] = {PL_R, PL_R};
  for (int d = 0; d < ix->shape.ndim; d++) {
    in[1] = PL_S0 + d;
    sb_add(b, "rows", PL_S0 + d, in, true);
  }
  in[0] = PL_S0, in[1] = PL_R;
  if (!b->x->exec) sb_add(b, "vocab", PL_P, in, true);
  in[0] = PL_S0 + 1;
  sb_add(b, "columns", PL_S0 + b->n->shape.ndim - 1, in, true);
}

/* cross_entropy(logits [..., V], targets): rows (each rank's share of the mean, a
 * partial sum: passes/partition.c scales each rank's mean by its part of the whole
 * count), or vocab-parallel (Megatron's: max, sum and target logit all-reduced; not
 * under exec: each rank would need its own vocabulary range). */
static void shard_cross_entropy(SB *b) {
  const Node *lg = b->n->in[0];
  uint8_t in[2];
  for (int d = 0; d + 1 < lg->shape.ndim; d++) {
    in[0] = in[1] = PL_S0 + d;
    sb_add(b, "rows", PL_P, in, true);
  }
  if (b->x->exec) return;
  in[0] = PL_S0 + lg->shape.ndim - 1, in[1] = PL_R;
  sb_add(b, "vocab", PL_R, in, true);
}

/* Reductions: split a kept axis; reducing a split axis leaves partial sums. */
static void gen_reduce(SB *b, bool partial) {
  const Node *n = b->n;
  int ax = reduce_axis(n), keep = attr_int(n, "keepdim");
  uint8_t in[1];
  for (int d = 0; d < n->in[0]->shape.ndim; d++) {
    in[0] = PL_S0 + d;
    if (ax < 0 || d == ax) {
      if (partial) sb_add(b, "partial", PL_P, in, true);
    } else {
      sb_add(b, "split", PL_S0 + (keep || d < ax ? d : d - 1), in, true);
    }
  }
}

static void shard_sum(SB *b) { gen_reduce(b, true); }

/* Under exec no partial mean: each rank's local mean would divide by its own count,
 * and the parts would not add up to the mean. */
static void shard_mean(SB *b) { gen_reduce(b, !b->x->exec); }

static void shard_reshape(SB *b) {
  uint8_t in[1];
  for (int d = 0; d < b->n->in[0]->shape.ndim; d++) {
    int o = reshape_dim(b->n, d);
    in[0] = PL_S0 + d;
    if (o >= 0) sb_add(b, "split", PL_S0 + o, in, true);
  }
  gen_partial(b);
}

static void shard_transpose(SB *b) {
  const AttrVal *perm = attr_get(b->n, "perm");
  uint8_t in[1];
  for (int j = 0; j < perm->n; j++) {
    in[0] = PL_S0 + (int)perm->v[j];
    sb_add(b, "split", PL_S0 + j, in, true);
  }
  gen_partial(b);
}

/* slice, pad, concat: split any axis but the one they work along (slice_ok: that
 * one too), and carry partial sums. */
static void gen_along_axis(SB *b, bool slice_ok) {
  const Node *n = b->n;
  int ax = norm_axis(attr_int(n, "axis"), n->shape.ndim);
  uint8_t in[MAX_IN];
  for (int d = 0; d < n->shape.ndim; d++) {
    if (d == ax && !slice_ok) continue;
    all_in(n, in, PL_S0 + d);
    sb_add(b, "split", PL_S0 + d, in, true);
  }
  gen_partial(b);
}

/* A slice of a split axis too, when its bounds divide: each rank then holds its part
 * of every slice (the partition pass lays the producer's columns out that way, as
 * Megatron does for q, k and v). */
static void shard_slice(SB *b) {
  int t = b->x->t;
  gen_along_axis(b, attr_int(b->n, "start") % t == 0 && attr_int(b->n, "end") % t == 0);
}

static void shard_along_axis(SB *b) { gen_along_axis(b, false); }

#define shard_input shard_none
#define shard_param shard_none
#define shard_const shard_none
#define shard_loss_scale shard_none
#define shard_arange shard_none
#define shard_ce_count shard_none /* made by the partition pass */
#define shard_add shard_linear
#define shard_sub shard_linear
#define shard_neg shard_linear
#define shard_gelu shard_elementwise
#define shard_silu shard_elementwise
#define shard_gelu_erf shard_elementwise
#define shard_relu shard_elementwise
#define shard_cast shard_linear
#define shard_layernorm shard_rownorm
#define shard_rmsnorm shard_rownorm
#define shard_concat shard_along_axis
#define shard_broadcast shard_linear
#define shard_sum_to shard_none
#define shard_gelu_grad shard_none
#define shard_silu_grad shard_none
#define shard_gelu_erf_grad shard_none
#define shard_relu_grad shard_none
#define shard_layernorm_grad shard_none
#define shard_rmsnorm_grad shard_none
#define shard_softmax_grad shard_none
#define shard_cross_entropy_grad shard_none
#define shard_embedding_grad shard_none
#define shard_pad shard_along_axis
#define shard_all_reduce shard_none
#define shard_all_gather shard_none
#define shard_reduce_scatter shard_none
#define shard_split shard_none
#define shard_tp_copy shard_none
#define shard_all_to_all shard_none
#define shard_flash_attention shard_none
#define shard_classifier_ce shard_none
#define shard_classifier_ce_grad shard_none
#define shard_flash_attention_grad shard_none
#define shard_fp8_state shard_none /* made after partitioning (passes/autocast.c) */
#define shard_fp8_quantize shard_none
#define shard_scaled_matmul shard_none

static void (*const shard_rules[OP_COUNT])(SB *) = {
#define OP(id, name, nin, cls, flags, attrs) [OP_##id] = shard_##name,
#include "ir/ops.def"
#undef OP
};

/* Every legal strategy of op n: "replicated" first (whole inputs and output, which
 * every rank can run), then the op's rule. */
static Strat *gen_strategies(Arena *a, const ShardCtx *x, const Node *n, int *ns) {
  SB b = {.a = a, .x = x, .n = n};
  uint8_t *in = arena_alloc(a, n->nin + 1);
  all_in(n, in, PL_R);
  sb_add(&b, "replicated", PL_R, in, false);
  if (x->t > 1 && n->nin <= MAX_IN) shard_rules[n->op](&b);
  *ns = b.ns;
  return b.s;
}

/* ---- prices of a strategy ------------------------------------------------------- */

/* Local m, n, k of a matmul under strategy s, for the GEMM efficiency. */
static double matmul_eff(const ShardCtx *x, const Node *n, const Strat *s) {
  const Node *A = n->in[0];
  int no = n->shape.ndim, na = A->shape.ndim;
  int ak = attr_int(n, "transpose_a") ? na - 2 : na - 1;
  double N = micro_dim(x, n, no - 1), K = micro_dim(x, A, ak), M = numel_micro(x, n) / N;
  if (s->out == PL_S0 + no - 1) N /= x->t;
  else if (s->out >= PL_S0) M /= x->t;
  if (s->in[0] == PL_S0 + ak) K /= x->t;
  return cost_gemm_eff(x->cl, M, N, K);
}

static double scores(const ShardCtx *x, const Node *n, const Strat *s) { /* b·H·(S·T or the window's) on one device */
  double v = micro_dim(x, n->in[0], 0) * (double)attr_int(n, "heads") * attn_pairs(n);
  return s->divided ? v / x->t : v;
}

static double reshard(const ShardCtx *x, int from, int to, double bytes, CollKind *kind);

/* A linear layer's GEMM: a parameter operand, its result not the logits a loss reads
 * unless the classifier is in fp8 too (what passes/autocast.c compiles in fp8). */
static bool has_param(const Node *n) {
  for (int i = 0; i < n->nin; i++)
    if (n->in[i]->op == OP_PARAM) return true;
  return false;
}

/* The classifier: an op whose result a loss reads (its weight's gradient, which reads
 * the logits' gradient, runs in B: codegen/lower.c, w_nodes). */
static bool classifier(const PlanModel *pm, const Node *n) {
  for (int u = 0; u < pm->nuse[n->id]; u++)
    if (pm->g->nodes[pm->use[n->id][u]]->op == OP_CROSS_ENTROPY) return true;
  return false;
}

static bool linear_gemm(const PlanModel *pm, const Node *n, bool fp8_classifier) {
  if (n->in[0]->op != OP_PARAM && n->in[1]->op != OP_PARAM) return false;
  return fp8_classifier || !classifier(pm, n);
}

/* The cross-entropy that passes/decompose.c fuses with its classifier: of a matmul that
 * nothing else reads. */
static bool fused_classifier(const PlanModel *pm, const Node *ce) {
  const Node *m = ce->in[0];
  return m->op == OP_MATMUL && pm->nuse[m->id] == 1;
}

static void price_matmul(const ShardCtx *x, const Node *n, Strat *s, double ff, double fb, double by) {
  double eff = matmul_eff(x, n, s),
         peak = x->peak_fp8 > 0 && linear_gemm(x->pm, n, x->fp8_classifier) ? x->peak_fp8 : x->peak;
  s->t_fwd = cost_kernel(x->cl, ff, peak, eff, by);
  s->t_bwd = 2 * cost_kernel(x->cl, fb / 2, peak, eff, by); /* one GEMM for each input's gradient */
}

static void price_attention(const ShardCtx *x, const Node *n, Strat *s, double ff, double fb, double by) {
  double sco = scores(x, n, s), ef = 0, eb = 0, peak = x->peak, eff = x->cl->dev.attn_eff;
  if (x->attn == ATTN_MATERIALIZED) { /* scores written, softmaxed, read: 4 passes forward, 8 backward */
    ef = 4 * sco * x->act_bytes, eb = 8 * sco * x->act_bytes;
    s->stash_extra = sco * x->act_bytes;
  } else {
    s->stash_extra = micro_dim(x, n->in[0], 0) * (double)attr_int(n, "heads") * micro_dim(x, n->in[0], 1) * 4 /
                     (s->divided ? x->t : 1); /* log-sum-exp per query and head */
  }
  s->t_fwd = cost_kernel(x->cl, ff, peak, eff, by + ef);
  s->t_bwd = cost_kernel(x->cl, fb, peak, eff, 2 * by + eb);
  if (x->attn == ATTN_MATERIALIZED) s->t_sel = s->t_fwd;
}

/* Compute time of op n under strategy s (roofline on the op table's FLOPs and
 * bytes for one micro-batch on one device), and what it keeps for backward
 * besides its inputs and output. */
static void price_strategy(const ShardCtx *x, const Node *n, Strat *s) {
  const Cluster *cl = x->cl;
  Cost c;
  node_cost(n, &c);
  double div = s->divided ? x->t : 1, sc = cost_scale(x, n) / div;
  double prec = n->dtype == DT_F32 ? x->act_bytes / 4 : 1; /* activations in 16 bits under mixed precision */
  double ff = c.fwd_flops * sc, fb = c.bwd_flops * sc, by = c.bytes * sc * prec;
  s->flops_fwd = ff;
  if (n->op == OP_MATMUL || n->op == OP_ATTENTION) {
    (n->op == OP_MATMUL ? price_matmul : price_attention)(x, n, s, ff, fb, by);
    return;
  }
  double bb = dtype_is_float(n->dtype) ? (fb > 0 ? 2 : 1) * by : 0;
  s->t_fwd = cost_kernel(cl, ff, cl->dev.peak_fp32, 1, by);
  s->t_bwd = cost_kernel(cl, fb, cl->dev.peak_fp32, 1, bb);
  const Shape *sh = &n->in[0]->shape;
  double rows = numel_micro(x, n->in[0]) / (double)(sh->ndim ? sh->d[sh->ndim - 1] : 1);
  if (n->op == OP_SOFTMAX) s->t_sel = s->t_fwd;
  else if (n->op == OP_DROPOUT) s->stash_extra = numel_micro(x, n) / div; /* a byte of mask an element */
  else if (n->op == OP_LAYERNORM || n->op == OP_RMSNORM) s->stash_extra = rows * 8 / div; /* mean, rstd */
  else if (n->op == OP_CROSS_ENTROPY && x->classifier_fused && fused_classifier(x->pm, n)) {
    /* classifier_ce: nothing of the logits kept; backward computes them again (one GEMM) */
    Cost mc;
    node_cost(n->in[0], &mc);
    s->t_bwd += cost_kernel(cl, mc.fwd_flops * sc, x->peak, cl->dev.gemm_eff, 0);
  } else if (n->op == OP_CROSS_ENTROPY) { /* the logits, kept for the gradient, 16-bit under mixed precision */
    s->stash_extra = numel_micro(x, n->in[0]) * x->act_bytes / split(x, s->in[0]);
  }
  if (n->op == OP_CROSS_ENTROPY) {
    /* vocab-parallel: all-reduces of the rows' max, sum and target logit; by rows: of
     * the count of targets and of the loss (passes/partition.c) */
    bool vocab = s->out == PL_R && s->in[0] >= PL_S0, by_rows = s->out == PL_P;
    s->n_intr = vocab ? 3 : by_rows ? 2 : 0, s->c_intr_bytes = vocab ? rows * 4 : 4;
    if (s->n_intr) s->c_intr = s->n_intr * reshard(x, PL_P, PL_R, s->c_intr_bytes, NULL);
  }
}

/* ---- placements change: collectives on the tensor-parallel group ------------------ */

/* Time to turn a tensor of `bytes` from placement `from` into `to` (INFINITY when
 * no collective does it: nothing makes a partial sum). S(i) -> S(j) is an all-to-all
 * (passes/partition.c, exchange). */
static double reshard(const ShardCtx *x, int from, int to, double bytes, CollKind *kind) {
  Group g = {x->t, x->t};
  CollKind k;
  if (from == to || (from == PL_R && to != PL_P)) return 0;
  if (to == PL_P) return INFINITY;
  if (from == PL_P) k = to == PL_R ? COLL_ALL_REDUCE : COLL_REDUCE_SCATTER;
  else k = to == PL_R ? COLL_ALL_GATHER : COLL_ALL_TO_ALL;
  if (kind) *kind = k;
  return cost_collective(x->cl, k, bytes, g);
}

/* The placement of the gradient an op's backward produces for input i: a split
 * input gets a split gradient, a partial one the whole gradient, a replicated one
 * a partial sum when the op's work was divided. */
int shard_grad_placement(const Node *n, const Strat *s, int i) {
  if (s->in[i] >= PL_S0) return s->in[i];
  if (s->regroup >> i & 1) return PL_R;
  if (s->in[i] == PL_P) return PL_R;
  bool partial = s->divided;
  for (int k = 0; k < n->nin; k++) partial |= s->in[k] == PL_P;
  return partial ? PL_P : PL_R;
}

/* ---- one op under one strategy: the step of the dynamic program ------------------- */

/* Per micro-batch sums of a walk over ops. */
typedef struct Walk {
  double t_fwd, t_bwd, c_fwd, c_bwd, t_rc, stash, transient, params;
  double wcopy; /* the largest 16-bit copy of a GEMM's weight (SegCost.wcopy) */
} Walk;

static double walk_time(const Walk *w) { return w->t_fwd + w->t_bwd + w->c_fwd + w->c_bwd + w->t_rc; }
static double walk_mem(const Walk *w) { return w->stash + w->transient + w->params; }

static void coll_add(SegCost *acc, CollKind k, double bytes, double time) {
  if (!acc || time <= 0) return;
  for (int i = 0; i < acc->ncoll; i++)
    if (acc->coll[i].kind == k && acc->coll[i].bytes == bytes) {
      acc->coll[i].count += 1, acc->coll[i].time += time;
      return;
    }
  if (acc->ncoll < SEG_MAX_COLL) acc->coll[acc->ncoll++] = (CollUse){k, bytes, 1, time};
}

static double reshard_rec(const ShardCtx *x, int from, int to, double bytes, SegCost *acc) {
  CollKind k = COLL_ALL_REDUCE;
  double t = reshard(x, from, to, bytes, &k);
  if (isfinite(t)) coll_add(acc, k, bytes, t);
  return t;
}

/* Inputs of op n: forward reshard, backward gradient conversion, saved copies. */
static bool step_inputs(const ShardCtx *x, const Node *n, const Strat *s, const int *slot, const uint8_t *pl,
                        uint8_t *pb, Walk *w, SegCost *acc) {
  const PlanModel *pm = x->pm;
  for (int i = 0; i < n->nin; i++) {
    const Node *in = n->in[i];
    int req = s->in[i];
    if (in->op == OP_PARAM) {
      double elems = (double)shape_numel(&in->shape) / split(x, req);
      w->params += elems * x->state_bytes;
      if (n->op == OP_MATMUL && x->act_bytes < 4 && elems * x->act_bytes > w->wcopy) w->wcopy = elems * x->act_bytes;
      if (acc)
        acc->param[acc->nparam++] =
            (ParamUse){in->id, (uint8_t)req, elems, req == PL_R && shard_grad_placement(n, s, i) == PL_P};
      continue;
    }
    if (slot[i] < 0) continue; /* data inputs and constants: each rank reads its part */
    int cur = pl[slot[i]], g = shard_grad_placement(n, s, i), need = cur == PL_P ? PL_R : cur;
    double bytes = comm_tensor_bytes(x, in), f = reshard_rec(x, cur, req, bytes, acc);
    if (!isfinite(f)) return false;
    w->c_fwd += f;
    if (s->regroup >> i & 1) /* the gradients of the rank's blocks of the repeated copies gathered */
      w->c_bwd += reshard_rec(x, PL_S0 + in->shape.ndim - 1, PL_R, bytes * s->repeat, acc);
    if (g != PL_P) w->c_bwd += reshard_rec(x, g, need, bytes, acc);
    else if (!pb[slot[i]]) { /* partial gradients of all consumers are summed, then reduced once */
      w->c_bwd += reshard_rec(x, PL_P, need, bytes, acc);
      pb[slot[i]] = 1;
    }
    if (pm->saver[in->id] == n->id) {
      w->stash += tensor_bytes(x, in) * (s->regroup >> i & 1 ? (double)s->repeat / x->t : 1) /
                  (cur >= PL_S0 || req >= PL_S0 ? x->t : 1);
      /* gathered again for the backward (passes/recompute.c); an all-to-all's part is kept */
      if (cur >= PL_S0 && req == PL_R) w->c_bwd += reshard_rec(x, cur, req, bytes, acc);
    } else if (cur >= PL_S0 && req >= PL_S0 && req != cur && saves_input(n->op, i)) {
      /* another op stashes the input as it was; the backward of this one reads the part
       * the all-to-all gave it (passes/partition.c), which stays with the stash */
      w->stash += tensor_bytes(x, in) / x->t;
    }
  }
  return true;
}

/* The cost of running op n with strategy s on inputs placed as pl[slot[i]], with
 * the segment's recompute mode rc. false when s cannot follow these placements. */
static bool step_cost(const ShardCtx *x, Recompute rc, const Node *n, const Strat *s, const int *slot,
                      const uint8_t *pl, uint8_t *pb, Walk *w, SegCost *acc) {
  Walk in = {0};
  if (!step_inputs(x, n, s, slot, pl, pb, &in, acc)) return false;
  double out_stash = x->pm->saver[n->id] == n->id ? tensor_bytes(x, n) / split(x, s->out) : 0;
  double extra = s->stash_extra;
  w->params += in.params;
  if (in.wcopy > w->wcopy) w->wcopy = in.wcopy;
  w->t_fwd += s->t_fwd, w->t_bwd += s->t_bwd;
  w->c_fwd += in.c_fwd + s->c_intr, w->c_bwd += in.c_bwd;
  for (int r = 0; acc && s->c_intr > 0 && r < s->n_intr; r++)
    coll_add(acc, COLL_ALL_REDUCE, s->c_intr_bytes, s->c_intr / s->n_intr);
  if (rc == RC_SELECTIVE &&
      (s->t_sel > 0 || x->pm->rc_sel[n->id])) { /* the attention core is recomputed, its big tensors not kept */
    if (n->op == OP_SOFTMAX) out_stash = 0;
    else if (n->op == OP_ATTENTION) extra = 0;
    w->t_rc += s->t_sel > 0 ? s->t_sel : s->t_fwd;
    if (acc) acc->flops_rc += s->flops_fwd;
  }
  double stash = in.stash + out_stash + extra;
  if (rc == RC_FULL) { /* what the layer's backward reads is computed again before it */
    if (x->pm->rc_full[n->id]) {
      w->t_rc += s->t_fwd + in.c_fwd + s->c_intr;
      if (acc) acc->flops_rc += s->flops_fwd;
    }
    w->transient += stash;
  } else {
    w->stash += stash;
  }
  return true;
}

/* ---- the dynamic program over one segment ---------------------------------------- */

enum { MAX_SLOTS = 12, MAX_STATES = 1 << 14, MAX_BOUNDARY_STATES = 4096 };

/* The live tensors before each op of a segment and how they move between steps. */
typedef struct Layout {
  int *nlive;   /* [nops + 1] */
  int **live;   /* [nops + 1][nlive] node ids */
  int **map;    /* [nops][nlive[k]] slot at step k + 1, or -1 when the tensor dies */
  int *outslot; /* [nops] slot of op k's output at step k + 1, or -1 */
  int **inslot; /* [nops][nin] slot of each input at step k, -1 for sources */
  int maxlive;  /* most tensors live at once */
  bool wide;    /* more than MAX_SLOTS live at once: replicated only */
} Layout;

static int find_slot(const int *live, int n, int x) {
  for (int j = 0; j < n; j++)
    if (live[j] == x) return j;
  return -1;
}

static Layout *layout_new(Arena *a, const PlanModel *pm, const Segment *s) {
  Layout *L = arena_alloc(a, sizeof *L);
  int n = s->nops;
  L->nlive = arena_array(a, n + 1, sizeof(int));
  L->live = arena_array(a, n + 1, sizeof(int *));
  L->map = arena_array(a, n + 1, sizeof(int *));
  L->outslot = arena_array(a, n + 1, sizeof(int));
  L->inslot = arena_array(a, n + 1, sizeof(int *));
  L->nlive[0] = L->maxlive = s->nin;
  L->live[0] = s->in;
  L->wide = s->nin > MAX_SLOTS;
  for (int k = 0; k < n; k++) {
    const Node *op = pm->g->nodes[s->ops[k]];
    int m = L->nlive[k], *cur = L->live[k], *nx = arena_array(a, m + 2, sizeof(int)), nn = 0;
    L->inslot[k] = arena_array(a, op->nin + 1, sizeof(int));
    for (int i = 0; i < op->nin; i++) L->inslot[k][i] = find_slot(cur, m, op->in[i]->id);
    L->map[k] = arena_array(a, m + 1, sizeof(int));
    for (int j = 0; j < m; j++) {
      bool dies = last_use(pm, cur[j]) == op->id;
      L->map[k][j] = dies ? -1 : nn;
      if (!dies) nx[nn++] = cur[j];
    }
    L->outslot[k] = pm->nuse[op->id] ? nn : -1;
    if (pm->nuse[op->id]) nx[nn++] = op->id;
    L->nlive[k + 1] = nn;
    L->live[k + 1] = nx;
    L->wide |= nn > MAX_SLOTS || m > MAX_SLOTS;
    if (nn > L->maxlive) L->maxlive = nn;
    if (m > L->maxlive) L->maxlive = m;
  }
  return L;
}

/* States: 4 bits of placement per live slot, and at bit 48 + slot whether the
 * slot's partial gradient has been reduced already. */
static int key_pl(uint64_t key, int j) { return (int)(key >> (4 * j)) & 15; }
static int key_pb(uint64_t key, int j) { return (int)(key >> (48 + j)) & 1; }

typedef struct Ent {
  uint64_t key;
  double cost;
  int prev, strat;
} Ent;
typedef struct Tab {
  Ent *e;
  int n, cap;
  int *h;
  int hsize;
} Tab;

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n);
  if (!q) error_plain("out of memory in the plan search");
  return q;
}

static void tab_rehash(Tab *t, int hsize) {
  t->hsize = hsize;
  t->h = xrealloc(t->h, sizeof(int) * hsize);
  memset(t->h, -1, sizeof(int) * hsize);
  for (int i = 0; i < t->n; i++) {
    int b = (int)((t->e[i].key * 0x9E3779B97F4A7C15ull) >> 40) & (hsize - 1);
    while (t->h[b] >= 0) b = (b + 1) & (hsize - 1);
    t->h[b] = i;
  }
}

static void tab_clear(Tab *t) {
  t->n = 0;
  if (t->h) memset(t->h, -1, sizeof(int) * t->hsize);
}

/* The entry for key (new ones have cost INFINITY). */
static Ent *tab_get(Tab *t, uint64_t key) {
  if (2 * (t->n + 1) > t->hsize) tab_rehash(t, t->hsize ? 2 * t->hsize : 64);
  int b = (int)((key * 0x9E3779B97F4A7C15ull) >> 40) & (t->hsize - 1);
  while (t->h[b] >= 0) {
    if (t->e[t->h[b]].key == key) return &t->e[t->h[b]];
    b = (b + 1) & (t->hsize - 1);
  }
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 64;
    t->e = xrealloc(t->e, sizeof *t->e * t->cap);
  }
  t->h[b] = t->n;
  t->e[t->n] = (Ent){key, INFINITY, -1, -1};
  return &t->e[t->n++];
}

static int ent_cmp(const void *a, const void *b) {
  const Ent *x = a, *y = b;
  if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
  return x->key < y->key ? -1 : x->key > y->key;
}

/* Keep the MAX_STATES cheapest states (never reached by the models in models/). */
static void tab_prune(Tab *t) {
  if (t->n <= MAX_STATES) return;
  qsort(t->e, t->n, sizeof *t->e, ent_cmp);
  t->n = MAX_STATES;
  tab_rehash(t, t->hsize);
}

/* Scratch of the program, reused from segment to segment: the tables of each
 * step, and placements and reduced-gradient flags of the live tensors. */
typedef struct Work {
  Tab *tab;
  int ntab;
  uint8_t *pl;
  int nbuf;
} Work;

static void work_free(Work *w) {
  for (int i = 0; i < w->ntab; i++) {
    free(w->tab[i].e);
    free(w->tab[i].h);
  }
  free(w->tab);
  free(w->pl);
}

/* The strategies of a segment's ops under ctx. */
typedef struct SegStrats {
  Strat **st;
  int *nst;
  Layout *L;          /* of rep's nodes */
  const Segment *rep; /* the signature's first segment: the others are its copies */
  Recompute rc;
} SegStrats;

static Recompute seg_rc(const ShardCtx *x, const Segment *s) { return s->kind == SEG_LAYER ? x->rc : RC_NONE; }

static uint64_t next_key(const Layout *L, int k, const uint8_t *pl, const uint8_t *pb, int out) {
  if (L->wide) return 0;
  uint64_t key = 0;
  for (int j = 0; j < L->nlive[k]; j++)
    if (L->map[k][j] >= 0) key |= (uint64_t)pl[j] << (4 * L->map[k][j]) | (uint64_t)pb[j] << (48 + L->map[k][j]);
  if (L->outslot[k] >= 0) key |= (uint64_t)out << (4 * L->outslot[k]);
  return key;
}

static void dp_step(Work *w, const ShardCtx *x, const Segment *s, const SegStrats *ss, int k, double lambda) {
  const Layout *L = ss->L;
  Tab *cur = &w->tab[k], *nxt = &w->tab[k + 1];
  const Node *n = x->pm->g->nodes[s->ops[k]];
  tab_clear(nxt);
  int nb = L->maxlive + 1;
  if (w->nbuf < nb) {
    w->pl = xrealloc(w->pl, 3 * (size_t)nb);
    w->nbuf = nb;
  }
  uint8_t *pl = w->pl, *pb = pl + nb, *pb2 = pb + nb;
  memset(pl, 0, 2 * (size_t)nb);
  for (int e = 0; e < cur->n; e++) {
    uint64_t key = cur->e[e].key;
    for (int j = 0; j < L->nlive[k] && !L->wide; j++) pl[j] = (uint8_t)key_pl(key, j), pb[j] = (uint8_t)key_pb(key, j);
    for (int si = 0; si < ss->nst[k]; si++) {
      const Strat *st = &ss->st[k][si];
      Walk wk = {0};
      memcpy(pb2, pb, nb);
      if (L->wide && (st->out != PL_R || st->divided)) continue;
      if (!step_cost(x, ss->rc, n, st, L->inslot[k], pl, pb2, &wk, NULL)) continue;
      double c = cur->e[e].cost + walk_time(&wk) + lambda * walk_mem(&wk);
      Ent *ne = tab_get(nxt, next_key(L, k, pl, pb2, st->out));
      if (c < ne->cost) ne->cost = c, ne->prev = e, ne->strat = si;
    }
  }
  tab_prune(nxt);
}

/* ---- boundaries between segments ------------------------------------------------ */

/* Placements a boundary tensor may take (R, P, S(0..ndim-1)), or 1 (R only) for
 * every tensor of a boundary with too many combinations. */
static void boundary_radix(const PlanModel *pm, const int *t, int n, int *radix, int *nstates) {
  double total = 1;
  for (int i = 0; i < n; i++) {
    radix[i] = 2 + pm->g->nodes[t[i]]->shape.ndim;
    total *= radix[i];
  }
  if (total > MAX_BOUNDARY_STATES)
    for (int i = 0; i < n; i++) radix[i] = 1;
  *nstates = 1;
  for (int i = 0; i < n; i++) *nstates *= radix[i];
}

static void state_decode(int state, const int *radix, int n, uint8_t *pl) {
  for (int i = 0; i < n; i++) {
    pl[i] = (uint8_t)(state % radix[i]);
    state /= radix[i];
  }
}

/* The best way through one segment from one entry state to every exit state. */
typedef struct SegSol {
  bool done;
  int nout;
  double *cost;
  int **choice; /* [nout][nops] */
} SegSol;

static int out_state(const PlanModel *pm, const Segment *s, const Layout *L, uint64_t key, const int *radix) {
  int state = 0, mult = 1;
  for (int q = 0; q < s->nout; q++) {
    int j = find_slot(L->live[s->nops], L->nlive[s->nops], s->out[q]);
    int pl = j >= 0 && !L->wide ? key_pl(key, j) : PL_R;
    if (pl >= radix[q]) return -1;
    state += pl * mult;
    mult *= radix[q];
  }
  return state;
}

static double boundary_stash(const ShardCtx *x, const Segment *s, const uint8_t *pl) {
  double b = 0;
  for (int i = 0; i < s->nin; i++) b += comm_tensor_bytes(x, x->pm->g->nodes[s->in[i]]) / split(x, pl[i]);
  return b;
}

static void seg_solve(Arena *a, Work *w, const ShardCtx *x, const Segment *s, const SegStrats *ss, int in_state,
                      double lambda, SegSol *sol) {
  const PlanModel *pm = x->pm;
  int *rin = arena_array(a, s->nin + 1, sizeof(int)), *rout = arena_array(a, s->nout + 1, sizeof(int));
  int nin_states, nout_states;
  uint8_t *pl = arena_alloc(a, s->nin + 1);
  boundary_radix(pm, s->in, s->nin, rin, &nin_states);
  boundary_radix(pm, s->out, s->nout, rout, &nout_states);
  sol->done = true;
  sol->nout = nout_states;
  sol->cost = arena_array(a, nout_states, sizeof(double));
  sol->choice = arena_array(a, nout_states, sizeof(int *));
  for (int o = 0; o < nout_states; o++) sol->cost[o] = INFINITY;
  state_decode(in_state, rin, s->nin, pl);
  for (int i = 0; i < s->nin; i++)
    if (!legal(x, pm->g->nodes[s->in[i]], pl[i]) || (ss->L->wide && pl[i] != PL_R)) return;
  if (w->ntab < s->nops + 1) {
    w->tab = xrealloc(w->tab, sizeof *w->tab * (s->nops + 1));
    memset(w->tab + w->ntab, 0, sizeof *w->tab * (s->nops + 1 - w->ntab));
    w->ntab = s->nops + 1;
  }
  uint64_t key0 = 0;
  for (int i = 0; i < s->nin && !ss->L->wide; i++) key0 |= (uint64_t)pl[i] << (4 * i);
  tab_clear(&w->tab[0]);
  tab_get(&w->tab[0], key0)->cost = ss->rc == RC_FULL ? lambda * boundary_stash(x, s, pl) : 0;
  for (int k = 0; k < s->nops; k++) dp_step(w, x, s, ss, k, lambda);
  Tab *end = &w->tab[s->nops];
  for (int e = 0; e < end->n; e++) {
    int o = out_state(pm, s, ss->L, end->e[e].key, rout);
    if (o < 0 || end->e[e].cost >= sol->cost[o]) continue;
    sol->cost[o] = end->e[e].cost;
    int *ch = sol->choice[o] = arena_array(a, s->nops + 1, sizeof(int));
    for (int k = s->nops, i = e; k > 0; k--) {
      ch[k - 1] = w->tab[k].e[i].strat;
      i = w->tab[k].e[i].prev;
    }
  }
}

/* ---- a whole-graph sharding: the chain of segments ---------------------------------- */

/* What a split backward's weight-gradient pass (ZB-H1's W) reads of op n (output `bytes`
 * under strategy st) after its B, n having a parameter and not being the classifier: the
 * output's gradient (*dy: as the activation; none for a bias added to a weight op's
 * result, whose gradient is that op's), and the inputs its backward reads, each counted
 * at the op that stashes it (q, k and v's GEMMs read one tensor). */
static double wgrad_bytes(const ShardCtx *x, const Node *n, const Strat *st, double bytes, double *dy) {
  const PlanModel *pm = x->pm;
  double b = 0;
  *dy = bytes;
  for (int i = 0; i < n->nin; i++) {
    const Node *in = n->in[i];
    if ((n->op == OP_ADD || n->op == OP_SUB) && is_computed(in) && has_param(in)) *dy = 0;
    if (is_computed(in) && saves_input(n->op, i) && pm->saver[in->id] == n->id)
      b += tensor_bytes(x, in) / split(x, st->in[i]);
  }
  return b + *dy;
}

/* Replay a chosen sharding of segment s from entry placements pl0, pricing every
 * step with step_cost (the same prices the program compared). */
static void seg_replay(Arena *a, const ShardCtx *x, const Segment *s, const SegStrats *ss, const int *choice,
                       const uint8_t *pl0, SegCost *out) {
  const PlanModel *pm = x->pm;
  const Layout *L = ss->L;
  int nparam = 0, m = 0;
  for (int k = 0; k < s->nops; k++)
    for (int i = 0; i < pm->g->nodes[s->ops[k]]->nin; i++) nparam += pm->g->nodes[s->ops[k]]->in[i]->op == OP_PARAM;
  for (int k = 0; k <= s->nops; k++) m = L->nlive[k] > m ? L->nlive[k] : m;
  *out = (SegCost){.param = arena_array(a, nparam + 1, sizeof(ParamUse))};
  uint8_t *pl = arena_alloc(a, m + 1), *pb = arena_alloc(a, m + 1), *npl = arena_alloc(a, m + 1),
          *npb = arena_alloc(a, m + 1);
  memcpy(pl, pl0, s->nin);
  Walk w = {0};
  double out_max = 0, out_max_w = 0; /* the largest output of an op; of one whose gradient W does not keep */
  for (int k = 0; k < s->nops; k++) {
    const Strat *st = &ss->st[k][choice[k]];
    const Node *n = pm->g->nodes[s->ops[k]];
    step_cost(x, ss->rc, n, st, L->inslot[k], pl, pb, &w, out);
    double bytes = tensor_bytes(x, n) / split(x, st->out);
    if (bytes > out_max) out_max = bytes;
    double dy = 0;
    if (has_param(n) && !classifier(pm, n)) { /* its parameters' gradients wait for W */
      out->wgrad_hold += wgrad_bytes(x, n, st, bytes, &dy);
      out->t_w += cost_wgrad_time(st->t_bwd);
    } else if (bytes > out_max_w) out_max_w = bytes;
    if (dy > 0) out->wgrad_first = dy;
    memset(npl, 0, m + 1), memset(npb, 0, m + 1);
    for (int j = 0; j < L->nlive[k]; j++)
      if (L->map[k][j] >= 0) npl[L->map[k][j]] = pl[j], npb[L->map[k][j]] = pb[j];
    if (L->outslot[k] >= 0) npl[L->outslot[k]] = st->out;
    memcpy(pl, npl, m + 1), memcpy(pb, npb, m + 1);
  }
  out->t_fwd = w.t_fwd, out->t_bwd = w.t_bwd, out->c_fwd = w.c_fwd, out->c_bwd = w.c_bwd, out->t_rc = w.t_rc;
  out->stash = w.stash + (ss->rc == RC_FULL ? boundary_stash(x, s, pl0) : 0);
  out->transient = w.transient;
  out->grad_work = out_max + boundary_stash(x, s, pl0);
  out->grad_work_w = out_max_w + boundary_stash(x, s, pl0);
  out->wcopy = w.wcopy;
  for (int q = 0; q < s->nout; q++) { /* s's q-th output is rep's q-th, in rep's layout */
    int j = find_slot(L->live[s->nops], L->nlive[s->nops], ss->rep->out[q]);
    double b = comm_tensor_bytes(x, pm->g->nodes[s->out[q]]);
    if (j >= 0 && pl[j] >= PL_S0) out->xfer_split += b / x->t;
    else out->xfer_whole += b;
  }
}

typedef struct Chain {
  SegSol **sol; /* [nsig][in states] */
  int *nin_states;
} Chain;

/* The cheapest sharding for one λ: the segments' tables chained over the graph. */
static ShardCand chain_solve(Arena *a, Work *w, const ShardCtx *x, SegStrats *ss, double lambda) {
  const PlanModel *pm = x->pm;
  int nseg = pm->nseg;
  SegSol **sol = arena_array(a, pm->nsig, sizeof *sol);
  double **cost = arena_array(a, nseg + 1, sizeof *cost);
  int **back = arena_array(a, nseg + 1, sizeof *back), *nst = arena_array(a, nseg + 1, sizeof(int));
  int **radix = arena_array(a, nseg + 1, sizeof *radix);
  for (int b = 0; b <= nseg; b++) {
    const int *t = b < nseg ? pm->seg[b].in : pm->seg[nseg - 1].out;
    int n = b < nseg ? pm->seg[b].nin : pm->seg[nseg - 1].nout;
    radix[b] = arena_array(a, n + 1, sizeof(int));
    boundary_radix(pm, t, n, radix[b], &nst[b]);
    cost[b] = arena_array(a, nst[b], sizeof(double));
    back[b] = arena_array(a, nst[b], sizeof(int));
    for (int i = 0; i < nst[b]; i++) cost[b][i] = INFINITY;
  }
  for (int k = 0; k < pm->nsig; k++) sol[k] = NULL;
  cost[0][0] = 0;
  for (int k = 0; k < nseg; k++) {
    const Segment *s = &pm->seg[k];
    if (!sol[s->sig]) sol[s->sig] = arena_array(a, nst[k], sizeof(SegSol));
    for (int i = 0; i < nst[k]; i++) {
      if (!isfinite(cost[k][i])) continue;
      SegSol *so = &sol[s->sig][i];
      if (!so->done) seg_solve(a, w, x, s, &ss[s->sig], i, lambda, so);
      for (int o = 0; o < so->nout; o++)
        if (cost[k][i] + so->cost[o] < cost[k + 1][o]) cost[k + 1][o] = cost[k][i] + so->cost[o], back[k + 1][o] = i;
    }
  }
  int best = 0;
  for (int o = 1; o < nst[nseg]; o++)
    if (cost[nseg][o] < cost[nseg][best]) best = o;
  if (!isfinite(cost[nseg][best])) error_plain("no sharding of the graph is legal (internal: every strategy refused)");
  ShardCand c = {.st = arena_array(a, pm->g->n, sizeof(Strat *)), .seg = arena_array(a, nseg, sizeof(SegCost))};
  for (int k = nseg - 1, state = best; k >= 0; k--) {
    const Segment *s = &pm->seg[k];
    int in = back[k + 1][state];
    const int *choice = sol[s->sig][in].choice[state];
    for (int j = 0; j < s->nops; j++) c.st[s->ops[j]] = &ss[s->sig].st[j][choice[j]];
    uint8_t *pl = arena_alloc(a, s->nin + 1);
    state_decode(in, radix[k], s->nin, pl);
    seg_replay(a, x, s, &ss[s->sig], choice, pl, &c.seg[k]);
    state = in;
  }
  return c;
}

/* A forced strategy: its name ("column": the first of that name), or its name,
 * output and input placements ("split S(2) S(2),S(0)": exactly that one), as
 * plan files write them. */
static bool strat_matches(const Node *n, const Strat *s, const char *f) {
  size_t len = strlen(s->name);
  if (strncmp(f, s->name, len) || (f[len] && f[len] != ' ')) return false;
  if (!f[len]) return true;
  char key[512], pb[16];
  int k = snprintf(key, sizeof key, "%s %s ", s->name, placement_name(s->out, pb));
  for (int i = 0; i < n->nin && k < (int)sizeof key - 16; i++)
    k += snprintf(key + k, sizeof key - k, "%s%s", i ? "," : "", placement_name(s->in[i], pb));
  return !strcmp(key, f);
}

/* Strategies of every op of each signature's first segment, priced under x;
 * a forced strategy (x->force) leaves only that one. */
static SegStrats *build_strategies(Arena *a, const ShardCtx *x) {
  const PlanModel *pm = x->pm;
  SegStrats *ss = arena_array(a, pm->nsig, sizeof *ss);
  for (int k = 0; k < pm->nseg; k++) {
    const Segment *s = &pm->seg[k];
    SegStrats *q = &ss[s->sig];
    if (q->st) continue;
    q->L = layout_new(a, pm, s);
    q->rep = s;
    q->rc = seg_rc(x, s);
    q->st = arena_array(a, s->nops + 1, sizeof(Strat *));
    q->nst = arena_array(a, s->nops + 1, sizeof(int));
    for (int j = 0; j < s->nops; j++) {
      const Node *n = pm->g->nodes[s->ops[j]];
      q->st[j] = gen_strategies(a, x, n, &q->nst[j]);
      for (int i = 0; i < q->nst[j]; i++) price_strategy(x, n, &q->st[j][i]);
      const char *f = x->force ? x->force[n->id] : NULL;
      if (!f) continue;
      int keep = -1;
      for (int i = 0; i < q->nst[j] && keep < 0; i++)
        if (strat_matches(n, &q->st[j][i], f)) keep = i;
      if (keep < 0)
        error_plain(
            "the plan forces strategy '%s' on op %%%d (%s), which is not legal there with tensor parallelism %d "
            "and micro-batches of %d",
            f, n->id, op_info(n->op)->name, x->t, x->mbs);
      q->st[j] += keep;
      q->nst[j] = 1;
    }
  }
  return ss;
}

static void cand_totals(const ShardCtx *x, const ShardCand *c, double *time, double *mem) {
  *time = *mem = 0;
  for (int k = 0; k < x->pm->nseg; k++) {
    const SegCost *s = &c->seg[k];
    *time += s->t_fwd + s->t_bwd + s->c_fwd + s->c_bwd + s->t_rc;
    *mem += s->stash + s->transient;
    for (int p = 0; p < s->nparam; p++) *mem += s->param[p].elems * x->state_bytes;
  }
}

static bool cand_same(const PlanModel *pm, const ShardCand *a, const ShardCand *b) {
  return !memcmp(a->st, b->st, sizeof *a->st * pm->g->n);
}

int shard_candidates(Arena *a, const ShardCtx *x, ShardCand **out) {
  static const double sweep[] = {0, 0.03, 0.1, 0.3, 1, 3, 10, 100};
  enum { NSWEEP = sizeof sweep / sizeof sweep[0] };
  Work w = {0};
  SegStrats *ss = build_strategies(a, x);
  ShardCand *c = arena_array(a, NSWEEP, sizeof *c);
  int n = 0;
  double t0 = 0, m0 = 0;
  for (int i = 0; i < NSWEEP; i++) {
    double lambda = i == 0 ? 0 : sweep[i] * t0 / (m0 > 0 ? m0 : 1);
    ShardCand cand = chain_solve(a, &w, x, ss, lambda);
    if (i == 0) cand_totals(x, &cand, &t0, &m0);
    bool dup = false;
    for (int k = 0; k < n && !dup; k++) dup = cand_same(x->pm, &c[k], &cand);
    if (!dup) c[n++] = cand;
    if (x->t <= 1) break; /* one strategy per op: nothing to trade */
  }
  work_free(&w);
  *out = c;
  return n;
}
