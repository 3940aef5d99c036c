/* The reference interpreter (ir/interp.h, where each op's meaning is written): one
 * function per op, run_<name>, found by name from ir/ops.def like the other per-op
 * functions, each a plain loop nest in double precision, written for obviousness,
 * not speed.
 * Generated kernels are checked against it, and tests/unit/test_gradcheck.c checks
 * every op's gradient rule with it against finite differences. */
#include "ir/interp.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ir/rand.h"

/* ---- helpers ------------------------------------------------------------------ */

static _Noreturn void fail(const Node *n, const char *what, double v, int64_t lim) {
  char msg[256];
  snprintf(msg, sizeof msg, "interp: %%%d %s: %s %g outside [0, %lld)", n->id, op_info(n->op)->name, what, v,
           (long long)lim);
  diag_internal(__FILE__, __LINE__, msg);
}

/* An i32 value used as an index into [0, lim). */
static int64_t index_in(const Node *n, const char *what, double v, int64_t lim) {
  if (!(v >= 0 && v < (double)lim) || v != floor(v)) fail(n, what, v, lim);
  return (int64_t)v;
}

static int64_t numel(const Node *n) { return shape_numel(&n->shape); }
static int64_t last(const Shape *s) { return s->ndim ? s->d[s->ndim - 1] : 1; }
static int axis_of(const Node *n, const char *attr, int ndim) {
  int64_t a = attr_int(n, attr);
  return (int)(a < 0 ? a + ndim : a);
}

/* s seen as [outer, len, inner] around axis a. */
static void split_at(const Shape *s, int a, int64_t *outer, int64_t *len, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < a; i++) *outer *= s->d[i];
  *len = s->d[a];
  for (int i = a + 1; i < s->ndim; i++) *inner *= s->d[i];
}

/* Element strides of a tensor of shape `in` broadcast to `out` (numpy: aligned from
 * the right; 0 along axes where in has size 1 or no axis). */
static void bcast_strides(const Shape *in, const Shape *out, int64_t st[MAX_DIMS]) {
  int64_t s = 1;
  for (int i = out->ndim - 1; i >= 0; i--) {
    int k = in->ndim - out->ndim + i;
    st[i] = k < 0 || in->d[k] == 1 ? 0 : s;
    if (k >= 0) s *= in->d[k];
  }
}

static void contig_strides(const Shape *s, int64_t st[MAX_DIMS]) {
  int64_t m = 1;
  for (int i = s->ndim - 1; i >= 0; i--) {
    st[i] = m;
    m *= s->d[i];
  }
}

/* The offset, under strides st, of flat element i of a tensor of shape s. */
static int64_t offset_of(int64_t i, const Shape *s, const int64_t *st) {
  int64_t off = 0;
  for (int d = s->ndim - 1; d >= 0; d--) {
    off += (i % s->d[d]) * st[d];
    i /= s->d[d];
  }
  return off;
}

