/* The CUDA C emitter: kernel form (codegen/kernel.h) to one NVRTC translation unit.
 * codegen/cuda.h describes the thread mappings; kernel_eval() is the meaning that
 * every mapping must reproduce.
 *
 * How a kernel is written out:
 *   1. analysis: which buffers the kernel writes (the others are read through __ldg),
 *      what each expression depends on (row, column, accumulators, written memory),
 *      which phases touch memory another phase wrote (CM_FLAT is only legal without
 *      such pairs; CM_BLOCK_ROW puts a __syncthreads() between them);
 *   2. per phase, expressions as SSA temps `tID` in post-order (a DAG: each node once
 *      per scope); a SELECT is an if/else whose branches compute what only they need,
 *      so that a branch not taken never loads (a gather index of -1 under a mask
 *      must not be dereferenced);
 *   3. nodes that do not depend on the loop index and read only memory the kernel
 *      never writes are hoisted out of the loop (per-row values, accumulators);
 *   4. addresses: offset + row part + column part + gather. A part that is linear in
 *      r (or j) is `r * s`; otherwise the coordinates are decomposed (in 32 bits when
 *      the extent allows) and multiplied by their strides, all sums in 64 bits.
 * The body is written to a string first, so the declarations in front of it
 * (buffer bases, scalars, coordinates) are exactly those it uses. */
#include "codegen/cuda.h"
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#ifndef COLOSSALC_VERSION
#define COLOSSALC_VERSION "unknown"
#endif

enum {
  CUDA_BLOCK = 256,        /* threads per block for every mapping but CM_BLOCK_ROW */
  CUDA_ROW_BLOCK_MIN = 32, /* CM_BLOCK_ROW: one warp at least */
  CUDA_ROW_BLOCK_MAX = 512,
  CUDA_ROW_PER_THREAD = 4,   /* CM_BLOCK_ROW: aim at this many columns per thread */
  CUDA_THREAD_ROW_COLS = 32, /* below this many columns a row is one thread's work */
  CUDA_OWNERS_MAX = 128,     /* CM_COLS_OWNED: owner classes of the scattered rows, at most */
  CUDA_OWNER_ROWS = 64,      /* CM_COLS_OWNED: aim at this many rows per owner class */
  CUDA_MMA_BLOCK = 128,      /* CM_MMA_TILE: four warps of 16 rows, two blocks an SM (launch bounds) */
  CUDA_MMA_BC = 32,          /* CM_MMA_TILE: the other side's rows per step */
  CUDA_MMA_MAX_HD = 128,     /* CM_MMA_TILE: the widest head (three [32][hd] 16-bit tiles) */
};
#define CUDA_GRID_MAX ((int64_t)1 << 16)

/* ---- growable strings ------------------------------------------------------------ */

typedef struct Str {
  char *s;
  size_t len, cap;
} Str;

