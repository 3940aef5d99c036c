/* The program verifier (codegen/verify.h). */
#include "codegen/verify.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/offload.h"
#include "codegen/pipeline.h"
#include "runtime/program.h"

typedef struct V {
  const Program *p;
  const char *list; /* "step", ... */
  bool in_step;
  int stage, nstages;
  char *err;
  size_t errlen;
  int at; /* the instruction's index, -1 for the program as a whole */
} V;

static int fail(V *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(V *v, const char *fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  char where[64] = "";
  if (v->nstages > 1) snprintf(where, sizeof where, "stage %d ", v->stage);
  if (v->at >= 0) snprintf(where + strlen(where), sizeof where - strlen(where), "%s[%d]: ", v->list, v->at);
  else if (where[0]) snprintf(where + strlen(where), sizeof where - strlen(where), ": ");
  snprintf(v->err, v->errlen, "%s%s", where, why);
  return -1;
}

/* The bytes a tier holds (WORK: one slot, which every WORK offset is relative to). */
static int64_t tier_bytes(const Program *p, int tier) { return p->tiers[tier]; }

static int range_in(V *v, int tier, int64_t lo, int64_t hi, const char *what) {
  if (tier < 0 || tier >= RT_TIERS) return fail(v, "%s: tier %d out of range", what, tier);
  if (lo < 0 || hi < lo || hi > tier_bytes(v->p, tier))
    return fail(v, "%s: bytes [%lld, %lld) outside the %lld of tier %d", what, (long long)lo, (long long)hi,
                (long long)tier_bytes(v->p, tier), tier);
  return 0;
}

/* The "comm" geometry of runtime/program.h: src and dst bytes by kind, the group. */
static int check_comm(V *v, const PComm *c) {
  const Program *p = v->p;
  bool split = isa_comm_splits(c->kind);
  bool rooted = c->kind == ISA_COMM_BROADCAST || c->kind == ISA_COMM_REDUCE;
  if (c->group == ISA_GROUP_TP && p->tp < 1) return fail(v, "comm in a program without a tensor-parallel group");
  if (split && c->group != ISA_GROUP_TP)
    return fail(v, "comm: %s only over the tensor-parallel group", isa_comm_names[c->kind]);
  if (c->red != ISA_RED_SUM && c->kind != ISA_COMM_ALL_REDUCE)
    return fail(v, "comm: %s sums (a reduction only on all_reduce)", isa_comm_names[c->kind]);
  if (c->group == ISA_GROUP_STAGES) {
    if (c->stage_group < 0 || c->stage_group >= p->nstage_groups)
      return fail(v, "comm: stage group %d of %d", c->stage_group, p->nstage_groups);
    const PStageGroup *sg = &p->stage_groups[c->stage_group];
    bool member = false;
    for (int i = 0; i < sg->n; i++) member |= sg->stages[i] == v->stage;
    if (!member) return fail(v, "comm over stage group %d, which stage %d is not in", c->stage_group, v->stage);
    if (rooted && (c->root < 0 || c->root >= sg->n))
      return fail(v, "comm: root %d of a group of %d stages", c->root, sg->n);
  }
  if (rooted && c->group == ISA_GROUP_DP && (c->root < 0 || (p->dp > 0 && c->root >= p->dp)))
    return fail(v, "comm: root %d of a dp group of %lld", c->root, (long long)p->dp);
  if (rooted && c->group == ISA_GROUP_TP && (c->root < 0 || c->root >= p->tp))
    return fail(v, "comm: root %d of a tp group of %lld", c->root, (long long)p->tp);
  if (c->outer < 1 || c->n < 1 || c->inner < 1) return fail(v, "comm of an empty tensor");
  if (split && c->n % p->tp)
    return fail(v, "comm: n %lld does not split over tp %lld", (long long)c->n, (long long)p->tp);
  int64_t b[2];
  pcomm_bytes(p, c, b);
  if (range_in(v, c->tier[0], c->off[0], c->off[0] + b[0], "comm src") ||
      range_in(v, c->tier[1], c->off[1], c->off[1] + b[1], "comm dst"))
    return -1;
  bool overlap = c->tier[0] == c->tier[1] && c->off[0] < c->off[1] + b[1] && c->off[1] < c->off[0] + b[0];
  bool same = c->tier[0] == c->tier[1] && c->off[0] == c->off[1];
  if (overlap && (split || c->kind == ISA_COMM_ALL_REDUCE ? c->kind != ISA_COMM_ALL_REDUCE || !same : !same))
    return fail(v, "comm: src and dst overlap (a collective is in place or apart)");
  return 0;
}

/* One instruction on its own: its bytes and where it may be. */
static int check_instr(V *v, const PInstr *in) {
  const Program *p = v->p;
  Touch t[K_MAX_BUFS];
  bool local = in->kind == ISA_KERNEL || in->kind == ISA_GEMM || in->kind == ISA_ZERO || in->kind == ISA_MOVE ||
               in->kind == ISA_DROP || in->kind == ISA_WAIT;
  if ((in->dp_rank >= 0 || in->tp_rank >= 0) && !local)
    return fail(v, "%s with a rank condition (only kernels, GEMMs, zeroing and offload's moves are run by some ranks)",
                isa_op_names[in->kind]);
  if ((p->dp > 0 && in->dp_rank >= p->dp) || in->tp_rank >= (p->tp > 1 ? p->tp : 1))
    return fail(v, "condition on dp rank %d or tp rank %d outside the mesh", in->dp_rank, in->tp_rank);
  bool moves = in->kind == ISA_MOVE || in->kind == ISA_DROP || in->kind == ISA_WAIT;
  if (!strcmp(v->list, "sync") && in->kind != ISA_COMM && !(moves && p->offload))
    return fail(v, "sync holds collectives only (and an offload program's moves)");
  if (in->last_mb && (!v->in_step || p->scheduled))
    return fail(v, "last_microbatch only in `step` of an unscheduled program");
  bool dp_sum = in->kind == ISA_COMM && (in->comm.kind == ISA_COMM_ALL_REDUCE || in->comm.kind == ISA_COMM_REDUCE) &&
                in->comm.group == ISA_GROUP_DP && in->comm.tier[0] == in->comm.tier[1] &&
                in->comm.off[0] == in->comm.off[1];
  if (in->overlap && !dp_sum && in->kind != ISA_ZERO_GATHER)
    return fail(v, "overlap only on an in-place all_reduce or reduce over the dp group, or a zero_gather");
  switch (in->kind) {
  case ISA_KERNEL:
    if (in->kernel < 0 || in->kernel >= p->nkernels) return fail(v, "kernel %d of %d", in->kernel, p->nkernels);
    if (in->on_host && (!p->offload || v->in_step || !strcmp(v->list, "forward")))
      return fail(v, "\"on\": \"host\" only in gradnorm and update of an offload program");
    break;
  case ISA_GEMM:
    if (in->gemm.bias && in->gemm.beta != 0)
      return fail(v, "gemm: a bias epilogue with beta %g (only beta 0)", in->gemm.beta);
    if (in->gemm.gelu && (!in->gemm.bias || in->gemm.batch[0] * in->gemm.batch[1] != 1 || in->gemm.ldc % 8))
      return fail(v, "gemm: a GELU epilogue needs a bias, one batch and ldc a multiple of 8");
    if (in->gemm.aux && !in->gemm.gelu) return fail(v, "gemm: an aux output without the GELU epilogue");
    break;
  case ISA_ZERO: break;
  case ISA_JOIN: return 0;
  case ISA_COMM: return check_comm(v, &in->comm);
  case ISA_SLOT:
    if (!v->in_step || in->index < 0 || in->index >= (p->slots > 0 ? p->slots : 1))
      return fail(v, "slot %d (of %lld) outside `step`'s slots", in->index, (long long)p->slots);
    return 0;
  case ISA_INPUT:
  case ISA_LOSS:
    if (!v->in_step || !p->scheduled)
      return fail(v, "%s only in `step` of a scheduled program", isa_op_names[in->kind]);
    if (in->kind == ISA_LOSS) return range_in(v, RT_TIER_WORK, in->offset, in->offset + 4, "loss");
    if (in->index < 0 || in->index >= p->microbatches)
      return fail(v, "input of micro-batch %d of %lld", in->index, (long long)p->microbatches);
    if (in->input < 0 || in->input >= p->ninputs) return fail(v, "input %d of %d", in->input, p->ninputs);
    return range_in(v, RT_TIER_WORK, in->offset, in->offset + shape_numel(&p->inputs[in->input].node->shape) * 4,
                    "input");
  case ISA_SEND:
  case ISA_RECV:
    if (!v->in_step) return fail(v, "%s only in `step`", isa_op_names[in->kind]);
    if (in->index < 0 || in->index >= v->nstages || in->index == v->stage)
      return fail(v, "%s to stage %d (of %d, this is %d)", isa_op_names[in->kind], in->index, v->nstages, v->stage);
    if (in->tag < 0 || in->tag >= ISA_TAG_LIMIT) return fail(v, "tag %d outside [0, %d)", in->tag, ISA_TAG_LIMIT);
    return range_in(v, in->tier, in->offset, in->offset + in->bytes, isa_op_names[in->kind]);
  case ISA_ZERO_GATHER:
  case ISA_ZERO_RELEASE:
  case ISA_ZERO_GRAD:
  case ISA_ZERO_REDUCE:
    if (!v->in_step || !p->zero_scheduled)
      return fail(v, "%s only in `step` of a zero_scheduled program", isa_op_names[in->kind]);
    if ((in->kind == ISA_ZERO_GATHER || in->kind == ISA_ZERO_RELEASE) && p->zero_stage != 3)
      return fail(v, "%s at ZeRO stage %lld (only 3 gathers)", isa_op_names[in->kind], (long long)p->zero_stage);
    if (in->chunk < 0 || in->chunk >= p->nparams)
      return fail(v, "%s of parameter %d of %d", isa_op_names[in->kind], in->chunk, p->nparams);
    return 0;
  case ISA_MOVE:
  case ISA_DROP:
  case ISA_WAIT:
    if (!p->offload || !strcmp(v->list, "forward"))
      return fail(v, "%s only in step, gradnorm and update of an offload program", isa_op_names[in->kind]);
    if (in->chunk < 0 || in->chunk >= p->offload->nchunks || in->part < 0 || in->part >= PART_COUNT)
      return fail(v, "%s of chunk %d part %d (%d chunks)", isa_op_names[in->kind], in->chunk, in->part,
                  p->offload->nchunks);
    return 0;
  }
  int n = instr_touch(p, in, t);
  for (int i = 0; i < n; i++)
    if (range_in(v, t[i].tier, t[i].lo, t[i].hi, isa_op_names[in->kind])) return -1;
  return 0;
}

/* An overlapped collective runs beside what follows it until the next join (or the
 * list's end): nothing there may touch the bytes it writes (a gather: its parameter). */
static int check_overlap(V *v, const PSeq *s) {
  const Program *p = v->p;
  Touch t[K_MAX_BUFS], c[K_MAX_BUFS];
  for (int i = 0; i < s->n; i++) {
    const PInstr *in = &s->v[i];
    if (!in->overlap) continue;
    if (in->kind == ISA_ZERO_GATHER) {
      const PParam *q = &p->params[in->chunk];
      c[1] = (Touch){RT_TIER_PARAMS, q->offset, q->offset + shape_numel(&q->node->shape) * 4, true};
    } else {
      instr_touch(p, in, c);
    }
    for (v->at = i + 1; v->at < s->n && s->v[v->at].kind != ISA_JOIN; v->at++) {
      int n = instr_touch(p, &s->v[v->at], t);
      for (int k = 0; k < n; k++)
        if (t[k].tier == c[1].tier && t[k].lo < c[1].hi && c[1].lo < t[k].hi)
          return fail(v, "touches the bytes of the overlapped %s at %d before a join", isa_op_names[in->kind], i);
    }
  }
  v->at = -1;
  return 0;
}

/* A GELU epilogue kernel is the next kernel or GEMM after its "gelu" GEMM, over the
 * GELU's input and output, nothing between touching that output (it holds the GELU on
 * one device and its input on another), and every "gelu" GEMM has one. */
static int check_epilogues(V *v, const PSeq *s) {
  const PGemm *g = NULL;
  for (v->at = 0; v->at < s->n; v->at++) {
    const PInstr *in = &s->v[v->at];
    if (in->kind != ISA_KERNEL && in->kind != ISA_GEMM) {
      Touch t[K_MAX_BUFS];
      int n = g ? instr_touch(v->p, in, t) : 0;
      int64_t hi = g ? g->off[2] + ((g->m - 1) * g->ldc + g->n) * 4 : 0;
      for (int i = 0; i < n; i++)
        if (t[i].tier == g->tier[2] && t[i].lo < hi && g->off[2] < t[i].hi)
          return fail(v, "touches a \"gelu\" GEMM's output before its epilogue kernel");
      continue;
    }
    if (in->kind == ISA_KERNEL && in->epilogue) {
      const Kernel *k = v->p->kernels[in->kernel];
      const KBuf *src = &k->bufs[0], *dst = &k->bufs[k->nbufs - 1];
      if (!g || src->tier != (g->aux ? g->aux_tier : g->tier[2]) || src->offset != (g->aux ? g->aux_off : g->off[2]) ||
          dst->tier != g->tier[2] || dst->offset != g->off[2])
        return fail(v, "an epilogue kernel not right after its \"gelu\" GEMM, or not over its output");
      g = NULL;
      continue;
    }
    if (g) return fail(v, "a \"gelu\" GEMM without its epilogue kernel after it");
    g = in->kind == ISA_GEMM && in->gemm.gelu ? &in->gemm : NULL;
  }
  if (g) return fail(v, "a \"gelu\" GEMM without its epilogue kernel after it");
  v->at = -1;
  return 0;
}

/* ---- offload: where every part is, instruction by instruction ------------------------- */

typedef struct Where {
  unsigned char *at; /* [chunk * PART_COUNT + part] bit per Loc holding it */
  bool *busy;        /* a move or drop of it not yet waited for */
} Where;

static int touch_parts(V *v, const Where *w, int tier, int64_t lo, int64_t hi, bool on_host) {
  const Program *p = v->p;
  const OffloadPlan *op = p->offload;
  int part = tier == RT_TIER_PARAMS  ? PART_PARAMS
             : tier == RT_TIER_GRADS ? PART_GRADS
             : tier == RT_TIER_OPT   ? PART_OPT
                                     : -1;
  if (part < 0) return 0;
  if (part == PART_OPT && p->opt_v_offset && lo >= p->opt_v_offset) lo -= p->opt_v_offset, hi -= p->opt_v_offset;
  Loc need = on_host ? LOC_HOST : LOC_DEVICE;
  for (int c = 0; c < op->nchunks; c++) {
    const OChunk *ch = &op->chunk[c];
    int it = c * PART_COUNT + part;
    if (!(ch->start < hi && lo < ch->end)) continue;
    if (!(w->at[it] & 1u << need))
      return fail(v, "touches chunk %d's %s, which is not on the %s", c, part_names[part], loc_names[need]);
    if (w->busy[it])
      return fail(v, "touches chunk %d's %s while a move or drop of it is in flight (no wait)", c, part_names[part]);
  }
  return 0;
}

/* The list as dp rank r runs it (-1: every rank alike). */
static int walk_offload(V *v, Where *w, const PSeq *s, int r) {
  const Program *p = v->p;
  Touch t[K_MAX_BUFS];
  for (v->at = 0; v->at < s->n; v->at++) {
    const PInstr *in = &s->v[v->at];
    int it = in->chunk * PART_COUNT + in->part;
    if (in->dp_rank >= 0 && r >= 0 && in->dp_rank != r) continue;
    if (in->kind == ISA_MOVE) {
      if (in->from != LOC_ZERO && !(w->at[it] & 1u << in->from))
        return fail(v, "move of chunk %d's %s from %s, where it is not", in->chunk, part_names[in->part],
                    loc_names[in->from]);
      if (w->at[it] & 1u << in->to)
        return fail(v, "move of chunk %d's %s to %s, where it already is", in->chunk, part_names[in->part],
                    loc_names[in->to]);
      if (in->from == LOC_ZERO && in->keep) return fail(v, "a move from zero keeps nothing");
      w->at[it] |= 1u << in->to;
      if (!in->keep && in->from != LOC_ZERO) w->at[it] &= ~(1u << in->from);
      w->busy[it] = true;
    } else if (in->kind == ISA_DROP) {
      if (!(w->at[it] & 1u << in->from))
        return fail(v, "drop of chunk %d's %s at %s, where it is not", in->chunk, part_names[in->part],
                    loc_names[in->from]);
      w->at[it] &= ~(1u << in->from);
      w->busy[it] = true;
    } else if (in->kind == ISA_WAIT) {
      w->busy[it] = false;
    } else {
      int n = instr_touch(p, in, t);
      for (int i = 0; i < n; i++)
        if (touch_parts(v, w, t[i].tier, t[i].lo, t[i].hi, in->on_host)) return -1;
    }
  }
  return 0;
}

/* A chunk's part's home on dp rank r: its owner's (every rank's when it has none). */
static unsigned home_bits(const OffloadPlan *op, int it, int r) {
  const OChunk *c = &op->chunk[it / PART_COUNT];
  Loc home = c->home[it % PART_COUNT];
  return home == LOC_NONE || (r >= 0 && c->owner >= 0 && c->owner != r) ? 0 : 1u << home;
}

/* Each dp rank's walk (one for all without owners): every move from where the part is
 * on that rank, every touch of a part on the device there and waited for, every part
 * at that rank's home after update. */
static int check_offload(V *v) {
  const Program *p = v->p;
  const OffloadPlan *op = p->offload;
  int n = op->nchunks * PART_COUNT, rc = 0;
  bool owners = false;
  for (int c = 0; c < op->nchunks; c++) owners |= op->chunk[c].owner >= 0;
  if (owners && (p->zero_stage != 3 || p->dp < 1)) return fail(v, "offload chunks with owners outside ZeRO stage 3");
  for (int c = 0; c < op->nchunks && owners; c++)
    for (int k = op->chunk[c].lo; k < op->chunk[c].hi; k++)
      if (op->chunk[c].owner < 0 || p->params[k].owner != op->chunk[c].owner)
        return fail(v, "chunk %d (owner %d) holds parameter %s of owner %d", c, op->chunk[c].owner,
                    p->params[k].node->name, p->params[k].owner);
  Where w = {calloc(n + 1, 1), calloc(n + 1, sizeof(bool))};
  if (!w.at || !w.busy) rc = fail(v, "out of memory");
  for (int r = owners ? 0 : -1; !rc && r < (owners ? p->dp : 0); r++) {
    for (int it = 0; it < n; it++) w.at[it] = (unsigned char)home_bits(op, it, r), w.busy[it] = false;
    const PSeq *lists[4] = {&p->step, &p->sync, &p->gradnorm, &p->update};
    const char *names[4] = {"step", "sync", "gradnorm", "update"};
    for (int l = 0; l < 4 && !rc; l++) v->list = names[l], v->in_step = l == 0, rc = walk_offload(v, &w, lists[l], r);
    v->at = -1;
    for (int it = 0; !rc && it < n; it++)
      if (w.at[it] != home_bits(op, it, r))
        rc = fail(v, "after update, chunk %d's %s is not at its home (%s) only on dp rank %d", it / PART_COUNT,
                  part_names[it % PART_COUNT], loc_names[op->chunk[it / PART_COUNT].home[it % PART_COUNT]], r);
  }
  free(w.at), free(w.busy);
  return rc;
}

/* ---- the whole ---------------------------------------------------------------------------- */

static int verify_one(V *v) {
  const Program *p = v->p;
  const PSeq *lists[5] = {&p->step, &p->sync, &p->gradnorm, &p->update, &p->forward};
  const char *names[5] = {"step", "sync", "gradnorm", "update", "forward"};
  for (int l = 0; l < 5; l++) {
    v->list = names[l], v->in_step = l == 0;
    for (v->at = 0; v->at < lists[l]->n; v->at++)
      if (check_instr(v, &lists[l]->v[v->at])) return -1;
    if (check_overlap(v, lists[l]) || check_epilogues(v, lists[l])) return -1;
  }
  v->at = -1;
  if (p->zero_stage > 0 && p->dp < 1) return fail(v, "ZeRO stage %lld without a fixed dp", (long long)p->zero_stage);
  for (int i = 0; p->zero_stage > 0 && i < p->nparams; i++)
    if (p->params[i].owner < 0 || p->params[i].owner >= p->dp)
      return fail(v, "parameter %s's owner %d is not a rank of the %lld of its dp group", p->params[i].node->name,
                  p->params[i].owner, (long long)p->dp);
  return p->offload ? check_offload(v) : 0;
}

int program_verify(Program *const *ps, int nps, char *err, size_t errlen) {
  for (int s = 0; s < nps; s++) {
    V v = {ps[s], "", false, s, nps, err, errlen, -1};
    if (verify_one(&v)) return -1;
  }
  if (nps > 1 && pipe_check_order(ps, nps, err, errlen)) return -1;
  return 0;
}
