/* ZeRO inside the step (codegen/zero.h). */
#include "codegen/zero.h"
#include <string.h>
#include "codegen/offload.h"
#include "runtime/program.h"

typedef struct Span { int first, last; } Span; /* instruction indices, -1 when none */

static void widen(Span *s, int i) {
  if (s->first < 0) s->first = i;
  s->last = i;
}

static PInstr *put(Arena *a, PSeq *s, PInstrKind kind) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 256;
    PInstr *v = arena_array(a, cap, sizeof *v);
    if (s->n) memcpy(v, s->v, s->n * sizeof *v);
    s->v = v, s->cap = cap;
  }
  PInstr *in = &s->v[s->n++];
  *in = (PInstr){.kind = kind, .node = -1};
  return in;
}

/* The parameter whose bytes [lo, hi) are, or -1. */
static int param_at(const Program *p, int64_t lo, int64_t hi) {
  for (int k = 0; k < p->nparams; k++) {
    int64_t s = p->params[k].offset, e = s + shape_numel(&p->params[k].node->shape) * 4;
    if (s < hi && lo < e) return k;
  }
  return -1;
}

void zero_schedule(Program *p) {
  ir_assert(p->zero_stage >= 2 && !p->scheduled && !p->offload);
  Arena *a = p->arena;
  int n = p->step.n, np = p->nparams;
  /* uses: [param][forward reads, backward reads, gradient writes] */
  Span (*use)[3] = arena_array(a, np + 1, sizeof *use);
  for (int k = 0; k < np; k++)
    for (int j = 0; j < 3; j++) use[k][j] = (Span){-1, -1};
  for (int i = 0; i < n; i++) {
    const PInstr *in = &p->step.v[i];
    Touch t[K_MAX_BUFS > 3 ? K_MAX_BUFS : 3];
    int nt = instr_touch(p, in, t);
    bool fwd = in->node >= 0 && in->node < p->g->n_forward;
    for (int j = 0; j < nt; j++) {
      if (t[j].tier != RT_TIER_PARAMS && t[j].tier != RT_TIER_GRADS) continue;
      int k = param_at(p, t[j].lo, t[j].hi);
      if (k < 0) continue;
      widen(&use[k][t[j].tier == RT_TIER_GRADS ? 2 : fwd ? 0 : 1], i);
    }
  }
  /* before instruction i: what starts there; after it: what ends there */
  PSeq out = {0};
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < np; k++) {
      if (p->zero_stage == 3)
        for (int j = 0; j < 2; j++)
          if (use[k][j].first == i) put(a, &out, PI_ZERO_GATHER)->chunk = k;
      if (use[k][2].first == i) put(a, &out, PI_ZERO_GRAD)->chunk = k;
    }
    *put(a, &out, p->step.v[i].kind) = p->step.v[i];
    for (int k = 0; k < np; k++) {
      if (use[k][2].last == i) put(a, &out, PI_ZERO_REDUCE)->chunk = k;
      if (p->zero_stage == 3)
        for (int j = 0; j < 2; j++)
          if (use[k][j].last == i) put(a, &out, PI_ZERO_RELEASE)->chunk = k;
    }
  }
  /* a parameter the step never writes a gradient for is still reduced (zeros), so
   * every rank makes the same calls and the update finds a gradient */
  for (int k = 0; k < np; k++)
    if (use[k][2].first < 0) put(a, &out, PI_ZERO_GRAD)->chunk = k, put(a, &out, PI_ZERO_REDUCE)->chunk = k;
  p->step = out;
  p->zero_scheduled = true;
}
