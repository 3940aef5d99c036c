/* Pipeline schedules and the stages' programs (codegen/pipeline.h). */
#include "codegen/pipeline.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "program/program.h"

/* ---- checking the schedules together -------------------------------------------------- */

typedef struct Sim {
  const Partition *part;
  int m, pp;
  int *sent, *recvd; /* [nbound * 2] next micro-batch sent / received per boundary and direction */
} Sim;

static int stage_of(const Partition *part, int chunk) { return chunk % part->pp; }

/* Whether action a can run: every message it receives was sent. */
static bool ready(const Sim *S, PipeAction a) {
  if (a.w) return true; /* a weight-gradient pass follows its B on the stage, no message */
  for (int b = 0; b < S->part->nbound; b++) {
    const Boundary *bd = &S->part->bound[b];
    if (a.fwd && bd->to == a.chunk && S->sent[2 * b] <= a.mb) return false;
    if (!a.fwd && bd->from == a.chunk && bd->seed >= 0 && S->sent[2 * b + 1] <= a.mb) return false;
  }
  return true;
}

static int run_action(Sim *S, PipeAction a, char *err, size_t errlen) {
  if (a.w) return 0;
  for (int b = 0; b < S->part->nbound; b++) {
    const Boundary *bd = &S->part->bound[b];
    int *rv = NULL, *sd = NULL;
    if (a.fwd && bd->to == a.chunk) rv = &S->recvd[2 * b];
    if (a.fwd && bd->from == a.chunk) sd = &S->sent[2 * b];
    if (!a.fwd && bd->from == a.chunk && bd->seed >= 0) rv = &S->recvd[2 * b + 1];
    if (!a.fwd && bd->to == a.chunk && bd->seed >= 0) sd = &S->sent[2 * b + 1];
    if ((rv && *rv != a.mb) || (sd && *sd != a.mb)) {
      snprintf(err, errlen, "boundary %d (chunk %d to %d): micro-batch %d out of order", b, bd->from, bd->to, a.mb);
      return -1;
    }
    if (rv) ++*rv;
    if (sd) ++*sd;
  }
  return 0;
}

int pipe_check(const Partition *part, int m, PipeSchedule kind, char *err, size_t errlen) {
  int pp = part->pp, per = pipe_actions(part->v, m, kind), rc = 0;
  PipeAction *acts = malloc(sizeof *acts * (size_t)pp * per);
  int *next = calloc(pp, sizeof *next), *cnt = calloc(2 * part->nbound + 1, sizeof *cnt);
  int *rcv = calloc(2 * part->nbound + 1, sizeof *rcv);
  if (!acts || !next || !cnt || !rcv) error_plain("out of memory checking the pipeline schedule");
  Sim S = {part, m, pp, cnt, rcv};
  for (int s = 0; s < pp; s++)
    if (pipe_schedule(pp, part->v, m, kind, s, acts + s * per) != per) {
      snprintf(err, errlen, "stage %d: schedule of the wrong length", s);
      rc = -1;
    }
  for (int done = 0; !rc && done < pp * per;) {
    bool progress = false;
    for (int s = 0; s < pp && !rc; s++)
      while (next[s] < per && ready(&S, acts[s * per + next[s]])) {
        rc = run_action(&S, acts[s * per + next[s]], err, errlen);
        next[s]++, done++, progress = true;
        if (rc) break;
      }
    if (!rc && !progress) {
      int s = 0;
      while (next[s] == per) s++;
      PipeAction a = acts[s * per + next[s]];
      snprintf(err, errlen, "deadlock: stage %d waits forever in %s of chunk %d, micro-batch %d", s,
               a.fwd ? "the forward"
               : a.w ? "the weight gradients"
                     : "the backward",
               a.chunk, a.mb);
      rc = -1;
    }
  }
  free(acts), free(next), free(cnt), free(rcv);
  return rc;
}

/* ---- the stages' programs --------------------------------------------------------------- */

