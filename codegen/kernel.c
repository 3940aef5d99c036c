/* Kernel-form builders, the consistency check, the reference evaluator and the text
 * printer. The evaluator is the definition of what a kernel means: the LLVM and
 * CUDA emitters are tested against it. */
#include "codegen/kernel.h"
#include "ir/rand.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

Kernel *kernel_new(Arena *a, const char *name, KPar par, const int64_t *dims, int ndims, int row_dims) {
  ir_assert(ndims >= 1 && ndims <= K_MAX_DIMS && row_dims >= 0 && row_dims <= ndims);
  Kernel *k = arena_alloc(a, sizeof *k);
  k->name = arena_strdup(a, name);
  k->par = par;
  k->ndims = ndims;
  k->row_dims = row_dims;
  k->rows = k->cols = 1;
  for (int d = 0; d < ndims; d++) {
    k->dims[d] = dims[d];
    if (d < row_dims) k->rows *= dims[d];
    else k->cols *= dims[d];
  }
  return k;
}

int kernel_buf(Kernel *k, const char *name, int tier, int64_t offset, int64_t numel, DType dt) {
  for (int i = 0; i < k->nbufs; i++)
    if (k->bufs[i].tier == tier && k->bufs[i].offset == offset && k->bufs[i].dtype == dt) {
      if (numel > k->bufs[i].numel) k->bufs[i].numel = numel;
      return i;
    }
  ir_assert(k->nbufs < K_MAX_BUFS);
  k->bufs[k->nbufs] = (KBuf){name, tier, offset, numel, dt, false};
  return k->nbufs++;
}

static KExpr *kx_new(Arena *a, Kernel *k, KExprKind kind) {
  KExpr *e = arena_alloc(a, sizeof *e);
  e->kind = kind;
  e->id = k->nexprs++;
  return e;
}

KExpr *kx_const(Arena *a, Kernel *k, float f) {
  KExpr *e = kx_new(a, k, KX_CONST);
  e->f = f;
  return e;
}
KExpr *kx_load(Arena *a, Kernel *k, int buf, KView v) {
  KExpr *e = kx_new(a, k, KX_LOAD);
  e->buf = buf;
  e->view = v;
  return e;
}
KExpr *kx_acc(Arena *a, Kernel *k, int acc) {
  KExpr *e = kx_new(a, k, KX_ACC);
  e->acc = acc;
  return e;
}
KExpr *kx_coord(Arena *a, Kernel *k, int axis) {
  KExpr *e = kx_new(a, k, KX_COORD);
  e->axis = axis;
  return e;
}
KExpr *kx_scalar(Arena *a, Kernel *k, int index) {
  KExpr *e = kx_new(a, k, KX_SCALAR);
  e->index = index;
  return e;
}
KExpr *kx_unary(Arena *a, Kernel *k, KUnary op, KExpr *x) {
  KExpr *e = kx_new(a, k, KX_UNARY);
  e->uop = op;
  e->a = x;
  return e;
}
KExpr *kx_binary(Arena *a, Kernel *k, KBinary op, KExpr *x, KExpr *y) {
  KExpr *e = kx_new(a, k, KX_BINARY);
  e->bop = op;
  e->a = x;
  e->b = y;
  return e;
}
KExpr *kx_select(Arena *a, Kernel *k, KExpr *c, KExpr *x, KExpr *y) {
  KExpr *e = kx_new(a, k, KX_SELECT);
  e->a = c;
  e->b = x;
  e->c = y;
  return e;
}

KExpr *kx_rand(Arena *a, Kernel *k, int64_t seed, KView v, int step_scalar) {
  ir_assert(!v.gather);
  KExpr *e = kx_new(a, k, KX_RAND);
  e->seed = seed;
  e->view = v;
  e->index = step_scalar;
  return e;
}

static KPhase *add_phase(Kernel *k, KPhaseKind kind, KExpr *e) {
  ir_assert(k->nphases < K_MAX_PHASES);
  KPhase *p = &k->phases[k->nphases++];
  *p = (KPhase){.kind = kind, .expr = e};
  return p;
}

