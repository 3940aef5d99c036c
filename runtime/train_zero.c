/* train_zero: ownership, gradient synchronisation and sharded state (see the header).
 * Collectives are one call per parameter where ownership matters (a parameter is
 * contiguous in every tier, and parameters of different owners interleave), and one
 * call over the whole GRADS tier where it does not.
 */
#include "runtime/train_zero.h"

#include "runtime/io/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parameter i's owning rank: the program's (every rank at stage 0 has it all; rank 0
 * stands for them). */
static int owner(const Zero *z, int i) { return z->stage > 0 ? (int)z->prog->params[i].owner : 0; }

int zero_init(Zero *z, const Prog *p, Comm *c, char *err, size_t errlen) {
  memset(z, 0, sizeof *z);
  z->prog = p, z->comm = c, z->stage = (int)p->s->zero_stage;
  if (!(z->owned = calloc((size_t)p->s->nparams + 1, sizeof *z->owned)))
    return file_set_error(err, errlen, "out of memory");
  for (int i = 0; i < p->s->nparams; i++) z->owned[i] = z->stage == 0 || p->params[i].owner == c->rank;
  z->offload = (int)p->s->offload;
  z->scheduled = !z->offload && (p->s->reserved & 1 << TIER_GRADS); /* ZeRO-2 and 3 in the step */
  return 0;
}

void zero_free(Zero *z) {
  free(z->owned);
  memset(z, 0, sizeof *z);
}

/* ---- shards -------------------------------------------------------------------- */

/* The byte ranges of parameter i's optimizer state: m, and v for AdamW and LAMB. */
static int opt_ranges(const Prog *p, int i, int64_t off[2]) {
  if (p->s->tiers[TIER_OPT] == 0) return 0;
  off[0] = p->params[i].offset;
  off[1] = p->s->opt_v_offset + p->params[i].offset;
  return prog_moments(p->s);
}

static int commit_opt(Executor *ex, const Prog *p, int i, char *err, size_t errlen) {
  int64_t off[2];
  int n = opt_ranges(p, i, off);
  for (int k = 0; k < n; k++)
    if (exec_commit(ex, TIER_OPT, off[k], p->params[i].numel * 4, err, errlen) != 0) return -1;
  return 0;
}

int zero_commit_owned(Zero *z, Executor *ex, int all_params, char *err, size_t errlen) {
  const Prog *p = z->prog;
  for (int i = 0; i < p->s->nparams; i++) {
    const ProgParam *q = &p->params[i];
    if (z->owned[i] && commit_opt(ex, p, i, err, errlen) != 0) return -1;
    if ((z->owned[i] || all_params || z->stage < 3) &&
        exec_commit(ex, TIER_PARAMS, q->offset, q->numel * 4, err, errlen) != 0)
      return -1;
    if (z->owned[i] && z->scheduled && exec_commit(ex, TIER_GRADS, q->offset, q->numel * 4, err, errlen) != 0)
      return -1;
  }
  z->gathered = all_params || z->stage < 3;
  return 0;
}

/* A commit the step cannot do without: out of memory on one rank stops them all. */
static void commit_or_abort(Zero *z, Executor *ex, int tier, int64_t off, int64_t bytes) {
  char err[256];
  if (exec_commit(ex, tier, off, bytes, err, sizeof err) == 0) return;
  fflush(stdout);
  fprintf(stderr, "train: rank %d: %s\n", z->comm->rank, err);
  z->comm->abort(z->comm, 1);
}

static float *tier_floats(Executor *ex, int tier, int64_t offset) { return (float *)(ex->tiers[tier] + offset); }

void zero_gather_params(Zero *z, Executor *ex) {
  if (z->stage < 3 || z->gathered || z->offload) return;
  exec_run(ex, prog_list(z->prog, PROG_LIST_GATHER));
  z->gathered = 1;
}

void zero_release_params(Zero *z, Executor *ex) {
  if (z->stage < 3 || !z->gathered) return;
  exec_run(ex, prog_list(z->prog, PROG_LIST_RELEASE));
  z->gathered = 0;
}

/* ---- ZeRO inside the step ------------------------------------------------------ */

/* An "overlap" gather on a device with a communication stream goes there, after the
 * compute queued so far (its memory is fresh: nothing queued uses it). */
