/* linreg_program: a hand-written stand-in for compiler output, to test the `train`
 * runtime end to end before codegen emits real programs. It defines the three
 * symbols of runtime/program.h for a byte-level bigram language model:
 *
 *   X      = onehot(tokens)              [B*T, V]  (kernel)
 *   logits = X @ W + b                   [B*T, V]  (zero + batched GEMM, kernel)
 *   loss   = mean cross_entropy(logits, targets)   (kernels)
 *   dW     = X^T @ dlogits               (GEMM, ta = 1, beta = 1 into GRADS)
 *   db     = column sums of dlogits      (kernel)
 *   W: [V, V] normal(0, 0.02), weight decay; b: [V] zeros, no decay
 *   update: AdamW as torch.optim.AdamW computes it, reading every hyperparameter
 *   from the scalars (program.h and train_program.h; hence "scalars": 12), so the
 *   --beta1/--beta2/--eps/--weight-decay overrides reach it.
 *
 * B = 4, T = 16, V = 256: tests/train/bigram_ref.py must use the same numbers.
 */
#include "runtime/program.h"
#include "runtime/train_program.h"

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

/* The JSON below spells these numbers out; keep them in step. */
_Static_assert(W_TGT == 256 && W_X == 512 && W_LOGITS == 66048 && W_DLOGITS == 131584 && W_LOSS == 197376 &&
                   W_GNORM == 197440 && W_BYTES == 197504,
               "work layout changed: update the JSON");
_Static_assert(P_B == 262144 && P_BYTES == 263168, "parameter layout changed: update the JSON");

/* Every kernel takes the four tier bases as its buffers (program.h, "args"), in tier
 * order, so the kernels below index tiers[] as before; bytes 0: each kernel keeps to
 * the layout above. */
#define TIER_ARGS "\"args\": [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]"

const char colossalc_program_json[] =
    "{\"version\": 1, \"model\": \"bigram-test\", \"batch\": 4, \"seq\": 16, \"vocab\": 256,"
    " \"scalars\": 12,"
    " \"tiers\": [263168, 263168, 526336, 197504],"
    " \"opt_v_offset\": 263168,"
    " \"train\": {\"optimizer\": \"adamw\", \"lr\": 0.05, \"beta1\": 0.9, \"beta2\": 0.95,"
    "   \"eps\": 1e-8, \"weight_decay\": 0.1, \"momentum\": 0, \"clip\": 1.0, \"warmup\": 2,"
    "   \"min_lr\": 0.005, \"schedule\": \"cosine\"},"
    " \"params\": ["
    "   {\"name\": \"wte.weight\", \"shape\": [256, 256], \"offset\": 0, \"decay\": true,"
    "    \"init\": \"normal\", \"a\": 0.02, \"b\": 0},"
    "   {\"name\": \"bias\", \"shape\": [256], \"offset\": 262144, \"decay\": false,"
    "    \"init\": \"zeros\"}],"
    " \"inputs\": [{\"name\": \"tokens\", \"role\": \"tokens\", \"shape\": [4, 16], \"offset\": 0},"
    "   {\"name\": \"targets\", \"role\": \"targets\", \"shape\": [4, 16], \"offset\": 256}],"
    " \"loss_offset\": 197376, \"logits_offset\": 66048,"
    " \"gradnorm_offset\": 197440, \"gradnorm_parts\": 8,"
    " \"flops_per_step\": 25165824,"
    " \"kernels\": [\"k0_onehot\", \"k1_add_bias\", \"k2_xent\", \"k3_loss_mean\","
    "   \"k4_bias_grad\", \"k5_gradnorm\", \"k6_adamw_w\", \"k7_adamw_b\"],"
    " \"step\": ["
    "   {\"op\": \"kernel\", \"kernel\": 0, \"extent\": 64, " TIER_ARGS "},"
    "   {\"op\": \"zero\", \"tier\": 3, \"offset\": 66048, \"bytes\": 65536},"
    "   {\"op\": \"gemm\", \"ta\": 0, \"tb\": 0, \"m\": 16, \"n\": 256, \"k\": 256, \"lda\": 256,"
    "    \"ldb\": 256, \"ldc\": 256, \"alpha\": 1.0, \"beta\": 1.0, \"a\": [3, 512],"
    "    \"b\": [0, 0], \"c\": [3, 66048], \"batch\": [4, 1], \"sa\": [4096, 0],"
    "    \"sb\": [0, 0], \"sc\": [4096, 0]},"
    "   {\"op\": \"kernel\", \"kernel\": 1, \"extent\": 64, " TIER_ARGS "},"
    "   {\"op\": \"kernel\", \"kernel\": 2, \"extent\": 64, " TIER_ARGS "},"
    "   {\"op\": \"kernel\", \"kernel\": 3, \"extent\": 1, " TIER_ARGS "},"
    "   {\"op\": \"gemm\", \"ta\": 1, \"tb\": 0, \"m\": 256, \"n\": 256, \"k\": 64, \"lda\": 256,"
    "    \"ldb\": 256, \"ldc\": 256, \"alpha\": 1.0, \"beta\": 1.0, \"a\": [3, 512],"
    "    \"b\": [3, 131584], \"c\": [1, 0], \"batch\": [1, 1], \"sa\": [0, 0],"
    "    \"sb\": [0, 0], \"sc\": [0, 0]},"
    "   {\"op\": \"kernel\", \"kernel\": 4, \"extent\": 256, " TIER_ARGS "}],"
    " \"sync\": [], \"gradnorm\": [{\"op\": \"kernel\", \"kernel\": 5, \"extent\": 8, " TIER_ARGS "}],"
    " \"update\": [{\"op\": \"kernel\", \"kernel\": 6, \"extent\": 65536, " TIER_ARGS "},"
    "   {\"op\": \"kernel\", \"kernel\": 7, \"extent\": 256, " TIER_ARGS "}],"
    " \"forward\": ["
    "   {\"op\": \"kernel\", \"kernel\": 0, \"extent\": 64, " TIER_ARGS "},"
    "   {\"op\": \"zero\", \"tier\": 3, \"offset\": 66048, \"bytes\": 65536},"
    "   {\"op\": \"gemm\", \"ta\": 0, \"tb\": 0, \"m\": 16, \"n\": 256, \"k\": 256, \"lda\": 256,"
    "    \"ldb\": 256, \"ldc\": 256, \"alpha\": 1.0, \"beta\": 1.0, \"a\": [3, 512],"
    "    \"b\": [0, 0], \"c\": [3, 66048], \"batch\": [4, 1], \"sa\": [4096, 0],"
    "    \"sb\": [0, 0], \"sc\": [4096, 0]},"
    "   {\"op\": \"kernel\", \"kernel\": 1, \"extent\": 64, " TIER_ARGS "}]"
    "}";

