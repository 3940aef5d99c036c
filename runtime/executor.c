/* executor: instruction lists → Device and Comm calls (see the header). The dispatch
 * table below is the only place that runs the instructions of program/isa.h. Reserved
 * tiers keep one commit count per granule; a granule has memory behind it while
 * its count is above zero.
 */
#include "runtime/executor.h"

#include "runtime/comm/watchdog.h"
#include "runtime/io/fileio.h"
#include "runtime/offload.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Each opcode's function (exec_fns, with the instructions below); iter: the innermost
 * loop's iteration (the micro-batch of "slot" and "input"). */
typedef int (*ExecFn)(Executor *ex, const IsaInstr *in, int64_t iter);
static const ExecFn exec_fns[ISA_NOPS];

int64_t exec_tier_bytes(const Executor *ex, int tier) {
  const ProgStage *s = ex->prog->s;
  return tier == TIER_WORK ? s->work_shared + s->tiers[tier] * s->slots : s->tiers[tier];
}

/* WORK's slot k as the instructions' base, and its shared region (program/program.h). */
static void exec_slot_base(Executor *ex, int64_t k) {
  const ProgStage *s = ex->prog->s;
  ex->run[TIER_WORK] = ex->tiers[TIER_WORK] + s->work_shared + k * s->tiers[TIER_WORK];
  ex->run[TIER_SHARED] = ex->tiers[TIER_WORK];
}

/* Tier t's bytes rounded up to the device's granule. */
static int64_t reserved_bytes(const Executor *ex, int t) {
  int64_t g = ex->dev->granule;
  return (exec_tier_bytes(ex, t) + g - 1) / g * g;
}

/* The staging buffer of the collectives' reorders and the host buffers of "norm" and
 * LAMB's "trust" (its slots: the last parameter's end). */
static int exec_alloc_scratch(Executor *ex) {
  const Prog *p = ex->prog;
  const ProgStage *s = p->s;
  if (s->staging > 0 && !(ex->staging = ex->dev->alloc(ex->dev, s->staging))) return -1;
  if (!(ex->norm_parts = calloc((size_t)s->norm_parts + 1, sizeof *ex->norm_parts))) return -1;
  if (s->optimizer != PROG_OPT_LAMB || s->trust_ends < 0) return 0;
  int64_t slots = s->nparams > 0 ? p->ints[s->trust_ends + s->nparams - 1] : 0;
  ex->trust_parts = malloc((size_t)(2 * slots + 1) * sizeof *ex->trust_parts);
  ex->trust_sq = malloc((size_t)(2 * p->stages[0].nparams + 1) * sizeof *ex->trust_sq);
  return ex->trust_parts && ex->trust_sq ? 0 : -1;
}