int kernel_reduce(Kernel *k, KReduce r, KExpr *e) {
  ir_assert(k->par == KP_ROWS && k->naccs < K_MAX_ACCS);
  KPhase *p = add_phase(k, KPH_REDUCE, e);
  p->reduce = r;
  p->acc = k->naccs++;
  return p->acc;
}

void kernel_map(Kernel *k, int buf, KView v, KStore s, KExpr *e) {
  KPhase *p = add_phase(k, KPH_MAP, e);
  p->buf = buf;
  p->view = v;
  p->store = s;
}

void kernel_row(Kernel *k, int buf, KView v, KStore s, KExpr *e) {
  ir_assert(k->par == KP_ROWS);
  KPhase *p = add_phase(k, KPH_ROW, e);
  p->buf = buf;
  p->view = v;
  p->store = s;
}

KView kview_contig(const Kernel *k, int64_t offset) {
  KView v = {.offset = offset};
  int64_t s = 1;
  for (int d = k->ndims - 1; d >= 0; d--) {
    v.strides[d] = s;
    s *= k->dims[d];
  }
  return v;
}

void kernel_check(const Kernel *k) {
  if (k->attn) {
    const KAttn *A = k->attn;
    const KOperand *ops[KA_OPERANDS];
    kattn_operands(A, ops);
    ir_assert(k->nphases == 0 && k->par == KP_ROWS && k->cols == 1 && A->hd > 0 && A->heads > 0);
    ir_assert(A->kv_heads > 0 && A->heads % A->kv_heads == 0 && A->window >= 0 && (A->window == 0 || A->causal));
    ir_assert(k->rows == kattn_rows(A));
    for (int i = 0; i < KA_OPERANDS; i++) ir_assert(ops[i]->buf >= -1 && ops[i]->buf < k->nbufs);
    ir_assert(A->res.buf >= 0 && k->bufs[A->res.buf].dtype != DT_I32);
    return;
  }
  for (int i = 0; i < k->nphases; i++) {
    const KPhase *p = &k->phases[i];
    ir_assert(p->expr);
    if (p->kind != KPH_REDUCE) ir_assert(p->buf >= 0 && p->buf < k->nbufs && k->bufs[p->buf].dtype != DT_I32);
    if (k->par == KP_COLS) ir_assert(p->kind == KPH_MAP);
  }
}

int kernel_alias_classes(const Kernel *k, int cls[K_MAX_BUFS]) {
  int n = 0;
  for (int i = 0; i < k->nbufs; i++) {
    const KBuf *x = &k->bufs[i];
    cls[i] = -1;
    for (int j = 0; j < i && cls[i] < 0; j++) {
      const KBuf *y = &k->bufs[j];
      if (x->tier == y->tier && x->offset < y->offset + y->numel * kbuf_elem_bytes(y) &&
          y->offset < x->offset + x->numel * kbuf_elem_bytes(x))
        cls[i] = cls[j];
    }
    if (cls[i] < 0) cls[i] = n++;
  }
  return n;
}

void kernel_bind(const Kernel *k, char *const *tiers, char *bufs[K_MAX_BUFS]) {
  for (int i = 0; i < k->nbufs; i++) bufs[i] = tiers[k->bufs[i].tier] + k->bufs[i].offset;
}

/* ---- narrowing each buffer to what the kernel touches --------------------------------- */

typedef struct Span {
  int64_t lo, hi;
  bool gathered;
} Span; /* elements [lo, hi) */

static void span_view(const Kernel *k, const KView *v, Span *s) {
  int64_t lo = v->offset, hi = v->offset + 1;
  for (int d = 0; d < k->ndims; d++) {
    int64_t reach = v->strides[d] * (k->dims[d] - 1);
    if (reach < 0) lo += reach;
    else hi += reach;
  }
  if (lo < s->lo) s->lo = lo;
  if (hi > s->hi) s->hi = hi;
  s->gathered |= v->gather != NULL; /* its rows are data: the buffer's end stays */
}