static void zero_gather_one(Zero *z, Executor *ex, const IsaInstr *in, int i) {
  const ProgParam *q = &z->prog->params[i];
  if (!z->owned[i]) commit_or_abort(z, ex, TIER_PARAMS, q->offset, q->numel * 4);
  Comm *aside = exec_fork(ex, in), *c = aside ? aside : z->comm;
  c->broadcast(c, tier_floats(ex, TIER_PARAMS, q->offset), q->numel, owner(z, i));
}

static void zero_release_one(Zero *z, Executor *ex, const IsaInstr *in, int i) {
  const ProgParam *q = &z->prog->params[i];
  if (!z->owned[i]) exec_decommit(ex, TIER_PARAMS, q->offset, q->numel * 4);
}

/* A granule the gradient shares with a neighbour may hold an earlier micro-batch's
 * values: zeroed here, not only by the first commit. */
static void zero_grad_one(Zero *z, Executor *ex, const IsaInstr *in, int i) {
  const ProgParam *q = &z->prog->params[i];
  if (z->owned[i]) return;
  commit_or_abort(z, ex, TIER_GRADS, q->offset, q->numel * 4);
  ex->dev->zero(ex->dev, ex->tiers[TIER_GRADS], q->offset, q->numel * 4);
}

static void zero_reduce_one(Zero *z, Executor *ex, const IsaInstr *in, int i) {
  const ProgParam *q = &z->prog->params[i];
  float *g = tier_floats(ex, TIER_GRADS, q->offset);
  if (z->comm->size > 1) z->comm->reduce(z->comm, g, g, q->numel, COMM_SUM, owner(z, i));
  if (!z->owned[i]) exec_decommit(ex, TIER_GRADS, q->offset, q->numel * 4);
}

void zero_exec_instr(void *arg, Executor *ex, const IsaInstr *in) {
  typedef void (*ZeroFn)(Zero *, Executor *, const IsaInstr *, int);
  static const ZeroFn fns[ISA_ZERO_REDUCE - ISA_ZERO_GATHER + 1] = {zero_gather_one, zero_release_one, zero_grad_one,
                                                                    zero_reduce_one};
  fns[in->op - ISA_ZERO_GATHER](arg, ex, in, in->param.index);
}

/* ---- replicas ------------------------------------------------------------------ */

/* FNV-1a over the parameters' 32-bit words. */
/* Of a device the host does not see, each parameter read back through buf. */
static uint64_t params_hash(const Prog *p, Executor *ex, const char *base, uint32_t *buf) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < p->s->nparams; i++) {
    const uint32_t *w = buf;
    if (base) w = (const uint32_t *)(base + p->params[i].offset);
    else exec_read(ex, TIER_PARAMS, p->params[i].offset, buf, p->params[i].numel * 4);
    for (int64_t k = 0; k < p->params[i].numel; k++) h = (h ^ w[k]) * 1099511628211ull;
  }
  return h;
}

int zero_check_replicas(Zero *z, Executor *ex, const char *params, char *err, size_t errlen) {
  int64_t most = 1;
  if (z->offload && z->stage == 3) return 0;
  const char *base = params ? params : exec_host_tier(ex, TIER_PARAMS);
  for (int i = 0; i < z->prog->s->nparams; i++)
    most = z->prog->params[i].numel > most ? z->prog->params[i].numel : most;
  uint32_t *buf = base ? NULL : malloc((size_t)most * 4);
  int failed = !base && !buf;
  if (z->comm->size == 1 || comm_agree(z->comm, failed, NULL) != 0) {
    free(buf);
    return failed ? file_set_error(err, errlen, "out of memory") : 0;
  }
  uint64_t h = params_hash(z->prog, ex, base, buf);
  free(buf);
  double lo = (double)(h & 0xffffffffu), hi = (double)(h >> 32);
  double v[4] = {lo, hi, -lo, -hi}; /* maxima, and minima negated */
  z->comm->host_all_reduce(z->comm, v, 4, COMM_MAX);
  if (v[0] == -v[2] && v[1] == -v[3]) return 0;
  return file_set_error(err, errlen,
                        "internal error: the ranks' parameters differ after "
                        "training (replicas diverged)");
}