/* Under ex->lock. */
static int64_t in_use_locked(const Executor *ex) {
  int64_t n = ex->prog->s->staging + ex->dev->own_bytes;
  for (int t = 0; t < TIERS; t++) n += ex->committed[t];
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

int exec_init_reserved(Executor *ex, const Prog *prog, Device *dev, unsigned reserve_mask, char *err, size_t errlen) {
  memset(ex, 0, sizeof *ex);
  pthread_mutex_init(&ex->lock, NULL);
  ex->lock_init = 1;
  ex->prog = prog;
  ex->dev = dev;
  for (int op = 0; op < ISA_NOPS; op++) /* an opcode added without its function */
    if (!exec_fns[op])
      return file_set_error(err, errlen, "internal error: the executor has no function for \"%s\"", isa_op_names[op]);
  int can_reserve = dev->reserve && dev->granule > 0;
  const int64_t *tiers = prog->s->tiers;
  for (int t = 0; t < TIERS; t++) {
    int64_t bytes = tiers[t] > 0 ? exec_tier_bytes(ex, t) : 64;
    int reserve = can_reserve && (reserve_mask >> t & 1) && tiers[t] > 0;
    if (reserve ? exec_reserve_tier(ex, t) != 0 : (ex->tiers[t] = dev->alloc(dev, bytes)) == NULL) {
      exec_free(ex);
      return file_set_error(err, errlen, "out of memory for the %s tier (%lld bytes)", isa_tier_names[t],
                            (long long)bytes);
    }
    ex->committed[t] = ex->peak[t] = reserve ? 0 : exec_tier_bytes(ex, t);
  }
  memcpy(ex->run, ex->tiers, sizeof ex->tiers);
  exec_slot_base(ex, 0);
  if (exec_alloc_scratch(ex) != 0) {
    exec_free(ex);
    return file_set_error(err, errlen, "out of memory for the comm staging buffer (%lld bytes)",
                          (long long)prog->s->staging);
  }
  ex->total_peak = in_use_locked(ex);
  ex->step.loss_scale = 1;
  return 0;
}

int exec_init(Executor *ex, const Prog *prog, Device *dev, char *err, size_t errlen) {
  return exec_init_reserved(ex, prog, dev, 0, err, errlen);
}

void exec_free(Executor *ex) {
  offload_free(ex->off); /* first: its copy thread uses the tiers */
  ex->off = NULL;
  for (int t = 0; t < TIERS; t++) {
    if (ex->commits[t] && ex->tiers[t]) ex->dev->unreserve(ex->dev, ex->tiers[t], reserved_bytes(ex, t));
    else if (ex->tiers[t]) ex->dev->free(ex->dev, ex->tiers[t]);
    free(ex->commits[t]);
  }
  if (ex->staging) ex->dev->free(ex->dev, ex->staging);
  free(ex->norm_parts), free(ex->trust_parts), free(ex->trust_sq);
  ex->staging = NULL, ex->norm_parts = ex->trust_parts = NULL, ex->trust_sq = NULL;
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
      return file_set_error(err, errlen, "out of memory committing %lld bytes of the %s tier", (long long)((j - i) * g),
                            isa_tier_names[tier]);
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

static void exec_missing(const char *what) __attribute__((noreturn));
static void exec_missing(const char *what) {
  fflush(stdout);
  fprintf(stderr, "train: internal error: the program needs %s, which the executor was not given\n", what);
  abort();
}

static float *exec_at(Executor *ex, int tier, int64_t offset) { return (float *)(ex->run[tier] + offset); }

static Offload *exec_off(Executor *ex) {
  if (!ex->off) exec_missing("the offload state (offload.h)");
  return ex->off;
}

/* on_host runs with the host location's PARAMS, GRADS and OPT (and the device's WORK)
 * on the host location's device: on the CPU device both locations are host memory and
 * one device runs both; otherwise the host's device runs it on a host copy of its WORK
 * buffers, copied back afterwards (offload.h). */
static int exec_kernel(Executor *ex, const IsaInstr *in, int64_t iter) {
  const ProgKernel *k = &ex->prog->kernels[in->kernel.id];
  const ProgArg *args = &ex->prog->args[k->arg0];
  char *host[TIERS], *bufs[PROG_MAX_ARGS] = {0};
  Device *dev = ex->dev;
  char *work = NULL;
  if (in->kernel.epilogue && ex->epilogued) return 0; /* the GEMM before it applied its epilogue */
  if (in->kernel.on_host) {
    Offload *o = exec_off(ex);
    int64_t room;
    dev = offload_host_device(o);
    work = dev != ex->dev ? offload_host_work(o, &room) : NULL;
    for (int t = 0; t < TIERS; t++) host[t] = t == TIER_WORK ? ex->run[t] : offload_host_tier(o, t);
  }
  char *const *base = in->kernel.on_host ? host : ex->run;
  int64_t used = 0;
  for (int i = 0; i < k->nargs; i++) {
    const ProgArg *a = &args[i];
    char *slot = a->shared ? ex->tiers[TIER_WORK] : ex->run[TIER_WORK];
    bufs[i] = (a->shared ? slot : base[a->tier]) + a->offset;
    if (work && a->tier == TIER_WORK) {
      bufs[i] = work + used, used += a->bytes;
      ex->dev->download(ex->dev, slot, a->offset, bufs[i], a->bytes);
    }
  }
  dev->kernel(dev, (int)k->code, in->kernel.extent, bufs, ex->step.sc);
  for (int i = 0; work && i < k->nargs; i++)
    if (args[i].tier == TIER_WORK)
      ex->dev->upload(ex->dev, args[i].shared ? ex->tiers[TIER_WORK] : ex->run[TIER_WORK], args[i].offset, bufs[i],
                      args[i].bytes);
  return 0;
}

static void zero_committed(Executor *ex, int tier, int64_t offset, int64_t bytes);

/* Of a reserved tier, what has memory behind it. */
static int exec_zero(Executor *ex, const IsaInstr *in, int64_t iter) {
  const IsaZero *z = &in->zero;
  if (ex->commits[z->tier]) zero_committed(ex, z->tier, z->offset, z->bytes);
  else if (z->bytes > 0) ex->dev->zero(ex->dev, ex->run[z->tier], z->offset, z->bytes);
  return 0;
}

static int exec_gemm(Executor *ex, const IsaInstr *in, int64_t iter) {
  ex->epilogued = ex->dev->gemm(ex->dev, &in->gemm, ex->run);
  return 0;
}

static int exec_slot(Executor *ex, const IsaInstr *in, int64_t iter) {
  exec_slot_base(ex, (in->slot.mb + in->slot.step * iter) % ex->prog->s->slots);
  return 0;
}

static int exec_input(Executor *ex, const IsaInstr *in, int64_t iter) {
  const Prog *p = ex->prog;
  const IsaInput *x = &in->input;
  int64_t bytes = p->s->batch * p->inputs[x->input].row_elems * 4;
  if (!ex->ctx.inputs) exec_missing("the step's rows (\"input\")");
  ex->dev->upload(ex->dev, ex->run[TIER_WORK], x->offset, ex->ctx.inputs[x->input] + (x->mb + x->step * iter) * bytes,
                  bytes);
  return 0;
}

static int exec_loss(Executor *ex, const IsaInstr *in, int64_t iter) {
  float loss;
  ex->dev->download(ex->dev, ex->run[TIER_WORK], in->loss.offset, &loss, sizeof loss);
  ex->step.loss += loss;
  return 0;
}

static Comm *exec_pp(Executor *ex) {
  if (!ex->ctx.pp) exec_missing("a pipeline group (\"send\", \"recv\")");
  return ex->ctx.pp;
}

static int exec_send(Executor *ex, const IsaInstr *in, int64_t iter) {
  Comm *pp = exec_pp(ex);
  ex->dev->sync(ex->dev); /* the data is written */
  pp->isend(pp, exec_at(ex, in->p2p.tier, in->p2p.offset), in->p2p.count, in->p2p.peer, in->p2p.tag);
  return 0;
}

static int exec_recv(Executor *ex, const IsaInstr *in, int64_t iter) {
  Comm *pp = exec_pp(ex);
  pp->recv_tag(pp, exec_at(ex, in->p2p.tier, in->p2p.offset), in->p2p.count, in->p2p.peer, in->p2p.tag);
  return 0;
}

/* all_gather of A x N/T x I parts into A x N x I. */
static void comm_all_gather(Executor *ex, Comm *g, const float *src, float *dst, const IsaComm *c) {
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
static void comm_reduce_scatter(Executor *ex, Comm *g, const float *src, float *dst, const IsaComm *c) {
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

static void comm_split(Executor *ex, Comm *g, const float *src, float *dst, const IsaComm *c) {
  int64_t part = c->n / g->size * c->inner, row = c->n * c->inner;
  for (int64_t a = 0; a < c->outer; a++)
    ex->dev->copy(ex->dev, (char *)(dst + a * part), (const char *)(src + a * row + g->rank * part), part * 4);
}

static void comm_all_to_all(Executor *ex, Comm *g, const float *src, float *dst, const IsaComm *c) {
  g->all_to_all(g, src, dst, c->outer * c->n * c->inner / g->size);
}

static void comm_all_reduce(Executor *ex, Comm *g, const float *src, float *dst, const IsaComm *c) {
  g->all_reduce(g, src, dst, c->outer * c->n * c->inner, c->red == ISA_RED_MAX ? COMM_MAX : COMM_SUM);
}

static void comm_broadcast(Executor *ex, Comm *g, const float *src, float *dst, const IsaComm *c) {
  int64_t n = c->outer * c->n * c->inner;
  if (g->rank == c->root && src != dst) ex->dev->copy(ex->dev, (char *)dst, (const char *)src, n * 4);
  g->broadcast(g, dst, n, c->root);
}

static void comm_reduce(Executor *ex, Comm *g, const float *src, float *dst, const IsaComm *c) {
  g->reduce(g, src, dst, c->outer * c->n * c->inner, COMM_SUM, c->root);
}

/* The group of a "comm": tp (of the mesh's size), dp, or one of this stage's groups. */
static Comm *comm_group(Executor *ex, const IsaComm *c) {
  Comm *g = c->group == ISA_GROUP_TP   ? ex->ctx.tp
            : c->group == ISA_GROUP_DP ? ex->ctx.dp
            : ex->ctx.stage_groups     ? ex->ctx.stage_groups[c->stage_group]
                                       : NULL;
  if (!g || (c->group == ISA_GROUP_TP && g->size != ex->prog->s->tp))
    exec_missing(c->group == ISA_GROUP_TP ? "a tensor-parallel group of the mesh's tp size (\"comm\")"
                                          : "the data-parallel or stage group of a \"comm\"");
  return g;
}

Comm *exec_fork(Executor *ex, const IsaInstr *in) {
  if (!in->overlap || !ex->ctx.dp_overlap || !ex->dev->fork) return NULL;
  ex->dev->fork(ex->dev);
  ex->forked = 1;
  return ex->ctx.dp_overlap;
}

static int exec_comm(Executor *ex, const IsaInstr *in, int64_t iter) {
  typedef void (*CommFn)(Executor *, Comm *, const float *, float *, const IsaComm *);
  static const CommFn fns[ISA_COMM_NKINDS] = {
      [ISA_COMM_ALL_REDUCE] = comm_all_reduce,         [ISA_COMM_ALL_GATHER] = comm_all_gather,
      [ISA_COMM_REDUCE_SCATTER] = comm_reduce_scatter, [ISA_COMM_SPLIT] = comm_split,
      [ISA_COMM_BROADCAST] = comm_broadcast,           [ISA_COMM_REDUCE] = comm_reduce,
      [ISA_COMM_ALL_TO_ALL] = comm_all_to_all};
  const IsaComm *c = &in->comm;
  Comm *g = comm_group(ex, c);
  float *src = exec_at(ex, c->tier[0], c->off[0]), *dst = exec_at(ex, c->tier[1], c->off[1]);
  if (g->size == 1 && src == dst) /* in place over one rank: the identity */
    return 0;
  Comm *aside = exec_fork(ex, in); /* after what wrote its bytes; a join waits for it */
  if (!aside) ex->dev->sync(ex->dev);
  fns[c->kind](ex, aside ? aside : g, src, dst, c);
  return 0;
}

/* move and drop are queued on the copy thread; wait blocks for them (offload.h). */
static int exec_move(Executor *ex, const IsaInstr *in, int64_t iter) {
  if (ex->fault_move && ex->step.step == ex->fault_move) { /* test only (COLOSSALC_FAULT_MOVE) */
    char msg[128];
    snprintf(msg, sizeof msg, "test fault (COLOSSALC_FAULT_MOVE): a move failed at step %" PRId64 " on rank %d",
             ex->step.step, ex->ctx.world->rank);
    offload_fail(exec_off(ex), msg);
    ex->fault_move = 0;
    return -1;
  }
  offload_issue(exec_off(ex), in, prog_str(ex->prog, ex->list->name), (int)(in - &ex->prog->instrs[ex->list->first]));
  return 0;
}

static int exec_wait(Executor *ex, const IsaInstr *in, int64_t iter) {
  return offload_wait(exec_off(ex), in->move.chunk, in->move.part);
}

/* zero_gather, zero_release, zero_grad, zero_reduce: to the ZeRO state's hook. No wait
 * for the device: its collectives are ordered with the kernels (comm.h), a commit adds
 * memory no queued work uses, and a decommit waits for the device itself
 * (exec_decommit). */
static int exec_zero_param(Executor *ex, const IsaInstr *in, int64_t iter) {
  if (!ex->ctx.zero) exec_missing("the ZeRO state (\"zero_gather\", \"zero_grad\", ...)");
  ex->ctx.zero(ex->ctx.zero_arg, ex, in);
  return 0;
}

/* join: what follows waits for the overlapped collectives issued so far. */
static int exec_join(Executor *ex, const IsaInstr *in, int64_t iter) {
  if (ex->forked) ex->dev->join(ex->dev);
  ex->forked = 0;
  return 0;
}

static void run_list(Executor *ex, const ProgList *list, int last);

static int exec_call(Executor *ex, const IsaInstr *in, int64_t iter) { return 0; /* run_range */ }
static int exec_loop(Executor *ex, const IsaInstr *in, int64_t iter) { return 0; /* run_range */ }

/* ---- the step's scalars ---------------------------------------------------------- */

double exec_lr(const ExecHp *hp, int64_t t, int64_t steps) {
  if (hp->warmup > 0 && t <= hp->warmup) return hp->lr * (double)t / (double)hp->warmup;
  if (hp->schedule == PROG_SCHED_CONSTANT || steps <= hp->warmup) return hp->lr;
  double progress = (double)(t - hp->warmup) / (double)(steps - hp->warmup);
  if (progress > 1) progress = 1;
  return hp->min_lr + 0.5 * (hp->lr - hp->min_lr) * (1 + cos(M_PI * progress));
}

void exec_scalars(Executor *ex, double lr, int64_t t, double gscale) {
  const ExecHp *hp = &ex->step.hp;
  float *sc = ex->step.sc;
  sc[SC_LR] = (float)lr;
  sc[SC_BC1] = (float)(1.0 / (1.0 - pow(hp->beta1, (double)t)));
  sc[SC_BC2] = (float)(1.0 / (1.0 - pow(hp->beta2, (double)t)));
  sc[SC_GSCALE] = (float)gscale;
  sc[SC_STEP] = (float)t;
  sc[SC_BETA1] = (float)hp->beta1;
  sc[SC_BETA2] = (float)hp->beta2;
  sc[SC_EPS] = (float)hp->eps;
  sc[SC_WD] = (float)hp->weight_decay;
  sc[SC_MOMENTUM] = (float)hp->momentum;
  sc[SC_LOSS_SCALE] = 1.0f;
  sc[SC_APPLY] = 1.0f;
}

void exec_begin_step(Executor *ex, int64_t k) {
  ExecStep *st = &ex->step;
  st->step = k;
  st->lr = exec_lr(&st->hp, k, st->steps);
  exec_scalars(ex, st->lr, k, 1.0);
  st->scale = st->hp.loss_scaling ? st->loss_scale : 1.0; /* fp16: gradients come scaled */
  st->sc[SC_LOSS_SCALE] = (float)st->scale;
}

/* norm: the loss, the norm's square and the failure flag summed over every rank; a
 * rank's failure stops the list everywhere (its message is its own; the others' empty).
 * Then the update's scalars. A step whose loss or norm is not finite (every rank sees the
 * same sums) skips its update: under fp16's loss scaling the update kernels keep every
 * value (their list still runs for its moves) and the loss scale backs off when the norm
 * overflowed; otherwise the kernels after "norm" do not run (skip_update). Else the
 * gradients' sum becomes the mean, clipped, unscaled, and Adam's bias corrections count
 * the updates made. */
static int exec_norm(Executor *ex, const IsaInstr *in, int64_t iter) {
  ExecStep *st = &ex->step;
  const IsaNorm *n = &in->norm;
  if (ex->ctx.before_update) ex->ctx.before_update(ex->ctx.update_arg);
  exec_read(ex, TIER_WORK, n->offset, ex->norm_parts, n->count * 4);
  double v[3] = {st->loss, 0, st->failed || ex->stop};
  for (int64_t i = 0; i < n->count; i++) v[1] += ex->norm_parts[i];
  ex->ctx.world->host_all_reduce(ex->ctx.world, v, 3, COMM_SUM);
  if (v[2] > 0) return -1;
  st->mem = ex->total_peak;
  double parts = (double)ex->ctx.dp_size * (double)n->microbatches; /* the gradients summed over these */
  st->mean_loss = (float)(v[0] / parts);
  st->norm = sqrt(v[1]) / parts / st->scale;
  st->skip = !isfinite(st->norm) || !isfinite(st->mean_loss);
  st->bad = !isfinite(st->mean_loss) || (!isfinite(st->norm) && !st->hp.loss_scaling);
  if (st->skip) {
    if (st->hp.loss_scaling && !isfinite(st->norm)) st->loss_scale *= st->hp.scale_backoff, st->good_steps = 0;
    exec_scalars(ex, st->lr, st->step - st->skipped, 0.0);
    st->sc[SC_APPLY] = 0.0f;
    ex->skip_update = !st->hp.loss_scaling;
  } else {
    double gscale = st->hp.clip > 0 ? fmin(1.0, st->hp.clip / (st->norm + 1e-6)) : 1.0;
    exec_scalars(ex, st->lr, st->step - st->skipped, gscale / parts / st->scale);
    if (st->hp.loss_scaling && ++st->good_steps == st->hp.scale_interval)
      st->loss_scale *= st->hp.scale_growth, st->good_steps = 0;
  }
  st->skipped += st->skip;
  return 0;
}

/* trust (LAMB, program/isa.h): each parameter's |w|^2 and |u|^2 from its slots' partial
 * sums, summed by model parameter over every rank, and its ratio into its first slot. A
 * step that skips its update computes them too (every rank reduces alike); the update's
 * kernels then keep every value or do not run. */
static int exec_trust(Executor *ex, const IsaInstr *in, int64_t iter) {
  const Prog *p = ex->prog;
  const IsaTrust *t = &in->trust;
  int64_t nmodel = p->stages[0].nparams;
  float *parts = ex->trust_parts; /* exec_alloc_scratch's */
  double *sq = ex->trust_sq;
  memset(sq, 0, (size_t)(2 * nmodel) * sizeof *sq);
  exec_read(ex, TIER_WORK, t->offset, parts, 2 * t->count * 4);
  const int64_t *ends = &p->ints[p->s->trust_ends];
  for (int64_t k = 0, at = 0; k < p->s->nparams; at = ends[k++])
    for (int64_t i = at; i < ends[k]; i++)
      sq[2 * p->params[k].global] += parts[i], sq[2 * p->params[k].global + 1] += parts[t->count + i];
  ex->ctx.world->host_all_reduce(ex->ctx.world, sq, (int)(2 * nmodel), COMM_SUM);
  for (int64_t k = 0, at = 0; k < p->s->nparams; at = ends[k++]) {
    double w = sq[2 * p->params[k].global], u = sq[2 * p->params[k].global + 1];
    if (ends[k] > at) parts[at] = w > 0 && u > 0 ? (float)(sqrt(w) / sqrt(u)) : 1.0f;
  }
  exec_write(ex, TIER_WORK, t->offset, parts, t->count * 4);
  return 0;
}

/* The WORK offset and bytes of the norm's partial sums (the "norm" of this stage's
 * list `train`). */
static void norm_parts_at(const Executor *ex, int64_t *off, int64_t *bytes) {
  const ProgList *train = prog_list(ex->prog, PROG_LIST_TRAIN);
  *off = *bytes = -1;
  for (int64_t i = 0; train && i < train->n; i++) {
    const IsaInstr *in = &ex->prog->instrs[train->first + i];
    if (in->op == ISA_NORM) *off = in->norm.offset, *bytes = 4 * in->norm.count;
  }
}

/* Test only (COLOSSALC_FAULT_NAN, train_loop.c): before the first kernel of the step that
 * writes the norm's partial sums from GRADS (a "gradnorm" kernel: the gradients are final
 * there), a NaN into the first gradient element it reads, which the update reads too. */
static void exec_fault_nan(Executor *ex, const IsaInstr *in) {
  const ProgKernel *k = &ex->prog->kernels[in->kernel.id];
  const ProgArg *args = &ex->prog->args[k->arg0];
  int64_t off, bytes, grad = -1;
  int parts = 0;
  norm_parts_at(ex, &off, &bytes);
  for (int i = 0; i < k->nargs; i++) {
    parts |= args[i].tier == TIER_WORK && args[i].offset >= off && args[i].offset < off + bytes;
    if (args[i].tier == TIER_GRADS && grad < 0) grad = args[i].offset;
  }
  if (!parts || grad < 0) return;
  const float nan = NAN;
  ex->dev->sync(ex->dev);
  if (in->kernel.on_host) memcpy(offload_host_tier(exec_off(ex), TIER_GRADS) + grad, &nan, sizeof nan);
  else exec_write(ex, TIER_GRADS, grad, &nan, sizeof nan);
  fprintf(stderr, "train: test fault (COLOSSALC_FAULT_NAN): a NaN in a gradient at step %" PRId64 " on rank %d\n",
          ex->step.step, ex->ctx.world->rank);
  ex->fault_done = ex->step.step;
}

/* Instructions that wait for other ranks (the watchdog's "in a collective"). */
static int exec_waits(IsaOp op) {
  return op == ISA_COMM || op == ISA_SEND || op == ISA_RECV || op == ISA_NORM || op == ISA_TRUST ||
         (op >= ISA_ZERO_GATHER && op <= ISA_ZERO_REDUCE);
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
                                          [ISA_JOIN] = exec_join,
                                          [ISA_LOOP] = exec_loop,
                                          [ISA_CALL] = exec_call,
                                          [ISA_NORM] = exec_norm,
                                          [ISA_TRUST] = exec_trust};

double exec_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* --profile: the time since t0 (exec_now_ms) added to op's, the device synced first. */
static void exec_profiled(Executor *ex, int op, double t0) {
  ex->dev->sync(ex->dev);
  ex->prof->ms[op] += exec_now_ms() - t0;
}

/* A failed instruction (in, or NULL: the copy thread failed before the list) on one of
 * several ranks: the others would wait for it in the collectives and messages after it
 * and never reach the "norm" where they would learn of it, so this rank says why and
 * ends the job. */
static void exec_fail_ranks(Executor *ex, const IsaInstr *in) {
  char why[1024] = "", stage[48] = "";
  if (!ex->off || !offload_failed(ex->off) || offload_drain(ex->off, why, sizeof why) == 0)
    snprintf(why, sizeof why, "%s failed", in ? isa_op_names[in->op] : "an offload move");
  if (ex->prog->s->npeers > 0) snprintf(stage, sizeof stage, " (pipeline stage %" PRId64 ")", ex->prog->s->stage);
  fflush(stdout);
  fprintf(stderr, "train: rank %d%s: %s; ending the job\n", ex->ctx.world->rank, stage, why);
  ex->ctx.world->abort(ex->ctx.world, 1);
}

/* Instructions [from, to) of list: loops run their bodies, calls their lists; last: the
 * "last" instructions run (the list's caller's last, and in a loop its final iteration
 * of a final loop). After an
 * instruction fails (the offload's copy thread did) the list runs nothing but its "norm",
 * where the run learns of it and stops: on one rank; of several, the rank ends the job
 * (exec_fail_ranks). */
static void run_range(Executor *ex, const ProgList *list, int64_t from, int64_t to, int64_t iter, int last) {
  const IsaInstr *v = &ex->prog->instrs[list->first];
  for (int64_t i = from; i < to; i++) {
    const IsaInstr *in = &v[i];
    if ((in->dp_rank >= 0 && in->dp_rank != ex->ctx.dp_rank) || (in->tp_rank >= 0 && in->tp_rank != ex->ctx.tp_rank) ||
        (in->last && !last) || (ex->stop && in->op != ISA_NORM && in->op != ISA_LOOP && in->op != ISA_CALL))
      continue;
    if (in->op == ISA_LOOP) {
      for (int64_t k = 0; k < in->loop.count; k++)
        run_range(ex, list, i + 1, i + 1 + in->loop.body, k, last && in->loop.final && k == in->loop.count - 1);
      i += in->loop.body;
    } else if (in->op == ISA_CALL) {
      run_list(ex, &ex->prog->lists[in->call.list], last);
      ex->list = list;
    } else if (ex->skip_update && (in->op == ISA_KERNEL || in->op == ISA_GEMM)) {
      continue; /* the update of a skipped step */
    } else {
      if (in->op == ISA_KERNEL && ex->step.step >= ex->fault_nan[0] && ex->step.step <= ex->fault_nan[1] &&
          ex->fault_done != ex->step.step)
        exec_fault_nan(ex, in);
      watchdog_enter(exec_waits((IsaOp)in->op));
      double t0 = ex->prof ? exec_now_ms() : 0;
      int rc = exec_fns[in->op](ex, in, iter);
      if (ex->prof) exec_profiled(ex, in->op, t0);
      watchdog_leave();
      if (rc != 0 && in->op != ISA_NORM && ex->ctx.world->size > 1) exec_fail_ranks(ex, in);
      if (rc != 0) ex->stop = in->op == ISA_NORM ? 2 : ex->stop ? ex->stop : 1;
    }
    if (ex->stop == 2) return;
  }
}

/* A list's end waits for what it overlapped. */
static void run_list(Executor *ex, const ProgList *list, int last) {
  ex->list = list;
  run_range(ex, list, 0, list->n, 0, last);
  double t0 = ex->prof ? exec_now_ms() : 0;
  exec_join(ex, NULL, 0);
  if (ex->prof) exec_profiled(ex, ISA_JOIN, t0);
}

int exec_run(Executor *ex, const ProgList *list) {
  ex->stop = ex->off && offload_failed(ex->off);
  if (ex->stop && ex->ctx.world->size > 1) exec_fail_ranks(ex, NULL);
  ex->skip_update = 0;
  exec_slot_base(ex, 0);
  run_list(ex, list, 1);
  exec_slot_base(ex, 0);
  ex->list = NULL;
  if (list->sends) {
    double t0 = ex->prof ? exec_now_ms() : 0;
    exec_pp(ex)->wait_sends(exec_pp(ex));
    if (ex->prof) exec_profiled(ex, ISA_SEND, t0);
  }
  int rc = ex->stop ? -1 : 0;
  ex->stop = 0;
  return rc;
}

/* The committed granules of [offset, offset + bytes) of a reserved tier, in maximal runs. */
static void zero_committed(Executor *ex, int tier, int64_t offset, int64_t bytes) {
  int64_t g = ex->dev->granule, g0, g1;
  granule_span(ex, offset, bytes, &g0, &g1);
  pthread_mutex_lock(&ex->lock);
  for (int64_t i = g0, j; i < g1; i = j + 1) {
    for (j = i; j < g1 && ex->commits[tier][j] > 0; j++)
      ;
    int64_t lo = i * g > offset ? i * g : offset, hi = j * g < offset + bytes ? j * g : offset + bytes;
    if (j > i) ex->dev->zero(ex->dev, ex->tiers[tier], lo, hi - lo);
  }
  pthread_mutex_unlock(&ex->lock);
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

/* WORK's offsets are slot 0's, TIER_SHARED's the shared region's: both into WORK. */
static void work_at(const Executor *ex, int *tier, int64_t *offset) {
  if (*tier == TIER_WORK) *offset += ex->prog->s->work_shared;
  if (*tier == TIER_SHARED) *tier = TIER_WORK;
}

/* Reserved tiers: what has no memory behind it is not written, and reads as zeros. */
void exec_write(Executor *ex, int tier, int64_t offset, const void *src, int64_t bytes) {
  work_at(ex, &tier, &offset);
  pthread_mutex_lock(&ex->lock);
  for (int64_t done = 0, n; done < bytes; done += n) {
    int has;
    n = committed_run(ex, tier, offset + done, bytes - done, &has);
    if (has) ex->dev->upload(ex->dev, ex->tiers[tier], offset + done, (const char *)src + done, n);
  }
  pthread_mutex_unlock(&ex->lock);
}

void exec_read(Executor *ex, int tier, int64_t offset, void *dst, int64_t bytes) {
  work_at(ex, &tier, &offset);
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