static void span_expr(const Kernel *k, const KExpr *e, Span *sp, bool *seen) {
  if (!e || seen[e->id]) return;
  seen[e->id] = true;
  if (e->kind == KX_LOAD) span_view(k, &e->view, &sp[e->buf]);
  if (e->kind == KX_LOAD) span_expr(k, e->view.gather, sp, seen);
  span_expr(k, e->a, sp, seen), span_expr(k, e->b, sp, seen), span_expr(k, e->c, sp, seen);
}

static void shift_expr(KExpr *e, const int64_t *by, bool *seen) {
  if (!e || seen[e->id]) return;
  seen[e->id] = true;
  if (e->kind == KX_LOAD) e->view.offset -= by[e->buf], shift_expr(e->view.gather, by, seen);
  shift_expr(e->a, by, seen), shift_expr(e->b, by, seen), shift_expr(e->c, by, seen);
}

void kernel_narrow(Kernel *k) {
  if (k->attn) return; /* its operands' offsets are its own: nothing to tell siblings apart by */
  Span sp[K_MAX_BUFS];
  for (int i = 0; i < k->nbufs; i++) sp[i] = (Span){INT64_MAX, INT64_MIN, false};
  bool *seen = calloc((size_t)k->nexprs + 1, 1);
  ir_assert(seen);
  for (int i = 0; i < k->nphases; i++) {
    const KPhase *p = &k->phases[i];
    if (p->kind != KPH_REDUCE) span_view(k, &p->view, &sp[p->buf]), span_expr(k, p->view.gather, sp, seen);
    span_expr(k, p->expr, sp, seen);
  }
  int64_t by[K_MAX_BUFS];
  for (int i = 0; i < k->nbufs; i++) {
    KBuf *b = &k->bufs[i];
    by[i] = sp[i].lo > 0 && sp[i].lo < b->numel ? sp[i].lo : 0;
    int64_t end = sp[i].gathered || sp[i].hi > b->numel || sp[i].hi <= sp[i].lo ? b->numel : sp[i].hi;
    b->offset += by[i] * kbuf_elem_bytes(b);
    b->numel = end - by[i];
  }
  memset(seen, 0, (size_t)k->nexprs + 1);
  for (int i = 0; i < k->nphases; i++) {
    KPhase *p = &k->phases[i];
    if (p->kind != KPH_REDUCE) p->view.offset -= by[p->buf], shift_expr(p->view.gather, by, seen);
    shift_expr(p->expr, by, seen);
  }
  free(seen);
}

/* ---- reference evaluator ------------------------------------------------------ */

typedef struct EvalCtx {
  const Kernel *k;
  char *const *tiers;
  const float *scalars;
  int64_t r, j;
  float acc[K_MAX_ACCS];
} EvalCtx;

static float eval_expr(EvalCtx *c, const KExpr *e);

static int64_t coord(const Kernel *k, int64_t r, int64_t j, int d) {
  int64_t i = r * k->cols + j, stride = 1;
  for (int x = k->ndims - 1; x > d; x--) stride *= k->dims[x];
  return (i / stride) % k->dims[d];
}

static int64_t view_addr(EvalCtx *c, const KView *v) {
  int64_t a = v->offset;
  for (int d = 0; d < c->k->ndims; d++)
    if (v->strides[d]) a += coord(c->k, c->r, c->j, d) * v->strides[d];
  if (v->gather) a += (int64_t)eval_expr(c, v->gather) * v->gather_stride;
  return a;
}

static void *buf_ptr(const EvalCtx *c, int b) { return c->tiers[c->k->bufs[b].tier] + c->k->bufs[b].offset; }

/* Element a of buffer b, widened to f32 (i32 converted). */
static float load_at(const EvalCtx *c, int b, int64_t a) {
  ir_assert(a >= 0 && a < c->k->bufs[b].numel);
  void *p = buf_ptr(c, b);
  DType t = c->k->bufs[b].dtype;
  if (t == DT_BF16 || t == DT_F16) return kx_to_f32(t, ((uint16_t *)p)[a]);
  if (t == DT_E4M3 || t == DT_E5M2) return isa_fp8_to_f32(kx_fp8(t), ((uint8_t *)p)[a]);
  return t == DT_I32 ? (float)((int32_t *)p)[a] : ((float *)p)[a];
}