#define F32(tier, off) ((float *)(tiers[tier] + (off)))
#define I32(tier, off) ((int32_t *)(tiers[tier] + (off)))

/* k0: X[r] = onehot(tokens[r]), r in [lo, hi) of BT. */
static void k0_onehot(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const int32_t *tok = I32(RT_TIER_WORK, W_TOK);
  for (int64_t r = lo; r < hi; r++) {
    float *x = F32(RT_TIER_WORK, W_X) + r * V;
    memset(x, 0, V * sizeof *x);
    x[tok[r]] = 1.0f;
  }
}

/* k1: logits[r] += b. */
static void k1_add_bias(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const float *b = F32(RT_TIER_PARAMS, P_B);
  for (int64_t r = lo; r < hi; r++) {
    float *z = F32(RT_TIER_WORK, W_LOGITS) + r * V;
    for (int j = 0; j < V; j++) z[j] += b[j];
  }
}

/* k2: per row, loss = logsumexp(z) - z[target]; dlogits = (softmax(z) - onehot) / BT. */
static void k2_xent(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const int32_t *tgt = I32(RT_TIER_WORK, W_TGT);
  for (int64_t r = lo; r < hi; r++) {
    const float *z = F32(RT_TIER_WORK, W_LOGITS) + r * V;
    float *dz = F32(RT_TIER_WORK, W_DLOGITS) + r * V;
    double max = z[0], sum = 0;
    for (int j = 1; j < V; j++) max = z[j] > max ? z[j] : max;
    for (int j = 0; j < V; j++) sum += exp((double)z[j] - max);
    F32(RT_TIER_WORK, W_LOSSROW)[r] = (float)(log(sum) + max - z[tgt[r]]);
    for (int j = 0; j < V; j++) dz[j] = (float)((exp((double)z[j] - max) / sum - (j == tgt[r])) / BT);
  }
}

/* k3: loss = mean of the row losses, in a fixed order. */
static void k3_loss_mean(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  double s = 0;
  for (int r = 0; r < BT; r++) s += F32(RT_TIER_WORK, W_LOSSROW)[r];
  *F32(RT_TIER_WORK, W_LOSS) = (float)(s / BT);
}

/* k4: db[j] = sum over rows of dlogits[r][j]. */
static void k4_bias_grad(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const float *dz = F32(RT_TIER_WORK, W_DLOGITS);
  for (int64_t j = lo; j < hi; j++) {
    double s = 0;
    for (int r = 0; r < BT; r++) s += dz[r * V + j];
    F32(RT_TIER_GRADS, P_B)[j] = (float)s;
  }
}

/* k5: part p = sum of squares of its slice of all NP gradient values. */
static void k5_gradnorm(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const float *g = F32(RT_TIER_GRADS, 0);
  for (int64_t p = lo; p < hi; p++) {
    double s = 0;
    for (int64_t i = p * NP / GN_PARTS; i < (p + 1) * NP / GN_PARTS; i++) s += (double)g[i] * g[i];
    F32(RT_TIER_WORK, W_GNORM)[p] = (float)s;
  }
}

/* AdamW on elements [lo, hi) of the parameter at byte offset off. */
static void adamw(char *const *tiers, int64_t off, int decay, int64_t lo, int64_t hi, const float *sc) {
  float *p = F32(RT_TIER_PARAMS, off), *g = F32(RT_TIER_GRADS, off);
  float *m = F32(RT_TIER_OPT, off), *v = F32(RT_TIER_OPT, P_BYTES + off);
  float lr = sc[RT_SC_LR], b1 = sc[TRAIN_SC_BETA1], b2 = sc[TRAIN_SC_BETA2];
  float step = lr * sc[RT_SC_BC1], sbc2 = sqrtf(sc[RT_SC_BC2]);
  for (int64_t i = lo; i < hi; i++) {
    float gi = g[i] * sc[RT_SC_GSCALE];
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    if (decay) p[i] *= 1 - lr * sc[TRAIN_SC_WD];
    p[i] -= step * m[i] / (sqrtf(v[i]) * sbc2 + sc[TRAIN_SC_EPS]);
  }
}

static void k6_adamw_w(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  adamw(tiers, P_W, 1, lo, hi, sc);
}

static void k7_adamw_b(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  adamw(tiers, P_B, 0, lo, hi, sc);
}

const RtKernelFn colossalc_kernels[] = {k0_onehot,    k1_add_bias, k2_xent,    k3_loss_mean,
                                        k4_bias_grad, k5_gradnorm, k6_adamw_w, k7_adamw_b};
const int colossalc_nkernels = sizeof colossalc_kernels / sizeof colossalc_kernels[0];
