/* Pipeline schedules (plan/schedule.h). */
#include "plan/schedule.h"
#include <stdlib.h>
#include "ir/diag.h"

int pipe_schedule(int pp, int v, int m, bool interleaved, int s, PipeAction *out) {
  int n = 0;
  if (!interleaved || v == 1) {
    int w = pp - s - 1 < m ? pp - s - 1 : m;
    for (int i = 0; i < w; i++) out[n++] = (PipeAction){true, s, i};
    for (int i = 0; i < m - w; i++) {
      out[n++] = (PipeAction){true, s, w + i};
      out[n++] = (PipeAction){false, s, i};
    }
    for (int i = m - w; i < m; i++) out[n++] = (PipeAction){false, s, i};
    return n;
  }
  if (m % pp)
    error_plain("the interleaved schedule needs the micro-batches (%d) to be a multiple of the pipeline stages (%d)", m,
                pp);
  int total = m * v, group = pp * v;
  int warm = m == pp ? total : (pp - s - 1) * 2 + (v - 1) * pp;
  if (warm > total) warm = total;
#define ACT(fw, k) \
  (PipeAction) { fw, ((fw) ? ((k) % group) / pp : v - 1 - ((k) % group) / pp) * pp + s, ((k) / group) * pp + (k) % pp }
  for (int k = 0; k < warm; k++) out[n++] = ACT(true, k);
  for (int i = 0; i < total - warm; i++) {
    out[n++] = ACT(true, warm + i);
    out[n++] = ACT(false, i);
  }
  for (int k = total - warm; k < total; k++) out[n++] = ACT(false, k);
#undef ACT
  return n;
}

int pipe_slots(int pp, int v, int m, bool interleaved, int s) {
  int n = 2 * m * v, *last = calloc((size_t)m, sizeof *last), held = 0, most = 0;
  bool *seen = calloc((size_t)m, sizeof *seen);
  PipeAction *acts = malloc((size_t)n * sizeof *acts);
  if (!last || !seen || !acts) diag_internal(__FILE__, __LINE__, "out of memory");
  pipe_schedule(pp, v, m, interleaved, s, acts);
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
