/* Tests of the CUDA emitter (codegen/cuda.c). One set of kernels, built with the
 * kernel-form builders, covers the shapes fusion produces: elementwise with broadcast
 * views, layernorm, softmax with a causal mask, cross-entropy with a gather under an
 * ignore mask, embedding forward and its scatter-add backward, column reductions,
 * AdamW, every unary and binary op, transposed/permuted/reversed views, i32 loads,
 * phases that need barriers, the edge of an empty row, and the fused attention's passes
 * (grouped key/value heads, windows, S != T; warp per row and tensor-core tiles).
 * Modes (argv[1]):
 *
 *   emit           the source's shape: header comment, one extern "C" __global__ per
 *                  kernel with its launch bound, no #include, deterministic, the
 *                  mapping and launch sizes each kernel should get, barriers where due
 *   nvrtc ARCH     NVRTC compiles the whole source for ARCH (sm_80, sm_90: CUBIN;
 *                  compute_90: PTX) with an empty log, also with the bounds checks on;
 *                  every kernel is in the binary; prints the compile times
 *   nvrtc-report   a broken source: the failure report (NVRTC_CHECK) carries the
 *                  program log and the source with line numbers
 *   host           the semantics, without a GPU: the same source compiled as C++ for
 *                  the host, behind a shim for the CUDA built-ins (tests/cuda_emul) (each GPU thread a
 *                  pthread, __syncthreads a barrier, __shfl_xor_sync through memory,
 *                  shared memory a static filled with NaN before each block), bounds
 *                  checks on (__trap aborts); every kernel runs with its launch
 *                  sizes, with a 2-block grid (grid-stride loops) and with smaller
 *                  blocks, and must match kernel_eval: bit for bit, except where a
 *                  block reduction adds in a tree (then within 1e-5 + 1e-4 |x|) and
 *                  on tensor cores (within the case's share of the largest result)
 *   lowered MODEL [NAME=VALUE ...]
 *                  every kernel that lowering makes of a model (forward, backward,
 *                  gradient norm, AdamW): NVRTC compiles them (sm_80, empty log; not
 *                  in the sanitizer build), then the host shim runs the whole step,
 *                  kernel by kernel, against kernel_eval (GEMMs by a plain loop
 *                  between them)
 *   gpu            the same comparison on a GPU through the driver API (dlopen of
 *                  libcuda.so.1); exits 77 (skipped) when there is no GPU
 *
 * KEEP=1 in the environment keeps the host scratch directory (kernels.cu, shim.cpp,
 * kernels.so); it is kept anyway when a check fails.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <nvrtc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "codegen/cuda.h"
#include "codegen/kernel.h"
#include "codegen/lower.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "program/program.h"
#include "tests/common/lowered.h"

#ifndef COLOSSALC_HOST_CXX
#define COLOSSALC_HOST_CXX "c++"
#endif
#ifndef COLOSSALC_HOST_CXX_FLAGS
#define COLOSSALC_HOST_CXX_FLAGS ""
#endif

static int failures;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
    }                                                                          \
  } while (0)

/* ---- the kernels ------------------------------------------------------------------- */

enum { MAX_CASES = 48 };

typedef struct Case {
  Kernel *k;
  CudaMapping want;                                        /* the mapping the emitter should pick */
  int64_t tier_bytes[TIERS];                               /* bytes of each tier this case uses */
  float lo[K_MAX_BUFS], hi[K_MAX_BUFS];                    /* fill: uniform f32, or i32 integers in [lo, hi) */
  bool half_steps[K_MAX_BUFS];                             /* f32 fill in multiples of 0.5 (ties for EQ, LE, FLOOR) */
  void (*fixup)(const struct Case *c, char *const *tiers); /* values the fill must contain */
  bool no_eval;                                            /* compiled, not run: kernel_eval cannot run it */
  double tol; /* > 0: where not bit for bit, f32 results within tol of the buffer's largest |value| */
} Case;

static Arena *A;
static Case cases[MAX_CASES];
static int ncases;
static const float scalars[SC_BETA1] = {0.01f, 1.25f, 1.5f, 0.75f, 3.0f};

static Case *case_new(const char *name, KPar par, CudaMapping want, int row_dims, int ndims, const int64_t *dims) {
  ir_assert(ncases < MAX_CASES);
  Case *c = &cases[ncases++];
  c->k = kernel_new(A, name, par, dims, ndims, row_dims);
  c->want = want;
  for (int t = 0; t < TIERS; t++) c->tier_bytes[t] = 64 + 4 * t; /* offsets not all 16-byte aligned */
  return c;
}
#define NEW(name, par, want, row_dims, ...)                                                      \
  case_new(name, par, want, row_dims, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
           (int64_t[]){__VA_ARGS__})

static int buf(Case *c, const char *name, int tier, int64_t numel, DType dt, float lo, float hi) {
  int64_t es = dt == DT_BF16 || dt == DT_F16 ? 2 : 4;
  int64_t off = (c->tier_bytes[tier] + es - 1) / es * es; /* aligned to its elements (an odd 16-bit count before) */
  c->tier_bytes[tier] = off + numel * es + 12;            /* a gap: an overrun lands in no buffer */
  int b = kernel_buf(c->k, name, tier, off, numel, dt);
  c->lo[b] = lo;
  c->hi[b] = hi;
  return b;
}