static double sigmoid(double x) { return 1 / (1 + exp(-x)); }
static const double GELU_C = 0.7978845608028654; /* sqrt(2/pi) */
static double gelu(double x) { return 0.5 * x * (1 + tanh(GELU_C * (x + 0.044715 * x * x * x))); }
static double gelu_d(double x) {
  double t = tanh(GELU_C * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * x * x);
}
static double silu_d(double x) {
  double s = sigmoid(x);
  return s * (1 + x * (1 - s));
}
static double gelu_erf(double x) { return 0.5 * x * (1 + erf(x * M_SQRT1_2)); }
/* 0.5 (1 + erf(x / sqrt 2)) + x phi(x), phi the standard normal density */
static double gelu_erf_d(double x) {
  return 0.5 * (1 + erf(x * M_SQRT1_2)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
}

/* ---- per-op evaluation: run_<name>, found by name from ir/ops.def ---------------- */

/* Each run_<name> computes out (numel of n) from in[0..n->nin) (numel of each input);
 * step feeds dropout's key. interp_eval calls them through run_rules. */

/* An op the interpreter does not compute: an internal error naming the node and op. */
static _Noreturn void not_computed(const Node *n, const char *why) {
  char msg[256];
  snprintf(msg, sizeof msg, "interp: %%%d %s: %s", n->id, op_info(n->op)->name, why);
  diag_internal(__FILE__, __LINE__, msg);
}

/* out = x, element for element (reshape, and collectives over one rank). */
static void copy_input(const Node *n, const double *x, double *out) { memcpy(out, x, numel(n) * sizeof *out); }

/* ---- sources ---------------------------------------------------------------------- */

static void run_input(const Node *n, const double *const *in, double *out, int64_t step) {
  not_computed(n, "inputs and parameters are given");
}
static void run_param(const Node *n, const double *const *in, double *out, int64_t step) {
  not_computed(n, "inputs and parameters are given");
}
static void run_const(const Node *n, const double *const *in, double *out, int64_t step) {
  out[0] = attr_float(n, "value");
}
static void run_arange(const Node *n, const double *const *in, double *out, int64_t step) {
  for (int64_t i = 0; i < numel(n); i++) out[i] = (double)i;
}
/* the interpreter's gradients are unscaled */
static void run_loss_scale(const Node *n, const double *const *in, double *out, int64_t step) { out[0] = 1; }

/* ---- elementwise ----------------------------------------------------------------- */

static double plus(double a, double b) { return a + b; }
static double minus(double a, double b) { return a - b; }
static double times(double a, double b) { return a * b; }
static double over(double a, double b) { return a / b; }

/* out = f(a, b), a and b broadcast to out's shape. */
static void binary(const Node *n, const double *const *in, double *out, double (*f)(double, double)) {
  int64_t sa[MAX_DIMS], sb[MAX_DIMS], N = numel(n);
  bcast_strides(&n->in[0]->shape, &n->shape, sa);
  bcast_strides(&n->in[1]->shape, &n->shape, sb);
  for (int64_t i = 0; i < N; i++) out[i] = f(in[0][offset_of(i, &n->shape, sa)], in[1][offset_of(i, &n->shape, sb)]);
}
static void run_add(const Node *n, const double *const *in, double *out, int64_t step) { binary(n, in, out, plus); }
static void run_sub(const Node *n, const double *const *in, double *out, int64_t step) { binary(n, in, out, minus); }
static void run_mul(const Node *n, const double *const *in, double *out, int64_t step) { binary(n, in, out, times); }
static void run_div(const Node *n, const double *const *in, double *out, int64_t step) { binary(n, in, out, over); }

static double negate(double x) { return -x; }
static double silu(double x) { return x * sigmoid(x); }
static double relu(double x) { return x > 0 ? x : 0; }

/* out = f(x), element for element. */
static void unary(const Node *n, const double *const *in, double *out, double (*f)(double)) {
  for (int64_t i = 0, N = numel(n); i < N; i++) out[i] = f(in[0][i]);
}
static void run_neg(const Node *n, const double *const *in, double *out, int64_t step) { unary(n, in, out, negate); }
static void run_gelu(const Node *n, const double *const *in, double *out, int64_t step) { unary(n, in, out, gelu); }
static void run_gelu_erf(const Node *n, const double *const *in, double *out, int64_t step) {
  unary(n, in, out, gelu_erf);
}
static void run_silu(const Node *n, const double *const *in, double *out, int64_t step) { unary(n, in, out, silu); }
static void run_relu(const Node *n, const double *const *in, double *out, int64_t step) { unary(n, in, out, relu); }

static double relu_d(double x) { return x > 0; }

/* An activation's gradient op (x, g): g f'(x), d being f'. */
static void act_grad(const Node *n, const double *const *in, double *out, double (*d)(double)) {
  for (int64_t i = 0, N = numel(n); i < N; i++) out[i] = in[1][i] * d(in[0][i]);
}
static void run_gelu_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  act_grad(n, in, out, gelu_d);
}
static void run_gelu_erf_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  act_grad(n, in, out, gelu_erf_d);
}
static void run_silu_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  act_grad(n, in, out, silu_d);
}
static void run_relu_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  act_grad(n, in, out, relu_d);
}

static void run_dropout(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0];
  double p = attr_float(n, "p");
  int64_t seed = attr_int(n, "seed");
  for (int64_t i = 0, N = numel(n); i < N; i++)
    out[i] = p == 0 ? x[i] : (double)dropout_uniform(seed, step, i) >= (float)p ? x[i] / (1 - p) : 0;
}

/* x rounded to a binary format of p significand bits, smallest normal exponent emin
 * (as 2^emin) and largest finite value maxv; ties to even. */
static double round_binary(double x, int p, int emin, double maxv, bool has_inf) {
  if (x == 0 || isnan(x)) return x;
  if (isinf(x)) return has_inf ? x : NAN;
  int e;
  frexp(x, &e);                                    /* |x| in [2^(e-1), 2^e) */
  int q = (e - 1 < emin ? emin : e - 1) - (p - 1); /* the exponent of one ulp */
  double r = ldexp(nearbyint(ldexp(x, -q)), q);
  if (fabs(r) > maxv) return has_inf ? copysign(INFINITY, x) : NAN;
  return r;
}

double interp_round(double x, DType t) {
  switch (t) {
  case DT_F32: return round_binary(x, 24, -126, FLT_MAX, true);
  case DT_BF16: return round_binary(x, 8, -126, ldexp(255, 120), true);
  case DT_F16: return round_binary(x, 11, -14, 65504, true);
  case DT_E4M3: return round_binary(x, 4, -6, 448, false);
  case DT_E5M2: return round_binary(x, 3, -14, 57344, true);
  case DT_I32:
    if (!(x > -2147483649.0 && x < 2147483648.0)) diag_internal(__FILE__, __LINE__, "interp: cast to i32 out of range");
    return trunc(x);
  case DT_COUNT: break;
  }
  unreachable();
}

