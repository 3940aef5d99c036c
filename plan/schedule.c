/* Pipeline schedules (plan/schedule.h). */
#include "plan/schedule.h"
#include <stdlib.h>
#include "ir/diag.h"

int pipe_actions(int v, int m, PipeSchedule kind) { return kind == PS_ZBH1 ? 3 * m : 2 * m * v; }

/* ZB-H1 (Qi et al. 2024): 1F1B's order, each backward split into B, which computes and
 * sends the input gradient, and W, the weight gradients; stage s runs the W of a
 * micro-batch after the B of s micro-batches later (the last Ws at the end), so that
 * the stages nearer the loss, whose Bs the others wait for, keep their Ws for the
 * cool-down's idle time. Each stage then holds min(m, pp) micro-batches at most, stage
 * 0's 1F1B peak, and the bubble is (pp-1)(F+B-W) rather than 1F1B's (pp-1)(F+B+W). */
static int zb_h1(int pp, int m, int s, PipeAction *out) {
  int n = 0, w = pp - s - 1 < m ? pp - s - 1 : m, nw = 0;
  for (int i = 0; i < w; i++) out[n++] = (PipeAction){true, false, s, i};
  for (int i = 0; i < m; i++) {
    if (i + w < m) out[n++] = (PipeAction){true, false, s, i + w};
    out[n++] = (PipeAction){false, false, s, i};
    if (i - nw >= s) out[n++] = (PipeAction){false, true, s, nw++};
  }
  while (nw < m) out[n++] = (PipeAction){false, true, s, nw++};
  return n;
}

int pipe_schedule(int pp, int v, int m, PipeSchedule kind, int s, PipeAction *out) {
  int n = 0;
  if (kind == PS_ZBH1) return zb_h1(pp, m, s, out);
  if (kind != PS_INTERLEAVED || v == 1) {
    int w = pp - s - 1 < m ? pp - s - 1 : m;
    for (int i = 0; i < w; i++) out[n++] = (PipeAction){true, false, s, i};
    for (int i = 0; i < m - w; i++) {
      out[n++] = (PipeAction){true, false, s, w + i};
      out[n++] = (PipeAction){false, false, s, i};
    }
    for (int i = m - w; i < m; i++) out[n++] = (PipeAction){false, false, s, i};
    return n;
  }
  if (m % pp)
    error_plain("the interleaved schedule needs the micro-batches (%d) to be a multiple of the pipeline stages (%d)", m,
                pp);
  int total = m * v, group = pp * v;
  int warm = m == pp ? total : (pp - s - 1) * 2 + (v - 1) * pp;
  if (warm > total) warm = total;
#define ACT(fw, k)                                                                                              \
  (PipeAction) {                                                                                                \
    fw, false, ((fw) ? ((k) % group) / pp : v - 1 - ((k) % group) / pp) * pp + s, ((k) / group) * pp + (k) % pp \
  }
  for (int k = 0; k < warm; k++) out[n++] = ACT(true, k);
  for (int i = 0; i < total - warm; i++) {
    out[n++] = ACT(true, warm + i);
    out[n++] = ACT(false, i);
  }
  for (int k = total - warm; k < total; k++) out[n++] = ACT(false, k);
#undef ACT
  return n;
}

int pipe_slots(int pp, int v, int m, PipeSchedule kind, int s) {
  int n = pipe_actions(v, m, kind), *last = calloc((size_t)m, sizeof *last), held = 0, most = 0;
  bool *seen = calloc((size_t)m, sizeof *seen);
  PipeAction *acts = malloc((size_t)n * sizeof *acts);
  if (!last || !seen || !acts) diag_internal(__FILE__, __LINE__, "out of memory");
  pipe_schedule(pp, v, m, kind, s, acts);
  for (int i = 0; i < n; i++) last[acts[i].mb] = i;
  for (int i = 0; i < n; i++) {
    int mb = acts[i].mb;
    if (!seen[mb]) seen[mb] = true, held++;
    if (held > most) most = held;
    if (last[mb] == i) held--;
  }
  free(last), free(seen), free(acts);
  return most;
}