static KView view_n(const Kernel *k, int64_t off, int n, const int64_t *strides) {
  ir_assert(n == k->ndims);
  KView v = {.offset = off};
  for (int d = 0; d < n; d++) v.strides[d] = strides[d];
  return v;
}
#define VIEW(c, off, ...) \
  view_n((c)->k, off, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static KView gathered(KView v, KExpr *g, int64_t gs) {
  v.gather = g;
  v.gather_stride = gs;
  return v;
}
static KView contig(const Case *c) { return kview_contig(c->k, 0); }
static KExpr *ld(Case *c, int b, KView v) { return kx_load(A, c->k, b, v); }
static KExpr *cst(Case *c, float f) { return kx_const(A, c->k, f); }
static KExpr *co(Case *c, int axis) { return kx_coord(A, c->k, axis); }
static KExpr *sc(Case *c, int i) { return kx_scalar(A, c->k, i); }
static KExpr *acc(Case *c, int a) { return kx_acc(A, c->k, a); }
static KExpr *un(Case *c, KUnary op, KExpr *x) { return kx_unary(A, c->k, op, x); }
static KExpr *bi(Case *c, KBinary op, KExpr *x, KExpr *y) { return kx_binary(A, c->k, op, x, y); }
static KExpr *add(Case *c, KExpr *x, KExpr *y) { return bi(c, KB_ADD, x, y); }
static KExpr *sub(Case *c, KExpr *x, KExpr *y) { return bi(c, KB_SUB, x, y); }
static KExpr *mul(Case *c, KExpr *x, KExpr *y) { return bi(c, KB_MUL, x, y); }
static KExpr *sel(Case *c, KExpr *x, KExpr *y, KExpr *z) { return kx_select(A, c->k, x, y, z); }

/* y = x * w[c] * s3 + bias[a, c]; z += tanh(y) / 2 (reads y where it was just written). */
static void case_elementwise(void) {
  Case *c = NEW("k_ew_bcast", KP_ROWS, CM_FLAT, 2, 6, 10, 70);
  int x = buf(c, "x", TIER_WORK, 4200, DT_F32, -1, 1), w = buf(c, "w", TIER_PARAMS, 70, DT_F32, -1, 1);
  int bias = buf(c, "bias", TIER_PARAMS, 420, DT_F32, -1, 1), y = buf(c, "y", TIER_WORK, 4200, DT_F32, 0, 0);
  int z = buf(c, "z", TIER_WORK, 4200, DT_F32, -1, 1);
  KExpr *e = mul(c, mul(c, ld(c, x, contig(c)), ld(c, w, VIEW(c, 0, 0, 0, 1))), sc(c, SC_GSCALE));
  kernel_map(c->k, y, contig(c), KS_SET, add(c, e, ld(c, bias, VIEW(c, 0, 70, 0, 1))));
  kernel_map(c->k, z, contig(c), KS_ADD, mul(c, un(c, KU_TANH, ld(c, y, contig(c))), cst(c, 0.5f)));
}

/* llm.c's layernorm forward: mean, then variance about it, then y, mean and rstd. */
static void case_layernorm(void) {
  Case *c = NEW("k_layernorm", KP_ROWS, CM_BLOCK_ROW, 2, 4, 3, 700);
  int x = buf(c, "x", TIER_WORK, 8400, DT_F32, -2, 2), w = buf(c, "ln.w", TIER_PARAMS, 700, DT_F32, 0.5f, 1.5f);
  int b = buf(c, "ln.b", TIER_PARAMS, 700, DT_F32, -1, 1), y = buf(c, "y", TIER_WORK, 8400, DT_F32, 0, 0);
  int mean = buf(c, "mean", TIER_WORK, 12, DT_F32, 0, 0), rstd = buf(c, "rstd", TIER_WORK, 12, DT_F32, 1, 2);
  KExpr *X = ld(c, x, contig(c));
  KExpr *mu = mul(c, acc(c, kernel_reduce(c->k, KR_SUM, X)), cst(c, 1.0f / 700));
  KExpr *d = sub(c, X, mu);
  KExpr *var = mul(c, acc(c, kernel_reduce(c->k, KR_SUM, mul(c, d, d))), cst(c, 1.0f / 700));
  KExpr *rs = un(c, KU_RSQRT, add(c, var, cst(c, 1e-5f)));
  KView wv = VIEW(c, 0, 0, 0, 1), rv = VIEW(c, 0, 3, 1, 0);
  kernel_map(c->k, y, contig(c), KS_SET, add(c, mul(c, mul(c, d, rs), ld(c, w, wv)), ld(c, b, wv)));
  kernel_row(c->k, mean, rv, KS_SET, mu);
  kernel_row(c->k, rstd, rv, KS_ADD, rs); /* += : a ROW phase run twice would show */
}

/* sum x and sum x^2 in one pass (independent reductions share a loop). */
static void case_layernorm_grouped(void) {
  Case *c = NEW("k_layernorm_grouped", KP_ROWS, CM_BLOCK_ROW, 1, 6, 100);
  int x = buf(c, "x", TIER_WORK, 600, DT_F32, -1, 3), y = buf(c, "y", TIER_WORK, 600, DT_F32, 0, 0);
  KExpr *X = ld(c, x, contig(c));
  KExpr *mu = mul(c, acc(c, kernel_reduce(c->k, KR_SUM, X)), cst(c, 0.01f));
  KExpr *ms = mul(c, acc(c, kernel_reduce(c->k, KR_SUM, mul(c, X, X))), cst(c, 0.01f));
  KExpr *rs = un(c, KU_RSQRT, add(c, sub(c, ms, mul(c, mu, mu)), cst(c, 1e-5f)));
  kernel_map(c->k, y, contig(c), KS_SET, mul(c, sub(c, X, mu), rs));
}

/* MAX and SUM of the same row in one pass. */
static void case_max_sum(void) {
  Case *c = NEW("k_max_sum", KP_ROWS, CM_BLOCK_ROW, 1, 7, 96);
  int x = buf(c, "x", TIER_WORK, 672, DT_F32, -5, 5), y = buf(c, "y", TIER_WORK, 672, DT_F32, 0, 0);
  KExpr *X = ld(c, x, contig(c));
  int amax = kernel_reduce(c->k, KR_MAX, X), asum = kernel_reduce(c->k, KR_SUM, X);
  kernel_map(c->k, y, contig(c), KS_SET, add(c, sub(c, X, acc(c, amax)), mul(c, acc(c, asum), cst(c, 1.0f / 96))));
}

/* Attention softmax over [b, h, t, t2] with t2 > t masked out; the load sits in the
 * select's branch (evaluated only where the mask is open). */
static void case_softmax_causal(void) {
  Case *c = NEW("k_softmax_causal", KP_ROWS, CM_BLOCK_ROW, 3, 2, 2, 40, 40);
  int x = buf(c, "att", TIER_WORK, 6400, DT_F32, -3, 3), y = buf(c, "probs", TIER_WORK, 6400, DT_F32, 0, 0);
  KExpr *open = bi(c, KB_LE, co(c, 3), co(c, 2));
  KExpr *att = sel(c, open, mul(c, ld(c, x, contig(c)), sc(c, SC_GSCALE)), cst(c, -INFINITY));
  int amax = kernel_reduce(c->k, KR_MAX, att);
  KExpr *ex = un(c, KU_EXP, sub(c, att, acc(c, amax)));
  int asum = kernel_reduce(c->k, KR_SUM, ex);
  kernel_map(c->k, y, contig(c), KS_SET, mul(c, ex, un(c, KU_RECIP, acc(c, asum))));
}

/* A wide softmax, in place: the buffer is read and written, so no __ldg. */
static void case_softmax_inplace(void) {
  Case *c = NEW("k_softmax_inplace", KP_ROWS, CM_BLOCK_ROW, 1, 3, 1000);
  int x = buf(c, "logits", TIER_WORK, 3000, DT_F32, -4, 4);
  KExpr *X = ld(c, x, contig(c));
  int amax = kernel_reduce(c->k, KR_MAX, X);
  KExpr *ex = un(c, KU_EXP, sub(c, X, acc(c, amax)));
  int asum = kernel_reduce(c->k, KR_SUM, ex);
  kernel_map(c->k, x, contig(c), KS_SET, bi(c, KB_DIV, ex, acc(c, asum)));
}

static void ce_fixup(const Case *c, char *const *tiers) {
  const KBuf *t = &c->k->bufs[1]; /* targets: -1 at row 0 (its gather would be address -1) */
  ((int32_t *)(tiers[t->tier] + t->offset))[0] = -1;
}

/* Cross-entropy over [b, t, vocab]: loss per row (a ROW store of a gathered logit,
 * skipped where the target is -1) and dlogits = (softmax - onehot) * scale. */
static void case_cross_entropy(void) {
  Case *c = NEW("k_cross_entropy", KP_ROWS, CM_BLOCK_ROW, 2, 2, 6, 50);
  int lg = buf(c, "logits", TIER_WORK, 600, DT_F32, -2, 2), tg = buf(c, "targets", TIER_WORK, 12, DT_I32, -1, 50);
  int loss = buf(c, "losses", TIER_WORK, 12, DT_F32, 0, 0), dl = buf(c, "dlogits", TIER_WORK, 600, DT_F32, 0, 0);
  c->fixup = ce_fixup;
  KExpr *L = ld(c, lg, contig(c)), *T = ld(c, tg, VIEW(c, 0, 6, 1, 0));
  int amax = kernel_reduce(c->k, KR_MAX, L);
  int asum = kernel_reduce(c->k, KR_SUM, un(c, KU_EXP, sub(c, L, acc(c, amax))));
  KExpr *ignored = bi(c, KB_LT, T, cst(c, 0));
  KExpr *picked = ld(c, lg, gathered(VIEW(c, 0, 300, 50, 0), T, 1));
  KExpr *lse = add(c, un(c, KU_LOG, acc(c, asum)), acc(c, amax));
  kernel_row(c->k, loss, VIEW(c, 0, 6, 1, 0), KS_SET, sel(c, ignored, cst(c, 0), sub(c, lse, picked)));
  KExpr *p = mul(c, un(c, KU_EXP, sub(c, L, acc(c, amax))), un(c, KU_RECIP, acc(c, asum)));
  KExpr *g = mul(c, sub(c, p, bi(c, KB_EQ, co(c, 2), T)), sc(c, SC_LR));
  kernel_map(c->k, dl, contig(c), KS_SET, sel(c, ignored, cst(c, 0), g));
}

/* out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :] */
static void case_embedding(void) {
  Case *c = NEW("k_embedding", KP_ROWS, CM_FLAT, 2, 2, 8, 24);
  int tok = buf(c, "tokens", TIER_WORK, 16, DT_I32, 0, 30), wte = buf(c, "wte", TIER_PARAMS, 720, DT_F32, -1, 1);
  int wpe = buf(c, "wpe", TIER_PARAMS, 192, DT_F32, -1, 1), out = buf(c, "x0", TIER_WORK, 384, DT_F32, 0, 0);
  KExpr *T = ld(c, tok, VIEW(c, 0, 8, 1, 0));
  KExpr *e = add(c, ld(c, wte, gathered(VIEW(c, 0, 0, 0, 1), T, 24)), ld(c, wpe, VIEW(c, 0, 0, 24, 1)));
  kernel_map(c->k, out, contig(c), KS_SET, e);
}

/* The backward: dwte[tokens[r], :] += dout[r, :] (scatter-add, a gather in the STORE
 * view, tokens repeat) and dwpe[t, :] += dout[b, t, :] * s3; rows in order. */
static void case_embedding_backward(void) {
  Case *c = NEW("k_embedding_bwd", KP_COLS, CM_COLS, 2, 2, 8, 24);
  int tok = buf(c, "tokens", TIER_WORK, 16, DT_I32, 0, 5), dout = buf(c, "dx0", TIER_WORK, 384, DT_F32, -1, 1);
  int dwte = buf(c, "wte.grad", TIER_GRADS, 120, DT_F32, -0.5f, 0.5f);
  int dwpe = buf(c, "wpe.grad", TIER_GRADS, 192, DT_F32, -0.5f, 0.5f);
  KExpr *T = ld(c, tok, VIEW(c, 0, 8, 1, 0)), *D = ld(c, dout, contig(c));
  kernel_map(c->k, dwte, gathered(VIEW(c, 0, 0, 0, 1), T, 24), KS_ADD, D);
  kernel_map(c->k, dwpe, VIEW(c, 0, 0, 24, 1), KS_ADD, mul(c, D, sc(c, SC_GSCALE)));
}

/* The token embedding's gradient alone, over enough rows to split them by owner
 * (CM_COLS_OWNED: 300 rows, 4 classes): dwte[tokens[r], :] += dout[r, :], 7 tokens over
 * 300 rows, each class's rows added in order; the columns (40) more than a block's
 * worth of the test's launches (32 threads) and, in a 48-float row, fewer than a row. */
static void case_embedding_backward_owned(void) {
  Case *c = NEW("k_embedding_bwd_owned", KP_COLS, CM_COLS_OWNED, 2, 3, 100, 40);
  int tok = buf(c, "tokens", TIER_WORK, 300, DT_I32, 0, 7), dout = buf(c, "dx0", TIER_WORK, 12000, DT_F32, -1, 1);
  int dwte = buf(c, "wte.grad", TIER_GRADS, 7 * 48, DT_F32, -0.5f, 0.5f);
  KExpr *T = ld(c, tok, VIEW(c, 0, 100, 1, 0)), *D = ld(c, dout, contig(c));
  kernel_map(c->k, dwte, gathered(VIEW(c, 0, 0, 0, 1), T, 48), KS_ADD, D);
}

/* Bias gradient: a column reduction over [b, t] rows, and a sum of squares. */
static void case_bias_grad(void) {
  Case *c = NEW("k_bias_grad", KP_COLS, CM_COLS, 2, 3, 7, 33);
  int dout = buf(c, "dy", TIER_WORK, 693, DT_F32, -1, 1), db = buf(c, "b.grad", TIER_GRADS, 33, DT_F32, 0, 0);
  int sq = buf(c, "sq", TIER_WORK, 33, DT_F32, 0, 0);
  KExpr *D = ld(c, dout, contig(c));
  kernel_map(c->k, db, VIEW(c, 0, 0, 0, 1), KS_ADD, D);
  kernel_map(c->k, sq, VIEW(c, 0, 0, 0, 1), KS_ADD, mul(c, mul(c, D, D), sc(c, SC_STEP)));
}

/* Bias gradient as lowering writes it (sum_to): a row per feature, its columns the
 * [b, t] tokens a row of memory apart (70 features, 3 x 40 tokens: the last block of 32
 * rows partial), added onto the gradient, and the features' max |dy| beside it. */
static void case_col_sum(void) {
  Case *c = NEW("k_col_sum", KP_ROWS, CM_LANE_ROW, 1, 70, 3, 40);
  int dy = buf(c, "dy", TIER_WORK, 8400, DT_F32, -1, 1), db = buf(c, "b.grad", TIER_GRADS, 70, DT_F32, -1, 1);
  int mx = buf(c, "mx", TIER_WORK, 70, DT_F32, 0, 0);
  KExpr *D = ld(c, dy, VIEW(c, 0, 1, 2800, 70));
  int s0 = kernel_reduce(c->k, KR_SUM, D), m0 = kernel_reduce(c->k, KR_MAX, un(c, KU_ABS, D));
  kernel_row(c->k, db, VIEW(c, 0, 1, 0, 0), KS_ADD, acc(c, s0));
  kernel_row(c->k, mx, VIEW(c, 0, 1, 0, 0), KS_SET, acc(c, m0));
}

/* AdamW: m and v updated in place, then read back (same element) by the update of p;
 * weight decay only for row 0. */
static void case_adamw(void) {
  Case *c = NEW("k_adamw", KP_ROWS, CM_FLAT, 1, 2, 50);
  int p = buf(c, "p", TIER_PARAMS, 100, DT_F32, -1, 1), g = buf(c, "p.grad", TIER_GRADS, 100, DT_F32, -1, 1);
  int m = buf(c, "p.m", TIER_OPT, 100, DT_F32, -0.1f, 0.1f), v = buf(c, "p.v", TIER_OPT, 100, DT_F32, 0, 0.1f);
  KView cv = contig(c);
  KExpr *G = mul(c, ld(c, g, cv), sc(c, SC_GSCALE));
  kernel_map(c->k, m, cv, KS_SET, add(c, mul(c, cst(c, 0.9f), ld(c, m, cv)), mul(c, cst(c, 0.1f), G)));
  kernel_map(c->k, v, cv, KS_SET, add(c, mul(c, cst(c, 0.95f), ld(c, v, cv)), mul(c, cst(c, 0.05f), mul(c, G, G))));
  KExpr *mh = mul(c, ld(c, m, cv), sc(c, SC_BC1)), *vh = mul(c, ld(c, v, cv), sc(c, SC_BC2));
  KExpr *wd = sel(c, bi(c, KB_EQ, co(c, 0), cst(c, 0)), cst(c, 0.1f), cst(c, 0));
  KExpr *P = ld(c, p, cv);
  KExpr *step = add(c, bi(c, KB_DIV, mh, add(c, un(c, KU_SQRT, vh), cst(c, 1e-8f))), mul(c, wd, P));
  kernel_map(c->k, p, cv, KS_SET, sub(c, P, mul(c, sc(c, SC_LR), step)));
}

/* Every unary op: row r applies op r (a select chain: conditional, inline), and the
 * sum of all of them (unconditional: temps), on positive x; then the ops defined
 * everywhere on x - 1.4. */
static void case_unary_ops(void) {
  Case *c = NEW("k_unary_ops", KP_ROWS, CM_FLAT, 1, KU_COUNT, 16);
  int x = buf(c, "x", TIER_WORK, KU_COUNT * 16, DT_F32, 0.3f, 2.5f);
  int y = buf(c, "y", TIER_WORK, KU_COUNT * 16, DT_F32, 0, 0), z = buf(c, "z", TIER_WORK, KU_COUNT * 16, DT_F32, 0, 0);
  int w = buf(c, "w", TIER_WORK, KU_COUNT * 16, DT_F32, 0, 0);
  KExpr *X = ld(c, x, contig(c)), *Xn = sub(c, X, cst(c, 1.4f)), *chain = cst(c, 0), *sum = cst(c, 0),
        *sum2 = cst(c, 0);
  for (int op = KU_COUNT - 1; op >= 0; op--) {
    chain = sel(c, bi(c, KB_EQ, co(c, 0), cst(c, (float)op)), un(c, (KUnary)op, X), chain);
    sum = add(c, sum, un(c, (KUnary)op, X));
  }
  const KUnary everywhere[] = {KU_NEG, KU_EXP, KU_TANH, KU_ABS, KU_FLOOR, KU_SIN, KU_COS};
  for (size_t i = 0; i < sizeof everywhere / sizeof *everywhere; i++) sum2 = add(c, sum2, un(c, everywhere[i], Xn));
  kernel_map(c->k, y, contig(c), KS_SET, chain);
  kernel_map(c->k, z, contig(c), KS_SET, sum);
  kernel_map(c->k, w, contig(c), KS_SET, sum2);
}

/* Every binary op, the same way, on values in steps of 0.5 (LE and EQ see ties). */
static void case_binary_ops(void) {
  Case *c = NEW("k_binary_ops", KP_ROWS, CM_FLAT, 1, KB_COUNT, 24);
  int x = buf(c, "x", TIER_WORK, KB_COUNT * 24, DT_F32, 0.5f, 3),
      yb = buf(c, "y", TIER_WORK, KB_COUNT * 24, DT_F32, 0.5f, 3);
  int o1 = buf(c, "o1", TIER_WORK, KB_COUNT * 24, DT_F32, 0, 0),
      o2 = buf(c, "o2", TIER_WORK, KB_COUNT * 24, DT_F32, 0, 0);
  c->half_steps[x] = c->half_steps[yb] = true;
  KExpr *X = ld(c, x, contig(c)), *Y = ld(c, yb, contig(c)), *chain = cst(c, 0), *sum = cst(c, 0);
  for (int op = KB_COUNT - 1; op >= 0; op--) {
    chain = sel(c, bi(c, KB_EQ, co(c, 0), cst(c, (float)op)), bi(c, (KBinary)op, X, Y), chain);
    sum = add(c, sum, bi(c, (KBinary)op, X, Y));
  }
  kernel_map(c->k, o1, contig(c), KS_SET, chain);
  kernel_map(c->k, o2, contig(c), KS_SET, sum);
}

/* out[i, j] = in[j, i] */
static void case_transpose(void) {
  Case *c = NEW("k_transpose", KP_ROWS, CM_FLAT, 1, 12, 20);
  int in = buf(c, "in", TIER_WORK, 240, DT_F32, -1, 1), out = buf(c, "out", TIER_WORK, 240, DT_F32, 0, 0);
  kernel_map(c->k, out, contig(c), KS_SET, ld(c, in, VIEW(c, 0, 1, 12)));
}

/* A [2, 4, 3, 5] tensor read as [2, 3, 4, 5] (neither part linear: coordinates are
 * decomposed), the same tensor read backwards (negative strides, linear parts), and
 * a permuted store. */
static void case_permute(void) {
  Case *c = NEW("k_permute", KP_ROWS, CM_FLAT, 2, 2, 3, 4, 5);
  int in = buf(c, "in", TIER_WORK, 120, DT_F32, -1, 1), o1 = buf(c, "o1", TIER_WORK, 120, DT_F32, 0, 0);
  int o2 = buf(c, "o2", TIER_WORK, 120, DT_F32, 0, 0), o3 = buf(c, "o3", TIER_WORK, 120, DT_F32, 0, 0);
  kernel_map(c->k, o1, contig(c), KS_SET, ld(c, in, VIEW(c, 0, 60, 5, 15, 1)));
  kernel_map(c->k, o2, contig(c), KS_SET, ld(c, in, VIEW(c, 119, -60, -20, -5, -1)));
  kernel_map(c->k, o3, VIEW(c, 0, 60, 5, 15, 1), KS_SET, mul(c, ld(c, in, contig(c)), cst(c, 3)));
}

/* i32 values as data, coordinates as values, and a row selected by a coordinate. */
static void case_i32_coords(void) {
  Case *c = NEW("k_i32_coords", KP_ROWS, CM_FLAT, 1, 4, 3, 10);
  int ids = buf(c, "ids", TIER_WORK, 120, DT_I32, -100, 100), tab = buf(c, "tab", TIER_PARAMS, 30, DT_F32, -1, 1);
  int out = buf(c, "out", TIER_WORK, 120, DT_F32, 0, 0);
  KExpr *pos = add(c, mul(c, co(c, 0), cst(c, 100)), add(c, mul(c, co(c, 1), cst(c, 10)), co(c, 2)));
  KExpr *row = ld(c, tab, gathered(VIEW(c, 0, 0, 0, 1), co(c, 1), 10));
  kernel_map(c->k, out, contig(c), KS_SET, add(c, add(c, mul(c, ld(c, ids, contig(c)), cst(c, 0.5f)), pos), row));
}

/* No reduction, but phases read what other elements of the row wrote: one block per
 * row and a barrier before each of the last three phases. */
static void case_rows_hazard(void) {
  Case *c = NEW("k_rows_hazard", KP_ROWS, CM_BLOCK_ROW, 1, 5, 64);
  int x = buf(c, "x", TIER_WORK, 320, DT_F32, -1, 1), tmp = buf(c, "tmp", TIER_WORK, 320, DT_F32, 0, 0);
  int y = buf(c, "y", TIER_WORK, 320, DT_F32, 0, 0), s = buf(c, "s", TIER_WORK, 5, DT_F32, 0, 0);
  int z = buf(c, "z", TIER_WORK, 320, DT_F32, 0, 0);
  KExpr *X = ld(c, x, contig(c));
  kernel_map(c->k, tmp, contig(c), KS_SET, mul(c, X, cst(c, 2)));
  kernel_map(c->k, y, contig(c), KS_SET, add(c, ld(c, tmp, VIEW(c, 63, 64, -1)), X));
  kernel_row(c->k, s, VIEW(c, 0, 1, 0), KS_SET, add(c, ld(c, tmp, VIEW(c, 5, 64, 0)), ld(c, y, VIEW(c, 0, 64, 0))));
  kernel_map(c->k, z, contig(c), KS_SET, add(c, ld(c, y, contig(c)), ld(c, s, VIEW(c, 0, 1, 0))));
}

/* Elementwise with an independent ROW phase: stays flat, the row in the j == 0 thread. */
static void case_flat_row(void) {
  Case *c = NEW("k_flat_row", KP_ROWS, CM_FLAT, 1, 9, 33);
  int x = buf(c, "x", TIER_WORK, 297, DT_F32, -1, 1), y = buf(c, "y", TIER_WORK, 297, DT_F32, 0, 0);
  int rs = buf(c, "ends", TIER_WORK, 9, DT_F32, 1, 2);
  kernel_map(c->k, y, contig(c), KS_SET, mul(c, ld(c, x, contig(c)), cst(c, 2)));
  kernel_row(c->k, rs, VIEW(c, 0, 1, 0), KS_ADD, add(c, ld(c, x, VIEW(c, 0, 33, 0)), ld(c, x, VIEW(c, 32, 33, 0))));
}

/* Narrow rows: one thread per row. */
static void case_thread_row(void) {
  Case *c = NEW("k_rownorm", KP_ROWS, CM_THREAD_ROW, 1, 300, 5);
  int x = buf(c, "x", TIER_WORK, 1500, DT_F32, -1, 1), y = buf(c, "y", TIER_WORK, 1500, DT_F32, 0, 0);
  int nrm = buf(c, "norm", TIER_WORK, 300, DT_F32, 0, 0);
  KExpr *X = ld(c, x, contig(c));
  int a = kernel_reduce(c->k, KR_SUM, mul(c, X, X));
  kernel_map(c->k, y, contig(c), KS_SET, mul(c, X, un(c, KU_RSQRT, add(c, acc(c, a), cst(c, 1e-6f)))));
  kernel_row(c->k, nrm, VIEW(c, 0, 1, 0), KS_SET, un(c, KU_SQRT, acc(c, a)));
}

/* Rows of no columns: the reductions give their initial values. Emitted and compiled
 * only: kernel_eval's coord() divides by the (zero) product of the column dims. */
static void case_empty_cols(void) {
  Case *c = NEW("k_empty_cols", KP_ROWS, CM_THREAD_ROW, 1, 4, 0);
  c->no_eval = true;
  int x = buf(c, "x", TIER_WORK, 0, DT_F32, 0, 0), out = buf(c, "out", TIER_WORK, 4, DT_F32, 0, 0);
  KExpr *X = ld(c, x, contig(c));
  int s = kernel_reduce(c->k, KR_SUM, X), m = kernel_reduce(c->k, KR_MAX, X);
  KExpr *e = add(c, add(c, acc(c, s), cst(c, 1)), bi(c, KB_LT, acc(c, m), cst(c, 0)));
  kernel_row(c->k, out, VIEW(c, 0, 1, 0), KS_SET, e);
}

/* 16-bit storage, bf16 or f16: f32 values of every bit pattern rounded into h (ties,
 * overflow, subnormals, NaN) and, as f32, into r; h widened into f32, an add in f32
 * rounded back into acc. */
static uint32_t rng_next(void);
static void half_fixup(const Case *c, char *const *tiers) {
  const KBuf *x = &c->k->bufs[0];
  uint32_t *p = (uint32_t *)(tiers[x->tier] + x->offset);
  for (int64_t i = 0; i < x->numel; i++) p[i] = rng_next() << 16 ^ rng_next();
  for (int64_t i = 0; i < LOWERED_HALF_SPECIALS && i < x->numel; i++) p[i] = lowered_half_specials[i];
}

static void case_half(DType t) {
  Case *c = NEW(t == DT_BF16 ? "k_bf16" : "k_f16", KP_ROWS, CM_FLAT, 1, 16, 64);
  int x = buf(c, "x", TIER_WORK, 1024, DT_F32, 0, 0), h = buf(c, "h", TIER_WORK, 1024, t, 0, 0);
  int w = buf(c, "w", TIER_GRADS, 1024, DT_F32, 0, 0), acc = buf(c, "acc", TIER_OPT, 1024, t, 0, 0);
  int in = buf(c, "in", TIER_PARAMS, 1024, t, 0, 0), r = buf(c, "r", TIER_WORK, 1024, DT_F32, 0, 0);
  c->fixup = half_fixup;
  kernel_map(c->k, h, contig(c), KS_SET, ld(c, x, contig(c)));
  kernel_map(c->k, r, contig(c), KS_SET, un(c, t == DT_BF16 ? KU_RBF16 : KU_RF16, ld(c, x, contig(c))));
  kernel_map(c->k, w, contig(c), KS_SET, ld(c, in, contig(c)));
  kernel_map(c->k, acc, contig(c), KS_ADD, mul(c, ld(c, in, contig(c)), cst(c, 0.5f)));
}

/* An attention operand [B=2, seq, n] of type dt in its own buffer, from element 5, rows
 * of n + 3 and batches 2 elements apart. */
static KOperand attn_in(Case *c, const char *name, int64_t seq, int64_t n, DType dt) {
  int64_t ss = n + 3, sb = seq * ss + 2;
  return (KOperand){buf(c, name, TIER_WORK, 5 + 2 * sb, dt, -1, 1), 5, sb, ss};
}

/* A fused attention pass (kernel.h, KAttn) over H query heads sharing G key/value heads,
 * S queries and T keys, a window W (causal) or none. In f32 (dt) a head of 40 columns,
 * two per lane for some, a warp per row in kernel_eval's order: bit for bit on the host;
 * on a GPU (its expf, its fused multiply-adds) within 1e-5 of the largest result, as the
 * sums' terms cancel. In bf16 or f16 (q, k, v and g; the rest f32) a head of 32 on
 * tensor cores, whose roundings of the probabilities or dS (within u of themselves) the
 * tolerance allows as the lowered kernels' does (lowered_tolerance). */
static void case_attention(KAttnPass pass, DType dt, int64_t H, int64_t G, int64_t S, int64_t T, int64_t W,
                           bool causal) {
  static const char *const names[] = {"fwd", "dq", "dk", "dv"};
  bool mma = dt != DT_F32;
  KAttn *at = arena_alloc(A, sizeof *at);
  *at = (KAttn){.pass = pass,
                .batch = 2,
                .heads = H,
                .sq = S,
                .sk = T,
                .hd = mma ? 32 : 40,
                .kv_heads = G,
                .window = W,
                .causal = causal,
                .scale = 0.29f,
                .store = pass == KA_DK ? KS_ADD : KS_SET};
  Case *c = NEW(arena_printf(A, "k_attn_%s_%s_g%lld_w%lld", names[pass], dtype_name(dt), (long long)G, (long long)W),
                KP_ROWS, mma ? CM_MMA_TILE : CM_WARP_ROW, 1, kattn_rows(at), 1);
  c->tol = !mma ? 1e-5 : 4 * (dt == DT_BF16 ? 0x1p-8 : 0x1p-11);
  int64_t F = H * at->hd, KF = G * at->hd;
  KOperand none = {-1, 0, 0, 0};
  at->q = attn_in(c, "q", S, F, dt), at->k = attn_in(c, "k", T, KF, dt);
  at->v = pass == KA_DV ? none : attn_in(c, "v", T, KF, dt);
  at->out = pass == KA_FWD ? none : attn_in(c, "out", S, F + H, DT_F32);
  at->g = pass == KA_FWD ? none : attn_in(c, "g", S, F, dt);
  at->delta = pass == KA_FWD || pass == KA_DV ? none : attn_in(c, "delta", S, H, DT_F32);
  at->res = attn_in(c, "res", pass == KA_DK || pass == KA_DV ? T : S,
                    pass == KA_FWD  ? F + H
                    : pass == KA_DQ ? F
                                    : KF,
                    DT_F32);
  c->k->attn = at;
}

static void build_cases(void) {
  case_half(DT_BF16);
  case_half(DT_F16);
  case_elementwise();
  case_layernorm();
  case_layernorm_grouped();
  case_max_sum();
  case_softmax_causal();
  case_softmax_inplace();
  case_cross_entropy();
  case_embedding();
  case_embedding_backward();
  case_embedding_backward_owned();
  case_bias_grad();
  case_col_sum();
  case_adamw();
  case_unary_ops();
  case_binary_ops();
  case_transpose();
  case_permute();
  case_i32_coords();
  case_rows_hazard();
  case_flat_row();
  case_thread_row();
  case_empty_cols();
  for (int p = KA_FWD; p <= KA_DV; p++) {
    case_attention((KAttnPass)p, DT_F32, 6, 2, 61, 75, 37, true);    /* T > S, windows across key blocks */
    case_attention((KAttnPass)p, DT_F32, 3, 1, 29, 19, 0, false);    /* T < S, every key */
    case_attention((KAttnPass)p, DT_BF16, 4, 2, 100, 130, 37, true); /* tiles skipped at both ends */
    case_attention((KAttnPass)p, DT_F16, 3, 1, 70, 50, 0, false);    /* T < S in f16 */
  }
}

static char *emit_all(void) {
  const Kernel *ks[MAX_CASES];
  for (int i = 0; i < ncases; i++) ks[i] = cases[i].k;
  return cuda_emit_source(ks, ncases);
}

/* The text of one kernel, from its "// ---- NAME:" line to the next. */
static char *kernel_text(const char *src, const char *name) {
  char head[160];
  snprintf(head, sizeof head, "// ---- %s:", name);
  const char *s = strstr(src, head);
  if (!s) return strdup("");
  const char *e = strstr(s + 1, "\n// ---- ");
  return strndup(s, e ? (size_t)(e - s) : strlen(s));
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* ---- mode emit ------------------------------------------------------------------------- */

static void check_launch_sizes(const Case *c) {
  const Kernel *k = c->k;
  int bs = cuda_kernel_block_size(k);
  int64_t extent = k->par == KP_COLS ? k->cols : k->rows, grid = cuda_kernel_grid_size(k, extent);
  CHECK(bs >= 32 && bs <= 1024 && (bs & (bs - 1)) == 0);
  CHECK(grid >= 1 && grid <= 65536);
  switch (c->want) {
  case CM_FLAT:
    CHECK(grid == (extent * k->cols + bs - 1) / bs);
    CHECK(bs == 256);
    break;
  case CM_BLOCK_ROW:
    CHECK(grid == extent);
    CHECK(bs >= k->cols / 8 || bs == 512);
    CHECK(bs <= k->cols);
    break;
  case CM_THREAD_ROW:
  case CM_COLS: CHECK(grid == (extent + bs - 1) / bs || (extent == 0 && grid == 1)); break;
  case CM_WARP_ROW: CHECK(grid == (extent * 32 + bs - 1) / bs || (extent == 0 && grid == 1)); break;
  case CM_MMA_TILE: CHECK(bs == 128); break;
  case CM_LANE_ROW: CHECK(grid == (extent + 31) / 32 && bs == 256); break;
  case CM_COLS_OWNED:
    CHECK(cuda_kernel_owners(k) > 1 && cuda_kernel_owners(k) * 64 <= k->rows);
    CHECK(grid == cuda_kernel_owners(k) * ((extent + bs - 1) / bs));
    break;
  }
  CHECK(cuda_kernel_grid_size(k, 0) == 1);
  CHECK(cuda_kernel_grid_size(k, (int64_t)1 << 40) == 65536);
}

static void check_kernel_text(const char *src, const Case *c) {
  const Kernel *k = c->k;
  char sig[256];
  snprintf(sig, sizeof sig,
           "extern \"C\" __global__ void __launch_bounds__(%d%s) %s(const cc_bufs bufs, long long n, "
           "const float *scalars) {",
           cuda_kernel_block_size(k), c->want == CM_MMA_TILE ? ", 2" : "", k->name);
  CHECK(count(src, sig) == 1);
  if (count(src, sig) != 1) fprintf(stderr, "  missing: %s\n", sig);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cuda_emit_kernel(f, k);
  fclose(f);
  CHECK(strstr(src, text) != NULL); /* cuda_emit_kernel writes what the source holds */
  free(text);
}

/* The scalar loop of a kernel's text: after its vector path (an aligned block of four
 * elements a thread, ending in a return) where it has one. */
static const char *scalar_path(const char *t) {
  const char *v = strstr(t, "in vectors */");
  const char *end = v ? strstr(v, "\n    return;\n  }\n") : NULL;
  return end ? end + strlen("\n    return;\n  }\n") : t;
}

static int mode_emit(void) {
  char *src = emit_all(), *again = emit_all();
  CHECK(!strcmp(src, again)); /* deterministic */
  char head[128];
  snprintf(head, sizeof head, "/* colossalc %s: %d CUDA kernels", COLOSSALC_VERSION, ncases);
  CHECK(!strncmp(src, head, strlen(head)));
  CHECK(!strstr(src, "#include"));
  CHECK(!strstr(src, "__restrict__"));
  for (int i = 0; i < ncases; i++) {
    const Case *c = &cases[i];
    CudaMapping m = cuda_kernel_mapping(c->k);
    if (m != c->want)
      fprintf(stderr, "%s: mapping %s, want %s\n", c->k->name, cuda_mapping_name(m), cuda_mapping_name(c->want));
    CHECK(m == c->want);
    check_launch_sizes(c);
    check_kernel_text(src, c);
  }
  char *t = kernel_text(src, "k_rows_hazard");
  CHECK(count(scalar_path(t), "__syncthreads();") == 3);
  CHECK(count(scalar_path(t), "if (threadIdx.x == 0) {") == 1);
  free(t);
  t = kernel_text(src, "k_softmax_inplace"); /* written buffer: plain loads; two block reductions */
  CHECK(!strstr(t, "__ldg") && strstr(t, "cc_block_max(") && strstr(t, "cc_block_sum(") &&
        strstr(t, "CC_SHARED(float, cc_sh, 32);"));
  free(t);
  t = kernel_text(src, "k_layernorm_grouped"); /* sum x and sum x^2 share one loop */
  CHECK(count(scalar_path(t), "for (int j") == 2);
  free(t);
  t = kernel_text(src, "k_layernorm"); /* read-only parameters through __ldg; its vector path */
  CHECK(strstr(t, "__ldg(b1 + ") && count(scalar_path(t), "for (int j") == 3);
  CHECK(scalar_path(t) != t && count(t, "for (int jb = 4 * (int)threadIdx.x;") == 3 && strstr(t, "const cc_f4 v") &&
        strstr(t, "CC_WR4("));
  free(t);
  t = kernel_text(src, "k_permute"); /* decomposed coordinates, linear reversed parts */
  CHECK(strstr(t, "const long long rc1 = ") && strstr(t, "const long long cc2 = ") && strstr(t, "r * -20LL"));
  free(t);
  t = kernel_text(src, "k_cross_entropy"); /* the gathered logit is loaded in the else branch only */
  const char *row = strstr(t, "if (threadIdx.x == 0) {"), *els = row ? strstr(row, "} else {") : NULL;
  const char *gather = row ? strstr(row, ") * 1LL, 600LL)") : NULL;
  CHECK(els && gather && els < gather);
  free(t);
  /* the numbered listing */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cuda_source_print_numbered(f, "a\nb\n\nc");
  fclose(f);
  CHECK(!strcmp(text, "    1 | a\n    2 | b\n    3 | \n    4 | c\n"));
  free(text);
  free(src);
  free(again);
  if (!failures) printf("codegen_cuda_emit: %d kernels, all checks passed\n", ncases);
  return failures != 0;
}

/* ---- NVRTC ------------------------------------------------------------------------------ */

static FILE *nvrtc_report; /* where NVRTC failures are reported (stderr) */

static void nvrtc_fail(const char *file, int line, const char *call, nvrtcResult r, nvrtcProgram prog,
                       const char *src) {
  fprintf(nvrtc_report, "%s:%d: %s: %s\n", file, line, call, nvrtcGetErrorString(r));
  size_t n = 0;
  if (prog && nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n > 1) {
    char *log = malloc(n);
    if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) fprintf(nvrtc_report, "NVRTC program log:\n%s\n", log);
    free(log);
  }
  fprintf(nvrtc_report, "generated source:\n");
  cuda_source_print_numbered(nvrtc_report, src);
}

/* STYLE.md: a library failure names the call, file and line, with the program log
 * and the generated source. */
#define NVRTC_CHECK(call, prog, src)                            \
  do {                                                          \
    nvrtcResult r_ = (call);                                    \
    if (r_ != NVRTC_SUCCESS) {                                  \
      nvrtc_fail(__FILE__, __LINE__, #call, r_, (prog), (src)); \
      goto fail;                                                \
    }                                                           \
  } while (0)

typedef struct Binary {
  char *data;
  size_t size;
  double ms;
  char *log;
} Binary;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Compile src for arch ("sm_XY": CUBIN, "compute_XY": PTX). 0 on success. */
static int nvrtc_compile(const char *src, const char *arch, bool bounds, Binary *out) {
  nvrtcProgram prog = NULL;
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  const char *opts[] = {archopt, "-std=c++17", "-DCOLOSSALC_CUDA_BOUNDS"};
  bool cubin = !strncmp(arch, "sm_", 3);
  size_t n = 0;
  *out = (Binary){0};
  NVRTC_CHECK(nvrtcCreateProgram(&prog, src, "colossalc_kernels.cu", 0, NULL, NULL), prog, src);
  double t0 = now_ms();
  NVRTC_CHECK(nvrtcCompileProgram(prog, bounds ? 3 : 2, opts), prog, src);
  out->ms = now_ms() - t0;
  NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &n), prog, src);
  out->log = calloc(n + 1, 1);
  NVRTC_CHECK(nvrtcGetProgramLog(prog, out->log), prog, src);
  NVRTC_CHECK(cubin ? nvrtcGetCUBINSize(prog, &out->size) : nvrtcGetPTXSize(prog, &out->size), prog, src);
  out->data = malloc(out->size + 1);
  NVRTC_CHECK(cubin ? nvrtcGetCUBIN(prog, out->data) : nvrtcGetPTX(prog, out->data), prog, src);
  nvrtcDestroyProgram(&prog);
  return 0;
fail:
  if (prog) nvrtcDestroyProgram(&prog);
  return 1;
}

