/* executor: instruction lists → Device and Comm calls (see the header). The dispatch
 * table below is the only place that knows the instruction kinds of program.h. Reserved
 * tiers keep one commit count per granule; a granule has memory behind it while
 * its count is above zero.
 */
#include "executor.h"

#include "runtime/fileio.h"
#include "runtime/offload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const tier_names[RT_TIERS] = {"params", "grads", "opt", "work"};

int64_t exec_tier_bytes(const Executor *ex, int tier) {
  return ex->prog->tiers[tier] * (tier == RT_TIER_WORK ? ex->prog->slots : 1);
}

/* Tier t's bytes rounded up to the device's granule. */
static int64_t reserved_bytes(const Executor *ex, int t) {
  int64_t g = ex->dev->granule;
  return (exec_tier_bytes(ex, t) + g - 1) / g * g;
}

/* Staging bytes the "comm" instructions of list need: all_gather and
 * reduce_scatter with an outer dimension reorder the whole tensor through it. */
static int64_t list_staging(const RtList *list) {
  int64_t most = 0;
  for (int i = 0; i < list->n; i++) {
    const RtComm *c = &list->instr[i].comm;
    int reorder = c->kind == ISA_COMM_ALL_GATHER || c->kind == ISA_COMM_REDUCE_SCATTER;
    if (list->instr[i].op == ISA_COMM && reorder && c->outer > 1 && c->outer * c->n * c->inner * 4 > most)
      most = c->outer * c->n * c->inner * 4;
  }
  return most;
}

static int exec_alloc_staging(Executor *ex) {
  const RtProgram *p = ex->prog;
  const RtList *lists[4] = {&p->step, &p->gradnorm, &p->update, &p->forward};
  for (int l = 0; l < 4; l++) {
    int64_t b = list_staging(lists[l]);
    ex->staging_bytes = b > ex->staging_bytes ? b : ex->staging_bytes;
  }
  if (ex->staging_bytes == 0) return 0;
  return (ex->staging = ex->dev->alloc(ex->dev, ex->staging_bytes)) ? 0 : -1;
}

/* Under ex->lock. */
static int64_t in_use_locked(const Executor *ex) {
  int64_t n = ex->staging_bytes + ex->dev->own_bytes;
  for (int t = 0; t < RT_TIERS; t++) n += ex->committed[t];
  return n;
}

static void note_total_locked(Executor *ex) {
  int64_t n = in_use_locked(ex);
  ex->total_peak = n > ex->total_peak ? n : ex->total_peak;
}

static int exec_reserve_tier(Executor *ex, int t) {
  int64_t bytes = reserved_bytes(ex, t);
  ex->commits[t] = calloc((size_t)(bytes / ex->dev->granule), sizeof *ex->commits[t]);
  ex->tiers[t] = ex->commits[t] ? ex->dev->reserve(ex->dev, bytes) : NULL;
  return ex->tiers[t] ? 0 : -1;
}

int exec_init_reserved(Executor *ex, const RtProgram *prog, Device *dev, unsigned reserve_mask, char *err,
                       size_t errlen) {
  memset(ex, 0, sizeof *ex);
  pthread_mutex_init(&ex->lock, NULL);
  ex->lock_init = 1;
  ex->prog = prog;
  ex->dev = dev;
  int can_reserve = dev->reserve && dev->granule > 0;
  for (int t = 0; t < RT_TIERS; t++) {
    int64_t bytes = prog->tiers[t] > 0 ? exec_tier_bytes(ex, t) : 64;
    int reserve = can_reserve && (reserve_mask >> t & 1) && prog->tiers[t] > 0;
    if (reserve ? exec_reserve_tier(ex, t) != 0 : (ex->tiers[t] = dev->alloc(dev, bytes)) == NULL) {
      exec_free(ex);
      return file_set_error(err, errlen, "out of memory for the %s tier (%lld bytes)", tier_names[t], (long long)bytes);
    }
    ex->committed[t] = ex->peak[t] = reserve ? 0 : exec_tier_bytes(ex, t);
  }
  memcpy(ex->run, ex->tiers, sizeof ex->run);
  if (exec_alloc_staging(ex) != 0) {
    exec_free(ex);
    return file_set_error(err, errlen,
                          "out of memory for the comm staging buffer (%lld "
                          "bytes)",
                          (long long)ex->staging_bytes);
  }
  ex->total_peak = in_use_locked(ex);
  return 0;
}

