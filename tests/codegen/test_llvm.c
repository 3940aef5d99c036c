/* The LLVM CPU emitter against the reference evaluator (STYLE.md habit 7): a set of
 * kernels built with the kernel-form builders (elementwise with broadcasts, layernorm,
 * causal softmax, cross-entropy with a gathered target and ignored rows, embedding,
 * KP_COLS scatter-add and bias gradient, AdamW with runtime scalars, every unary and
 * binary op, transposed/strided/reversed views, i32 loads, guarded gathers) and the
 * fused attention kernel's passes (grouped-query, windowed, T != S) is emitted into one
 * module with llvm_emit_program, optimised at O3 for this CPU, written as an object,
 * linked into a shared library with `cc -shared` ($CC if set) and dlopen'ed.
 *
 *   test_llvm numerics   every kernel on random inputs: called over its whole parallel
 *                        range, then over several [lo, hi) chunks (as threads would),
 *                        and over an empty range; each result against kernel_eval on
 *                        the same inputs: max |got - want| / max(|want|, floor) <= 1e-5,
 *                        where floor is 0 for elementwise kernels (a relative error)
 *                        and the scale of the terms for kernels whose outputs come
 *                        from sums (LLVM reassociates them) or may cancel. Also
 *                        colossalc_nkernels, colossalc_cpu_builds[] and the program JSON.
 *   test_llvm ir         the optimised IR (--emit-llvm) defines every kernel, and the
 *                        elementwise kernel is vectorized (<4|8|16 x float>); with
 *                        libmvec, exp and log loops call its vector versions.
 *   test_llvm lowered MODEL [NAME=VALUE ...]
 *                        every kernel a real model lowers to (codegen/lower.c): the
 *                        program's forward, step, gradnorm and update sequences run
 *                        with kernel_eval and a plain GEMM; before each kernel the
 *                        state is copied and the compiled kernel (in three chunks)
 *                        runs on the copy: the code it shares (codegen/share.c) with
 *                        its own buffers; max |got - want| / max |want| over what the
 *                        kernel wrote <= 1e-5.
 * Prints the max difference per kernel.
 */
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "codegen/kernel.h"
#include "codegen/compose.h"
#include "codegen/llvm.h"
#include "codegen/lower.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "program/program.h"
#include "tests/common/lowered.h"

enum { MAX_CASES = 64, TIER_BYTES = 1 << 20 };
static const double TOL = 1e-5;

/* F_TARGETS: F_INDEX, every fifth -100; F_BITS16, F_BITS32: every bit pattern of a 16-bit
 * (bf16, f16) or 32-bit (f32) element, zeros, infinities, NaNs, ties and subnormals too */
typedef enum { F_UNIFORM, F_INTS, F_INDEX, F_TARGETS, F_BITS16, F_BITS32 } FillKind;
typedef struct Fill {
  int tier;
  int64_t offset, n;
  FillKind kind;
  double lo, hi;
} Fill;

typedef struct Case {
  Kernel *k;
  double err_floor; /* error denominator: max(|want|, err_floor); < 0: the same bytes */
  Fill fills[K_MAX_BUFS];
  int nfills;
  int64_t used[TIERS]; /* bytes of each tier the case uses */
} Case;

static Case cases[MAX_CASES];
static int ncases, failures;

/* ---- building the cases ------------------------------------------------------------ */

typedef struct T {
  Arena *a;
  Kernel *k;
  Case *c;
} T;

