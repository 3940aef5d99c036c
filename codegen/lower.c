/* Lowering: differentiated graph -> Program (codegen/lower.h).
 *
 * Every node's value is either an expression (computed inline by whoever reads it)
 * or a layout: a buffer with an element offset and strides, so reshape, transpose,
 * slice and broadcast of a buffer are views. Kernels and GEMMs are appended to the
 * step's instruction list in graph order; each buffer's lifetime is the span of
 * instructions that touch it, and the memory plan gives buffers of disjoint
 * lifetimes the same bytes of the work tier. */
#include "codegen/lower.h"
#include "codegen/cuda.h"
#include "codegen/offload.h"
#include "codegen/zero.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "passes/summary.h"
#include "program/program.h"

enum { PENDING = 100 }; /* KBuf tiers >= PENDING name an LBuf until the memory plan */

/* shared: WORK bytes at a fixed offset of slot 0, whatever slot the instruction runs in
 * (a pipeline stage's fp8 scaling states, KBuf.shared); the memory plan leaves it be. */
typedef struct LBuf {
  int tier;
  int64_t bytes, offset;
  int first, last;
  bool pinned, placed, shared;
  bool scratch; /* a pipeline chunk's, alive within one of its passes (lower_stage: the working set) */
} LBuf;

typedef enum { V_NONE, V_EXPR, V_LAYOUT } VKind;
typedef struct Val {
  VKind kind;
  int buf;
  int64_t offset;
  int64_t strides[MAX_DIMS];
} Val;

typedef struct L {
  Graph *g;
  Program *p;
  Arena *a;
  Val *val;              /* [g->n] */
  int *uses;             /* [g->n] */
  const Node **user;     /* [g->n] a node that reads it (the only one when uses is 1) */
  bool *fused;           /* [g->n] computed by another node's instruction (a GEMM's epilogue) */
  bool *summed;          /* [g->n] a parameter's gradient summed in its slot by its terms (slot_terms) */
  const Node **gelu;     /* [g->n] its only GELU reader (&several_gelus: more than one), or NULL */
  const Node **bgrad_of; /* [g->n] of a matmul: the bias gradient (a sum_to, deferred to it)
                            that its GEMM sums from its B operand (bgrad_gemm), or NULL */
  bool *need_layout;     /* [g->n] */
  int *grad_of;          /* [g->n] the param index whose gradient this node is, or -1 */
  bool *slot_used;       /* [nparams] the gradient slot already holds a result */
  int *pidx;             /* [nparams] the program's index of each of the graph's parameters */
  PSeq *seq;             /* where the graph's instructions go */
  LBuf *bufs;
  int nbufs, bufs_cap;
  const Node *at;     /* node being lowered */
  int fp8_buf;        /* the fp8 scaling states' buffer (lower_fp8_state), -1 until one */
  int64_t fp8_width;  /* a state's elements (2 + history) */
  int fp8_rows;       /* states placed so far (a stage's chunks: from the ones before) */
  int fp8_amax;       /* the step's gathered amaxes (emit_fp8_update), -1 until made */
  bool trust_pending; /* LAMB: Program.trust_offset is a work buffer's index, not yet placed */
  bool split_w;       /* a pipeline chunk's backward lowered as two passes, B then W (lower_stage) */
  int nb;             /* then: the instruction where W begins in l->seq; -1 otherwise */
} L;

/* ---- buffers and instructions ---------------------------------------------------- */

static int lbuf_new(L *l, int tier, int64_t bytes) {
  if (l->nbufs == l->bufs_cap) {
    int cap = l->bufs_cap ? 2 * l->bufs_cap : 256;
    LBuf *b = arena_array(l->a, cap, sizeof *b);
    if (l->nbufs) memcpy(b, l->bufs, l->nbufs * sizeof *b);
    l->bufs = b;
    l->bufs_cap = cap;
  }
  l->bufs[l->nbufs] = (LBuf){.tier = tier, .bytes = (bytes + 63) & ~(int64_t)63, .first = -1, .last = -1};
  return l->nbufs++;
}

static void touch(L *l, int buf, int instr) {
  LBuf *b = &l->bufs[buf];
  if (b->first < 0 || instr < b->first) b->first = instr;
  if (instr > b->last) b->last = instr;
}

IsaInstr *pseq_push(Arena *a, PSeq *s, IsaOp op) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 256;
    IsaInstr *v = arena_array(a, cap, sizeof *v);
    if (s->n) memcpy(v, s->v, s->n * sizeof *v);
    s->v = v;
    s->cap = cap;
  }
  IsaInstr *in = &s->v[s->n++];
  *in = isa_instr(op);
  return in;
}

static IsaInstr *emit(L *l, PSeq *s, IsaOp op) {
  IsaInstr *in = pseq_push(l->a, s, op);
  in->node = l->at ? l->at->id : -1;
  return in;
}

static void contiguous(const Shape *s, int64_t *strides) {
  int64_t st = 1;
  for (int d = s->ndim - 1; d >= 0; d--) {
    strides[d] = st;
    st *= s->d[d];
  }
}

static Val layout_of(int buf, const Shape *s) {
  Val v = {V_LAYOUT, buf, 0, {0}};
  contiguous(s, v.strides);
  return v;
}

/* n: a cast of a 16-bit value to f32, which is exact (the value itself, widened). */
static bool widening(const Node *n) {
  return n->op == OP_CAST && n->dtype == DT_F32 && (n->in[0]->dtype == DT_BF16 || n->in[0]->dtype == DT_F16);
}

/* ---- kernels ------------------------------------------------------------------------ */

static Kernel *knew(L *l, const char *what, KPar par, const int64_t *dims, int ndims, int row_dims) {
  char name[64];
  snprintf(name, sizeof name, "k%d_%s", l->p->nkernels, what);
  int64_t one = 1;
  if (ndims == 0) {
    dims = &one;
    ndims = 1;
  }
  return kernel_new(l->a, name, par, dims, ndims, row_dims);
}

static int kbuf(L *l, Kernel *k, int buf, DType dt) {
  return kernel_buf(k, "b", PENDING + buf, 0, l->bufs[buf].bytes / (dtype_size_bits(dt) / 8), dt);
}

/* Append kernel k to seq and record which buffers it touches. */
static void kfinish(L *l, PSeq *s, Kernel *k) {
  kernel_check(k);
  if (l->p->nkernels == l->p->kernels_cap) {
    int cap = l->p->kernels_cap ? 2 * l->p->kernels_cap : 128;
    Kernel **v = arena_array(l->a, cap, sizeof *v);
    if (l->p->nkernels) memcpy(v, l->p->kernels, l->p->nkernels * sizeof *v);
    l->p->kernels = v;
    l->p->kernels_cap = cap;
  }
  for (int i = 0; i < k->nbufs; i++)
    if (k->bufs[i].tier >= PENDING) k->bufs[i].name = arena_printf(l->a, "buf%d", k->bufs[i].tier - PENDING);
  IsaInstr *in = emit(l, s, ISA_KERNEL);
  in->kernel.id = l->p->nkernels;
  in->kernel.extent = k->par == KP_ROWS ? k->rows : k->cols;
  l->p->kernels[l->p->nkernels++] = k;
  if (s == l->seq)
    for (int i = 0; i < k->nbufs; i++) touch(l, k->bufs[i].tier - PENDING, l->seq->n - 1);
}

/* ---- expressions ----------------------------------------------------------------- */

/* ax[d]: the kernel axis that node dimension d runs along. */
typedef struct AxMap {
  int ax[MAX_DIMS];
} AxMap;

static AxMap right_aligned(const Kernel *k, int ndim) {
  AxMap m = {{0}};
  for (int d = 0; d < ndim; d++) m.ax[d] = k->ndims - ndim + d;
  return m;
}

/* The map of an input broadcast (right-aligned) into its consumer's dimensions. */
static AxMap input_map(const Node *n, const Node *in, AxMap m) {
  AxMap r;
  for (int d = 0; d < in->shape.ndim; d++) r.ax[d] = m.ax[n->shape.ndim - in->shape.ndim + d];
  return r;
}

static KView view_of(L *l, const Kernel *k, const Node *n, AxMap m) {
  const Val *v = &l->val[n->id];
  KView kv = {.offset = v->offset};
  for (int d = 0; d < n->shape.ndim; d++)
    if (n->shape.d[d] != 1 || k->dims[m.ax[d]] == 1) kv.strides[m.ax[d]] += n->shape.d[d] == 1 ? 0 : v->strides[d];
  return kv;
}

static KExpr *expr(L *l, Kernel *k, const Node *n, AxMap m);

static KExpr *load(L *l, Kernel *k, const Node *n, AxMap m) {
  const Val *v = &l->val[n->id];
  ir_assert(v->kind == V_LAYOUT);
  return kx_load(l->a, k, kbuf(l, k, v->buf, n->dtype), view_of(l, k, n, m));
}

#define C(x) kx_const(l->a, k, (float)(x))
#define U(op, x) kx_unary(l->a, k, KU_##op, x)
#define B(op, x, y) kx_binary(l->a, k, KB_##op, x, y)
#define SEL(c, x, y) kx_select(l->a, k, c, x, y)

static KExpr *in_expr(L *l, Kernel *k, const Node *n, int i, AxMap m) {
  return expr(l, k, n->in[i], input_map(n, n->in[i], m));
}

static KExpr *gelu(L *l, Kernel *k, KExpr *x) {
  KExpr *u = B(MUL, C(0.7978845608028654), B(ADD, x, B(MUL, C(0.044715), B(MUL, x, B(MUL, x, x)))));
  return B(MUL, B(MUL, C(0.5), x), B(ADD, C(1), U(TANH, u)));
}

static KExpr *gelu_grad(L *l, Kernel *k, KExpr *x, KExpr *g) {
  KExpr *x2 = B(MUL, x, x);
  KExpr *t = U(TANH, B(MUL, C(0.7978845608028654), B(ADD, x, B(MUL, C(0.044715), B(MUL, x, x2)))));
  KExpr *du = B(MUL, C(0.7978845608028654), B(ADD, C(1), B(MUL, C(3 * 0.044715), x2)));
  KExpr *d = B(ADD, B(MUL, C(0.5), B(ADD, C(1), t)), B(MUL, B(MUL, C(0.5), x), B(MUL, B(SUB, C(1), B(MUL, t, t)), du)));
  return B(MUL, g, d);
}

/* erf(x) in f32 to within 5e-7 (Eigen's and XLA's rational approximation): x clamped to
 * [-4, 4] (beyond it erf is +-1 in f32), then x P(x^2) / Q(x^2). */
static KExpr *erf_approx(L *l, Kernel *k, KExpr *x) {
  static const double p[] = {-2.72614225801306e-10, 2.77068142495902e-08,  -2.10102402082508e-06, -5.69250639462346e-05,
                             -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02};
  static const double q[] = {-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
                             -1.42647390514189e-02};
  KExpr *c = B(MIN, B(MAX, x, C(-4)), C(4)), *c2 = B(MUL, c, c), *num = C(p[0]), *den = C(q[0]);
  for (int i = 1; i < 7; i++) num = B(ADD, B(MUL, num, c2), C(p[i]));
  for (int i = 1; i < 5; i++) den = B(ADD, B(MUL, den, c2), C(q[i]));
  return B(DIV, B(MUL, c, num), den);
}

/* 0.5 (1 + erf(x / sqrt 2)): the standard normal CDF, GELU's erf form over x */
static KExpr *normal_cdf(L *l, Kernel *k, KExpr *x) {
  return B(MUL, C(0.5), B(ADD, C(1), erf_approx(l, k, B(MUL, x, C(M_SQRT1_2)))));
}

static KExpr *sigmoid(L *l, Kernel *k, KExpr *x) { return U(RECIP, B(ADD, C(1), U(EXP, U(NEG, x)))); }

/* rotary: x[c] cos + sign * partner sin, partner = -x[c + half] below half, x[c - half] above. */
static KExpr *rotary(L *l, Kernel *k, const Node *n, AxMap m) {
  const Node *x = n->in[0];
  int nd = n->shape.ndim;
  int64_t hd = n->shape.d[nd - 1] / attr_int(n, "heads"), half = hd / 2;
  KExpr *pos = kx_coord(l->a, k, m.ax[nd - 2]), *c = kx_coord(l->a, k, m.ax[nd - 1]);
  KExpr *i = B(SUB, c, B(MUL, U(FLOOR, B(DIV, c, C(hd))), C(hd)));
  KExpr *lower = B(LT, i, C(half));
  KExpr *kk = SEL(lower, i, B(SUB, i, C(half)));
  KExpr *freq = U(EXP, B(MUL, kk, C(-2.0 * log(attr_float(n, "theta")) / (double)hd)));
  double f = attr_float(n, "scaling");
  if (f != 1) { /* freq ((1 - s) / f + s), s the blend clamped to [0, 1] (ir/shape.c, rotary_freq) */
    double lo = attr_float(n, "low_freq"), hi = attr_float(n, "high_freq"), ctx = (double)attr_int(n, "original_ctx");
    KExpr *s = B(DIV, B(SUB, B(MUL, freq, C(ctx / (2 * M_PI))), C(lo)), C(hi - lo));
    s = B(MIN, B(MAX, s, C(0)), C(1));
    freq = B(MUL, freq, B(ADD, B(MUL, B(SUB, C(1), s), C(1 / f)), s));
  }
  KExpr *ang = B(MUL, pos, freq);
  KView pv = view_of(l, k, x, m);
  pv.gather = SEL(lower, C(half), C(-half));
  pv.gather_stride = l->val[x->id].strides[nd - 1];
  KExpr *partner = kx_load(l->a, k, kbuf(l, k, l->val[x->id].buf, x->dtype), pv);
  KExpr *signed_p = SEL(lower, U(NEG, partner), partner);
  if (attr_int(n, "inverse")) signed_p = U(NEG, signed_p);
  return B(ADD, B(MUL, load(l, k, x, m), U(COS, ang)), B(MUL, signed_p, U(SIN, ang)));
}

static KExpr *embedding(L *l, Kernel *k, const Node *n, AxMap m) {
  const Node *t = n->in[0], *ix = n->in[1];
  const Val *tv = &l->val[t->id];
  ir_assert(tv->kind == V_LAYOUT);
  AxMap im;
  for (int d = 0; d < ix->shape.ndim; d++) im.ax[d] = m.ax[d];
  KView v = {.offset = tv->offset, .gather = expr(l, k, ix, im), .gather_stride = tv->strides[0]};
  v.strides[m.ax[n->shape.ndim - 1]] = tv->strides[1];
  return kx_load(l->a, k, kbuf(l, k, tv->buf, t->dtype), v);
}

static KExpr *expr_const(L *l, Kernel *k, const Node *n, AxMap m) { return C(attr_float(n, "value")); }
static KExpr *expr_arange(L *l, Kernel *k, const Node *n, AxMap m) { return kx_coord(l->a, k, m.ax[0]); }
static KExpr *expr_loss_scale(L *l, Kernel *k, const Node *n, AxMap m) { return kx_scalar(l->a, k, SC_LOSS_SCALE); }
static KExpr *expr_add(L *l, Kernel *k, const Node *n, AxMap m) {
  return B(ADD, in_expr(l, k, n, 0, m), in_expr(l, k, n, 1, m));
}
static KExpr *expr_sub(L *l, Kernel *k, const Node *n, AxMap m) {
  return B(SUB, in_expr(l, k, n, 0, m), in_expr(l, k, n, 1, m));
}
static KExpr *expr_mul(L *l, Kernel *k, const Node *n, AxMap m) {
  return B(MUL, in_expr(l, k, n, 0, m), in_expr(l, k, n, 1, m));
}
static KExpr *expr_div(L *l, Kernel *k, const Node *n, AxMap m) {
  return B(DIV, in_expr(l, k, n, 0, m), in_expr(l, k, n, 1, m));
}
static KExpr *expr_neg(L *l, Kernel *k, const Node *n, AxMap m) { return U(NEG, in_expr(l, k, n, 0, m)); }
static KExpr *expr_gelu(L *l, Kernel *k, const Node *n, AxMap m) { return gelu(l, k, in_expr(l, k, n, 0, m)); }
static KExpr *expr_silu(L *l, Kernel *k, const Node *n, AxMap m) {
  KExpr *x = in_expr(l, k, n, 0, m);
  return B(MUL, x, sigmoid(l, k, x));
}
static KExpr *expr_gelu_erf(L *l, Kernel *k, const Node *n, AxMap m) {
  KExpr *x = in_expr(l, k, n, 0, m);
  return B(MUL, x, normal_cdf(l, k, x));
}
/* g (cdf(x) + x phi(x)), phi the standard normal density */
static KExpr *expr_gelu_erf_grad(L *l, Kernel *k, const Node *n, AxMap m) {
  KExpr *x = in_expr(l, k, n, 0, m);
  KExpr *phi = B(MUL, C(0.3989422804014327), U(EXP, B(MUL, C(-0.5), B(MUL, x, x))));
  return B(MUL, in_expr(l, k, n, 1, m), B(ADD, normal_cdf(l, k, x), B(MUL, x, phi)));
}
static KExpr *expr_relu(L *l, Kernel *k, const Node *n, AxMap m) { return B(MAX, in_expr(l, k, n, 0, m), C(0)); }
static KExpr *expr_gelu_grad(L *l, Kernel *k, const Node *n, AxMap m) {
  return gelu_grad(l, k, in_expr(l, k, n, 0, m), in_expr(l, k, n, 1, m));
}
static KExpr *expr_silu_grad(L *l, Kernel *k, const Node *n, AxMap m) {
  KExpr *x = in_expr(l, k, n, 0, m), *s = sigmoid(l, k, x);
  return B(MUL, in_expr(l, k, n, 1, m), B(MUL, s, B(ADD, C(1), B(MUL, x, B(SUB, C(1), s)))));
}
static KExpr *expr_relu_grad(L *l, Kernel *k, const Node *n, AxMap m) {
  return SEL(B(LT, C(0), in_expr(l, k, n, 0, m)), in_expr(l, k, n, 1, m), C(0));
}
/* dropout keeps an element when its uniform (ir/rand.h, keyed by the op's seed, the
 * step and the element's index in the op's own shape) is at least p */
static KExpr *expr_dropout(L *l, Kernel *k, const Node *n, AxMap m) {
  double p = attr_float(n, "p");
  KExpr *x = in_expr(l, k, n, 0, m);
  if (p == 0) return x;
  int64_t st[MAX_DIMS];
  contiguous(&n->shape, st);
  KView v = {0};
  for (int d = 0; d < n->shape.ndim; d++)
    if (n->shape.d[d] != 1) v.strides[m.ax[d]] = st[d];
  KExpr *u = kx_rand(l->a, k, attr_int(n, "seed"), v, SC_STEP);
  return SEL(B(LE, C((float)p), u), B(MUL, x, C(1 / (1 - p))), C(0));
}
/* f32 -> f32 casts are identities (check_supported rejects the rest) */
static KExpr *expr_cast(L *l, Kernel *k, const Node *n, AxMap m) { return in_expr(l, k, n, 0, m); }
static KExpr *expr_broadcast(L *l, Kernel *k, const Node *n, AxMap m) { return in_expr(l, k, n, 0, m); }
static KExpr *expr_embedding(L *l, Kernel *k, const Node *n, AxMap m) { return embedding(l, k, n, m); }
static KExpr *expr_rotary(L *l, Kernel *k, const Node *n, AxMap m) { return rotary(l, k, n, m); }

/* pad: x's element at c - before inside [before, before + len), else 0; the read goes
 * through a gather clamped into range so it never leaves x. */
