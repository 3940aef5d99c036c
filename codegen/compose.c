/* Composing the training step (codegen/compose.h). */
#include "codegen/compose.h"
#include <string.h>
#include "codegen/offload.h"
#include "codegen/pipeline.h"
#include "program/program.h"

static IsaInstr *push_comm(Program *p, PSeq *s, IsaCommKind kind, IsaGroup group, int tier, int64_t off,
                           int64_t bytes) {
  IsaInstr *in = pseq_push(p->arena, s, ISA_COMM);
  in->comm = (IsaComm){
      .kind = kind, .group = group, .tier = {tier, tier}, .off = {off, off}, .outer = 1, .n = bytes / 4, .inner = 1};
  return in;
}

/* The holders of each parameter name, in global order (stage, then position). */
typedef struct Tied {
  const char *name;
  int64_t start; /* a piece's (PParam.start): the stages hold it whole, pieces only with pp 1 */
  int *at;       /* [n] index in stage s, or -1 */
  int holders;
} Tied;

static int find_group(PStageGroup *g, int ng, const Tied *t, int n) {
  for (int k = 0; k < ng; k++) {
    if (g[k].n != t->holders) continue;
    int i = 0;
    for (int s = 0; s < n; s++)
      if (t->at[s] >= 0 && g[k].stages[i] == s) i++;
    if (i == t->holders) return k;
  }
  return -1;
}

/* The tied parameters' sums in each holder's sync; lowest[s][i]: stage s counts its
 * parameter i in the norm (it is the lowest holder). */
static void compose_tied(Program **ps, int n, bool **lowest) {
  Arena *a = ps[0]->arena;
  int total = 0;
  for (int s = 0; s < n; s++) total += ps[s]->nparams;
  Tied *t = arena_array(a, total + 1, sizeof *t);
  int nt = 0;
  for (int s = 0; s < n; s++)
    for (int i = 0; i < ps[s]->nparams; i++) {
      const char *name = ps[s]->params[i].node->name;
      int64_t start = ps[s]->params[i].start;
      int e = 0;
      while (e < nt && (strcmp(t[e].name, name) || t[e].start != start)) e++;
      if (e == nt) {
        t[nt] = (Tied){name, start, arena_array(a, n, sizeof(int)), 0};
        for (int r = 0; r < n; r++) t[nt].at[r] = -1;
        nt++;
        lowest[s][i] = true;
      }
      t[e].at[s] = i, t[e].holders++;
    }
  PStageGroup *g = arena_array(a, nt + 1, sizeof *g);
  int ng = 0;
  for (int e = 0; e < nt; e++) {
    if (t[e].holders < 2) continue;
    int k = find_group(g, ng, &t[e], n);
    if (k < 0) {
      k = ng++;
      g[k] = (PStageGroup){0, arena_array(a, t[e].holders, sizeof(int))};
      for (int s = 0; s < n; s++)
        if (t[e].at[s] >= 0) g[k].stages[g[k].n++] = s;
    }
    for (int s = 0; s < n; s++) {
      if (t[e].at[s] < 0) continue;
      const PParam *q = &ps[s]->params[t[e].at[s]];
      for (int kind = 0; kind < 2; kind++) /* onto the lowest holder, then back */
        push_comm(ps[s], &ps[s]->sync, kind ? ISA_COMM_BROADCAST : ISA_COMM_REDUCE, ISA_GROUP_STAGES, TIER_GRADS,
                  q->offset, pparam_bytes(q))
            ->comm.stage_group = k;
    }
  }
  for (int s = 0; s < n; s++) ps[s]->stage_groups = g, ps[s]->nstage_groups = ng;
}

/* The gradients left as partial sums over the tensor-parallel ranks (PParam.tp_partial)
 * all-reduced over tp into s, adjacent ones together up to a bucket, last first. */
static void tp_sums(Program *p, PSeq *s) {
  for (int hi = p->nparams - 1; hi >= 0; hi--) {
    if (!p->params[hi].tp_partial) continue;
    int64_t end = p->params[hi].offset + pparam_bytes(&p->params[hi]);
    int lo = hi;
    while (lo > 0 && p->params[lo - 1].tp_partial &&
           p->params[lo - 1].offset + pparam_bytes(&p->params[lo - 1]) == p->params[lo].offset &&
           end - p->params[lo - 1].offset <= COMPOSE_BUCKET)
      lo--;
    push_comm(p, s, ISA_COMM_ALL_REDUCE, ISA_GROUP_TP, TIER_GRADS, p->params[lo].offset, end - p->params[lo].offset);
    hi = lo;
  }
}