int exec_init(Executor *ex, const RtProgram *prog, Device *dev, char *err, size_t errlen) {
  return exec_init_reserved(ex, prog, dev, 0, err, errlen);
}

void exec_free(Executor *ex) {
  offload_free(ex->off); /* first: its copy thread uses the tiers */
  ex->off = NULL;
  for (int t = 0; t < RT_TIERS; t++) {
    if (ex->commits[t] && ex->tiers[t]) ex->dev->unreserve(ex->dev, ex->tiers[t], reserved_bytes(ex, t));
    else if (ex->tiers[t]) ex->dev->free(ex->dev, ex->tiers[t]);
    free(ex->commits[t]);
  }
  if (ex->staging) ex->dev->free(ex->dev, ex->staging);
  ex->staging = NULL;
  memset(ex->tiers, 0, sizeof ex->tiers);
  memset(ex->run, 0, sizeof ex->run);
  memset(ex->commits, 0, sizeof ex->commits);
  if (ex->lock_init) pthread_mutex_destroy(&ex->lock);
  ex->lock_init = 0;
}

int exec_reserved(const Executor *ex, int tier) { return ex->commits[tier] != NULL; }

int64_t exec_in_use(Executor *ex) {
  pthread_mutex_lock(&ex->lock);
  int64_t n = in_use_locked(ex);
  pthread_mutex_unlock(&ex->lock);
  return n;
}

void exec_peak_reset(Executor *ex) {
  pthread_mutex_lock(&ex->lock);
  memcpy(ex->peak, ex->committed, sizeof ex->peak);
  ex->total_peak = in_use_locked(ex);
  pthread_mutex_unlock(&ex->lock);
}

/* Granules [*g0, *g1) that [offset, offset+bytes) touches. */
static void granule_span(const Executor *ex, int64_t offset, int64_t bytes, int64_t *g0, int64_t *g1) {
  int64_t g = ex->dev->granule;
  *g0 = offset / g;
  *g1 = bytes > 0 ? (offset + bytes + g - 1) / g : *g0;
}

/* Decommits the granules of [g0, g1) whose count is zero, in maximal runs. */
static void decommit_idle(Executor *ex, int tier, int64_t g0, int64_t g1) {
  int64_t g = ex->dev->granule;
  for (int64_t i = g0, j; i < g1; i = j) {
    for (j = i; j < g1 && ex->commits[tier][j] == 0; j++)
      ;
    if (j > i) {
      ex->dev->decommit(ex->dev, ex->tiers[tier], i * g, (j - i) * g);
      ex->committed[tier] -= (j - i) * g;
    }
    j += j == i;
  }
}

static int exec_commit_locked(Executor *ex, int tier, int64_t offset, int64_t bytes, char *err, size_t errlen);

int64_t exec_uncommitted(Executor *ex, int tier, int64_t offset, int64_t bytes) {
  int64_t g0, g1, n = 0;
  if (!ex->commits[tier]) return 0;
  granule_span(ex, offset, bytes, &g0, &g1);
  pthread_mutex_lock(&ex->lock);
  for (int64_t i = g0; i < g1; i++) n += ex->commits[tier][i] == 0;
  pthread_mutex_unlock(&ex->lock);
  return n * ex->dev->granule;
}

int exec_commit(Executor *ex, int tier, int64_t offset, int64_t bytes, char *err, size_t errlen) {
  if (!ex->commits[tier]) return 0;
  pthread_mutex_lock(&ex->lock);
  int rc = exec_commit_locked(ex, tier, offset, bytes, err, errlen);
  pthread_mutex_unlock(&ex->lock);
  return rc;
}

static int exec_commit_locked(Executor *ex, int tier, int64_t offset, int64_t bytes, char *err, size_t errlen) {
  int64_t g0, g1, g = ex->dev->granule;
  granule_span(ex, offset, bytes, &g0, &g1);
  uint32_t *n = ex->commits[tier];
  for (int64_t i = g0, j; i < g1; i = j) { /* runs with nothing behind them yet */
    for (j = i; j < g1 && n[j] == 0; j++)
      ;
    if (j > i && ex->dev->commit(ex->dev, ex->tiers[tier], i * g, (j - i) * g) != 0) {
      decommit_idle(ex, tier, g0, i); /* undo this call's earlier runs */
      return file_set_error(err, errlen,
                            "out of memory committing %lld bytes of the %s "
                            "tier",
                            (long long)((j - i) * g), tier_names[tier]);
    }
    ex->committed[tier] += (j - i) * g;
    j += j == i;
  }
  for (int64_t i = g0; i < g1; i++) n[i]++;
  if (ex->committed[tier] > ex->peak[tier]) ex->peak[tier] = ex->committed[tier];
  note_total_locked(ex);
  return 0;
}

