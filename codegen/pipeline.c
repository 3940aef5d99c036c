/* Pipeline schedules and the stages' programs (codegen/pipeline.h). */
#include "codegen/pipeline.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/program.h"

/* ---- checking the schedules together -------------------------------------------------- */

typedef struct Sim {
  const Partition *part;
  int m, pp;
  int *sent, *recvd; /* [nbound * 2] next micro-batch sent / received per boundary and direction */
} Sim;

static int stage_of(const Partition *part, int chunk) { return chunk % part->pp; }

/* Whether action a can run: every message it receives was sent. */
static bool ready(const Sim *S, PipeAction a) {
  for (int b = 0; b < S->part->nbound; b++) {
    const Boundary *bd = &S->part->bound[b];
    if (a.fwd && bd->to == a.chunk && S->sent[2 * b] <= a.mb) return false;
    if (!a.fwd && bd->from == a.chunk && bd->seed >= 0 && S->sent[2 * b + 1] <= a.mb) return false;
  }
  return true;
}

static int run_action(Sim *S, PipeAction a, char *err, size_t errlen) {
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

int pipe_check(const Partition *part, int m, bool interleaved, char *err, size_t errlen) {
  int pp = part->pp, per = 2 * m * part->v, rc = 0;
  PipeAction *acts = malloc(sizeof *acts * (size_t)pp * per);
  int *next = calloc(pp, sizeof *next), *cnt = calloc(2 * part->nbound + 1, sizeof *cnt);
  int *rcv = calloc(2 * part->nbound + 1, sizeof *rcv);
  if (!acts || !next || !cnt || !rcv) error_plain("out of memory checking the pipeline schedule");
  Sim S = {part, m, pp, cnt, rcv};
  for (int s = 0; s < pp; s++)
    if (pipe_schedule(pp, part->v, m, interleaved, s, acts + s * per) != per) {
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
               a.fwd ? "the forward" : "the backward", a.chunk, a.mb);
      rc = -1;
    }
  }
  free(acts), free(next), free(cnt), free(rcv);
  return rc;
}

/* ---- the stages' programs --------------------------------------------------------------- */

static void put_seq(Arena *a, PSeq *s, const PSeq *from) {
  for (int i = 0; i < from->n; i++) *pseq_push(a, s, from->v[i].kind) = from->v[i];
}

static void put_p2p(Arena *a, PSeq *s, PInstrKind kind, int peer, int tag, int64_t off, int64_t count) {
  PInstr *in = pseq_push(a, s, kind);
  in->index = peer, in->tag = tag, in->tier = RT_TIER_WORK, in->offset = off, in->bytes = count * 4;
}

static void put_input(Arena *a, PSeq *s, int input, int mb, int64_t off) {
  if (off < 0) return;
  PInstr *in = pseq_push(a, s, ISA_INPUT);
  in->input = input, in->index = mb, in->offset = off;
}

void pipe_unroll_microbatches(Program *p) {
  ir_assert(!p->scheduled && p->microbatches > 1);
  PSeq body = p->step;
  p->step = (PSeq){0};
  for (int mb = 0; mb < p->microbatches; mb++) {
    for (int i = 0; i < p->ninputs; i++) put_input(p->arena, &p->step, i, mb, p->inputs[i].offset);
    for (int i = 0; i < body.n; i++) { /* what runs on the last micro-batch only (fp8's scaling), there */
      if (body.v[i].last_mb && mb < p->microbatches - 1) continue;
      PInstr *in = pseq_push(p->arena, &p->step, body.v[i].kind);
      *in = body.v[i];
      in->last_mb = false;
    }
    pseq_push(p->arena, &p->step, ISA_LOSS)->offset = p->loss_offset;
  }
  p->scheduled = true, p->slots = 1;
}

static const PChunk *find_chunk(const Program *p, int index) {
  for (int i = 0; i < p->nchunks; i++)
    if (p->chunks[i].index == index) return &p->chunks[i];
  diag_internal(__FILE__, __LINE__, "pipeline: a stage runs a chunk it does not hold");
}