static void put_p2p(Arena *a, PSeq *s, IsaOp op, int peer, int tag, PLoc at, int64_t count) {
  pseq_push(a, s, op)->p2p = (IsaP2P){.peer = peer, .tag = tag, .tier = at.tier, .offset = at.offset, .count = count};
}

void pipe_put_input(Program *p, PSeq *s, int input, int64_t mb, int64_t step, int64_t off) {
  if (off >= 0) pseq_push(p->arena, s, ISA_INPUT)->input = (IsaInput){input, mb, step, off};
}

void pipe_put_loss(Program *p, PSeq *s, int64_t off) {
  IsaInstr *in = pseq_push(p->arena, s, ISA_LOSS);
  in->loss.offset = off;
  in->tp_rank = p->tp > 1 ? 0 : -1; /* the tp ranks compute the same loss: one counts it */
}

void pipe_unroll_microbatches(Program *p) {
  ir_assert(!p->scheduled && p->microbatches > 1);
  PSeq body = p->step;
  p->step = (PSeq){0};
  for (int mb = 0; mb < p->microbatches; mb++) {
    for (int i = 0; i < p->ninputs; i++) pipe_put_input(p, &p->step, i, mb, 0, p->inputs[i].offset);
    for (int i = 0; i < body.n; i++) { /* what runs on the last micro-batch only (fp8's scaling), there */
      if (body.v[i].last && mb < p->microbatches - 1) continue;
      IsaInstr *in = pseq_push(p->arena, &p->step, (IsaOp)body.v[i].op);
      *in = body.v[i];
      in->last = false;
    }
    pipe_put_loss(p, &p->step, p->loss_offset);
  }
  p->scheduled = true, p->slots = 1;
}

/* Appends to out the instructions of s, its loops written out and the lists it calls
 * (of p) in place, slots and inputs at their iteration's micro-batch. */
static void flatten(Program *p, PSeq *out, const PSeq *s, int from, int to, int64_t iter) {
  for (int i = from; i < to; i++) {
    const IsaInstr *in = &s->v[i];
    if (in->op == ISA_LOOP) {
      for (int64_t k = 0; k < in->loop.count; k++) flatten(p, out, s, i + 1, i + 1 + (int)in->loop.body, k);
      i += (int)in->loop.body;
    } else if (in->op == ISA_CALL) {
      const PSeq *c = &p->lists[in->call.list].seq;
      flatten(p, out, c, 0, c->n, 0);
    } else {
      IsaInstr *x = pseq_push(p->arena, out, (IsaOp)in->op);
      *x = *in;
      if (x->op == ISA_SLOT) x->slot.mb += x->slot.step * iter, x->slot.step = 0;
      if (x->op == ISA_INPUT) x->input.mb += x->input.step * iter, x->input.step = 0;
    }
  }
}

void pipe_flatten(Program *p) {
  PSeq flat = {0};
  flatten(p, &flat, &p->step, 0, p->step.n, 0);
  p->step = flat;
}

/* One action of stage s's schedule into `to`: its micro-batch's slot, then (forward) its
 * inputs, the activations it receives, the call of the chunk's forward, what it sends,
 * its loss, or (backward) the gradients it receives, the call, what it sends, or (a
 * weight-gradient pass) the call alone. The micro-batch is mb + step * i in a loop's
 * iteration i. calls: each chunk's forward, backward and weight-gradient lists. */