void exec_decommit(Executor *ex, int tier, int64_t offset, int64_t bytes) {
  if (ex->commits[tier]) ex->dev->sync(ex->dev); /* work queued before may still use the range */
  exec_decommit_idle(ex, tier, offset, bytes);
}

void exec_decommit_idle(Executor *ex, int tier, int64_t offset, int64_t bytes) {
  int64_t g0, g1;
  if (!ex->commits[tier]) return;
  granule_span(ex, offset, bytes, &g0, &g1);
  pthread_mutex_lock(&ex->lock);
  for (int64_t i = g0; i < g1; i++) ex->commits[tier][i]--;
  decommit_idle(ex, tier, g0, g1);
  pthread_mutex_unlock(&ex->lock);
}

/* ---- instructions -------------------------------------------------------------- */

typedef int (*ExecFn)(Executor *ex, const RtInstr *in, const float *scalars);

static void exec_missing(const char *what) __attribute__((noreturn));
static void exec_missing(const char *what) {
  fflush(stdout);
  fprintf(stderr,
          "train: internal error: the program needs %s, which the executor was "
          "not given\n",
          what);
  abort();
}

static float *exec_at(Executor *ex, int tier, int64_t offset) { return (float *)(ex->run[tier] + offset); }

static Offload *exec_off(Executor *ex) {
  if (!ex->off) exec_missing("the offload state (offload.h)");
  return ex->off;
}

/* "on": "host" runs with the host location's PARAMS, GRADS and OPT (and the device's
 * WORK) on the host location's device: on the CPU device both locations are host
 * memory and one device runs both; otherwise the host's device runs it on a host copy
 * of its WORK buffers, copied back afterwards (offload.h). */
static int exec_kernel(Executor *ex, const RtInstr *in, const float *scalars) {
  char *host[RT_TIERS], *bufs[RT_MAX_ARGS] = {0};
  Device *dev = ex->dev;
  char *work = NULL;
  if (in->on_host) {
    Offload *o = exec_off(ex);
    int64_t room;
    dev = offload_host_device(o);
    work = dev != ex->dev ? offload_host_work(o, &room) : NULL;
    for (int t = 0; t < RT_TIERS; t++) host[t] = t == RT_TIER_WORK ? ex->run[t] : offload_host_tier(o, t);
  }
  if (in->epilogue && ex->dev->gemm_gelu) return 0; /* the GEMM before it applied the GELU */
  char *const *base = in->on_host ? host : ex->run;
  int64_t used = 0;
  for (int i = 0; i < in->nargs; i++) {
    const RtArg *a = &in->args[i];
    char *slot = a->shared ? ex->tiers[RT_TIER_WORK] : ex->run[RT_TIER_WORK];
    bufs[i] = (a->shared ? slot : base[a->tier]) + a->offset;
    if (work && a->tier == RT_TIER_WORK) {
      bufs[i] = work + used, used += a->bytes;
      ex->dev->download(ex->dev, slot, a->offset, bufs[i], a->bytes);
    }
  }
  dev->kernel(dev, in->kernel, in->extent, bufs, scalars);
  for (int i = 0; work && i < in->nargs; i++)
    if (in->args[i].tier == RT_TIER_WORK)
      ex->dev->upload(ex->dev, in->args[i].shared ? ex->tiers[RT_TIER_WORK] : ex->run[RT_TIER_WORK], in->args[i].offset,
                      bufs[i], in->args[i].bytes);
  return 0;
}

static int exec_zero(Executor *ex, const RtInstr *in, const float *scalars) {
  ex->dev->zero(ex->dev, ex->run[in->tier], in->offset, in->bytes);
  return 0;
}

static int exec_gemm(Executor *ex, const RtInstr *in, const float *scalars) {
  ex->dev->gemm(ex->dev, &in->gemm, ex->run);
  return 0;
}

static int exec_slot(Executor *ex, const RtInstr *in, const float *scalars) {
  ex->run[RT_TIER_WORK] = ex->tiers[RT_TIER_WORK] + in->index * ex->prog->tiers[RT_TIER_WORK];
  return 0;
}

