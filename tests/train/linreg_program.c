/* linreg_program: a hand-written stand-in for compiler output, to test the `train`
 * runtime end to end without the compiler (test_program.h). A byte-level bigram
 * language model:
 *
 *   X      = onehot(tokens)              [B*T, V]  (kernel)
 *   logits = X @ W + b                   [B*T, V]  (zero + batched GEMM, kernel)
 *   loss   = mean cross_entropy(logits, targets)   (kernels)
 *   dW     = X^T @ dlogits               (GEMM, ta = 1, beta = 1 into GRADS)
 *   db     = column sums of dlogits      (kernel)
 *   W: [V, V] normal(0, 0.02), weight decay; b: [V] zeros, no decay
 *   update: AdamW as torch.optim.AdamW computes it, reading every hyperparameter
 *   from the scalars (program/program.h), so the --beta1/--beta2/--eps/--weight-decay
 *   overrides reach it.
 * The lists as the compiler composes them (codegen/compose.h): `train` zeroes the
 * gradients, runs the one micro-batch (its inputs, a call of `step`, its loss), the
 * norm's kernel, "norm" and the update; `eval` the micro-batch alone; `forward` the
 * logits of the tokens.
 *
 * B = 4, T = 16, V = 256: tests/train/bigram_ref.py must use the same numbers.
 */
#include "test_program.h"

#include <math.h>
#include <string.h>

enum { B = 4, T = 16, V = 256, BT = B * T, GN_PARTS = 8 };

/* WORK tier layout, bytes. */
enum {
  W_TOK = 0,                          /* i32 [B, T] */
  W_TGT = W_TOK + BT * 4,             /* i32 [B, T] */
  W_X = W_TGT + BT * 4,               /* f32 [BT, V] one-hot */
  W_LOGITS = W_X + BT * V * 4,        /* f32 [B, T, V] */
  W_DLOGITS = W_LOGITS + BT * V * 4,  /* f32 [BT, V] */
  W_LOSSROW = W_DLOGITS + BT * V * 4, /* f32 [BT] */
  W_LOSS = W_LOSSROW + BT * 4,        /* f32 */
  W_GNORM = W_LOSS + 64,              /* f32 [GN_PARTS] */
  W_BYTES = W_GNORM + 64
};
/* PARAMS/GRADS/OPT layout. */
enum { P_W = 0, P_B = V * V * 4, P_BYTES = P_B + V * 4, NP = V * V + V };

/* logits = X W + b, batched over the B sequences (the forward pass). */
#define FORWARD                                                                                               \
  KERNEL(0, BT), ZERO(TIER_WORK, W_LOGITS, BT *V * 4),                                                        \
      GEMM_BATCHED(.m = T, .n = V, .k = V, .lda = V, .ldb = V, .ldc = V, .beta = 1,                           \
                   .tier = {TIER_WORK, TIER_PARAMS, TIER_WORK}, .off = {W_X, P_W, W_LOGITS}, .batch = {B, 1}, \
                   .stride = {{T * V, 0}, {0, 0}, {T * V, 0}}),                                               \
      KERNEL(1, BT)
static const IsaInstr step_list[] = {FORWARD, KERNEL(2, BT), KERNEL(3, 1),
                                     GEMM(.ta = 1, .m = V, .n = V, .k = BT, .lda = V, .ldb = V, .ldc = V, .beta = 1,
                                          .tier = {TIER_WORK, TIER_WORK, TIER_GRADS}, .off = {W_X, W_DLOGITS, P_W}),
                                     KERNEL(4, V)};
#define MICROBATCH(final) LOOP(1, 4, final), INPUT(0, 0, 1, W_TOK), INPUT(1, 0, 1, W_TGT), CALL(0), LOSS(W_LOSS)
static const IsaInstr train[] = {ZERO(TIER_GRADS, 0, P_BYTES), MICROBATCH(1),   KERNEL(5, GN_PARTS),
                                 NORM(W_GNORM, GN_PARTS, 1),   KERNEL(6, V *V), KERNEL(7, V)};
static const IsaInstr eval[] = {ZERO(TIER_GRADS, 0, P_BYTES), MICROBATCH(0)};
static const IsaInstr forward[] = {INPUT(0, 0, 0, W_TOK), FORWARD};

void tp_program(ProgBuild *b) {
  static const char *const codes[] = {"k0_onehot",    "k1_add_bias", "k2_xent",    "k3_loss_mean",
                                      "k4_bias_grad", "k5_gradnorm", "k6_adamw_w", "k7_adamw_b"};
  static const TpParam params[] = {{"wte.weight", 2, {V, V}, P_W, 1, PROG_INIT_NORMAL, 0.02, 0, -1},
                                   {"bias", 1, {V}, P_B, 0, PROG_INIT_ZEROS, 0, 0, -1}};
  static const TpInput inputs[] = {{"tokens", PROG_ROLE_TOKENS, {B, T}, W_TOK},
                                   {"targets", PROG_ROLE_TARGETS, {B, T}, W_TGT}};
  static const TpList lists[] = {TP_LIST("step", step_list), TP_LIST("train", train), TP_LIST("eval", eval),
                                 TP_LIST("forward", forward)};
  TpStage st = {.s = {.batch = B,
                      .seq = T,
                      .vocab = V,
                      .microbatches = 1,
                      .tp = 1,
                      .pp = 1,
                      TP_ADAMW(2),
                      .tiers = {P_BYTES, P_BYTES, 2 * P_BYTES, W_BYTES},
                      .opt_v_offset = P_BYTES,
                      .slots = 1,
                      .norm_parts = GN_PARTS,
                      .logits_offset = W_LOGITS,
                      .flops_per_step = 25165824},
                .params = params,
                .nparams = 2,
                .inputs = inputs,
                .ninputs = 2,
                .lists = lists,
                .nlists = 4};
  tp_write(b, "bigram-test", &st, 1, codes, 8);
}