#define C(v) kx_const(t->a, t->k, (float)(v))
#define U(op, x) kx_unary(t->a, t->k, KU_##op, x)
#define B(op, x, y) kx_binary(t->a, t->k, KB_##op, x, y)
#define SEL(c, x, y) kx_select(t->a, t->k, c, x, y)
#define LOAD(b, v) kx_load(t->a, t->k, b, v)
#define COORD(d) kx_coord(t->a, t->k, d)
#define SCALAR(i) kx_scalar(t->a, t->k, i)
#define ACC(i) kx_acc(t->a, t->k, i)
/* V(offset, stride per iteration axis...) */
#define V(off, ...) \
  view_of(off, (const int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

static KView view_of(int64_t off, const int64_t *s, int n) {
  KView v = {.offset = off};
  for (int d = 0; d < n; d++) v.strides[d] = s[d];
  return v;
}
static KView gathered(KView v, KExpr *g, int64_t stride) {
  v.gather = g;
  v.gather_stride = stride;
  return v;
}

static T begin(Arena *a, const char *name, KPar par, const int64_t *dims, int ndims, int row_dims, double err_floor) {
  if (ncases == MAX_CASES) {
    fprintf(stderr, "too many cases\n");
    exit(2);
  }
  Case *c = &cases[ncases++];
  c->k = kernel_new(a, name, par, dims, ndims, row_dims);
  c->err_floor = err_floor;
  return (T){a, c->k, c};
}
#define BEGIN(name, par, row_dims, err_floor, ...)                                                                  \
  T tt = begin(a, name, par, (const int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), row_dims, \
               err_floor);                                                                                          \
  T *t = &tt

/* A buffer of n elements placed after the case's others in `tier`, filled with values
 * in [lo, hi] (F_UNIFORM), integers in [lo, hi] stored as f32 (F_INTS) or i32 (F_INDEX,
 * F_TARGETS). */
static int buf(T *t, const char *name, int tier, int64_t n, FillKind kind, double lo, double hi) {
  int64_t off = t->c->used[tier] + 64;
  t->c->used[tier] = off + n * 4;
  if (t->c->used[tier] > TIER_BYTES) {
    fprintf(stderr, "%s: tier %d too small\n", t->k->name, tier);
    exit(2);
  }
  t->c->fills[t->c->nfills++] = (Fill){tier, off, n, kind, lo, hi};
  return kernel_buf(t->k, name, tier, off, n, kind == F_INDEX || kind == F_TARGETS ? DT_I32 : DT_F32);
}

/* A 16-bit buffer (bf16, f16) of n elements, filled with every bit pattern. */
static int buf16(T *t, const char *name, int tier, int64_t n, DType dt) {
  int64_t off = t->c->used[tier] + 64;
  t->c->used[tier] = off + (n * 2 + 3) / 4 * 4;
  t->c->fills[t->c->nfills++] = (Fill){tier, off, n, F_BITS16, 0, 0};
  return kernel_buf(t->k, name, tier, off, n, dt);
}
#define OUT(name, tier, n) buf(t, name, tier, n, F_UNIFORM, -1, 1) /* outputs start random too */

/* out = x * w[j] + b[r]: the kernel the IR test checks for vector instructions */
static void case_ew_simple(Arena *a) {
  BEGIN("ew_simple", KP_ROWS, 1, 0, 29, 1000);
  int x = buf(t, "x", TIER_WORK, 29 * 1000, F_UNIFORM, -1, 1), w = buf(t, "w", TIER_PARAMS, 1000, F_UNIFORM, -1, 1);
  int b = buf(t, "b", TIER_PARAMS, 29, F_UNIFORM, -1, 1), out = OUT("out", TIER_WORK, 29 * 1000);
  kernel_map(t->k, out, V(0, 1000, 1), KS_SET,
             B(ADD, B(MUL, LOAD(x, V(0, 1000, 1)), LOAD(w, V(0, 0, 1))), LOAD(b, V(0, 1, 0))));
}

/* broadcasts along every axis; a column view that is not affine in j (w[d] under [a, d]).
 * The result can cancel (terms up to e^2), so errors are relative to max(|want|, 1). */
static void case_ew_bcast(Arena *a) {
  BEGIN("ew_bcast", KP_ROWS, 1, 1.0, 7, 3, 53);
  int x = buf(t, "x", TIER_WORK, 7 * 159, F_UNIFORM, -2, 2), w = buf(t, "w", TIER_PARAMS, 53, F_UNIFORM, -1, 1);
  int bb = buf(t, "bb", TIER_PARAMS, 159, F_UNIFORM, -1, 1), s = buf(t, "s", TIER_OPT, 7, F_UNIFORM, -1, 1);
  int out = OUT("out", TIER_WORK, 7 * 159), out2 = OUT("out2", TIER_GRADS, 7 * 159);
  KExpr *xv = LOAD(x, V(0, 159, 53, 1));
  KExpr *e = B(SUB, B(ADD, B(MUL, xv, LOAD(w, V(0, 0, 0, 1))), LOAD(bb, V(0, 0, 53, 1))),
               B(MUL, LOAD(s, V(0, 1, 0, 0)), U(EXP, xv)));
  kernel_map(t->k, out, V(0, 159, 53, 1), KS_SET, e);
  kernel_map(t->k, out2, V(0, 159, 53, 1), KS_SET, B(MAX, xv, C(0)));
}

/* layernorm forward: mean and variance reductions, the normalised row, the row stats */
static void case_layernorm(Arena *a) {
  enum { R = 19, N = 77 };
  BEGIN("layernorm", KP_ROWS, 1, 1.0, R, N);
  int x = buf(t, "x", TIER_WORK, R * N, F_UNIFORM, -1, 1), g = buf(t, "g", TIER_PARAMS, N, F_UNIFORM, 0.5, 1.5);
  int bt = buf(t, "beta", TIER_PARAMS, N, F_UNIFORM, -1, 1), out = OUT("out", TIER_WORK, R * N);
  int mean = OUT("mean", TIER_WORK, R), rstd = OUT("rstd", TIER_WORK, R);
  KExpr *xv = LOAD(x, V(0, N, 1));
  KExpr *mu = B(MUL, ACC(kernel_reduce(t->k, KR_SUM, xv)), C(1.0 / N)), *d = B(SUB, xv, mu);
  KExpr *rs = U(RSQRT, B(ADD, B(DIV, ACC(kernel_reduce(t->k, KR_SUM, B(MUL, d, d))), C(N)), C(1e-5)));
  kernel_map(t->k, out, V(0, N, 1), KS_SET, B(ADD, B(MUL, B(MUL, d, rs), LOAD(g, V(0, 0, 1))), LOAD(bt, V(0, 0, 1))));
  kernel_row(t->k, mean, V(0, 1, 0), KS_SET, mu);
  kernel_row(t->k, rstd, V(0, 1, 0), KS_SET, rs);
}

/* causal softmax over [batch, heads, query | key]: the mask from coordinates */
static void case_softmax(Arena *a) {
  enum { NB = 2, NH = 3, NT = 21, ALL = NB * NH * NT * NT };
  BEGIN("softmax_causal", KP_ROWS, 3, 0, NB, NH, NT, NT);
  int x = buf(t, "x", TIER_WORK, ALL, F_UNIFORM, -4, 4), out = OUT("p", TIER_WORK, ALL);
  KView cv = V(0, NH * NT * NT, NT * NT, NT, 1);
  KExpr *s = SEL(B(LE, COORD(3), COORD(2)), B(MUL, LOAD(x, cv), C(0.37)), C(-INFINITY));
  KExpr *mx = ACC(kernel_reduce(t->k, KR_MAX, s)), *ex = U(EXP, B(SUB, s, mx));
  KExpr *sum = ACC(kernel_reduce(t->k, KR_SUM, ex));
  kernel_map(t->k, out, cv, KS_SET, B(DIV, ex, sum));
}

/* cross-entropy: per-row loss with the target's logit gathered (ignored rows, target
 * -100, must not load it), and the logits' gradient */
static void case_xent(Arena *a) {
  enum { N = 13, NV = 301 };
  BEGIN("xent", KP_ROWS, 1, 1.0, N, NV);
  int x = buf(t, "logits", TIER_WORK, N * NV, F_UNIFORM, -3, 3),
      tg = buf(t, "targets", TIER_WORK, N, F_TARGETS, 0, NV - 1);
  int loss = OUT("loss", TIER_WORK, N), dx = OUT("dlogits", TIER_GRADS, N * NV);
  KExpr *xv = LOAD(x, V(0, NV, 1)), *tv = LOAD(tg, V(0, 1, 0));
  KExpr *valid = B(SUB, C(1), B(EQ, tv, C(-100)));
  KExpr *mx = ACC(kernel_reduce(t->k, KR_MAX, xv)), *ex = U(EXP, B(SUB, xv, mx));
  KExpr *sum = ACC(kernel_reduce(t->k, KR_SUM, ex));
  KExpr *xt = SEL(valid, LOAD(x, gathered(V(0, NV, 0), tv, 1)), C(0));
  kernel_row(t->k, loss, V(0, 1, 0), KS_SET, B(MUL, valid, B(SUB, B(ADD, U(LOG, sum), mx), xt)));
  kernel_map(t->k, dx, V(0, NV, 1), KS_SET, B(MUL, B(SUB, B(DIV, ex, sum), B(EQ, COORD(1), tv)), valid));
}

/* a count over one row (ce_count): a REDUCE of i32 loads, stored by a ROW phase */
static void case_count(Arena *a) {
  BEGIN("count", KP_ROWS, 1, 0, 1, 300);
  int tg = buf(t, "targets", TIER_WORK, 300, F_TARGETS, 0, 9), out = OUT("count", TIER_WORK, 1);
  KExpr *valid = B(SUB, C(1), B(EQ, LOAD(tg, V(0, 0, 1)), C(-100)));
  kernel_row(t->k, out, V(0, 0, 0), KS_SET, ACC(kernel_reduce(t->k, KR_SUM, valid)));
}

/* token + position embedding over [batch, seq | d] */
static void case_embedding(Arena *a) {
  enum { NB = 4, NT = 6, D = 40, NV = 11 };
  BEGIN("embedding", KP_ROWS, 2, 0, NB, NT, D);
  int wte = buf(t, "wte", TIER_PARAMS, NV * D, F_UNIFORM, -1, 1),
      wpe = buf(t, "wpe", TIER_PARAMS, NT * D, F_UNIFORM, -1, 1);
  int idx = buf(t, "tokens", TIER_WORK, NB * NT, F_INDEX, 0, NV - 1), out = OUT("x", TIER_WORK, NB * NT * D);
  KExpr *tok = LOAD(idx, V(0, NT, 1, 0));
  kernel_map(t->k, out, V(0, NT * D, D, 1), KS_SET,
             B(ADD, LOAD(wte, gathered(V(0, 0, 0, 1), tok, D)), LOAD(wpe, V(0, 0, D, 1))));
}

/* embedding gradient: out[idx[r]*D + j] += g[r*D + j], columns in parallel, rows in order */
static void case_scatter_add(Arena *a) {
  enum { N = 30, D = 24, NV = 7 };
  BEGIN("scatter_add", KP_COLS, 1, 0, N, D);
  int g = buf(t, "g", TIER_WORK, N * D, F_UNIFORM, -1, 1), idx = buf(t, "idx", TIER_WORK, N, F_INDEX, 0, NV - 1);
  int out = OUT("dwte", TIER_GRADS, NV * D);
  kernel_map(t->k, out, gathered(V(0, 0, 1), LOAD(idx, V(0, 1, 0)), D), KS_ADD, LOAD(g, V(0, D, 1)));
}

/* bias gradient: db[j] += dy[r, j] */
static void case_bias_grad(Arena *a) {
  enum { N = 50, D = 37 };
  BEGIN("bias_grad", KP_COLS, 1, 0, N, D);
  int dy = buf(t, "dy", TIER_WORK, N * D, F_UNIFORM, -1, 1), db = OUT("db", TIER_GRADS, D);
  kernel_map(t->k, db, V(0, 0, 1), KS_ADD, LOAD(dy, V(0, D, 1)));
}

/* AdamW with the runtime scalars; p first (it reads the old m and v) */
static void case_adamw(Arena *a) {
  enum { R = 10, N = 100 };
  BEGIN("adamw", KP_ROWS, 1, 0, R, N);
  int p = buf(t, "p", TIER_PARAMS, R * N, F_UNIFORM, -1, 1), g = buf(t, "g", TIER_GRADS, R * N, F_UNIFORM, -1, 1);
  int m = buf(t, "m", TIER_OPT, R * N, F_UNIFORM, -0.1, 0.1), v = buf(t, "v", TIER_OPT, R * N, F_UNIFORM, 0, 0.1);
  KView cv = V(0, N, 1);
  KExpr *gs = B(MUL, LOAD(g, cv), SCALAR(SC_GSCALE)), *pv = LOAD(p, cv);
  KExpr *m1 = B(ADD, B(MUL, C(0.9), LOAD(m, cv)), B(MUL, C(0.1), gs));
  KExpr *v1 = B(ADD, B(MUL, C(0.95), LOAD(v, cv)), B(MUL, C(0.05), B(MUL, gs, gs)));
  KExpr *step = B(DIV, B(MUL, m1, SCALAR(SC_BC1)), B(ADD, U(SQRT, B(MUL, v1, SCALAR(SC_BC2))), C(1e-8)));
  kernel_map(t->k, p, cv, KS_SET, B(SUB, pv, B(MUL, SCALAR(SC_LR), B(ADD, step, B(MUL, C(0.1), pv)))));
  kernel_map(t->k, m, cv, KS_SET, m1);
  kernel_map(t->k, v, cv, KS_SET, v1);
}

/* AdamW as the lowering writes it: m and v first, then p reading them back; short
 * rows, so LLVM unrolls the j loops and vectorizes across rows */
static void case_adamw_short(Arena *a) {
  enum { R = 768, N = 8 };
  BEGIN("adamw_short_rows", KP_ROWS, 1, 0, R, N);
  int p = buf(t, "p", TIER_PARAMS, R * N, F_UNIFORM, -1, 1), g = buf(t, "g", TIER_GRADS, R * N, F_UNIFORM, -1, 1);
  int m = buf(t, "m", TIER_OPT, R * N, F_UNIFORM, 0, 0), v = buf(t, "v", TIER_OPT, R * N, F_UNIFORM, 0, 0);
  KView cv = V(0, N, 1);
  KExpr *gs = B(MUL, LOAD(g, cv), SCALAR(SC_GSCALE));
  kernel_map(t->k, m, cv, KS_SET, B(ADD, B(MUL, C(0.9), LOAD(m, cv)), B(MUL, C(0.1), gs)));
  kernel_map(t->k, v, cv, KS_SET, B(ADD, B(MUL, C(0.999), LOAD(v, cv)), B(MUL, C(0.001), B(MUL, gs, gs))));
  KExpr *step = B(DIV, B(MUL, B(MUL, SCALAR(SC_LR), SCALAR(SC_BC1)), LOAD(m, cv)),
                  B(ADD, U(SQRT, B(MUL, LOAD(v, cv), SCALAR(SC_BC2))), C(1e-8)));
  kernel_map(t->k, p, cv, KS_SET, B(SUB, B(MUL, LOAD(p, cv), B(SUB, C(1), B(MUL, SCALAR(SC_LR), C(0.3)))), step));
}

/* every unary op, on a strided view (every other element) */
static void case_unary(Arena *a, KUnary op, const char *name) {
  enum { R = 6, N = 203 };
  char kname[64];
  snprintf(kname, sizeof kname, "unary_%s", name);
  BEGIN(kname, KP_ROWS, 1, 0, R, N);
  bool pos = op == KU_LOG || op == KU_SQRT || op == KU_RSQRT || op == KU_RECIP;
  int x = buf(t, "x", TIER_WORK, R * N * 2, F_UNIFORM, pos ? 0.05 : -8, pos ? 4 : 8), out = OUT("y", TIER_WORK, R * N);
  kernel_map(t->k, out, V(0, N, 1), KS_SET, kx_unary(a, t->k, op, LOAD(x, V(0, 2 * N, 2))));
}

/* exp where its result underflows (the emitter shifts such arguments for libmvec):
 * denormal results are compared against FLT_MIN, not relatively */
static void case_exp_range(Arena *a) {
  BEGIN("exp_range", KP_ROWS, 1, FLT_MIN, 4, 250);
  int x = buf(t, "x", TIER_WORK, 1000, F_UNIFORM, -120, 5), out = OUT("y", TIER_WORK, 1000);
  kernel_map(t->k, out, V(0, 250, 1), KS_SET, U(EXP, LOAD(x, V(0, 250, 1))));
}

/* every binary op, the second operand through a transposed view */
static void case_binary(Arena *a, KBinary op, const char *name) {
  enum { R = 5, NA = 7, ND = 9 };
  char kname[64];
  snprintf(kname, sizeof kname, "binary_%s", name);
  BEGIN(kname, KP_ROWS, 1, 0, R, NA, ND);
  bool cmp = op == KB_LT || op == KB_LE || op == KB_EQ || op == KB_MAX || op == KB_MIN;
  FillKind fk = cmp ? F_INTS : F_UNIFORM;
  double lo = op == KB_POW ? 0.1 : -2, hi = op == KB_POW ? 3 : 2;
  int x = buf(t, "x", TIER_WORK, R * NA * ND, fk, lo, hi), y = buf(t, "y", TIER_OPT, R * NA * ND, fk, -2, 2);
  int out = OUT("z", TIER_WORK, R * NA * ND);
  KExpr *e = kx_binary(a, t->k, op, LOAD(x, V(0, NA * ND, ND, 1)), LOAD(y, V(0, 1, R, R * NA)));
  kernel_map(t->k, out, V(0, NA * ND, ND, 1), KS_SET, e);
}

/* a transposed store, a fully reversed load (affine, c = -1) and a mixed one */
static void case_transposed(Arena *a) {
  enum { NA = 9, NB = 7, NC = 11, ND = 5, ALL = NA * NB * NC * ND };
  BEGIN("transposed", KP_ROWS, 2, 0, NA, NB, NC, ND);
  int x = buf(t, "x", TIER_WORK, ALL, F_UNIFORM, -1, 1), y = buf(t, "y", TIER_WORK, ALL, F_UNIFORM, -1, 1);
  int out = OUT("out", TIER_GRADS, ALL);
  KExpr *xr = LOAD(x, V(ALL - 1, -NB * NC * ND, -NC * ND, -ND, -1));
  KExpr *ym = LOAD(y, V(ND - 1, NB * NC * ND, NC * ND, ND, -1));
  kernel_map(t->k, out, V(0, 1, NA, NA * NB, NA * NB * NC), KS_SET, B(SUB, B(MUL, xr, C(3)), ym));
}

/* i32 loads and coordinates on row and column axes */
static void case_i32_coords(Arena *a) {
  BEGIN("i32_coords", KP_ROWS, 2, 0, 3, 4, 17);
  int ids = buf(t, "ids", TIER_WORK, 3 * 4 * 17, F_INDEX, 0, 999), out = OUT("out", TIER_WORK, 3 * 4 * 17);
  KExpr *e = B(SUB, B(ADD, B(MUL, LOAD(ids, V(0, 68, 17, 1)), C(0.5)), B(MUL, COORD(0), COORD(1))), COORD(2));
  kernel_map(t->k, out, V(0, 68, 17, 1), KS_SET, e);
}

/* pad: a j-dependent gather clamped into range, under a select (a branching select
 * inside a MAP loop) */
static void case_pad(Arena *a) {
  enum { R = 8, N = 40, BEFORE = 5, W = N + 10 };
  BEGIN("pad", KP_ROWS, 1, 0, R, W);
  int x = buf(t, "x", TIER_WORK, R * N, F_UNIFORM, -1, 1), out = OUT("out", TIER_WORK, R * W);
  KExpr *c = COORD(1), *inside = B(MUL, B(LE, C(BEFORE), c), B(LT, c, C(BEFORE + N)));
  KExpr *xv = LOAD(x, gathered(V(0, N, 0), B(MUL, inside, B(SUB, c, C(BEFORE))), 1));
  kernel_map(t->k, out, V(0, W, 1), KS_SET, SEL(inside, xv, C(0)));
}

/* one column: reductions of one element, a coordinate, KS_ADD rows */
static void case_tiny(Arena *a) {
  BEGIN("tiny", KP_ROWS, 1, 1.0, 5, 1);
  int x = buf(t, "x", TIER_WORK, 5, F_UNIFORM, -1, 1), out = OUT("out", TIER_WORK, 5), s = OUT("s", TIER_WORK, 5);
  KExpr *xv = LOAD(x, V(0, 1, 1));
  KExpr *mx = ACC(kernel_reduce(t->k, KR_MAX, xv)), *sum = ACC(kernel_reduce(t->k, KR_SUM, xv));
  kernel_map(t->k, out, V(0, 1, 1), KS_ADD, B(ADD, B(ADD, xv, COORD(0)), mx));
  kernel_row(t->k, s, V(0, 1, 0), KS_SET, sum);
}

/* 16-bit storage: f32 of every bit pattern rounded into h (and, as f32, into r), h
 * widened into w, an add in f32 rounded back into acc; the same bits as kernel_eval. */
static void case_half(Arena *a, DType dt) {
  BEGIN(dt == DT_BF16 ? "half_bf16" : "half_f16", KP_ROWS, 1, -1, 64, 256);
  int x = buf(t, "x", TIER_WORK, 64 * 256, F_BITS32, 0, 0), h = buf16(t, "h", TIER_WORK, 64 * 256, dt);
  int in = buf16(t, "in", TIER_PARAMS, 64 * 256, dt), w = OUT("w", TIER_GRADS, 64 * 256);
  int acc = buf16(t, "acc", TIER_OPT, 64 * 256, dt), r = OUT("r", TIER_WORK, 64 * 256);
  kernel_map(t->k, h, V(0, 256, 1), KS_SET, LOAD(x, V(0, 256, 1)));
  kernel_map(t->k, r, V(0, 256, 1), KS_SET,
             kx_unary(t->a, t->k, dt == DT_BF16 ? KU_RBF16 : KU_RF16, LOAD(x, V(0, 256, 1))));
  kernel_map(t->k, w, V(0, 256, 1), KS_SET, LOAD(in, V(0, 256, 1)));
  kernel_map(t->k, acc, V(0, 256, 1), KS_ADD, B(MUL, LOAD(in, V(0, 256, 1)), C(0.5)));
}

/* An attention operand [B=2, seq, n] in its own buffer of values in [lo, hi], from
 * element 7, rows of n + 5 and batches 3 elements apart. */
static KOperand attn_in(T *t, const char *name, int64_t seq, int64_t n, double lo, double hi) {
  int64_t ss = n + 5, sb = seq * ss + 3;
  return (KOperand){buf(t, name, TIER_WORK, 7 + 2 * sb, F_UNIFORM, lo, hi), 7, sb, ss};
}

/* a fused attention pass (kernel.h, KAttn) over H query heads sharing G key/value heads,
 * S queries and T keys, a window W (causal) or none: sums, so errors are relative to
 * max(|want|, 1) */
static void case_attention(Arena *a, KAttnPass pass, int64_t H, int64_t G, int64_t S, int64_t T_, int64_t W,
                           bool causal) {
  static const char *const names[] = {"fwd", "dq", "dk", "dv"};
  char kname[64];
  snprintf(kname, sizeof kname, "attn_%s_h%lld_g%lld_w%lld", names[pass], (long long)H, (long long)G, (long long)W);
  KAttn *A = arena_alloc(a, sizeof *A);
  *A = (KAttn){.pass = pass,
               .batch = 2,
               .heads = H,
               .sq = S,
               .sk = T_,
               .hd = 12,
               .kv_heads = G,
               .window = W,
               .causal = causal,
               .scale = 0.29f,
               .store = KS_SET};
  BEGIN(kname, KP_ROWS, 1, 1.0, kattn_rows(A), 1);
  int64_t F = H * A->hd, KF = G * A->hd;
  KOperand none = {-1, 0, 0, 0};
  A->q = attn_in(t, "q", S, F, -1, 1), A->k = attn_in(t, "k", T_, KF, -1, 1);
  A->v = pass == KA_DV ? none : attn_in(t, "v", T_, KF, -1, 1);
  /* log-sum-exps above the scores, as the forward pass's are: p < 1 */
  A->out = pass == KA_FWD ? none : attn_in(t, "out", S, F + H, 1, 2);
  A->g = pass == KA_FWD ? none : attn_in(t, "g", S, F + H, -1, 1);
  A->delta = pass == KA_FWD || pass == KA_DV ? none : attn_in(t, "delta", S, H, -1, 1);
  int64_t rs = pass == KA_FWD || pass == KA_DQ ? S : T_, rn = pass == KA_FWD ? F + H : pass == KA_DQ ? F : KF;
  A->res = attn_in(t, "res", rs, rn, -1, 1); /* outputs start random too */
  t->k->attn = A;
}

static void build_cases(Arena *a) {
  case_half(a, DT_BF16);
  case_half(a, DT_F16);
  case_ew_simple(a);
  case_ew_bcast(a);
  case_layernorm(a);
  case_softmax(a);
  case_xent(a);
  case_count(a);
  case_embedding(a);
  case_scatter_add(a);
  case_bias_grad(a);
  case_adamw(a);
  case_adamw_short(a);
#define X(n) case_unary(a, KU_##n, #n);
  KX_UNARY_OPS(X)
#undef X
  case_exp_range(a);
#define X(n) case_binary(a, KB_##n, #n);
  KX_BINARY_OPS(X)
#undef X
  case_transposed(a);
  case_i32_coords(a);
  case_pad(a);
  case_tiny(a);
  for (int p = KA_FWD; p <= KA_DV; p++) {
    case_attention(a, (KAttnPass)p, 6, 2, 61, 75, 37, true); /* windows across blocks, T > S */
    case_attention(a, (KAttnPass)p, 4, 4, 40, 40, 3, true);  /* a window narrower than the lanes */
    case_attention(a, (KAttnPass)p, 3, 1, 29, 19, 0, false); /* T < S, every key */
  }
}

/* ---- running them -------------------------------------------------------------------- */

static uint64_t rng_state;
static double urand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) * 0x1.0p-53;
}