static KExpr *expr_pad(L *l, Kernel *k, const Node *n, AxMap m) {
  const Node *x = n->in[0];
  int axis = (int)attr_int(n, "axis");
  if (axis < 0) axis += n->shape.ndim;
  int64_t before = attr_int(n, "before"), len = x->shape.d[axis];
  KExpr *c = kx_coord(l->a, k, m.ax[axis]);
  KExpr *inside = B(MUL, B(LE, C(before), c), B(LT, c, C(before + len)));
  KView v = view_of(l, k, x, m);
  v.strides[m.ax[axis]] = 0;
  v.gather = B(MUL, inside, B(SUB, c, C(before)));
  v.gather_stride = l->val[x->id].strides[axis];
  KExpr *xv = kx_load(l->a, k, kbuf(l, k, l->val[x->id].buf, x->dtype), v);
  return SEL(inside, xv, C(0));
}
/* ops that are kernels or views of their own have no inline expression */
#define expr_input NULL
#define expr_param NULL
#define expr_matmul NULL
#define expr_layernorm NULL
#define expr_rmsnorm NULL
#define expr_softmax NULL
#define expr_sum NULL
#define expr_mean NULL
#define expr_cross_entropy NULL
#define expr_ce_count NULL
#define expr_attention NULL
#define expr_flash_attention NULL
#define expr_classifier_ce NULL
#define expr_classifier_ce_grad NULL
#define expr_fp8_state NULL
#define expr_fp8_quantize NULL
#define expr_scaled_matmul NULL
#define expr_flash_attention_grad NULL
#define expr_reshape NULL
#define expr_transpose NULL
#define expr_slice NULL
#define expr_concat NULL
#define expr_sum_to NULL
#define expr_layernorm_grad NULL
#define expr_rmsnorm_grad NULL
#define expr_softmax_grad NULL
#define expr_cross_entropy_grad NULL
#define expr_embedding_grad NULL
#define expr_all_reduce NULL
#define expr_all_gather NULL
#define expr_reduce_scatter NULL
#define expr_split NULL
#define expr_all_to_all NULL
static KExpr *expr_tp_copy(L *l, Kernel *k, const Node *n, AxMap m) { return expr(l, k, n->in[0], m); }

typedef KExpr *(*ExprRule)(L *, Kernel *, const Node *, AxMap);
static const ExprRule expr_rules[OP_COUNT] = {
#define OP(id, name, nin, cls, flags, attrs) [OP_##id] = expr_##name,
#include "ir/ops.def"
#undef OP
};

/* A 16-bit node computed where it is read is rounded there, as where it is stored. */
static KExpr *expr(L *l, Kernel *k, const Node *n, AxMap m) {
  if (l->val[n->id].kind == V_LAYOUT) return load(l, k, n, m);
  ir_assert(l->val[n->id].kind == V_EXPR && expr_rules[n->op]);
  KExpr *e = expr_rules[n->op](l, k, n, m);
  return n->dtype == DT_BF16 ? U(RBF16, e) : n->dtype == DT_F16 ? U(RF16, e) : e;
}

/* Results land in a parameter's gradient slot by accumulation (the runtime zeroes the
 * gradient tier once per step), so micro-batches add up their gradients; everything
 * else is overwritten. */
static KStore store_mode(const L *l, int buf) { return l->bufs[buf].tier == TIER_GRADS ? KS_ADD : KS_SET; }

/* Materialise n (an expression or a strided view) into a new contiguous buffer. */
static Val materialize(L *l, const Node *n, int buf) {
  Kernel *k = knew(l, "copy", KP_ROWS, n->shape.d, n->shape.ndim, n->shape.ndim ? n->shape.ndim - 1 : 0);
  KExpr *e = expr(l, k, n, right_aligned(k, n->shape.ndim));
  Val out = layout_of(buf, &n->shape);
  kernel_map(k, kbuf(l, k, buf, n->dtype), kview_contig(k, 0), store_mode(l, buf), e);
  k->name = arena_printf(l->a, "k%d_%s", l->p->nkernels, op_info(n->op)->name);
  kfinish(l, l->seq, k);
  return out;
}

static int64_t bytes_of(const Node *n) { return shape_numel(&n->shape) * (dtype_size_bits(n->dtype) / 8); }

/* The buffer a node's result goes to: its parameter's gradient slot, or new work memory. */
static int grad_slot(L *l, int pi, const Node *n) {
  int b = lbuf_new(l, TIER_GRADS, bytes_of(n));
  l->bufs[b].offset = l->p->params[l->pidx[pi]].offset;
  l->bufs[b].placed = l->bufs[b].pinned = true;
  l->slot_used[pi] = true;
  return b;
}

static int out_buf(L *l, const Node *n) {
  int pi = l->grad_of[n->id];
  bool term = l->uses[n->id] == 1 && l->user[n->id] && l->summed[l->user[n->id]->id]; /* added into the slot */
  if (pi >= 0 && (term || (!l->slot_used[pi] && !l->uses[n->id])))
    return grad_slot(l, pi, n); /* read by nothing else */
  return lbuf_new(l, TIER_WORK, bytes_of(n));
}

/* ---- GEMM ------------------------------------------------------------------------------ */

/* A matrix operand: the last two axes of a layout, one of them unit-stride. */
typedef struct Mat {
  int buf;
  int64_t off, ld;
  bool trans;
  int64_t bs[MAX_DIMS];
  DType dt;
} Mat;

static bool as_matrix(L *l, const Node *n, bool trans, Mat *m) {
  const Val *v = &l->val[n->id];
  int nd = n->shape.ndim;
  int64_t sr = v->strides[nd - 2], sc = v->strides[nd - 1];
  if (n->shape.d[nd - 1] == 1) sc = 1;
  if (n->shape.d[nd - 2] == 1) sr = n->shape.d[nd - 1] * sc;
  m->buf = v->buf;
  m->off = v->offset;
  m->dt = n->dtype;
  if (sc == 1 && sr >= n->shape.d[nd - 1]) {
    m->ld = sr;
    m->trans = trans;
  } else if (sr == 1 && sc >= n->shape.d[nd - 2]) {
    m->ld = sc;
    m->trans = !trans;
  } else return false;
  for (int d = 0; d < nd - 2; d++) m->bs[d] = n->shape.d[d] == 1 ? 0 : v->strides[d];
  return true;
}

/* Gives n a layout usable as a GEMM operand, copying it if its strides are not. */
static void gemm_operand(L *l, const Node *n, bool trans, Mat *m) {
  if (as_matrix(l, n, trans, m)) return;
  l->val[n->id] = materialize(l, n, lbuf_new(l, TIER_WORK, bytes_of(n)));
  as_matrix(l, n, trans, m);
}

/* The add of a bias vector that n's GEMM computes in its epilogue: n's only reader
 * adds a parameter of n's last dimension (already in memory), of the same shape as n,
 * into new memory (not a gradient slot); NULL otherwise. *bias is the parameter. */
static const Node *bias_add(const L *l, const Node *n, const Node **bias) {
  const Node *u = l->uses[n->id] == 1 ? l->user[n->id] : NULL;
  if (!u || u->op != OP_ADD || l->grad_of[u->id] >= 0 || !shape_eq(&u->shape, &n->shape) || n->dtype != DT_F32)
    return NULL;
  const Node *p = u->in[0] == n ? u->in[1] : u->in[0];
  if (p->op != OP_PARAM || p->shape.ndim != 1 || p->shape.d[0] != n->shape.d[n->shape.ndim - 1] || p->dtype != DT_F32 ||
      l->val[p->id].kind != V_LAYOUT)
    return NULL;
  *bias = p;
  return u;
}

/* The GELU of u (the GEMM's bias add) that the GEMM applies in its epilogue too
 * (cuBLASLt's GELU_BIAS, GELU_AUX_BIAS): u's only GELU reader, kept in memory anyway,
 * after an unbatched GEMM whose rows are a multiple of 8 elements (the aux matrix's
 * leading dimension); NULL otherwise. */
static const Node several_gelus; /* L.gelu of a value that more than one GELU reads */

static const Node *gelu_epilogue(const L *l, const Node *u, const IsaGemm *g) {
  const Node *e = u ? l->gelu[u->id] : NULL;
  if (!e || e == &several_gelus || e->dtype != DT_F32 || l->grad_of[e->id] >= 0 || g->batch[0] * g->batch[1] != 1 ||
      g->n % 8)
    return NULL;
  return l->need_layout[e->id] || l->uses[e->id] > 1 ? e : NULL;
}

/* The GELU epilogue as a kernel, for devices whose GEMMs do not apply it: out = gelu(in),
 * contiguous (in place without aux). */
static void gelu_kernel(L *l, const Node *e, int in, int out) {
  Kernel *k = knew(l, "gelu", KP_ROWS, e->shape.d, e->shape.ndim, e->shape.ndim - 1);
  KExpr *x = kx_load(l->a, k, kbuf(l, k, in, DT_F32), kview_contig(k, 0));
  kernel_map(k, kbuf(l, k, out, DT_F32), kview_contig(k, 0), KS_SET, gelu(l, k, x));
  kfinish(l, l->seq, k);
  l->seq->v[l->seq->n - 1].kernel.epilogue = true;
}

/* As gemm_operand, with the storage transposed or not as `want` says: when it is not,
 * a kernel copies n into new memory the other way round (n keeps its layout for its
 * other readers). */
static void gemm_operand_as(L *l, const Node *n, bool trans, bool want, Mat *m) {
  gemm_operand(l, n, trans, m);
  if (m->trans == want) return;
  int nd = n->shape.ndim;
  Shape ts = n->shape;
  ts.d[nd - 2] = n->shape.d[nd - 1], ts.d[nd - 1] = n->shape.d[nd - 2];
  int b = lbuf_new(l, TIER_WORK, bytes_of(n));
  Val v = layout_of(b, &ts), keep = l->val[n->id];
  v.strides[nd - 2] = 1, v.strides[nd - 1] = n->shape.d[nd - 2];
  Kernel *k = knew(l, "transpose", KP_ROWS, n->shape.d, nd, nd - 1);
  KView kv = {0};
  for (int d = 0; d < nd; d++) kv.strides[d] = v.strides[d];
  kernel_map(k, kbuf(l, k, b, n->dtype), kv, KS_SET, expr(l, k, n, right_aligned(k, nd)));
  kfinish(l, l->seq, k);
  l->val[n->id] = v;
  as_matrix(l, n, trans, m);
  l->val[n->id] = keep;
  ir_assert(m->trans == want);
}

/* The GEMM of n's operands (a matmul's or a scaled_matmul's), all but its output's
 * binding (gemm_output); *nbatch: its batch axes. fp8 operands are laid out as
 * cuBLASLt's fp8 GEMMs take them: both with K contiguous (its "TN"). */
static IsaGemm gemm_of(L *l, const Node *n, int *nbatch) {
  const Node *a = n->in[0], *b = n->in[1];
  bool ta = attr_int(n, "transpose_a"), tb = attr_int(n, "transpose_b");
  Mat A, Bm;
  if (n->op == OP_SCALED_MATMUL) {
    gemm_operand_as(l, a, ta, false, &A);
    gemm_operand_as(l, b, tb, true, &Bm);
  } else {
    gemm_operand(l, a, ta, &A);
    gemm_operand(l, b, tb, &Bm);
  }
  int nd = n->shape.ndim, nb = nd - 2;
  int64_t M = n->shape.d[nd - 2], N = n->shape.d[nd - 1];
  int64_t K = a->shape.d[a->shape.ndim - (ta ? 2 : 1)];
  IsaGemm g = {.ta = A.trans,
               .tb = Bm.trans,
               .m = M,
               .n = N,
               .k = K,
               .lda = A.ld,
               .ldb = Bm.ld,
               .ldc = N,
               .alpha = 1,
               .tier = {PENDING + A.buf, PENDING + Bm.buf, 0},
               .off = {A.off * dtype_size_bits(A.dt) / 8, Bm.off * dtype_size_bits(Bm.dt) / 8, 0},
               .batch = {1, 1},
               .dt = {(IsaDtype)A.dt, (IsaDtype)Bm.dt, (IsaDtype)n->dtype}};
  /* batch axes of the operands, right-aligned to the result's */
  int64_t sa[MAX_DIMS] = {0}, sbb[MAX_DIMS] = {0};
  for (int d = 0; d < nb; d++) {
    int da = d - (nb - (a->shape.ndim - 2)), db = d - (nb - (b->shape.ndim - 2));
    sa[d] = da >= 0 ? A.bs[da] : 0;
    sbb[d] = db >= 0 ? Bm.bs[db] : 0;
  }
  /* A weight shared across the batch, with A's batch rows contiguous: one GEMM. */
  bool fold = nb > 0 && !A.trans && A.ld == K;
  for (int d = 0; d < nb && fold; d++)
    fold = sbb[d] == 0 && sa[d] == (d == nb - 1 ? M * K : sa[d + 1] * n->shape.d[d + 1]);
  if (fold) {
    for (int d = 0; d < nb; d++) g.m *= n->shape.d[d];
    nb = 0;
  }
  if (nb > 2) error_at(n->loc, "%s: code generation handles at most 2 batch axes", op_info(n->op)->name);
  for (int d = 0; d < nb; d++) {
    int s = 2 - nb + d;
    g.batch[s] = n->shape.d[d];
    g.stride[0][s] = sa[d];
    g.stride[1][s] = sbb[d];
  }
  *nbatch = nb;
  return g;
}

/* g's output: buffer cb, laid out as n; returns that layout. */
static Val gemm_output(L *l, IsaGemm *g, int nb, int cb, const Node *n) {
  Val out = layout_of(cb, &n->shape);
  g->tier[2] = PENDING + cb;
  g->beta = store_mode(l, cb) == KS_ADD ? 1 : 0;
  for (int d = 0; d < nb; d++) g->stride[2][2 - nb + d] = out.strides[d];
  return out;
}

static void emit_gemm(L *l, const IsaGemm *g) {
  IsaInstr *in = emit(l, l->seq, ISA_GEMM);
  in->gemm = *g;
  for (int i = 0; i < 3; i++) touch(l, g->tier[i] - PENDING, l->seq->n - 1);
  if (g->bias || g->bgrad) touch(l, g->bias_tier - PENDING, l->seq->n - 1);
  if (g->aux || g->dgelu) touch(l, g->aux_tier - PENDING, l->seq->n - 1);
}

/* The GELU gradient that n's GEMM applies in its epilogue (cuBLASLt's DGELU): n's only
 * reader is gelu_grad(x, n), not a gradient slot's, with x (GELU's input) in memory laid
 * out as the GEMM's C (the aux matrix: contiguous rows of C's width, a multiple of 8
 * elements), the three of one 32- or 16-bit type, the GEMM unbatched and of that type;
 * NULL otherwise. *x: x's buffer, *xoff: its byte offset there. */
static const Node *dgelu_epilogue(const L *l, const Node *n, const IsaGemm *g, int *x, int64_t *xoff) {
  const Node *e = l->uses[n->id] == 1 ? l->user[n->id] : NULL;
  if (!e || e->op != OP_GELU_GRAD || e->in[1] != n || e->in[0] == n || l->grad_of[e->id] >= 0 || l->grad_of[n->id] >= 0)
    return NULL;
  const Node *in = e->in[0];
  const Val *v = &l->val[in->id];
  DType t = n->dtype;
  if ((t != DT_F32 && t != DT_BF16 && t != DT_F16) || e->dtype != t || in->dtype != t || g->dt[0] != (IsaDtype)t ||
      g->dt[1] != (IsaDtype)t || g->batch[0] * g->batch[1] != 1 || g->n % 8 || v->kind != V_LAYOUT ||
      !shape_eq(&in->shape, &n->shape))
    return NULL;
  int64_t st[MAX_DIMS];
  contiguous(&in->shape, st);
  for (int d = 0; d < in->shape.ndim; d++)
    if (in->shape.d[d] != 1 && v->strides[d] != st[d]) return NULL;
  *x = v->buf, *xoff = v->offset * (dtype_size_bits(t) / 8);
  return e;
}

/* The bias gradient that the DGELU GEMM of e sums in its epilogue too (cuBLASLt's
 * DGELU_BGRAD, in f32): a sum_to of e (or of e widened to f32) over every axis but the
 * last, not yet lowered; NULL otherwise. */
static const Node *bgrad_epilogue(const L *l, const Node *e) {
  int nd = e->shape.ndim;
  for (int i = e->id + 1; i < l->g->n; i++) {
    const Node *s = l->g->nodes[i], *x = s->nin ? s->in[0] : NULL;
    if (s->op == OP_SUM_TO && (x == e || (widening(x) && x->in[0] == e)) && s->dtype == DT_F32 && s->shape.ndim == 1 &&
        s->shape.d[0] == e->shape.d[nd - 1] && !l->fused[s->id] && !l->summed[s->id])
      return s;
  }
  return NULL;
}

/* How many of x's leading axes a sum over `reduced` into `t` sums, where it sums only
 * those (a bias gradient, a norm's weight gradient), into f32, with a column to each of
 * at least 32 outputs: a column kernel's sum (colsum_store); 0 otherwise. */
static int leading_sum(const Node *x, const bool *reduced, DType t) {
  int p = 0, nd = x->shape.ndim;
  while (p < nd && reduced[p]) p++;
  int64_t cols = 1;
  for (int d = p; d < nd; d++) {
    if (reduced[d]) return 0;
    cols *= x->shape.d[d];
  }
  return t == DT_F32 && p < nd && cols >= 32 ? p : 0;
}

/* Kernel k's column sums of v into f32 buffer b (contiguous over the columns), added to
 * what b holds (mode KS_ADD: a gradient slot) or set: the first row's term stored, the
 * others added to it. k is KP_COLS over a sum's leading axes, as kernel.h writes
 * reductions over rows: each worker owns columns and runs every row in order, so the
 * rows stream through memory (a KP_ROWS reduce would read each output's column with the
 * row's stride). */
static void colsum_store(L *l, Kernel *k, int b, KStore mode, KExpr *v) {
  KView view = {0};
  int64_t st = 1;
  for (int d = k->ndims - 1; d >= k->row_dims; d--) {
    view.strides[d] = st;
    st *= k->dims[d];
  }
  int kb = kbuf(l, k, b, DT_F32);
  if (mode == KS_SET) {
    KExpr *first = C(0);
    for (int d = 0; d < k->row_dims; d++) first = B(ADD, first, kx_coord(l->a, k, d));
    v = kx_select(l->a, k, B(EQ, first, C(0)), v, B(ADD, kx_load(l->a, k, kb, view), v));
  }
  kernel_map(k, kb, view, mode, v);
  kfinish(l, l->seq, k);
}

/* The epilogue kernels of a DGELU GEMM (n's, into cb), for devices whose GEMMs do not
 * apply them: C = gelu_grad(x, C) in place, then (s) the sum of C's rows into the f32
 * vector bb. */
static void dgelu_kernels(L *l, const Node *e, const Node *s, int cb, int bb) {
  Kernel *k = knew(l, "gelu_grad", KP_ROWS, e->shape.d, e->shape.ndim, e->shape.ndim - 1);
  l->val[e->id] = (Val){.kind = V_EXPR};
  kernel_map(k, kbuf(l, k, cb, e->dtype), kview_contig(k, 0), KS_SET, expr(l, k, e, right_aligned(k, e->shape.ndim)));
  kfinish(l, l->seq, k);
  l->seq->v[l->seq->n - 1].kernel.epilogue = true;
  l->val[e->id] = layout_of(cb, &e->shape);
  if (!s) return;
  k = knew(l, op_info(s->op)->name, KP_COLS, e->shape.d, e->shape.ndim, e->shape.ndim - 1);
  colsum_store(l, k, bb, KS_SET, load(l, k, e, right_aligned(k, e->shape.ndim)));
  l->seq->v[l->seq->n - 1].kernel.epilogue = true;
}