static void run_cast(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0];
  DType to = (DType)attr_int(n, "dtype");
  for (int64_t i = 0, N = numel(n); i < N; i++) out[i] = to == n->in[0]->dtype ? x[i] : interp_round(x[i], to);
}

/* x [..., S, H*hd]: each head's halves rotated by the position angle. */
static void run_rotary(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0];
  const Shape *s = &n->shape;
  int64_t D = last(s), S = s->d[s->ndim - 2], H = attr_int(n, "heads"), hd = D / H, half = hd / 2;
  double sign = attr_int(n, "inverse") ? -1 : 1;
  for (int64_t r = 0, rows = numel(n) / D; r < rows; r++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < half; i++) {
        double ang = (double)(r % S) * rotary_freq(n, i, hd);
        double c = cos(ang), sn = sign * sin(ang);
        int64_t k = r * D + h * hd + i;
        double x1 = x[k], x2 = x[k + half];
        out[k] = x1 * c - x2 * sn;
        out[k + half] = x2 * c + x1 * sn;
      }
}

/* ---- gathers and contractions ---------------------------------------------------- */

static void run_embedding(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *table = in[0], *idx = in[1];
  int64_t V = n->in[0]->shape.d[0], D = n->in[0]->shape.d[1];
  for (int64_t r = 0, R = numel(n->in[1]); r < R; r++) {
    int64_t row = index_in(n, "index", idx[r], V);
    memcpy(out + r * D, table + row * D, D * sizeof *out);
  }
}

static void run_embedding_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *idx = in[0], *g = in[1];
  int64_t V = attr_int(n, "rows"), D = last(&n->in[1]->shape);
  memset(out, 0, V * D * sizeof *out);
  for (int64_t r = 0, R = numel(n->in[0]); r < R; r++) {
    int64_t row = index_in(n, "index", idx[r], V);
    for (int64_t d = 0; d < D; d++) out[row * D + d] += g[r * D + d];
  }
}

/* C = op(A) op(B) for one matrix of each: A [m, k] (or [k, m]), B [k, nn] (or [nn, k]). */
static void gemm(const double *A, const double *B, double *C, int64_t m, int64_t nn, int64_t k, bool ta, bool tb) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < nn; j++) {
      double acc = 0;
      for (int64_t p = 0; p < k; p++) acc += A[ta ? p * m + i : i * k + p] * B[tb ? j * k + p : p * nn + j];
      C[i * nn + j] = acc;
    }
}

static void run_matmul(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *a = in[0], *b = in[1];
  const Shape *sa = &n->in[0]->shape, *sb = &n->in[1]->shape;
  bool ta = attr_int(n, "transpose_a"), tb = attr_int(n, "transpose_b");
  int64_t m = n->shape.d[n->shape.ndim - 2], nn = last(&n->shape), k = sa->d[sa->ndim - (ta ? 2 : 1)];
  Shape batch = n->shape, ba = *sa, bb = *sb;
  batch.ndim -= 2;
  ba.ndim -= 2;
  bb.ndim -= 2;
  int64_t st_a[MAX_DIMS], st_b[MAX_DIMS]; /* in matrices */
  bcast_strides(&ba, &batch, st_a);
  bcast_strides(&bb, &batch, st_b);
  for (int64_t t = 0, nb = shape_numel(&batch); t < nb; t++)
    gemm(a + offset_of(t, &batch, st_a) * m * k, b + offset_of(t, &batch, st_b) * k * nn, out + t * m * nn, m, nn, k,
         ta, tb);
}

/* ---- fp8 (the state's meaning is in ir/ops.def) -------------------------------------------- */

/* The scale of a state: fmax / amax / 2^margin, 1 while it has no amax. */
static double fp8_scale(const double *state, DType t, int64_t margin) {
  return state[0] > 0 ? (t == DT_E4M3 ? 448.0 : 57344.0) / state[0] / ldexp(1, (int)margin) : 1;
}

/* a first step's state: scale 1 */
static void run_fp8_state(const Node *n, const double *const *in, double *out, int64_t step) {
  memset(out, 0, numel(n) * sizeof *out);
}

static void run_fp8_quantize(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0], *state = in[1];
  DType t = n->dtype;
  double s = fp8_scale(state, t, attr_int(n, "margin")), maxv = t == DT_E4M3 ? 448 : 57344;
  for (int64_t i = 0, N = numel(n); i < N; i++) {
    double v = x[i] * s;
    out[i] = isnan(v) ? v : interp_round(v > maxv ? maxv : v < -maxv ? -maxv : v, t) / s;
  }
}

/* The product of the values (q / s each), rounded to dtype. */
static void run_scaled_matmul(const Node *n, const double *const *in, double *out, int64_t step) {
  run_matmul(n, in, out, step);
  for (int64_t i = 0, N = numel(n); i < N; i++) out[i] = interp_round(out[i], n->dtype);
}