static void fill_tiers(const Case *c, int seed, char **tiers) {
  rng_state = 88172645463325252ull + (uint64_t)seed * 7919;
  for (int i = 0; i < TIERS; i++) memset(tiers[i], 0, TIER_BYTES);
  for (int i = 0; i < c->nfills; i++) {
    const Fill *f = &c->fills[i];
    for (int64_t e = 0; e < f->n; e++) {
      double u = urand(), v = f->lo + u * (f->hi - f->lo);
      void *p = tiers[f->tier] + f->offset;
      if (f->kind == F_BITS16) ((uint16_t *)p)[e] = (uint16_t)(rng_state >> 20);
      else if (f->kind == F_BITS32)
        ((uint32_t *)p)[e] = e < LOWERED_HALF_SPECIALS ? lowered_half_specials[e] : (uint32_t)(rng_state >> 16);
      else if (f->kind == F_TARGETS && e % 5 == 3) ((int32_t *)p)[e] = -100;
      else if (f->kind >= F_INDEX) ((int32_t *)p)[e] = (int32_t)floor(f->lo + u * (f->hi - f->lo + 1));
      else if (f->kind == F_INTS) ((float *)p)[e] = (float)floor(f->lo + u * (f->hi - f->lo + 1));
      else ((float *)p)[e] = (float)v;
    }
  }
}

