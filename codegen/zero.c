/* ZeRO inside the step (codegen/zero.h). */
#include "codegen/zero.h"
#include <stdlib.h>
#include <string.h>
#include "codegen/compose.h"
#include "codegen/offload.h"
#include "program/program.h"

typedef struct Span {
  int first, last;
} Span;                                    /* instruction indices, -1 when none */
enum { USE_FWD, USE_BWD, USE_GRAD, USES }; /* forward reads, backward reads, gradient */

static void widen(Span *s, int i) {
  if (s->first < 0) s->first = i;
  s->last = i;
}

/* Every parameter whose bytes meet [lo, hi) gets instruction i in its span u (a range
 * may cover several parameters: a GEMM operand's span is an upper bound). */
static void mark(const Program *p, Span (*use)[USES], int u, int64_t lo, int64_t hi, int i) {
  for (int k = 0; k < p->nparams; k++) {
    int64_t s = p->params[k].offset, e = s + pparam_bytes(&p->params[k]);
    if (s < hi && lo < e) widen(&use[k][u], i);
  }
}

/* The first instruction of the backward pass: the first whose node is not a forward
 * node. Instructions before it are the forward pass whatever their node (-1: none),
 * those from it on the backward pass, so the two spans of a parameter never overlap
 * and every read lies in one of them. */
static int backward_start(const Program *p) {
  for (int i = 0; i < p->step.n; i++)
    if (p->step.v[i].node >= p->g->n_forward) return i;
  return p->step.n;
}

/* use[k]: the spans of parameter k's forward reads, backward reads and gradient. */
static Span (*find_uses(const Program *p))[USES] {
  int np = p->nparams, bwd = backward_start(p);
  Span(*use)[USES] = arena_array(p->arena, np + 1, sizeof *use);
  for (int k = 0; k < np; k++)
    for (int j = 0; j < USES; j++) use[k][j] = (Span){-1, -1};
  for (int i = 0; i < p->step.n; i++) {
    Touch t[K_MAX_BUFS > 3 ? K_MAX_BUFS : 3];
    int nt = instr_touch(p, &p->step.v[i], t);
    for (int j = 0; j < nt; j++) {
      if (t[j].tier == TIER_GRADS) mark(p, use, USE_GRAD, t[j].lo, t[j].hi, i);
      if (t[j].tier == TIER_PARAMS) mark(p, use, i < bwd ? USE_FWD : USE_BWD, t[j].lo, t[j].hi, i);
    }
  }
  return use;
}

typedef struct OwnItem {
  int64_t numel;
  int index;
} OwnItem;

static int own_cmp(const void *a, const void *b) {
  const OwnItem *x = a, *y = b;
  if (x->numel != y->numel) return x->numel > y->numel ? -1 : 1;
  return x->index - y->index;
}

void zero_assign_owners(Program *p) {
  ir_assert(p->zero_stage >= 1 && p->dp > 0);
  int np = p->nparams, dp = (int)p->dp;
  OwnItem *items = arena_array(p->arena, np ? np : 1, sizeof *items);
  int64_t *load = arena_array(p->arena, dp, sizeof *load);
  for (int i = 0; i < np; i++) items[i] = (OwnItem){p->params[i].numel, i};
  qsort(items, np, sizeof *items, own_cmp);
  for (int k = 0; k < np; k++) {
    int best = 0;
    for (int r = 1; r < dp; r++) best = load[r] < load[best] ? r : best;
    p->params[items[k].index].owner = best;
    load[best] += items[k].numel;
  }
}

void zero_split_params(Program *p) {
  ir_assert(p->zero_stage >= 1 && p->dp > 0);
  int np = p->nparams, *pieces = arena_array(p->arena, np + 1, sizeof *pieces);
  int64_t total = 0;
  for (int k = 0; k < np; k++) total += p->params[k].numel;
  for (int k = 0; k < np; k++) pieces[k] = p->params[k].numel * 2 * p->dp > total ? (int)p->dp : 1;
  if (p->dp > 1) lower_split_params(p, pieces);
}

/* Whether the gather of parameter k's use j is issued ahead, at instruction at (the
 * previous group's start; -1 for the first group: never): not while k is still held
 * there for its forward use. */
static bool prefetched(Span (*use)[USES], int k, int j, int at) {
  return at >= 0 && (j == USE_FWD || use[k][USE_FWD].last < at);
}