/* ---- normalisations and reductions ------------------------------------------------ */

/* mean and 1/sqrt(var + eps) of a row of D. */
static void row_stats(const double *x, int64_t D, double eps, double *mean, double *rstd) {
  double s = 0, v = 0;
  for (int64_t j = 0; j < D; j++) s += x[j];
  *mean = s / (double)D;
  for (int64_t j = 0; j < D; j++) v += (x[j] - *mean) * (x[j] - *mean);
  *rstd = 1 / sqrt(v / (double)D + eps);
}

/* 1/sqrt(mean(x^2) + eps) of a row of D. */
static double row_rrms(const double *x, int64_t D, double eps) {
  double s = 0;
  for (int64_t j = 0; j < D; j++) s += x[j] * x[j];
  return 1 / sqrt(s / (double)D + eps);
}

static void run_layernorm(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0], *w = in[1], *b = in[2];
  int64_t D = last(&n->shape);
  for (int64_t r = 0, R = numel(n) / D; r < R; r++) {
    double mean, rstd;
    row_stats(x + r * D, D, attr_float(n, "eps"), &mean, &rstd);
    for (int64_t j = 0; j < D; j++) out[r * D + j] = (x[r * D + j] - mean) * rstd * w[j] + b[j];
  }
}

static void run_rmsnorm(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0], *w = in[1];
  int64_t D = last(&n->shape);
  for (int64_t r = 0, R = numel(n) / D; r < R; r++) {
    double rr = row_rrms(x + r * D, D, attr_float(n, "eps"));
    for (int64_t j = 0; j < D; j++) out[r * D + j] = x[r * D + j] * rr * w[j];
  }
}

/* dx of one layernorm row: rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), dy = g w. */
static void layernorm_dx_row(const double *x, const double *w, const double *g, double *dx, int64_t D, double eps) {
  double mean, rstd, a = 0, b = 0;
  row_stats(x, D, eps, &mean, &rstd);
  for (int64_t j = 0; j < D; j++) {
    a += g[j] * w[j];
    b += g[j] * w[j] * (x[j] - mean) * rstd;
  }
  a /= (double)D;
  b /= (double)D;
  for (int64_t j = 0; j < D; j++) dx[j] = rstd * (g[j] * w[j] - a - (x[j] - mean) * rstd * b);
}

static void run_layernorm_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0], *w = in[1], *g = in[2];
  int64_t D = last(&n->in[0]->shape), R = numel(n->in[0]) / D, which = attr_int(n, "which");
  double eps = attr_float(n, "eps");
  if (which != 0) memset(out, 0, D * sizeof *out);
  for (int64_t r = 0; r < R; r++) {
    const double *xr = x + r * D, *gr = g + r * D;
    if (which == 0) {
      layernorm_dx_row(xr, w, gr, out + r * D, D, eps);
      continue;
    }
    double mean, rstd;
    row_stats(xr, D, eps, &mean, &rstd);
    for (int64_t j = 0; j < D; j++) out[j] += which == 1 ? gr[j] * (xr[j] - mean) * rstd : gr[j];
  }
}

/* dx of one rmsnorm row: rr * dy - x rr^3 mean(dy * x), dy = g w, rr = 1/rms. */
static void rmsnorm_dx_row(const double *x, const double *w, const double *g, double *dx, int64_t D, double eps) {
  double rr = row_rrms(x, D, eps), s = 0;
  for (int64_t j = 0; j < D; j++) s += g[j] * w[j] * x[j];
  s /= (double)D;
  for (int64_t j = 0; j < D; j++) dx[j] = rr * g[j] * w[j] - x[j] * rr * rr * rr * s;
}

static void run_rmsnorm_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0], *w = in[1], *g = in[2];
  int64_t D = last(&n->in[0]->shape), R = numel(n->in[0]) / D, which = attr_int(n, "which");
  double eps = attr_float(n, "eps");
  if (which != 0) memset(out, 0, D * sizeof *out);
  for (int64_t r = 0; r < R; r++) {
    const double *xr = x + r * D, *gr = g + r * D;
    if (which == 0) {
      rmsnorm_dx_row(xr, w, gr, out + r * D, D, eps);
      continue;
    }
    double rr = row_rrms(xr, D, eps);
    for (int64_t j = 0; j < D; j++) out[j] += gr[j] * xr[j] * rr;
  }
}

/* Softmax of the first `len` of the `total` entries x[0], x[st], ...; the rest 0. */
/* softmax over entries [lo, hi) of a line of `total` (stride st), the others 0 */
static void softmax_span(const double *x, double *out, int64_t st, int64_t lo, int64_t hi, int64_t total) {
  double mx = -INFINITY, s = 0;
  for (int64_t j = lo; j < hi; j++) mx = fmax(mx, x[j * st]);
  for (int64_t j = lo; j < hi; j++) s += exp(x[j * st] - mx);
  for (int64_t j = 0; j < total; j++) out[j * st] = j >= lo && j < hi ? exp(x[j * st] - mx) / s : 0;
}