static bool blank(const char *s) {
  for (; s && *s; s++)
    if (*s != ' ' && *s != '\n' && *s != '\r' && *s != '\t') return false;
  return true;
}

static void check_binary(const Binary *b, const char *arch, const char *src) {
  if (!blank(b->log)) { /* not even a warning */
    fprintf(stderr, "%s: NVRTC log not empty:\n%s\ngenerated source:\n", arch, b->log);
    cuda_source_print_numbered(stderr, src);
    failures++;
  }
  for (int i = 0; i < ncases; i++) {
    const char *name = cases[i].k->name;
    char want[160];
    bool found;
    if (!strncmp(arch, "sm_", 3)) found = memmem(b->data, b->size, name, strlen(name) + 1) != NULL; /* with its NUL */
    else snprintf(want, sizeof want, ".entry %s(", name), found = memmem(b->data, b->size, want, strlen(want)) != NULL;
    if (!found) fprintf(stderr, "%s: kernel %s not in the binary\n", arch, name);
    CHECK(found);
  }
}

static int mode_nvrtc(const char *arch) {
  nvrtc_report = stderr;
  char *src = emit_all();
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  for (int bounds = 0; bounds <= 1; bounds++) {
    Binary b;
    if (nvrtc_compile(src, arch, bounds, &b)) {
      failures++;
      break;
    }
    check_binary(&b, arch, src);
    printf("NVRTC %d.%d %s%s: %d kernels, %zu bytes of source -> %zu bytes in %.0f ms\n", major, minor, arch,
           bounds ? " (bounds checks)" : "", ncases, strlen(src), b.size, b.ms);
    free(b.data);
    free(b.log);
  }
  free(src);
  if (!failures) printf("codegen_cuda_nvrtc %s: all checks passed\n", arch);
  return failures != 0;
}