/* v into element a of buffer b (added in f32 with KS_ADD), rounded to a 16- or 8-bit buffer's type. */
static void store_at(const EvalCtx *c, int b, int64_t a, KStore s, float v) {
  ir_assert(a >= 0 && a < c->k->bufs[b].numel);
  DType t = c->k->bufs[b].dtype;
  if (t == DT_BF16 || t == DT_F16) {
    uint16_t *h = (uint16_t *)buf_ptr(c, b) + a;
    *h = kx_from_f32(t, s == KS_ADD ? kx_to_f32(t, *h) + v : v);
    return;
  }
  if (t == DT_E4M3 || t == DT_E5M2) {
    uint8_t *q = (uint8_t *)buf_ptr(c, b) + a;
    *q = isa_fp8_from_f32(kx_fp8(t), s == KS_ADD ? isa_fp8_to_f32(kx_fp8(t), *q) + v : v);
    return;
  }
  float *dst = (float *)buf_ptr(c, b) + a;
  *dst = s == KS_ADD ? *dst + v : v;
}

static float eval_unary(KUnary op, float x) {
  switch (op) {
  case KU_NEG: return -x;
  case KU_EXP: return expf(x);
  case KU_LOG: return logf(x);
  case KU_TANH: return tanhf(x);
  case KU_SQRT: return sqrtf(x);
  case KU_RSQRT: return 1.0f / sqrtf(x);
  case KU_RECIP: return 1.0f / x;
  case KU_ABS: return fabsf(x);
  case KU_FLOOR: return floorf(x);
  case KU_SIN: return sinf(x);
  case KU_COS: return cosf(x);
  case KU_RBF16: return kx_to_f32(DT_BF16, kx_from_f32(DT_BF16, x));
  case KU_RF16: return kx_to_f32(DT_F16, kx_from_f32(DT_F16, x));
  case KU_COUNT: break;
  }
  unreachable();
}

static float eval_binary(KBinary op, float x, float y) {
  switch (op) {
  case KB_ADD: return x + y;
  case KB_SUB: return x - y;
  case KB_MUL: return x * y;
  case KB_DIV: return x / y;
  case KB_MAX: return x > y ? x : y;
  case KB_MIN: return x < y ? x : y;
  case KB_POW: return powf(x, y);
  case KB_LT: return x < y;
  case KB_LE: return x <= y;
  case KB_EQ: return x == y;
  case KB_COUNT: break;
  }
  unreachable();
}

static float eval_expr(EvalCtx *c, const KExpr *e) {
  switch (e->kind) {
  case KX_CONST: return e->f;
  case KX_LOAD: return load_at(c, e->buf, view_addr(c, &e->view));
  case KX_ACC: return c->acc[e->acc];
  case KX_COORD: return (float)coord(c->k, c->r, c->j, e->axis);
  case KX_SCALAR: return c->scalars[e->index];
  case KX_UNARY: return eval_unary(e->uop, eval_expr(c, e->a));
  case KX_BINARY: return eval_binary(e->bop, eval_expr(c, e->a), eval_expr(c, e->b));
  case KX_SELECT: return eval_expr(c, e->a) != 0 ? eval_expr(c, e->b) : eval_expr(c, e->c);
  case KX_RAND: return dropout_uniform(e->seed, (int64_t)c->scalars[e->index], view_addr(c, &e->view));
  }
  unreachable();
}

static void store(EvalCtx *c, const KPhase *p, float v) { store_at(c, p->buf, view_addr(c, &p->view), p->store, v); }