static void put(Str *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Str *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  ir_assert(n >= 0);
  if (o->len + (size_t)n + 1 > o->cap) {
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + (size_t)n + 1) cap *= 2;
    o->s = realloc(o->s, cap);
    ir_assert(o->s);
    o->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(o->s + o->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  o->len += (size_t)n;
}

static void put_str(Str *o, const Str *s) {
  if (s->len) put(o, "%s", s->s);
}
static void put_ind(Str *o, int ind) { put(o, "%*s", 2 * ind, ""); }
static void str_free(Str *s) {
  free(s->s);
  *s = (Str){0};
}

/* ---- analysis ------------------------------------------------------------------- */

typedef struct Access {
  int buf;
  const KView *view;
  bool write, row;
} Access;

/* A buffer of 16- or 8-bit floats, converted by the prelude's cc_<name>2f and cc_f2<name>. */
static bool half_buf(const KBuf *b) { return b->dtype != DT_F32 && b->dtype != DT_I32; }
static const char *half_name(const KBuf *b) {
  return b->dtype == DT_BF16 ? "bf" : b->dtype == DT_F16 ? "h" : b->dtype == DT_E4M3 ? "e4" : "e5";
}

static bool bufs_overlap(const Kernel *k, int a, int b) {
  const KBuf *x = &k->bufs[a], *y = &k->bufs[b];
  if (x->tier != y->tier) return false;
  int64_t xe = x->offset + x->numel * kbuf_elem_bytes(x), ye = y->offset + y->numel * kbuf_elem_bytes(y);
  return x->offset < ye && y->offset < xe;
}

static void collect_loads(const KExpr *e, unsigned char *seen, bool row, Access *out, int *n) {
  if (!e || seen[e->id]) return;
  seen[e->id] = 1;
  switch (e->kind) {
  case KX_LOAD:
    out[(*n)++] = (Access){e->buf, &e->view, false, row};
    collect_loads(e->view.gather, seen, row, out, n);
    return;
  case KX_UNARY: collect_loads(e->a, seen, row, out, n); return;
  case KX_BINARY:
    collect_loads(e->a, seen, row, out, n);
    collect_loads(e->b, seen, row, out, n);
    return;
  case KX_SELECT:
    collect_loads(e->a, seen, row, out, n);
    collect_loads(e->b, seen, row, out, n);
    collect_loads(e->c, seen, row, out, n);
    return;
  case KX_CONST:
  case KX_ACC:
  case KX_COORD:
  case KX_SCALAR:
  case KX_RAND: return;
  }
  unreachable();
}

/* Every memory access of a phase; out holds nexprs + 1 entries. */
static int phase_accesses(const Kernel *k, const KPhase *p, Access *out) {
  unsigned char *seen = calloc((size_t)k->nexprs + 1, 1);
  ir_assert(seen);
  int n = 0;
  bool row = p->kind == KPH_ROW;
  collect_loads(p->expr, seen, row, out, &n);
  if (p->kind != KPH_REDUCE) {
    collect_loads(p->view.gather, seen, row, out, &n);
    out[n++] = (Access){p->buf, &p->view, true, row};
  }
  free(seen);
  return n;
}

/* The same element of the same buffer for every (r, j): one thread touches it. */
static bool same_element(const Kernel *k, const Access *x, const Access *y) {
  if (x->buf != y->buf || x->view->gather || y->view->gather || x->view->offset != y->view->offset) return false;
  for (int d = 0; d < k->ndims; d++)
    if (x->view->strides[d] != y->view->strides[d]) return false;
  return true;
}

/* Must x (earlier) be ordered before y (later) across threads? ROW phases run in
 * one thread per row while MAP and REDUCE phases spread j over threads. */
static bool accesses_conflict(const Kernel *k, const Access *x, const Access *y) {
  if (!x->write && !y->write) return false;
  if (!bufs_overlap(k, x->buf, y->buf)) return false;
  return x->row || y->row || !same_element(k, x, y);
}

static bool any_conflict(const Kernel *k, const Access *xs, int nx, const Access *ys, int ny) {
  for (int a = 0; a < nx; a++)
    for (int b = 0; b < ny; b++)
      if (accesses_conflict(k, &xs[a], &ys[b])) return true;
  return false;
}

/* Does any later phase touch memory an earlier one wrote (or write what it read),
 * other than the same element through the same view? */
static bool phases_conflict(const Kernel *k) {
  Access *xs = malloc(sizeof *xs * ((size_t)k->nexprs + 1)), *ys = malloc(sizeof *ys * ((size_t)k->nexprs + 1));
  ir_assert(xs && ys);
  bool found = false;
  for (int q = 1; q < k->nphases && !found; q++) {
    int ny = phase_accesses(k, &k->phases[q], ys);
    for (int p = 0; p < q && !found; p++) found = any_conflict(k, xs, phase_accesses(k, &k->phases[p], xs), ys, ny);
  }
  free(xs);
  free(ys);
  return found;
}

static bool has_reduce(const Kernel *k) {
  for (int i = 0; i < k->nphases; i++)
    if (k->phases[i].kind == KPH_REDUCE) return true;
  return false;
}

/* Depends e on the row alone (no column coordinate, no column stride, no randomness)? */
static bool expr_row_only(const Kernel *k, const KExpr *e) {
  if (!e) return true;
  switch (e->kind) {
  case KX_COORD: return e->axis < k->row_dims || k->dims[e->axis] == 1;
  case KX_RAND:
  case KX_ACC: return false;
  case KX_CONST:
  case KX_SCALAR: return true;
  case KX_LOAD:
    for (int d = k->row_dims; d < k->ndims; d++)
      if (e->view.strides[d] && k->dims[d] != 1) return false;
    return expr_row_only(k, e->view.gather);
  case KX_UNARY:
  case KX_BINARY:
  case KX_SELECT: return expr_row_only(k, e->a) && expr_row_only(k, e->b) && expr_row_only(k, e->c);
  }
  unreachable();
}

int64_t cuda_kernel_owners(const Kernel *k) {
  if (k->attn || k->par != KP_COLS || k->nphases != 1) return 1;
  const KPhase *p = &k->phases[0];
  const KView *v = &p->view;
  if (p->kind != KPH_MAP || !v->gather || v->gather_stride <= 0 || !expr_row_only(k, v->gather)) return 1;
  int64_t span = 0; /* the farthest column from its row's start */
  for (int d = 0; d < k->ndims; d++) {
    if (k->dims[d] == 1 || !v->strides[d]) continue;
    if (d < k->row_dims || v->strides[d] < 0) return 1; /* rows apart only through the gather */
    span += (k->dims[d] - 1) * v->strides[d];
  }
  if (span >= v->gather_stride) return 1; /* two rows' columns could meet */
  Access *xs = malloc(sizeof *xs * ((size_t)k->nexprs + 1));
  ir_assert(xs);
  int n = phase_accesses(k, p, xs);
  bool reads_target = false; /* a load of what the scatter writes (beyond an add's own element) */
  for (int i = 0; i < n; i++) reads_target |= !xs[i].write && bufs_overlap(k, xs[i].buf, p->buf);
  free(xs);
  if (reads_target) return 1;
  int64_t nb = 1;
  while (nb * 2 <= CUDA_OWNERS_MAX && nb * 2 * CUDA_OWNER_ROWS <= k->rows) nb *= 2;
  return nb;
}

static DType attn_mma_type(const Kernel *k);

/* A reduction down columns: REDUCE and ROW phases only, rows in memory next to each other
 * in every reduced load (unit stride on the last row axis) and columns not (a bias's
 * gradient, sum over tokens of dY[token, feature], as a row per feature), no phase
 * touching what another writes, enough rows and columns for a block of 32 x 8. A block
 * per row would read its row's elements a row of memory apart; 32 rows across a warp's
 * lanes read neighbours. */
static bool column_reduction(const Kernel *k) {
  if (k->par != KP_ROWS || k->row_dims < 1 || k->rows < 32 || k->cols < 32 || !has_reduce(k) || phases_conflict(k))
    return false;
  Access *xs = malloc(sizeof *xs * ((size_t)k->nexprs + 1));
  ir_assert(xs);
  bool ok = true;
  for (int p = 0; p < k->nphases && ok; p++) {
    const KPhase *ph = &k->phases[p];
    if (ph->kind == KPH_MAP) ok = false;
    if (ph->kind != KPH_REDUCE) continue;
    int n = phase_accesses(k, ph, xs);
    for (int i = 0; i < n && ok; i++) {
      const KView *v = xs[i].view;
      bool rows_next = v->strides[k->row_dims - 1] == 1 || k->dims[k->row_dims - 1] == 1;
      bool cols_next = false;
      for (int d = k->row_dims; d < k->ndims; d++) cols_next |= v->strides[d] == 1 && k->dims[d] > 1;
      ok = !v->gather && rows_next && !cols_next;
    }
  }
  free(xs);
  return ok;
}

CudaMapping cuda_kernel_mapping(const Kernel *k) {
  if (k->attn) return attn_mma_type(k) != DT_F32 ? CM_MMA_TILE : CM_WARP_ROW;
  if (column_reduction(k)) return CM_LANE_ROW;
  if (k->par == KP_COLS) return cuda_kernel_owners(k) > 1 ? CM_COLS_OWNED : CM_COLS;
  if (!has_reduce(k) && k->cols > 0 && !phases_conflict(k)) return CM_FLAT;
  return k->cols < CUDA_THREAD_ROW_COLS ? CM_THREAD_ROW : CM_BLOCK_ROW;
}

const char *cuda_mapping_name(CudaMapping m) {
  switch (m) {
  case CM_FLAT: return "flat";
  case CM_BLOCK_ROW: return "block-per-row";
  case CM_THREAD_ROW: return "thread-per-row";
  case CM_WARP_ROW: return "warp-per-row";
  case CM_MMA_TILE: return "tensor-core-tile";
  case CM_LANE_ROW: return "lane-per-row";
  case CM_COLS: return "thread-per-column";
  case CM_COLS_OWNED: return "thread-per-column-owner";
  }
  unreachable();
}

int cuda_kernel_block_size(const Kernel *k) {
  if (cuda_kernel_mapping(k) == CM_MMA_TILE) return CUDA_MMA_BLOCK;
  if (cuda_kernel_mapping(k) != CM_BLOCK_ROW) return CUDA_BLOCK;
  int64_t want = (k->cols + CUDA_ROW_PER_THREAD - 1) / CUDA_ROW_PER_THREAD;
  int b = CUDA_ROW_BLOCK_MIN;
  while (b < want && b < CUDA_ROW_BLOCK_MAX) b *= 2;
  return b;
}

int64_t cuda_kernel_grid_size(const Kernel *k, int64_t extent) {
  int64_t bs = cuda_kernel_block_size(k), work = extent;
  switch (cuda_kernel_mapping(k)) {
  case CM_FLAT:
    work = extent > 0 && k->cols > INT64_MAX / extent ? INT64_MAX : extent * k->cols;
    work = work / bs + (work % bs != 0);
    break;
  case CM_BLOCK_ROW: break;
  case CM_LANE_ROW: work = work / 32 + (work % 32 != 0); break;
  case CM_WARP_ROW:
    work = extent > INT64_MAX / 32 ? INT64_MAX : extent * 32;
    work = work / bs + (work % bs != 0);
    break;
  case CM_MMA_TILE: { /* a block per bs / 2 rows of one batch element and head (kattn_rows' heads) */
    const KAttn *A = k->attn;
    int64_t len = A->pass == KA_FWD || A->pass == KA_DQ ? A->sq : A->sk, br = bs / 2;
    work = extent / len * ((len + br - 1) / br);
    break;
  }
  case CM_THREAD_ROW:
  case CM_COLS: work = work / bs + (work % bs != 0); break;
  case CM_COLS_OWNED: work = cuda_kernel_owners(k) * (work / bs + (work % bs != 0)); break;
  }
  return work < 1 ? 1 : work > CUDA_GRID_MAX ? CUDA_GRID_MAX : work;
}

/* ---- emitter state ------------------------------------------------------------- */

enum { DEP_R = 1, DEP_J = 2, DEP_RW = 4 };    /* row index, column index, memory the kernel writes */
enum { DEP_ACC_SHIFT = 8 };                   /* then one bit per accumulator read */
enum { T_ALL, T_HOIST_J, T_HOIST_R, T_PURE }; /* which temps to emit now */

typedef struct Emit {
  const Kernel *k;
  CudaMapping map;
  bool ro[K_MAX_BUFS]; /* never written by this kernel (nor anything overlapping) */
  unsigned *dep;       /* per expr id: DEP_* bits | accumulators << DEP_ACC_SHIFT */
  unsigned char *dep_done;
  int *lvl;                  /* per expr id: scope depth of its visible temp, or -1 */
  int *uncond, ustamp;       /* per expr id: == ustamp when evaluated unconditionally */
  int *seen, wstamp;         /* per expr id: visited in the current walk */
  int stamps;                /* stamps handed out (both kinds): a new one never repeats */
  int *stack, nstack, depth; /* ids with visible temps, innermost last */
  bool row_phase;            /* emitting a KPH_ROW phase: j is 0 */
  bool lanes;                /* CM_LANE_ROW: a row per lane, its columns over the block's warps */
  int lane;                  /* CM_FLAT's vector path: the element of four being emitted, or -1 */
  const char *jvar;          /* the column index's name in addresses: "j", or the vector's "jb" */
  bool *vload;               /* per expr id: a load the vector path reads four at a time */
  bool vstore[K_MAX_PHASES]; /* per phase: a store the vector path writes four at a time */
  int vrmw[K_MAX_BUFS];      /* per buffer: 1 + the phase that writes it where the vector path
                                reads and writes it four at a time (read and written through
                                one view), else 0 */
  int cur_phase;             /* the phase being emitted (CM_FLAT) */
  bool vec;                  /* CM_BLOCK_ROW's vector path: a thread's columns in fours */
  bool use_r, use_j, use_sh, use_rc[K_MAX_DIMS], use_cc[K_MAX_DIMS], use_buf[K_MAX_BUFS], use_acc[K_MAX_ACCS];
  bool *use_sc;
  int nsc;
} Emit;

static unsigned view_dep(Emit *E, const KView *v);

static unsigned expr_dep(Emit *E, const KExpr *e) {
  ir_assert(e->id >= 0 && e->id < E->k->nexprs);
  if (E->dep_done[e->id]) return E->dep[e->id];
  unsigned d = 0;
  switch (e->kind) {
  case KX_CONST: break;
  case KX_SCALAR:
    ir_assert(e->index >= 0);
    if (e->index + 1 > E->nsc) E->nsc = e->index + 1;
    break;
  case KX_ACC:
    ir_assert(e->acc >= 0 && e->acc < E->k->naccs);
    d = 1u << (DEP_ACC_SHIFT + e->acc);
    break;
  case KX_COORD:
    ir_assert(e->axis >= 0 && e->axis < E->k->ndims);
    d = e->axis < E->k->row_dims ? DEP_R : DEP_J;
    break;
  case KX_LOAD: d = view_dep(E, &e->view) | (E->ro[e->buf] ? 0 : DEP_RW); break;
  case KX_UNARY: d = expr_dep(E, e->a); break;
  case KX_BINARY: d = expr_dep(E, e->a) | expr_dep(E, e->b); break;
  case KX_SELECT: d = expr_dep(E, e->a) | expr_dep(E, e->b) | expr_dep(E, e->c); break;
  case KX_RAND:
    if (e->index + 1 > E->nsc) E->nsc = e->index + 1;
    d = view_dep(E, &e->view);
    break;
  }
  E->dep_done[e->id] = 1;
  return E->dep[e->id] = d;
}

static unsigned view_dep(Emit *E, const KView *v) {
  unsigned d = v->gather ? expr_dep(E, v->gather) : 0;
  for (int x = 0; x < E->k->ndims; x++)
    if (v->strides[x] && E->k->dims[x] != 1) d |= x < E->k->row_dims ? DEP_R : DEP_J;
  return d;
}

static void emit_init(Emit *E, const Kernel *k) {
  kernel_check(k);
  *E = (Emit){.k = k, .map = cuda_kernel_mapping(k), .lane = -1, .jvar = "j"};
  size_t n = (size_t)k->nexprs + 1;
  E->dep = calloc(n, sizeof *E->dep);
  E->dep_done = calloc(n, 1);
  E->lvl = malloc(n * sizeof *E->lvl);
  E->uncond = calloc(n, sizeof *E->uncond);
  E->seen = calloc(n, sizeof *E->seen);
  E->stack = malloc(n * sizeof *E->stack);
  E->vload = calloc(n, sizeof *E->vload);
  ir_assert(E->dep && E->dep_done && E->lvl && E->uncond && E->seen && E->stack && E->vload);
  for (size_t i = 0; i < n; i++) E->lvl[i] = -1;
  for (int b = 0; b < k->nbufs; b++) {
    E->ro[b] = !(k->attn && bufs_overlap(k, k->attn->res.buf, b));
    for (int p = 0; p < k->nphases; p++)
      if (k->phases[p].kind != KPH_REDUCE && bufs_overlap(k, k->phases[p].buf, b)) E->ro[b] = false;
  }
  for (int p = 0; p < k->nphases; p++) {
    expr_dep(E, k->phases[p].expr);
    if (k->phases[p].kind != KPH_REDUCE) view_dep(E, &k->phases[p].view);
  }
  E->use_sc = calloc((size_t)E->nsc + 1, sizeof *E->use_sc);
  ir_assert(E->use_sc);
}

static void emit_free(Emit *E) {
  free(E->dep);
  free(E->dep_done);
  free(E->lvl);
  free(E->uncond);
  free(E->seen);
  free(E->stack);
  free(E->vload);
  free(E->use_sc);
}

static void new_ustamp(Emit *E) { E->ustamp = ++E->stamps; }
static void new_wstamp(Emit *E) { E->wstamp = ++E->stamps; }
static void scope_open(Emit *E) { E->depth++; }

static void scope_close(Emit *E) {
  while (E->nstack && E->lvl[E->stack[E->nstack - 1]] >= E->depth) E->lvl[E->stack[--E->nstack]] = -1;
  E->depth--;
}

/* Mark what a phase evaluates whatever the data: everything but SELECT branches. */
static void mark_uncond(Emit *E, const KExpr *e) {
  if (!e || E->uncond[e->id] == E->ustamp) return;
  E->uncond[e->id] = E->ustamp;
  switch (e->kind) {
  case KX_LOAD: mark_uncond(E, e->view.gather); return;
  case KX_UNARY: mark_uncond(E, e->a); return;
  case KX_BINARY:
    mark_uncond(E, e->a);
    mark_uncond(E, e->b);
    return;
  case KX_SELECT: mark_uncond(E, e->a); return;
  case KX_CONST:
  case KX_ACC:
  case KX_COORD:
  case KX_SCALAR:
  case KX_RAND: return;
  }
  unreachable();
}

static void mark_phase(Emit *E, const KPhase *p) {
  mark_uncond(E, p->expr);
  if (p->kind != KPH_REDUCE) mark_uncond(E, p->view.gather);
}

/* ---- expressions ----------------------------------------------------------------- */

static void expr_ref(Emit *E, Str *o, const KExpr *e);

static void put_float(Str *o, float f) {
  if (isnan(f)) {
    put(o, "CC_NAN");
    return;
  }
  if (isinf(f)) {
    put(o, f > 0 ? "CC_INF" : "(-CC_INF)");
    return;
  }
  char buf[48];
  snprintf(buf, sizeof buf, "%.9g", (double)f);
  const char *dot = strpbrk(buf, ".e") ? "" : ".0";
  put(o, signbit(f) ? "(%s%sf)" : "%s%sf", buf, dot);
}

static void unary_syntax(KUnary op, const char **pre, const char **post) {
  *post = ")";
  switch (op) {
  case KU_NEG: *pre = "(-"; return;
  case KU_EXP: *pre = "expf("; return;
  case KU_LOG: *pre = "logf("; return;
  case KU_TANH: *pre = "tanhf("; return;
  case KU_SQRT: *pre = "sqrtf("; return;
  case KU_RSQRT: *pre = "rsqrtf("; return;
  case KU_RECIP: *pre = "__frcp_rn("; return; /* correctly rounded 1/x, cheaper than a division */
  case KU_ABS: *pre = "fabsf("; return;
  case KU_FLOOR: *pre = "floorf("; return;
  case KU_SIN: *pre = "sinf("; return;
  case KU_COS: *pre = "cosf("; return;
  case KU_RBF16: *pre = "cc_bf2f(cc_f2bf(", *post = "))"; return;
  case KU_RF16: *pre = "cc_h2f(cc_f2h(", *post = "))"; return;
  case KU_COUNT: break;
  }
  unreachable();
}

static void binary_syntax(KBinary op, const char **pre, const char **mid, const char **post) {
  *pre = "(";
  *post = ")";
  switch (op) {
  case KB_ADD: *mid = " + "; return;
  case KB_SUB: *mid = " - "; return;
  case KB_MUL: *mid = " * "; return;
  case KB_DIV: *mid = " / "; return;
  case KB_MAX:
    *pre = "cc_max(";
    *mid = ", ";
    return;
  case KB_MIN:
    *pre = "cc_min(";
    *mid = ", ";
    return;
  case KB_POW:
    *pre = "powf(";
    *mid = ", ";
    return;
  case KB_LT:
    *mid = " < ";
    *post = " ? 1.0f : 0.0f)";
    return;
  case KB_LE:
    *mid = " <= ";
    *post = " ? 1.0f : 0.0f)";
    return;
  case KB_EQ:
    *mid = " == ";
    *post = " ? 1.0f : 0.0f)";
    return;
  case KB_COUNT: break;
  }
  unreachable();
}

static void term(Str *o, int *n) {
  if ((*n)++) put(o, " + ");
}

/* Is sum over axes [lo, hi) of coord_d * strides[d] equal to (the flat index over
 * those axes) * s? Then the part is `r * s` (or `j * s`). Axes of size 1 do not count. */
static bool linear_part(const Kernel *k, const KView *v, int lo, int hi, int64_t *s) {
  *s = 0;
  int64_t st = 1;
  bool first = true;
  for (int d = hi - 1; d >= lo; d--) {
    if (k->dims[d] != 1) {
      int64_t want;
      if (first) *s = v->strides[d], first = false;
      if (__builtin_mul_overflow(st, *s, &want) || v->strides[d] != want) return false;
    }
    if (__builtin_mul_overflow(st, k->dims[d], &st)) return false;
  }
  return true;
}

static void addr_part(Emit *E, Str *o, int *n, const KView *v, bool row) {
  const Kernel *k = E->k;
  int lo = row ? 0 : k->row_dims, hi = row ? k->row_dims : k->ndims;
  int64_t s;
  if (linear_part(k, v, lo, hi, &s)) {
    if (!s) return;
    term(o, n);
    *(row ? &E->use_r : &E->use_j) = true;
    if (s == 1) put(o, "%s", row ? "r" : E->jvar);
    else put(o, "%s * %lldLL", row ? "r" : E->jvar, (long long)s);
    return;
  }
  for (int d = lo; d < hi; d++) {
    if (!v->strides[d] || k->dims[d] == 1) continue;
    term(o, n);
    (row ? E->use_rc : E->use_cc)[d] = true;
    put(o, "%s%d * %lldLL", row ? "rc" : "cc", d, (long long)v->strides[d]);
  }
}

/* offset + row part + column part + gather, in elements, 64-bit. */
static void addr_text(Emit *E, Str *o, const KView *v) {
  int n = 0;
  if (v->offset) {
    term(o, &n);
    put(o, "%lldLL", (long long)v->offset);
  }
  addr_part(E, o, &n, v, true);
  if (!E->row_phase) addr_part(E, o, &n, v, false);
  if (v->gather) {
    term(o, &n);
    put(o, "(long long)(");
    expr_ref(E, o, v->gather);
    put(o, ") * %lldLL", (long long)v->gather_stride);
  }
  if (!n) put(o, "0LL");
}

static void load_text(Emit *E, Str *o, const KExpr *e) {
  const KBuf *b = &E->k->bufs[e->buf];
  E->use_buf[e->buf] = true;
  if (E->lane >= 0 && E->vload[e->id]) { /* its vector's element */
    if (half_buf(b)) put(o, "cc_%s2f(v%d.v[%d])", half_name(b), e->id, E->lane);
    else put(o, "v%d.v[%d]", e->id, E->lane);
    return;
  }
  if (E->lane >= 0 && E->vrmw[e->buf]) { /* read and written four at a time */
    int w = E->vrmw[e->buf] - 1, l = E->lane;
    char old[48];
    if (half_buf(b)) snprintf(old, sizeof old, "cc_%s2f(x%d.v[%d])", half_name(b), e->buf, l);
    else snprintf(old, sizeof old, "x%d.v[%d]", e->buf, l);
    if (E->cur_phase <= w) put(o, "%s", old); /* before its phase's store: the value it had */
    else { /* after: what the store left, rounded as stored */ bool add = E->k->phases[w].store == KS_ADD;
      if (half_buf(b)) put(o, "cc_%s2f(cc_f2%s(", half_name(b), half_name(b));
      if (add) put(o, "(%s + sv%d[%d])", old, w, l);
      else put(o, "sv%d[%d]", w, l);
      if (half_buf(b)) put(o, "))");
    }
    return;
  }
  if (b->dtype == DT_I32) put(o, "(float)");
  if (half_buf(b)) put(o, "cc_%s2f(", half_name(b));
  put(o, E->ro[e->buf] ? "__ldg(b%d + CC_RO(b%d, " : "b%d[CC_RD(b%d, ", e->buf, e->buf);
  addr_text(E, o, &e->view);
  put(o, ", %lldLL)%s%s", (long long)b->numel, E->ro[e->buf] ? ")" : "]", half_buf(b) ? ")" : "");
}

static void coord_text(Emit *E, Str *o, int axis) {
  if (axis >= E->k->row_dims && E->row_phase) {
    put(o, "0.0f");
    return;
  }
  if (E->k->dims[axis] == 1) {
    put(o, "0.0f");
    return;
  }
  bool row = axis < E->k->row_dims;
  (row ? E->use_rc : E->use_cc)[axis] = true;
  put(o, "(float)%s%d", row ? "rc" : "cc", axis);
}

static void expr_inline(Emit *E, Str *o, const KExpr *e) {
  const char *pre, *mid, *post;
  switch (e->kind) {
  case KX_CONST: put_float(o, e->f); return;
  case KX_LOAD: load_text(E, o, e); return;
  case KX_ACC:
    E->use_acc[e->acc] = true;
    put(o, "acc%d", e->acc);
    return;
  case KX_COORD: coord_text(E, o, e->axis); return;
  case KX_SCALAR:
    E->use_sc[e->index] = true;
    put(o, "s%d", e->index);
    return;
  case KX_RAND:
    E->use_sc[e->index] = true;
    put(o, "cc_rand(%lldLL, (long long)s%d, ", (long long)e->seed, e->index);
    addr_text(E, o, &e->view);
    put(o, ")");
    return;
  case KX_UNARY:
    unary_syntax(e->uop, &pre, &post);
    put(o, "%s", pre);
    expr_ref(E, o, e->a);
    put(o, "%s", post);
    return;
  case KX_BINARY:
    binary_syntax(e->bop, &pre, &mid, &post);
    put(o, "%s", pre);
    expr_ref(E, o, e->a);
    put(o, "%s", mid);
    expr_ref(E, o, e->b);
    put(o, "%s", post);
    return;
  case KX_SELECT:
    put(o, "(");
    expr_ref(E, o, e->a);
    put(o, " != 0.0f ? ");
    expr_ref(E, o, e->b);
    put(o, " : ");
    expr_ref(E, o, e->c);
    put(o, ")");
    return;
  }
  unreachable();
}

static void expr_ref(Emit *E, Str *o, const KExpr *e) {
  if (E->lvl[e->id] >= 0) put(o, "t%d", e->id);
  else expr_inline(E, o, e);
}

static bool temp_wanted(const Emit *E, const KExpr *e, int filter) {
  if (e->kind == KX_CONST || e->kind == KX_ACC || e->kind == KX_COORD || e->kind == KX_SCALAR) return false;
  if (E->uncond[e->id] != E->ustamp || E->lvl[e->id] >= 0) return false;
  unsigned d = E->dep[e->id];
  if (filter == T_HOIST_J) return !(d & (DEP_J | DEP_RW));
  if (filter == T_HOIST_R) return !(d & (DEP_R | DEP_RW));
  if (filter == T_PURE) return !(d & DEP_RW);
  return true;
}

static void emit_temps(Emit *E, Str *o, int ind, const KExpr *e, int filter);

/* One branch of a SELECT inside its if or else: what the branch evaluates becomes
 * temps there (so a DAG shared within the branch is computed once, and a branch not
 * taken loads nothing), then the select's temp is set. */
static void emit_branch(Emit *E, Str *o, int ind, const KExpr *sel, const KExpr *v) {
  int ustamp = E->ustamp, wstamp = E->wstamp;
  new_ustamp(E);
  mark_uncond(E, v);
  new_wstamp(E);
  scope_open(E);
  emit_temps(E, o, ind, v, T_ALL);
  put_ind(o, ind);
  put(o, "t%d = ", sel->id);
  expr_ref(E, o, v);
  put(o, ";\n");
  scope_close(E);
  E->ustamp = ustamp;
  E->wstamp = wstamp;
}

static void emit_select(Emit *E, Str *o, int ind, const KExpr *e) {
  put_ind(o, ind);
  put(o, "float t%d;\n", e->id);
  put_ind(o, ind);
  put(o, "if (");
  expr_ref(E, o, e->a);
  put(o, " != 0.0f) {\n");
  emit_branch(E, o, ind + 1, e, e->b);
  put_ind(o, ind);
  put(o, "} else {\n");
  emit_branch(E, o, ind + 1, e, e->c);
  put_ind(o, ind);
  put(o, "}\n");
}

/* Post-order over the whole DAG, SELECT branches included: what a branch shares with
 * the unconditional part is computed before the select. Temps for the unconditional
 * nodes that pass the filter. */
static void emit_temps(Emit *E, Str *o, int ind, const KExpr *e, int filter) {
  if (!e || E->seen[e->id] == E->wstamp) return;
  E->seen[e->id] = E->wstamp;
  switch (e->kind) {
  case KX_LOAD: emit_temps(E, o, ind, e->view.gather, filter); break;
  case KX_UNARY: emit_temps(E, o, ind, e->a, filter); break;
  case KX_BINARY:
    emit_temps(E, o, ind, e->a, filter);
    emit_temps(E, o, ind, e->b, filter);
    break;
  case KX_SELECT:
    emit_temps(E, o, ind, e->a, filter);
    emit_temps(E, o, ind, e->b, filter);
    emit_temps(E, o, ind, e->c, filter);
    break;
  case KX_CONST:
  case KX_ACC:
  case KX_COORD:
  case KX_SCALAR:
  case KX_RAND: break;
  }
  if (!temp_wanted(E, e, filter)) return;
  if (e->kind == KX_SELECT) emit_select(E, o, ind, e);
  else {
    put_ind(o, ind);
    put(o, "const float t%d = ", e->id);
    expr_inline(E, o, e);
    put(o, ";\n");
  }
  E->lvl[e->id] = E->depth;
  E->stack[E->nstack++] = e->id;
}

static void emit_phase_temps(Emit *E, Str *o, int ind, const KPhase *p, int filter) {
  emit_temps(E, o, ind, p->expr, filter);
  if (p->kind != KPH_REDUCE) emit_temps(E, o, ind, p->view.gather, filter);
}

/* Temps, then `bN[addr] = value;` (or +=). */
static void emit_store(Emit *E, Str *o, int ind, const KPhase *p) {
  new_wstamp(E);
  emit_phase_temps(E, o, ind, p, T_ALL);
  E->use_buf[p->buf] = true;
  put_ind(o, ind);
  if (E->lane >= 0 && E->vstore[p - E->k->phases]) { /* its value, stored with the other three's */
    put(o, "sv%d[%d] = ", (int)(p - E->k->phases), E->lane);
    expr_ref(E, o, p->expr);
    put(o, ";\n");
    return;
  }
  const KBuf *b = &E->k->bufs[p->buf];
  if (half_buf(b)) { /* 16 bits: rounded from f32 (an add in f32 first) */
    const char *h = half_name(b);
    put(o, "{ const long long a_ = CC_WR(b%d, ", p->buf);
    addr_text(E, o, &p->view);
    put(o, ", %lldLL); b%d[a_] = cc_f2%s(", (long long)b->numel, p->buf, h);
    if (p->store == KS_ADD) put(o, "cc_%s2f(b%d[a_]) + ", h, p->buf);
    expr_ref(E, o, p->expr);
    put(o, "); }\n");
    return;
  }
  put(o, "b%d[CC_WR(b%d, ", p->buf, p->buf);
  addr_text(E, o, &p->view);
  put(o, ", %lldLL)] %s ", (long long)b->numel, p->store == KS_ADD ? "+=" : "=");
  expr_ref(E, o, p->expr);
  put(o, ";\n");
}

/* ---- declarations -------------------------------------------------------------- */

/* coord_d from r (row axes) or j (column axes): (x / stride) % dim. */
static void coord_decl(Str *o, int ind, const Kernel *k, int axis) {
  bool row = axis < k->row_dims;
  int lo = row ? 0 : k->row_dims, hi = row ? k->row_dims : k->ndims;
  int64_t stride = 1, extent = row ? k->rows : k->cols;
  for (int d = hi - 1; d > axis; d--) stride *= k->dims[d];
  const char *v = row ? "r" : "j";
  put_ind(o, ind);
  put(o, "const long long %s%d = ", row ? "rc" : "cc", axis);
  if (stride == 1 && axis == lo) {
    put(o, "%s;\n", v);
    return;
  }
  bool narrow = extent <= INT32_MAX; /* 32-bit division is much cheaper on the GPU */
  put(o, narrow ? "(long long)((unsigned)%s" : "%s", v);
  if (stride != 1) put(o, narrow ? " / %lldu" : " / %lldLL", (long long)stride);
  if (axis != lo) put(o, narrow ? " %% %lldu" : " %% %lldLL", (long long)k->dims[axis]);
  put(o, narrow ? ");\n" : ";\n");
}

static void coord_decls(Str *o, int ind, const Kernel *k, const bool *use, bool row) {
  for (int d = row ? 0 : k->row_dims; d < (row ? k->row_dims : k->ndims); d++)
    if (use[d]) coord_decl(o, ind, k, d);
}

static bool any_true(const bool *b, int lo, int hi) {
  for (int i = lo; i < hi; i++)
    if (b[i]) return true;
  return false;
}

static void decl_bases_and_scalars(Emit *E, Str *o) {
  const Kernel *k = E->k;
  for (int b = 0; b < k->nbufs; b++) {
    if (!E->use_buf[b]) continue;
    const KBuf *kb = &k->bufs[b];
    const char *ty = kb->dtype == DT_I32        ? "int"
                     : kbuf_elem_bytes(kb) == 1 ? "unsigned char"
                     : half_buf(kb)             ? "unsigned short"
                                                : "float";
    const char *c = E->ro[b] ? "const " : "";
    put(o, "  %s%s *const b%d = (%s%s *)bufs.p[%d];   /* %lld %s */\n", c, ty, b, c, ty, b, (long long)kb->numel,
        dtype_name(kb->dtype));
  }
  for (int i = 0; i < E->nsc; i++)
    if (E->use_sc[i]) put(o, "  const float s%d = scalars[%d];\n", i, i);
}

/* ---- phases of one row (CM_BLOCK_ROW, CM_THREAD_ROW) ----------------------------- */

/* Consecutive REDUCE phases that read none of each other's accumulators share one
 * pass over the row (layernorm's sum x and sum x^2, say). */
static int reduce_group_end(Emit *E, int p) {
  const Kernel *k = E->k;
  unsigned accs = 0;
  while (p < k->nphases && k->phases[p].kind == KPH_REDUCE) {
    if ((E->dep[k->phases[p].expr->id] >> DEP_ACC_SHIFT) & accs) break;
    accs |= 1u << k->phases[p].acc;
    p++;
  }
  return p;
}

/* A loop over [0, extent) in 32 bits when it fits (cheaper counters, easier unrolling). */
static const char *index_type(int64_t extent) { return extent <= INT32_MAX - 1024 ? "int" : "long long"; }

static void loop_open(Emit *E, Str *o, int ind, bool block) {
  const char *ty = index_type(E->k->cols);
  put_ind(o, ind);
  if (E->lanes)
    put(o, "for (%s j = threadIdx.x >> 5; j < %lldLL; j += blockDim.x >> 5) {\n", ty, (long long)E->k->cols);
  else if (block) put(o, "for (%s j = threadIdx.x; j < %lldLL; j += blockDim.x) {\n", ty, (long long)E->k->cols);
  else put(o, "for (%s j = 0; j < %lldLL; j++) {\n", ty, (long long)E->k->cols);
}

/* The j loop of phases [p0, p1) (one MAP, or a REDUCE group): loop-invariant temps
 * before it, the rest inside, column coordinates declared in front of the body. */
static void emit_j_loop_vec(Emit *E, Str *o, int ind, int p0, int p1);
static void vec_accesses(Emit *E, Str *loads, Str *stores, int ind, int p0, int p1);
static void vec_align(Emit *E, Str *o);
static bool plan_vectors(Emit *E, bool rmw);

/* One column's phases [p0, p1) at indentation ind: MAP stores, REDUCE terms added to
 * acc (a thread's partial pacc in a block); the column coordinates it uses in use_cc. */
static void emit_j_body(Emit *E, Str *body, int ind, int p0, int p1, bool block) {
  const Kernel *k = E->k;
  scope_open(E);
  memset(E->use_cc, 0, sizeof E->use_cc);
  new_wstamp(E);
  for (int p = p0; p < p1; p++) {
    const KPhase *ph = &k->phases[p];
    if (ph->kind == KPH_MAP) {
      emit_store(E, body, ind, ph);
      continue;
    }
    emit_phase_temps(E, body, ind, ph, T_ALL);
    put_ind(body, ind);
    put(body, "%s%d = ", block ? "pacc" : "acc", ph->acc);
    put(body, ph->reduce == KR_SUM ? "%s%d + " : "fmaxf(%s%d, ", block ? "pacc" : "acc", ph->acc);
    expr_ref(E, body, ph->expr);
    put(body, ph->reduce == KR_SUM ? ";\n" : ");\n");
  }
  scope_close(E);
}

static void emit_j_loop(Emit *E, Str *o, int ind, int p0, int p1, bool block) {
  const Kernel *k = E->k;
  if (E->vec && block) {
    emit_j_loop_vec(E, o, ind, p0, p1);
    return;
  }
  Str body = {0};
  emit_j_body(E, &body, ind + 1, p0, p1, block);
  loop_open(E, o, ind, block);
  coord_decls(o, ind + 1, k, E->use_cc, false);
  put_str(o, &body);
  put_ind(o, ind);
  put(o, "}\n");
  str_free(&body);
}

/* emit_j_loop's vector form (CM_BLOCK_ROW): a thread takes columns jb to jb + 3, jb
 * striding by four blocks; the vector loads, then each column's phases (partial sums
 * added column by column), then the vector stores. */
static void emit_j_loop_vec(Emit *E, Str *o, int ind, int p0, int p1) {
  const Kernel *k = E->k;
  Str lanes = {0}, loads = {0}, stores = {0};
  bool use_j = E->use_j;
  for (int v = 0; v < 4; v++) {
    Str body = {0};
    E->lane = v;
    E->use_j = false;
    emit_j_body(E, &body, ind + 2, p0, p1, true);
    put_ind(&lanes, ind + 1);
    put(&lanes, "{\n");
    if (any_true(E->use_cc, 0, K_MAX_DIMS) || E->use_j) {
      put_ind(&lanes, ind + 2);
      put(&lanes, "const %s j = jb + %d;\n", index_type(k->cols), v);
    }
    coord_decls(&lanes, ind + 2, k, E->use_cc, false);
    put_str(&lanes, &body);
    put_ind(&lanes, ind + 1);
    put(&lanes, "}\n");
    str_free(&body);
  }
  E->lane = -1;
  E->use_j = use_j;
  vec_accesses(E, &loads, &stores, ind + 1, p0, p1);
  put_ind(o, ind);
  put(o, "for (%s jb = 4 * (int)threadIdx.x; jb < %lldLL; jb += 4 * (int)blockDim.x) {\n", index_type(k->cols),
      (long long)k->cols);
  put_str(o, &loads);
  put_str(o, &lanes);
  put_str(o, &stores);
  put_ind(o, ind);
  put(o, "}\n");
  str_free(&lanes);
  str_free(&loads);
  str_free(&stores);
}

static void emit_reduce_group(Emit *E, Str *o, int ind, int p0, int p1, bool block) {
  const Kernel *k = E->k;
  put_ind(o, ind);
  put(o, "{\n");
  scope_open(E);
  new_ustamp(E);
  new_wstamp(E);
  for (int p = p0; p < p1; p++) mark_phase(E, &k->phases[p]);
  if (k->cols > 0)
    for (int p = p0; p < p1; p++) emit_phase_temps(E, o, ind + 1, &k->phases[p], T_HOIST_J);
  for (int p = p0; p < p1; p++) {
    put_ind(o, ind + 1);
    put(o, "%s%s%d = %s;\n", block ? "float " : "", block ? "pacc" : "acc", k->phases[p].acc,
        k->phases[p].reduce == KR_SUM ? "0.0f" : "-CC_INF");
  }
  if (k->cols > 0) emit_j_loop(E, o, ind + 1, p0, p1, block);
  for (int p = p0; p < p1 && block; p++) {
    put_ind(o, ind + 1);
    put(o, "acc%d = cc_%s_%s(pacc%d, cc_sh);\n", k->phases[p].acc, E->lanes ? "lanes" : "block",
        k->phases[p].reduce == KR_SUM ? "sum" : "max", k->phases[p].acc);
    E->use_sh = true;
  }
  scope_close(E);
  put_ind(o, ind);
  put(o, "}\n");
}

static void emit_map(Emit *E, Str *o, int ind, int p, bool block) {
  if (E->k->cols == 0) return;
  put_ind(o, ind);
  put(o, "{\n");
  scope_open(E);
  new_ustamp(E);
  new_wstamp(E);
  mark_phase(E, &E->k->phases[p]);
  emit_phase_temps(E, o, ind + 1, &E->k->phases[p], T_HOIST_J);
  emit_j_loop(E, o, ind + 1, p, p + 1, block);
  scope_close(E);
  put_ind(o, ind);
  put(o, "}\n");
}

static void emit_row_phase(Emit *E, Str *o, int ind, const KPhase *p, const char *guard) {
  put_ind(o, ind);
  put(o, "%s{\n", guard);
  scope_open(E);
  E->row_phase = true;
  new_ustamp(E);
  mark_phase(E, p);
  emit_store(E, o, ind + 1, p);
  E->row_phase = false;
  scope_close(E);
  put_ind(o, ind);
  put(o, "}\n");
}

/* A __syncthreads() before phases [p0, p1) when they touch what the phases since
 * the last barrier wrote (or write what those read). A REDUCE group ends in one. */
static void block_sync(Emit *E, Str *o, int ind, Access *pend, int *npend, int p0, int p1) {
  const Kernel *k = E->k;
  Access *cur = malloc(sizeof *cur * ((size_t)k->nexprs + 1) * (size_t)(p1 - p0));
  ir_assert(cur);
  int n = 0;
  for (int p = p0; p < p1; p++) n += phase_accesses(k, &k->phases[p], cur + n);
  if (any_conflict(k, pend, *npend, cur, n)) {
    put_ind(o, ind);
    put(o, "__syncthreads();\n");
    *npend = 0;
  }
  if (k->phases[p0].kind == KPH_REDUCE) *npend = 0;
  else
    for (int i = 0; i < n; i++) pend[(*npend)++] = cur[i];
  free(cur);
}

static void emit_rows_loop(Emit *E, Str *o, bool block) {
  const Kernel *k = E->k;
  Str row = {0};
  Access *pend = malloc(sizeof *pend * ((size_t)k->nexprs + 1) * (size_t)(k->nphases + 1));
  ir_assert(pend);
  int npend = 0;
  scope_open(E);
  for (int p = 0; p < k->nphases;) {
    const KPhase *ph = &k->phases[p];
    int end = ph->kind == KPH_REDUCE ? reduce_group_end(E, p) : p + 1;
    if (block) block_sync(E, &row, 2, pend, &npend, p, end);
    if (ph->kind == KPH_REDUCE) emit_reduce_group(E, &row, 2, p, end, block);
    else if (ph->kind == KPH_MAP) emit_map(E, &row, 2, p, block);
    else
      emit_row_phase(E, &row, 2, ph,
                     E->lanes ? "if (threadIdx.x < 32 && live) "
                     : block  ? "if (threadIdx.x == 0) "
                              : "");
    p = end;
  }
  scope_close(E);
  if (E->lanes) { /* every thread through every barrier: a lane past the end takes the last row, stores nothing */
    put(o, "  for (long long r0 = (long long)blockIdx.x * 32; r0 < n; r0 += (long long)gridDim.x * 32) {\n");
    put(o, "    const bool live = r0 + (threadIdx.x & 31u) < n;\n");
    put(o, "    const long long r = live ? r0 + (threadIdx.x & 31u) : n - 1;\n");
  } else if (block) put(o, "  for (long long r = blockIdx.x; r < n; r += gridDim.x) {\n");
  else
    put(o, "  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < n;"
           " r += (long long)gridDim.x * blockDim.x) {\n");
  coord_decls(o, 2, k, E->use_rc, true);
  for (int a = 0; a < k->naccs; a++) put(o, "    float acc%d;\n", a);
  put_str(o, &row);
  for (int a = 0; a < k->naccs; a++)
    if (!E->use_acc[a]) put(o, "    (void)acc%d;\n", a);
  put(o, "  }\n");
  str_free(&row);
  free(pend);
}

static void emit_rows(Emit *E, Str *o, bool block) {
  if (block && !E->lanes && plan_vectors(E, false)) { /* a vector loop where aligned, else the scalar one */
    vec_align(E, o);
    E->vec = true;
    emit_rows_loop(E, o, block);
    E->vec = false;
    put(o, "    return;\n  }\n");
    memset(E->use_rc, 0, sizeof E->use_rc);
  }
  emit_rows_loop(E, o, block);
}

/* ---- CM_FLAT and CM_COLS -------------------------------------------------------- */

/* All MAP phases of an element run in one thread, one after another: what reads no
 * written memory has the same value in each, so it is computed once for all. */
static void emit_shared_pure(Emit *E, Str *o, int ind) {
  const Kernel *k = E->k;
  new_ustamp(E);
  new_wstamp(E);
  for (int p = 0; p < k->nphases; p++)
    if (k->phases[p].kind == KPH_MAP) mark_phase(E, &k->phases[p]);
  for (int p = 0; p < k->nphases; p++)
    if (k->phases[p].kind == KPH_MAP) emit_phase_temps(E, o, ind, &k->phases[p], T_PURE);
}

/* One element's phases at indentation ind, the element's j in scope. */
static void emit_flat_element(Emit *E, Str *el, int ind) {
  const Kernel *k = E->k;
  scope_open(E);
  emit_shared_pure(E, el, ind);
  for (int p = 0; p < k->nphases; p++) {
    const KPhase *ph = &k->phases[p];
    E->cur_phase = p;
    if (ph->kind == KPH_ROW) {
      E->use_j = true;
      emit_row_phase(E, el, ind, ph, "if (j == 0) ");
      continue;
    }
    put_ind(el, ind);
    put(el, "{\n");
    scope_open(E);
    new_ustamp(E);
    mark_phase(E, ph);
    emit_store(E, el, ind + 1, ph);
    scope_close(E);
    put_ind(el, ind);
    put(el, "}\n");
  }
  scope_close(E);
}

/* Four neighbours of a row at once through view v of b, from any column j that is a
 * multiple of 4 in a row of cols divisible by 4: no gather, the columns contiguous in
 * one run (j's part of the address is j itself), the address of column 0 of every row a
 * multiple of 4 elements; f32 or 16-bit. (The buffer's base is checked at run time.) */
static bool vec_view(const Kernel *k, const KView *v, const KBuf *b) {
  int64_t s;
  if (v->gather || b->dtype == DT_I32 || kbuf_elem_bytes(b) == 1 || v->offset % 4) return false;
  if (!linear_part(k, v, k->row_dims, k->ndims, &s) || s != 1) return false;
  for (int d = 0; d < k->row_dims; d++)
    if (k->dims[d] != 1 && v->strides[d] % 4) return false;
  return true;
}

static void mark_vloads(Emit *E, const KExpr *e) {
  if (!e) return;
  if (e->kind == KX_LOAD && E->ro[e->buf] && vec_view(E->k, &e->view, &E->k->bufs[e->buf])) E->vload[e->id] = true;
  if (e->kind == KX_LOAD) mark_vloads(E, e->view.gather);
  if (e->kind == KX_UNARY || e->kind == KX_BINARY || e->kind == KX_SELECT) {
    mark_vloads(E, e->a);
    mark_vloads(E, e->b);
    mark_vloads(E, e->c);
  }
}

static const KExpr *find_expr(const KExpr *e, int id) {
  if (!e) return NULL;
  if (e->id == id) return e;
  const KExpr *f = e->kind == KX_LOAD ? find_expr(e->view.gather, id) : NULL;
  if (!f && (e->kind == KX_UNARY || e->kind == KX_BINARY || e->kind == KX_SELECT))
    if (!(f = find_expr(e->a, id)) && !(f = find_expr(e->b, id))) f = find_expr(e->c, id);
  return f;
}

static bool has_trig(const KExpr *e) {
  if (!e) return false;
  if (e->kind == KX_UNARY && (e->uop == KU_SIN || e->uop == KU_COS)) return true;
  return (e->kind == KX_LOAD && has_trig(e->view.gather)) ||
         ((e->kind == KX_UNARY || e->kind == KX_BINARY || e->kind == KX_SELECT) &&
          (has_trig(e->a) || has_trig(e->b) || has_trig(e->c)));
}

/* The vector path's loads (read-only buffers) and stores: a buffer no other phase
 * writes and nothing reads, or, with rmw, that only its own element's loads read (the
 * same element, as phases_conflict's same_element). False when it has neither, or the
 * rows are not whole vectors, or the kernel takes a sine or cosine (their slow path's
 * local array, four times over, spills: rotary embeddings stay scalar). */
static bool plan_vectors(Emit *E, bool rmw) {
  const Kernel *k = E->k;
  if (k->cols < 4 || k->cols % 4) return false;
  for (int p = 0; p < k->nphases; p++)
    if (has_trig(k->phases[p].expr)) return false;
  bool any = false;
  for (int p = 0; p < k->nphases; p++) mark_vloads(E, k->phases[p].expr);
  for (int i = 0; i < k->nexprs; i++) any |= E->vload[i];
  Access *xs = malloc(sizeof *xs * ((size_t)k->nexprs + 1));
  ir_assert(xs);
  for (int p = 0; p < k->nphases; p++) {
    const KPhase *ph = &k->phases[p];
    const Access w = {ph->buf, &ph->view, true, false};
    bool ok = ph->kind == KPH_MAP && vec_view(k, &ph->view, &k->bufs[ph->buf]), read = false, same = true;
    for (int q = 0; q < k->nphases && ok; q++) {
      ok = !(k->phases[q].kind != KPH_REDUCE && q != p && bufs_overlap(k, k->phases[q].buf, ph->buf));
      int n = phase_accesses(k, &k->phases[q], xs);
      for (int i = 0; i < n; i++)
        if (!xs[i].write && bufs_overlap(k, xs[i].buf, ph->buf)) read = true, same &= same_element(k, &xs[i], &w);
    }
    if (ok && read && (!same || !rmw)) ok = false; /* read elsewhere than it is written */
    E->vstore[p] = ok;
    if (ok && read) E->vrmw[ph->buf] = p + 1;
    any |= ok;
  }
  free(xs);
  return any;
}

/* The vector loads of phases [p0, p1) (`const cc_f4 vN`, the four elements from jb) and
 * the old values of what they read and write (`xB`), with the arrays of their vector
 * stores' values (`float svP[4]`), into loads; the vector stores after the four elements
 * into stores; at indentation ind. */
static void vec_accesses(Emit *E, Str *loads, Str *stores, int ind, int p0, int p1) {
  const Kernel *k = E->k;
  E->jvar = "jb";
  for (int i = 0; i < k->nexprs; i++) {
    if (!E->vload[i]) continue;
    const KExpr *e = NULL;
    for (int p = p0; p < p1 && !e; p++) e = find_expr(k->phases[p].expr, i);
    if (!e) continue;
    const KBuf *b = &k->bufs[e->buf];
    const char *ty = half_buf(b) ? "cc_h4" : "cc_f4";
    E->use_buf[e->buf] = true;
    put_ind(loads, ind);
    put(loads, "const %s v%d = *(const %s *)(b%d + CC_RO4(b%d, ", ty, i, ty, e->buf, e->buf);
    addr_text(E, loads, &e->view);
    put(loads, ", %lldLL));\n", (long long)b->numel);
  }
  for (int p = p0; p < p1; p++) {
    if (!E->vstore[p]) continue;
    const KPhase *ph = &k->phases[p];
    const KBuf *b = &k->bufs[ph->buf];
    const char *ty = half_buf(b) ? "cc_h4" : "cc_f4";
    if (E->vrmw[ph->buf]) { /* the values it had, read before any phase runs */
      put_ind(loads, ind);
      put(loads, "const %s x%d = *(const %s *)(b%d + CC_RD4(b%d, ", ty, ph->buf, ty, ph->buf, ph->buf);
      addr_text(E, loads, &ph->view);
      put(loads, ", %lldLL));\n", (long long)b->numel);
    }
    put_ind(loads, ind);
    put(loads, "float sv%d[4];\n", p);
    put_ind(stores, ind);
    put(stores, "{\n");
    put_ind(stores, ind + 1);
    put(stores, "%s *q_ = (%s *)(b%d + CC_WR4(b%d, ", ty, ty, ph->buf, ph->buf);
    addr_text(E, stores, &ph->view);
    put(stores, ", %lldLL));\n", (long long)b->numel);
    put_ind(stores, ind + 1);
    if (ph->store == KS_ADD && E->vrmw[ph->buf]) put(stores, "%s w_ = x%d;\n", ty, ph->buf);
    else put(stores, "%s w_%s;\n", ty, ph->store == KS_ADD ? " = *q_" : "");
    put_ind(stores, ind + 1);
    put(stores, "for (int e_ = 0; e_ < 4; e_++) w_.v[e_] = ");
    if (half_buf(b)) {
      const char *h = half_name(b);
      if (ph->store == KS_ADD) put(stores, "cc_f2%s(cc_%s2f(w_.v[e_]) + sv%d[e_]);\n", h, h, p);
      else put(stores, "cc_f2%s(sv%d[e_]);\n", h, p);
    } else {
      put(stores, ph->store == KS_ADD ? "w_.v[e_] + sv%d[e_];\n" : "sv%d[e_];\n", p);
    }
    put_ind(stores, ind + 1);
    put(stores, "*q_ = w_;\n");
    put_ind(stores, ind);
    put(stores, "}\n");
  }
  E->jvar = "j";
}

/* `if (<every vector's buffer aligned>)` for the vector path. */
static void vec_align(Emit *E, Str *o) {
  const Kernel *k = E->k;
  bool seen[K_MAX_BUFS] = {0};
  for (int i = 0; i < k->nexprs; i++)
    if (E->vload[i]) {
      const KExpr *e = NULL;
      for (int p = 0; p < k->nphases && !e; p++) e = find_expr(k->phases[p].expr, i);
      if (e) seen[e->buf] = true;
    }
  for (int p = 0; p < k->nphases; p++)
    if (E->vstore[p]) seen[k->phases[p].buf] = true;
  int n = 0;
  put(o, "  if (");
  for (int b = 0; b < k->nbufs; b++)
    if (seen[b])
      put(o, "%s((unsigned long long)b%d & %dull) == 0", n++ ? " && " : "", b, half_buf(&k->bufs[b]) ? 7 : 15);
  put(o, ") {   /* four elements a thread, in vectors */\n");
}

/* The vector path's body: a thread takes four neighbours of a row (jb to jb + 3): each
 * vector load once (`const cc_f4 vN`, its elements in registers), the four elements'
 * phases one after another as the scalar path runs them (their vector stores' values
 * kept in svP[4]), then the vector stores. */
static void emit_flat_vec(Emit *E, Str *o) {
  const Kernel *k = E->k;
  long long c4 = (long long)k->cols / 4;
  Str lanes = {0}, loads = {0}, stores = {0};
  bool use_rc[K_MAX_DIMS];
  memset(E->use_rc, 0, sizeof E->use_rc);
  for (int v = 0; v < 4; v++) {
    Str el = {0};
    E->lane = v;
    E->use_j = false;
    memset(E->use_cc, 0, sizeof E->use_cc);
    emit_flat_element(E, &el, 4);
    E->use_j |= any_true(E->use_cc, 0, K_MAX_DIMS);
    put(&lanes, "      {\n");
    if (E->use_j) put(&lanes, "        const long long j = jb + %d;\n", v);
    coord_decls(&lanes, 4, k, E->use_cc, false);
    put_str(&lanes, &el);
    put(&lanes, "      }\n");
    str_free(&el);
  }
  E->lane = -1;
  vec_accesses(E, &loads, &stores, 3, 0, k->nphases);
  memcpy(use_rc, E->use_rc, sizeof use_rc);
  vec_align(E, o);
  put(o,
      "    for (long long i4 = (long long)blockIdx.x * blockDim.x + threadIdx.x; i4 < n * %lldLL;"
      " i4 += (long long)gridDim.x * blockDim.x) {\n",
      c4);
  put(o, "      const long long r = i4 / %lldLL, jb = (i4 - r * %lldLL) * 4;\n", c4, c4);
  coord_decls(o, 3, k, use_rc, true);
  put_str(o, &loads);
  put_str(o, &lanes);
  put_str(o, &stores);
  put(o, "    }\n    return;\n  }\n");
  str_free(&lanes);
  str_free(&loads);
  str_free(&stores);
}

static void emit_flat(Emit *E, Str *o) {
  const Kernel *k = E->k;
  if (plan_vectors(E, true)) {
    emit_flat_vec(E, o);
    memset(E->use_cc, 0, sizeof E->use_cc);
    memset(E->use_rc, 0, sizeof E->use_rc);
    E->use_r = false;
  }
  Str el = {0};
  E->use_j = false;
  emit_flat_element(E, &el, 2);
  E->use_j |= any_true(E->use_cc, 0, K_MAX_DIMS);
  E->use_r |= E->use_j || any_true(E->use_rc, 0, K_MAX_DIMS);
  put(o, "  const long long total = n * %lldLL;\n", (long long)k->cols);
  put(o, "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;"
         " i += (long long)gridDim.x * blockDim.x) {\n");
  if (E->use_r) put(o, "    const long long r = i / %lldLL;\n", (long long)k->cols);
  if (E->use_j) put(o, "    const long long j = i - r * %lldLL;\n", (long long)k->cols);
  coord_decls(o, 2, k, E->use_rc, true);
  coord_decls(o, 2, k, E->use_cc, false);
  put_str(o, &el);
  put(o, "  }\n");
  str_free(&el);
}

/* CM_COLS_OWNED: the row's gather (its temps now, for the store to reuse) and the skip
 * of a row another owner class scatters. */
static void emit_owner_check(Emit *E, Str *o, int ind, const KPhase *p, int64_t owners) {
  new_wstamp(E);
  emit_temps(E, o, ind, p->view.gather, T_ALL);
  put_ind(o, ind);
  put(o, "if (((unsigned long long)(long long)(");
  expr_ref(E, o, p->view.gather);
  put(o, ") & %lldull) != own) continue;\n", (long long)owners - 1);
}

static void emit_cols(Emit *E, Str *o) {
  const Kernel *k = E->k;
  int64_t owners = E->map == CM_COLS_OWNED ? cuda_kernel_owners(k) : 1;
  Str th = {0}, rows = {0};
  scope_open(E);
  if (k->rows > 0) {
    new_ustamp(E);
    new_wstamp(E);
    for (int p = 0; p < k->nphases; p++) mark_phase(E, &k->phases[p]);
    for (int p = 0; p < k->nphases; p++) emit_phase_temps(E, &th, 2, &k->phases[p], T_HOIST_R);
    scope_open(E);
    if (owners == 1) emit_shared_pure(E, &rows, 3); /* else nothing before the owner check */
    for (int p = 0; p < k->nphases; p++) {
      put(&rows, "      {\n");
      scope_open(E);
      new_ustamp(E);
      mark_phase(E, &k->phases[p]);
      if (owners > 1) emit_owner_check(E, &rows, 4, &k->phases[p], owners);
      emit_store(E, &rows, 4, &k->phases[p]);
      scope_close(E);
      put(&rows, "      }\n");
    }
    scope_close(E);
    put(&th, "    for (%s r = 0; r < %lldLL; r++) {\n", index_type(k->rows), (long long)k->rows);
    coord_decls(&th, 3, k, E->use_rc, true);
    put_str(&th, &rows);
    put(&th, "    }\n");
  }
  scope_close(E);
  if (owners > 1) {
    /* block w: owner class w % owners of the column block w / owners */
    put(o, "  const long long nw = %lldLL * ((n + blockDim.x - 1) / blockDim.x);\n", (long long)owners);
    put(o, "  for (long long w = blockIdx.x; w < nw; w += gridDim.x) {\n");
    put(o, "    const unsigned long long own = (unsigned long long)w & %lldull;\n", (long long)owners - 1);
    put(o, "    const long long j = w / %lldLL * blockDim.x + threadIdx.x;\n    if (j >= n) continue;\n",
        (long long)owners);
  } else {
    put(o, "  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n;"
           " j += (long long)gridDim.x * blockDim.x) {\n");
  }
  coord_decls(o, 2, k, E->use_cc, false);
  put_str(o, &th);
  put(o, "  }\n");
  str_free(&th);
  str_free(&rows);
}

/* ---- the fused attention kernel (kernel.h, KAttn): one warp per work item ---------- */

_Static_assert(KA_BLOCK == 32, "a key block of the fused attention is one warp's lanes");

/* `x` as an f32 expression: element idx of operand x. */
static void attn_load(Str *o, const Kernel *k, const KOperand *x, const char *idx) {
  const KBuf *b = &k->bufs[x->buf];
  const char *rd = bufs_overlap(k, k->attn->res.buf, x->buf) ? "CC_RD" : "CC_RO";
  if (half_buf(b))
    put(o, "cc_%s2f(b%d[%s(b%d, %s, %lldLL)])", half_name(b), x->buf, rd, x->buf, idx, (long long)b->numel);
  else
    put(o, "%sb%d[%s(b%d, %s, %lldLL)]", b->dtype == DT_I32 ? "(float)" : "", x->buf, rd, x->buf, idx,
        (long long)b->numel);
}

/* `long long name = offset + b*sb + s*ss;` the element offset of row (b, s). */
static void attn_row(Str *o, int ind, const char *name, const KOperand *x, const char *s) {
  put_ind(o, ind);
  put(o, "const long long %s = %lldLL + b * %lldLL + (%s) * %lldLL;\n", name, (long long)x->offset, (long long)x->sb, s,
      (long long)x->ss);
}

/* sum over d of x[xc + d] * y[yc + d], in order, into `float var`: xc and yc the
 * elements of the rows' first head columns. */
static void attn_dot(Str *o, int ind, const Kernel *k, const char *var, const KOperand *x, const char *xc,
                     const KOperand *y, const char *yc) {
  char xi[64], yi[64];
  snprintf(xi, sizeof xi, "%s + d", xc);
  snprintf(yi, sizeof yi, "%s + d", yc);
  put_ind(o, ind);
  put(o, "float %s = 0.0f;\n", var);
  put_ind(o, ind);
  put(o, "for (int d = 0; d < %lld; d++) %s += ", (long long)k->attn->hd, var);
  attn_load(o, k, x, xi);
  put(o, " * ");
  attn_load(o, k, y, yi);
  put(o, ";\n");
}

/* `for (a) { const int d = lane + 32 * a; [if (d < hd)] ` opened: the lane's share of
 * the head's columns, acc[a] holding column d. The caller closes the brace. */
static void attn_lane_cols(Str *o, int ind, const Kernel *k) {
  long long hd = k->attn->hd;
  put_ind(o, ind);
  put(o, "for (int a = 0; a < %lld; a++) {\n", (hd + 31) / 32);
  put_ind(o, ind + 1);
  put(o, "const int d = (int)lane + 32 * a;\n");
  put_ind(o, ind + 1);
  if (hd % 32) put(o, "if (d < %lld) ", hd);
}

static void attn_store(Str *o, int ind, const Kernel *k, const char *idx, const char *v) {
  const KAttn *A = k->attn;
  const KBuf *b = &k->bufs[A->res.buf];
  int n = A->res.buf;
  put_ind(o, ind);
  put(o, "{ const long long a_ = CC_WR(b%d, %s, %lldLL); ", n, idx, (long long)b->numel);
  if (half_buf(b)) {
    const char *h = half_name(b);
    if (A->store == KS_ADD) put(o, "b%d[a_] = cc_f2%s(cc_%s2f(b%d[a_]) + (%s)); }\n", n, h, h, n, v);
    else put(o, "b%d[a_] = cc_f2%s(%s); }\n", n, h, v);
  } else {
    put(o, "b%d[a_] %s %s; }\n", n, A->store == KS_ADD ? "+=" : "=", v);
  }
}

/* `const long long lo = .., hi = ..;`: the other side's rows [lo, hi) that the pass's
 * rows `first` .. `last` meet: the keys they see by query (kattn_keys), the queries that
 * see them by key (kattn_queries). Both ends grow with the row, so for a run of rows
 * these are the first one's lo and the last one's hi, with the rows between masked. */
static void attn_bounds(Str *o, int ind, const KAttn *A, const char *first, const char *last) {
  bool by_query = A->pass == KA_FWD || A->pass == KA_DQ;
  long long shift = A->sk - A->sq, W = A->window, end = by_query ? A->sk : A->sq;
  put_ind(o, ind);
  put(o, "const long long lo = ");
  if (by_query && W) put(o, "%s + %lldLL > 0 ? %s + %lldLL : 0", first, shift - W + 1, first, shift - W + 1);
  else if (!by_query && A->causal) put(o, "%s - %lldLL > 0 ? %s - %lldLL : 0", first, shift, first, shift);
  else put(o, "0");
  long long up = by_query ? shift + 1 : W - shift; /* past the last row's last: last + up */
  if (by_query ? A->causal : W > 0)
    put(o, ", hi = %s + %lldLL < %lldLL ? %s + %lldLL : %lldLL;\n", last, up, end, last, up, end);
  else put(o, ", hi = %lldLL;\n", end);
}

/* Opens the loop over the query heads qh a row meets, kernel_eval's: by query its own
 * head h alone, by key (h a key/value head) the group's query heads in order. Their
 * sums meet in the row's accumulators: the row is still one work item's alone. */
static void attn_heads(Str *o, int ind, const KAttn *A) {
  long long grp = kattn_group(A);
  put_ind(o, ind);
  if (A->pass == KA_FWD || A->pass == KA_DQ) put(o, "for (long long qh = h; qh < h + 1; qh++) {\n");
  else put(o, "for (long long qh = h * %lldLL; qh < h * %lldLL + %lldLL; qh++) {\n", grp, grp, grp);
}

/* The body: what kernel_eval's eval_attn_row does, in the same order, one warp per row
 * (its index uniform across the warp, so every lane reaches every shuffle). A block of
 * 32 keys (the forward pass, aligned at multiples of 32 as kernel_eval's, the lanes
 * below the window's start idle) or 32 rows of the other side (the backward passes) is
 * one score per lane, its dot product in order over d; the lanes' scores are then taken
 * in order, broadcast, into the accumulators, each lane holding the head columns
 * d = lane + 32a. So each column's sums run in kernel_eval's order, as one thread per
 * row did, with the dot products spread over the lanes and the value, gradient, key
 * and query rows read by consecutive lanes at consecutive addresses. The row's own
 * operands are at its head's columns ho, q and g at the query head's qo, k and v at the
 * key/value head's ko. */
static void emit_attn(Str *o, const Kernel *k) {
  const KAttn *A = k->attn;
  bool by_query = A->pass == KA_FWD || A->pass == KA_DQ;
  long long hd = A->hd, F = A->heads * hd, grp = kattn_group(A);
  long long len = by_query ? A->sq : A->sk, nh = by_query ? A->heads : A->kv_heads;
  put(o, "  const unsigned lane = threadIdx.x & 31u;\n");
  put(o, "  for (long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < n;"
         " r += ((long long)gridDim.x * blockDim.x) >> 5) {\n");
  put(o, "    const long long x = r %% %lldLL, b = r / %lldLL / %lldLL, h = r / %lldLL %% %lldLL, ho = h * %lldLL;\n",
      len, len, nh, len, nh, hd);
  put(o, "    float acc[%lld];\n    for (int a = 0; a < %lld; a++) acc[a] = 0.0f;\n", (hd + 31) / 32, (hd + 31) / 32);
  attn_bounds(o, 2, A, "x", "x");
  if (A->pass == KA_FWD) {
    put(o, "    const long long ko = h / %lldLL * %lldLL;\n", grp, hd);
    attn_row(o, 2, "xr", &A->q, "x");
    put(o, "    float m = -CC_INF, l = 0.0f;\n");
    put(o, "    for (long long j0 = lo / 32 * 32; j0 < hi; j0 += 32) {\n");
    put(o, "      const int t0 = (int)(lo > j0 ? lo - j0 : 0), jn = (int)(hi - j0 < 32 ? hi - j0 : 32);\n");
    put(o, "      float sc = -CC_INF;\n");
    put(o, "      if ((int)lane >= t0 && (int)lane < jn) {\n");
    attn_row(o, 4, "kr", &A->k, "j0 + lane");
    attn_dot(o, 4, k, "s", &A->q, "xr + ho", &A->k, "kr + ko");
    put(o, "        sc = s * ");
    put_float(o, A->scale);
    put(o, ";\n      }\n");
    put(o, "      const float mb = cc_warp_max(sc);\n");
    put(o, "      const float mn = fmaxf(m, mb), c = expf(m - mn), pl = expf(sc - mn);\n      l *= c;\n");
    put(o, "      for (int a = 0; a < %lld; a++) acc[a] *= c;\n", (hd + 31) / 32);
    put(o, "      for (int t = t0; t < jn; t++) {\n");
    put(o, "        const float p = __shfl_sync(0xffffffffu, pl, t);\n        l += p;\n");
    attn_row(o, 4, "vr", &A->v, "j0 + t");
    attn_lane_cols(o, 4, k);
    put(o, "acc[a] += p * ");
    attn_load(o, k, &A->v, "vr + ko + d");
    put(o, ";\n        }\n      }\n      m = mn;\n    }\n");
    attn_row(o, 2, "orow", &A->res, "x");
    attn_lane_cols(o, 2, k);
    attn_store(o, 0, k, "orow + ho + d", "acc[a] / l");
    put(o, "    }\n");
    char idx[64];
    snprintf(idx, sizeof idx, "orow + %lldLL + h", F);
    put(o, "    if (lane == 0)\n");
    attn_store(o, 3, k, idx, "m + logf(l)");
    put(o, "  }\n");
    return;
  }
  attn_heads(o, 2, A);
  put(o, "      const long long qo = qh * %lldLL, ko = qh / %lldLL * %lldLL;\n", hd, grp, hd);
  put(o, "      for (long long y0 = lo; y0 < hi; y0 += 32) {\n");
  put(o, "        const int yn = (int)(hi - y0 < 32 ? hi - y0 : 32);\n        float cl = 0.0f;\n");
  put(o, "        if ((int)lane < yn) {\n");
  put(o, "          const long long y = y0 + lane, i = %s, j = %s;\n", by_query ? "x" : "y", by_query ? "y" : "x");
  attn_row(o, 5, "qr", &A->q, "i");
  attn_row(o, 5, "kr", &A->k, "j");
  attn_row(o, 5, "orow", &A->out, "i");
  attn_dot(o, 5, k, "s", &A->q, "qr + qo", &A->k, "kr + ko");
  char lse[64];
  snprintf(lse, sizeof lse, "orow + %lldLL + qh", F);
  put(o, "          const float p = expf(s * ");
  put_float(o, A->scale);
  put(o, " - ");
  attn_load(o, k, &A->out, lse);
  put(o, ");\n");
  if (A->pass == KA_DV) {
    put(o, "          cl = p;\n");
  } else {
    attn_row(o, 5, "gr", &A->g, "i");
    attn_row(o, 5, "vr", &A->v, "j");
    attn_row(o, 5, "dr", &A->delta, "i");
    attn_dot(o, 5, k, "dp", &A->g, "gr + qo", &A->v, "vr + ko");
    put(o, "          cl = p * (dp - ");
    attn_load(o, k, &A->delta, "dr + qh");
    put(o, ");\n");
  }
  put(o, "        }\n");
  put(o, "        for (int t = 0; t < yn; t++) {\n");
  put(o, "          const float cf = __shfl_sync(0xffffffffu, cl, t);\n");
  /* the row the coefficient multiplies: g's row i (dV), k's row j (dQ), q's row i (dK) */
  const KOperand *X = A->pass == KA_DV ? &A->g : by_query ? &A->k : &A->q;
  put(o, "          const long long y = y0 + t;\n");
  attn_row(o, 5, "xr", X, "y");
  attn_lane_cols(o, 5, k);
  put(o, "acc[a] += cf * ");
  attn_load(o, k, X, by_query ? "xr + ko + d" : "xr + qo + d");
  put(o, ";\n          }\n        }\n      }\n    }\n");
  attn_row(o, 2, "rrow", &A->res, "x");
  Str v = {0};
  put(&v, "acc[a] * ");
  put_float(&v, A->pass == KA_DV ? 1.0f : A->scale);
  attn_lane_cols(o, 2, k);
  attn_store(o, 0, k, "rrow + ho + d", v.s);
  put(o, "    }\n");
  str_free(&v);
  put(o, "  }\n");
}

/* ---- fused attention on tensor cores (CM_MMA_TILE) ---------------------------------- */

/* The 16-bit type the tensor cores take for a fused attention kernel: its queries' (a
 * bf16 or f16 program's), where the head is whole 16-column steps of mma.m16n8k16 and
 * fits the tiles in shared memory; DT_F32 (the exact warp-per-row path) else. */
static DType attn_mma_type(const Kernel *k) {
  const KAttn *A = k->attn;
  if (!A) return DT_F32;
  DType t = k->bufs[A->q.buf].dtype;
  if (t != DT_BF16 && t != DT_F16) return DT_F32;
  return A->hd % 16 == 0 && A->hd <= CUDA_MMA_MAX_HD ? t : DT_F32;
}

/* A pass in the tile form (emit_attn_mma): a1, a2 the rows' own operands (the A
 * fragments of the score products), b1, b2 the other side's rows they meet (the B
 * fragments), z what the coefficients multiply; a2 and b2 NULL where one score does. */
typedef struct MmaOps {
  const KOperand *a1, *a2, *b1, *b2, *z;
} MmaOps;

static MmaOps mma_ops(const KAttn *A) {
  switch (A->pass) {
  case KA_FWD: return (MmaOps){&A->q, NULL, &A->k, NULL, &A->v};
  case KA_DQ: return (MmaOps){&A->q, &A->g, &A->k, &A->v, &A->k};
  case KA_DK: return (MmaOps){&A->k, &A->v, &A->q, &A->g, &A->q};
  case KA_DV: return (MmaOps){&A->k, NULL, &A->q, NULL, &A->g};
  }
  unreachable();
}

/* `lhs = cond ? <x's element (row, col) as f32> : 0.0f;` */
static void mma_elem(Str *o, int ind, const Kernel *k, const char *lhs, const KOperand *x, const char *row,
                     const char *col, const char *cond) {
  char idx[200];
  snprintf(idx, sizeof idx, "%lldLL + b * %lldLL + (%s) * %lldLL + %s", (long long)x->offset, (long long)x->sb, row,
           (long long)x->ss, col);
  put_ind(o, ind);
  put(o, "%s = (%s) ? ", lhs, cond);
  attn_load(o, k, x, idx);
  put(o, " : 0.0f;\n");
}

/* A warp's A fragments of operand x for its 16 rows (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16 with floating point type"): register i of step kk holds row
 * xa + 8 (i & 1), columns kk * 16 + 2 t4 + 8 (i >> 1) and the next (the lower in the low
 * half), at the row's head columns ho; rows past the pass's `len` are zeros. */
static void mma_a_frags(Str *o, const Kernel *k, const char *name, const KOperand *x, const char *ty, long long len) {
  long long kd = k->attn->hd / 16;
  char cond[64];
  snprintf(cond, sizeof cond, "x < %lldLL", len);
  put(o, "    unsigned %s[%lld][4];\n", name, kd);
  put(o, "CC_UNROLL\n    for (int kk = 0; kk < %lld; kk++) {\nCC_UNROLL\n", kd);
  put(o, "      for (int i = 0; i < 4; i++) {\n");
  put(o,
      "        const long long x = xa + (i & 1) * 8;\n        const int d = kk * 16 + (int)t4 * 2 + (i >> 1) * 8;\n");
  put(o, "        float v0, v1;\n");
  mma_elem(o, 4, k, "v0", x, "x", "ho + d", cond);
  mma_elem(o, 4, k, "v1", x, "x", "ho + d + 1", cond);
  put(o, "        %s[kk][i] = cc_pack_%s(v0, v1);\n      }\n    }\n", name, ty);
}

/* out[t][4] = (A fragments a) x (the other side's rows in shared array sh, [BC][hd])^T
 * for the BC / 8 tiles t of 8 rows: the B fragment's register 0 holds k = 2 t4 and the
 * next of column (row of sh) g, register 1 the same 8 further. */
static void mma_scores(Str *o, const Kernel *k, const char *out, const char *a, const char *sh, const char *mma) {
  long long hd = k->attn->hd;
  put(o, "        float %s[%d][4];\n", out, CUDA_MMA_BC / 8);
  put(o, "CC_UNROLL\n        for (int t = 0; t < %d; t++) {\n", CUDA_MMA_BC / 8);
  put(o, "          %s[t][0] = %s[t][1] = %s[t][2] = %s[t][3] = 0.0f;\n", out, out, out, out);
  put(o, "CC_UNROLL\n          for (int kk = 0; kk < %lld; kk++) {\n", hd / 16);
  put(o, "            const int e = (t * 8 + (int)g) * %lld + kk * 16 + (int)t4 * 2;\n", hd);
  put(o, "            const unsigned fb[2] = {CC_SH_PAIR(%s, e, %lld), CC_SH_PAIR(%s, e + 8, %lld)};\n", sh,
      hd * CUDA_MMA_BC, sh, hd * CUDA_MMA_BC);
  put(o, "            %s(%s[t], %s[kk], fb);\n          }\n        }\n", mma, out, a);
}

/* The pass on tensor cores, FlashAttention-2's structure: a block takes 16 rows of the
 * pass (query rows forward and for dQ, key rows for dK and dV) per warp, of one batch
 * element and head (a key/value head by key); its warps hold their rows' operands as
 * mma A fragments and walk the other side in blocks of BC rows, staged in shared memory
 * as the mma type (the rows the scores meet as they are, the operand the coefficients
 * multiply transposed, so both B fragments read pairs of neighbours), by key once per
 * query head of the group (the other side's columns yo are that head's). Per block: the
 * scores S = A B^T on tensor cores (f32 accumulators), masked (causal, the window, past
 * the end) and turned into the pass's coefficients (forward: the online softmax, its
 * row max and sum over the quad of lanes that hold a row; backward:
 * P = exp(S scale - lse), dS = P (dP - delta)), then acc += C Z with C rounded to the mma
 * type (the C fragments of two score tiles are the A fragment of one step:
 * FlashAttention-2's register reuse). Blocks wholly outside the causal bound or the
 * window of every row of the tile are skipped by the loop's bounds. Every thread of the
 * block reaches every barrier and shuffle (the bounds are the block's). */
static void emit_attn_mma(Str *o, const Kernel *k) {
  const KAttn *A = k->attn;
  const MmaOps M = mma_ops(A);
  const char *ty = k->bufs[A->q.buf].dtype == DT_BF16 ? "bf" : "h";
  const char *mma = k->bufs[A->q.buf].dtype == DT_BF16 ? "cc_mma_bf16" : "cc_mma_f16";
  long long hd = A->hd, F = A->heads * hd, shift = A->sk - A->sq, BC = CUDA_MMA_BC, SZ = BC * hd;
  long long grp = kattn_group(A);
  bool by_query = A->pass == KA_FWD || A->pass == KA_DQ;
  long long len = by_query ? A->sq : A->sk, nh = by_query ? A->heads : A->kv_heads;
  put(o, "  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3u;\n");
  put(o, "  const long long br = 16LL * (blockDim.x >> 5), tpl = (%lldLL + br - 1) / br;\n", len);
  put(o, "  CC_SHARED(unsigned short, cc_yb, %lld);   /* the other side's rows the scores meet, [%lld][%lld] */\n", SZ,
      BC, hd);
  if (M.b2) put(o, "  CC_SHARED(unsigned short, cc_yb2, %lld);  /* the second score's */\n", SZ);
  put(o, "  CC_SHARED(unsigned short, cc_zt, %lld);   /* what the coefficients multiply, transposed: [%lld][%lld] */\n",
      SZ, hd, BC);
  if (!by_query) put(o, "  CC_SHARED(float, cc_ys, %lld);   /* the queries' lse, then delta */\n", 2 * BC);
  put(o, "  for (long long tile = blockIdx.x; tile < n / %lldLL * tpl; tile += gridDim.x) {\n", len);
  put(o,
      "    const long long bh = tile / tpl, x0 = tile %% tpl * br, b = bh / %lldLL, h = bh %% %lldLL, ho = h * %lldLL;\n",
      nh, nh, hd);
  put(o, "    const long long xa = x0 + 16 * warp + g;\n");
  bool grows = by_query ? A->causal : A->window > 0; /* the other side's end follows the rows */
  if (grows) put(o, "    const long long xl = (x0 + br < %lldLL ? x0 + br : %lldLL) - 1;\n", len, len);
  mma_a_frags(o, k, "fa", M.a1, ty, len);
  if (M.a2) mma_a_frags(o, k, "fa2", M.a2, ty, len);
  put(o, "    float acc[%lld][4];\n", hd / 8);
  put(o, "CC_UNROLL\n    for (int t = 0; t < %lld; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;\n",
      hd / 8);
  if (A->pass == KA_FWD) put(o, "    float m[2] = {-CC_INF, -CC_INF}, l[2] = {0.0f, 0.0f};\n");
  if (A->pass == KA_DQ) { /* the rows' lse and delta */
    put(o, "    float lse[2], dl[2];\n");
    put(o, "CC_UNROLL\n    for (int r = 0; r < 2; r++) {\n      const long long x = xa + 8 * r;\n");
    char lcol[64], cond[64];
    snprintf(lcol, sizeof lcol, "%lldLL + h", F);
    snprintf(cond, sizeof cond, "x < %lldLL", len);
    mma_elem(o, 3, k, "lse[r]", &A->out, "x", lcol, cond);
    mma_elem(o, 3, k, "dl[r]", &A->delta, "x", "h", cond);
    put(o, "    }\n");
  }
  attn_bounds(o, 2, A, "x0", "xl");
  attn_heads(o, 2, A);
  if (by_query) put(o, "      const long long yo = qh / %lldLL * %lldLL;\n", grp, hd);
  else put(o, "      const long long yo = qh * %lldLL;\n", hd);
  put(o, "      for (long long y0 = lo; y0 < hi; y0 += %lld) {\n", BC);
  put(o, "        __syncthreads();   /* the last block's tiles are read */\n");
  put(o, "        for (int e = (int)threadIdx.x; e < %lld; e += (int)blockDim.x) {\n", SZ);
  put(o, "          const int yy = e / %lld, d = e %% %lld;\n          const long long y = y0 + yy;\n", hd, hd);
  put(o, "          float v;\n");
  mma_elem(o, 5, k, "v", M.b1, "y", "yo + d", "y < hi");
  put(o, "          cc_yb[CC_WR(cc_yb, e, %lld)] = cc_f2%s(v);\n", SZ, ty);
  if (M.b2) {
    mma_elem(o, 5, k, "v", M.b2, "y", "yo + d", "y < hi");
    put(o, "          cc_yb2[CC_WR(cc_yb2, e, %lld)] = cc_f2%s(v);\n", SZ, ty);
  }
  mma_elem(o, 5, k, "v", M.z, "y", "yo + d", "y < hi");
  put(o, "          cc_zt[CC_WR(cc_zt, d * %lld + yy, %lld)] = cc_f2%s(v);\n        }\n", BC, SZ, ty);
  if (!by_query) {
    char lcol[64];
    snprintf(lcol, sizeof lcol, "%lldLL + qh", F);
    put(o, "        for (int e = (int)threadIdx.x; e < %lld; e += (int)blockDim.x) {\n", BC);
    put(o, "          const long long y = y0 + e;\n          float v;\n");
    mma_elem(o, 5, k, "v", &A->out, "y", lcol, "y < hi");
    put(o, "          cc_ys[CC_WR(cc_ys, e, %lld)] = v;\n", 2 * BC);
    if (A->pass == KA_DK) {
      mma_elem(o, 5, k, "v", &A->delta, "y", "qh", "y < hi");
      put(o, "          cc_ys[CC_WR(cc_ys, %lld + e, %lld)] = v;\n", BC, 2 * BC);
    }
    put(o, "        }\n");
  }
  put(o, "        __syncthreads();\n");
  mma_scores(o, k, "s", "fa", "cc_yb", mma);
  if (M.b2) mma_scores(o, k, "dp", "fa2", "cc_yb2", mma);
  /* element c of tile t: row xa + 8 (c >> 1), column y0 + 8 t + 2 t4 + (c & 1); key j
   * and query i are seen when j <= i + shift (causal) and j > i + shift - W (the window) */
  put(o, "CC_UNROLL\n        for (int t = 0; t < %lld; t++)\nCC_UNROLL\n", BC / 8);
  put(o, "          for (int c = 0; c < 4; c++) {\n");
  if (A->causal) put(o, "            const long long x = xa + 8 * (c >> 1);\n");
  put(o, "            const int yy = t * 8 + (int)t4 * 2 + (c & 1);\n");
  put(o, "            const long long y = y0 + yy;\n            const bool in = y < hi");
  const char *i = by_query ? "x" : "y", *j = by_query ? "y" : "x";
  if (A->causal) put(o, " && %s <= %s + %lldLL", j, i, shift);
  if (A->window) put(o, " && %s > %s + %lldLL", j, i, shift - A->window);
  put(o, ";\n");
  put(o, "            const float sc = s[t][c] * ");
  put_float(o, A->scale);
  put(o, ";\n");
  switch (A->pass) {
  case KA_FWD: put(o, "            s[t][c] = in ? sc : -CC_INF;\n"); break;
  case KA_DQ: put(o, "            s[t][c] = in ? expf(sc - lse[c >> 1]) * (dp[t][c] - dl[c >> 1]) : 0.0f;\n"); break;
  case KA_DK:
    put(o,
        "            s[t][c] = in ? expf(sc - cc_ys[CC_RD(cc_ys, yy, %lld)]) * (dp[t][c] - "
        "cc_ys[CC_RD(cc_ys, %lld + yy, %lld)]) : 0.0f;\n",
        2 * BC, BC, 2 * BC);
    break;
  case KA_DV: put(o, "            s[t][c] = in ? expf(sc - cc_ys[CC_RD(cc_ys, yy, %lld)]) : 0.0f;\n", 2 * BC); break;
  }
  put(o, "          }\n");
  if (A->pass == KA_FWD) { /* the online softmax, per row half r; a row's 4 lanes share it */
    put(o, "CC_UNROLL\n        for (int r = 0; r < 2; r++) {\n          float mx = -CC_INF;\n");
    put(o, "CC_UNROLL\n          for (int t = 0; t < %lld; t++) mx = fmaxf(mx, fmaxf(s[t][2 * r], s[t][2 * r + 1]));\n",
        BC / 8);
    put(o, "          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));\n");
    put(o, "          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));\n");
    put(o, "          const float mn = fmaxf(m[r], mx), ms = mn == -CC_INF ? 0.0f : mn, cr = expf(m[r] - ms);\n");
    put(o, "          float sum = 0.0f;\n");
    put(o, "CC_UNROLL\n          for (int t = 0; t < %lld; t++)\nCC_UNROLL\n", BC / 8);
    put(o, "            for (int c = 2 * r; c < 2 * r + 2; c++) s[t][c] = expf(s[t][c] - ms), sum += s[t][c];\n");
    put(o, "          sum += __shfl_xor_sync(0xffffffffu, sum, 1);\n");
    put(o, "          sum += __shfl_xor_sync(0xffffffffu, sum, 2);\n");
    put(o, "          l[r] = l[r] * cr + sum;\n          m[r] = mn;\n");
    put(o, "CC_UNROLL\n          for (int t = 0; t < %lld; t++) acc[t][2 * r] *= cr, acc[t][2 * r + 1] *= cr;\n",
        hd / 8);
    put(o, "        }\n");
  }
  /* acc += C Z: step ks takes score tiles 2 ks and 2 ks + 1 as its A fragment */
  put(o, "CC_UNROLL\n        for (int ks = 0; ks < %lld; ks++) {\n", BC / 16);
  put(o,
      "          const unsigned fp[4] = {cc_pack_%s(s[2 * ks][0], s[2 * ks][1]), cc_pack_%s(s[2 * ks][2], "
      "s[2 * ks][3]),\n",
      ty, ty);
  put(o,
      "                                  cc_pack_%s(s[2 * ks + 1][0], s[2 * ks + 1][1]), cc_pack_%s(s[2 * ks + 1][2], "
      "s[2 * ks + 1][3])};\n",
      ty, ty);
  put(o, "CC_UNROLL\n          for (int t = 0; t < %lld; t++) {\n", hd / 8);
  put(o, "            const int e = (t * 8 + (int)g) * %lld + ks * 16 + (int)t4 * 2;\n", BC);
  put(o, "            const unsigned fb[2] = {CC_SH_PAIR(cc_zt, e, %lld), CC_SH_PAIR(cc_zt, e + 8, %lld)};\n", SZ, SZ);
  put(o, "            %s(acc[t], fp, fb);\n          }\n        }\n      }\n    }\n", mma);
  /* the rows' results: element c of tile t is row xa + 8 (c >> 1), column 8 t + 2 t4 + (c & 1) */
  put(o, "CC_UNROLL\n    for (int r = 0; r < 2; r++) {\n      const long long x = xa + 8 * r;\n");
  put(o, "      if (x >= %lldLL) continue;\n", len);
  attn_row(o, 3, "rrow", &A->res, "x");
  Str v = {0};
  if (A->pass == KA_FWD) put(&v, "acc[t][2 * r + c] / l[r]");
  else {
    put(&v, "acc[t][2 * r + c] * ");
    put_float(&v, A->pass == KA_DV ? 1.0f : A->scale);
  }
  put(o, "CC_UNROLL\n      for (int t = 0; t < %lld; t++)\nCC_UNROLL\n", hd / 8);
  put(o, "        for (int c = 0; c < 2; c++) {\n          const int d = t * 8 + (int)t4 * 2 + c;\n");
  attn_store(o, 5, k, "rrow + ho + d", v.s);
  put(o, "        }\n");
  str_free(&v);
  if (A->pass == KA_FWD) {
    char idx[64];
    snprintf(idx, sizeof idx, "rrow + %lldLL + h", F);
    put(o, "      if (t4 == 0)\n");
    attn_store(o, 4, k, idx, "m[r] + logf(l[r])");
  }
  put(o, "    }\n  }\n");
}

/* ---- kernels and the translation unit --------------------------------------------- */

/* The kernel's text form, as // lines (a backslash could continue a // comment). */
static void emit_comment_kernel(FILE *f, const Kernel *k) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  ir_assert(m);
  kernel_print_code(m, k);
  fclose(m);
  fputs("// ", f);
  for (const char *s = text; s && *s; s++) {
    if (*s == '\n') fputs(s[1] ? "\n// " : "\n", f);
    else fputc(*s == '\\' ? '?' : *s, f);
  }
  free(text);
}