/* The gradient tier all-reduced over dp in buckets of whole parameters, last first,
 * into s. */
static void dp_buckets(Program *p, PSeq *s) {
  int64_t end = p->tiers[TIER_GRADS];
  for (int hi = p->nparams; hi > 0;) {
    int lo = hi - 1;
    while (lo > 0 && end - p->params[lo - 1].offset <= COMPOSE_BUCKET) lo--;
    push_comm(p, s, ISA_COMM_ALL_REDUCE, ISA_GROUP_DP, TIER_GRADS, p->params[lo].offset, end - p->params[lo].offset);
    end = p->params[lo].offset, hi = lo;
  }
}

/* Each parameter's gradient all-reduced alone, last first, into s (an offload program:
 * a chunk's gradients leave the device once its last parameter's are complete). */
static void param_sums(Program *p, PSeq *s) {
  for (int k = p->nparams - 1; k >= 0; k--)
    push_comm(p, s, ISA_COMM_ALL_REDUCE, ISA_GROUP_DP, TIER_GRADS, p->params[k].offset, pparam_bytes(&p->params[k]));
}

/* ZeRO-1: each parameter's gradient summed onto its owner only (the others' copies are
 * not used again), into s. */
static void owner_reduces(Program *p, PSeq *s) {
  for (int k = p->nparams - 1; k >= 0; k--)
    push_comm(p, s, ISA_COMM_REDUCE, ISA_GROUP_DP, TIER_GRADS, p->params[k].offset, pparam_bytes(&p->params[k]))
        ->comm.root = p->params[k].owner;
}

/* last[k]: the last instruction of `step` that touches parameter k's gradient, or -1
 * (one pass from the end; parameters lie in offset order). */
static int *grad_last(const Program *p) {
  int np = p->nparams, *last = arena_array(p->arena, np + 1, sizeof *last);
  for (int k = 0; k < np; k++) {
    last[k] = -1;
    ir_assert(k == 0 || p->params[k].offset >= p->params[k - 1].offset);
  }
  Touch t[K_MAX_BUFS];
  for (int i = p->step.n - 1; i >= 0; i--) {
    int n = instr_touch(p, &p->step.v[i], t);
    for (int j = 0; j < n; j++) {
      if (t[j].tier != TIER_GRADS) continue;
      int lo = 0, hi = np; /* the first parameter ending after t[j].lo */
      while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (p->params[mid].offset + pparam_bytes(&p->params[mid]) <= t[j].lo) lo = mid + 1;
        else hi = mid;
      }
      for (int k = lo; k < np && p->params[k].offset < t[j].hi; k++)
        if (last[k] < 0) last[k] = i;
    }
  }
  return last;
}

/* The sums (collectives over GRADS) into `step`, each right after the last instruction
 * touching a gradient it covers, on the last micro-batch, overlapping what follows
 * (the end of backward); one that covers nothing touched goes at the end. */
static void compose_overlap(Program *p, PSeq *sums, bool overlap) {
  int *last = grad_last(p), *after = arena_array(p->arena, sums->n + 1, sizeof *after);
  for (int b = 0; b < sums->n; b++) {
    IsaInstr *c = &sums->v[b];
    after[b] = -1;
    for (int k = 0; k < p->nparams; k++)
      if (p->params[k].offset < c->comm.off[0] + c->comm.n * 4 &&
          c->comm.off[0] < p->params[k].offset + pparam_bytes(&p->params[k]) && last[k] > after[b])
        after[b] = last[k];
    if (after[b] < 0) after[b] = p->step.n - 1;
    c->last = !p->scheduled, c->overlap = overlap; /* a scheduled step runs once */
  }
  int *order = arena_array(p->arena, sums->n + 1, sizeof *order), n = 0; /* by position, stable */
  for (int i = 0; i < p->step.n && n < sums->n; i++)
    for (int b = 0; b < sums->n; b++)
      if (after[b] == i) order[n++] = b;
  PSeq old = p->step;
  p->step = (PSeq){0};
  for (int i = 0, next = 0; i < old.n; i++) {
    *pseq_push(p->arena, &p->step, (IsaOp)old.v[i].op) = old.v[i];
    for (; next < n && after[order[next]] == i; next++) *pseq_push(p->arena, &p->step, ISA_COMM) = sums->v[order[next]];
  }
}