static void eval_row(EvalCtx *c, int64_t j_lo, int64_t j_hi) {
  const Kernel *k = c->k;
  for (int i = 0; i < k->nphases; i++) {
    const KPhase *p = &k->phases[i];
    switch (p->kind) {
    case KPH_REDUCE:
      c->acc[p->acc] = p->reduce == KR_SUM ? 0.0f : -INFINITY;
      for (c->j = 0; c->j < k->cols; c->j++) {
        float v = eval_expr(c, p->expr);
        c->acc[p->acc] = p->reduce == KR_SUM ? c->acc[p->acc] + v : fmaxf(c->acc[p->acc], v);
      }
      break;
    case KPH_MAP:
      for (c->j = j_lo; c->j < j_hi; c->j++) store(c, p, eval_expr(c, p->expr));
      break;
    case KPH_ROW:
      c->j = 0;
      store(c, p, eval_expr(c, p->expr));
      break;
    }
  }
}

/* ---- the fused attention kernel's meaning (kernel.h, KAttn) ---------------------------- */

/* Element (b, s, col) of operand x, and its store. */
static float attn_ld(const EvalCtx *c, const KOperand *x, int64_t b, int64_t s, int64_t col) {
  return load_at(c, x->buf, x->offset + b * x->sb + s * x->ss + col);
}
static void attn_st(const EvalCtx *c, const KOperand *x, KStore st, int64_t b, int64_t s, int64_t col, float v) {
  store_at(c, x->buf, x->offset + b * x->sb + s * x->ss + col, st, v);
}

/* x_s · y_t over hd features, x's at column xc and y's at yc, in order. */
static float attn_dot(const EvalCtx *c, const KOperand *x, int64_t s, int64_t xc, const KOperand *y, int64_t t,
                      int64_t yc, int64_t b) {
  const KAttn *A = c->k->attn;
  float acc = 0;
  for (int64_t d = 0; d < A->hd; d++) acc += attn_ld(c, x, b, s, xc + d) * attn_ld(c, y, b, t, yc + d);
  return acc;
}

/* Row r: by query (b, h, x) or by key (b, g, x), as kernel.h says. */
static void eval_attn_row(const EvalCtx *c, int64_t r, float *acc) {
  const KAttn *A = c->k->attn;
  bool by_query = A->pass == KA_FWD || A->pass == KA_DQ;
  int64_t F = A->heads * A->hd, len = by_query ? A->sq : A->sk, nh = by_query ? A->heads : A->kv_heads;
  int64_t b = r / len / nh, h = r / len % nh, x = r % len, hd = A->hd, grp = kattn_group(A);
  for (int64_t d = 0; d < hd; d++) acc[d] = 0;
  if (A->pass == KA_FWD) {
    int64_t lo, hi, qc = h * hd, kc = h / grp * hd;
    kattn_keys(A, x, &lo, &hi);
    float m = -INFINITY, l = 0, sc[KA_BLOCK];
    for (int64_t j0 = lo / KA_BLOCK * KA_BLOCK; j0 < hi; j0 += KA_BLOCK) {
      int64_t t0 = lo > j0 ? lo - j0 : 0, jn = hi - j0 < KA_BLOCK ? hi - j0 : KA_BLOCK;
      float mb = -INFINITY;
      for (int64_t t = t0; t < jn; t++)
        sc[t] = attn_dot(c, &A->q, x, qc, &A->k, j0 + t, kc, b) * A->scale, mb = fmaxf(mb, sc[t]);
      float mn = fmaxf(m, mb), cf = expf(m - mn);
      l *= cf;
      for (int64_t d = 0; d < hd; d++) acc[d] *= cf;
      for (int64_t t = t0; t < jn; t++) {
        float p = expf(sc[t] - mn);
        l += p;
        for (int64_t d = 0; d < hd; d++) acc[d] += p * attn_ld(c, &A->v, b, j0 + t, kc + d);
      }
      m = mn;
    }
    for (int64_t d = 0; d < hd; d++) attn_st(c, &A->res, A->store, b, x, qc + d, acc[d] / l);
    attn_st(c, &A->res, A->store, b, x, F + h, m + logf(l));
    return;
  }
  /* by query: head h alone; by key: the group's query heads in order */
  int64_t h0 = by_query ? h : h * grp, h1 = by_query ? h + 1 : h0 + grp, lo, hi;
  if (by_query) kattn_keys(A, x, &lo, &hi);
  else kattn_queries(A, x, &lo, &hi);
  for (int64_t qh = h0; qh < h1; qh++) {
    int64_t qc = qh * hd, kc = qh / grp * hd;
    for (int64_t y = lo; y < hi; y++) {
      int64_t i = by_query ? x : y, j = by_query ? y : x;
      float p = expf(attn_dot(c, &A->q, i, qc, &A->k, j, kc, b) * A->scale - attn_ld(c, &A->out, b, i, F + qh));
      if (A->pass == KA_DV) {
        for (int64_t d = 0; d < hd; d++) acc[d] += p * attn_ld(c, &A->g, b, i, qc + d);
        continue;
      }
      float ds = p * (attn_dot(c, &A->g, i, qc, &A->v, j, kc, b) - attn_ld(c, &A->delta, b, i, qh));
      for (int64_t d = 0; d < hd; d++)
        acc[d] += ds * (by_query ? attn_ld(c, &A->k, b, y, kc + d) : attn_ld(c, &A->q, b, y, qc + d));
    }
  }
  float scale = A->pass == KA_DV ? 1.0f : A->scale;
  for (int64_t d = 0; d < hd; d++) attn_st(c, &A->res, A->store, b, x, h * hd + d, acc[d] * scale);
}