static int exec_input(Executor *ex, const RtInstr *in, const float *scalars) {
  const RtProgram *p = ex->prog;
  int64_t bytes = p->batch * p->inputs[in->input].row_elems * 4;
  if (!ex->ctx.inputs) exec_missing("the step's rows (\"input\")");
  ex->dev->upload(ex->dev, ex->run[RT_TIER_WORK], in->offset, ex->ctx.inputs[in->input] + in->index * bytes, bytes);
  return 0;
}

static int exec_loss(Executor *ex, const RtInstr *in, const float *scalars) {
  float loss;
  ex->dev->download(ex->dev, ex->run[RT_TIER_WORK], in->offset, &loss, sizeof loss);
  ex->ctx.loss += loss;
  return 0;
}

static Comm *exec_pp(Executor *ex) {
  if (!ex->ctx.pp) exec_missing("a pipeline group (\"send\", \"recv\")");
  return ex->ctx.pp;
}

static int exec_send(Executor *ex, const RtInstr *in, const float *scalars) {
  Comm *pp = exec_pp(ex);
  ex->dev->sync(ex->dev); /* the data is written */
  pp->isend(pp, exec_at(ex, in->tier, in->offset), in->count, in->peer, in->tag);
  return 0;
}

static int exec_recv(Executor *ex, const RtInstr *in, const float *scalars) {
  Comm *pp = exec_pp(ex);
  pp->recv_tag(pp, exec_at(ex, in->tier, in->offset), in->count, in->peer, in->tag);
  return 0;
}

/* all_gather of A x N/T x I parts into A x N x I. */
static void comm_all_gather(Executor *ex, Comm *g, const float *src, float *dst, const RtComm *c) {
  int64_t part = c->n / g->size * c->inner, row = c->n * c->inner;
  if (c->outer == 1) {
    g->all_gather(g, src, dst, part);
    return;
  }
  float *st = (float *)ex->staging; /* [T][A][N/T][I] */
  g->all_gather(g, src, st, c->outer * part);
  for (int64_t t = 0; t < g->size; t++)
    for (int64_t a = 0; a < c->outer; a++)
      ex->dev->copy(ex->dev, (char *)(dst + a * row + t * part), (const char *)(st + (t * c->outer + a) * part),
                    part * 4);
}

/* reduce_scatter of an A x N x I partial sum into this rank's A x N/T x I part. */
static void comm_reduce_scatter(Executor *ex, Comm *g, const float *src, float *dst, const RtComm *c) {
  int64_t part = c->n / g->size * c->inner, row = c->n * c->inner;
  if (c->outer == 1) {
    g->reduce_scatter(g, src, dst, part, COMM_SUM);
    return;
  }
  float *st = (float *)ex->staging; /* [T][A][N/T][I] */
  for (int64_t t = 0; t < g->size; t++)
    for (int64_t a = 0; a < c->outer; a++)
      ex->dev->copy(ex->dev, (char *)(st + (t * c->outer + a) * part), (const char *)(src + a * row + t * part),
                    part * 4);
  g->reduce_scatter(g, st, dst, c->outer * part, COMM_SUM);
}

static void comm_split(Executor *ex, Comm *g, const float *src, float *dst, const RtComm *c) {
  int64_t part = c->n / g->size * c->inner, row = c->n * c->inner;
  for (int64_t a = 0; a < c->outer; a++)
    ex->dev->copy(ex->dev, (char *)(dst + a * part), (const char *)(src + a * row + g->rank * part), part * 4);
}

static void comm_all_reduce(Executor *ex, Comm *g, const float *src, float *dst, const RtComm *c) {
  g->all_reduce(g, src, dst, c->outer * c->n * c->inner, c->red == ISA_RED_MAX ? COMM_MAX : COMM_SUM);
}

static void comm_broadcast(Executor *ex, Comm *g, const float *src, float *dst, const RtComm *c) {
  int64_t n = c->outer * c->n * c->inner;
  if (g->rank == c->root && src != dst) ex->dev->copy(ex->dev, (char *)dst, (const char *)src, n * 4);
  g->broadcast(g, dst, n, c->root);
}

static void comm_reduce(Executor *ex, Comm *g, const float *src, float *dst, const RtComm *c) {
  g->reduce(g, src, dst, c->outer * c->n * c->inner, COMM_SUM, c->root);
}