/* The entries [*lo, *hi) of row i of [..., S, T] a mask keeps: all, or when causal
 * j <= i + (T - S), and with a window W > 0 also j > i + (T - S) - W. */
static void mask_span(int64_t i, int64_t S, int64_t T, bool causal, int64_t window, int64_t *lo, int64_t *hi) {
  int64_t at = i + (T - S);
  *hi = causal ? at + 1 : T;
  *lo = window > 0 && at - window + 1 > 0 ? at - window + 1 : 0;
}

static void run_softmax(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0];
  const Shape *s = &n->shape;
  int a = axis_of(n, "axis", s->ndim);
  bool causal = attr_int(n, "causal");
  int64_t outer, len, inner, window = attn_window(n);
  split_at(s, a, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t k = 0; k < inner; k++) {
      int64_t base = o * len * inner + k, lo, hi;
      mask_span(o % s->d[s->ndim - 2], s->d[s->ndim - 2], len, causal, window, &lo, &hi);
      softmax_span(x + base, out + base, inner, lo, hi, len);
    }
}

static void run_softmax_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *y = in[0], *g = in[1];
  int64_t outer, len, inner;
  split_at(&n->shape, axis_of(n, "axis", n->shape.ndim), &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t k = 0; k < inner; k++) {
      int64_t base = o * len * inner + k;
      double s = 0;
      for (int64_t j = 0; j < len; j++) s += g[base + j * inner] * y[base + j * inner];
      for (int64_t j = 0; j < len; j++) out[base + j * inner] = y[base + j * inner] * (g[base + j * inner] - s);
    }
}

/* sum, and with `mean` mean, over axis (all axes when it is unset). */
static void reduce(const Node *n, const double *x, double *out, bool mean) {
  const Shape *s = &n->in[0]->shape;
  int64_t outer = 1, len = shape_numel(s), inner = 1;
  if (attr_get(n, "axis")->set) split_at(s, axis_of(n, "axis", s->ndim), &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t k = 0; k < inner; k++) {
      double acc = 0;
      for (int64_t j = 0; j < len; j++) acc += x[(o * len + j) * inner + k];
      out[o * inner + k] = mean ? acc / (double)len : acc;
    }
}
static void run_sum(const Node *n, const double *const *in, double *out, int64_t step) { reduce(n, in[0], out, false); }
static void run_mean(const Node *n, const double *const *in, double *out, int64_t step) { reduce(n, in[0], out, true); }

/* logsumexp of a row of V. */
static double row_lse(const double *x, int64_t V) {
  double mx = -INFINITY, s = 0;
  for (int64_t j = 0; j < V; j++) mx = fmax(mx, x[j]);
  for (int64_t j = 0; j < V; j++) s += exp(x[j] - mx);
  return mx + log(s);
}

/* The targets tg (of node t) that count: those other than n's ignore_index. */
static int64_t ce_count(const Node *n, const Node *t, const double *tg) {
  int64_t c = 0, ignore = attr_int(n, "ignore_index");
  for (int64_t r = 0, R = numel(t); r < R; r++) c += tg[r] != (double)ignore;
  return c;
}

static void run_ce_count(const Node *n, const double *const *in, double *out, int64_t step) {
  out[0] = (double)ce_count(n, n->in[0], in[0]);
}

static void run_cross_entropy(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0], *tg = in[1];
  int64_t V = last(&n->in[0]->shape), ignore = attr_int(n, "ignore_index"), count = ce_count(n, n->in[1], tg);
  double total = 0;
  for (int64_t r = 0, R = numel(n->in[1]); r < R; r++) {
    if (tg[r] == (double)ignore) continue;
    int64_t t = index_in(n, "target", tg[r], V);
    total += row_lse(x + r * V, V) - x[r * V + t];
  }
  out[0] = count ? total / (double)count : 0;
}

static void run_cross_entropy_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0], *tg = in[1], *g = in[2];
  int64_t V = last(&n->in[0]->shape), ignore = attr_int(n, "ignore_index"), count = ce_count(n, n->in[1], tg);
  for (int64_t r = 0, R = numel(n->in[1]); r < R; r++) {
    double *o = out + r * V;
    const double *xr = x + r * V;
    if (tg[r] == (double)ignore) {
      memset(o, 0, V * sizeof *o);
      continue;
    }
    int64_t t = index_in(n, "target", tg[r], V);
    double lse = row_lse(xr, V);
    for (int64_t j = 0; j < V; j++) o[j] = g[0] * (exp(xr[j] - lse) - (j == t)) / (double)count;
  }
}