/* The k-th kernel of list s is parameter k's (lower's emit_optimizer). */
static IsaInstr *param_kernel(PSeq *s, int k) {
  for (int i = 0, seen = 0; i < s->n; i++)
    if (s->v[i].op == ISA_KERNEL && seen++ == k) return &s->v[i];
  ir_assert(!"a kernel per parameter");
  return NULL;
}

static int count_kernels(const PSeq *s) {
  int n = 0;
  for (int i = 0; i < s->n; i++) n += s->v[i].op == ISA_KERNEL;
  return n;
}

/* ---- multi-tensor kernels ------------------------------------------------------------ */

/* Appends k to the kernel table, which the stages of a pipeline share (lower_pipeline);
 * returns its number. */
static int add_kernel(Program **ps, int n, Kernel *k) {
  Program *p = ps[0];
  if (p->nkernels == p->kernels_cap) {
    int cap = p->kernels_cap ? 2 * p->kernels_cap : 64;
    Kernel **v = arena_array(p->arena, cap, sizeof *v);
    if (p->nkernels) memcpy(v, p->kernels, p->nkernels * sizeof *v);
    p->kernels = v, p->kernels_cap = cap;
  }
  int at = p->nkernels++;
  p->kernels[at] = k;
  for (int s = 1; s < n; s++)
    ps[s]->kernels = p->kernels, ps[s]->nkernels = p->nkernels, ps[s]->kernels_cap = p->kernels_cap;
  return at;
}

/* Whether b, the kernel of the parameter after a's, joins a's run: right after it in the
 * list, run on the same ranks. */
static bool joins(const IsaInstr *a, const IsaInstr *b) {
  return a->op == ISA_KERNEL && b->op == ISA_KERNEL && a->dp_rank == b->dp_rank && a->tp_rank == b->tp_rank &&
         a->kernel.on_host == b->kernel.on_host;
}

/* List s (its k-th kernel parameter k's; skip[k]: dropped, when skip is given) rewritten
 * with each run of consecutive parameters whose kernels stand together in it and run on the
 * same ranks made one multi-tensor kernel (codegen/lower.h: the norm's, when the program's
 * norm has rows that runs can share, or the update's), which keeps their conditions; what
 * else the list holds stays in order. */
static void fuse_runs(Program **ps, int n, Program *p, PSeq *s, const bool *skip, bool norm) {
  PSeq old = *s;
  *s = (PSeq){0};
  for (int i = 0, k = 0; i < old.n;) {
    const IsaInstr *in = &old.v[i];
    if (in->op != ISA_KERNEL || (skip && skip[k])) {
      if (in->op != ISA_KERNEL) *pseq_push(p->arena, s, (IsaOp)in->op) = *in;
      k += in->op == ISA_KERNEL, i++;
      continue;
    }
    int e = k + 1; /* the run [k, e), instructions i .. i + e - k - 1 */
    while (e < p->nparams && i + e - k < old.n && !(skip && skip[e]) && joins(&old.v[i + e - k - 1], &old.v[i + e - k]))
      e++;
    e = norm ? (p->norm_row ? e : k + 1) : lower_update_end(p, k, e);
    IsaInstr *x = pseq_push(p->arena, s, ISA_KERNEL);
    *x = *in;
    if (e - k > 1) {
      Kernel *run = norm ? lower_norm_kernel(p, k, e, p->nkernels) : lower_update_kernel(p, k, e, p->nkernels);
      x->kernel.id = add_kernel(ps, n, run), x->kernel.extent = run->rows;
    }
    i += e - k, k = e;
  }
}

/* The kernels no list runs any more (the parameters' own, where a run replaced them)
 * dropped from the table the stages share, every stage's lists renumbered. */