void kernel_eval(const Kernel *k, char *const *tiers, const float *scalars) {
  EvalCtx c = {k, tiers, scalars, 0, 0, {0}};
  if (k->attn) {
    float *acc = malloc((size_t)k->attn->hd * sizeof *acc);
    ir_assert(acc);
    for (int64_t r = 0; r < k->rows; r++) eval_attn_row(&c, r, acc);
    free(acc);
    return;
  }
  for (c.r = 0; c.r < k->rows; c.r++) eval_row(&c, 0, k->cols);
}

/* ---- text form ------------------------------------------------------------------ */

static const char *unary_names[] = {
#define X(n) #n,
    KX_UNARY_OPS(X)
#undef X
};
static const char *binary_names[] = {
#define X(n) #n,
    KX_BINARY_OPS(X)
#undef X
};

static void print_view(FILE *f, const Kernel *k, const KView *v, bool code);

/* A buffer: its name, or in the code form (no bindings) its index. */
static void print_buf(FILE *f, const Kernel *k, int b, bool code) {
  if (code) fprintf(f, "b%d", b);
  else fprintf(f, "%s", k->bufs[b].name);
}

static void print_expr(FILE *f, const Kernel *k, const KExpr *e, bool code) {
  switch (e->kind) {
  case KX_CONST: fprintf(f, "%.9g", e->f); break;
  case KX_LOAD:
    print_buf(f, k, e->buf, code);
    print_view(f, k, &e->view, code);
    break;
  case KX_ACC: fprintf(f, "acc%d", e->acc); break;
  case KX_COORD: fprintf(f, "i%d", e->axis); break;
  case KX_SCALAR: fprintf(f, "scalar%d", e->index); break;
  case KX_UNARY:
    fprintf(f, "%s(", unary_names[e->uop]);
    print_expr(f, k, e->a, code);
    fputc(')', f);
    break;
  case KX_BINARY:
    fprintf(f, "%s(", binary_names[e->bop]);
    print_expr(f, k, e->a, code);
    fputs(", ", f);
    print_expr(f, k, e->b, code);
    fputc(')', f);
    break;
  case KX_RAND:
    fprintf(f, "rand(%lld, scalar%d, ", (long long)e->seed, e->index);
    print_view(f, k, &e->view, code);
    fputc(')', f);
    break;
  case KX_SELECT:
    fputs("select(", f);
    print_expr(f, k, e->a, code);
    fputs(", ", f);
    print_expr(f, k, e->b, code);
    fputs(", ", f);
    print_expr(f, k, e->c, code);
    fputc(')', f);
    break;
  }
}