/* max error of got against want over the bytes the case uses */
static double max_error(const Case *c, char **want, char **got) {
  double worst = 0;
  if (c->err_floor < 0) { /* the same bits, element by element (a NaN for a NaN: x86 keeps either payload) */
    for (int b = 0; b < c->k->nbufs; b++) {
      const KBuf *kb = &c->k->bufs[b];
      for (int64_t i = 0; i < kb->numel; i++) {
        float w, g;
        if (kbuf_elem_bytes(kb) == 2) {
          uint16_t wh = ((uint16_t *)(want[kb->tier] + kb->offset))[i],
                   gh = ((uint16_t *)(got[kb->tier] + kb->offset))[i];
          if (wh == gh) continue;
          w = kx_to_f32(kb->dtype, wh), g = kx_to_f32(kb->dtype, gh);
        } else {
          memcpy(&w, want[kb->tier] + kb->offset + 4 * i, 4), memcpy(&g, got[kb->tier] + kb->offset + 4 * i, 4);
          if (!memcmp(&w, &g, 4)) continue;
        }
        if (!(isnan(w) && isnan(g))) return 1;
      }
    }
    return 0;
  }
  for (int tr = 0; tr < TIERS; tr++) {
    const float *w = (const float *)want[tr], *g = (const float *)got[tr];
    for (int64_t i = 0; i < c->used[tr] / 4; i++) {
      if (!memcmp(&w[i], &g[i], 4) || (isnan(w[i]) && isnan(g[i]))) continue;
      double d = fabs((double)g[i] - w[i]) / fmax(fabs(w[i]), c->err_floor);
      if (!(d <= worst)) worst = d; /* NaN propagates */
    }
  }
  return worst;
}

