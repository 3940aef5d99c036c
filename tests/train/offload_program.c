/* offload_program: a hand-written offload program (runtime/program.h, "Memory tiers
 * and offload") to test the runtime without the compiler, and the same program
 * without offload to compare it with. Built three times (OFFLOAD_VARIANT):
 *
 *   0  the reference: no "offload", the runtime zeroes the gradients; the offload
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
#include "runtime/program.h"
#include "runtime/train_program.h"

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

_Static_assert(W_TGT == 256 && W_LOGITS == 512 && W_DLOGITS == 66048 && W_LOSS == 131840 &&
                   W_GNORM == 131904 && W_BYTES == 131968,
               "work layout changed: update the JSON");
_Static_assert(CW == 65536 && P_B == 262144 && P_BYTES == 263168,
               "parameter layout changed: update the JSON");

/* Every kernel takes the four tier bases as its buffers (program.h, "args"), in tier
 * order, so the kernels index tiers[] (bytes 0: each keeps to the layout above). */
#define TIER_ARGS "\"args\": [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]"
#define K(id, ext) "{\"op\": \"kernel\", \"kernel\": " #id ", \"extent\": " #ext ", " TIER_ARGS "}"
#if OFFLOAD_VARIANT == 0
#define KH(id, ext) K(id, ext)
#define NOP "{\"op\": \"zero\", \"tier\": 3, \"offset\": 0, \"bytes\": 0}"
#define MOVE(c, part, from, to, keep) NOP
#define DROP(c, part, at) NOP
#define WAIT(c, part) NOP
#define OFFLOAD ""
#else
#define KH(id, ext) \
    "{\"op\": \"kernel\", \"kernel\": " #id ", \"extent\": " #ext ", " TIER_ARGS ", \"on\": \"host\"}"
#define MOVE(c, part, from, to, keep)                                                        \
    "{\"op\": \"move\", \"chunk\": " #c ", \"part\": \"" part "\", \"from\": \"" from        \
    "\", \"to\": \"" to "\", \"keep\": " keep "}"
#define DROP(c, part, at) \
    "{\"op\": \"drop\", \"chunk\": " #c ", \"part\": \"" part "\", \"at\": \"" at "\"}"
#define WAIT(c, part) "{\"op\": \"wait\", \"chunk\": " #c ", \"part\": \"" part "\"}"
#define HOME(p, o) "\"home\": {\"params\": \"" p "\", \"grads\": \"none\", \"opt\": \"" o "\"}"
#if OFFLOAD_VARIANT == 1
#define CAPACITY "589824"
#else
#define CAPACITY "450000"
#endif
#define OFFLOAD                                                                              \
    " \"offload\": {\"device_capacity\": " CAPACITY ", \"chunks\": ["                        \
    "   {\"params\": [0, 1], " HOME("host", "host") "},"                                     \
    "   {\"params\": [1, 2], " HOME("host", "nvme") "},"                                     \
    "   {\"params\": [2, 3], " HOME("nvme", "nvme") "},"                                     \
    "   {\"params\": [3, 5], " HOME("device", "device") "}]},"                               \
    " \"predicted\": {\"device_peak\": 540672, \"host_peak\": 528384,"                       \
    "   \"nvme_peak\": 466944, \"transfer_bytes\": 1249280},"
#endif

#define W_PARAM(i, off)                                                                      \
    "{\"name\": \"w" #i "\", \"shape\": [64, 256], \"offset\": " #off ", \"decay\": true,"   \
    " \"init\": \"normal\", \"a\": 0.02, \"b\": 0}"

