/* offload_program: a hand-written offload program (test_program.h; program/program.h,
 * "Offload") to test the runtime without the compiler, and the same program without
 * offload to compare it with. Built three times (OFFLOAD_VARIANT):
 *
 *   0  the reference: no offload, `train` zeroes the gradients; the offload
 *      instructions are replaced by empty "zero" instructions, so both variants run
 *      the same kernels in the same order
 *   1  the offload plan below, device_capacity 576 KiB (the whole state and the work
 *      tier are 1.13 MiB), with "predicted" equal to what the runtime must measure
 *   2  the same plan with a capacity of 450000 bytes: the update's commit of chunk 2
 *      goes beyond it (a plan bug: the internal error)
 *
 * The model is linreg_program.c's byte bigram, with W [256, 256] as four parameters
 * of 64 rows (W0..W3) and a bias [256], so it can be offloaded chunk by chunk:
 *   logits[r] = b + W[tok[r]]  (kernels: bias, then each chunk adds the rows it holds)
 *   loss = mean cross_entropy(logits, targets); dW rows and db added into GRADS
 *   gradnorm: one partial sum of squares per chunk; update: AdamW per chunk
 * Chunks: c0 = W0, c1 = W1, c2 = W2, c3 = W3 + bias (offsets 0, 64 Ki, 128 Ki,
 * 192 Ki; PARAMS 263168 bytes). Homes:
 *   c0 params host, opt host    update on the host ("on": "host")
 *   c1 params host, opt nvme    update on the host, its opt read from and written to NVMe
 *   c2 params nvme, opt nvme    update on the device, both brought from and sent to NVMe
 *   c3 params device, opt device; its opt spilled to NVMe during `step` and brought
 *      back for the update (so a full NVMe disk fails in the middle of a step)
 * Parameters stream through the device in the forward pass (clean copies kept at
 * home, dropped after use); gradients are created zero on the device; c0's and
 * c1's go to the host for the host-side gradnorm and update.
 */
#include "test_program.h"

#include <math.h>
#include <string.h>

#ifndef OFFLOAD_VARIANT
#define OFFLOAD_VARIANT 1
#endif

enum { B = 4, T = 16, V = 256, BT = B * T, ROWS = 64, CHUNKS = 4 };

/* WORK tier layout, bytes. */
enum {
  W_TOK = 0,                          /* i32 [B, T] */
  W_TGT = W_TOK + BT * 4,             /* i32 [B, T] */
  W_LOGITS = W_TGT + BT * 4,          /* f32 [B, T, V] */
  W_DLOGITS = W_LOGITS + BT * V * 4,  /* f32 [BT, V] */
  W_LOSSROW = W_DLOGITS + BT * V * 4, /* f32 [BT] */
  W_LOSS = W_LOSSROW + BT * 4,        /* f32 */
  W_GNORM = W_LOSS + 64,              /* f32 [CHUNKS] */
  W_BYTES = W_GNORM + 64
};
/* PARAMS/GRADS/OPT layout: W chunk c at c * CW, bias after them. */
enum { CW = ROWS * V * 4, P_B = CHUNKS * CW, P_BYTES = P_B + V * 4 };

#if OFFLOAD_VARIANT == 0 /* the same kernels, in the same order, the moves empty zeroings */
#define KH(id_, ext_) KERNEL(id_, ext_)
#define NOP ZERO(TIER_WORK, 0, 0)
#define MV(c_, part_, from_, to_, keep_) NOP
#define DR(c_, part_, at_) NOP
#define WT(c_, part_) NOP
#else
#define KH(id_, ext_) KERNEL_HOST(id_, ext_)
#define MV(c_, part_, from_, to_, keep_) MOVE(c_, part_, from_, to_, keep_)
#define DR(c_, part_, at_) DROP(c_, part_, at_)
#define WT(c_, part_) WAIT(c_, part_)
#endif
enum { PA = PART_PARAMS, GR = PART_GRADS, OP = PART_OPT };
#define DEV LOC_DEVICE
#define HOST LOC_HOST
#define NVME LOC_NVME