typedef struct Images {
  char *init[TIERS], *want[TIERS], *got[TIERS];
} Images;

static void copy_tiers(char **dst, char **src) {
  for (int i = 0; i < TIERS; i++) memcpy(dst[i], src[i], TIER_BYTES);
}

static void check_case(const Case *c, ProgKernelFn fn, Images *im, const float *scalars) {
  const Kernel *k = c->k;
  int64_t n = k->par == KP_ROWS ? k->rows : k->cols;
  fill_tiers(c, (int)(c - cases), im->init);
  copy_tiers(im->want, im->init);
  kernel_eval(k, im->want, scalars);

  char *bufs[K_MAX_BUFS];
  kernel_bind(k, im->got, bufs); /* the code takes each buffer's address */
  copy_tiers(im->got, im->init);
  fn(bufs, 0, n, scalars);
  double full = max_error(c, im->want, im->got);

  copy_tiers(im->got, im->init); /* chunks, as threads would run them */
  int64_t cuts[] = {0, n / 3, n / 3 + 1, (2 * n) / 3, n};
  for (int i = 0; i + 1 < 5; i++)
    if (cuts[i] < cuts[i + 1] && cuts[i + 1] <= n) fn(bufs, cuts[i], cuts[i + 1], scalars);
  double chunks = max_error(c, im->want, im->got);

  copy_tiers(im->got, im->init); /* an empty range changes nothing */
  fn(bufs, n / 2, n / 2, scalars);
  bool untouched = max_error(c, im->init, im->got) == 0;

  bool ok = full <= TOL && chunks <= TOL && untouched;
  if (!ok) kernel_print(stdout, k);
  printf("%-4s %-16s %s rows=%-4lld cols=%-5lld max error %.3g (chunks %.3g)%s\n", ok ? "ok" : "FAIL", k->name,
         k->par == KP_ROWS ? "rows" : "cols", (long long)k->rows, (long long)k->cols, full, chunks,
         untouched ? "" : ", empty range wrote memory");
  if (!ok) failures++;
}