static void put_action(Program *p, const Partition *part, PSeq *to, PipeAction x, int64_t step, const int *calls) {
  Arena *a = p->arena;
  int c = 0;
  while (c < p->nchunks && p->chunks[c].index != x.chunk) c++;
  if (c == p->nchunks) diag_internal(__FILE__, __LINE__, "pipeline: a stage runs a chunk it does not hold");
  const PChunk *ch = &p->chunks[c];
  pseq_push(a, to, ISA_SLOT)->slot = (IsaSlot){x.mb, step};
  if (x.w) {
    pseq_push(a, to, ISA_CALL)->call.list = calls[3 * c + 2];
    return;
  }
  for (int j = 0; x.fwd && j < p->ninputs; j++) pipe_put_input(p, to, j, x.mb, step, ch->inputs[j]);
  for (int b = 0; b < part->nbound; b++) {
    const Boundary *bd = &part->bound[b];
    if (x.fwd && bd->to == x.chunk)
      put_p2p(a, to, ISA_RECV, stage_of(part, bd->from), 2 * b, ch->wrt[bd->wrt], bd->count);
    if (!x.fwd && bd->from == x.chunk && bd->seed >= 0)
      put_p2p(a, to, ISA_RECV, stage_of(part, bd->to), 2 * b + 1, ch->seed[bd->seed], bd->count);
  }
  pseq_push(a, to, ISA_CALL)->call.list = calls[3 * c + !x.fwd];
  for (int b = 0; b < part->nbound; b++) {
    const Boundary *bd = &part->bound[b];
    if (x.fwd && bd->from == x.chunk)
      put_p2p(a, to, ISA_SEND, stage_of(part, bd->to), 2 * b, ch->out[bd->out], bd->count);
    if (!x.fwd && bd->to == x.chunk && bd->seed >= 0)
      put_p2p(a, to, ISA_SEND, stage_of(part, bd->from), 2 * b + 1, ch->wrt_grad[bd->wrt], bd->count);
  }
  if (x.fwd && ch->loss >= 0) pipe_put_loss(p, to, ch->loss);
}

/* Whether acts[i + k + per] is acts[i + k] d micro-batches later, for k < n. */
static bool repeats(const PipeAction *acts, int i, int per, int n, int d) {
  for (int k = 0; k < n; k++) {
    PipeAction x = acts[i + k], y = acts[i + k + per];
    if (x.fwd != y.fwd || x.w != y.w || x.chunk != y.chunk || y.mb - x.mb != d) return false;
  }
  return true;
}

/* The longest loop starting at action i of n: a period of per actions (of the
 * candidates 1, 2, 3, pp x v and 2 x pp x v: the schedules' warm-up, steady (ZB-H1's F,
 * B, W) and cool-down phases), repeated *count >= 2 times, each d micro-batches after
 * the last; 0 when none. */
static int find_loop(const PipeAction *acts, int i, int n, int pv, int *count, int *d) {
  const int periods[5] = {1, 2, 3, pv, 2 * pv};
  int best = 0;
  for (int c = 0; c < 5; c++) {
    int per = periods[c], reps = 1;
    if (i + 2 * per > n) continue;
    int delta = acts[i + per].mb - acts[i].mb;
    while (i + (reps + 1) * per <= n && repeats(acts, i + (reps - 1) * per, per, per, delta)) reps++;
    if (reps >= 2 && per * reps > best * *count) best = per, *count = reps, *d = delta;
  }
  return best;
}

/* Stage s's step: its schedule, each phase that repeats a pattern over the micro-batches
 * a loop, each chunk's forward and backward a list it calls (so the program's size does
 * not grow with the micro-batches). Micro-batch mb uses slot mb mod slots: the
 * micro-batches a stage holds at once are consecutive (both schedules start and finish
 * them in order), so no two of them share one. */