/* The micro-batch (the list `train` and `eval` call): the parameters stream through the
 * device for the forward pass, the gradients are made there and c0's and c1's sent home. */
static const IsaInstr step_list[] = {MV(0, PA, HOST, DEV, 1),
                                     MV(3, OP, DEV, NVME, 0),
                                     KERNEL(0, BT),
                                     WT(0, PA),
                                     MV(1, PA, HOST, DEV, 1),
                                     KERNEL(1, BT),
                                     DR(0, PA, DEV),
                                     WT(1, PA),
                                     MV(2, PA, NVME, DEV, 1),
                                     KERNEL(2, BT),
                                     DR(1, PA, DEV),
                                     WT(2, PA),
                                     KERNEL(3, BT),
                                     DR(2, PA, DEV),
                                     KERNEL(4, BT),
                                     KERNEL(5, BT),
                                     KERNEL(6, 1),
                                     MV(3, GR, LOC_ZERO, DEV, 0),
                                     MV(2, GR, LOC_ZERO, DEV, 0),
                                     WT(3, GR),
                                     KERNEL(7, V),
                                     KERNEL(11, ROWS),
                                     WT(2, GR),
                                     KERNEL(10, ROWS),
                                     MV(1, GR, LOC_ZERO, DEV, 0),
                                     WT(1, GR),
                                     KERNEL(9, ROWS),
                                     MV(1, GR, DEV, HOST, 0),
                                     MV(0, GR, LOC_ZERO, DEV, 0),
                                     WT(0, GR),
                                     KERNEL(8, ROWS),
                                     MV(0, GR, DEV, HOST, 0)};
/* The norm (c0's and c1's on the host) and the update chunk by chunk, each brought
 * from NVMe first where that is its home, written back after. */
static const IsaInstr gradnorm_list[] = {WT(0, GR), KH(12, 1), WT(1, GR), KH(13, 1), KERNEL(14, 1), KERNEL(15, 1)};
static const IsaInstr update_list[] = {MV(1, OP, NVME, HOST, 0),
                                       KH(16, ROWS *V),
                                       DR(0, GR, HOST),
                                       MV(2, PA, NVME, DEV, 0),
                                       MV(2, OP, NVME, DEV, 0),
                                       WT(1, OP),
                                       KH(17, ROWS *V),
                                       MV(1, OP, HOST, NVME, 0),
                                       DR(1, GR, HOST),
                                       WT(2, PA),
                                       WT(2, OP),
                                       KERNEL(18, ROWS *V),
                                       MV(2, PA, DEV, NVME, 0),
                                       MV(2, OP, DEV, NVME, 0),
                                       DR(2, GR, DEV),
                                       MV(3, OP, NVME, DEV, 0),
                                       WT(3, OP),
                                       KERNEL(19, ROWS *V + V),
                                       DR(3, GR, DEV)};
#define MICROBATCH(final) LOOP(1, 4, final), INPUT(0, 0, 1, W_TOK), INPUT(1, 0, 1, W_TGT), CALL(0), LOSS(W_LOSS)
static const IsaInstr head[] = {MICROBATCH(1)}, zero[] = {ZERO(TIER_GRADS, 0, P_BYTES)},
                      norm[] = {NORM(W_GNORM, CHUNKS, 1)};
static const IsaInstr forward[] = {INPUT(0, 0, 0, W_TOK), KERNEL(0, BT), KERNEL(1, BT),
                                   KERNEL(2, BT),         KERNEL(3, BT), KERNEL(4, BT)};