static void prune_kernels(Program **ps, int n) {
  Program *p = ps[0];
  int *to = arena_array(p->arena, p->nkernels + 1, sizeof *to), kept = 0;
  for (int i = 0; i < p->nkernels; i++) to[i] = -1;
  for (int pass = 0; pass < 2; pass++) { /* mark what runs, then renumber */
    for (int st = 0; st < n; st++) {
      Program *q = ps[st];
      int np = 6 + q->nlists; /* the lists made of the step, and those the schedule calls */
      PSeq **lists = arena_array(p->arena, np, sizeof *lists);
      PSeq *parts[6] = {&q->step, &q->sync, &q->gradnorm, &q->update, &q->forward, &q->fp8.tail};
      for (int l = 0; l < np; l++) lists[l] = l < 6 ? parts[l] : &q->lists[l - 6].seq;
      for (int l = 0; l < np; l++)
        for (IsaInstr *in = lists[l]->v; in < lists[l]->v + lists[l]->n; in++) {
          if (in->op != ISA_KERNEL) continue;
          if (pass) in->kernel.id = to[in->kernel.id];
          else to[in->kernel.id] = 0;
        }
    }
    for (int i = 0; i < p->nkernels && !pass; i++) /* the kept ones in table order */
      if (to[i] == 0) p->kernels[kept] = p->kernels[i], to[i] = kept++;
  }
  for (int st = 0; st < n; st++) ps[st]->nkernels = kept;
}

/* ---- the gradient norm and the update ------------------------------------------------ */

/* in, parameter k's kernel of a sum over the mesh, made to run on the ranks that count k:
 * a tensor-parallel split one on every tp rank, a replicated one on tp rank 0; over dp its
 * owner from ZeRO stage 1, else dp rank 0 (the tied parameters' lowest stage: `lowest`).
 * Whether some rank skips it. */
static bool count_once(const Program *p, IsaInstr *in, int k) {
  if (p->tp > 1 && !p->params[k].node->split) in->tp_rank = 0;
  if (p->zero_stage >= 1) in->dp_rank = p->params[k].owner; /* its sum is the owner's only */
  else if (p->dp != 1) in->dp_rank = 0;
  return in->tp_rank >= 0 || in->dp_rank >= 0;
}

/* gradnorm's kernels are one per parameter, in order, among what else the list holds
 * (an offload program's moves and waits), which stays as it is. Each runs on the ranks
 * that count its parameter; then each run of parameters counted by the same ranks is one
 * kernel (fuse_runs). */
static void compose_norm(Program **ps, int n, Program *p, const bool *lowest) {
  ir_assert(count_kernels(&p->gradnorm) == p->nparams);
  bool partial = false, *skip = arena_array(p->arena, p->nparams + 1, sizeof *skip);
  for (int k = 0; k < p->nparams; k++) {
    IsaInstr *in = param_kernel(&p->gradnorm, k);
    skip[k] = !lowest[k];
    partial |= count_once(p, in, k) || skip[k];
  }
  fuse_runs(ps, n, p, &p->gradnorm, skip, true);
  if (!partial) return;
  PSeq old = p->gradnorm;
  p->gradnorm = (PSeq){0};
  IsaInstr *z = pseq_push(p->arena, &p->gradnorm, ISA_ZERO);
  z->zero = (IsaZero){TIER_WORK, p->gradnorm_offset, p->gradnorm_parts * 4};
  for (int i = 0; i < old.n; i++) *pseq_push(p->arena, &p->gradnorm, (IsaOp)old.v[i].op) = old.v[i];
}

/* LAMB's update: before each parameter's "lamb" kernel (on its updating ranks), on those
 * ranks its moments, then on the ranks that count it (count_once, `lowest`) the partial
 * sums of its norms, from zero; then "trust", which turns them into the ratios. */
static void compose_lamb(Program **ps, int n, Program *p, const bool *lowest) {
  PSeq old = p->update, *s = &p->update;
  *s = (PSeq){0};
  for (int pass = 0; pass < 2; pass++) {
    if (pass) pseq_push(p->arena, s, ISA_ZERO)->zero = (IsaZero){TIER_WORK, p->trust_offset, p->trust_parts * 8};
    for (int k = 0; k < p->nparams; k++) {
      if (pass && !lowest[k]) continue;
      IsaInstr *x = pseq_push(p->arena, s, ISA_KERNEL);
      *x = *param_kernel(&old, k);
      Kernel *kn = lower_lamb_kernel(p, k, pass, p->nkernels);
      x->kernel.id = add_kernel(ps, n, kn), x->kernel.extent = kn->rows;
      if (pass) count_once(p, x, k);
    }
  }
  pseq_push(p->arena, s, ISA_TRUST)->trust = (IsaTrust){p->trust_offset, p->trust_parts};
  for (int i = 0; i < old.n; i++) *pseq_push(p->arena, s, (IsaOp)old.v[i].op) = old.v[i];
}

/* update: each parameter's kernel on its owner from ZeRO stage 1, then each run of
 * parameters the same ranks update one kernel, except in an offload program (whose update
 * goes chunk by chunk, the state of one brought from NVMe while the one before updates:
 * codegen/offload.h); the broadcasts from the owners at stages 1 and 2 after them. */