void zero_schedule(Program *p) {
  ir_assert(p->zero_stage >= 2 && !p->scheduled && !p->offload && p->pp <= 1);
  Arena *a = p->arena;
  int n = p->step.n, np = p->nparams;
  Span(*use)[USES] = find_uses(p);
  /* Stage 3 prefetches. A group is the uses that start at one instruction; its gathers
   * are issued at the previous group's start (overlapping that group's compute, on a
   * device with a communication stream), and a join at its own start waits for them.
   * A gather whose parameter is still held there (its forward use not yet released)
   * is issued at its own start instead, in order with the compute. */
  int *next = arena_array(a, n + 1, sizeof *next), *prev = arena_array(a, n + 1, sizeof *prev), last = -1;
  bool *starts = arena_array(a, n + 1, sizeof *starts);
  for (int i = 0; i < n && p->zero_stage == 3; i++) {
    for (int k = 0; k < np && !starts[i]; k++) starts[i] = use[k][USE_FWD].first == i || use[k][USE_BWD].first == i;
    next[i] = -1, prev[i] = last;
    if (!starts[i]) continue;
    if (last >= 0) next[last] = i;
    last = i;
  }
  PSeq out = {0};
  for (int i = 0; i < n; i++) {
    if (starts[i]) {
      for (int k = 0; k < np; k++) /* this group's gathers that could not be prefetched */
        for (int j = USE_FWD; j <= USE_BWD; j++)
          if (use[k][j].first == i && !prefetched(use, k, j, prev[i]))
            pseq_push(a, &out, ISA_ZERO_GATHER)->param.index = k;
      pseq_push(a, &out, ISA_JOIN);                /* the group's prefetched gathers have arrived */
      for (int k = 0; k < np && next[i] >= 0; k++) /* the next group's, ahead */
        for (int j = USE_FWD; j <= USE_BWD; j++)
          if (use[k][j].first == next[i] && prefetched(use, k, j, i)) {
            IsaInstr *in = pseq_push(a, &out, ISA_ZERO_GATHER);
            in->param.index = k, in->overlap = true;
          }
    }
    for (int k = 0; k < np; k++)
      if (use[k][USE_GRAD].first == i) pseq_push(a, &out, ISA_ZERO_GRAD)->param.index = k;
    *pseq_push(a, &out, (IsaOp)p->step.v[i].op) = p->step.v[i];
    for (int k = 0; k < np; k++) {
      if (use[k][USE_GRAD].last == i) pseq_push(a, &out, ISA_ZERO_REDUCE)->param.index = k;
      if (p->zero_stage == 3)
        for (int j = USE_FWD; j <= USE_BWD; j++)
          if (use[k][j].last == i) pseq_push(a, &out, ISA_ZERO_RELEASE)->param.index = k;
    }
  }
  /* a parameter the step never writes a gradient for is still reduced (zeros), so
   * every rank makes the same calls and the update finds a gradient */
  for (int k = 0; k < np; k++)
    if (use[k][USE_GRAD].first < 0)
      pseq_push(a, &out, ISA_ZERO_GRAD)->param.index = k, pseq_push(a, &out, ISA_ZERO_REDUCE)->param.index = k;
  p->step = out;
  p->zero_scheduled = true;
}

/* ---- the memory a step holds ----------------------------------------------------------- */

enum { PAGE = 4096 }; /* the runtime's granule (the host page; codegen/offload.c's too) */

typedef struct Pages {
  int *count[4]; /* per reserved tier: ranges holding each page, else NULL */
  int64_t held;  /* bytes of the pages with a count */
} Pages;

static void pages_add(Pages *m, int tier, int64_t off, int64_t bytes, int d) {
  if (!m->count[tier] || bytes <= 0) return;
  for (int64_t g = off / PAGE; g < (off + bytes + PAGE - 1) / PAGE; g++) {
    if (d > 0 && m->count[tier][g]++ == 0) m->held += PAGE;
    if (d < 0 && --m->count[tier][g] == 0) m->held -= PAGE;
  }
}

/* Adds (d 1) or takes back (d -1) rank r's owned shards between steps. */
static void owned_pages(const Program *p, Pages *m, int r, int d) {
  bool adamw = train_moments(&p->g->train) == 2; /* v too */
  for (int i = 0; i < p->nparams; i++) {
    int64_t off = p->params[i].offset, b = pparam_bytes(&p->params[i]);
    if (p->zero_stage > 0 && p->params[i].owner != r) continue;
    pages_add(m, TIER_PARAMS, off, b, d);
    pages_add(m, TIER_GRADS, off, b, d);
    pages_add(m, TIER_OPT, off, b, d);
    if (adamw) pages_add(m, TIER_OPT, p->opt_v_offset + off, b, d);
  }
}

void zero_predict_memory(const Program *p, int64_t *out, int n) {
  ir_assert(!p->offload);
  int stage = (int)p->zero_stage;
  bool reserved[4] = {stage == 3, stage >= 2 && p->zero_scheduled, stage >= 1, false};
  Pages m = {{0}, 0};
  int64_t whole = program_staging(p);
  for (int t = 0; t < 4; t++) {
    int64_t bytes = t == TIER_WORK ? program_work_bytes(p) : p->tiers[t];
    if (bytes <= 0) continue;
    /* malloc'd once for every rank (each rank's counts return to zero after it) */
    if (reserved[t] && !(m.count[t] = calloc((size_t)(bytes / PAGE + 2), sizeof(int))))
      diag_internal(__FILE__, __LINE__, "out of memory predicting ZeRO's memory");
    if (!reserved[t]) whole += bytes;
  }
  for (int r = 0; r < n; r++) {
    owned_pages(p, &m, r, 1); /* between steps: the owned shards */
    int64_t peak = m.held;
    for (int i = 0; i < p->step.n; i++) { /* a non-owner's gathers and gradients */
      const IsaInstr *in = &p->step.v[i];
      if (in->op < ISA_ZERO_GATHER || in->op > ISA_ZERO_REDUCE || p->params[in->param.index].owner == r) continue;
      int tier = in->op == ISA_ZERO_GATHER || in->op == ISA_ZERO_RELEASE ? TIER_PARAMS : TIER_GRADS;
      int d = in->op == ISA_ZERO_GATHER || in->op == ISA_ZERO_GRAD ? 1 : -1;
      pages_add(&m, tier, p->params[in->param.index].offset, pparam_bytes(&p->params[in->param.index]), d);
      if (m.held > peak) peak = m.held;
    }
    owned_pages(p, &m, r, -1); /* the step released what it gathered: nothing is left */
    ir_assert(m.held == 0);
    out[r] = whole + peak;
  }
  for (int t = 0; t < 4; t++) free(m.count[t]);
}