/* classifier_ce's logits, x [R, d] times w (transposed when transpose_b): [R, V] in a new array. */
static double *classifier_logits(const Node *n, const double *x, const double *w, int64_t *R, int64_t *V) {
  bool tb = attr_int(n, "transpose_b");
  int64_t d = last(&n->in[0]->shape);
  *R = numel(n->in[2]), *V = n->in[1]->shape.d[tb ? 0 : 1];
  double *lg = malloc((size_t)(*R * *V > 0 ? *R * *V : 1) * sizeof *lg);
  if (!lg) diag_internal(__FILE__, __LINE__, "interp: out of memory");
  for (int64_t r = 0; r < *R; r++)
    for (int64_t j = 0; j < *V; j++) {
      double s = 0;
      for (int64_t k = 0; k < d; k++) s += x[r * d + k] * (tb ? w[j * d + k] : w[k * *V + j]);
      lg[r * *V + j] = s;
    }
  return lg;
}

static void run_classifier_ce(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0], *w = in[1], *tg = in[2];
  int64_t R, V, ignore = attr_int(n, "ignore_index"), count = 0;
  double *lg = classifier_logits(n, x, w, &R, &V), total = 0;
  for (int64_t r = 0; r < R; r++) {
    if (tg[r] == (double)ignore) continue;
    count++;
    total += row_lse(lg + r * V, V) - lg[r * V + index_in(n, "target", tg[r], V)];
  }
  out[0] = count ? total / (double)count : 0;
  free(lg);
}

/* dlogits = g (softmax - onehot) / count on the counted rows; dx = dlogits w', dw from dlogitsᵀ x. */
static void run_classifier_ce_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0], *tg = in[2], *w = in[1], g = in[3][0];
  bool tb = attr_int(n, "transpose_b");
  int64_t R, V, d = last(&n->in[0]->shape), ignore = attr_int(n, "ignore_index"), count = 0;
  double *lg = classifier_logits(n, x, w, &R, &V), *dx = out, *dw = out + R * d;
  for (int64_t r = 0; r < R; r++) count += tg[r] != (double)ignore;
  memset(out, 0, numel(n) * sizeof *out);
  for (int64_t r = 0; r < R; r++) {
    if (tg[r] == (double)ignore) continue;
    int64_t t = index_in(n, "target", tg[r], V);
    double lse = row_lse(lg + r * V, V);
    for (int64_t j = 0; j < V; j++) {
      double dl = g * (exp(lg[r * V + j] - lse) - (j == t)) / (double)count;
      for (int64_t k = 0; k < d; k++) {
        dx[r * d + k] += dl * (tb ? w[j * d + k] : w[k * V + j]);
        dw[tb ? j * d + k : k * V + j] += dl * x[r * d + k];
      }
    }
  }
  free(lg);
}

/* One query row of one head: out[d] = sum_j p_j v[j, d], p = softmax(scale q.k_j). */
static void attend_row(const double *q, const double *k, const double *v, double *out, double *p, int64_t T, int64_t lo,
                       int64_t hi, int64_t F, int64_t hd, double scale) {
  for (int64_t j = 0; j < T; j++) {
    double s = 0;
    for (int64_t d = 0; d < hd; d++) s += q[d] * k[j * F + d];
    p[j] = s * scale;
  }
  softmax_span(p, p, 1, lo, hi, T);
  for (int64_t d = 0; d < hd; d++) {
    double acc = 0;
    for (int64_t j = 0; j < T; j++) acc += p[j] * v[j * F + d];
    out[d] = acc;
  }
}

/* The geometry of attention, flash_attention and its gradients: q [B, S, F], k and v
 * [B, T, Fk], F = H*hd, Fk = G*hd (query head h reads key/value head h / grp); the
 * flash output rows hold F values and then H log-sum-exps. */
typedef struct Flash {
  int64_t B, S, T, F, H, hd, G, Fk, grp, window;
  double scale;
  bool causal;
} Flash;

static Flash flash_of(const Node *n) {
  const Shape *q = &n->in[0]->shape;
  Flash f = {.B = q->d[0],
             .S = q->d[1],
             .T = n->in[1]->shape.d[1],
             .F = q->d[2],
             .H = attr_int(n, "heads"),
             .G = attn_kv_heads(n),
             .window = attn_window(n),
             .causal = attr_int(n, "causal")};
  f.hd = f.F / f.H, f.Fk = f.G * f.hd, f.grp = f.H / f.G;
  const AttrVal *sc = attr_get(n, "scale");
  f.scale = sc->set ? sc->f : 1 / sqrt((double)f.hd);
  return f;
}

/* Query head h's column in q, and its key/value head's in k and v. */
static int64_t qcol(const Flash *f, int64_t h) { return h * f->hd; }
static int64_t kcol(const Flash *f, int64_t h) { return h / f->grp * f->hd; }