void cuda_emit_kernel(FILE *f, const Kernel *k) {
  Emit E;
  emit_init(&E, k);
  Str body = {0}, head = {0};
  switch (E.map) {
  case CM_FLAT: emit_flat(&E, &body); break;
  case CM_BLOCK_ROW: emit_rows(&E, &body, true); break;
  case CM_LANE_ROW:
    E.lanes = true;
    emit_rows(&E, &body, true);
    break;
  case CM_THREAD_ROW: emit_rows(&E, &body, false); break;
  case CM_COLS:
  case CM_COLS_OWNED: emit_cols(&E, &body); break;
  case CM_WARP_ROW:
  case CM_MMA_TILE:
    if (E.map == CM_MMA_TILE) emit_attn_mma(&body, k);
    else emit_attn(&body, k);
    for (int b = 0; b < k->nbufs; b++) E.use_buf[b] = true;
    break;
  }
  if (E.use_sh) put(&head, "  CC_SHARED(float, cc_sh, %d);\n", E.lanes ? 32 * 32 : 32);
  decl_bases_and_scalars(&E, &head);
  int bs = cuda_kernel_block_size(k);
  fprintf(f, "\n// ---- %s: %s, %d threads per block, n = %s ----\n", k->name, cuda_mapping_name(E.map), bs,
          k->par == KP_COLS ? "columns" : "rows");
  emit_comment_kernel(f, k);
  fprintf(
      f,
      "extern \"C\" __global__ void __launch_bounds__(%d%s) %s(const cc_bufs bufs, long long n, const float *scalars) {\n",
      bs, E.map == CM_MMA_TILE ? ", 2" : "", k->name);
  fprintf(f, "%s%s}\n", head.s ? head.s : "", body.s ? body.s : "");
  str_free(&body);
  str_free(&head);
  emit_free(&E);
}

