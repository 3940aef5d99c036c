/* Programs written by hand for the runtime's tests (test_program.h): their stages into
 * the program format, as codegen/program.c writes a compiled one. */
#include "test_program.h"

#include <stdio.h>
#include <stdlib.h>

static ProgParam param_of(ProgBuild *b, const TpParam *q, int64_t tp, int global) {
  ProgParam r = {.name = prog_build_str(b, q->name),
                 .ndim = q->ndim,
                 .numel = 1,
                 .offset = q->offset,
                 .decay = q->decay,
                 .init = q->init,
                 .a = q->a,
                 .b = q->b,
                 .tp_dim = q->tp_dim,
                 .tp_blocks = 1,
                 .owner = -1};
  for (int d = 0; d < q->ndim; d++) r.shape[d] = q->shape[d] * (global && d == q->tp_dim ? tp : 1);
  for (int d = 0; d < q->ndim; d++) r.numel *= r.shape[d];
  return r;
}

/* The model's record: every parameter once, in stage order, packed. */
static void write_model(ProgBuild *b, ProgStage m, const TpStage *st, int n, const char **names, int *nnames) {
  m.stage = -1, m.slots = 1, m.param0 = prog_build_count(b, PROG_SEC_PARAMS), m.param_elems = 0, m.nparams = 0;
  m.tokens = m.targets = -1, m.ninputs = 0, m.offload = m.nchunks = m.npredicted = m.nmemory = 0;
  m.no_sample = -1, m.overlaps = m.reserved = 0;
  for (int k = 0; k < PROG_NLISTS; k++) m.list[k] = -1;
  for (int s = 0; s < n; s++)
    for (int i = 0; i < st[s].nparams; i++) {
      int g = 0;
      while (g < *nnames && strcmp(names[g], st[s].params[i].name)) g++;
      if (g < *nnames) continue;
      names[(*nnames)++] = st[s].params[i].name;
      ProgParam r = param_of(b, &st[s].params[i], m.tp, 1);
      r.offset = m.param_elems * 4, r.global = g, m.param_elems += r.numel, m.nparams++;
      prog_build_add(b, PROG_SEC_PARAMS, &r, 1);
    }
  int64_t bytes = m.param_elems * 4;
  m.tiers[TIER_PARAMS] = m.tiers[TIER_GRADS] = m.opt_v_offset = bytes;
  m.tiers[TIER_OPT] = m.optimizer == PROG_OPT_ADAMW ? 2 * bytes : m.momentum > 0 ? bytes : 0;
  m.tiers[TIER_WORK] = 0;
  prog_build_add(b, PROG_SEC_STAGES, &m, 1);
}

/* The stage's lists: calls pointing at the stage's lists to call, the named ones. */
static void write_lists(ProgBuild *b, const TpStage *t, ProgStage *s) {
  int64_t base = prog_build_count(b, PROG_SEC_LISTS), proc[16], nproc = 0;
  for (int l = 0; l < t->nlists && nproc < 16; l++) {
    int named = 0;
    for (int k = 0; k < PROG_NLISTS; k++) named |= !strcmp(t->lists[l].name, prog_list_names[k]);
    if (!named) proc[nproc++] = base + l;
  }
  for (int l = 0; l < t->nlists; l++) {
    const TpList *x = &t->lists[l];
    ProgList r = {prog_build_str(b, x->name), prog_build_count(b, PROG_SEC_INSTRS), x->n, 0};
    int64_t at = prog_build_add(b, PROG_SEC_INSTRS, x->v, x->n);
    for (int i = 0; i < x->n; i++) {
      IsaInstr *in = prog_build_at(b, PROG_SEC_INSTRS, at + i);
      if (in->op == ISA_CALL) in->call.list = (int32_t)proc[in->call.list];
      r.sends |= in->op == ISA_SEND;
    }
    for (int k = 0; k < PROG_NLISTS; k++)
      if (!strcmp(x->name, prog_list_names[k])) s->list[k] = base + l;
    prog_build_add(b, PROG_SEC_LISTS, &r, 1);
  }
}

/* The collectives' staging: the most of any instruction (isa_staging_bytes), as
 * codegen/compose.c's program_staging. */
static int64_t staging(const TpStage *t) {
  int64_t most = 0;
  for (int l = 0; l < t->nlists; l++)
    for (int i = 0; i < t->lists[l].n; i++) {
      int64_t b = isa_staging_bytes(&t->lists[l].v[i]);
      most = b > most ? b : most;
    }
  return most;
}