static void run_attention(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *q = in[0], *k = in[1], *v = in[2];
  Flash f = flash_of(n);
  double *p = malloc((f.T ? f.T : 1) * sizeof *p);
  if (!p) diag_internal(__FILE__, __LINE__, "interp: out of memory");
  for (int64_t b = 0; b < f.B; b++)
    for (int64_t h = 0; h < f.H; h++)
      for (int64_t i = 0; i < f.S; i++) {
        int64_t lo, hi;
        mask_span(i, f.S, f.T, f.causal, f.window, &lo, &hi);
        attend_row(q + (b * f.S + i) * f.F + qcol(&f, h), k + b * f.T * f.Fk + kcol(&f, h),
                   v + b * f.T * f.Fk + kcol(&f, h), out + (b * f.S + i) * f.F + qcol(&f, h), p, f.T, lo, hi, f.Fk,
                   f.hd, f.scale);
      }
  free(p);
}

static double flash_score(const Flash *f, const double *q, const double *k, int64_t b, int64_t h, int64_t i,
                          int64_t j) {
  double s = 0;
  for (int64_t d = 0; d < f->hd; d++)
    s += q[(b * f->S + i) * f->F + qcol(f, h) + d] * k[(b * f->T + j) * f->Fk + kcol(f, h) + d];
  return s * f->scale;
}

static void run_flash_attention(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *q = in[0], *k = in[1], *v = in[2];
  Flash f = flash_of(n);
  int64_t W = f.F + f.H;
  for (int64_t b = 0; b < f.B; b++)
    for (int64_t h = 0; h < f.H; h++)
      for (int64_t i = 0; i < f.S; i++) {
        int64_t lo, hi;
        mask_span(i, f.S, f.T, f.causal, f.window, &lo, &hi);
        double mx = -INFINITY, sum = 0, *o = out + (b * f.S + i) * W;
        for (int64_t j = lo; j < hi; j++) mx = fmax(mx, flash_score(&f, q, k, b, h, i, j));
        for (int64_t j = lo; j < hi; j++) sum += exp(flash_score(&f, q, k, b, h, i, j) - mx);
        double lse = mx + log(sum);
        for (int64_t d = 0; d < f.hd; d++) o[qcol(&f, h) + d] = 0;
        for (int64_t j = lo; j < hi; j++) {
          double p = exp(flash_score(&f, q, k, b, h, i, j) - lse);
          for (int64_t d = 0; d < f.hd; d++) o[qcol(&f, h) + d] += p * v[(b * f.T + j) * f.Fk + kcol(&f, h) + d];
        }
        o[f.F + h] = lse;
      }
}

/* dS = P (dP - delta), dP = dO vᵀ: dq = scale dS k, dk = scale dSᵀ q, dv = Pᵀ dO (a
 * key/value head's gradients summed over the query heads that share it). */
static void run_flash_attention_grad(const Node *n, const double *const *in, double *out, int64_t step) {
  Flash f = flash_of(n);
  const double *q = in[0], *k = in[1], *v = in[2], *o = in[3], *g = in[4], *delta = in[5];
  int64_t W = f.F + f.H, which = attr_int(n, "which");
  memset(out, 0, numel(n) * sizeof *out);
  for (int64_t b = 0; b < f.B; b++)
    for (int64_t h = 0; h < f.H; h++)
      for (int64_t i = 0; i < f.S; i++) {
        int64_t lo, hi, qi = (b * f.S + i) * f.F + qcol(&f, h);
        mask_span(i, f.S, f.T, f.causal, f.window, &lo, &hi);
        const double *gi = g + (b * f.S + i) * W + qcol(&f, h);
        for (int64_t j = lo; j < hi; j++) {
          int64_t kj = (b * f.T + j) * f.Fk + kcol(&f, h);
          double p = exp(flash_score(&f, q, k, b, h, i, j) - o[(b * f.S + i) * W + f.F + h]), dp = 0;
          for (int64_t d = 0; d < f.hd; d++) dp += gi[d] * v[kj + d];
          double ds = p * (dp - delta[(b * f.S + i) * f.H + h]) * f.scale;
          for (int64_t d = 0; d < f.hd; d++) {
            if (which == 0) out[qi + d] += ds * k[kj + d];
            if (which == 1) out[kj + d] += ds * q[qi + d];
            if (which == 2) out[kj + d] += p * gi[d];
          }
        }
      }
}

/* ---- data movement ------------------------------------------------------------------- */

static void run_reshape(const Node *n, const double *const *in, double *out, int64_t step) {
  copy_input(n, in[0], out);
}

static void run_transpose(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0];
  const AttrVal *p = attr_get(n, "perm");
  int64_t xs[MAX_DIMS], st[MAX_DIMS];
  contig_strides(&n->in[0]->shape, xs);
  for (int i = 0; i < p->n; i++) st[i] = xs[p->v[i]];
  for (int64_t i = 0, N = numel(n); i < N; i++) out[i] = x[offset_of(i, &n->shape, st)];
}

static void run_broadcast(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0];
  int64_t st[MAX_DIMS];
  bcast_strides(&n->in[0]->shape, &n->shape, st);
  for (int64_t i = 0, N = numel(n); i < N; i++) out[i] = x[offset_of(i, &n->shape, st)];
}