/* A broken source must fail with the log and the numbered source in the report. */
static int mode_nvrtc_report(void) {
  char *src = emit_all();
  size_t n = strlen(src);
  int lines = count(src, "\n");
  char *bad = malloc(n + 64);
  snprintf(bad, n + 64, "%sthis is not CUDA;\n", src);
  char *text = NULL;
  size_t len = 0;
  nvrtc_report = open_memstream(&text, &len);
  Binary b;
  int rc = nvrtc_compile(bad, "sm_80", false, &b);
  fclose(nvrtc_report);
  char numbered[64];
  snprintf(numbered, sizeof numbered, "%5d | this is not CUDA;", lines + 1);
  CHECK(rc != 0);
  CHECK(strstr(text, "NVRTC_ERROR_COMPILATION") && strstr(text, "nvrtcCompileProgram"));
  CHECK(strstr(text, "NVRTC program log:") && strstr(text, "error"));
  CHECK(strstr(text, "    1 | /* colossalc") && strstr(text, numbered));
  fputs(text, stdout); /* what a user would see */
  if (rc == 0) {
    free(b.data);
    free(b.log);
  }
  free(text);
  free(bad);
  free(src);
  if (!failures) printf("codegen_cuda_nvrtc_report: all checks passed\n");
  return failures != 0;
}