/* ---- building and loading the library --------------------------------------------------- */

static char scratch[64];

static const char *scratch_path(const char *name) {
  static char paths[4][128];
  static int next;
  char *p = paths[next++ % 4];
  snprintf(p, 128, "%s/%s", scratch, name);
  return p;
}

/* The bytes the module carries as its program (any bytes: the table holds them as they
 * are; a zero byte, high bytes and an odd length included). */
static const unsigned char test_program[] = {'c', 'o', 'l', 0, 0xe9, 0xff, 1, 2, 3};

static LlvmModule *compile(void) {
  const Kernel *ks[MAX_CASES];
  for (int i = 0; i < ncases; i++) ks[i] = cases[i].k;
  LlvmModule *m = llvm_module_new("test_llvm");
  llvm_emit_program(m, ks, ncases, test_program, sizeof test_program);
  if (llvm_optimize(m, 3)) {
    fprintf(stderr, "llvm_optimize failed\n");
    exit(1);
  }
  return m;
}

static void *build_library(LlvmModule *m) {
  char err[512];
  const char *obj = scratch_path("kernels.o"), *so = scratch_path("kernels.so");
  if (llvm_write_object(m, obj, err, sizeof err)) {
    fprintf(stderr, "llvm_write_object: %s\n", err);
    exit(1);
  }
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s -shared -o '%s' '%s' %s", cc, so, obj, llvm_link_libs(m));
  if (system(cmd) != 0) {
    fprintf(stderr, "failed: %s\n", cmd);
    exit(1);
  }
  void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    exit(1);
  }
  return lib;
}