#define F32(tier, off) ((float *)(tiers[tier] + (off)))
#define I32(tier, off) ((int32_t *)(tiers[tier] + (off)))

/* k0: X[r] = onehot(tokens[r]), r in [lo, hi) of BT. */
static void k0_onehot(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const int32_t *tok = I32(TIER_WORK, W_TOK);
  for (int64_t r = lo; r < hi; r++) {
    float *x = F32(TIER_WORK, W_X) + r * V;
    memset(x, 0, V * sizeof *x);
    x[tok[r]] = 1.0f;
  }
}

/* k1: logits[r] += b. */
static void k1_add_bias(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const float *b = F32(TIER_PARAMS, P_B);
  for (int64_t r = lo; r < hi; r++) {
    float *z = F32(TIER_WORK, W_LOGITS) + r * V;
    for (int j = 0; j < V; j++) z[j] += b[j];
  }
}

/* k2: per row, loss = logsumexp(z) - z[target]; dlogits = (softmax(z) - onehot) / BT. */
static void k2_xent(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const int32_t *tgt = I32(TIER_WORK, W_TGT);
  for (int64_t r = lo; r < hi; r++) {
    const float *z = F32(TIER_WORK, W_LOGITS) + r * V;
    float *dz = F32(TIER_WORK, W_DLOGITS) + r * V;
    double max = z[0], sum = 0;
    for (int j = 1; j < V; j++) max = z[j] > max ? z[j] : max;
    for (int j = 0; j < V; j++) sum += exp((double)z[j] - max);
    F32(TIER_WORK, W_LOSSROW)[r] = (float)(log(sum) + max - z[tgt[r]]);
    for (int j = 0; j < V; j++) dz[j] = (float)((exp((double)z[j] - max) / sum - (j == tgt[r])) / BT);
  }
}

/* k3: loss = mean of the row losses, in a fixed order. */
static void k3_loss_mean(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  double s = 0;
  for (int r = 0; r < BT; r++) s += F32(TIER_WORK, W_LOSSROW)[r];
  *F32(TIER_WORK, W_LOSS) = (float)(s / BT);
}

/* k4: db[j] = sum over rows of dlogits[r][j]. */
static void k4_bias_grad(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const float *dz = F32(TIER_WORK, W_DLOGITS);
  for (int64_t j = lo; j < hi; j++) {
    double s = 0;
    for (int r = 0; r < BT; r++) s += dz[r * V + j];
    F32(TIER_GRADS, P_B)[j] = (float)s;
  }
}

/* k5: part p = sum of squares of its slice of all NP gradient values. */
static void k5_gradnorm(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const float *g = F32(TIER_GRADS, 0);
  for (int64_t p = lo; p < hi; p++) {
    double s = 0;
    for (int64_t i = p * NP / GN_PARTS; i < (p + 1) * NP / GN_PARTS; i++) s += (double)g[i] * g[i];
    F32(TIER_WORK, W_GNORM)[p] = (float)s;
  }
}

/* AdamW on elements [lo, hi) of the parameter at byte offset off. */
static void adamw(char *const *tiers, int64_t off, int decay, int64_t lo, int64_t hi, const float *sc) {
  float *p = F32(TIER_PARAMS, off), *g = F32(TIER_GRADS, off);
  float *m = F32(TIER_OPT, off), *v = F32(TIER_OPT, P_BYTES + off);
  float lr = sc[SC_LR], b1 = sc[SC_BETA1], b2 = sc[SC_BETA2];
  float step = lr * sc[SC_BC1], sbc2 = sqrtf(sc[SC_BC2]);
  for (int64_t i = lo; i < hi; i++) {
    float gi = g[i] * sc[SC_GSCALE];
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    if (decay) p[i] *= 1 - lr * sc[SC_WD];
    p[i] -= step * m[i] / (sqrtf(v[i]) * sbc2 + sc[SC_EPS]);
  }
}

static void k6_adamw_w(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  adamw(tiers, P_W, 1, lo, hi, sc);
}

static void k7_adamw_b(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  adamw(tiers, P_B, 0, lo, hi, sc);
}

static const ProgKernelFn kernels[] = {k0_onehot,    k1_add_bias, k2_xent,    k3_loss_mean,
                                       k4_bias_grad, k5_gradnorm, k6_adamw_w, k7_adamw_b};
const ProgCpuBuild colossalc_cpu_builds[] = {{"any (written by hand)", "", kernels}};
const int colossalc_ncpu_builds = 1;
const int colossalc_nkernels = sizeof kernels / sizeof kernels[0];