/* The f32 vector a GEMM's BGRAD epilogue writes bias gradient s into (kind: ISA_BGRAD_*),
 * set in g: s's own memory, or where s goes to a gradient slot (which accumulates over
 * micro-batches, while BGRAD writes) a vector of its own, added in by bgrad_add. *sb:
 * s's memory. */
static int bgrad_vector(L *l, const Node *s, IsaGemm *g, int kind, int *sb) {
  *sb = out_buf(l, s);
  int bb = store_mode(l, *sb) == KS_SET ? *sb : lbuf_new(l, TIER_WORK, shape_numel(&s->shape) * 4);
  g->bgrad = (int8_t)kind, g->bias_tier = PENDING + bb, g->bias_off = 0;
  l->fused[s->id] = true;
  return bb;
}

static void bgrad_add(L *l, const Node *s, int sb, int bb) {
  l->val[s->id] = layout_of(sb, &s->shape);
  if (bb == sb) return;
  Kernel *k = knew(l, "bias_grad", KP_ROWS, s->shape.d, 1, 0);
  kernel_map(k, kbuf(l, k, sb, DT_F32), kview_contig(k, 0), store_mode(l, sb),
             kx_load(l->a, k, kbuf(l, k, bb, DT_F32), kview_contig(k, 0)));
  kfinish(l, l->seq, k);
}

/* n's GEMM with the GELU gradient of its reader e (dgelu_epilogue) applied, and the bias
 * gradient s (bgrad_epilogue) summed, in its epilogue; on a device without it, the
 * epilogue kernels after it. */
static void lower_dgelu_gemm(L *l, const Node *n, IsaGemm *g, const Node *e, int x, int64_t xoff) {
  const Node *s = bgrad_epilogue(l, e);
  int cb = out_buf(l, e), sb = -1, bb = -1;
  Val out = gemm_output(l, g, 0, cb, n);
  g->dgelu = true, g->aux_tier = PENDING + x, g->aux_off = xoff;
  if (s) bb = bgrad_vector(l, s, g, ISA_BGRAD_C, &sb);
  l->fused[e->id] = true;
  emit_gemm(l, g);
  l->val[n->id] = out;
  dgelu_kernels(l, e, s, cb, bb);
  if (s) bgrad_add(l, s, sb, bb);
}

/* n with reshapes and exact casts (16 bits widened to f32, and back) looked through:
 * the value whose elements n's are. */
static const Node *exact_root(const Node *n) {
  for (;;) {
    if (n->op == OP_RESHAPE || widening(n)) n = n->in[0];
    else if (n->op == OP_CAST && widening(n->in[0]) && n->in[0]->in[0]->dtype == n->dtype) n = n->in[0]->in[0];
    else return n;
  }
}

/* Bias gradient s (a sum_to of x over every axis but the last, in f32) is what a later
 * GEMM's B operand sums to over the GEMM's k: a matmul, its B a [K, N] matrix (not
 * transposed) of x's elements, N x's last dimension and K the rest, and nothing reading s
 * before it. That GEMM sums it in its epilogue (BGRAD: bgrad_of), so s is not lowered
 * here; 0 when there is none. */
static bool bgrad_gemm(L *l, const Node *s) {
  const Node *x = s->in[0], *rx = exact_root(x);
  int nd = x->shape.ndim;
  if (s->dtype != DT_F32 || s->shape.ndim != 1 || s->shape.d[0] != x->shape.d[nd - 1] || nd < 2 || l->summed[s->id] ||
      l->uses[s->id] > 1)
    return false;
  for (int i = s->id + 1; i < l->g->n; i++) {
    const Node *m = l->g->nodes[i], *b = m->nin > 1 ? m->in[1] : NULL;
    if (l->uses[s->id] && l->user[s->id] == m) return false;
    if (m->op != OP_MATMUL || l->bgrad_of[m->id] || l->val[m->id].kind != V_NONE || attr_int(m, "transpose_b") ||
        b->shape.ndim != 2 || b->shape.d[1] != s->shape.d[0] ||
        b->shape.d[0] * b->shape.d[1] != shape_numel(&x->shape) || exact_root(b) != rx)
      continue;
    l->bgrad_of[m->id] = s;
    l->fused[s->id] = true;
    return true;
  }
  return false;
}

/* The epilogue kernel of a GEMM's BGRAD of its B operand (kind ISA_BGRAD_B), for
 * devices whose GEMMs do not sum it: the sum over k of op(B) into the f32 vector bb. */
static void bgrad_b_kernel(L *l, const Node *s, const IsaGemm *g, int bb) {
  int64_t dims[2] = {g->k, g->n};
  Kernel *k = knew(l, op_info(s->op)->name, KP_COLS, dims, 2, 1);
  DType t = (DType)g->dt[1];
  KView bv = {.offset = g->off[1] / (dtype_size_bits(t) / 8)};
  bv.strides[0] = g->tb ? 1 : g->ldb, bv.strides[1] = g->tb ? g->ldb : 1;
  colsum_store(l, k, bb, KS_SET, kx_load(l->a, k, kbuf(l, k, g->tier[1] - PENDING, t), bv));
  l->seq->v[l->seq->n - 1].kernel.epilogue = true;
}

static void reduce_of(L *l, const Node *n);
static const Node no_bgrad; /* L.bgrad_of of a matmul whose GEMM cannot sum its bias gradient */

static void lower_matmul(L *l, const Node *n) {
  const Node *bias = NULL, *u = bias_add(l, n, &bias);
  int nb;
  IsaGemm g = gemm_of(l, n, &nb);
  int x;
  int64_t xoff;
  const Node *d = u ? NULL : dgelu_epilogue(l, n, &g, &x, &xoff), *s = l->bgrad_of[n->id];
  if (s && (u || d || nb || g.batch[0] * g.batch[1] != 1 ||
            (g.dt[1] != ISA_F32 && g.dt[1] != ISA_BF16 && g.dt[1] != ISA_F16))) {
    l->bgrad_of[n->id] = &no_bgrad; /* s is summed by its own kernel after all */
    l->fused[s->id] = false;
    reduce_of(l, s);
    s = NULL;
  }
  if (d) {
    lower_dgelu_gemm(l, n, &g, d, x, xoff);
    return;
  }
  int sb = -1, bb = s ? bgrad_vector(l, s, &g, ISA_BGRAD_B, &sb) : -1;
  const Node *e = gelu_epilogue(l, u, &g), *res = e ? e : u ? u : n;
  int cb = out_buf(l, res);
  Val out = gemm_output(l, &g, nb, cb, n);
  if (u) { /* the add is this GEMM's epilogue: its value is the GEMM's output */
    const Val *bv = &l->val[bias->id];
    g.bias = true, g.bias_tier = PENDING + bv->buf, g.bias_off = bv->offset * 4;
    l->fused[u->id] = true;
  }
  if (e) { /* and so is the GELU; the add's value goes to aux when anything else reads it */
    g.gelu = true, g.aux = l->uses[u->id] > 1 || l->need_layout[u->id];
    if (g.aux) {
      int ab = out_buf(l, u);
      g.aux_tier = PENDING + ab;
      l->val[u->id] = layout_of(ab, &u->shape);
    }
    l->fused[e->id] = true;
  }
  emit_gemm(l, &g);
  l->val[n->id] = out; /* read by nothing else when the add is fused */
  if (u && !e) l->val[u->id] = out;
  if (e) l->val[e->id] = out, gelu_kernel(l, e, g.aux ? g.aux_tier - PENDING : cb, cb);
  if (s) bgrad_b_kernel(l, s, &g, bb), bgrad_add(l, s, sb, bb);
}

/* ---- row kernels: normalisations, softmax, losses --------------------------------------- */

/* A kernel over x's shape, one row per vector along the last axis. */
static Kernel *row_kernel(L *l, const Node *n, const Node *x) {
  return knew(l, op_info(n->op)->name, KP_ROWS, x->shape.d, x->shape.ndim, x->shape.ndim - 1);
}

static AxMap last_axis(const Kernel *k) {
  AxMap m = {{k->ndims - 1}};
  return m;
}

/* The cast to 16 bits that is the only reader of f32 node n, if any: n's kernel then
 * stores n rounded, as the cast's value (the rounding a 16-bit activation takes, done
 * where it is computed, so that no f32 copy is stored: a normalisation's output, the
 * logits' gradient). */
static const Node *narrowed_by(L *l, const Node *n) {
  const Node *u = l->user[n->id];
  if (!u || l->uses[n->id] != 1 || n->dtype != DT_F32 || l->grad_of[n->id] >= 0 || n == l->g->loss) return NULL;
  return u->op == OP_CAST && (u->dtype == DT_BF16 || u->dtype == DT_F16) ? u : NULL;
}

static void store_out(L *l, Kernel *k, const Node *n, KExpr *e) {
  const Node *c = narrowed_by(l, n), *o = c ? c : n;
  int b = out_buf(l, o);
  l->val[n->id] = l->val[o->id] = layout_of(b, &n->shape);
  if (c) l->fused[c->id] = true;
  kernel_map(k, kbuf(l, k, b, o->dtype), kview_contig(k, 0), store_mode(l, b), e);
  kfinish(l, l->seq, k);
}

/* ---- fp8 (ir/ops.def, passes/autocast.c) ---------------------------------------------------- */

/* The states side by side in one pinned buffer of the work tier, which starts zeroed as
 * every tier does (program/program.h), a row of 2 + history each: one kernel updates
 * them all at the step's end (emit_fp8_update). */
static void lower_fp8_state(L *l, const Node *n) {
  int64_t w = n->shape.d[0];
  if (l->fp8_buf < 0) {
    int64_t rows = 0;
    for (int i = 0; i < l->g->n; i++) rows += l->g->nodes[i]->op == OP_FP8_STATE;
    l->fp8_buf = lbuf_new(l, TIER_WORK, rows * w * 4);
    l->bufs[l->fp8_buf].pinned = true;
    l->fp8_width = w;
  }
  if (w != l->fp8_width) error_at(n->loc, "fp8_state: every state of a program has one history length");
  l->val[n->id] = layout_of(l->fp8_buf, &n->shape);
  l->val[n->id].offset = l->fp8_rows++ * w;
}

/* The scale of fp8 type t that `state` gives: fmax / amax * 2^-margin, 1 without an amax. */
static KExpr *fp8_scale(L *l, Kernel *k, const Node *state, DType t, int64_t margin) {
  const Val *v = &l->val[state->id];
  KExpr *amax = kx_load(l->a, k, kbuf(l, k, v->buf, DT_F32), (KView){.offset = v->offset});
  KExpr *s = B(MUL, B(DIV, C(t == DT_E4M3 ? 448.0 : 57344.0), amax), C(ldexp(1, -(int)margin)));
  return kx_select(l->a, k, B(LT, C(0), amax), s, C(1));
}

/* q = x * s stored in the fp8 type (the store rounds and saturates), with each row's
 * max |x| on the side; then the largest of those raises the state's [1]. */
static void lower_fp8_quantize(L *l, const Node *n) {
  const Node *x = n->in[0], *st = n->in[1];
  Kernel *k = row_kernel(l, n, x);
  KExpr *v = expr(l, k, x, right_aligned(k, x->shape.ndim));
  int rm = lbuf_new(l, TIER_WORK, k->rows * 4);
  KView rv = {0};
  int64_t stride = 1;
  for (int d = k->row_dims - 1; d >= 0; d--) {
    rv.strides[d] = stride;
    stride *= k->dims[d];
  }
  kernel_row(k, kbuf(l, k, rm, DT_F32), rv, KS_SET, kx_acc(l->a, k, kernel_reduce(k, KR_MAX, U(ABS, v))));
  store_out(l, k, n, B(MUL, v, fp8_scale(l, k, st, n->dtype, attr_int(n, "margin"))));
  int64_t dims[2] = {1, stride};
  k = knew(l, "fp8_amax", KP_ROWS, dims, 2, 1);
  KView all = {0};
  all.strides[1] = 1;
  KExpr *mx = kx_acc(l->a, k, kernel_reduce(k, KR_MAX, kx_load(l->a, k, kbuf(l, k, rm, DT_F32), all)));
  const Val *sv = &l->val[st->id];
  int sb = kbuf(l, k, sv->buf, DT_F32);
  KView cur = {.offset = sv->offset + 1};
  kernel_row(k, sb, cur, KS_SET, B(MAX, kx_load(l->a, k, sb, cur), mx));
  kfinish(l, l->seq, k);
  l->seq->v[l->seq->n - 1].train_only = true;
}

/* The GEMM of the q's into f32, then the product of the values: times 1 / (s_a s_b). */
static void lower_scaled_matmul(L *l, const Node *n) {
  int nb;
  IsaGemm g = gemm_of(l, n, &nb);
  int tmp = lbuf_new(l, TIER_WORK, shape_numel(&n->shape) * 4);
  g.dt[2] = ISA_F32;
  gemm_output(l, &g, nb, tmp, n);
  emit_gemm(l, &g);
  Kernel *k = row_kernel(l, n, n);
  k->name = arena_printf(l->a, "k%d_fp8_descale", l->p->nkernels);
  int64_t margin = attr_int(n, "margin");
  KExpr *s =
      B(MUL, fp8_scale(l, k, n->in[2], n->in[0]->dtype, margin), fp8_scale(l, k, n->in[3], n->in[1]->dtype, margin));
  store_out(l, k, n, B(DIV, kx_load(l->a, k, kbuf(l, k, tmp, DT_F32), kview_contig(k, 0)), s));
}

/* At the step's end (its last micro-batch): this step's running amaxes ([1] of each
 * state) side by side in a buffer of their own, which compose_step all-reduces (max)
 * over the mesh so that every rank scales as one rank would (Transformer Engine's amax
 * reduction); then each goes into its state's history at t % history, [0] becomes the
 * history's largest and [1] starts again. */
static void emit_fp8_update(L *l, bool last) {
  if (l->fp8_buf < 0) return;
  l->at = NULL;
  int64_t w = l->fp8_width, h = w - 2, rows = l->fp8_rows, dims[2] = {rows, h};
  if (l->fp8_amax < 0) {
    l->fp8_amax = lbuf_new(l, TIER_WORK, rows * 4);
    l->bufs[l->fp8_amax].pinned = true;
  }
  int ab = l->fp8_amax;
  Kernel *k = knew(l, "fp8_amaxes", KP_ROWS, &rows, 1, 0);
  KView cur = {.offset = 1, .strides = {w}}, each = {.strides = {1}};
  kernel_map(k, kbuf(l, k, ab, DT_F32), each, KS_SET, kx_load(l->a, k, kbuf(l, k, l->fp8_buf, DT_F32), cur));
  kfinish(l, l->seq, k);
  l->seq->v[l->seq->n - 1].last = last;
  if (l->bufs[l->fp8_buf].shared) l->p->fp8.update = l->p->nkernels; /* placed already (stage_fp8) */
  else l->p->fp8 = (PFp8){.rows = rows, .width = w, .state = l->fp8_buf, .amax = ab, .update = l->p->nkernels};
  k = knew(l, "fp8_scaling", KP_ROWS, dims, 2, 1);
  int sb = kbuf(l, k, l->fp8_buf, DT_F32);
  KView hist = {.offset = 2, .strides = {w, 1}}, amax = {.strides = {w}}, got = {.strides = {1}};
  KExpr *t = kx_scalar(l->a, k, SC_STEP);
  KExpr *slot = B(SUB, t, B(MUL, C(h), U(FLOOR, B(DIV, t, C(h)))));
  KExpr *v = kx_select(l->a, k, B(EQ, kx_coord(l->a, k, 1), slot), kx_load(l->a, k, kbuf(l, k, ab, DT_F32), got),
                       kx_load(l->a, k, sb, hist));
  int acc = kernel_reduce(k, KR_MAX, v);
  kernel_map(k, sb, hist, KS_SET, v);
  kernel_row(k, sb, amax, KS_SET, kx_acc(l->a, k, acc));
  kernel_row(k, sb, cur, KS_SET, C(0));
  kfinish(l, l->seq, k);
  l->seq->v[l->seq->n - 1].last = last;
}

static void lower_layernorm(L *l, const Node *n) {
  const Node *x = n->in[0];
  Kernel *k = row_kernel(l, n, x);
  AxMap m = right_aligned(k, x->shape.ndim);
  double D = (double)x->shape.d[x->shape.ndim - 1];
  KExpr *xv = expr(l, k, x, m);
  KExpr *mean = B(MUL, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, xv)), C(1 / D));
  KExpr *xc = B(SUB, xv, mean);
  KExpr *var = B(MUL, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, B(MUL, xc, xc))), C(1 / D));
  KExpr *y = B(MUL, xc, U(RSQRT, B(ADD, var, C(attr_float(n, "eps")))));
  y = B(MUL, y, expr(l, k, n->in[1], last_axis(k)));
  if (n->op == OP_LAYERNORM) y = B(ADD, y, expr(l, k, n->in[2], last_axis(k)));
  store_out(l, k, n, y);
}

static void lower_rmsnorm(L *l, const Node *n) {
  const Node *x = n->in[0];
  Kernel *k = row_kernel(l, n, x);
  AxMap m = right_aligned(k, x->shape.ndim);
  double D = (double)x->shape.d[x->shape.ndim - 1];
  KExpr *xv = expr(l, k, x, m);
  KExpr *ms = B(MUL, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, B(MUL, xv, xv))), C(1 / D));
  KExpr *y = B(MUL, B(MUL, xv, U(RSQRT, B(ADD, ms, C(attr_float(n, "eps"))))), expr(l, k, n->in[1], last_axis(k)));
  store_out(l, k, n, y);
}

static void lower_softmax(L *l, const Node *n) {
  const Node *x = n->in[0];
  int nd = x->shape.ndim;
  if (attr_int(n, "axis") != -1 && attr_int(n, "axis") != nd - 1)
    error_at(n->loc, "softmax: code generation handles the last axis only");
  Kernel *k = row_kernel(l, n, x);
  AxMap m = right_aligned(k, nd);
  KExpr *xv = expr(l, k, x, m), *keep = C(1);
  if (attr_int(n, "causal")) {
    int64_t off = x->shape.d[nd - 1] - x->shape.d[nd - 2];
    keep = B(LE, kx_coord(l->a, k, nd - 1), B(ADD, kx_coord(l->a, k, nd - 2), C(off)));
    xv = SEL(keep, xv, C(-INFINITY));
  }
  if (attn_window(n) > 0) { /* and j > i + off - W */
    int64_t off = x->shape.d[nd - 1] - x->shape.d[nd - 2] - attn_window(n);
    keep = B(LT, B(ADD, kx_coord(l->a, k, nd - 2), C(off)), kx_coord(l->a, k, nd - 1));
    xv = SEL(keep, xv, C(-INFINITY));
  }
  KExpr *mx = kx_acc(l->a, k, kernel_reduce(k, KR_MAX, xv));
  KExpr *ex = U(EXP, B(SUB, xv, mx));
  KExpr *sum = kx_acc(l->a, k, kernel_reduce(k, KR_SUM, ex));
  store_out(l, k, n, B(DIV, ex, sum));
}

static void lower_softmax_grad(L *l, const Node *n) {
  const Node *y = n->in[0];
  Kernel *k = row_kernel(l, n, y);
  AxMap m = right_aligned(k, y->shape.ndim);
  KExpr *yv = expr(l, k, y, m), *gv = expr(l, k, n->in[1], m);
  KExpr *dot = kx_acc(l->a, k, kernel_reduce(k, KR_SUM, B(MUL, yv, gv)));
  store_out(l, k, n, B(MUL, yv, B(SUB, gv, dot)));
}