static void print_view(FILE *f, const Kernel *k, const KView *v, bool code) {
  fprintf(f, "[%lld", (long long)v->offset);
  for (int d = 0; d < k->ndims; d++)
    if (v->strides[d]) fprintf(f, " + i%d*%lld", d, (long long)v->strides[d]);
  if (v->gather) {
    fputs(" + (", f);
    print_expr(f, k, v->gather, code);
    fprintf(f, ")*%lld", (long long)v->gather_stride);
  }
  fputc(']', f);
}

static void print_bufs(FILE *f, const Kernel *k, bool code) {
  for (int i = 0; i < k->nbufs; i++) {
    fputs("  buf ", f);
    print_buf(f, k, i, code);
    if (!code) fprintf(f, " tier=%d offset=%lld", k->bufs[i].tier, (long long)k->bufs[i].offset);
    fprintf(f, " numel=%lld %s\n", (long long)k->bufs[i].numel, dtype_name(k->bufs[i].dtype));
  }
}

static void print_operand(FILE *f, const Kernel *k, const char *what, const KOperand *x, bool code) {
  if (x->buf < 0) return;
  fprintf(f, " %s=", what);
  print_buf(f, k, x->buf, code);
  fprintf(f, "[%lld + b*%lld + s*%lld]", (long long)x->offset, (long long)x->sb, (long long)x->ss);
}

static void print_kernel(FILE *f, const Kernel *k, bool code) {
  if (k->attn) {
    const KAttn *A = k->attn;
    static const char *const pass[] = {"fwd", "dq", "dk", "dv"};
    fprintf(f, "kernel %s attention %s rows=%lld B=%lld H=%lld S=%lld T=%lld hd=%lld causal=%d scale=%.9g", k->name,
            pass[A->pass], (long long)k->rows, (long long)A->batch, (long long)A->heads, (long long)A->sq,
            (long long)A->sk, (long long)A->hd, A->causal, A->scale);
    if (A->kv_heads != A->heads) fprintf(f, " kv_heads=%lld", (long long)A->kv_heads);
    if (A->window) fprintf(f, " window=%lld", (long long)A->window);
    fputs(A->store == KS_ADD ? " +=\n" : "\n", f);
    print_bufs(f, k, code);
    fputs(" ", f);
    print_operand(f, k, "q", &A->q, code), print_operand(f, k, "k", &A->k, code), print_operand(f, k, "v", &A->v, code);
    print_operand(f, k, "out", &A->out, code), print_operand(f, k, "g", &A->g, code);
    print_operand(f, k, "delta", &A->delta, code), print_operand(f, k, "res", &A->res, code);
    fputc('\n', f);
    return;
  }
  fprintf(f, "kernel %s par=%s dims=[", k->name, k->par == KP_ROWS ? "rows" : "cols");
  for (int d = 0; d < k->ndims; d++)
    fprintf(f, "%s%lld%s", d ? ", " : "", (long long)k->dims[d], d + 1 == k->row_dims ? " |" : "");
  fprintf(f, "] rows=%lld cols=%lld\n", (long long)k->rows, (long long)k->cols);
  print_bufs(f, k, code);
  for (int i = 0; i < k->nphases; i++) {
    const KPhase *p = &k->phases[i];
    if (p->kind == KPH_REDUCE) fprintf(f, "  acc%d = %s_j ", p->acc, p->reduce == KR_SUM ? "sum" : "max");
    else {
      fprintf(f, "  %s ", p->kind == KPH_MAP ? "map" : "row");
      print_buf(f, k, p->buf, code);
      print_view(f, k, &p->view, code);
      fputs(p->store == KS_ADD ? " += " : " = ", f);
    }
    print_expr(f, k, p->expr, code);
    fputc('\n', f);
  }
}

void kernel_print(FILE *f, const Kernel *k) { print_kernel(f, k, false); }
void kernel_print_code(FILE *f, const Kernel *k) { print_kernel(f, k, true); }