/* The kernels of the library's one build (llvm_emit_program writes one), or NULL. */
static const ProgKernelFn *lib_kernels(void *lib) {
  const ProgCpuBuild *b = dlsym(lib, "colossalc_cpu_builds");
  const int *nb = dlsym(lib, "colossalc_ncpu_builds");
  return b && nb && *nb == 1 ? b[0].kernels : NULL;
}

static int check_symbols(void *lib) {
  const int *n = dlsym(lib, "colossalc_nkernels");
  const ProgKernelFn *fns = lib_kernels(lib);
  const unsigned char *prog = dlsym(lib, "colossalc_program");
  const int64_t *bytes = dlsym(lib, "colossalc_program_bytes");
  int bad = !n || !fns || !prog || !bytes || *n != ncases || *bytes != (int64_t)sizeof test_program ||
            memcmp(prog, test_program, sizeof test_program) != 0 || (uintptr_t)prog % 64 != 0;
  for (int i = 0; !bad && i < ncases; i++) {
    void *f = dlsym(lib, cases[i].k->name);
    bad |= !f || memcmp(&f, &fns[i], sizeof f) != 0;
  }
  printf("%-4s colossalc_nkernels = %d, colossalc_cpu_builds[1], colossalc_program (64-byte aligned)\n",
         bad ? "FAIL" : "ok", n ? *n : -1);
  return bad;
}

static int run_numerics(LlvmModule *m) {
  void *lib = build_library(m);
  failures += check_symbols(lib);
  const ProgKernelFn *fns = lib_kernels(lib);
  Images im;
  for (int i = 0; i < TIERS; i++) {
    im.init[i] = malloc(TIER_BYTES);
    im.want[i] = malloc(TIER_BYTES);
    im.got[i] = malloc(TIER_BYTES);
  }
  float scalars[16] = {[SC_LR] = 1e-2f, [SC_BC1] = 10.0f, [SC_BC2] = 20.0f, [SC_GSCALE] = 0.75f, [SC_STEP] = 1};
  for (int i = 0; fns && i < ncases; i++) check_case(&cases[i], fns[i], &im, scalars);
  for (int i = 0; i < TIERS; i++) {
    free(im.init[i]);
    free(im.want[i]);
    free(im.got[i]);
  }
  dlclose(lib);
  return failures;
}

/* ---- the IR test ------------------------------------------------------------------------- */

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = 0;
  fclose(f);
  return s;
}

/* the text of `define void @name(...) { ... }` in ir, NUL-terminated in a copy */
static char *function_text(const char *ir, const char *name) {
  char head[128];
  snprintf(head, sizeof head, "define void @%s(", name);
  const char *p = strstr(ir, head);
  if (!p) return NULL;
  const char *end = strstr(p, "\n}\n");
  size_t n = end ? (size_t)(end - p) : strlen(p);
  char *s = malloc(n + 1);
  memcpy(s, p, n);
  s[n] = 0;
  return s;
}

static bool ir_check(const char *ir, const char *kernel, const char *what, const char *const *needles, bool must) {
  char *body = function_text(ir, kernel);
  bool found = false;
  for (int i = 0; body && needles[i]; i++) found |= strstr(body, needles[i]) != NULL;
  printf("%-4s %s %s\n", found ? "ok" : must ? "FAIL" : "no", kernel, what);
  free(body);
  return found || !must;
}

static int run_ir(LlvmModule *m) {
  char err[512];
  const char *path = scratch_path("kernels.ll");
  if (llvm_write_ir(m, path, err, sizeof err)) {
    fprintf(stderr, "llvm_write_ir: %s\n", err);
    return 1;
  }
  char *ir = read_file(path);
  if (!ir) {
    perror(path);
    return 1;
  }
  int bad = 0;
  for (int i = 0; i < ncases; i++) {
    char head[128];
    snprintf(head, sizeof head, "define void @%s(", cases[i].k->name);
    if (!strstr(ir, head)) {
      printf("FAIL no `%s`\n", head);
      bad++;
    }
  }
  printf("%-4s every kernel defined (%d)\n", bad ? "FAIL" : "ok", ncases);
  const char *vec[] = {"<4 x float>", "<8 x float>", "<16 x float>", NULL}, *mvec[] = {"@_ZGV", NULL};
  bad += !ir_check(ir, "ew_simple", "vectorized (<4|8|16 x float>)", vec, true);
  bool libmvec = strstr(llvm_link_libs(m), "mvec") != NULL;
  printf("     libmvec %s\n", libmvec ? "available: exp, log, tanh, pow, sin, cos may vectorize" : "not available");
  bad += !ir_check(ir, "unary_EXP", "calls a libmvec vector exp", mvec, libmvec);
  bad += !ir_check(ir, "unary_LOG", "calls a libmvec vector log", mvec, libmvec);
  ir_check(ir, "unary_TANH", "calls a libmvec vector tanh", mvec, false);
  ir_check(ir, "unary_SIN", "calls a libmvec vector sin", mvec, false);
  ir_check(ir, "binary_POW", "calls a libmvec vector pow", mvec, false);
  ir_check(ir, "softmax_causal", "vectorized", vec, false);
  ir_check(ir, "layernorm", "vectorized", vec, false);
  ir_check(ir, "adamw", "vectorized", vec, false);
  free(ir);
  return bad;
}