/* mean and rstd (layernorm) or rstd alone (rmsnorm) of each row of x, into buffers. */
static void norm_stats(L *l, const Node *n, int stats[2]) {
  const Node *x = n->in[0];
  bool ln = n->op == OP_LAYERNORM_GRAD;
  Kernel *k = row_kernel(l, n, x);
  k->name = arena_printf(l->a, "k%d_%s_stats", l->p->nkernels, ln ? "layernorm" : "rmsnorm");
  AxMap m = right_aligned(k, x->shape.ndim);
  double D = (double)x->shape.d[x->shape.ndim - 1];
  int64_t rows = shape_numel(&x->shape) / x->shape.d[x->shape.ndim - 1];
  KExpr *xv = expr(l, k, x, m), *mean = C(0);
  if (ln) mean = B(MUL, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, xv)), C(1 / D));
  KExpr *xc = B(SUB, xv, mean);
  KExpr *var = B(MUL, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, B(MUL, xc, xc))), C(1 / D));
  KView rv = {0};
  int64_t st = 1;
  for (int d = k->row_dims - 1; d >= 0; d--) {
    rv.strides[d] = st;
    st *= k->dims[d];
  }
  for (int i = 0; i < 2; i++) stats[i] = lbuf_new(l, TIER_WORK, rows * 4);
  kernel_row(k, kbuf(l, k, stats[0], DT_F32), rv, KS_SET, mean);
  kernel_row(k, kbuf(l, k, stats[1], DT_F32), rv, KS_SET, U(RSQRT, B(ADD, var, C(attr_float(n, "eps")))));
  kfinish(l, l->seq, k);
}

/* dx of layernorm (mean-centred) and rmsnorm: per row. */
static void lower_norm_dx(L *l, const Node *n) {
  const Node *x = n->in[0];
  bool ln = n->op == OP_LAYERNORM_GRAD;
  Kernel *k = row_kernel(l, n, x);
  AxMap m = right_aligned(k, x->shape.ndim);
  double D = (double)x->shape.d[x->shape.ndim - 1];
  KExpr *xv = expr(l, k, x, m), *gv = expr(l, k, n->in[2], m);
  KExpr *mean = ln ? B(MUL, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, xv)), C(1 / D)) : C(0);
  KExpr *xc = B(SUB, xv, mean);
  KExpr *var = B(MUL, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, B(MUL, xc, xc))), C(1 / D));
  KExpr *rstd = U(RSQRT, B(ADD, var, C(attr_float(n, "eps"))));
  KExpr *xhat = B(MUL, xc, rstd);
  KExpr *gw = B(MUL, gv, expr(l, k, n->in[1], last_axis(k)));
  KExpr *sg = ln ? B(MUL, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, gw)), C(1 / D)) : C(0);
  KExpr *sgx = B(MUL, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, B(MUL, gw, xhat))), C(1 / D));
  store_out(l, k, n, B(MUL, rstd, B(SUB, B(SUB, gw, sg), B(MUL, xhat, sgx))));
}

/* A kernel reducing x over its `reduced` axes: the kept axes are the rows, the
 * reduced ones the columns, whatever their order in x. */
static Kernel *reduce_kernel(L *l, const Node *n, const Node *x, const bool *reduced, AxMap *m) {
  int64_t dims[MAX_DIMS];
  int nd = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int d = 0; d < x->shape.ndim; d++)
      if (reduced[d] == (pass == 1)) {
        m->ax[d] = nd;
        dims[nd++] = x->shape.d[d];
      }
  int rows = 0;
  for (int d = 0; d < x->shape.ndim; d++) rows += !reduced[d];
  if (rows == 0) { /* a full reduction: one row */
    for (int d = nd; d > 0; d--) dims[d] = dims[d - 1];
    dims[0] = 1;
    for (int d = 0; d < x->shape.ndim; d++) m->ax[d]++;
    nd++;
  }
  return knew(l, op_info(n->op)->name, KP_ROWS, dims, nd, rows ? rows : 1);
}

/* The output of a reduction: a contiguous buffer over the kept axes, one value per row. */
static void store_rows(L *l, Kernel *k, const Node *n, KExpr *e) {
  int b = out_buf(l, n);
  l->val[n->id] = layout_of(b, &n->shape);
  KView v = {0};
  int64_t st = 1;
  for (int d = k->row_dims - 1; d >= 0; d--) {
    v.strides[d] = st;
    st *= k->dims[d];
  }
  kernel_row(k, kbuf(l, k, b, n->dtype), v, store_mode(l, b), e);
  kfinish(l, l->seq, k);
}

static void lower_norm_param_grad(L *l, const Node *n) {
  const Node *x = n->in[0];
  int which = (int)attr_int(n, "which"), stats[2];
  if (which == 1) norm_stats(l, n, stats);
  bool reduced[MAX_DIMS] = {0};
  for (int d = 0; d < x->shape.ndim; d++) reduced[d] = d != x->shape.ndim - 1;
  AxMap m;
  bool cols = leading_sum(x, reduced, n->dtype) > 0;
  Kernel *k = cols ? knew(l, op_info(n->op)->name, KP_COLS, x->shape.d, x->shape.ndim, x->shape.ndim - 1)
                   : reduce_kernel(l, n, x, reduced, &m);
  if (cols) m = right_aligned(k, x->shape.ndim);
  KExpr *e = expr(l, k, n->in[2], m);
  if (which == 1) {
    KView sv = {0};
    int64_t st = 1;
    for (int d = x->shape.ndim - 2; d >= 0; d--) {
      sv.strides[m.ax[d]] = st;
      st *= x->shape.d[d];
    }
    KExpr *mean = kx_load(l->a, k, kbuf(l, k, stats[0], DT_F32), sv);
    KExpr *rstd = kx_load(l->a, k, kbuf(l, k, stats[1], DT_F32), sv);
    e = B(MUL, e, B(MUL, B(SUB, expr(l, k, x, m), mean), rstd));
  }
  if (cols) {
    int b = out_buf(l, n);
    l->val[n->id] = layout_of(b, &n->shape);
    colsum_store(l, k, b, store_mode(l, b), e);
    return;
  }
  store_rows(l, k, n, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, e)));
}

static void lower_reduce(L *l, const Node *n) {
  if (n->op == OP_SUM_TO && bgrad_gemm(l, n)) return; /* summed by a GEMM, later */
  reduce_of(l, n);
}

static void reduce_of(L *l, const Node *n) {
  const Node *x = n->in[0];
  bool reduced[MAX_DIMS] = {0};
  if (n->op == OP_SUM_TO) {
    int off = x->shape.ndim - n->shape.ndim;
    for (int d = 0; d < x->shape.ndim; d++) reduced[d] = d < off || (n->shape.d[d - off] == 1 && x->shape.d[d] != 1);
  } else {
    const AttrVal *ax = attr_get(n, "axis");
    for (int d = 0; d < x->shape.ndim; d++) reduced[d] = !ax->set || d == (ax->i < 0 ? ax->i + x->shape.ndim : ax->i);
  }
  AxMap m;
  int p = n->op == OP_MEAN ? 0 : leading_sum(x, reduced, n->dtype);
  if (p) {
    int b = out_buf(l, n);
    l->val[n->id] = layout_of(b, &n->shape);
    Kernel *k = knew(l, op_info(n->op)->name, KP_COLS, x->shape.d, x->shape.ndim, p);
    colsum_store(l, k, b, store_mode(l, b), expr(l, k, x, right_aligned(k, x->shape.ndim)));
    return;
  }
  Kernel *k = reduce_kernel(l, n, x, reduced, &m);
  KExpr *s = kx_acc(l->a, k, kernel_reduce(k, KR_SUM, expr(l, k, x, m)));
  if (n->op == OP_MEAN) s = B(MUL, s, C((double)shape_numel(&n->shape) / (double)shape_numel(&x->shape)));
  store_rows(l, k, n, s);
}

/* Per row of logits: max, sum of exponentials, and the target's logit by a gather. */
typedef struct CeRow {
  Kernel *k;
  KExpr *x, *t, *valid, *mx, *sum;
  AxMap m;
} CeRow;

static CeRow ce_row(L *l, const Node *n) {
  const Node *x = n->in[0], *t = n->in[1];
  CeRow c = {.k = row_kernel(l, n, x)};
  Kernel *k = c.k;
  c.m = right_aligned(k, x->shape.ndim);
  AxMap tm = {{0}};
  for (int d = 0; d < t->shape.ndim; d++) tm.ax[d] = d;
  c.x = expr(l, k, x, c.m);
  c.t = expr(l, k, t, tm);
  c.valid = U(NEG, B(SUB, B(EQ, c.t, C(attr_int(n, "ignore_index"))), C(1))); /* 1 - (t == ignore) */
  c.mx = kx_acc(l->a, k, kernel_reduce(k, KR_MAX, c.x));
  c.sum = kx_acc(l->a, k, kernel_reduce(k, KR_SUM, U(EXP, B(SUB, c.x, c.mx))));
  return c;
}

/* The number of counted targets t of n (a loss, or ce_count), into one-element buffer b
 * (a new one when b < 0). */
static int count_targets(L *l, const Node *n, const Node *t, int b) {
  int64_t rows = shape_numel(&t->shape), dims[2] = {1, rows};
  Kernel *k = knew(l, "ce_count", KP_ROWS, dims, 2, 1);
  KView tv = {.offset = l->val[t->id].offset};
  if (l->val[t->id].kind != V_LAYOUT) error_at(n->loc, "%s: targets must be an input", op_info(n->op)->name);
  tv.strides[1] = 1;
  KExpr *tx = kx_load(l->a, k, kbuf(l, k, l->val[t->id].buf, DT_I32), tv);
  KExpr *valid = B(SUB, C(1), B(EQ, tx, C(attr_int(n, "ignore_index"))));
  if (b < 0) b = lbuf_new(l, TIER_WORK, 4);
  kernel_row(k, kbuf(l, k, b, DT_F32), (KView){0}, KS_SET, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, valid)));
  kfinish(l, l->seq, k);
  return b;
}

static int ce_count(L *l, const Node *n, const Node *t) { return count_targets(l, n, t, -1); }

static void lower_ce_count(L *l, const Node *n) {
  int b = out_buf(l, n);
  l->val[n->id] = layout_of(b, &n->shape);
  count_targets(l, n, n->in[0], b);
}

static void ce_mean(L *l, const Node *n, int per_row, int cnt, int64_t rows);

static void lower_cross_entropy(L *l, const Node *n) {
  const Node *x = n->in[0];
  int64_t rows = shape_numel(&x->shape) / x->shape.d[x->shape.ndim - 1];
  if (shape_numel(&n->in[1]->shape) != rows || l->val[n->in[1]->id].kind != V_LAYOUT)
    error_at(n->loc, "cross_entropy: targets must be an input");
  CeRow c = ce_row(l, n);
  Kernel *k = c.k;
  if (l->val[x->id].kind != V_LAYOUT && widening(x)) x = x->in[0]; /* the 16-bit logits, widened as read */
  const Val *xv = &l->val[x->id];
  if (xv->kind != V_LAYOUT) error_at(n->loc, "cross_entropy: logits must be in memory");
  KView g = view_of(l, k, x, c.m);
  g.strides[k->ndims - 1] = 0;
  g.gather = B(MUL, c.t, c.valid);
  g.gather_stride = xv->strides[x->shape.ndim - 1];
  KExpr *xt = kx_load(l->a, k, kbuf(l, k, xv->buf, x->dtype), g);
  KExpr *loss = B(MUL, c.valid, B(SUB, B(ADD, U(LOG, c.sum), c.mx), xt));
  int per_row = lbuf_new(l, TIER_WORK, rows * 4);
  KView rv = {0};
  int64_t st = 1;
  for (int d = k->row_dims - 1; d >= 0; d--) {
    rv.strides[d] = st;
    st *= k->dims[d];
  }
  kernel_row(k, kbuf(l, k, per_row, DT_F32), rv, KS_SET, loss);
  kfinish(l, l->seq, k);
  ce_mean(l, n, per_row, ce_count(l, n, n->in[1]), rows);
}

/* n's loss: the sum of the rows' losses over the count (at least 1). */
static void ce_mean(L *l, const Node *n, int per_row, int cnt, int64_t rows) {
  int64_t dims[2] = {1, rows};
  Kernel *m = knew(l, "ce_mean", KP_ROWS, dims, 2, 1);
  KView lv = {0};
  lv.strides[1] = 1;
  KExpr *sum = kx_acc(l->a, m, kernel_reduce(m, KR_SUM, kx_load(l->a, m, kbuf(l, m, per_row, DT_F32), lv)));
  KExpr *count = kx_load(l->a, m, kbuf(l, m, cnt, DT_F32), (KView){0});
  int b = out_buf(l, n);
  l->val[n->id] = layout_of(b, &n->shape);
  kernel_row(m, kbuf(l, m, b, DT_F32), (KView){0}, KS_SET,
             kx_binary(l->a, m, KB_DIV, sum, kx_binary(l->a, m, KB_MAX, count, kx_const(l->a, m, 1))));
  kfinish(l, l->seq, m);
}

static void lower_cross_entropy_grad(L *l, const Node *n) {
  int cnt = ce_count(l, n, n->in[1]);
  CeRow c = ce_row(l, n);
  Kernel *k = c.k;
  KExpr *p = B(DIV, U(EXP, B(SUB, c.x, c.mx)), c.sum);
  KExpr *onehot = B(EQ, kx_coord(l->a, k, k->ndims - 1), c.t);
  KExpr *count = B(MAX, kx_load(l->a, k, kbuf(l, k, cnt, DT_F32), (KView){0}), C(1));
  AxMap none = {{0}};
  KExpr *g = expr(l, k, n->in[2], none);
  store_out(l, k, n, B(MUL, c.valid, B(DIV, B(MUL, B(SUB, p, onehot), g), count)));
}

/* ---- scatter, pad, concat -------------------------------------------------------------- */

static void lower_embedding_grad(L *l, const Node *n) {
  const Node *ix = n->in[0], *g = n->in[1];
  int b = out_buf(l, n);
  l->val[n->id] = layout_of(b, &n->shape);
  if (store_mode(l, b) == KS_SET) { /* a scatter-add starts from zero, unless it accumulates into a slot */
    IsaInstr *z = emit(l, l->seq, ISA_ZERO);
    z->zero.tier = PENDING + b;
    z->zero.bytes = bytes_of(n);
    touch(l, b, l->seq->n - 1);
  }
  Kernel *k = knew(l, "embedding_grad", KP_COLS, g->shape.d, g->shape.ndim, g->shape.ndim - 1);
  AxMap m = right_aligned(k, g->shape.ndim);
  KView sv = {0};
  sv.strides[k->ndims - 1] = 1;
  sv.gather = expr(l, k, ix, m);
  sv.gather_stride = n->shape.d[1];
  kernel_map(k, kbuf(l, k, b, n->dtype), sv, KS_ADD, expr(l, k, g, m));
  kfinish(l, l->seq, k);
}

static void lower_concat(L *l, const Node *n) {
  int axis = (int)attr_int(n, "axis");
  if (axis < 0) axis += n->shape.ndim;
  int b = out_buf(l, n);
  Val out = layout_of(b, &n->shape);
  int64_t off = 0;
  for (int i = 0; i < n->nin; i++) {
    const Node *x = n->in[i];
    Kernel *k = knew(l, "concat", KP_ROWS, x->shape.d, x->shape.ndim, x->shape.ndim - 1);
    AxMap m = right_aligned(k, x->shape.ndim);
    KView v = {.offset = off * out.strides[axis]};
    for (int d = 0; d < x->shape.ndim; d++) v.strides[d] = out.strides[d];
    kernel_map(k, kbuf(l, k, b, n->dtype), v, store_mode(l, b), expr(l, k, x, m));
    kfinish(l, l->seq, k);
    off += x->shape.d[axis];
  }
  l->val[n->id] = out;
}

/* ---- views ----------------------------------------------------------------------------- */

/* Strides for viewing x's layout in shape `to` without moving data, as numpy does:
 * dimensions are matched in groups of equal product, and within a group the old
 * dimensions must be laid out one inside the other. False if that is impossible. */
static bool reshape_strides(const Shape *from, const int64_t *st, const Shape *to, int64_t *out) {
  int i = 0, j = 0;
  while (i < from->ndim || j < to->ndim) {
    if (j < to->ndim && to->d[j] == 1) {
      out[j++] = 0;
      continue;
    }
    if (i < from->ndim && from->d[i] == 1) {
      i++;
      continue;
    }
    if (i >= from->ndim || j >= to->ndim) return false;
    int i0 = i, j0 = j;
    int64_t pa = from->d[i++], pb = to->d[j++];
    while (pa != pb) {
      if (pa < pb) {
        if (i >= from->ndim) return false;
        pa *= from->d[i++];
      } else {
        if (j >= to->ndim) return false;
        pb *= to->d[j++];
      }
    }
    int prev = -1; /* the group's old dimensions (size 1 aside) must nest */
    for (int k = i0; k < i; k++) {
      if (from->d[k] == 1) continue;
      if (prev >= 0 && st[prev] != st[k] * from->d[k]) return false;
      prev = k;
    }
    int64_t inner = st[prev];
    for (int k = j - 1; k >= j0; k--) {
      out[k] = inner;
      inner *= to->d[k];
    }
  }
  return true;
}

static void lower_reshape(L *l, const Node *n) {
  const Node *x = n->in[0];
  Val v = l->val[x->id];
  int64_t st[MAX_DIMS];
  if (reshape_strides(&x->shape, v.strides, &n->shape, st)) memcpy(v.strides, st, sizeof st);
  else {
    l->val[x->id] = materialize(l, x, lbuf_new(l, TIER_WORK, bytes_of(x)));
    v = l->val[x->id];
    contiguous(&n->shape, v.strides);
  }
  l->val[n->id] = v;
}

static void lower_transpose(L *l, const Node *n) {
  const Val *xv = &l->val[n->in[0]->id];
  const AttrVal *p = attr_get(n, "perm");
  Val v = *xv;
  for (int d = 0; d < p->n; d++) v.strides[d] = xv->strides[p->v[d]];
  l->val[n->id] = v;
}

static void lower_slice(L *l, const Node *n) {
  const Val *xv = &l->val[n->in[0]->id];
  int axis = (int)attr_int(n, "axis");
  if (axis < 0) axis += n->shape.ndim;
  Val v = *xv;
  v.offset += attr_int(n, "start") * xv->strides[axis];
  l->val[n->id] = v;
}

static void lower_expr_node(L *l, const Node *n);

/* A broadcast of a buffer is a view (stride 0 on the new axes); of an expression, an expression. */
static void lower_broadcast(L *l, const Node *n) {
  const Node *x = n->in[0];
  const Val *xv = &l->val[x->id];
  if (xv->kind != V_LAYOUT) {
    lower_expr_node(l, n);
    return;
  }
  Val v = *xv;
  int off = n->shape.ndim - x->shape.ndim;
  for (int d = 0; d < n->shape.ndim; d++) v.strides[d] = d < off || x->shape.d[d - off] == 1 ? 0 : xv->strides[d - off];
  l->val[n->id] = v;
}

/* ---- collectives ------------------------------------------------------------------------ */

static bool contiguous_val(const L *l, const Node *n) {
  const Val *v = &l->val[n->id];
  if (v->kind != V_LAYOUT) return false;
  int64_t st[MAX_DIMS];
  contiguous(&n->shape, st);
  for (int d = 0; d < n->shape.ndim; d++)
    if (n->shape.d[d] != 1 && v->strides[d] != st[d]) return false;
  return true;
}

/* n's value in a contiguous buffer: copied there when it is an expression or a strided view. */
static const Val *in_memory(L *l, const Node *n) {
  if (!contiguous_val(l, n)) l->val[n->id] = materialize(l, n, lbuf_new(l, TIER_WORK, bytes_of(n)));
  return &l->val[n->id];
}