/* ---- running kernels and comparing with kernel_eval ------------------------------ */

static uint64_t rng_state;
static uint32_t rng_next(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

/* Tiers for one case, filled from a seed the same way every time. */
static void tiers_fill(const Case *c, char **tiers) {
  rng_state = 0x9e3779b97f4a7c15ull ^ (uint64_t)(c - cases);
  for (int t = 0; t < TIERS; t++) {
    tiers[t] = calloc((size_t)c->tier_bytes[t], 1);
    ir_assert(tiers[t]);
  }
  for (int b = 0; b < c->k->nbufs; b++) {
    const KBuf *kb = &c->k->bufs[b];
    for (int64_t i = 0; i < kb->numel; i++) {
      float u = (float)(rng_next() >> 8) / (float)(1 << 24);
      float *fp = (float *)(tiers[kb->tier] + kb->offset) + i;
      uint16_t *hp = (uint16_t *)(tiers[kb->tier] + kb->offset) + i;
      if (kbuf_elem_bytes(kb) == 2 && c->lo[b] == c->hi[b]) /* 16-bit: every pattern, NaNs and subnormals too */
        *hp = (uint16_t)(rng_next() >> 8);
      else if (kbuf_elem_bytes(kb) == 2) *hp = kx_from_f32(kb->dtype, c->lo[b] + u * (c->hi[b] - c->lo[b]));
      else if (kb->dtype == DT_I32) ((int32_t *)fp)[0] = (int32_t)c->lo[b] + (int32_t)(u * (c->hi[b] - c->lo[b]));
      else if (c->half_steps[b]) *fp = c->lo[b] + 0.5f * floorf(u * (c->hi[b] - c->lo[b]) * 2);
      else *fp = c->lo[b] + u * (c->hi[b] - c->lo[b]);
    }
  }
  if (c->fixup) c->fixup(c, tiers);
}

static void tiers_free(char **tiers) {
  for (int t = 0; t < TIERS; t++) free(tiers[t]);
}

/* exact: the same operations in the same order (bit for bit, NaN for NaN). */
static bool close_enough(float got, float want, bool exact, double *maxdiff) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  if (exact && memcmp(&got, &want, sizeof got)) {
    if (fabs((double)got - want) > *maxdiff) *maxdiff = fabs((double)got - want);
    return false;
  }
  if (isinf(want) || isinf(got)) return got == want;
  double d = fabs((double)got - want);
  if (d > *maxdiff) *maxdiff = d;
  return d <= 1e-5 + 1e-4 * fabs(want);
}