static void compose_update(Program **ps, int n, Program *p, bool offload, const bool *lowest) {
  ir_assert(count_kernels(&p->update) == p->nparams); /* with an offload program's moves and waits between them */
  for (int k = 0; k < p->nparams && p->zero_stage >= 1; k++) param_kernel(&p->update, k)->dp_rank = p->params[k].owner;
  if (p->trust_parts) compose_lamb(ps, n, p, lowest); /* per parameter: its ratio */
  else if (!offload) fuse_runs(ps, n, p, &p->update, NULL, false);
  for (int k = 0; k < p->nparams && p->zero_stage >= 1 && p->zero_stage < 3; k++)
    push_comm(p, &p->update, ISA_COMM_BROADCAST, ISA_GROUP_DP, TIER_PARAMS, p->params[k].offset,
              pparam_bytes(&p->params[k]))
        ->comm.root = p->params[k].owner;
}

/* fp8: this step's amaxes (max) over the tensor- and data-parallel groups, before the
 * kernel that takes them into the histories, wherever it runs (lower.h, PFp8: in `step`,
 * or in a pipeline stage's tail). */
static void compose_fp8(Program *p, PSeq *s) {
  if (!p->fp8.rows || (p->tp <= 1 && p->dp == 1)) return;
  PSeq old = *s;
  *s = (PSeq){0};
  for (int i = 0; i < old.n; i++) {
    const IsaInstr *in = &old.v[i];
    for (int g = 0; g < 2 && in->op == ISA_KERNEL && in->kernel.id == p->fp8.update; g++) {
      if (g == 0 ? p->tp <= 1 : p->dp == 1) continue;
      IsaInstr *c = push_comm(p, s, ISA_COMM_ALL_REDUCE, g ? ISA_GROUP_DP : ISA_GROUP_TP, TIER_SHARED, p->fp8.amax,
                              p->fp8.rows * 4);
      c->comm.red = ISA_RED_MAX, c->last = in->last;
    }
    *pseq_push(p->arena, s, (IsaOp)in->op) = *in;
  }
}

void compose_step(Program **ps, int n, bool offload) {
  bool **lowest = arena_array(ps[0]->arena, n, sizeof *lowest);
  for (int s = 0; s < n; s++) lowest[s] = arena_array(ps[0]->arena, ps[s]->nparams + 1, sizeof **lowest);
  for (int s = 0; s < n; s++) tp_sums(ps[s], &ps[s]->sync); /* whole before any other sum reads them */
  compose_tied(ps, n, lowest);
  for (int s = 0; s < n; s++) {
    Program *p = ps[s];
    compose_fp8(p, &p->step);
    compose_fp8(p, &p->fp8.tail);
    PSeq sums = {0}; /* none at stages 2 and 3: the step reduces each gradient (zero.h, and
                      * offload.h under ZeRO-3) */
    if (p->zero_scheduled || p->dp == 1 || (offload && p->zero_stage == 3)) {
    } else if (p->zero_stage == 1) {
      owner_reduces(p, &sums);
    } else if (offload) {
      param_sums(p, &sums);
    } else {
      dp_buckets(p, &sums);
    }
    /* in an offload program each sum is in `step`, after its gradient's last write and
     * in order with the compute, so that the offload plan keeps the gradient on the
     * device until it is summed */
    bool one_stage = p->step.n > 0 && (offload || (p->tp <= 1 && n == 1 && !p->scheduled));
    if (sums.n && one_stage) compose_overlap(p, &sums, !offload);
    else
      for (int i = 0; i < sums.n; i++) *pseq_push(p->arena, &p->sync, ISA_COMM) = sums.v[i];
    compose_norm(ps, n, p, lowest[s]);
    compose_update(ps, n, p, offload, lowest[s]);
  }
  prune_kernels(ps, n);
}

/* ---- the lists the program carries --------------------------------------------------- */

static void put_seq(Program *p, PSeq *s, const PSeq *from) {
  for (int i = 0; i < from->n; i++) *pseq_push(p->arena, s, (IsaOp)from->v[i].op) = from->v[i];
}

/* The step's micro-batches: a scheduled step's list body (its schedule, or an offload
 * program's micro-batches written out), called; else a loop over them, each its inputs,
 * a call of the step (list body) and its loss, the step's last-micro-batch instructions
 * run in the last iteration only where final (training; validation leaves them). */