static const IsaCommKind comm_kinds[OP_COUNT] = {
    [OP_ALL_REDUCE] = ISA_COMM_ALL_REDUCE,         [OP_ALL_GATHER] = ISA_COMM_ALL_GATHER,
    [OP_REDUCE_SCATTER] = ISA_COMM_REDUCE_SCATTER, [OP_SPLIT] = ISA_COMM_SPLIT,
    [OP_ALL_TO_ALL] = ISA_COMM_ALL_TO_ALL,
};

/* A collective reads a contiguous buffer and writes a new one (never a gradient slot:
 * it overwrites). Its geometry is the global tensor: outer x n x inner, with n the
 * part of the split axis in one block; an all_to_all's, its own tensor (ranks blocks). */
static void lower_comm(L *l, const Node *n) {
  const Node *x = n->in[0];
  const Val *xv = in_memory(l, x);
  int b = lbuf_new(l, TIER_WORK, bytes_of(n));
  l->val[n->id] = layout_of(b, &n->shape);
  IsaInstr *in = emit(l, l->seq, ISA_COMM);
  IsaComm *c = &in->comm;
  *c = (IsaComm){.kind = comm_kinds[n->op],
                 .group = ISA_GROUP_TP,
                 .tier = {PENDING + xv->buf, PENDING + b},
                 .off = {xv->offset * 4, 0},
                 .outer = shape_numel(&n->shape),
                 .n = 1,
                 .inner = 1};
  if (n->op != OP_ALL_REDUCE && n->op != OP_ALL_TO_ALL) {
    const Shape *gs = n->op == OP_ALL_GATHER ? &n->shape : &x->shape;
    int a = (int)attr_int(n, "axis");
    if (a < 0) a += gs->ndim;
    int64_t blocks = attr_int(n, "blocks");
    c->outer = blocks, c->inner = 1;
    for (int d = 0; d < a; d++) c->outer *= gs->d[d];
    for (int d = a + 1; d < gs->ndim; d++) c->inner *= gs->d[d];
    c->n = gs->d[a] / blocks;
  }
  touch(l, xv->buf, l->seq->n - 1);
  touch(l, b, l->seq->n - 1);
}

/* tp_copy is the identity forward: the same layout, or the same expression. */
static void lower_tp_copy(L *l, const Node *n) {
  if (l->val[n->in[0]->id].kind == V_LAYOUT) l->val[n->id] = l->val[n->in[0]->id];
  else lower_expr_node(l, n);
}

/* ---- fused attention ------------------------------------------------------------------- */

/* An attention operand's layout: [B, L, C] with unit-stride features (copied when not). */
static Val attn_layout(L *l, const Node *n) {
  const Val *v = &l->val[n->id];
  if (v->kind != V_LAYOUT || (n->shape.d[2] > 1 && v->strides[2] != 1)) v = in_memory(l, n);
  return *v;
}

static KOperand attn_operand(L *l, Kernel *k, const Node *n, const Val *v) {
  return (KOperand){kbuf(l, k, v->buf, n->dtype), v->offset, v->strides[0], v->strides[1]};
}

/* flash_attention and its gradients: one KAttn kernel each (codegen/kernel.h). */
static void lower_flash(L *l, const Node *n) {
  bool fwd = n->op == OP_FLASH_ATTENTION;
  int which = fwd ? -1 : (int)attr_int(n, "which");
  const Node *q = n->in[0];
  bool reads[6];
  Val in[6];
  for (int i = 0; i < 6; i++) { /* dv reads neither v nor delta */
    reads[i] = i < n->nin && !(which == 2 && (i == 2 || i == 5));
    if (reads[i]) in[i] = attn_layout(l, n->in[i]);
  }
  int ob = out_buf(l, n);
  Val ov = layout_of(ob, &n->shape);
  KAttn *A = arena_alloc(l->a, sizeof *A);
  int64_t heads = attr_int(n, "heads"), hd = q->shape.d[2] / heads;
  const AttrVal *sc = attr_get(n, "scale");
  *A = (KAttn){.pass = fwd ? KA_FWD : (KAttnPass)(KA_DQ + which),
               .batch = q->shape.d[0],
               .heads = heads,
               .sq = q->shape.d[1],
               .sk = n->in[1]->shape.d[1],
               .hd = hd,
               .kv_heads = attn_kv_heads(n),
               .window = attn_window(n),
               .causal = attr_int(n, "causal"),
               .scale = (float)(sc->set ? sc->f : 1.0 / sqrt((double)hd))};
  int64_t dims[2] = {kattn_rows(A), 1};
  Kernel *k = knew(l,
                   fwd          ? "flash_attention"
                   : which == 0 ? "flash_attention_dq"
                   : which == 1 ? "flash_attention_dk"
                                : "flash_attention_dv",
                   KP_ROWS, dims, 2, 1);
  KOperand none = {-1, 0, 0, 0}, *ops[6] = {&A->q, &A->k, &A->v, &A->out, &A->g, &A->delta};
  for (int i = 0; i < 6; i++) *ops[i] = reads[i] ? attn_operand(l, k, n->in[i], &in[i]) : none;
  A->res = attn_operand(l, k, n, &ov);
  A->store = store_mode(l, ob);
  k->attn = A;
  l->val[n->id] = ov;
  kfinish(l, l->seq, k);
}

/* ---- the fused classifier: cross-entropy of a GEMM, a chunk of rows at a time --------------- */

/* classifier_ce's vocabulary: w's rows (transpose_b) or columns. */
static int64_t classifier_vocab(const Node *n) { return n->in[1]->shape.d[attr_int(n, "transpose_b") ? 0 : 1]; }

/* A GEMM of f32 operands given by buffer and element offset (row-major, as IsaGemm). */
static void plain_gemm(L *l, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                       bool accumulate, const int buf[3], const int64_t off[3]) {
  IsaGemm g = {.ta = ta,
               .tb = tb,
               .m = m,
               .n = n,
               .k = k,
               .lda = lda,
               .ldb = ldb,
               .ldc = ldc,
               .alpha = 1,
               .beta = accumulate,
               .batch = {1, 1}};
  for (int i = 0; i < 3; i++) g.tier[i] = PENDING + buf[i], g.off[i] = off[i] * 4;
  emit(l, l->seq, ISA_GEMM)->gemm = g;
  for (int i = 0; i < 3; i++) touch(l, buf[i], l->seq->n - 1);
}

/* What lowering classifier_ce and its gradient share: x [rows, d] in memory, w as a
 * GEMM operand, and the chunk buffer of chunk x V logits. */
typedef struct Cls {
  const Node *x, *w, *t;
  Val xv;
  Mat w_fwd, w_dx;
  bool tb;
  int64_t d, V, rows, chunk;
  int s;
} Cls;

static Cls cls_of(L *l, const Node *n) {
  Cls c = {.x = n->in[0], .w = n->in[1], .t = n->in[2], .tb = attr_int(n, "transpose_b")};
  c.d = c.x->shape.d[c.x->shape.ndim - 1], c.V = classifier_vocab(n);
  c.rows = shape_numel(&c.t->shape), c.chunk = attr_int(n, "chunk");
  if (!contiguous_val(l, c.t)) error_at(n->loc, "%s: targets must be an input", op_info(n->op)->name);
  c.xv = *in_memory(l, c.x);
  gemm_operand(l, c.w, c.tb, &c.w_fwd);
  gemm_operand(l, c.w, !c.tb, &c.w_dx);
  c.s = lbuf_new(l, TIER_WORK, c.chunk * c.V * 4);
  return c;
}

/* logits of rows [r0, r0 + m) into the chunk buffer, and the cross-entropy row kernel over them */
static CeRow cls_chunk(L *l, const Node *n, const Cls *c, int64_t r0, int64_t m, const char *what) {
  plain_gemm(l, false, c->w_fwd.trans, m, c->V, c->d, c->d, c->w_fwd.ld, c->V, false,
             (int[]){c->xv.buf, c->w_fwd.buf, c->s}, (int64_t[]){c->xv.offset + r0 * c->d, c->w_fwd.off, 0});
  int64_t dims[2] = {m, c->V};
  CeRow r = {.k = knew(l, what, KP_ROWS, dims, 2, 1)};
  Kernel *k = r.k;
  const Val *tv = &l->val[c->t->id];
  KView tview = {.offset = tv->offset + r0};
  tview.strides[0] = 1;
  r.x = kx_load(l->a, k, kbuf(l, k, c->s, DT_F32), kview_contig(k, 0));
  r.t = kx_load(l->a, k, kbuf(l, k, tv->buf, DT_I32), tview);
  r.valid = U(NEG, B(SUB, B(EQ, r.t, C(attr_int(n, "ignore_index"))), C(1)));
  r.mx = kx_acc(l->a, k, kernel_reduce(k, KR_MAX, r.x));
  r.sum = kx_acc(l->a, k, kernel_reduce(k, KR_SUM, U(EXP, B(SUB, r.x, r.mx))));
  return r;
}

/* Forward: per chunk the logits (a GEMM) and each row's loss; then their mean. */
static void lower_classifier_ce(L *l, const Node *n) {
  Cls c = cls_of(l, n);
  int per_row = lbuf_new(l, TIER_WORK, c.rows * 4);
  for (int64_t r0 = 0; r0 < c.rows; r0 += c.chunk) {
    int64_t m = c.rows - r0 < c.chunk ? c.rows - r0 : c.chunk;
    CeRow r = cls_chunk(l, n, &c, r0, m, "classifier_ce");
    Kernel *k = r.k;
    KView g = {.strides = {c.V, 0}, .gather = B(MUL, r.t, r.valid), .gather_stride = 1};
    KExpr *xt = kx_load(l->a, k, kbuf(l, k, c.s, DT_F32), g);
    KView rv = {.offset = r0, .strides = {1, 0}};
    kernel_row(k, kbuf(l, k, per_row, DT_F32), rv, KS_SET, B(MUL, r.valid, B(SUB, B(ADD, U(LOG, r.sum), r.mx), xt)));
    kfinish(l, l->seq, k);
  }
  ce_mean(l, n, per_row, ce_count(l, n, c.t), c.rows);
}

/* Backward, one pass over the chunks: the logits again, their gradient in place, then
 * x's rows of the gradient (a GEMM into the output's first part) and w's gradient
 * summed over the chunks (a GEMM into its second part). */
static void lower_classifier_ce_grad(L *l, const Node *n) {
  Cls c = cls_of(l, n);
  int cnt = ce_count(l, n, c.t), out = out_buf(l, n);
  l->val[n->id] = layout_of(out, &n->shape);
  int64_t dw = c.rows * c.d; /* where w's gradient starts */
  for (int64_t r0 = 0; r0 < c.rows; r0 += c.chunk) {
    int64_t m = c.rows - r0 < c.chunk ? c.rows - r0 : c.chunk;
    CeRow r = cls_chunk(l, n, &c, r0, m, "classifier_ce_grad");
    Kernel *k = r.k;
    KExpr *p = B(DIV, U(EXP, B(SUB, r.x, r.mx)), r.sum);
    KExpr *onehot = B(EQ, kx_coord(l->a, k, 1), r.t);
    KExpr *count = B(MAX, kx_load(l->a, k, kbuf(l, k, cnt, DT_F32), (KView){0}), C(1));
    KExpr *g = expr(l, k, n->in[3], (AxMap){{0}});
    kernel_map(k, kbuf(l, k, c.s, DT_F32), kview_contig(k, 0), KS_SET,
               B(MUL, r.valid, B(DIV, B(MUL, B(SUB, p, onehot), g), count)));
    kfinish(l, l->seq, k);
    int64_t xoff = c.xv.offset + r0 * c.d;
    plain_gemm(l, false, c.w_dx.trans, m, c.d, c.V, c.V, c.w_dx.ld, c.d, false, (int[]){c.s, c.w_dx.buf, out},
               (int64_t[]){0, c.w_dx.off, r0 * c.d});
    if (c.tb) /* w [V, d]: dlogitsᵀ x */
      plain_gemm(l, true, false, c.V, c.d, m, c.V, c.d, c.d, r0 > 0, (int[]){c.s, c.xv.buf, out},
                 (int64_t[]){0, xoff, dw});
    else /* w [d, V]: xᵀ dlogits */
      plain_gemm(l, true, false, c.d, c.V, m, c.d, c.V, c.V, r0 > 0, (int[]){c.xv.buf, c.s, out},
                 (int64_t[]){xoff, 0, dw});
  }
}

/* ---- the walk over the graph ------------------------------------------------------------ */

/* Of those, the inputs a kernel may read from a 16-bit buffer, widened as it loads:
 * the logits of a loss under mixed precision, whose f32 form is then never stored. */
static const unsigned widened_inputs[OP_COUNT] = {
    [OP_CROSS_ENTROPY] = 1,
    [OP_CROSS_ENTROPY_GRAD] = 1,
};

/* Inputs that must be in memory, by op: GEMM operands, views, shifted or gathered reads. */
static const unsigned memory_inputs[OP_COUNT] = {
    [OP_MATMUL] = 3,          [OP_RESHAPE] = 1,
    [OP_TRANSPOSE] = 1,       [OP_SLICE] = 1,
    [OP_ROTARY] = 1,          [OP_PAD] = 1,
    [OP_EMBEDDING] = 1,       [OP_CROSS_ENTROPY] = 3,
    [OP_CE_COUNT] = 1,        [OP_CROSS_ENTROPY_GRAD] = 3,
    [OP_FLASH_ATTENTION] = 7, [OP_FLASH_ATTENTION_GRAD] = 63,
    [OP_CLASSIFIER_CE] = 7,   [OP_CLASSIFIER_CE_GRAD] = 7,
    [OP_FP8_QUANTIZE] = 2,    [OP_SCALED_MATMUL] = 31,
};

static bool needs_memory(const Node *n, int i) { return i < 32 && (memory_inputs[n->op] >> i & 1); }

static void check_supported(const Node *n) {
  bool fp8 =
      n->op == OP_FP8_QUANTIZE || ((n->op == OP_RESHAPE || n->op == OP_TRANSPOSE) && n->in[0]->op == OP_FP8_QUANTIZE);
  if (n->dtype != DT_F32 && n->dtype != DT_BF16 && n->dtype != DT_F16 && n->dtype != DT_I32 && !fp8)
    error_at(n->loc,
             "%s: code generation supports f32, bf16 and f16 tensors (and fp8 where fp8_quantize writes them), not %s",
             op_info(n->op)->name, dtype_name(n->dtype));
  if (n->op == OP_ATTENTION) error_at(n->loc, "attention must be decomposed before lowering");
}

/* A term of a sum that only that sum reads, computed by an instruction of its own. */
static bool own_term(const L *l, const Node *t, const Node *sum) {
  OpClass c = op_info(t->op)->cls;
  return l->uses[t->id] == 1 && l->grad_of[t->id] < 0 && t->dtype == DT_F32 && shape_eq(&t->shape, &sum->shape) &&
         c != CLS_SOURCE && c != CLS_MOVE && c != CLS_COMM;
}

/* Parameter k's gradient n as a sum of terms (a tied weight's uses, a weight shared
 * by micro-batches): each term is added into the slot as soon as it is computed, as
 * autograd accumulates .grad, rather than kept until the last one (a classifier's
 * weight gradient would stay from the start of the backward pass to its end). The
 * slot starts the step zeroed; the sum's rounding is the same. */
static void slot_terms(L *l, const Node *n, int k) {
  if (n->op != OP_ADD || n->dtype != DT_F32 || !own_term(l, n->in[0], n) || !own_term(l, n->in[1], n) ||
      n->in[0] == n->in[1])
    return;
  l->summed[n->id] = true;
  for (int i = 0; i < 2; i++) {
    l->grad_of[n->in[i]->id] = k;
    l->need_layout[n->in[i]->id] = true;
    slot_terms(l, n->in[i], k);
  }
}

static void analyse(L *l) {
  Graph *g = l->g;
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    check_supported(n);
    for (int k = 0; k < n->nin; k++) {
      l->uses[n->in[k]->id]++;
      l->user[n->in[k]->id] = n;
      if (n->op == OP_GELU) l->gelu[n->in[k]->id] = l->gelu[n->in[k]->id] ? &several_gelus : n;
      if (needs_memory(n, k))
        l->need_layout[(widened_inputs[n->op] >> k & 1) && widening(n->in[k]) ? n->in[k]->in[0]->id : n->in[k]->id] =
            true;
    }
  }
  if (g->loss) l->need_layout[g->loss->id] = true;
  for (int k = 0; k < g->nparams; k++)
    if (g->param_grads[k]) {
      l->need_layout[g->param_grads[k]->id] = true;
      if (l->grad_of[g->param_grads[k]->id] < 0) {
        l->grad_of[g->param_grads[k]->id] = k;
        slot_terms(l, g->param_grads[k], k);
      }
    }
}

static void lower_param(L *l, const Node *n) {
  int k = 0;
  while (l->g->params[k] != n) k++;
  int b = lbuf_new(l, TIER_PARAMS, bytes_of(n));
  l->bufs[b].offset = l->p->params[l->pidx[k]].offset;
  l->bufs[b].placed = l->bufs[b].pinned = true;
  l->val[n->id] = layout_of(b, &n->shape);
}

static void lower_input(L *l, const Node *n) {
  int b = lbuf_new(l, TIER_WORK, bytes_of(n));
  l->bufs[b].pinned = true;
  l->val[n->id] = layout_of(b, &n->shape);
  for (int i = 0; i < l->p->ninputs; i++)
    if (l->p->inputs[i].node == n) l->p->inputs[i].offset = b; /* a buffer index until placed */
}

/* A load and a conversion: a widening of a value in memory, a rounding of an input
 * (kept whole anyway: a received activation), or a cast of either. */
static bool cheap_cast(const L *l, const Node *n) {
  if (n->op != OP_CAST) return false;
  const Node *x = n->in[0];
  return (widening(n) && l->val[x->id].kind == V_LAYOUT) || x->op == OP_INPUT || cheap_cast(l, x);
}

/* An expression: computed where it is read, unless it must be in memory or is read
 * more than once (constants and positions are always recomputed). A widening cast read
 * more than once keeps its narrower input in memory instead and widens it where read:
 * half the bytes for whatever the backward keeps (a norm's 16-bit input, mixed
 * precision). */
static void lower_expr_node(L *l, const Node *n) {
  const Node *x = n->nin ? n->in[0] : NULL;
  if (n->op == OP_CAST && widening(n) && l->uses[n->id] > 1 && !l->need_layout[n->id] && l->val[x->id].kind == V_EXPR)
    l->val[x->id] = materialize(l, x, out_buf(l, x));
  l->val[n->id].kind = V_EXPR;
  bool cheap = n->op == OP_CONST || n->op == OP_ARANGE || n->op == OP_LOSS_SCALE || cheap_cast(l, n);
  if (l->need_layout[n->id] || (l->uses[n->id] > 1 && !cheap)) l->val[n->id] = materialize(l, n, out_buf(l, n));
}

static void lower_norm_grad(L *l, const Node *n) {
  if (attr_int(n, "which") == 0) lower_norm_dx(l, n);
  else lower_norm_param_grad(l, n);
}

static void lower_unsupported(L *l, const Node *n) {
  error_at(n->loc, "%s: no code generation (run pass_decompose first)", op_info(n->op)->name);
}

#define lower_const lower_expr_node
#define lower_arange lower_expr_node
#define lower_loss_scale lower_expr_node
#define lower_embedding lower_expr_node
#define lower_add lower_expr_node
#define lower_sub lower_expr_node
#define lower_mul lower_expr_node
#define lower_div lower_expr_node
#define lower_neg lower_expr_node
#define lower_gelu lower_expr_node
#define lower_silu lower_expr_node
#define lower_gelu_erf lower_expr_node
#define lower_relu lower_expr_node
#define lower_dropout lower_expr_node
#define lower_cast lower_expr_node
#define lower_rotary lower_expr_node
#define lower_gelu_grad lower_expr_node
#define lower_silu_grad lower_expr_node
#define lower_gelu_erf_grad lower_expr_node
#define lower_relu_grad lower_expr_node
#define lower_pad lower_expr_node
#define lower_sum lower_reduce
#define lower_mean lower_reduce
#define lower_sum_to lower_reduce
#define lower_layernorm_grad lower_norm_grad
#define lower_rmsnorm_grad lower_norm_grad
#define lower_attention lower_unsupported
#define lower_flash_attention lower_flash
#define lower_flash_attention_grad lower_flash
#define lower_all_reduce lower_comm
#define lower_all_gather lower_comm
#define lower_reduce_scatter lower_comm
#define lower_split lower_comm
#define lower_all_to_all lower_comm