/* Stage s's step: its schedule, written out. */
static void compose(Program *p, const Partition *part, int m, bool interleaved, int s) {
  Arena *a = p->arena;
  int per = 2 * m * part->v;
  PipeAction *acts = arena_array(a, per, sizeof *acts);
  pipe_schedule(part->pp, part->v, m, interleaved, s, acts);
  int *first = arena_array(a, m, sizeof *first), *last = arena_array(a, m, sizeof *last);
  for (int i = 0; i < m; i++) first[i] = -1;
  for (int i = 0; i < per; i++) {
    if (first[acts[i].mb] < 0) first[acts[i].mb] = i;
    last[acts[i].mb] = i;
  }
  int *slot_of = arena_array(a, m, sizeof *slot_of), *busy = arena_array(a, m, sizeof *busy), cur = -1;
  p->slots = 0;
  for (int i = 0; i < per; i++) {
    PipeAction x = acts[i];
    if (first[x.mb] == i) {
      int k = 0;
      while (busy[k]) k++;
      busy[k] = 1, slot_of[x.mb] = k;
      if (k + 1 > p->slots) p->slots = k + 1;
    }
    const PChunk *ch = find_chunk(p, x.chunk);
    if (slot_of[x.mb] != cur) pseq_push(a, &p->step, ISA_SLOT)->index = cur = slot_of[x.mb];
    if (x.fwd) {
      for (int j = 0; j < p->ninputs; j++) put_input(a, &p->step, j, x.mb, ch->inputs[j]);
      for (int b = 0; b < part->nbound; b++) {
        const Boundary *bd = &part->bound[b];
        if (bd->to == x.chunk)
          put_p2p(a, &p->step, ISA_RECV, stage_of(part, bd->from), 2 * b, ch->wrt[bd->wrt], bd->count);
      }
      put_seq(a, &p->step, &ch->fwd);
      for (int b = 0; b < part->nbound; b++) {
        const Boundary *bd = &part->bound[b];
        if (bd->from == x.chunk)
          put_p2p(a, &p->step, ISA_SEND, stage_of(part, bd->to), 2 * b, ch->out[bd->out], bd->count);
      }
      if (ch->loss >= 0) pseq_push(a, &p->step, ISA_LOSS)->offset = ch->loss;
    } else {
      for (int b = 0; b < part->nbound; b++) {
        const Boundary *bd = &part->bound[b];
        if (bd->from == x.chunk && bd->seed >= 0)
          put_p2p(a, &p->step, ISA_RECV, stage_of(part, bd->to), 2 * b + 1, ch->seed[bd->seed], bd->count);
      }
      put_seq(a, &p->step, &ch->bwd);
      for (int b = 0; b < part->nbound; b++) {
        const Boundary *bd = &part->bound[b];
        if (bd->to == x.chunk && bd->seed >= 0)
          put_p2p(a, &p->step, ISA_SEND, stage_of(part, bd->from), 2 * b + 1, ch->wrt_grad[bd->wrt], bd->count);
      }
    }
    if (last[x.mb] == i) busy[slot_of[x.mb]] = 0;
  }
  ir_assert(p->slots == pipe_slots(part->pp, part->v, m, interleaved, s)); /* what the plan priced */
  if (p->fp8.tail.n) { /* fp8's scaling, once every micro-batch is done (codegen/lower.h, PFp8) */
    pseq_push(a, &p->step, ISA_SLOT)->index = 0;
    put_seq(a, &p->step, &p->fp8.tail);
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

int pipe_check_order(Program *const *ps, int pp, char *err, size_t errlen) {
  for (int a = 0; a < pp; a++)
    for (int b = 0; b < pp; b++) {
      const PSeq *snd = &ps[a]->step, *rcv = &ps[b]->step;
      for (int i = 0, j = 0, k = 0;; i++, j++, k++) {
        while (i < snd->n && !(snd->v[i].kind == ISA_SEND && snd->v[i].index == b)) i++;
        while (j < rcv->n && !(rcv->v[j].kind == ISA_RECV && rcv->v[j].index == a)) j++;
        if (i == snd->n && j == rcv->n) break;
        if (i == snd->n || j == rcv->n || snd->v[i].tag != rcv->v[j].tag || snd->v[i].bytes != rcv->v[j].bytes) {
          snprintf(err, errlen, "message %d from stage %d to stage %d is %s", k, a, b,
                   i == snd->n   ? "received but never sent"
                   : j == rcv->n ? "sent but never received"
                                 : "received out of the order sent");
          return -1;
        }
      }
    }
  return 0;
}

static void renumber(PSeq *s, int base) {
  for (int i = 0; i < s->n; i++)
    if (s->v[i].kind == ISA_KERNEL) s->v[i].kernel += base;
}

Program **lower_pipeline(const Partition *part, int m, bool interleaved) {
  Arena *a = part->chunk[0]->arena;
  char err[256];
  if (pipe_check(part, m, interleaved, err, sizeof err))
    diag_internal(__FILE__, __LINE__, arena_printf(a, "pipeline schedule: %s", err));
  int pp = part->pp, total = 0;
  Program **ps = arena_array(a, pp, sizeof *ps);
  int nmodel;
  PInput *model = model_inputs(part->chunk, part->nchunks, &nmodel);
  for (int s = 0; s < pp; s++) {
    Graph **gs = arena_array(a, part->v, sizeof *gs);
    int *idx = arena_array(a, part->v, sizeof *idx), n = 0;
    for (int k = s; k < part->nchunks; k += pp) gs[n] = part->chunk[k], idx[n++] = k;
    Program *p = ps[s] = lower_stage(gs, idx, n, model, nmodel);
    p->tp = part->tp, p->pp = pp, p->stage = s, p->microbatches = m;
    compose(p, part, m, interleaved, s);
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
    PSeq *seqs[4] = {&p->step, &p->gradnorm, &p->update, &p->forward};
    for (int i = 0; i < 4; i++) renumber(seqs[i], base);
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