/* Every buffer of the case: f32 within tolerance (where not exact, the case's of the
 * buffer's largest |value| where it has one), i32 exactly. */
static bool tiers_match(const Case *c, char *const *want, char *const *got, bool exact, const char *label,
                        double *maxdiff) {
  int bad = 0;
  for (int b = 0; b < c->k->nbufs; b++) {
    const KBuf *kb = &c->k->bufs[b];
    double big = 0;
    for (int64_t i = 0; !exact && c->tol > 0 && kb->dtype == DT_F32 && i < kb->numel; i++)
      big = fmax(big, fabs(((const float *)(want[kb->tier] + kb->offset))[i]));
    for (int64_t i = 0; i < kb->numel; i++) {
      int64_t eb = kbuf_elem_bytes(kb);
      const char *w = want[kb->tier] + kb->offset + eb * i, *g = got[kb->tier] + kb->offset + eb * i;
      float wf, gf;
      if (eb == 2) { /* 16-bit stores round one f32 value: the same bits, any NaN for a NaN */
        uint16_t wh, gh;
        memcpy(&wh, w, 2), memcpy(&gh, g, 2);
        wf = kx_to_f32(kb->dtype, wh), gf = kx_to_f32(kb->dtype, gh);
      } else {
        memcpy(&wf, w, 4);
        memcpy(&gf, g, 4);
      }
      bool rel = !exact && c->tol > 0 && kb->dtype == DT_F32; /* max |diff| then relative to big */
      bool ok = kb->dtype == DT_I32 ? !memcmp(w, g, 4)
                : rel               ? fabs((double)gf - wf) <= c->tol * big
                                    : close_enough(gf, wf, exact || eb == 2, maxdiff);
      if (rel) *maxdiff = fmax(*maxdiff, fabs((double)gf - wf) / big);
      if (!ok && bad++ < 5)
        fprintf(stderr, "%s %s: %s[%lld] = %.9g, kernel_eval gives %.9g\n", c->k->name, label, kb->name, (long long)i,
                (double)gf, (double)wf);
    }
  }
  return bad == 0;
}