/* Device helpers shared by every kernel (not static: NVRTC warns about unused static
 * functions). The block reductions need blockDim.x to be a multiple of 32 (at most
 * 1024) and leave the same bits in every thread: each butterfly step adds the same
 * two values in every lane (a + b == b + a). */
_Static_assert(K_MAX_BUFS == 16, "cc_bufs in the prelude holds K_MAX_BUFS pointers");
static const char prelude[] =
    "#ifndef COLOSSALC_CUDA_PRELUDE\n"
    "#define COLOSSALC_CUDA_PRELUDE\n"
    "#define CC_INF __int_as_float(0x7f800000)\n"
    "#define CC_NAN __int_as_float(0x7fffffff)\n"
    "struct cc_bufs { char *p[16]; };   /* the address of each buffer of a kernel (K_MAX_BUFS) */\n"
    "#ifndef CC_SHARED   /* a test harness may define its own */\n"
    "#define CC_SHARED(type, name, n) __shared__ type name[n]\n"
    "#endif\n"
    "#ifdef COLOSSALC_CUDA_BOUNDS\n"
    "__device__ __forceinline__ long long cc_ix(long long a, long long n) {\n"
    "  if (a < 0 || a >= n) __trap();\n"
    "  return a;\n"
    "}\n"
    "#define CC_IX(a, n) cc_ix((a), (n))\n"
    "__device__ __forceinline__ long long cc_ix4(long long a, long long n) {\n"
    "  if (a < 0 || a + 4 > n) __trap();\n"
    "  return a;\n"
    "}\n"
    "#define CC_IX4(a, n) cc_ix4((a), (n))\n"
    "#else\n"
    "#define CC_IX(a, n) (a)\n"
    "#define CC_IX4(a, n) (a)\n"
    "#endif\n"
    "/* four neighbouring elements in one access (CM_FLAT's vector path): 128 bits of f32,\n"
    "   64 of 16-bit values */\n"
    "struct alignas(16) cc_f4 { float v[4]; };\n"
    "struct alignas(8) cc_h4 { unsigned short v[4]; };\n"
    "#ifndef CC_RD   /* the index of a read, a write and a read of a buffer the kernel never writes, */\n"
    "#define CC_RD(b, a, n) CC_IX(a, n)   /* of b: a test harness may watch them */\n"
    "#define CC_WR(b, a, n) CC_IX(a, n)\n"
    "#define CC_RO(b, a, n) CC_IX(a, n)\n"
    "#define CC_RD4(b, a, n) CC_IX4(a, n)   /* elements a to a + 3 */\n"
    "#define CC_RO4(b, a, n) CC_IX4(a, n)\n"
    "#define CC_WR4(b, a, n) CC_IX4(a, n)\n"
    "#endif\n"
    "/* dropout_uniform of ir/rand.h */\n"
    "__device__ __forceinline__ float cc_rand(long long seed, long long step, long long index) {\n"
    "  unsigned long long z = (unsigned long long)index + (unsigned long long)seed * 0x9E3779B97F4A7C15ull +\n"
    "                         (unsigned long long)step * 0xD1B54A32D192ED03ull;\n"
    "  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;\n"
    "  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;\n"
    "  z ^= z >> 31;\n"
    "  return (float)(z >> 40) * 5.9604644775390625e-08f;\n"
    "}\n"
    "/* 16-bit storage (kx_to_f32, kx_from_f32 of codegen/kernel.h): exact widening, rounding to\n"
    "   nearest even, overflow to infinity, f16's subnormals kept */\n"
    "__device__ __forceinline__ float cc_bf2f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }\n"
    "__device__ __forceinline__ unsigned short cc_f2bf(float f) {\n"
    "  const unsigned u = __float_as_uint(f);\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(u >> 16 | 0x40);\n"
    "  return (unsigned short)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);\n"
    "}\n"
    "__device__ __forceinline__ float cc_h2f(unsigned short h) {\n"
    "  const unsigned sign = (unsigned)(h >> 15) << 31, e = h >> 10 & 31u, m = h & 1023u;\n"
    "  if (e == 31u) return __uint_as_float(sign | 0x7f800000u | m << 13);\n"
    "  if (e) return __uint_as_float(sign | (e + 112u) << 23 | m << 13);\n"
    "  return __uint_as_float(__float_as_uint((float)m * 5.9604644775390625e-08f) | sign);\n"
    "}\n"
    "__device__ __forceinline__ unsigned short cc_f2h(float f) {\n"
    "  const unsigned u = __float_as_uint(f), sign = u >> 16 & 0x8000u, a = u & 0x7fffffffu;\n"
    "  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | (a >> 13 & 0x3ffu));\n"
    "  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);\n"
    "  if (a < 0x38800000u) {\n"
    "    const float q = __uint_as_float(a) * 16777216.0f, r = q - (float)(unsigned)q;\n"
    "    const unsigned m = (unsigned)q;\n"
    "    return (unsigned short)(sign | (m + (r > 0.5f || (r == 0.5f && (m & 1u)))));\n"
    "  }\n"
    "  return (unsigned short)(sign | (a + 0x0fffu + (a >> 13 & 1u) - 0x38000000u) >> 13);\n"
    "}\n"
    "/* 8-bit storage (isa_fp8_* of program/isa.h): exact widening; rounding to nearest even,\n"
    "   saturating at the largest finite value, a NaN kept a NaN */\n"
    "__device__ __forceinline__ float cc_e42f(unsigned char c) {\n"
    "  const unsigned sign = (unsigned)(c >> 7) << 31, e = c >> 3 & 15u, m = c & 7u;\n"
    "  if ((c & 0x7fu) == 0x7fu) return __uint_as_float(sign | 0x7fc00000u);\n"
    "  if (e) return __uint_as_float(sign | (e + 120u) << 23 | m << 20);\n"
    "  return __uint_as_float(__float_as_uint((float)m * 0.001953125f) | sign);\n"
    "}\n"
    "__device__ __forceinline__ float cc_e52f(unsigned char c) { return cc_h2f((unsigned short)(c << 8)); }\n"
    "__device__ __forceinline__ unsigned char cc_f2fp8(float f, int mbits, int emin, int bias, float maxv, unsigned nan) {\n"
    "  const unsigned u = __float_as_uint(f), sign = u >> 24 & 0x80u;\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned char)(sign | nan);\n"
    "  float a = __uint_as_float(u & 0x7fffffffu);\n"
    "  if (a > maxv) a = maxv;\n"
    "  int e = (int)(__float_as_uint(a) >> 23) - 127;\n"
    "  const float q = __uint_as_float((unsigned)((e < emin ? emin : e) - mbits + 127) << 23);\n"
    "  const float r = rintf(a / q) * q;\n"
    "  const unsigned rb = __float_as_uint(r);\n"
    "  if (rb < (unsigned)(emin + 1 + 127) << 23)\n"
    "    return (unsigned char)(sign | (unsigned)(r / __uint_as_float((unsigned)(emin - mbits + 127) << 23)));\n"
    "  return (unsigned char)(sign | ((rb >> 23) - 127u + (unsigned)bias) << mbits | (rb >> (23 - mbits) & ((1u << mbits) - 1u)));\n"
    "}\n"
    "__device__ __forceinline__ unsigned char cc_f2e4(float f) { return cc_f2fp8(f, 3, -6, 7, 448.0f, 0x7fu); }\n"
    "__device__ __forceinline__ unsigned char cc_f2e5(float f) { return cc_f2fp8(f, 2, -14, 15, 57344.0f, 0x7eu); }\n"
    "/* tensor cores (CM_MMA_TILE): two values rounded into the halves of an mma register (the\n"
    "   first in the low half), a pair of neighbours of a 16-bit shared array as one, and\n"
    "   mma.sync.aligned.m16n8k16 with f32 accumulators, d += a b (a test harness may define\n"
    "   its own, CC_MMA) */\n"
    "__device__ __forceinline__ unsigned cc_pack_bf(float lo, float hi) {\n"
    "  return (unsigned)cc_f2bf(lo) | (unsigned)cc_f2bf(hi) << 16;\n"
    "}\n"
    "__device__ __forceinline__ unsigned cc_pack_h(float lo, float hi) {\n"
    "  return (unsigned)cc_f2h(lo) | (unsigned)cc_f2h(hi) << 16;\n"
    "}\n"
    "#ifdef __CUDACC__   /* NVRTC; not where a harness compiles the source for the host */\n"
    "#define CC_UNROLL _Pragma(\"unroll\")\n"
    "#else\n"
    "#define CC_UNROLL\n"
    "#endif\n"
    "#define CC_SH_PAIR(sh, e, n) ((unsigned)sh[CC_RD(sh, e, n)] | (unsigned)sh[CC_RD(sh, (e) + 1, n)] << 16)\n"
    "#ifndef CC_MMA\n"
    "#define CC_MMA(name, ty)                                                                       \\\n"
    "  __device__ __forceinline__ void name(float *d, const unsigned *a, const unsigned *b) {          \\\n"
    "    asm(\"mma.sync.aligned.m16n8k16.row.col.f32.\" ty \".\" ty \".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, \" \\\n"
    "        \"{%8, %9}, {%0, %1, %2, %3};\"                                                        \\\n"
    "        : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])                                 \\\n"
    "        : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));               \\\n"
    "  }\n"
    "#endif\n"
    "CC_MMA(cc_mma_bf16, \"bf16\")\n"
    "CC_MMA(cc_mma_f16, \"f16\")\n"
    "__device__ __forceinline__ float cc_max(float x, float y) { return x > y ? x : y; }\n"
    "__device__ __forceinline__ float cc_min(float x, float y) { return x < y ? x : y; }\n"
    "__device__ __forceinline__ float cc_warp_sum(float v) {\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  return v;\n"
    "}\n"
    "__device__ __forceinline__ float cc_warp_max(float v) {\n"
    "  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
    "  return v;\n"
    "}\n"
    "/* Over the block, the result in every thread; sh: 32 floats of shared memory. */\n"
    "__device__ __forceinline__ float cc_block_sum(float v, float *sh) {\n"
    "  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;\n"
    "  v = cc_warp_sum(v);\n"
    "  __syncthreads();   /* the previous reduction is done reading sh */\n"
    "  if (lane == 0) sh[CC_WR(sh, warp, 32)] = v;\n"
    "  __syncthreads();\n"
    "  return cc_warp_sum(lane < nw ? sh[CC_RD(sh, lane, 32)] : 0.0f);\n"
    "}\n"
    "/* Over the block's warps, lane by lane (CM_LANE_ROW: a row per lane), the warps in order,\n"
    "   the result in every warp; sh: 32 x 32 floats of shared memory. */\n"
    "__device__ __forceinline__ float cc_lanes_sum(float v, float *sh) {\n"
    "  const unsigned lane = threadIdx.x & 31u, nw = blockDim.x >> 5;\n"
    "  __syncthreads();\n"
    "  sh[CC_WR(sh, threadIdx.x, 1024)] = v;\n"
    "  __syncthreads();\n"
    "  float s = 0.0f;\n"
    "  for (unsigned w = 0; w < nw; w++) s += sh[CC_RD(sh, w * 32 + lane, 1024)];\n"
    "  return s;\n"
    "}\n"
    "__device__ __forceinline__ float cc_lanes_max(float v, float *sh) {\n"
    "  const unsigned lane = threadIdx.x & 31u, nw = blockDim.x >> 5;\n"
    "  __syncthreads();\n"
    "  sh[CC_WR(sh, threadIdx.x, 1024)] = v;\n"
    "  __syncthreads();\n"
    "  float m = -CC_INF;\n"
    "  for (unsigned w = 0; w < nw; w++) m = fmaxf(m, sh[CC_RD(sh, w * 32 + lane, 1024)]);\n"
    "  return m;\n"
    "}\n"
    "__device__ __forceinline__ float cc_block_max(float v, float *sh) {\n"
    "  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;\n"
    "  v = cc_warp_max(v);\n"
    "  __syncthreads();\n"
    "  if (lane == 0) sh[CC_WR(sh, warp, 32)] = v;\n"
    "  __syncthreads();\n"
    "  return cc_warp_max(lane < nw ? sh[CC_RD(sh, lane, 32)] : -CC_INF);\n"
    "}\n"
    "#endif\n";