static void run_sum_to(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0];
  const Shape *xs = &n->in[0]->shape;
  int64_t st[MAX_DIMS];
  bcast_strides(&n->shape, xs, st);
  memset(out, 0, numel(n) * sizeof *out);
  for (int64_t i = 0, N = shape_numel(xs); i < N; i++) out[offset_of(i, xs, st)] += x[i];
}

/* Copies x [outer, xlen, inner] into out [outer, olen, inner] at offset `at` along
 * the middle axis (x's start `from`, `len` entries). */
static void copy_band(const double *x, double *out, int64_t outer, int64_t inner, int64_t xlen, int64_t from,
                      int64_t olen, int64_t at, int64_t len) {
  for (int64_t o = 0; o < outer; o++)
    memcpy(out + (o * olen + at) * inner, x + (o * xlen + from) * inner, len * inner * sizeof *out);
}

static void run_slice(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0];
  int a = axis_of(n, "axis", n->shape.ndim);
  int64_t outer, len, inner, start = attr_int(n, "start");
  split_at(&n->in[0]->shape, a, &outer, &len, &inner);
  copy_band(x, out, outer, inner, len, start, n->shape.d[a], 0, n->shape.d[a]);
}

static void run_pad(const Node *n, const double *const *in, double *out, int64_t step) {
  const double *x = in[0];
  int a = axis_of(n, "axis", n->shape.ndim);
  int64_t outer, len, inner;
  split_at(&n->in[0]->shape, a, &outer, &len, &inner);
  memset(out, 0, numel(n) * sizeof *out);
  copy_band(x, out, outer, inner, len, 0, n->shape.d[a], attr_int(n, "before"), len);
}

static void run_concat(const Node *n, const double *const *in, double *out, int64_t step) {
  int a = axis_of(n, "axis", n->shape.ndim);
  int64_t outer, olen, inner, at = 0;
  split_at(&n->shape, a, &outer, &olen, &inner);
  for (int i = 0; i < n->nin; i++) {
    int64_t len = n->in[i]->shape.d[a];
    copy_band(in[i], out, outer, inner, len, 0, olen, at, len);
    at += len;
  }
}

/* ---- collectives -------------------------------------------------------------------------- */

/* Over one rank every collective is the identity; over several the interpreter has no peers. */
static void one_rank(const Node *n, const double *const *in, double *out) {
  if (attr_int(n, "ranks") != 1) not_computed(n, "a collective over several ranks");
  copy_input(n, in[0], out);
}
static void run_all_reduce(const Node *n, const double *const *in, double *out, int64_t step) { one_rank(n, in, out); }
static void run_all_gather(const Node *n, const double *const *in, double *out, int64_t step) { one_rank(n, in, out); }
static void run_reduce_scatter(const Node *n, const double *const *in, double *out, int64_t step) {
  one_rank(n, in, out);
}
static void run_split(const Node *n, const double *const *in, double *out, int64_t step) { one_rank(n, in, out); }
static void run_tp_copy(const Node *n, const double *const *in, double *out, int64_t step) { one_rank(n, in, out); }
static void run_all_to_all(const Node *n, const double *const *in, double *out, int64_t step) { one_rank(n, in, out); }

/* ---- the interpreter --------------------------------------------------------------------- */

static void (*const run_rules[OP_COUNT])(const Node *, const double *const *, double *, int64_t) = {
#define OP(id, name, nin, cls, flags, attrs) [OP_##id] = run_##name,
#include "ir/ops.def"
#undef OP
};

void interp_eval(const Node *n, const double *const *in, double *out, int64_t step) {
  ir_assert((unsigned)n->op < OP_COUNT);
  run_rules[n->op](n, in, out, step);
}

static bool given(const Node *n) { return n->op == OP_INPUT || n->op == OP_PARAM; }

static void *xmalloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (!p) diag_internal(__FILE__, __LINE__, "interp: out of memory");
  return p;
}

void interp_run(const Graph *g, double **vals, int64_t step) {
  int maxin = 1;
  for (int i = 0; i < g->n; i++) maxin = g->nodes[i]->nin > maxin ? g->nodes[i]->nin : maxin;
  const double **in = xmalloc(maxin * sizeof *in);
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    if (given(n)) {
      if (!vals[i]) {
        char msg[256];
        snprintf(msg, sizeof msg, "interp: no value given for %%%d (%s)", i, n->name ? n->name : "?");
        diag_internal(__FILE__, __LINE__, msg);
      }
      continue;
    }
    for (int k = 0; k < n->nin; k++) in[k] = vals[n->in[k]->id];
    if (!vals[i]) vals[i] = xmalloc(numel(n) * sizeof **vals);
    interp_eval(n, in, vals[i], step);
  }
  free(in);
}

void interp_release(const Graph *g, double **vals) {
  for (int i = 0; i < g->n; i++)
    if (!given(g->nodes[i])) {
      free(vals[i]);
      vals[i] = NULL;
    }
}