/* The stages this stage sends to or receives from. */
static void write_peers(ProgBuild *b, const TpStage *t, ProgStage *s) {
  s->peers = prog_build_count(b, PROG_SEC_INTS);
  for (int l = 0; l < t->nlists; l++)
    for (int i = 0; i < t->lists[l].n; i++) {
      const IsaInstr *in = &t->lists[l].v[i];
      int64_t peer = in->p2p.peer, seen = 0;
      if (in->op != ISA_SEND && in->op != ISA_RECV) continue;
      for (int64_t k = 0; k < s->npeers; k++) seen |= *(int64_t *)prog_build_at(b, PROG_SEC_INTS, s->peers + k) == peer;
      if (!seen) prog_build_add(b, PROG_SEC_INTS, &peer, 1), s->npeers++;
    }
}

static void write_stage(ProgBuild *b, const TpStage *t, const ProgStage *model, const char **names, int nnames) {
  ProgStage s = t->s;
  s.model = model->model, s.param0 = prog_build_count(b, PROG_SEC_PARAMS), s.nparams = t->nparams;
  s.param_elems = 0, s.tokens = s.targets = -1;
  for (int i = 0; i < t->nparams; i++) {
    ProgParam r = param_of(b, &t->params[i], s.tp, 0);
    while (r.global < nnames && strcmp(names[r.global], t->params[i].name)) r.global++;
    s.param_elems += r.numel;
    prog_build_add(b, PROG_SEC_PARAMS, &r, 1);
  }
  s.input0 = prog_build_count(b, PROG_SEC_INPUTS), s.ninputs = t->ninputs;
  for (int i = 0; i < t->ninputs; i++) {
    const TpInput *x = &t->inputs[i];
    ProgInput r = {.name = prog_build_str(b, x->name),
                   .role = x->role,
                   .ndim = 2,
                   .row_elems = x->shape[1],
                   .offset = x->offset,
                   .shape = {x->shape[0], x->shape[1]}};
    if (x->role == PROG_ROLE_TOKENS) s.tokens = i;
    if (x->role == PROG_ROLE_TARGETS) s.targets = i;
    prog_build_add(b, PROG_SEC_INPUTS, &r, 1);
  }
  for (int k = 0; k < PROG_NLISTS; k++) s.list[k] = -1;
  write_lists(b, t, &s);
  write_peers(b, t, &s);
  s.staging = staging(t);
  s.groups = prog_build_add(b, PROG_SEC_INTS, t->groups, t->ngroup_ints), s.ngroups = t->ngroups;
  s.chunk0 = prog_build_add(b, PROG_SEC_CHUNKS, t->chunks, t->nchunks), s.nchunks = t->nchunks;
  if (t->predicted) s.predicted = prog_build_add(b, PROG_SEC_INTS, t->predicted, 4), s.npredicted = 1;
  /* what the compiler decides for the runtime (codegen/program.c, write_run_facts) */
  for (int l = 0; l < t->nlists; l++)
    for (int i = 0; i < t->lists[l].n; i++) s.overlaps |= t->lists[l].v[i].overlap;
  s.reserved = prog_reserved_tiers(s.zero_stage, s.offload != 0);
  int sample = s.tp == 1 && s.pp == 1 && s.tokens >= 0 && s.logits_offset >= 0 && s.list[PROG_LIST_FORWARD] >= 0;
  s.no_sample = sample ? -1 : prog_build_str(b, "--sample: this test program cannot sample");
  prog_build_add(b, PROG_SEC_STAGES, &s, 1);
}

void tp_write(ProgBuild *b, const char *model, const TpStage *stages, int nstages, const char *const *codes,
              int ncodes) {
  const char *names[64];
  int nnames = 0;
  ProgStage m = stages[0].s;
  m.model = prog_build_str(b, model);
  write_model(b, m, stages, nstages, names, &nnames);
  for (int s = 0; s < nstages; s++) write_stage(b, &stages[s], &m, names, nnames);
  for (int i = 0; i < ncodes; i++) {
    ProgCode c = {prog_build_str(b, codes[i]), 32, 1};
    ProgKernel k = {i, prog_build_count(b, PROG_SEC_ARGS), TIERS};
    for (int t = 0; t < TIERS; t++) {
      ProgArg a = {t, 0, 0, 0};
      prog_build_add(b, PROG_SEC_ARGS, &a, 1);
    }
    prog_build_add(b, PROG_SEC_CODES, &c, 1);
    prog_build_add(b, PROG_SEC_KERNELS, &k, 1);
  }
}

int tp_cat(IsaInstr *out, int cap, int nparts, ...) {
  va_list ap;
  int n = 0;
  va_start(ap, nparts);
  for (int k = 0; k < nparts; k++) {
    const IsaInstr *v = va_arg(ap, const IsaInstr *);
    int m = va_arg(ap, int);
    for (int i = 0; i < m; i++) {
      if (n == cap) abort();
      out[n++] = v[i];
    }
  }
  va_end(ap);
  return n;
}