static void (*const lower_rules[OP_COUNT])(L *, const Node *) = {
#define OP(id, name, nin, cls, flags, attrs) [OP_##id] = lower_##name,
#include "ir/ops.def"
#undef OP
};

static void lower_node(L *l, const Node *n) {
  if (l->summed[n->id]) { /* its terms are in the slot */
    int pi = l->grad_of[n->id];
    l->val[n->id] = layout_of(grad_slot(l, pi, n), &n->shape);
  } else if (!l->fused[n->id]) lower_rules[n->op](l, n);
}

/* Gradients that did not land in their parameter's slot are copied there. */
static void fill_grad_slots(L *l) {
  Graph *g = l->g;
  for (int k = 0; k < g->nparams; k++) {
    const Node *gn = g->param_grads[k];
    if (!gn || l->slot_used[k]) continue;
    l->at = gn;
    int b = grad_slot(l, k, gn);
    Kernel *kk = knew(l, "grad_copy", KP_ROWS, gn->shape.d, gn->shape.ndim, gn->shape.ndim ? gn->shape.ndim - 1 : 0);
    kernel_map(kk, kbuf(l, kk, b, DT_F32), kview_contig(kk, 0), KS_ADD,
               expr(l, kk, gn, right_aligned(kk, gn->shape.ndim)));
    kfinish(l, l->seq, kk);
  }
}

/* ---- parameters, inputs, optimizer ------------------------------------------------------- */

/* A value's data: x itself, or what a tensor-parallel split of it (passes/partition.c) parts. */
static const Node *unsplit(const Node *x) {
  while (x->op == OP_SPLIT) x = x->in[0];
  return x;
}

/* The loss op of g: its cross_entropy or fused classifier, the loss itself or, where a
 * tensor-parallel plan splits the loss's rows, the op whose share of the loss the ranks
 * sum (all_reduce(mul(loss op, share)), passes/partition.c); NULL for another loss. */
static const Node *loss_op(const Graph *g) {
  const Node *x = g->loss;
  if (x && x->op == OP_ALL_REDUCE && x->in[0]->op == OP_MUL) x = x->in[0]->in[0];
  return x && (x->op == OP_CROSS_ENTROPY || x->op == OP_CLASSIFIER_CE) ? x : NULL;
}

/* The logits the loss reads as they are stored: cross_entropy's (their 16-bit form
 * where it reads them widened; not the fused classifier's, which it never stores). */
static const Node *loss_logits(const Graph *g) {
  const Node *u = loss_op(g);
  if (!u || u->op != OP_CROSS_ENTROPY) return NULL;
  return widening(u->in[0]) ? u->in[0]->in[0] : u->in[0];
}

/* The targets of the loss: cross_entropy's, or the fused classifier's; NULL for another loss. */
static const Node *loss_targets(const Graph *g) {
  const Node *u = loss_op(g);
  return !u ? NULL : unsplit(u->in[u->op == OP_CROSS_ENTROPY ? 1 : 2]);
}

/* The classes a loss op u scores (its logits' last dimension), 0 for another op or none. */
static int64_t loss_classes(const Node *u) {
  if (!u) return 0;
  if (u->op == OP_CROSS_ENTROPY) return u->in[0]->shape.d[u->in[0]->shape.ndim - 1];
  return u->op == OP_CLASSIFIER_CE ? classifier_vocab(u) : 0;
}

static bool same_input(const Node *a, const Node *b) { return a->op == OP_INPUT && !strcmp(a->name, b->name); }

/* What the forward ops of the chunks read of input in->node: the values an id may take
 * (below each embedding's rows and each loss's classes, or the loss's ignore_index), and
 * whether it indexes an embedding of `classes` rows (a language model's tokens). */
static bool input_uses(Graph *const *gs, int ng, int64_t classes, PInput *in) {
  bool vocab = false;
  for (int c = 0; c < ng; c++)
    for (int i = 0; i < gs[c]->n_forward; i++) {
      const Node *u = gs[c]->nodes[i];
      for (int k = 0; k < u->nin && u->op != OP_SPLIT; k++) {
        if (!same_input(unsplit(u->in[k]), in->node)) continue;
        int64_t hi = -1;
        if (u->op == OP_EMBEDDING && k == 1) hi = u->in[0]->shape.d[0], vocab |= hi == classes;
        if ((u->op == OP_CROSS_ENTROPY && k == 1) || (u->op == OP_CLASSIFIER_CE && k == 2))
          hi = loss_classes(u), in->has_ignore = true, in->ignore = attr_int(u, "ignore_index");
        if (hi >= 0 && (in->hi < 0 || hi < in->hi)) in->hi = hi;
      }
    }
  return vocab;
}

/* Input n as train feeds it (lower.h, model_inputs). */
static PInput model_input(Graph *const *gs, int ng, const Node *n, int64_t batch) {
  if (n->dtype != DT_I32 && n->dtype != DT_F32)
    error_at(n->loc, "input %s: train feeds i32 and f32 inputs, not %s", n->name, dtype_name(n->dtype));
  if (n->shape.ndim < 1 || n->shape.d[0] != batch)
    error_at(n->loc,
             "input %s: train feeds every input by rows of the batch, so its first dimension must be the "
             "batch (%lld, as the first input's)",
             n->name, (long long)batch);
  const Node *targets = NULL;
  int64_t classes = 0;
  for (int c = 0; c < ng; c++)
    if (gs[c]->loss) targets = loss_targets(gs[c]), classes = loss_classes(loss_op(gs[c]));
  PInput in = {.node = n, .offset = -1, .role = PIN_OTHER, .hi = -1};
  bool vocab = n->dtype == DT_I32 && input_uses(gs, ng, classes, &in);
  if (targets && same_input(targets, n)) in.role = PIN_TARGETS;
  else if (vocab && n->shape.ndim == 2 && targets && shape_eq(&targets->shape, &n->shape)) in.role = PIN_TOKENS;
  return in;
}

PInput *model_inputs(Graph *const *gs, int ng, int *n) {
  int cap = 0, tokens = 0;
  for (int c = 0; c < ng; c++) cap += gs[c]->n_forward;
  PInput *in = arena_array(gs[0]->arena, cap ? cap : 1, sizeof *in);
  *n = 0;
  for (int c = 0; c < ng; c++)
    for (int i = 0; i < gs[c]->n_forward; i++) {
      const Node *x = gs[c]->nodes[i];
      bool seen = x->op != OP_INPUT;
      for (int k = 0; k < gs[c]->nwrt && !seen; k++) seen = gs[c]->wrt[k] == x; /* received activations */
      for (int k = 0; k < gs[c]->nseeds && !seen; k++) seen = gs[c]->seed_grad[k] == x;
      for (int j = 0; j < *n && !seen; j++) seen = same_input(in[j].node, x);
      if (seen) continue;
      if (*n == PROG_MAX_INPUTS) error_at(x->loc, "input %s: train feeds at most %d inputs", x->name, PROG_MAX_INPUTS);
      in[*n] = model_input(gs, ng, x, *n ? in[0].node->shape.d[0] : x->shape.ndim ? x->shape.d[0] : 0);
      tokens += in[(*n)++].role == PIN_TOKENS;
    }
  for (int j = 0; j < *n; j++) /* the targets of a token file are the tokens shifted */
    if (in[j].role == PIN_TARGETS && tokens != 1) in[j].role = PIN_OTHER;
  for (int j = 0; j < *n; j++)
    if (in[j].role == PIN_TOKENS && tokens != 1) in[j].role = PIN_OTHER;
  return in;
}

/* ---- the optimizer ---------------------------------------------------------------------- */

/* The optimizer's kernels cover parameters [lo, hi) of the program: consecutive, so one range
 * of each tier (layout_params lays them out 64-byte aligned, one after the other). Lowering
 * emits one kernel per parameter (hi = lo + 1), which compose (codegen/compose.h), ZeRO and
 * offload read parameter by parameter; compose then makes each run of parameters that the
 * same ranks update one multi-tensor kernel (lower_norm_kernel, lower_update_kernel). */

/* A parameter's last dimension, and its rows of it. */
static int64_t param_cols(const PParam *q) {
  return q->node->shape.ndim ? q->node->shape.d[q->node->shape.ndim - 1] : 1;
}
static int64_t param_rows(const PParam *q) { return q->numel / param_cols(q); }

static int64_t gcd(int64_t a, int64_t b) {
  while (b) {
    int64_t r = a % b;
    a = b, b = r;
  }
  return a;
}

/* Where parameter k's padding ends: the next one's offset. */
static int64_t param_end(const Program *p, int k) {
  return p->params[k].offset + ((pparam_bytes(&p->params[k]) + 63) & ~(int64_t)63);
}

/* A kernel of [lo, hi) numbered index: k<index>_<what>_<first>[_to_<last>] (a pipeline stage's
 * s<stage>_ first, as lower_pipeline names the others), dots made underscores. */
static Kernel *opt_kernel(L *l, int lo, int hi, const char *what, int index, const int64_t dims[2]) {
  const Program *p = l->p;
  const char *first = p->params[lo].node->name;
  char *name = hi - lo == 1 ? arena_printf(l->a, "k%d_%s_%s", index, what, first)
                            : arena_printf(l->a, "k%d_%s_%s_to_%s", index, what, first, p->params[hi - 1].node->name);
  if (p->pp > 1) name = arena_printf(l->a, "s%d_%s", (int)p->stage, name);
  for (char *c = name; *c; c++)
    if (*c == '.') *c = '_';
  for (int k = lo + 1; k < hi; k++) ir_assert(p->params[k].offset == param_end(p, k - 1));
  return kernel_new(l->a, name, KP_ROWS, dims, 2, 1);
}

/* The gradient norm's row: the longest that divides every parameter's padded length (in
 * floats) and is no longer than the longest last dimension (the longest row of a parameter),
 * so that every parameter's rows tile its bytes and a run of parameters is one kernel of
 * such rows, whose partial sums are those of one kernel per parameter: the same whichever
 * runs a plan makes (ZeRO's owners, tensor parallelism's replicated parameters) and so the
 * same norm, bit for bit. 0 (a partial sum per row of each parameter's last dimension, one
 * kernel per parameter) when that row is shorter than NORM_ROW_MIN floats: the partial sums,
 * pinned in the work tier and read back every step, would be too many (a 1000-class head's
 * bias, 1008 floats padded, leaves 48). */
enum { NORM_ROW_MIN = 64 };
static int64_t norm_row(const Program *p) {
  int64_t g = 0, most = 1;
  for (int k = 0; k < p->nparams; k++) {
    g = gcd(g, (param_end(p, k) - p->params[k].offset) / 4);
    if (param_cols(&p->params[k]) > most) most = param_cols(&p->params[k]);
  }
  for (int64_t w = most < g ? most : g; w >= NORM_ROW_MIN; w--)
    if (g % w == 0) return w;
  return 0;
}

/* Parameter k's slots of the norm's parts: one per row (norm_kernel). */
static int64_t norm_slots(const Program *p, int k) {
  return p->norm_row ? (param_end(p, k) - p->params[k].offset) / 4 / p->norm_row : param_rows(&p->params[k]);
}

/* The gradient norm of [lo, hi): one partial sum of squares per row, into the parts (tier,
 * offset: the pinned buffer of gradnorm_parts floats), each parameter's slots after those
 * of the parameters before it. With p->norm_row the rows are of that many floats, so a run
 * covers its parameters' bytes with their padding (read as zeros: no kernel writes it, and
 * the runtime zeroes the gradient tier); else a parameter alone sums its own rows. */
static Kernel *norm_kernel(L *l, int lo, int hi, int index, int tier, int64_t offset) {
  const Program *p = l->p;
  const PParam *q = &p->params[lo];
  int64_t w = p->norm_row, slot = 0, dims[2] = {param_rows(q), param_cols(q)};
  if (w) dims[0] = (param_end(p, hi - 1) - q->offset) / 4 / w, dims[1] = w;
  ir_assert(w || hi == lo + 1);
  for (int j = 0; j < lo; j++) slot += norm_slots(p, j);
  Kernel *k = opt_kernel(l, lo, hi, "gradnorm", index, dims);
  KExpr *x =
      kx_load(l->a, k, kernel_buf(k, "grad", TIER_GRADS, q->offset, dims[0] * dims[1], DT_F32), kview_contig(k, 0));
  KView v = {.offset = slot};
  v.strides[0] = 1;
  int parts = kernel_buf(k, "parts", tier, offset, p->gradnorm_parts, DT_F32);
  kernel_row(k, parts, v, KS_SET, kx_acc(l->a, k, kernel_reduce(k, KR_SUM, B(MUL, x, x))));
  kernel_check(k);
  return k;
}

/* What an update kernel stores into buffer b: e, or under loss scaling the old value
 * when the step is skipped (SC_APPLY 0: the list runs for its moves). */
static KExpr *applied(L *l, Kernel *k, int b, KView v, KExpr *e) {
  if (!l->g->train.loss_scaling) return e;
  return kx_select(l->a, k, kx_scalar(l->a, k, SC_APPLY), e, kx_load(l->a, k, b, v));
}

enum { EXACT_ROWS = 1 << 24 }; /* row coordinates f32 holds exactly, and every one below them */

/* The weight decay of [lo, hi) at a row of 16 floats: the scalar for the rows of parameters
 * with decay, 0 for the others, a select at each row where it changes, comparing the row
 * coordinate with that row. layout_params puts the parameters without decay first, so a run
 * changes at most once, near its start; the comparison is exact for a change at row at most
 * EXACT_ROWS (a larger coordinate rounds to a float no smaller than it), which
 * lower_update_end keeps to. One parameter: its decay, as it always was. */
static KExpr *run_decay(L *l, Kernel *k, int lo, int hi) {
  const Program *p = l->p;
  KExpr *wd = kx_scalar(l->a, k, SC_WD), *e = p->params[hi - 1].decay ? wd : C(0);
  for (int j = hi - 1; j > lo; j--) {
    if (p->params[j].decay == p->params[j - 1].decay) continue;
    int64_t row = (p->params[j].offset - p->params[lo].offset) / 64;
    ir_assert(row <= EXACT_ROWS);
    e = SEL(B(LT, kx_coord(l->a, k, 0), C(row)), p->params[j - 1].decay ? wd : C(0), e);
  }
  return e;
}

int lower_update_end(const Program *p, int lo, int hi) {
  for (int j = lo + 1; j < hi; j++)
    if (p->params[j].decay != p->params[j - 1].decay && (p->params[j].offset - p->params[lo].offset) / 64 > EXACT_ROWS)
      return j;
  return hi;
}

static Kernel *lamb_kernel(L *l, int pk, int index);

/* An Adam moment at buffer b: beta times its value plus (1 - beta) x (the gradient, or its
 * square), as it is stored (applied). */
static KExpr *moment(L *l, Kernel *k, int b, KView v, KExpr *beta, KExpr *x) {
  return applied(l, k, b, v, B(ADD, B(MUL, beta, kx_load(l->a, k, b, v)), B(MUL, B(SUB, C(1), beta), x)));
}

/* The update of [lo, hi), AdamW or SGD (LAMB's: lamb_kernel, one parameter), with the tier views param, grad, m and v
 * that it touches (offload plans read them). A parameter alone in its own shape; a run as rows of 16 floats (64 bytes:
 * every parameter starts a row) from the first's offset to the end of the last one's padding, where zeros stay zeros
 * (AdamW's step is 0 / (sqrt(0) + eps) there, SGD's 0; no other kernel reads the padding). Every element is computed as
 * for its parameter alone. Hyperparameters come from the scalars, so the runtime's flags override the model's
 * directive. */
static Kernel *update_kernel(L *l, int lo, int hi, int index) {
  const TrainSpec *t = &l->g->train;
  if (t->opt == OPT_LAMB) {
    ir_assert(hi == lo + 1);
    return lamb_kernel(l, lo, index);
  }
  const Program *q = l->p;
  const PParam *pp = &q->params[lo];
  int64_t dims[2] = {param_rows(pp), param_cols(pp)};
  if (hi - lo > 1) dims[0] = (param_end(q, hi - 1) - pp->offset) / 64, dims[1] = 16;
  Kernel *k = opt_kernel(l, lo, hi, t->opt == OPT_ADAMW ? "adamw" : "sgd", index, dims);
  unsigned mask = t->opt == OPT_ADAMW ? 15 : t->momentum > 0 ? 7 : 3;
  int tiers[4] = {TIER_PARAMS, TIER_GRADS, TIER_OPT, TIER_OPT}, b[4];
  int64_t offs[4] = {pp->offset, pp->offset, pp->offset, q->opt_v_offset + pp->offset};
  const char *names[4] = {"param", "grad", "m", "v"};
  for (int i = 0; i < 4; i++)
    b[i] = mask >> i & 1 ? kernel_buf(k, names[i], tiers[i], offs[i], dims[0] * dims[1], DT_F32) : -1;
  KView v = kview_contig(k, 0);
  KExpr *g = B(MUL, kx_load(l->a, k, b[1], v), kx_scalar(l->a, k, SC_GSCALE));
  KExpr *p = kx_load(l->a, k, b[0], v), *lr = kx_scalar(l->a, k, SC_LR);
  KExpr *wd = run_decay(l, k, lo, hi);
  if (t->opt == OPT_ADAMW) {
    KExpr *b1 = kx_scalar(l->a, k, SC_BETA1), *b2 = kx_scalar(l->a, k, SC_BETA2);
    kernel_map(k, b[2], v, KS_SET, moment(l, k, b[2], v, b1, g));
    kernel_map(k, b[3], v, KS_SET, moment(l, k, b[3], v, b2, B(MUL, g, g)));
    KExpr *m = kx_load(l->a, k, b[2], v), *vv = kx_load(l->a, k, b[3], v);
    KExpr *denom = B(ADD, U(SQRT, B(MUL, vv, kx_scalar(l->a, k, SC_BC2))), kx_scalar(l->a, k, SC_EPS));
    KExpr *step = B(DIV, B(MUL, B(MUL, lr, kx_scalar(l->a, k, SC_BC1)), m), denom);
    kernel_map(k, b[0], v, KS_SET, applied(l, k, b[0], v, B(SUB, B(MUL, p, B(SUB, C(1), B(MUL, lr, wd))), step)));
  } else {
    g = B(ADD, g, B(MUL, wd, p)); /* SGD's weight decay is L2, added to the gradient */
    if (t->momentum > 0) {
      kernel_map(k, b[2], v, KS_SET,
                 applied(l, k, b[2], v, B(ADD, B(MUL, kx_scalar(l->a, k, SC_MOMENTUM), kx_load(l->a, k, b[2], v)), g)));
      g = kx_load(l->a, k, b[2], v);
    }
    kernel_map(k, b[0], v, KS_SET, applied(l, k, b[0], v, B(SUB, p, B(MUL, lr, g))));
  }
  kernel_check(k);
  return k;
}

/* ---- LAMB ---- */

/* Parameter k's first slot of LAMB's norms: one per row of its last dimension, after the
 * slots of the parameters before it (a piece's rows are those of its part of the whole). */