/* ---- kernels of lowered models ---------------------------------------------------------- */

typedef struct Run {
  const Program *p;
  const ProgKernelFn *fns;
  char *ref[TIERS], *before[TIERS], *got[TIERS];
  double *worst; /* per kernel */
  const float *scalars;
} Run;

static void run_kernel(Run *r, const IsaInstr *in) {
  const Kernel *k = r->p->kernels[in->kernel.id];
  ir_assert(in->kernel.extent == (k->par == KP_ROWS ? k->rows : k->cols));
  for (int t = 0; t < TIERS; t++) {
    memcpy(r->before[t], r->ref[t], r->p->tiers[t]);
    memcpy(r->got[t], r->ref[t], r->p->tiers[t]);
  }
  int64_t n = in->kernel.extent, cuts[] = {0, n / 3, (2 * n) / 3, n};
  char *bufs[K_MAX_BUFS];
  kernel_bind(k, r->got, bufs); /* the shared code, with this kernel's buffers */
  for (int i = 0; i < 3; i++)
    if (cuts[i] < cuts[i + 1]) r->fns[r->p->code_of[in->kernel.id]](bufs, cuts[i], cuts[i + 1], r->scalars);
  kernel_eval(k, r->ref, r->scalars);
  double e = lowered_written_error(r->p, r->ref, r->got, r->before), tol = lowered_store_tolerance(k, TOL);
  if (e > tol && !(r->worst[in->kernel.id] > tol)) kernel_print(stdout, k); /* the first failure, as a bug report */
  if (!(e <= r->worst[in->kernel.id])) r->worst[in->kernel.id] = e;
}

static void run_seq(Run *r, const PSeq *s) {
  for (int i = 0; i < s->n; i++) {
    const IsaInstr *in = &s->v[i];
    if (in->op == ISA_KERNEL) run_kernel(r, in);
    else if (in->op == ISA_GEMM) lowered_gemm_ref(&in->gemm, r->ref);
    else memset(r->ref[in->zero.tier] + in->zero.offset, 0, (size_t)in->zero.bytes);
  }
}

static int run_lowered(int argc, char **argv) {
  Arena *a = arena_new();
  Program *p = lowered_model(a, argc, argv);
  if (!p) {
    arena_free(a);
    return 1;
  }
  program_share_kernels(p); /* the kernels' code (p->code), as train carries it */
  compose_lists(&p, 1);
  int64_t bytes;
  void *prog = program_write(&p, 1, &bytes);
  LlvmModule *m = llvm_module_new(p->g->name);
  llvm_emit_program(m, (const Kernel *const *)p->code, p->ncode, prog, bytes);
  free(prog);
  if (llvm_optimize(m, 3)) return 1;
  void *lib = build_library(m);
  float scalars[16] = {1e-2f, 10.0f, 20.0f, 0.75f, 1, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f, 1.0f, 1.0f};
  Run r = {.p = p, .fns = lib_kernels(lib), .scalars = scalars};
  r.worst = calloc((size_t)p->nkernels + 1, sizeof *r.worst);
  for (int t = 0; t < TIERS; t++) {
    r.ref[t] = calloc(1, (size_t)p->tiers[t] + 64);
    r.before[t] = malloc((size_t)p->tiers[t] + 64);
    r.got[t] = malloc((size_t)p->tiers[t] + 64);
  }
  lowered_init(p, r.ref, 88172645463325252ull);
  run_seq(&r, &p->forward);
  run_seq(&r, &p->step);
  run_seq(&r, &p->gradnorm);
  run_seq(&r, &p->update);
  int bad = 0;
  for (int i = 0; i < p->nkernels; i++) {
    bool ok = r.worst[i] <= lowered_store_tolerance(p->kernels[i], TOL);
    bad += !ok;
    printf("%-4s %-40s max error %.3g\n", ok ? "ok" : "FAIL", p->kernels[i]->name, r.worst[i]);
  }
  printf("%s: %d kernels (%d codes), %d failed\n", p->g->name, p->nkernels, p->ncode, bad);
  for (int t = 0; t < TIERS; t++) {
    free(r.ref[t]);
    free(r.before[t]);
    free(r.got[t]);
  }
  free(r.worst);
  dlclose(lib);
  llvm_module_free(m);
  arena_free(a);
  return bad;
}

static void remove_scratch(void) {
  const char *names[] = {"kernels.o", "kernels.so", "kernels.ll"};
  for (int i = 0; i < 3; i++) unlink(scratch_path(names[i]));
  rmdir(scratch);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "numerics";
  if (strcmp(mode, "numerics") && strcmp(mode, "ir") && (strcmp(mode, "lowered") || argc < 3)) {
    fprintf(stderr, "usage: test_llvm numerics|ir|lowered MODEL [NAME=VALUE ...]\n");
    return 2;
  }
  snprintf(scratch, sizeof scratch, "llvm-test-XXXXXX");
  if (!mkdtemp(scratch)) {
    perror("mkdtemp");
    return 2;
  }
  if (!strcmp(mode, "lowered")) {
    int bad = run_lowered(argc - 2, argv + 2);
    remove_scratch();
    return bad != 0;
  }
  Arena *a = arena_new();
  build_cases(a);
  LlvmModule *m = compile();
  int bad = strcmp(mode, "ir") == 0 ? run_ir(m) : run_numerics(m);
  llvm_module_free(m);
  arena_free(a);
  remove_scratch();
  printf("%s: %s\n", mode, bad ? "FAILED" : "passed");
  return bad != 0;
}