static void compose(Program *p, const Partition *part, int m, PipeSchedule kind, int s) {
  Arena *a = p->arena;
  int per = pipe_actions(part->v, m, kind);
  PipeAction *acts = arena_array(a, per, sizeof *acts);
  pipe_schedule(part->pp, part->v, m, kind, s, acts);
  p->slots = pipe_slots(part->pp, part->v, m, kind, s); /* what the plan priced */
  int *first = arena_array(a, m, sizeof *first), *last = arena_array(a, m, sizeof *last);
  bool *busy = arena_array(a, p->slots, sizeof *busy);
  for (int i = 0; i < m; i++) first[i] = -1;
  for (int i = 0; i < per; i++) {
    if (first[acts[i].mb] < 0) first[acts[i].mb] = i;
    last[acts[i].mb] = i;
  }
  for (int i = 0; i < per; i++) { /* no two micro-batches in flight share a slot */
    int k = acts[i].mb % (int)p->slots;
    ir_assert(first[acts[i].mb] != i || !busy[k]);
    busy[k] = first[acts[i].mb] == i ? true : last[acts[i].mb] == i ? false : busy[k];
  }
  int *calls = arena_array(a, 3 * p->nchunks, sizeof *calls);
  const char *names[3] = {"fwd", "bwd", "wgrad"};
  for (int c = 0; c < p->nchunks; c++)
    for (int b = 0; b < (kind == PS_ZBH1 ? 3 : 2); b++) {
      calls[3 * c + b] = program_add_list(p, arena_printf(a, "chunk%d.%s", p->chunks[c].index, names[b]), true);
      PChunk *ch = &p->chunks[c];
      p->lists[calls[3 * c + b]].seq = b == 2 ? ch->wgrad : b ? ch->bwd : ch->fwd;
    }
  for (int i = 0; i < per;) {
    int count = 1, d = 0, n = find_loop(acts, i, per, part->pp * part->v, &count, &d);
    if (!n) {
      put_action(p, part, &p->step, acts[i++], 0, calls);
      continue;
    }
    int at = p->step.n;
    pseq_push(a, &p->step, ISA_LOOP)->loop = (IsaLoop){count, 0, 1};
    for (int k = 0; k < n; k++) put_action(p, part, &p->step, acts[i + k], d, calls);
    p->step.v[at].loop.body = p->step.n - at - 1;
    i += n * count;
  }
}

/* Where each stage's fp8 states sit among the model's: chunk by chunk, in the chunks'
 * order (a one-rank program's order: the autocast pass makes them in node order). */
static void fp8_runs(Program **ps, const Partition *part) {
  Arena *a = part->chunk[0]->arena;
  int64_t *first = arena_array(a, part->nchunks + 1, sizeof *first), *local = arena_array(a, part->pp, sizeof *local);
  for (int k = 0; k < part->nchunks; k++) {
    int64_t rows = 0;
    for (int i = 0; i < part->chunk[k]->n; i++) rows += part->chunk[k]->nodes[i]->op == OP_FP8_STATE;
    first[k + 1] = first[k] + rows;
  }
  for (int s = 0; s < part->pp; s++) {
    ps[s]->fp8.runs = arena_array(a, part->v, sizeof *ps[s]->fp8.runs);
    ps[s]->fp8.total = first[part->nchunks];
  }
  for (int k = 0; k < part->nchunks; k++) {
    Program *p = ps[k % part->pp];
    int64_t rows = first[k + 1] - first[k];
    if (!rows) continue;
    int64_t *r = p->fp8.runs[p->fp8.nruns++];
    r[0] = first[k], r[1] = local[k % part->pp], r[2] = rows;
    local[k % part->pp] += rows;
  }
}

/* The sends (op ISA_SEND) or receives of stage program p's step to or from stage peer,
 * in the order they run (loops written out), into out. */
static void messages(Program *p, const PSeq *s, int from, int to, IsaOp op, int peer, PSeq *out) {
  for (int i = from; i < to; i++) {
    const IsaInstr *in = &s->v[i];
    if (in->op == ISA_LOOP) {
      for (int64_t k = 0; k < in->loop.count; k++) messages(p, s, i + 1, i + 1 + (int)in->loop.body, op, peer, out);
      i += (int)in->loop.body;
    } else if (in->op == op && in->p2p.peer == peer) {
      *pseq_push(p->arena, out, op) = *in;
    }
  }
}