const char colossalc_program_json[] =
    "{\"version\": 1, \"model\": \"bigram-offload\", \"batch\": 4, \"seq\": 16, \"vocab\": 256,"
    " \"scalars\": 12,"
    " \"tiers\": [263168, 263168, 526336, 131968],"
    " \"opt_v_offset\": 263168,"
    " \"train\": {\"optimizer\": \"adamw\", \"lr\": 0.05, \"beta1\": 0.9, \"beta2\": 0.95,"
    "   \"eps\": 1e-8, \"weight_decay\": 0.1, \"momentum\": 0, \"clip\": 1.0, \"warmup\": 2,"
    "   \"min_lr\": 0.005, \"schedule\": \"cosine\"},"
    " \"params\": [" W_PARAM(0, 0) "," W_PARAM(1, 65536) "," W_PARAM(2, 131072) ","
    W_PARAM(3, 196608) ","
    "   {\"name\": \"bias\", \"shape\": [256], \"offset\": 262144, \"decay\": false,"
    "    \"init\": \"zeros\"}],"
    " \"inputs\": [{\"name\": \"tokens\", \"role\": \"tokens\", \"shape\": [4, 16], \"offset\": 0},"
    "   {\"name\": \"targets\", \"role\": \"targets\", \"shape\": [4, 16], \"offset\": 256}],"
    " \"loss_offset\": 131840, \"logits_offset\": 512,"
    " \"gradnorm_offset\": 131904, \"gradnorm_parts\": 4,"
    " \"flops_per_step\": 1000000," OFFLOAD
    " \"kernels\": [\"bias_fwd\", \"fwd0\", \"fwd1\", \"fwd2\", \"fwd3\", \"xent\", \"loss_mean\","
    "   \"bias_grad\", \"wgrad0\", \"wgrad1\", \"wgrad2\", \"wgrad3\", \"gn0\", \"gn1\", \"gn2\","
    "   \"gn3\", \"adamw0\", \"adamw1\", \"adamw2\", \"adamw3\"],"
    " \"step\": ["
    MOVE(0, "params", "host", "device", "true") ","
    MOVE(3, "opt", "device", "nvme", "false") ","
    K(0, 64) "," WAIT(0, "params") ","
    MOVE(1, "params", "host", "device", "true") ","
    K(1, 64) "," DROP(0, "params", "device") "," WAIT(1, "params") ","
    MOVE(2, "params", "nvme", "device", "true") ","
    K(2, 64) "," DROP(1, "params", "device") "," WAIT(2, "params") ","
    K(3, 64) "," DROP(2, "params", "device") ","
    K(4, 64) "," K(5, 64) "," K(6, 1) ","
    MOVE(3, "grads", "zero", "device", "false") ","
    MOVE(2, "grads", "zero", "device", "false") ","
    WAIT(3, "grads") "," K(7, 256) "," K(11, 64) ","
    WAIT(2, "grads") "," K(10, 64) ","
    MOVE(1, "grads", "zero", "device", "false") "," WAIT(1, "grads") "," K(9, 64) ","
    MOVE(1, "grads", "device", "host", "false") ","
    MOVE(0, "grads", "zero", "device", "false") "," WAIT(0, "grads") "," K(8, 64) ","
    MOVE(0, "grads", "device", "host", "false") "],"
    " \"sync\": [], \"gradnorm\": ["
    WAIT(0, "grads") "," KH(12, 1) "," WAIT(1, "grads") "," KH(13, 1) ","
    K(14, 1) "," K(15, 1) "],"
    " \"update\": ["
    MOVE(1, "opt", "nvme", "host", "false") ","
    KH(16, 16384) "," DROP(0, "grads", "host") ","
    MOVE(2, "params", "nvme", "device", "false") ","
    MOVE(2, "opt", "nvme", "device", "false") ","
    WAIT(1, "opt") "," KH(17, 16384) ","
    MOVE(1, "opt", "host", "nvme", "false") "," DROP(1, "grads", "host") ","
    WAIT(2, "params") "," WAIT(2, "opt") "," K(18, 16384) ","
    MOVE(2, "params", "device", "nvme", "false") ","
    MOVE(2, "opt", "device", "nvme", "false") "," DROP(2, "grads", "device") ","
    MOVE(3, "opt", "nvme", "device", "false") "," WAIT(3, "opt") ","
    K(19, 16640) "," DROP(3, "grads", "device") "],"
    " \"forward\": [" K(0, 64) "," K(1, 64) "," K(2, 64) "," K(3, 64) "," K(4, 64) "]"
    "}";

#define F32(tier, off) ((float *)(tiers[tier] + (off)))
#define I32(tier, off) ((int32_t *)(tiers[tier] + (off)))

/* logits[r] = b. */
static void k_bias_fwd(char *const *tiers, int64_t lo, int64_t hi, const float *sc)
{
    for (int64_t r = lo; r < hi; r++)
        memcpy(F32(RT_TIER_WORK, W_LOGITS) + r * V, F32(RT_TIER_PARAMS, P_B), V * sizeof(float));
}

/* logits[r] += W[tok[r]] for the rows chunk c holds. */
static void fwd(char *const *tiers, int c, int64_t lo, int64_t hi)
{
    const int32_t *tok = I32(RT_TIER_WORK, W_TOK);
    for (int64_t r = lo; r < hi; r++) {
        int row = tok[r] - c * ROWS;
        if (row < 0 || row >= ROWS)
            continue;
        const float *w = F32(RT_TIER_PARAMS, c * CW) + row * V;
        float *z = F32(RT_TIER_WORK, W_LOGITS) + r * V;
        for (int j = 0; j < V; j++)
            z[j] += w[j];
    }
}

/* Per row: loss = logsumexp(z) - z[target]; dlogits = (softmax(z) - onehot) / BT. */
static void k_xent(char *const *tiers, int64_t lo, int64_t hi, const float *sc)
{
    const int32_t *tgt = I32(RT_TIER_WORK, W_TGT);
    for (int64_t r = lo; r < hi; r++) {
        const float *z = F32(RT_TIER_WORK, W_LOGITS) + r * V;
        float *dz = F32(RT_TIER_WORK, W_DLOGITS) + r * V;
        double max = z[0], sum = 0;
        for (int j = 1; j < V; j++)
            max = z[j] > max ? z[j] : max;
        for (int j = 0; j < V; j++)
            sum += exp((double)z[j] - max);
        F32(RT_TIER_WORK, W_LOSSROW)[r] = (float)(log(sum) + max - z[tgt[r]]);
        for (int j = 0; j < V; j++)
            dz[j] = (float)((exp((double)z[j] - max) / sum - (j == tgt[r])) / BT);
    }
}