/* The group of a "comm": tp (of the mesh's size), dp, or one of this stage's groups. */
static Comm *comm_group(Executor *ex, const RtComm *c) {
  Comm *g = c->group == ISA_GROUP_TP   ? ex->ctx.tp
            : c->group == ISA_GROUP_DP ? ex->ctx.dp
            : ex->ctx.stage_groups     ? ex->ctx.stage_groups[c->stage_group]
                                       : NULL;
  if (!g || (c->group == ISA_GROUP_TP && g->size != ex->prog->mesh.tp))
    exec_missing(c->group == ISA_GROUP_TP ? "a tensor-parallel group of the mesh's tp size "
                                            "(\"comm\")"
                                          : "the data-parallel or stage group of a \"comm\"");
  return g;
}

Comm *exec_fork(Executor *ex, const RtInstr *in) {
  if (!in->overlap || !ex->ctx.dp_overlap || !ex->dev->fork) return NULL;
  ex->dev->fork(ex->dev);
  ex->forked = 1;
  return ex->ctx.dp_overlap;
}

static int exec_comm(Executor *ex, const RtInstr *in, const float *scalars) {
  typedef void (*CommFn)(Executor *, Comm *, const float *, float *, const RtComm *);
  static const CommFn fns[ISA_COMM_NKINDS] = {
      [ISA_COMM_ALL_REDUCE] = comm_all_reduce,         [ISA_COMM_ALL_GATHER] = comm_all_gather,
      [ISA_COMM_REDUCE_SCATTER] = comm_reduce_scatter, [ISA_COMM_SPLIT] = comm_split,
      [ISA_COMM_BROADCAST] = comm_broadcast,           [ISA_COMM_REDUCE] = comm_reduce};
  const RtComm *c = &in->comm;
  Comm *g = comm_group(ex, c);
  float *src = exec_at(ex, c->tier[0], c->offset[0]), *dst = exec_at(ex, c->tier[1], c->offset[1]);
  if (g->size == 1 && src == dst) /* in place over one rank: the identity */
    return 0;
  Comm *aside = exec_fork(ex, in); /* after what wrote its bytes; a join waits for it */
  if (!aside) ex->dev->sync(ex->dev);
  fns[c->kind](ex, aside ? aside : g, src, dst, c);
  return 0;
}

/* move and drop are queued on the copy thread; wait blocks for them (offload.h). */
static int exec_move(Executor *ex, const RtInstr *in, const float *scalars) {
  offload_issue(exec_off(ex), in, ex->list->name, (int)(in - ex->list->instr));
  return 0;
}

static int exec_wait(Executor *ex, const RtInstr *in, const float *scalars) {
  return offload_wait(exec_off(ex), in->chunk, in->part);
}

/* zero_gather, zero_release, zero_grad, zero_reduce: to the ZeRO state's hook. No wait
 * for the device: its collectives are ordered with the kernels (comm.h), a commit adds
 * memory no queued work uses, and a decommit waits for the device itself
 * (exec_decommit). */
static int exec_zero_param(Executor *ex, const RtInstr *in, const float *scalars) {
  if (!ex->ctx.zero) exec_missing("the ZeRO state (\"zero_gather\", \"zero_grad\", ...)");
  ex->ctx.zero(ex->ctx.zero_arg, ex, in);
  return 0;
}

/* join: what follows waits for the overlapped collectives issued so far. */
static int exec_join(Executor *ex, const RtInstr *in, const float *scalars) {
  if (ex->forked) ex->dev->join(ex->dev);
  ex->forked = 0;
  return 0;
}

static const ExecFn exec_fns[ISA_NOPS] = {[ISA_KERNEL] = exec_kernel,
                                          [ISA_ZERO] = exec_zero,
                                          [ISA_GEMM] = exec_gemm,
                                          [ISA_SLOT] = exec_slot,
                                          [ISA_INPUT] = exec_input,
                                          [ISA_LOSS] = exec_loss,
                                          [ISA_SEND] = exec_send,
                                          [ISA_RECV] = exec_recv,
                                          [ISA_COMM] = exec_comm,
                                          [ISA_MOVE] = exec_move,
                                          [ISA_DROP] = exec_move,
                                          [ISA_WAIT] = exec_wait,
                                          [ISA_ZERO_GATHER] = exec_zero_param,
                                          [ISA_ZERO_RELEASE] = exec_zero_param,
                                          [ISA_ZERO_GRAD] = exec_zero_param,
                                          [ISA_ZERO_REDUCE] = exec_zero_param,
                                          [ISA_JOIN] = exec_join};