void tp_program(ProgBuild *b) {
  static const char *const codes[] = {"bias_fwd",  "fwd0",   "fwd1",   "fwd2",   "fwd3",   "xent",  "loss_mean",
                                      "bias_grad", "wgrad0", "wgrad1", "wgrad2", "wgrad3", "gn0",   "gn1",
                                      "gn2",       "gn3",    "adamw0", "adamw1", "adamw2", "adamw3"};
  static const TpParam params[] = {{"w0", 2, {ROWS, V}, 0, 1, PROG_INIT_NORMAL, 0.02, 0, -1},
                                   {"w1", 2, {ROWS, V}, CW, 1, PROG_INIT_NORMAL, 0.02, 0, -1},
                                   {"w2", 2, {ROWS, V}, 2 * CW, 1, PROG_INIT_NORMAL, 0.02, 0, -1},
                                   {"w3", 2, {ROWS, V}, 3 * CW, 1, PROG_INIT_NORMAL, 0.02, 0, -1},
                                   {"bias", 1, {V}, P_B, 0, PROG_INIT_ZEROS, 0, 0, -1}};
  static const TpInput inputs[] = {{"tokens", PROG_ROLE_TOKENS, {B, T}, W_TOK},
                                   {"targets", PROG_ROLE_TARGETS, {B, T}, W_TGT}};
  static const ProgChunk chunks[CHUNKS] = {{0, 1, 0, CW, {HOST, LOC_NONE, HOST}, -1},
                                           {1, 2, CW, 2 * CW, {HOST, LOC_NONE, NVME}, -1},
                                           {2, 3, 2 * CW, 3 * CW, {NVME, LOC_NONE, NVME}, -1},
                                           {3, 5, 3 * CW, P_BYTES, {DEV, LOC_NONE, DEV}, -1}};
  static const int64_t predicted[4] = {540672, 528384, 466944, 1249280}; /* what the runtime must measure */
  static IsaInstr train[64], eval[8];
  int off = OFFLOAD_VARIANT != 0; /* the offload program makes its gradients by moves from zero */
  int n = off ? tp_cat(train, 64, 4, TP_PART(head), TP_PART(gradnorm_list), TP_PART(norm), TP_PART(update_list))
              : tp_cat(train, 64, 5, TP_PART(zero), TP_PART(head), TP_PART(gradnorm_list), TP_PART(norm),
                       TP_PART(update_list));
  int e = tp_cat(eval, 8, 2, zero, off ? 0 : 1, TP_PART(head));
  eval[e - 5].loop.final = 0;
  const TpList lists[] = {
      TP_LIST("step", step_list), {"train", train, n}, {"eval", eval, e}, TP_LIST("forward", forward)};
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
                      .norm_parts = CHUNKS,
                      .logits_offset = W_LOGITS,
                      .flops_per_step = 1000000},
                .params = params,
                .nparams = 5,
                .inputs = inputs,
                .ninputs = 2,
                .lists = lists,
                .nlists = 4};
  if (off) /* variant 2: a capacity the update's commit of chunk 2 goes beyond (a plan bug) */
    st.s.offload = 1, st.s.capacity = OFFLOAD_VARIANT == 1 ? 589824 : 450000, st.s.nvme = 1, st.chunks = chunks,
    st.nchunks = CHUNKS, st.predicted = predicted;
  tp_write(b, "bigram-offload", &st, 1, codes, 20);
}

#define F32(tier, off) ((float *)(tiers[tier] + (off)))
#define I32(tier, off) ((int32_t *)(tiers[tier] + (off)))

/* logits[r] = b. */
static void k_bias_fwd(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  for (int64_t r = lo; r < hi; r++) memcpy(F32(TIER_WORK, W_LOGITS) + r * V, F32(TIER_PARAMS, P_B), V * sizeof(float));
}

/* logits[r] += W[tok[r]] for the rows chunk c holds. */
static void fwd(char *const *tiers, int c, int64_t lo, int64_t hi) {
  const int32_t *tok = I32(TIER_WORK, W_TOK);
  for (int64_t r = lo; r < hi; r++) {
    int row = tok[r] - c * ROWS;
    if (row < 0 || row >= ROWS) continue;
    const float *w = F32(TIER_PARAMS, c * CW) + row * V;
    float *z = F32(TIER_WORK, W_LOGITS) + r * V;
    for (int j = 0; j < V; j++) z[j] += w[j];
  }
}