static void k_loss_mean(char *const *tiers, int64_t lo, int64_t hi, const float *sc)
{
    double s = 0;
    for (int r = 0; r < BT; r++)
        s += F32(RT_TIER_WORK, W_LOSSROW)[r];
    *F32(RT_TIER_WORK, W_LOSS) = (float)(s / BT);
}

/* db[j] += column sums of dlogits. */
static void k_bias_grad(char *const *tiers, int64_t lo, int64_t hi, const float *sc)
{
    const float *dz = F32(RT_TIER_WORK, W_DLOGITS);
    for (int64_t j = lo; j < hi; j++) {
        double s = 0;
        for (int r = 0; r < BT; r++)
            s += dz[r * V + j];
        F32(RT_TIER_GRADS, P_B)[j] += (float)s;
    }
}

/* dW rows of chunk c: row i += the dlogits of the positions whose token is its row. */
static void wgrad(char *const *tiers, int c, int64_t lo, int64_t hi)
{
    const int32_t *tok = I32(RT_TIER_WORK, W_TOK);
    const float *dz = F32(RT_TIER_WORK, W_DLOGITS);
    for (int64_t i = lo; i < hi; i++) {
        float *g = F32(RT_TIER_GRADS, c * CW) + i * V;
        for (int j = 0; j < V; j++) {
            double s = 0;
            for (int r = 0; r < BT; r++)
                s += tok[r] == c * ROWS + i ? dz[r * V + j] : 0.0;
            g[j] += (float)s;
        }
    }
}

/* Part c of the norm: the sum of squares of chunk c's gradients (c3: and the bias's). */
static void gradnorm(char *const *tiers, int c)
{
    int64_t n = ROWS * V + (c == CHUNKS - 1 ? V : 0);
    const float *g = F32(RT_TIER_GRADS, c * CW);
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    F32(RT_TIER_WORK, W_GNORM)[c] = (float)s;
}

/* AdamW on elements [lo, hi) of the parameter at byte offset off. */
static void adamw(char *const *tiers, int64_t off, int decay, int64_t lo, int64_t hi,
                  const float *sc)
{
    float *p = F32(RT_TIER_PARAMS, off), *g = F32(RT_TIER_GRADS, off);
    float *m = F32(RT_TIER_OPT, off), *v = F32(RT_TIER_OPT, P_BYTES + off);
    float lr = sc[RT_SC_LR], b1 = sc[TRAIN_SC_BETA1], b2 = sc[TRAIN_SC_BETA2];
    float step = lr * sc[RT_SC_BC1], sbc2 = sqrtf(sc[RT_SC_BC2]);
    for (int64_t i = lo; i < hi; i++) {
        float gi = g[i] * sc[RT_SC_GSCALE];
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        if (decay)
            p[i] *= 1 - lr * sc[TRAIN_SC_WD];
        p[i] -= step * m[i] / (sqrtf(v[i]) * sbc2 + sc[TRAIN_SC_EPS]);
    }
}

/* Chunk c's update over its elements [lo, hi): W rows, then (c3) the bias. */
static void update(char *const *tiers, int c, int64_t lo, int64_t hi, const float *sc)
{
    int64_t nw = ROWS * V;
    if (lo < nw)
        adamw(tiers, c * CW, 1, lo, hi < nw ? hi : nw, sc);
    if (hi > nw)
        adamw(tiers, P_B, 0, (lo > nw ? lo : nw) - nw, hi - nw, sc);
}

#define PER_CHUNK(c)                                                                          \
    static void k_fwd##c(char *const *tiers, int64_t lo, int64_t hi, const float *sc)        \
    {                                                                                         \
        fwd(tiers, c, lo, hi);                                                                \
    }                                                                                         \
    static void k_wgrad##c(char *const *tiers, int64_t lo, int64_t hi, const float *sc)      \
    {                                                                                         \
        wgrad(tiers, c, lo, hi);                                                              \
    }                                                                                         \
    static void k_gn##c(char *const *tiers, int64_t lo, int64_t hi, const float *sc)         \
    {                                                                                         \
        gradnorm(tiers, c);                                                                   \
    }                                                                                         \
    static void k_adamw##c(char *const *tiers, int64_t lo, int64_t hi, const float *sc)      \
    {                                                                                         \
        update(tiers, c, lo, hi, sc);                                                         \
    }
PER_CHUNK(0)
PER_CHUNK(1)
PER_CHUNK(2)
PER_CHUNK(3)

const RtKernelFn colossalc_kernels[] = {
    k_bias_fwd, k_fwd0,   k_fwd1,   k_fwd2,   k_fwd3,   k_xent,   k_loss_mean,
    k_bias_grad, k_wgrad0, k_wgrad1, k_wgrad2, k_wgrad3, k_gn0,    k_gn1,
    k_gn2,      k_gn3,    k_adamw0, k_adamw1, k_adamw2, k_adamw3};
const int colossalc_nkernels = sizeof colossalc_kernels / sizeof colossalc_kernels[0];