int exec_run(Executor *ex, const RtList *list, const float *scalars) {
  int rc = ex->off && offload_failed(ex->off) ? -1 : 0;
  ex->run[RT_TIER_WORK] = ex->tiers[RT_TIER_WORK];
  ex->list = list;
  for (int i = 0; rc == 0 && i < list->n; i++) {
    const RtInstr *in = &list->instr[i];
    if ((in->dp_rank < 0 || in->dp_rank == ex->ctx.dp_rank) && (in->tp_rank < 0 || in->tp_rank == ex->ctx.tp_rank) &&
        (!in->last_mb || ex->ctx.last_mb))
      rc = exec_fns[in->op](ex, in, scalars);
  }
  exec_join(ex, NULL, scalars); /* the list's end waits for what it overlapped */
  ex->run[RT_TIER_WORK] = ex->tiers[RT_TIER_WORK];
  ex->list = NULL;
  if (list->sends) exec_pp(ex)->wait_sends(exec_pp(ex));
  return rc;
}

/* The committed granules of a reserved tier, in maximal runs. */
static void zero_committed(Executor *ex, int tier) {
  int64_t g = ex->dev->granule, n = reserved_bytes(ex, tier) / g;
  pthread_mutex_lock(&ex->lock);
  for (int64_t i = 0, j; i < n; i = j + 1) {
    for (j = i; j < n && ex->commits[tier][j] > 0; j++)
      ;
    if (j > i) ex->dev->zero(ex->dev, ex->tiers[tier], i * g, (j - i) * g);
  }
  pthread_mutex_unlock(&ex->lock);
}

void exec_zero_tier(Executor *ex, int tier) {
  if (ex->prog->tiers[tier] > 0 && ex->commits[tier]) zero_committed(ex, tier);
  else if (ex->prog->tiers[tier] > 0) ex->dev->zero(ex->dev, ex->tiers[tier], 0, exec_tier_bytes(ex, tier));
}

/* [offset, offset+bytes) of a tier in runs that are all committed (*has 1) or all not
 * (*has 0): the length of the run at offset. A tier that is not reserved is one run. */
static int64_t committed_run(Executor *ex, int tier, int64_t offset, int64_t bytes, int *has) {
  if (!ex->commits[tier]) {
    *has = 1;
    return bytes;
  }
  int64_t g = ex->dev->granule, i = offset / g, end = offset + bytes;
  *has = ex->commits[tier][i] > 0;
  while ((i + 1) * g < end && (ex->commits[tier][i + 1] > 0) == *has) i++;
  return ((i + 1) * g < end ? (i + 1) * g : end) - offset;
}

/* Reserved tiers: what has no memory behind it is not written, and reads as zeros. */
void exec_write(Executor *ex, int tier, int64_t offset, const void *src, int64_t bytes) {
  pthread_mutex_lock(&ex->lock);
  for (int64_t done = 0, n; done < bytes; done += n) {
    int has;
    n = committed_run(ex, tier, offset + done, bytes - done, &has);
    if (has) ex->dev->upload(ex->dev, ex->tiers[tier], offset + done, (const char *)src + done, n);
  }
  pthread_mutex_unlock(&ex->lock);
}

void exec_read(Executor *ex, int tier, int64_t offset, void *dst, int64_t bytes) {
  pthread_mutex_lock(&ex->lock);
  for (int64_t done = 0, n; done < bytes; done += n) {
    int has;
    n = committed_run(ex, tier, offset + done, bytes - done, &has);
    if (has) ex->dev->download(ex->dev, ex->tiers[tier], offset + done, (char *)dst + done, n);
    else memset((char *)dst + done, 0, (size_t)n);
  }
  pthread_mutex_unlock(&ex->lock);
}

void *exec_host_alloc(Device *dev, int64_t bytes) {
  return dev->host_alloc ? dev->host_alloc(dev, bytes) : malloc((size_t)bytes + 1);
}

void exec_host_free(Device *dev, void *p) {
  if (p && dev->host_free) dev->host_free(dev, p);
  else free(p);
}

char *exec_host_tier(Executor *ex, int tier) {
  return ex->dev->host_view ? ex->dev->host_view(ex->dev, ex->tiers[tier]) : NULL;
}