void cuda_emit_prelude(FILE *f, int nkernels) {
  fprintf(f,
          "/* colossalc %s: %d CUDA kernel%s, generated for NVRTC (-std=c++17); do not edit.\n"
          " * Each: extern \"C\" __global__ void NAME(const cc_bufs bufs, long long n, const float *scalars),\n"
          " * covering [0, n) of its parallel range; -DCOLOSSALC_CUDA_BOUNDS checks every address. */\n",
          COLOSSALC_VERSION, nkernels, nkernels == 1 ? "" : "s");
  fputs(prelude, f);
}

/* The prelude and every kernel, each kernel after `sep` (nothing, or a form feed). */
static char *emit_all(const Kernel *const *kernels, int n, const char *sep) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ir_assert(f);
  cuda_emit_prelude(f, n);
  for (int i = 0; i < n; i++) {
    fputs(sep, f);
    cuda_emit_kernel(f, kernels[i]);
  }
  fclose(f);
  return text;
}

char *cuda_emit_source(const Kernel *const *kernels, int n) { return emit_all(kernels, n, ""); }
char *cuda_emit_units(const Kernel *const *kernels, int n) { return emit_all(kernels, n, "\f"); }

void cuda_source_print_numbered(FILE *f, const char *src) {
  int line = 1;
  for (const char *s = src; s && *s; line++) {
    const char *nl = strchr(s, '\n');
    int len = nl ? (int)(nl - s) : (int)strlen(s);
    fprintf(f, "%5d | %.*s\n", line, len, s);
    s += len + (nl != NULL);
  }
}