int pipe_check_order(Program *const *ps, int pp, char *err, size_t errlen) {
  for (int a = 0; a < pp; a++)
    for (int b = 0; b < pp; b++) {
      PSeq snd = {0}, rcv = {0};
      messages(ps[a], &ps[a]->step, 0, ps[a]->step.n, ISA_SEND, b, &snd);
      messages(ps[b], &ps[b]->step, 0, ps[b]->step.n, ISA_RECV, a, &rcv);
      for (int k = 0; k < snd.n || k < rcv.n; k++)
        if (k == snd.n || k == rcv.n || snd.v[k].p2p.tag != rcv.v[k].p2p.tag ||
            snd.v[k].p2p.count != rcv.v[k].p2p.count) {
          snprintf(err, errlen, "message %d from stage %d to stage %d is %s", k, a, b,
                   k == snd.n   ? "received but never sent"
                   : k == rcv.n ? "sent but never received"
                                : "received out of the order sent");
          return -1;
        }
    }
  return 0;
}

static void renumber(PSeq *s, int base) {
  for (int i = 0; i < s->n; i++)
    if (s->v[i].op == ISA_KERNEL) s->v[i].kernel.id += base;
}

Program **lower_pipeline(const Partition *part, int m, PipeSchedule kind) {
  Arena *a = part->chunk[0]->arena;
  char err[256];
  if (pipe_check(part, m, kind, err, sizeof err))
    diag_internal(__FILE__, __LINE__, arena_printf(a, "pipeline schedule: %s", err));
  int pp = part->pp, total = 0;
  Program **ps = arena_array(a, pp, sizeof *ps);
  int nmodel;
  PInput *model = model_inputs(part->chunk, part->nchunks, &nmodel);
  for (int s = 0; s < pp; s++) {
    Graph **gs = arena_array(a, part->v, sizeof *gs);
    int *idx = arena_array(a, part->v, sizeof *idx), n = 0;
    for (int k = s; k < part->nchunks; k += pp) gs[n] = part->chunk[k], idx[n++] = k;
    Program *p = ps[s] = lower_stage(gs, idx, n, model, nmodel, pipe_slots(pp, part->v, m, kind, s), kind == PS_ZBH1);
    p->tp = part->tp, p->pp = pp, p->stage = s, p->microbatches = m;
    compose(p, part, m, kind, s);
    total += p->nkernels;
  }
  if (pipe_check_order(ps, pp, err, sizeof err))
    diag_internal(__FILE__, __LINE__, arena_printf(a, "pipeline: %s", err));
  bool fp8 = false;
  for (int s = 0; s < pp; s++) fp8 |= ps[s]->fp8.rows > 0;
  if (fp8) fp8_runs(ps, part);
  Kernel **all = arena_array(a, total ? total : 1, sizeof *all);
  int base = 0;
  for (int s = 0; s < pp; s++) {
    Program *p = ps[s];
    for (int i = 0; i < p->nkernels; i++) {
      Kernel *k = all[base + i] = p->kernels[i];
      k->name = arena_printf(a, "s%d_%s", s, k->name);
    }
    PSeq *seqs[5] = {&p->step, &p->gradnorm, &p->update, &p->forward, &p->fp8.tail};
    for (int i = 0; i < 5; i++) renumber(seqs[i], base);
    for (int l = 0; l < p->nlists; l++) renumber(&p->lists[l].seq, base); /* the chunks' forward and backward */
    if (p->fp8.rows) p->fp8.update += base;
    base += p->nkernels;
  }
  int64_t batch = 0, seq = 0, vocab = 0; /* the stages agree on the model's sizes, whatever each reads */
  for (int s = 0; s < pp; s++) {
    if (ps[s]->batch > batch) batch = ps[s]->batch;
    if (ps[s]->seq > seq) seq = ps[s]->seq;
    if (ps[s]->vocab > vocab) vocab = ps[s]->vocab;
  }
  for (int s = 0; s < pp; s++) {
    ps[s]->kernels = all, ps[s]->nkernels = ps[s]->kernels_cap = total;
    ps[s]->batch = batch, ps[s]->seq = seq, ps[s]->vocab = vocab;
  }
  return ps;
}