static int64_t trust_slot(const Program *p, int k) {
  int64_t s = 0;
  for (int j = 0; j < k; j++) s += param_rows(&p->params[j]);
  return s;
}

int64_t lower_trust_slot(const Program *p, int k) { return trust_slot(p, k); }

/* The trust buffer as a kernel binds it: the pending work buffer while lowering places it
 * (L.trust_pending), after that its place in WORK. */
static int trust_buf(L *l, Kernel *k, const char *name, int64_t slot, int64_t n) {
  int tier = l->trust_pending ? PENDING + (int)l->p->trust_offset : TIER_WORK;
  int64_t base = l->trust_pending ? 0 : l->p->trust_offset;
  return kernel_buf(k, name, tier, base + 4 * slot, n, DT_F32);
}

/* LAMB's direction of parameter w at view v (m and v already this step's): Adam's step
 * with bias correction and the parameter's decay, u = m^ / (sqrt(v^) + eps) + wd w. */
static KExpr *lamb_dir(L *l, Kernel *k, const int b[3], KView v, KExpr *wd) {
  KExpr *m = kx_load(l->a, k, b[1], v), *vv = kx_load(l->a, k, b[2], v);
  KExpr *denom = B(ADD, U(SQRT, B(MUL, vv, kx_scalar(l->a, k, SC_BC2))), kx_scalar(l->a, k, SC_EPS));
  return B(ADD, B(DIV, B(MUL, m, kx_scalar(l->a, k, SC_BC1)), denom), B(MUL, wd, kx_load(l->a, k, b[0], v)));
}

/* A LAMB kernel of parameter k, of its shape, with its param, m and v bound (b[0..3)). */
static Kernel *lamb_new(L *l, int pk, const char *what, int index, int b[3]) {
  const PParam *q = &l->p->params[pk];
  int64_t dims[2] = {param_rows(q), param_cols(q)}, n = dims[0] * dims[1];
  Kernel *k = opt_kernel(l, pk, pk + 1, what, index, dims);
  b[0] = kernel_buf(k, "param", TIER_PARAMS, q->offset, n, DT_F32);
  b[1] = kernel_buf(k, "m", TIER_OPT, q->offset, n, DT_F32);
  b[2] = kernel_buf(k, "v", TIER_OPT, l->p->opt_v_offset + q->offset, n, DT_F32);
  return k;
}

static Kernel *lamb_moments_kernel(L *l, int pk, int index) {
  const PParam *q = &l->p->params[pk];
  int b[3];
  Kernel *k = lamb_new(l, pk, "lambmoments", index, b);
  int gb = kernel_buf(k, "grad", TIER_GRADS, q->offset, k->rows * k->cols, DT_F32);
  KView v = kview_contig(k, 0);
  KExpr *g = B(MUL, kx_load(l->a, k, gb, v), kx_scalar(l->a, k, SC_GSCALE));
  /* Adam's moments of parameter k: m and v from this step's gradient, as AdamW's */
  kernel_map(k, b[1], v, KS_SET, moment(l, k, b[1], v, kx_scalar(l->a, k, SC_BETA1), g));
  kernel_map(k, b[2], v, KS_SET, moment(l, k, b[2], v, kx_scalar(l->a, k, SC_BETA2), B(MUL, g, g)));
  kernel_check(k);
  return k;
}

/* Parameter k's partial sums of |w|^2 and |u|^2, one per row, into the trust buffer's
 * slots from trust_slot(k): the w half, then the u half trust_parts floats later. */
static Kernel *lamb_norm_kernel(L *l, int pk, int index) {
  const Program *p = l->p;
  int b[3];
  Kernel *k = lamb_new(l, pk, "lambnorm", index, b);
  int64_t slot = trust_slot(p, pk);
  int rows = (int)k->rows, wp = trust_buf(l, k, "wparts", slot, rows);
  int up = trust_buf(l, k, "uparts", p->trust_parts + slot, rows);
  KView v = kview_contig(k, 0), at = {.offset = 0};
  at.strides[0] = 1;
  KExpr *w = kx_load(l->a, k, b[0], v), *u = lamb_dir(l, k, b, v, run_decay(l, k, pk, pk + 1));
  int aw = kernel_reduce(k, KR_SUM, B(MUL, w, w)), au = kernel_reduce(k, KR_SUM, B(MUL, u, u));
  kernel_row(k, wp, at, KS_SET, kx_acc(l->a, k, aw));
  kernel_row(k, up, at, KS_SET, kx_acc(l->a, k, au));
  kernel_check(k);
  return k;
}

/* LAMB's update of parameter k: w - lr r u, with r its trust ratio, which the "trust"
 * instruction leaves in the parameter's first slot of the buffer's w half. */
static Kernel *lamb_kernel(L *l, int pk, int index) {
  int b[3];
  Kernel *k = lamb_new(l, pk, "lamb", index, b);
  int ratio = trust_buf(l, k, "ratio", trust_slot(l->p, pk), 1);
  KView v = kview_contig(k, 0), one = {.offset = 0}; /* strides 0: the one value everywhere */
  KExpr *u = lamb_dir(l, k, b, v, run_decay(l, k, pk, pk + 1));
  KExpr *step = B(MUL, B(MUL, kx_scalar(l->a, k, SC_LR), kx_load(l->a, k, ratio, one)), u);
  kernel_map(k, b[0], v, KS_SET, applied(l, k, b[0], v, B(SUB, kx_load(l->a, k, b[0], v), step)));
  kernel_check(k);
  return k;
}

/* The gradient norm's parts (a pinned work buffer: the runtime reads them after the list),
 * then per parameter its norm kernel and its update kernel. */
static void emit_optimizer(L *l) {
  Program *p = l->p;
  l->at = NULL;
  p->norm_row = norm_row(p);
  int64_t parts = 0;
  for (int k = 0; k < p->nparams; k++) parts += norm_slots(p, k);
  int pb = lbuf_new(l, TIER_WORK, parts * 4);
  l->bufs[pb].pinned = true;
  p->gradnorm_parts = parts;
  p->gradnorm_offset = pb;           /* a buffer index until placed */
  if (l->g->train.opt == OPT_LAMB) { /* the norms' two halves (the ratios in the first) */
    p->trust_parts = trust_slot(p, p->nparams);
    int tb = lbuf_new(l, TIER_WORK, 2 * p->trust_parts * 4);
    l->bufs[tb].pinned = true;
    p->trust_offset = tb, l->trust_pending = true;
  }
  for (int k = 0; k < p->nparams; k++) {
    kfinish(l, &p->gradnorm, norm_kernel(l, k, k + 1, p->nkernels, PENDING + pb, 0));
    kfinish(l, &p->update, update_kernel(l, k, k + 1, p->nkernels));
  }
  l->trust_pending = false;
}

/* A lowering context for building the optimizer's kernels of a lowered program. */
static L opt_context(Program *p) { return (L){.g = (Graph *)p->g, .p = p, .a = p->arena}; }

Kernel *lower_norm_kernel(Program *p, int lo, int hi, int index) {
  L l = opt_context(p);
  Kernel *k = norm_kernel(&l, lo, hi, index, TIER_WORK, p->gradnorm_offset);
  kernel_narrow(k);
  return k;
}

Kernel *lower_lamb_kernel(Program *p, int k, bool norm, int index) {
  L l = opt_context(p);
  Kernel *kn = norm ? lamb_norm_kernel(&l, k, index) : lamb_moments_kernel(&l, k, index);
  kernel_narrow(kn);
  return kn;
}

Kernel *lower_update_kernel(Program *p, int lo, int hi, int index) {
  ir_assert(lower_update_end(p, lo, hi) == hi);
  L l = opt_context(p);
  Kernel *k = update_kernel(&l, lo, hi, index);
  kernel_narrow(k);
  return k;
}

/* ---- pieces ------------------------------------------------------------------------------ */

/* The elements a piece of parameter q holds a multiple of: whole rows of its first dimension
 * (a checkpoint writes a piece as a box of them), 16 floats (every parameter starts an
 * update run's row) and the norm's row, so that a piece's slots of the norm are those of
 * its rows in the whole parameter. */
static int64_t piece_unit(const Program *p, const PParam *q) {
  int64_t u = q->node->shape.ndim ? q->numel / q->node->shape.d[0] : q->numel, w[2] = {16, p->norm_row};
  for (int i = 0; i < 2; i++) u = w[i] ? u / gcd(u, w[i]) * w[i] : u; /* lcm */
  return u;
}

/* l's list s with its k-th kernel (parameter k's, of the parameters before the split)
 * replaced by the kernels of that parameter's pieces [first[k], first[k + 1]). */
static void repiece_list(L *l, PSeq *s, const int *first, int nold, bool norm) {
  Program *p = l->p;
  PSeq old = *s;
  *s = (PSeq){0};
  for (int i = 0, k = 0; i < old.n; i++) {
    if (old.v[i].op != ISA_KERNEL) {
      *pseq_push(l->a, s, (IsaOp)old.v[i].op) = old.v[i];
      continue;
    }
    ir_assert(k < nold);
    for (int j = first[k]; j < first[k + 1]; j++) {
      Kernel *kn = norm ? norm_kernel(l, j, j + 1, p->nkernels, TIER_WORK, p->gradnorm_offset)
                        : update_kernel(l, j, j + 1, p->nkernels);
      kernel_narrow(kn);
      kfinish(l, s, kn);
      s->v[s->n - 1].node = old.v[i].node;
    }
    k++;
  }
}

void lower_split_params(Program *p, const int *pieces) {
  ir_assert(!p->scheduled && !p->offload && p->pp <= 1);
  int n = 0, nold = p->nparams, *first = arena_array(p->arena, nold + 1, sizeof *first);
  for (int k = 0; k < nold; k++) n += pieces[k] > 1 ? pieces[k] : 1;
  PParam *v = arena_array(p->arena, n ? n : 1, sizeof *v);
  n = 0;
  for (int k = 0; k < nold; k++) {
    const PParam *q = &p->params[k];
    int64_t unit = piece_unit(p, q), units = q->numel / unit;
    int64_t parts = pieces[k] < units ? pieces[k] : units;
    ir_assert(!q->start && q->numel == shape_numel(&q->node->shape)); /* whole */
    first[k] = n;
    if (parts < 2) parts = 1;
    for (int64_t j = 0; j < parts; j++) { /* [j units / parts, (j + 1) units / parts), the last to the end */
      int64_t s = j * units / parts * unit, e = j + 1 == parts ? q->numel : (j + 1) * units / parts * unit;
      v[n] = *q;
      v[n].start = s, v[n].numel = e - s, v[n].offset = q->offset + s * 4;
      n++;
    }
  }
  first[nold] = n;
  p->params = v, p->nparams = n;
  if (n == nold) return;
  L l = opt_context(p);
  repiece_list(&l, &p->gradnorm, first, nold, true);
  repiece_list(&l, &p->update, first, nold, false);
}

/* ---- memory plan ------------------------------------------------------------------------- */