static void put_microbatches(Program *p, PSeq *s, int body, bool final) {
  if (p->scheduled) {
    pseq_push(p->arena, s, ISA_CALL)->call.list = body;
    return;
  }
  int at = s->n;
  pseq_push(p->arena, s, ISA_LOOP)->loop = (IsaLoop){p->microbatches, 0, final};
  for (int i = 0; i < p->ninputs; i++) pipe_put_input(p, s, i, 0, 1, p->inputs[i].offset);
  pseq_push(p->arena, s, ISA_CALL)->call.list = body;
  pipe_put_loss(p, s, p->loss_offset);
  s->v[at].loop.body = s->n - at - 1;
}

/* The gradients start from zero, but in an offload program (whose moves from "zero"
 * create them); of a tier ZeRO reserves, what the rank holds. */
static void put_zero_grads(Program *p, PSeq *s) {
  if (!p->offload && p->tiers[TIER_GRADS] > 0)
    pseq_push(p->arena, s, ISA_ZERO)->zero = (IsaZero){TIER_GRADS, 0, p->tiers[TIER_GRADS]};
}

static PSeq *named(Program *p, ProgListKind k) {
  p->named[k] = program_add_list(p, prog_list_names[k], false);
  return &p->lists[p->named[k]].seq;
}

/* train: zero, the micro-batches, then in slot 0 (where the step's work tier is after
 * a schedule's slots) fp8's tail, sync, gradnorm, norm, update. */
static void compose_train(Program *p, int body) {
  PSeq *t = named(p, PROG_LIST_TRAIN);
  put_zero_grads(p, t);
  put_microbatches(p, t, body, true);
  if (p->slots > 1) pseq_push(p->arena, t, ISA_SLOT)->slot = (IsaSlot){0, 0};
  put_seq(p, t, &p->fp8.tail);
  put_seq(p, t, &p->sync);
  put_seq(p, t, &p->gradnorm);
  pseq_push(p->arena, t, ISA_NORM)->norm = (IsaNorm){p->gradnorm_offset, p->gradnorm_parts, p->microbatches};
  put_seq(p, t, &p->update);
}

/* forward (sampling): the token inputs of the first micro-batch, then the logits. */
static void compose_forward(Program *p) {
  PSeq *f = named(p, PROG_LIST_FORWARD);
  for (int i = 0; i < p->ninputs; i++)
    if (p->inputs[i].role == PIN_TOKENS) pipe_put_input(p, f, i, 0, 0, p->inputs[i].offset);
  put_seq(p, f, &p->forward);
}

/* ZeRO-3 (its step gathering each parameter itself): every parameter gathered to every
 * rank, and given back, for what reads them all outside a step (sampling, checkpoints). */
static void compose_gather(Program *p) {
  PSeq *g = named(p, PROG_LIST_GATHER), *r = named(p, PROG_LIST_RELEASE);
  for (int k = 0; k < p->nparams; k++) {
    pseq_push(p->arena, g, ISA_ZERO_GATHER)->param.index = k;
    pseq_push(p->arena, r, ISA_ZERO_RELEASE)->param.index = k;
  }
}

int64_t program_staging(const Program *p) {
  const PSeq *seqs[5] = {&p->step, &p->sync, &p->gradnorm, &p->update, &p->forward};
  int64_t most = 0;
  for (int l = 0; l < 5 + p->nlists; l++) {
    const PSeq *s = l < 5 ? seqs[l] : &p->lists[l - 5].seq;
    for (int i = 0; i < s->n; i++) most = isa_staging_bytes(&s->v[i]) > most ? isa_staging_bytes(&s->v[i]) : most;
  }
  return most;
}

void compose_lists(Program **ps, int n) {
  for (int s = 0; s < n; s++) {
    Program *p = ps[s];
    /* the step's part that train and eval share: the step of one micro-batch, or the
     * schedule (which calls the chunks' lists) */
    int body = program_add_list(p, p->scheduled ? "schedule" : "step", true);
    p->lists[body].seq = p->step;
    compose_train(p, body);
    PSeq *e = named(p, PROG_LIST_EVAL);
    put_zero_grads(p, e);
    put_microbatches(p, e, body, false);
    if (p->forward.n) compose_forward(p);
    if (p->zero_stage == 3 && p->zero_scheduled && !p->offload) compose_gather(p);
    p->staging = program_staging(p);
  }
}
