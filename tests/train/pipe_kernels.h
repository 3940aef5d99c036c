/* pipe_kernels: the kernels shared by the hand-written pipeline test programs
 * (pipe_program.c, pipe_ref_program.c): a tied-embedding model
 *     x = E[tokens]  h = x W  logits = h E^T  loss = mean cross_entropy(logits, targets)
 * with V = 16, H = 8, seq 4, batch 2 (BT = 8 rows per micro-batch). Each helper
 * takes the byte offsets of its operands, so a program's kernels are one-line
 * wrappers with its own memory layout.
 */
#ifndef COLOSSALC_TESTS_PIPE_KERNELS_H
#define COLOSSALC_TESTS_PIPE_KERNELS_H

#include "program/program.h"

#include <math.h>
#include <string.h>

enum { PV = 16, PH = 8, PBT = 8 };

#define PF32(tier, off) ((float *)(tiers[tier] + (off)))
#define PI32(tier, off) ((const int32_t *)(tiers[tier] + (off)))

/* x[r] = E[tok[r]] for rows [lo, hi). */
static inline void pk_embed(char *const *tiers, int64_t tok, int64_t x, int64_t lo, int64_t hi) {
  for (int64_t r = lo; r < hi; r++)
    memcpy(PF32(TIER_WORK, x) + r * PH, PF32(TIER_PARAMS, 0) + PI32(TIER_WORK, tok)[r] * PH, PH * sizeof(float));
}

/* dE[tok[r]] += dx[r], every row in order (one item: no races). */
static inline void pk_embed_back(char *const *tiers, int64_t tok, int64_t dx) {
  for (int r = 0; r < PBT; r++)
    for (int j = 0; j < PH; j++)
      PF32(TIER_GRADS, 0)[PI32(TIER_WORK, tok)[r] * PH + j] += PF32(TIER_WORK, dx)[r * PH + j];
}

/* Row losses, their mean at loss, dlogits = (softmax - onehot) / BT. */
static inline void pk_xent(char *const *tiers, int64_t logits, int64_t tgt, int64_t dlogits, int64_t lossrow,
                           int64_t loss) {
  double sum_loss = 0;
  for (int r = 0; r < PBT; r++) {
    const float *z = PF32(TIER_WORK, logits) + r * PV;
    float *dz = PF32(TIER_WORK, dlogits) + r * PV;
    int t = PI32(TIER_WORK, tgt)[r];
    double max = z[0], s = 0;
    for (int j = 1; j < PV; j++) max = z[j] > max ? z[j] : max;
    for (int j = 0; j < PV; j++) s += exp((double)z[j] - max);
    PF32(TIER_WORK, lossrow)[r] = (float)(log(s) + max - z[t]);
    sum_loss += PF32(TIER_WORK, lossrow)[r];
    for (int j = 0; j < PV; j++) dz[j] = (float)((exp((double)z[j] - max) / s - (j == t)) / PBT);
  }
  *PF32(TIER_WORK, loss) = (float)(sum_loss / PBT);
}

/* parts[first + r] = sum of squares of gradient row r (cols wide) at g. */
static inline void pk_gnorm(char *const *tiers, int64_t g, int cols, int64_t parts, int first, int64_t lo, int64_t hi) {
  for (int64_t r = lo; r < hi; r++) {
    double s = 0;
    for (int j = 0; j < cols; j++) {
      double v = PF32(TIER_GRADS, g)[r * cols + j];
      s += v * v;
    }
    PF32(TIER_WORK, parts)[first + r] = (float)s;
  }
}

/* AdamW (torch semantics, decay on) over rows [lo, hi) of the parameter at off. */
static inline void pk_adamw(char *const *tiers, int64_t off, int cols, int64_t v_off, int64_t lo, int64_t hi,
                            const float *sc) {
  float *p = PF32(TIER_PARAMS, off), *g = PF32(TIER_GRADS, off);
  float *m = PF32(TIER_OPT, off), *v = PF32(TIER_OPT, v_off + off);
  float lr = sc[SC_LR], b1 = sc[SC_BETA1], b2 = sc[SC_BETA2];
  float step = lr * sc[SC_BC1], sbc2 = sqrtf(sc[SC_BC2]);
  for (int64_t i = lo * cols; i < hi * cols; i++) {
    float gi = g[i] * sc[SC_GSCALE];
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    p[i] *= 1 - lr * sc[SC_WD];
    p[i] -= step * m[i] / (sqrtf(v[i]) * sbc2 + sc[SC_EPS]);
  }
}

#endif