static int by_size(const void *a, const void *b) {
  const LBuf *x = *(LBuf *const *)a, *y = *(LBuf *const *)b;
  return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

static int by_offset(const void *a, const void *b) {
  const LBuf *x = *(LBuf *const *)a, *y = *(LBuf *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The lowest offset where b fits between the placed buffers live at the same time. */
static int64_t first_fit(LBuf *b, LBuf **placed, int n, LBuf **live) {
  int nl = 0;
  for (int j = 0; j < n; j++)
    if (placed[j]->first <= b->last && b->first <= placed[j]->last) live[nl++] = placed[j];
  qsort(live, nl, sizeof *live, by_offset);
  int64_t off = 0;
  for (int j = 0; j < nl; j++) {
    if (live[j]->offset >= off + b->bytes) break;
    if (live[j]->offset + live[j]->bytes > off) off = live[j]->offset + live[j]->bytes;
  }
  return off;
}

/* Greedy best-fit by size over the interval graph of lifetimes; pinned buffers
 * (inputs, the loss, the gradient-norm parts, pipeline boundary values) live through
 * the whole list. Offsets start at base; returns the bytes used above it. */
static int64_t plan_buffers(L *l, int64_t base, bool scratch) {
  int end = l->seq->n + 1;
  LBuf **work = arena_array(l->a, l->nbufs ? l->nbufs : 1, sizeof *work);
  int n = 0;
  for (int i = 0; i < l->nbufs; i++) {
    LBuf *b = &l->bufs[i];
    if (b->tier != TIER_WORK || b->shared || b->scratch != scratch) continue;
    if (b->pinned || b->first < 0) {
      b->first = 0;
      b->last = end;
    }
    work[n++] = b;
  }
  qsort(work, n, sizeof *work, by_size);
  LBuf **live = arena_array(l->a, n ? n : 1, sizeof *live);
  int64_t peak = 0;
  for (int i = 0; i < n; i++) {
    LBuf *b = work[i];
    int64_t off = first_fit(b, work, i, live);
    b->offset = off;
    b->placed = true;
    if (off + b->bytes > peak) peak = off + b->bytes;
  }
  for (int i = 0; i < n; i++) work[i]->offset += base;
  return peak;
}

static int64_t plan_memory(L *l, int64_t base) { return plan_buffers(l, base, false); }

static void patch_kernel(L *l, Kernel *k) {
  for (int i = 0; i < k->nbufs; i++)
    if (k->bufs[i].tier >= PENDING) {
      LBuf *b = &l->bufs[k->bufs[i].tier - PENDING];
      k->bufs[i].tier = b->tier;
      k->bufs[i].offset += b->offset;
      k->bufs[i].shared = b->shared || b->scratch;
    }
}

static void patch_loc(L *l, int *tier, int64_t *off) {
  if (*tier < PENDING) return;
  LBuf *b = &l->bufs[*tier - PENDING];
  *tier = b->shared || b->scratch ? TIER_SHARED : b->tier;
  *off += b->offset;
}

static void patch_seq(L *l, PSeq *s) {
  for (int i = 0; i < s->n; i++) {
    IsaInstr *in = &s->v[i];
    if (in->op == ISA_ZERO) patch_loc(l, &in->zero.tier, &in->zero.offset);
    if (in->op == ISA_GEMM)
      for (int j = 0; j < 3; j++) patch_loc(l, &in->gemm.tier[j], &in->gemm.off[j]);
    if (in->op == ISA_GEMM && (in->gemm.bias || in->gemm.bgrad)) patch_loc(l, &in->gemm.bias_tier, &in->gemm.bias_off);
    if (in->op == ISA_GEMM && (in->gemm.aux || in->gemm.dgelu)) patch_loc(l, &in->gemm.aux_tier, &in->gemm.aux_off);
    if (in->op == ISA_COMM)
      for (int j = 0; j < 2; j++) patch_loc(l, &in->comm.tier[j], &in->comm.off[j]);
  }
}

/* ---- the forward subset, for sampling ------------------------------------------------------ */

static void build_forward(L *l, const Node *logits) {
  Graph *g = l->g;
  bool *anc = arena_array(l->a, g->n, sizeof *anc);
  anc[logits->id] = true;
  for (int i = logits->id; i >= 0; i--)
    if (anc[i])
      for (int k = 0; k < g->nodes[i]->nin; k++) anc[g->nodes[i]->in[k]->id] = true;
  for (int i = 0; i < l->seq->n; i++) {
    IsaInstr *in = &l->seq->v[i];
    if (in->node >= 0 && in->node < g->n_forward && anc[in->node] && !in->train_only)
      *emit(l, &l->p->forward, in->op) = *in;
  }
}

/* ---- one graph ---------------------------------------------------------------------------- */

static L *l_new(Program *p, Graph *g, PSeq *seq) {
  Arena *a = p->arena;
  L *l = arena_alloc(a, sizeof *l);
  *l = (L){.g = g, .p = p, .a = a, .seq = seq, .fp8_buf = -1, .fp8_amax = -1, .nb = -1};
  l->val = arena_array(a, g->n, sizeof *l->val);
  l->uses = arena_array(a, g->n, sizeof *l->uses);
  l->user = arena_array(a, g->n, sizeof *l->user);
  l->fused = arena_array(a, g->n, sizeof *l->fused);
  l->summed = arena_array(a, g->n, sizeof *l->summed);
  l->gelu = arena_array(a, g->n, sizeof *l->gelu);
  l->bgrad_of = arena_array(a, g->n, sizeof *l->bgrad_of);
  l->need_layout = arena_array(a, g->n, sizeof *l->need_layout);
  l->grad_of = arena_array(a, g->n, sizeof *l->grad_of);
  l->slot_used = arena_array(a, g->nparams ? g->nparams : 1, sizeof *l->slot_used);
  l->pidx = arena_array(a, g->nparams ? g->nparams : 1, sizeof *l->pidx);
  for (int i = 0; i < g->n; i++) l->grad_of[i] = -1;
  return l;
}

/* A value another program reads: contiguous, in the work tier, alive through the list. */
static int64_t boundary(L *l, const Node *n) {
  const Val *v = in_memory(l, n);
  if (l->bufs[v->buf].tier != TIER_WORK) {
    l->val[n->id] = materialize(l, n, lbuf_new(l, TIER_WORK, bytes_of(n)));
    v = &l->val[n->id];
  }
  l->bufs[v->buf].pinned = true;
  return v->buf;
}

static int64_t placed(const L *l, const Node *n) {
  const Val *v = &l->val[n->id];
  return l->bufs[v->buf].offset + v->offset * 4;
}

/* The backward's nodes that no gradient sent to the previous stage (wrt_grads) depends
 * on: the weight gradients' pass (W) of a split backward; the others are B. What reads
 * the loss's gradient (the logits', through casts and views) stays in B too: a W that
 * read it would keep the step's largest tensor for every micro-batch it waits for (the
 * classifier's weight gradient runs in B, as the plan prices it: plan/shard.c). */
static bool *w_nodes(L *l) {
  const Graph *g = l->g;
  bool *need = arena_array(l->a, g->n, sizeof *need), *w = arena_array(l->a, g->n, sizeof *w),
       *logits = arena_array(l->a, g->n, sizeof *logits);
  for (int k = 0; k < g->nwrt; k++)
    if (g->wrt_grads[k]) need[g->wrt_grads[k]->id] = true;
  for (int i = g->n_forward; i < g->n; i++) {
    const Node *x = g->nodes[i];
    logits[i] = x->op == OP_CROSS_ENTROPY_GRAD;
    for (int j = 0; j < x->nin && !logits[i]; j++)
      if (logits[x->in[j]->id]) {
        need[i] = true;
        logits[i] = x->op == OP_CAST || op_info(x->op)->cls == CLS_MOVE;
      }
  }
  for (int i = g->n - 1; i >= g->n_forward; i--) {
    const Node *x = g->nodes[i];
    if (need[x->id])
      for (int j = 0; j < x->nin; j++) need[x->in[j]->id] = true;
    w[x->id] = !need[x->id];
  }
  return w;
}

/* Chunk c's gradients sent to the previous stage, each in a boundary buffer. */
static void sent_grads(L *l, PChunk *c) {
  const Graph *g = l->g;
  for (int k = 0; k < g->nwrt; k++) {
    l->at = g->wrt_grads[k];
    c->wrt_grad[k].offset = g->wrt_grads[k] ? boundary(l, g->wrt_grads[k]) : -1;
  }
}

/* The graph's nodes into l->seq, its gradients into their slots. Chunk c (or NULL)
 * gets the buffer of each boundary value in its arrays (buffer indices until the
 * memory plan places them). */
static void lower_nodes(L *l, PChunk *c) {
  Graph *g = l->g;
  analyse(l);
  for (int k = 0; k < g->nouts; k++) l->uses[g->outs[k]->id]++, l->need_layout[g->outs[k]->id] = true;
  for (int k = 0; k < g->nwrt; k++)
    if (g->wrt_grads[k]) l->uses[g->wrt_grads[k]->id]++, l->need_layout[g->wrt_grads[k]->id] = true;
  const Node *logits = loss_logits(g);
  if (logits) l->need_layout[logits->id] = true;
  for (int i = 0; i < g->n; i++) /* first: a GEMM's epilogue may read a bias that comes later */
    if (g->nodes[i]->op == OP_PARAM) lower_node(l, g->nodes[i]);
  /* split: the forward and B, the gradients sent, then W (which no B node reads) */
  bool *w = c && l->split_w ? w_nodes(l) : NULL;
  for (int pass = 0; pass < (w ? 2 : 1); pass++) {
    for (int i = pass ? g->n_forward : 0; i < g->n; i++) {
      if (w && i >= g->n_forward && w[g->nodes[i]->id] != pass) continue;
      l->at = g->nodes[i];
      if (g->nodes[i]->op != OP_PARAM) lower_node(l, g->nodes[i]);
      if (c && i == g->n_forward - 1)
        for (int k = 0; k < g->nouts; k++) c->out[k].offset = boundary(l, g->outs[k]);
    }
    if (w && pass == 0) sent_grads(l, c), l->nb = l->seq->n;
  }
  fill_grad_slots(l);
  if (c && !w) sent_grads(l, c);
  if (g->loss) l->bufs[l->val[g->loss->id].buf].pinned = true;
}

/* The parameters of the chunks, merged by name, in PARAMS (and GRADS, and OPT) one after the
 * other at 64-byte aligned offsets: first those without weight decay (ndim < 2: biases and
 * norms' weights), then those with it, each in the chunks' order (the order the forward pass
 * reads them). So a run of them is one range of each tier, whose weight decay changes once
 * at most: the optimizer's multi-tensor kernels select it with one comparison (run_decay). */
static void layout_params(Program *p, Graph **gs, int n, L **ls) {
  int cap = 0;
  for (int c = 0; c < n; c++) cap += gs[c]->nparams;
  p->params = arena_array(p->arena, cap ? cap : 1, sizeof *p->params);
  int64_t off = 0;
  for (int decay = 0; decay < 2; decay++)
    for (int c = 0; c < n; c++)
      for (int k = 0; k < gs[c]->nparams; k++) {
        const Node *nd = gs[c]->params[k];
        if ((nd->shape.ndim >= 2) != decay) continue;
        bool partial = gs[c]->grad_tp_partial && gs[c]->grad_tp_partial[k];
        int j = 0;
        while (j < p->nparams && strcmp(p->params[j].node->name, nd->name)) j++;
        if (j == p->nparams) {
          p->params[p->nparams++] = (PParam){nd, off, decay, 0, partial, 0, shape_numel(&nd->shape)};
          off += (bytes_of(nd) + 63) & ~(int64_t)63;
        } else if (!shape_eq(&p->params[j].node->shape, &nd->shape)) {
          diag_internal(__FILE__, __LINE__, "a parameter held by two chunks with two shapes");
        } else if (p->params[j].tp_partial != partial) { /* one slot accumulates both */
          diag_internal(__FILE__, __LINE__, "a parameter whose gradient is a partial sum in one chunk only");
        }
        ls[c]->pidx[k] = j;
      }
  p->tiers[TIER_PARAMS] = p->tiers[TIER_GRADS] = off;
  const TrainSpec *t = &gs[0]->train;
  p->opt_v_offset = off;
  p->tiers[TIER_OPT] = train_moments(t) * off;
}

static Program *program_new(Graph *g) {
  Program *p = arena_alloc(g->arena, sizeof *p);
  p->arena = g->arena;
  p->g = g;
  p->microbatches = p->slots = p->tp = p->pp = 1;
  p->logits_offset = -1; /* none until lowering finds the logits */
  for (int k = 0; k < PROG_NLISTS; k++) p->named[k] = -1;
  return p;
}

int program_add_list(Program *p, const char *name, bool proc) {
  if (p->nlists == p->lists_cap) {
    int cap = p->lists_cap ? 2 * p->lists_cap : 16;
    PList *v = arena_array(p->arena, cap, sizeof *v);
    if (p->nlists) memcpy(v, p->lists, p->nlists * sizeof *v);
    p->lists = v, p->lists_cap = cap;
  }
  p->lists[p->nlists] = (PList){name, {0}, proc};
  return p->nlists++;
}

/* Patches l's instructions and kernels [k0, k1) with its placed buffers. */
static void patch(L *l, int k0, int k1, PSeq *const *seqs, int nseqs) {
  for (int i = k0; i < k1; i++) patch_kernel(l, l->p->kernels[i]);
  for (int i = 0; i < nseqs; i++) patch_seq(l, seqs[i]);
}

/* Places l's work buffers from base and patches its instructions and kernels
 * [k0, nkernels). Returns the bytes it used. */
static int64_t place_and_patch(L *l, int64_t base, int k0, PSeq *const *seqs, int nseqs) {
  int64_t used = plan_memory(l, base);
  patch(l, k0, l->p->nkernels, seqs, nseqs);
  return used;
}

/* Every kernel's bindings narrowed to what it touches (kernel_narrow), once they are
 * final: what the later passes see and what makes kernels share code. */
static void narrow_kernels(Program *p) {
  for (int i = 0; i < p->nkernels; i++) kernel_narrow(p->kernels[i]);
}

/* The model's FLOPs of a step: each forward op's forward and backward cost (the
 * backward nodes, and recompute's clones, are what those costs describe). */
static void set_stats(Program *p, Graph *const *gs, int n) {
  for (int c = 0; c < n; c++) {
    GraphStats st;
    Graph fwd = *gs[c];
    fwd.n = gs[c]->n_forward;
    graph_stats(&fwd, &st);
    p->flops_per_step += st.train_flops;
  }
}

/* The rows of an input (its first dimension, the same in all) and the tokens' sequence
 * length (1 without a tokens input). */
static void set_batch(Program *p) {
  p->seq = 1;
  for (int i = 0; i < p->ninputs; i++) {
    p->batch = p->inputs[i].node->shape.d[0];
    if (p->inputs[i].role == PIN_TOKENS || p->inputs[i].role == PIN_TARGETS) p->seq = p->inputs[i].node->shape.d[1];
  }
}

/* The model's inputs that chunks gs read, in the model's order. */
static void stage_inputs(Program *p, Graph **gs, int n, const PInput *model, int nmodel) {
  p->inputs = arena_array(p->arena, nmodel ? nmodel : 1, sizeof *p->inputs);
  for (int j = 0; j < nmodel; j++) {
    bool reads = false;
    for (int c = 0; c < n && !reads; c++)
      for (int i = 0; i < gs[c]->n_forward && !reads; i++) reads = same_input(gs[c]->nodes[i], model[j].node);
    if (reads) p->inputs[p->ninputs++] = model[j];
  }
}

/* Chunk ch's WORK offsets of the stage's inputs it reads (lowered by l, placed). */
static void chunk_inputs(const L *l, const Program *p, PChunk *ch) {
  const Graph *g = l->g;
  ch->inputs = arena_array(p->arena, p->ninputs ? p->ninputs : 1, sizeof *ch->inputs);
  for (int j = 0; j < p->ninputs; j++) {
    ch->inputs[j] = -1;
    for (int i = 0; i < g->n_forward; i++)
      if (same_input(g->nodes[i], p->inputs[j].node)) ch->inputs[j] = placed(l, g->nodes[i]);
  }
}

Program *lower_program(Graph *g) {
  Program *p = program_new(g);
  L *l = l_new(p, g, &p->step);
  layout_params(p, &g, 1, &l);
  p->inputs = model_inputs(&g, 1, &p->ninputs);
  lower_nodes(l, NULL);
  emit_fp8_update(l, true);
  emit_optimizer(l);
  const Node *logits = loss_logits(g);
  if (logits) build_forward(l, logits);
  PSeq *seqs[4] = {&p->step, &p->gradnorm, &p->update, &p->forward};
  p->tiers[TIER_WORK] = p->work_peak = place_and_patch(l, 0, 0, seqs, 4);
  for (int i = 0; i < p->ninputs; i++) p->inputs[i].offset = l->bufs[p->inputs[i].offset].offset;
  p->gradnorm_offset = l->bufs[p->gradnorm_offset].offset;
  if (p->trust_parts) p->trust_offset = l->bufs[p->trust_offset].offset;
  if (p->fp8.rows) p->fp8.state = l->bufs[p->fp8.state].offset, p->fp8.amax = l->bufs[p->fp8.amax].offset;
  p->loss_offset = placed(l, g->loss);
  if (logits) {
    p->logits_offset = placed(l, logits);
    p->logits_dtype = logits->dtype == DT_BF16 ? ISA_BF16 : logits->dtype == DT_F16 ? ISA_F16 : ISA_F32;
    p->vocab = logits->shape.d[logits->shape.ndim - 1];
  } else if (loss_op(g)) { /* the fused classifier: no logits to sample from */
    p->logits_offset = -1;
    p->vocab = loss_classes(loss_op(g));
  }
  set_batch(p);
  narrow_kernels(p);
  set_stats(p, &g, 1);
  return p;
}

static PLoc *locs(Arena *a, int n) {
  PLoc *v = arena_array(a, n + 1, sizeof *v);
  for (int i = 0; i <= n; i++) v[i] = (PLoc){TIER_WORK, -1};
  return v;
}

/* Where buffer b's byte off lies once placed: its slot, or the region the slots share. */
static PLoc loc_of(const L *l, int b, int64_t off) {
  return (PLoc){l->bufs[b].scratch ? TIER_SHARED : TIER_WORK, l->bufs[b].offset + off};
}

static PLoc placed_loc(const L *l, const Node *n) {
  const Val *v = &l->val[n->id];
  return loc_of(l, v->buf, v->offset * 4);
}

/* A WORK buffer at offset off of the region the slots share (LBuf.shared). */
static int shared_buf(L *l, int64_t off, int64_t bytes) {
  int b = lbuf_new(l, TIER_WORK, bytes);
  l->bufs[b].offset = off;
  l->bufs[b].placed = l->bufs[b].pinned = l->bufs[b].shared = true;
  return b;
}

/* fp8 in a pipeline stage: the micro-batches' work memory rotates through slots, so the
 * stage's scaling states (its chunks' in order) and their gathered amaxes lie at the
 * start of the region the slots share, which the chunks' kernels address whatever slot
 * they run in (KBuf.shared); the working set follows them (the bytes returned). */
static int64_t stage_fp8(Program *p, Graph **gs, int n, L **ls) {
  int64_t rows = 0, w = 0;
  for (int c = 0; c < n; c++)
    for (int i = 0; i < gs[c]->n; i++)
      if (gs[c]->nodes[i]->op == OP_FP8_STATE) rows++, w = gs[c]->nodes[i]->shape.d[0];
  if (!rows) return 0;
  int64_t states = (rows * w * 4 + 63) & ~(int64_t)63, amax = (rows * 4 + 63) & ~(int64_t)63;
  for (int c = 0; c < n; c++) {
    ls[c]->fp8_buf = shared_buf(ls[c], 0, rows * w * 4);
    ls[c]->fp8_width = w;
  }
  p->fp8 = (PFp8){.rows = rows, .width = w, .state = 0, .amax = states, .update = -1};
  return states + amax;
}

/* The instructions of chunk l's forward pass, which all (its instructions, the forward's
 * first) runs before its backward pass; -1 when the passes interleave or a collective
 * runs beside what follows, so that all's order is not the order they run in. */
static int forward_count(const L *l, const PSeq *all) {
  int nf = 0;
  while (nf < all->n && all->v[nf].node < l->g->n_forward) nf++;
  for (int i = 0; i < all->n; i++)
    if ((i >= nf && all->v[i].node < l->g->n_forward) || all->v[i].overlap) return -1;
  return nf;
}

/* The values chunk ch exchanges live in its passes, not through the list, where the passes
 * run in all's order: the runtime's isend copies what it sends (runtime/comm/comm.h), so a
 * value sent lives to its pass's end (the send follows the call), and a value received is
 * written just before its pass (the forward's activations, the backward's gradients).
 * Those read in no other pass become working set (mark_scratch); a received activation the
 * backward reads again stays in its micro-batch's slot. */
static void loosen_exchanges(L *l, const PChunk *ch, const PSeq *all) {
  const Graph *g = l->g;
  int nf = forward_count(l, all);
  if (nf < 0) return;
  for (int k = 0; k < g->nouts; k++) {
    int b = (int)ch->out[k].offset;
    l->bufs[b].pinned = false, touch(l, b, nf - 1);
  }
  for (int k = 0; k < g->nwrt; k++) { /* sent after the backward's (split: B's) call */
    int b = (int)ch->wrt_grad[k].offset;
    if (b >= 0) l->bufs[b].pinned = false, touch(l, b, (l->nb >= 0 ? l->nb : all->n) - 1);
    b = l->val[g->wrt[k]->id].buf;
    l->bufs[b].pinned = false, touch(l, b, 0);
  }
  for (int k = 0; k < g->nseeds; k++) {
    int b = l->val[g->seed_grad[k]->id].buf;
    l->bufs[b].pinned = false, touch(l, b, nf);
  }
}

/* The buffers of chunk l that live within one of its passes, forward or backward
 * (all: its instructions, the forward's first), not pinned: the stage runs one pass of
 * one chunk at a time, so these are its working set, which the chunks and the
 * micro-batches in flight may share; what outlives a micro-batch's forward (its stash,
 * a received activation its backward reads) is its slot's. None when the passes
 * interleave or a collective runs beside what follows. */
static void mark_scratch(L *l, const PSeq *all) {
  int nf = forward_count(l, all), nb = l->nb >= 0 ? l->nb : all->n;
  if (nf < 0) return;
  for (int i = 0; i < l->nbufs; i++) {
    LBuf *b = &l->bufs[i];
    b->scratch = b->tier == TIER_WORK && !b->shared && !b->pinned && b->first >= 0 &&
                 (b->last < nf || (b->first >= nf && b->last < nb) || b->first >= nb);
  }
}

/* The chunks' work buffers placed: a region per chunk in each slot from 0, and, when
 * `split`, the working sets (scratch) in the shared region from shared0 (the bytes they
 * take there to *work). Returns a slot's bytes. */
static int64_t place_chunks(L **ls, int n, bool split, int64_t shared0, int64_t *work) {
  int64_t slot = 0;
  *work = 0;
  for (int c = 0; c < n; c++) {
    bool *was = arena_array(ls[c]->a, ls[c]->nbufs + 1, sizeof *was);
    for (int i = 0; i < ls[c]->nbufs; i++) was[i] = ls[c]->bufs[i].scratch, ls[c]->bufs[i].scratch &= split;
    slot += plan_buffers(ls[c], slot, false);
    if (split) {
      int64_t u = plan_buffers(ls[c], shared0, true);
      if (u > *work) *work = u;
    }
    for (int i = 0; i < ls[c]->nbufs; i++) ls[c]->bufs[i].scratch = was[i];
  }
  return slot;
}

Program *lower_stage(Graph **gs, const int *index, int n, const PInput *model, int nmodel, int64_t slots,
                     bool split_w) {
  Program *p = program_new(gs[0]);
  Arena *a = p->arena;
  p->chunks = arena_array(a, n, sizeof *p->chunks);
  p->nchunks = n;
  L **ls = arena_array(a, n, sizeof *ls);
  for (int c = 0; c < n; c++) ls[c] = l_new(p, gs[c], &p->step), ls[c]->split_w = split_w;
  layout_params(p, gs, n, ls);
  stage_inputs(p, gs, n, model, nmodel);
  int64_t shared = stage_fp8(p, gs, n, ls), base, work;
  PSeq *all = arena_array(a, n, sizeof *all);
  int *k0 = arena_array(a, n + 1, sizeof *k0);
  for (int c = 0; c < n; c++) {
    Graph *g = gs[c];
    L *l = ls[c];
    PChunk *ch = &p->chunks[c];
    *ch = (PChunk){.g = g, .index = index[c], .loss = -1};
    ch->wrt = locs(a, g->nwrt), ch->wrt_grad = locs(a, g->nwrt);
    ch->out = locs(a, g->nouts), ch->seed = locs(a, g->nseeds);
    l->seq = &all[c];
    k0[c] = p->nkernels;
    lower_nodes(l, ch);
    if (c + 1 < n && l->fp8_buf >= 0) ls[c + 1]->fp8_rows = l->fp8_rows; /* the next chunk's states follow */
    for (int i = 0; i < all[c].n; i++)
      *emit(l,
            all[c].v[i].node < g->n_forward ? &ch->fwd
            : l->nb >= 0 && i >= l->nb      ? &ch->wgrad
                                            : &ch->bwd,
            all[c].v[i].op) = all[c].v[i];
    loosen_exchanges(l, ch, &all[c]);
    mark_scratch(l, &all[c]);
  }
  k0[n] = p->nkernels;
  /* the layout of less memory: the working set shared, or a region per chunk in every slot */
  int64_t whole = place_chunks(ls, n, false, shared, &work);
  base = place_chunks(ls, n, true, shared, &work);
  bool split = base * slots + work < whole * slots;
  if (split) shared += work;
  else base = place_chunks(ls, n, false, shared, &work);
  for (int c = 0; c < n; c++) {
    Graph *g = gs[c];
    L *l = ls[c];
    PChunk *ch = &p->chunks[c];
    for (int i = 0; !split && i < l->nbufs; i++) l->bufs[i].scratch = false;
    PSeq *seqs[4] = {&all[c], &ch->fwd, &ch->bwd, &ch->wgrad};
    patch(l, k0[c], k0[c + 1], seqs, 4);
    for (int k = 0; k < g->nouts; k++) ch->out[k] = loc_of(l, (int)ch->out[k].offset, 0);
    for (int k = 0; k < g->nwrt; k++) {
      if (ch->wrt_grad[k].offset >= 0) ch->wrt_grad[k] = loc_of(l, (int)ch->wrt_grad[k].offset, 0);
      ch->wrt[k] = placed_loc(l, g->wrt[k]);
    }
    for (int k = 0; k < g->nseeds; k++) ch->seed[k] = placed_loc(l, g->seed_grad[k]);
    chunk_inputs(l, p, ch);
    if (g->loss) {
      ch->loss = p->loss_offset = placed(l, g->loss);
      p->vocab = loss_classes(loss_op(g));
    }
  }
  p->work_shared = (shared + 63) & ~(int64_t)63;
  /* the optimizer, over the merged parameters, with the gradient-norm parts after the chunks */
  PSeq none = {0};
  L *lo = l_new(p, gs[0], &none);
  emit_optimizer(lo);
  PSeq *seqs[2] = {&p->gradnorm, &p->update};
  int64_t used = place_and_patch(lo, base, 0, seqs, 2);
  if (p->fp8.rows) { /* the step's end (codegen/pipeline.c puts it after the schedule, in slot 0) */
    L *lf = l_new(p, gs[0], &p->fp8.tail);
    lf->fp8_buf = shared_buf(lf, 0, p->fp8.rows * p->fp8.width * 4), lf->fp8_width = p->fp8.width;
    lf->fp8_amax = shared_buf(lf, p->fp8.amax, p->fp8.rows * 4), lf->fp8_rows = (int)p->fp8.rows;
    int kf = p->nkernels;
    emit_fp8_update(lf, false);
    PSeq *tail[1] = {&p->fp8.tail};
    place_and_patch(lf, base, kf, tail, 1);
  }
  p->gradnorm_offset = lo->bufs[p->gradnorm_offset].offset;
  if (p->trust_parts) p->trust_offset = lo->bufs[p->trust_offset].offset;
  p->tiers[TIER_WORK] = p->work_peak = base + used;
  p->scheduled = true;
  for (int j = 0; j < p->ninputs; j++) p->inputs[j].offset = -1; /* the "input" instructions place them */
  set_batch(p);
  narrow_kernels(p);
  set_stats(p, gs, n);
  return p;
}