typedef int LaunchFn(void *ctx, const Case *c, unsigned grid, unsigned block, char **tiers);

/* Runs the case's kernel with each launch shape and compares with kernel_eval: bit for
 * bit when `exact` and the kernel sums in the evaluator's order (all but block
 * reductions, which add in a tree, and tensor-core tiles), else within a tolerance. */
static void run_case(const Case *c, LaunchFn *launch, void *ctx, const char *where, bool exact) {
  const Kernel *k = c->k;
  int64_t extent = k->par == KP_COLS ? k->cols : k->rows, grid = cuda_kernel_grid_size(k, extent);
  int bs = cuda_kernel_block_size(k);
  unsigned shapes[4][2] = {
      {(unsigned)grid, (unsigned)bs}, {grid < 2 ? 1u : 2u, (unsigned)bs}, {(unsigned)grid, 32}, {(unsigned)grid, 64}};
  /* sums in another order: block reductions' trees, tensor-core tiles */
  bool tree = c->want == CM_BLOCK_ROW || c->want == CM_LANE_ROW || c->want == CM_MMA_TILE;
  int nshapes = tree ? 4 : 2; /* must not depend on the block size */
  char *want[TIERS], *got[TIERS];
  tiers_fill(c, want);
  kernel_eval(k, want, scalars);
  double maxdiff = 0;
  bool ok = true;
  for (int s = 0; s < nshapes; s++) {
    if (shapes[s][1] > (unsigned)bs) continue;
    tiers_fill(c, got);
    char label[64];
    snprintf(label, sizeof label, "(%s, grid %u, block %u)", where, shapes[s][0], shapes[s][1]);
    if (launch(ctx, c, shapes[s][0], shapes[s][1], got)) {
      fprintf(stderr, "%s %s: launch failed\n", k->name, label);
      ok = false;
    } else ok &= tiers_match(c, want, got, exact && !tree, label, &maxdiff);
    tiers_free(got);
  }
  tiers_free(want);
  printf("%-22s %-17s grid %5lld x %3d: %s, max |diff| %.3g\n", k->name, cuda_mapping_name(cuda_kernel_mapping(k)),
         (long long)grid, bs, ok ? "ok" : "MISMATCH", maxdiff);
  CHECK(ok);
}

/* ---- mode host: the emitted source as C++ behind a shim ------------------------------ */

/* The unit the host compiler builds: the shim of the CUDA built-ins, the generated
 * source, the launcher (tests/cuda_emul/host_shim.h and host_launch.h). */
static const char shim_text[] = "#include \"" COLOSSALC_SOURCE_DIR "/tests/cuda_emul/host_shim.h\"\n"
                                "#include \"kernels.cu\"\n"
                                "#include \"" COLOSSALC_SOURCE_DIR "/tests/cuda_emul/host_launch.h\"\n";

typedef int HostLaunch(void *kernel, unsigned grid, unsigned block, char *const *bufs, long long n,
                       const float *scalars);
typedef struct HostCtx {
  void *so;
  HostLaunch *launch;
} HostCtx;

static int host_launch(void *ctx, const Case *c, unsigned grid, unsigned block, char **tiers) {
  HostCtx *h = ctx;
  void *fn = dlsym(h->so, c->k->name);
  if (!fn) {
    fprintf(stderr, "dlsym %s: %s\n", c->k->name, dlerror());
    return 1;
  }
  char *bufs[K_MAX_BUFS] = {0};
  kernel_bind(c->k, tiers, bufs);
  return h->launch(fn, grid, block, bufs, c->k->par == KP_COLS ? c->k->cols : c->k->rows, scalars);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f)) {
    perror(path);
    exit(2);
  }
}

/* Writes src and the shim into a fresh directory, compiles them into a shared
 * object and opens it. dir: "cuda-host-XXXXXX", filled in. */
static int host_build(const char *src, char *dir, HostCtx *h) {
  char path[256], cmd[1024];
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(path, sizeof path, "%s/kernels.cu", dir);
  write_file(path, src);
  snprintf(path, sizeof path, "%s/shim.cpp", dir);
  write_file(path, shim_text);
  snprintf(cmd, sizeof cmd,
           "%s -std=c++17 -O1 -g -fPIC -shared -pthread -Wall -Wextra -Wno-unused-parameter -Werror "
           "-DCOLOSSALC_CUDA_BOUNDS %s -o %s/kernels.so %s/shim.cpp",
           COLOSSALC_HOST_CXX, COLOSSALC_HOST_CXX_FLAGS, dir, dir);
  double t0 = now_ms();
  if (system(cmd) != 0) {
    fprintf(stderr, "host compile failed: %s\ngenerated source:\n", cmd);
    cuda_source_print_numbered(stderr, src);
    return 1;
  }
  printf("host C++ compile of the generated source: %.0f ms\n", now_ms() - t0);
  snprintf(path, sizeof path, "%s/kernels.so", dir);
  h->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h->so) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  *(void **)&h->launch = dlsym(h->so, "cc_host_launch");
  if (!h->launch) {
    fprintf(stderr, "dlsym cc_host_launch: %s\n", dlerror());
    return 1;
  }
  return 0;
}