/* Per row: loss = logsumexp(z) - z[target]; dlogits = (softmax(z) - onehot) / BT. */
static void k_xent(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
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

static void k_loss_mean(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  double s = 0;
  for (int r = 0; r < BT; r++) s += F32(TIER_WORK, W_LOSSROW)[r];
  *F32(TIER_WORK, W_LOSS) = (float)(s / BT);
}

/* db[j] += column sums of dlogits. */
static void k_bias_grad(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  const float *dz = F32(TIER_WORK, W_DLOGITS);
  for (int64_t j = lo; j < hi; j++) {
    double s = 0;
    for (int r = 0; r < BT; r++) s += dz[r * V + j];
    F32(TIER_GRADS, P_B)[j] += (float)s;
  }
}

/* dW rows of chunk c: row i += the dlogits of the positions whose token is its row. */
static void wgrad(char *const *tiers, int c, int64_t lo, int64_t hi) {
  const int32_t *tok = I32(TIER_WORK, W_TOK);
  const float *dz = F32(TIER_WORK, W_DLOGITS);
  for (int64_t i = lo; i < hi; i++) {
    float *g = F32(TIER_GRADS, c * CW) + i * V;
    for (int j = 0; j < V; j++) {
      double s = 0;
      for (int r = 0; r < BT; r++) s += tok[r] == c * ROWS + i ? dz[r * V + j] : 0.0;
      g[j] += (float)s;
    }
  }
}

/* Part c of the norm: the sum of squares of chunk c's gradients (c3: and the bias's). */
static void gradnorm(char *const *tiers, int c) {
  int64_t n = ROWS * V + (c == CHUNKS - 1 ? V : 0);
  const float *g = F32(TIER_GRADS, c * CW);
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
  F32(TIER_WORK, W_GNORM)[c] = (float)s;
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

/* Chunk c's update over its elements [lo, hi): W rows, then (c3) the bias. */
static void update(char *const *tiers, int c, int64_t lo, int64_t hi, const float *sc) {
  int64_t nw = ROWS * V;
  if (lo < nw) adamw(tiers, c * CW, 1, lo, hi < nw ? hi : nw, sc);
  if (hi > nw) adamw(tiers, P_B, 0, (lo > nw ? lo : nw) - nw, hi - nw, sc);
}

#define PER_CHUNK(c)                                                                                               \
  static void k_fwd##c(char *const *tiers, int64_t lo, int64_t hi, const float *sc) { fwd(tiers, c, lo, hi); }     \
  static void k_wgrad##c(char *const *tiers, int64_t lo, int64_t hi, const float *sc) { wgrad(tiers, c, lo, hi); } \
  static void k_gn##c(char *const *tiers, int64_t lo, int64_t hi, const float *sc) { gradnorm(tiers, c); }         \
  static void k_adamw##c(char *const *tiers, int64_t lo, int64_t hi, const float *sc) { update(tiers, c, lo, hi, sc); }
PER_CHUNK(0)
PER_CHUNK(1)
PER_CHUNK(2)
PER_CHUNK(3)

static const ProgKernelFn kernels[] = {k_bias_fwd,  k_fwd0,   k_fwd1,   k_fwd2,   k_fwd3,   k_xent,  k_loss_mean,
                                       k_bias_grad, k_wgrad0, k_wgrad1, k_wgrad2, k_wgrad3, k_gn0,   k_gn1,
                                       k_gn2,       k_gn3,    k_adamw0, k_adamw1, k_adamw2, k_adamw3};
const ProgCpuBuild colossalc_cpu_builds[] = {{"any (written by hand)", "", kernels}};
const int colossalc_ncpu_builds = 1;
const int colossalc_nkernels = sizeof kernels / sizeof kernels[0];