static void host_close(HostCtx *h, const char *dir) {
  char cmd[300];
  if (h->so) dlclose(h->so);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (!failures && !getenv("KEEP") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static int mode_host(void) {
  char dir[] = "cuda-host-XXXXXX";
  char *src = emit_all();
  HostCtx h = {0};
  if (host_build(src, dir, &h)) return 1;
  for (int i = 0; i < ncases; i++)
    if (!cases[i].no_eval) run_case(&cases[i], host_launch, &h, "host", true);
  host_close(&h, dir);
  free(src);
  if (!failures) printf("codegen_cuda_host: every kernel kernel_eval can run matches it\n");
  return failures != 0;
}

/* ---- mode lowered: the kernels of a real model ---------------------------------------- */

typedef struct LRun {
  const Program *p;
  HostCtx *h;
  char *ref[TIERS], *got[TIERS];
  double *worst; /* per kernel: max |got - want| / max |want| over what it wrote */
  float scalars[16];
} LRun;

/* Bit for bit, except after block reductions (tree order): there 1e-4 of the largest
 * value, as layernorm's backward subtracts nearly equal sums. The same kernels in the
 * evaluator's order (thread per row) match exactly. Attention on tensor cores rounds
 * two factors of every term to the 16-bit type (the probabilities or dS, and an
 * operand that was f32, as the gradient of the output), each within u (2^-8 in bf16,
 * 2^-11 in f16) of itself: 2u of the sum of the terms' magnitudes, taken as twice the
 * largest result (dS's terms cancel), on top of the result's own rounding. */
static double lowered_tolerance(const Kernel *k) {
  CudaMapping m = cuda_kernel_mapping(k);
  double t = lowered_store_tolerance(k, m == CM_BLOCK_ROW || m == CM_LANE_ROW ? 1e-4 : 0);
  if (m == CM_MMA_TILE) t += 4 * (k->bufs[k->attn->q.buf].dtype == DT_BF16 ? 0x1p-8 : 0x1p-11);
  return t;
}

static void lowered_kernel(LRun *r, const IsaInstr *in, char **before) {
  int id = in->kernel.id;
  const Kernel *k = r->p->kernels[id];
  void *fn = dlsym(r->h->so, r->p->code[r->p->code_of[id]]->name); /* the code it shares */
  char *bufs[K_MAX_BUFS] = {0};
  kernel_bind(k, r->got, bufs);
  for (int t = 0; t < TIERS; t++) {
    memcpy(before[t], r->ref[t], (size_t)r->p->tiers[t]);
    memcpy(r->got[t], r->ref[t], (size_t)r->p->tiers[t]);
  }
  /* At most 8 blocks of 32 threads (grid-stride loops and blockDim-strided rows do
   * the rest): each barrier of the shim is then 32 OS threads. The hand-made kernels
   * run at their full launch sizes. */
  int64_t grid = cuda_kernel_grid_size(k, in->kernel.extent);
  if (!fn || r->h->launch(fn, grid < 8 ? (unsigned)grid : 8u, 32, bufs, in->kernel.extent, r->scalars)) {
    fprintf(stderr, "%s: cannot launch\n", k->name);
    r->worst[id] = INFINITY;
    return;
  }
  kernel_eval(k, r->ref, r->scalars);
  double e = lowered_written_error(r->p, r->ref, r->got, before), tol = lowered_tolerance(k);
  if (e > tol && !(r->worst[id] > tol)) kernel_print(stdout, k); /* the first failure, as a bug report */
  if (!(e <= r->worst[id])) r->worst[id] = e;
}

static void lowered_seq(LRun *r, const PSeq *s, char **before) {
  for (int i = 0; i < s->n; i++) {
    const IsaInstr *in = &s->v[i];
    if (in->op == ISA_KERNEL) lowered_kernel(r, in, before);
    else if (in->op == ISA_GEMM) lowered_gemm_ref(&in->gemm, r->ref);
    else memset(r->ref[in->zero.tier] + in->zero.offset, 0, (size_t)in->zero.bytes);
  }
}

static int mode_lowered(int argc, char **argv) {
  Arena *a = arena_new();
  Program *p = lowered_model(a, argc, argv);
  if (!p) {
    arena_free(a);
    return 1;
  }
  program_share_kernels(p);
  char *src = cuda_emit_source((const Kernel *const *)p->code, p->ncode);
  Binary b;
  nvrtc_report = stderr;
  /* In the sanitizer build (its host flags) NVRTC's compile is left to the normal build's
   * run of this test, as for the vendor-labelled tests (tests/labels.cmake): the source
   * is the same, and the sanitizers would watch NVRTC's time, not ours. */
  if (COLOSSALC_HOST_CXX_FLAGS[0])
    printf("NVRTC sm_80: not compiled in the sanitizer build (the normal build's run of this test does)\n");
  else if (nvrtc_compile(src, "sm_80", false, &b)) failures++;
  else {
    if (!blank(b.log)) fprintf(stderr, "sm_80: NVRTC log not empty:\n%s\n", b.log);
    CHECK(blank(b.log));
    for (int i = 0; i < p->ncode; i++) CHECK(memmem(b.data, b.size, p->code[i]->name, strlen(p->code[i]->name) + 1));
    printf("NVRTC sm_80: %d kernels (%d codes) of %s, %zu bytes of source, in %.0f ms\n", p->nkernels, p->ncode,
           p->g->name, strlen(src), b.ms);
    free(b.data);
    free(b.log);
  }
  char dir[] = "cuda-host-XXXXXX";
  HostCtx h = {0};
  if (host_build(src, dir, &h)) return 1;
  LRun r = {.p = p, .h = &h, .scalars = {1e-2f, 10.0f, 20.0f, 0.75f, 1, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f, 1.0f, 1.0f}};
  char *before[TIERS];
  r.worst = calloc((size_t)p->nkernels + 1, sizeof *r.worst);
  for (int t = 0; t < TIERS; t++) {
    r.ref[t] = calloc(1, (size_t)p->tiers[t] + 64);
    r.got[t] = malloc((size_t)p->tiers[t] + 64);
    before[t] = malloc((size_t)p->tiers[t] + 64);
  }
  lowered_init(p, r.ref, 88172645463325252ull);
  lowered_seq(&r, &p->forward, before);
  lowered_seq(&r, &p->step, before);
  lowered_seq(&r, &p->gradnorm, before);
  lowered_seq(&r, &p->update, before);
  int bad = 0;
  for (int i = 0; i < p->nkernels; i++) {
    bool ok = r.worst[i] <= lowered_tolerance(p->kernels[i]);
    bad += !ok;
    printf("%-4s %-40s %-17s max error %.3g\n", ok ? "ok" : "FAIL", p->kernels[i]->name,
           cuda_mapping_name(cuda_kernel_mapping(p->kernels[i])), r.worst[i]);
  }
  printf("%s: %d kernels, %d failed\n", p->g->name, p->nkernels, bad);
  failures += bad;
  host_close(&h, dir);
  for (int t = 0; t < TIERS; t++) {
    free(r.ref[t]);
    free(r.got[t]);
    free(before[t]);
  }
  free(r.worst);
  free(src);
  arena_free(a);
  return failures != 0;
}

/* ---- mode gpu: the same on a GPU, through the driver API ------------------------------ */

/* The few driver entry points, loaded with dlopen as the runtime will (types from
 * the toolkit's cuda.h; nothing links libcuda). */
typedef struct Cu {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void **, void **);
  CUresult (*CtxSynchronize)(void);
  CUmodule module;
} Cu;

#define CU_CHECK(call)                                                                   \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      fprintf(stderr, "%s:%d: %s: CUDA error %d\n", __FILE__, __LINE__, #call, (int)r_); \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

static bool cu_load(Cu *cu, void *lib) {
  struct {
    void **slot;
    const char *name;
  } syms[] = {
      {(void **)&cu->Init, "cuInit"},
      {(void **)&cu->DeviceGetCount, "cuDeviceGetCount"},
      {(void **)&cu->DeviceGet, "cuDeviceGet"},
      {(void **)&cu->DeviceGetAttribute, "cuDeviceGetAttribute"},
      {(void **)&cu->DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
      {(void **)&cu->CtxSetCurrent, "cuCtxSetCurrent"},
      {(void **)&cu->ModuleLoadData, "cuModuleLoadData"},
      {(void **)&cu->ModuleGetFunction, "cuModuleGetFunction"},
      {(void **)&cu->MemAlloc, "cuMemAlloc_v2"},
      {(void **)&cu->MemFree, "cuMemFree_v2"},
      {(void **)&cu->MemcpyHtoD, "cuMemcpyHtoD_v2"},
      {(void **)&cu->MemcpyDtoH, "cuMemcpyDtoH_v2"},
      {(void **)&cu->LaunchKernel, "cuLaunchKernel"},
      {(void **)&cu->CtxSynchronize, "cuCtxSynchronize"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++)
    if (!(*syms[i].slot = dlsym(lib, syms[i].name))) return false;
  return true;
}

static int gpu_launch(void *ctx, const Case *c, unsigned grid, unsigned block, char **tiers) {
  Cu *cu = ctx;
  CUfunction fn;
  CUdeviceptr dt[TIERS] = {0}, dsc;
  CU_CHECK(cu->ModuleGetFunction(&fn, cu->module, c->k->name));
  for (int t = 0; t < TIERS; t++) {
    CU_CHECK(cu->MemAlloc(&dt[t], (size_t)c->tier_bytes[t]));
    CU_CHECK(cu->MemcpyHtoD(dt[t], tiers[t], (size_t)c->tier_bytes[t]));
  }
  struct {
    CUdeviceptr p[K_MAX_BUFS];
  } bufs = {{0}}; /* cc_bufs, by value */
  for (int i = 0; i < c->k->nbufs; i++) bufs.p[i] = dt[c->k->bufs[i].tier] + (CUdeviceptr)c->k->bufs[i].offset;
  CU_CHECK(cu->MemAlloc(&dsc, sizeof scalars));
  CU_CHECK(cu->MemcpyHtoD(dsc, scalars, sizeof scalars));
  long long n = c->k->par == KP_COLS ? c->k->cols : c->k->rows;
  void *params[] = {&bufs, &n, &dsc};
  CU_CHECK(cu->LaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL));
  CU_CHECK(cu->CtxSynchronize());
  for (int t = 0; t < TIERS; t++) {
    CU_CHECK(cu->MemcpyDtoH(tiers[t], dt[t], (size_t)c->tier_bytes[t]));
    CU_CHECK(cu->MemFree(dt[t]));
  }
  CU_CHECK(cu->MemFree(dsc));
  return 0;
}

static int mode_gpu(void) {
  Cu cu = {0};
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int ndev = 0, major, minor;
  CUdevice dev;
  if (!lib || !cu_load(&cu, lib) || cu.Init(0) || cu.DeviceGetCount(&ndev) || ndev == 0) {
    printf("codegen_cuda_gpu: no GPU (%s): skipped\n", lib ? "cuInit failed or no device" : "no libcuda.so.1");
    return 77;
  }
  CUcontext ctx;
  CU_CHECK(cu.DeviceGet(&dev, 0));
  CU_CHECK(cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU_CHECK(cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  CU_CHECK(cu.DevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cu.CtxSetCurrent(ctx));
  char arch[32];
  snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
  nvrtc_report = stderr;
  char *src = emit_all();
  Binary b;
  if (nvrtc_compile(src, arch, true, &b)) return 1;
  CU_CHECK(cu.ModuleLoadData(&cu.module, b.data));
  for (int i = 0; i < ncases; i++)
    if (!cases[i].no_eval) run_case(&cases[i], gpu_launch, &cu, arch, false);
  free(b.data);
  free(b.log);
  free(src);
  if (!failures) printf("codegen_cuda_gpu %s: %d kernels match kernel_eval\n", arch, ncases);
  return failures != 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* interleaved with stderr in the CTest log */
  A = arena_new();
  build_cases();
  const char *mode = argc > 1 ? argv[1] : "";
  int rc;
  if (!strcmp(mode, "emit")) rc = mode_emit();
  else if (!strcmp(mode, "nvrtc") && argc > 2) rc = mode_nvrtc(argv[2]);
  else if (!strcmp(mode, "nvrtc-report")) rc = mode_nvrtc_report();
  else if (!strcmp(mode, "host")) rc = mode_host();
  else if (!strcmp(mode, "gpu")) rc = mode_gpu();
  else if (!strcmp(mode, "lowered") && argc > 2) rc = mode_lowered(argc - 2, argv + 2);
  else {
    fprintf(stderr, "usage: %s emit | nvrtc ARCH | nvrtc-report | host | lowered MODEL [NAME=VALUE ...] | gpu\n",
            argv[0]);
    rc = 2;
  }
  arena_free(A);
  return rc;
}
