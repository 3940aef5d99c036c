/* The program verifier (codegen/verify.h). */
#include "codegen/verify.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/compose.h"
#include "codegen/offload.h"
#include "codegen/pipeline.h"
#include "program/program.h"

/* Where an instruction is: the kind of list (a component of the step before compose_lists
 * assembles the lists, or one of the lists the program carries). */
typedef enum {
  AT_STEP,
  AT_SYNC,
  AT_GRADNORM,
  AT_UPDATE,
  AT_FORWARD,
  AT_PROC,
  AT_TRAIN,
  AT_EVAL,
  AT_GATHER,
  AT_SCHEDULE
} At;

typedef struct V {
  const Program *p;
  const char *list; /* "step", ... */
  At kind;
  int index; /* the list's index in the program's lists (nlists: a pass's sequence) */
  int stage, nstages;
  char *err;
  size_t errlen;
  int at;        /* the instruction's index, -1 for the program as a whole */
  int64_t iters; /* iterations of the innermost loop around it (1: none) */
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

/* The bytes a tier holds (WORK: one slot, which every WORK offset is relative to;
 * TIER_SHARED: the region the slots share, or where there is none, WORK's start, slot 0). */
static int64_t tier_bytes(const Program *p, int tier) {
  return tier == TIER_SHARED ? (p->work_shared ? p->work_shared : p->tiers[TIER_WORK]) : p->tiers[tier];
}

static int range_in(V *v, int tier, int64_t lo, int64_t hi, const char *what) {
  if (tier < 0 || tier > TIER_SHARED) return fail(v, "%s: tier %d out of range", what, tier);
  if (lo < 0 || hi < lo || hi > tier_bytes(v->p, tier))
    return fail(v, "%s: bytes [%lld, %lld) outside the %lld of tier %d", what, (long long)lo, (long long)hi,
                (long long)tier_bytes(v->p, tier), tier);
  return 0;
}

/* The "comm" geometry (program/isa.h): src and dst bytes by kind, the group. */
static int check_comm(V *v, const IsaComm *c) {
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
  isa_comm_bytes(c, p->tp, b);
  if (range_in(v, c->tier[0], c->off[0], c->off[0] + b[0], "comm src") ||
      range_in(v, c->tier[1], c->off[1], c->off[1] + b[1], "comm dst"))
    return -1;
  bool overlap = c->tier[0] == c->tier[1] && c->off[0] < c->off[1] + b[1] && c->off[1] < c->off[0] + b[0];
  bool same = c->tier[0] == c->tier[1] && c->off[0] == c->off[1];
  if (overlap && (split || c->kind == ISA_COMM_ALL_REDUCE ? c->kind != ISA_COMM_ALL_REDUCE || !same : !same))
    return fail(v, "comm: src and dst overlap (a collective is in place or apart)");
  return 0;
}

/* A list that runs micro-batches: the step (its component, or the lists train and eval
 * made of it, or a pipeline chunk's lists). */
static bool in_step(const V *v) {
  return v->kind == AT_STEP || v->kind == AT_TRAIN || v->kind == AT_EVAL || v->kind == AT_SCHEDULE;
}

/* The fields every instruction has: rank conditions, last, overlap. */
static int check_common(V *v, const IsaInstr *in) {
  const Program *p = v->p;
  bool local = in->op == ISA_KERNEL || in->op == ISA_GEMM || in->op == ISA_ZERO || in->op == ISA_MOVE ||
               in->op == ISA_DROP || in->op == ISA_WAIT || in->op == ISA_LOSS;
  if ((in->dp_rank >= 0 || in->tp_rank >= 0) && !local)
    return fail(v,
                "%s with a rank condition (only kernels, GEMMs, zeroing, losses and offload's moves are run by "
                "some ranks)",
                isa_op_names[in->op]);
  if ((p->dp > 0 && in->dp_rank >= p->dp) || in->tp_rank >= (p->tp > 1 ? p->tp : 1))
    return fail(v, "condition on dp rank %d or tp rank %d outside the mesh", in->dp_rank, in->tp_rank);
  bool body = v->kind == AT_STEP || (v->kind == AT_PROC && !strcmp(v->list, "step"));
  if (in->last && (!body || p->scheduled))
    return fail(v, "last (the last micro-batch) only in the step of an unscheduled program");
  bool dp_sum = in->op == ISA_COMM && (in->comm.kind == ISA_COMM_ALL_REDUCE || in->comm.kind == ISA_COMM_REDUCE) &&
                in->comm.group == ISA_GROUP_DP && in->comm.tier[0] == in->comm.tier[1] &&
                in->comm.off[0] == in->comm.off[1];
  if (in->overlap && !dp_sum && in->op != ISA_ZERO_GATHER)
    return fail(v, "overlap only on an in-place all_reduce or reduce over the dp group, or a zero_gather");
  return 0;
}

static int check_kernel(V *v, const IsaInstr *in) {
  const Program *p = v->p;
  if (in->kernel.id < 0 || in->kernel.id >= p->nkernels) return fail(v, "kernel %d of %d", in->kernel.id, p->nkernels);
  if (in->kernel.on_host && (!p->offload || v->kind == AT_STEP || v->kind == AT_FORWARD))
    return fail(v, "on_host only in gradnorm and update of an offload program");
  return 0;
}

static int check_gemm(V *v, const IsaGemm *g) {
  if (g->bias && g->beta != 0) return fail(v, "gemm: a bias epilogue with beta %g (only beta 0)", g->beta);
  if (g->gelu && (!g->bias || g->batch[0] * g->batch[1] != 1 || g->ldc % 8))
    return fail(v, "gemm: a GELU epilogue needs a bias, one batch and ldc a multiple of 8");
  if (g->aux && !g->gelu) return fail(v, "gemm: an aux output without the GELU epilogue");
  bool one_type = g->dt[0] == g->dt[2] && g->dt[1] == g->dt[2] &&
                  (g->dt[2] == ISA_F32 || g->dt[2] == ISA_BF16 || g->dt[2] == ISA_F16);
  if (g->dgelu && (g->bias || g->gelu || g->beta != 0 || g->batch[0] * g->batch[1] != 1 || g->ldc % 8 || !one_type))
    return fail(v, "gemm: a DGELU epilogue needs beta 0, no bias or GELU, one batch, ldc a multiple of 8 and one "
                   "32- or 16-bit type");
  if (g->bgrad == ISA_BGRAD_C && !g->dgelu) return fail(v, "gemm: a bias gradient epilogue of C without DGELU");
  bool b_type = g->dt[1] == ISA_F32 || g->dt[1] == ISA_BF16 || g->dt[1] == ISA_F16;
  if (g->bgrad == ISA_BGRAD_B && (g->dgelu || g->bias || g->gelu || g->batch[0] * g->batch[1] != 1 || !b_type))
    return fail(v, "gemm: a bias gradient epilogue of B needs no other epilogue, one batch and a 32- or 16-bit B");
  if (g->bgrad > ISA_BGRAD_B) return fail(v, "gemm: bias gradient epilogue %d", g->bgrad);
  return 0;
}

/* input: an input of the program, a micro-batch of the step in every iteration. */
static int check_input(V *v, const IsaInput *in) {
  const Program *p = v->p;
  int64_t last = in->mb + in->step * (v->iters - 1);
  if (in->mb < 0 || in->step < 0 || last >= p->microbatches)
    return fail(v, "input of micro-batches %lld .. %lld of %lld", (long long)in->mb, (long long)last,
                (long long)p->microbatches);
  if (in->input < 0 || in->input >= p->ninputs) return fail(v, "input %d of %d", in->input, p->ninputs);
  return range_in(v, TIER_WORK, in->offset, in->offset + shape_numel(&p->inputs[in->input].node->shape) * 4, "input");
}

static int check_p2p(V *v, IsaOp op, const IsaP2P *x) {
  if (x->peer < 0 || x->peer >= v->nstages || x->peer == v->stage)
    return fail(v, "%s to stage %d (of %d, this is %d)", isa_op_names[op], x->peer, v->nstages, v->stage);
  if (x->tag < 0 || x->tag >= ISA_TAG_LIMIT) return fail(v, "tag %d outside [0, %d)", x->tag, ISA_TAG_LIMIT);
  return range_in(v, x->tier, x->offset, x->offset + x->count * 4, isa_op_names[op]);
}

static int check_zero_param(V *v, IsaOp op, const IsaParam *x) {
  const Program *p = v->p;
  if (!p->zero_scheduled || !(in_step(v) || v->kind == AT_PROC || v->kind == AT_GATHER))
    return fail(v, "%s only in the step of a zero_scheduled program (or its gather and release)", isa_op_names[op]);
  if ((op == ISA_ZERO_GATHER || op == ISA_ZERO_RELEASE) && p->zero_stage != 3)
    return fail(v, "%s at ZeRO stage %lld (only 3 gathers)", isa_op_names[op], (long long)p->zero_stage);
  if (x->index < 0 || x->index >= p->nparams)
    return fail(v, "%s of parameter %d of %d", isa_op_names[op], x->index, p->nparams);
  return 0;
}

static int check_move(V *v, IsaOp op, const IsaMove *m) {
  const Program *p = v->p;
  if (!p->offload || v->kind == AT_FORWARD)
    return fail(v, "%s only in step, gradnorm and update of an offload program", isa_op_names[op]);
  if (m->chunk < 0 || m->chunk >= p->offload->nchunks || m->part < 0 || m->part >= PART_COUNT)
    return fail(v, "%s of chunk %d part %d (%d chunks)", isa_op_names[op], m->chunk, m->part, p->offload->nchunks);
  return 0;
}

/* A loop within its list (and the loop around it), a call of a list to call that comes
 * before this one (so no list calls itself, however indirectly). */
static int check_flow(V *v, const IsaInstr *in, int n, int end) {
  const Program *p = v->p;
  if (in->op == ISA_LOOP && (in->loop.count < 1 || in->loop.body < 1 || v->at + in->loop.body >= end))
    return fail(v, "loop of %lld iterations over %lld instructions, past its list's or loop's end (%d of %d)",
                (long long)in->loop.count, (long long)in->loop.body, end, n);
  if (in->op != ISA_CALL) return 0;
  int l = in->call.list;
  if (l < 0 || l >= v->index || !p->lists[l].proc)
    return fail(v, "call of list %d from list %d: only a list to call, before this one", l, v->index);
  return 0;
}

/* One instruction on its own: its bytes and where it may be. */
static int check_instr(V *v, const IsaInstr *in) {
  const Program *p = v->p;
  Touch t[K_MAX_BUFS];
  bool moves = in->op == ISA_MOVE || in->op == ISA_DROP || in->op == ISA_WAIT;
  if (check_common(v, in)) return -1;
  if (v->kind == AT_SYNC && in->op != ISA_COMM && !(moves && p->offload))
    return fail(v, "sync holds collectives only (and an offload program's moves)");
  bool schedule = in_step(v) && v->kind != AT_STEP ? true : v->kind == AT_STEP && p->scheduled;
  switch ((IsaOp)in->op) {
  case ISA_KERNEL:
    if (check_kernel(v, in)) return -1;
    break;
  case ISA_GEMM:
    if (check_gemm(v, &in->gemm)) return -1;
    break;
  case ISA_ZERO: break;
  case ISA_JOIN: return 0;
  case ISA_COMM: return check_comm(v, &in->comm);
  case ISA_SLOT:
    if (!in_step(v) || in->slot.mb < 0 || in->slot.step < 0)
      return fail(v, "slot of micro-batch %lld (+ %lld an iteration) outside a step", (long long)in->slot.mb,
                  (long long)in->slot.step);
    return 0;
  case ISA_INPUT:
    if (!schedule && v->kind != AT_FORWARD) return fail(v, "input only in a step's schedule or forward");
    return check_input(v, &in->input);
  case ISA_LOSS:
    if (!schedule) return fail(v, "loss only in a step's schedule");
    return range_in(v, TIER_WORK, in->loss.offset, in->loss.offset + 4, "loss");
  case ISA_SEND:
  case ISA_RECV:
    if (!in_step(v)) return fail(v, "%s only in a step", isa_op_names[in->op]);
    return check_p2p(v, (IsaOp)in->op, &in->p2p);
  case ISA_ZERO_GATHER:
  case ISA_ZERO_RELEASE:
  case ISA_ZERO_GRAD:
  case ISA_ZERO_REDUCE: return check_zero_param(v, (IsaOp)in->op, &in->param);
  case ISA_MOVE:
  case ISA_DROP:
  case ISA_WAIT: return check_move(v, (IsaOp)in->op, &in->move);
  case ISA_LOOP:
  case ISA_CALL: return 0; /* check_list */
  case ISA_NORM:
    if (v->kind != AT_TRAIN || in->norm.microbatches != p->microbatches)
      return fail(v, "norm only in train, over the step's %lld micro-batches", (long long)p->microbatches);
    return range_in(v, TIER_WORK, in->norm.offset, in->norm.offset + in->norm.count * 4, "norm");
  case ISA_TRUST:
    if ((v->kind != AT_TRAIN && v->kind != AT_UPDATE) || in->trust.offset != p->trust_offset ||
        in->trust.count != p->trust_parts || !p->trust_parts)
      return fail(v, "trust only in update and train, over LAMB's %lld slots at WORK %lld", (long long)p->trust_parts,
                  (long long)p->trust_offset);
    return range_in(v, TIER_WORK, in->trust.offset, in->trust.offset + in->trust.count * 8, "trust");
  }
  int n = instr_touch(p, in, t);
  for (int i = 0; i < n; i++)
    if (range_in(v, t[i].tier, t[i].lo, t[i].hi, isa_op_names[in->op])) return -1;
  return 0;
}

/* Every instruction of list s, each with the iterations of the innermost loop around it. */
static int check_list(V *v, const PSeq *s) {
  int end[16], depth = 0;
  int64_t iters[16];
  end[0] = s->n, iters[0] = 1;
  for (v->at = 0; v->at < s->n; v->at++) {
    const IsaInstr *in = &s->v[v->at];
    while (depth > 0 && v->at >= end[depth]) depth--;
    v->iters = iters[depth];
    if (check_instr(v, in) || check_flow(v, in, s->n, end[depth])) return -1;
    if (in->op != ISA_LOOP) continue;
    if (depth == 15) return fail(v, "loops nested more than 15 deep");
    depth++, end[depth] = v->at + 1 + (int)in->loop.body, iters[depth] = in->loop.count;
  }
  v->at = -1;
  return 0;
}

/* An overlapped collective runs beside what follows it until the next join (or the
 * list's end): nothing there may touch the bytes it writes (a gather: its parameter). */
static int check_overlap(V *v, const PSeq *s) {
  const Program *p = v->p;
  Touch t[K_MAX_BUFS], c[K_MAX_BUFS];
  for (int i = 0; i < s->n; i++) {
    const IsaInstr *in = &s->v[i];
    if (!in->overlap) continue;
    if (in->op == ISA_ZERO_GATHER) {
      const PParam *q = &p->params[in->param.index];
      c[1] = (Touch){TIER_PARAMS, q->offset, q->offset + pparam_bytes(q), true};
    } else {
      instr_touch(p, in, c);
    }
    for (v->at = i + 1; v->at < s->n && s->v[v->at].op != ISA_JOIN; v->at++) {
      int n = instr_touch(p, &s->v[v->at], t);
      for (int k = 0; k < n; k++)
        if (t[k].tier == c[1].tier && t[k].lo < c[1].hi && c[1].lo < t[k].hi)
          return fail(v, "touches the bytes of the overlapped %s at %d before a join", isa_op_names[in->op], i);
    }
  }
  v->at = -1;
  return 0;
}

/* The tier of a kernel's buffer as instructions name it (WORK's shared region: TIER_SHARED). */
static int kb_tier(const KBuf *b) { return b->shared ? TIER_SHARED : b->tier; }

/* Kernel k has a buffer at tier, offset, or one holding its bytes [offset, offset +
 * bytes) (bytes > 0: a matrix at an offset into a buffer). */
static bool has_buf(const Kernel *k, int tier, int64_t offset, int64_t bytes) {
  for (int i = 0; i < k->nbufs; i++) {
    const KBuf *b = &k->bufs[i];
    if (kb_tier(b) == tier && (b->offset == offset || (bytes > 0 && b->offset <= offset &&
                                                       offset + bytes <= b->offset + b->numel * kbuf_elem_bytes(b))))
      return true;
  }
  return false;
}

/* Epilogue kernel number i of GEMM g is what its epilogue computes: of a "gelu" GEMM,
 * one over GELU's input (aux or C) into C; of a "dgelu" one, C from X (aux) and C, then
 * with bgrad one from C into the bias gradient's vector (it stores only there); of one
 * with the bias gradient of B, one from B into that vector. */
static bool epilogue_of(const IsaGemm *g, int i, const Kernel *k) {
  const KBuf *src = &k->bufs[0], *dst = &k->bufs[k->nbufs - 1];
  if (g->gelu)
    return i == 0 && kb_tier(src) == (g->aux ? g->aux_tier : g->tier[2]) &&
           src->offset == (g->aux ? g->aux_off : g->off[2]) && kb_tier(dst) == g->tier[2] && dst->offset == g->off[2];
  bool of_b = g->bgrad == ISA_BGRAD_B;
  int tier = i == 0 && !of_b ? g->tier[2] : g->bias_tier;
  int64_t off = i == 0 && !of_b ? g->off[2] : g->bias_off;
  for (int p = 0; p < k->nphases; p++) {
    const KBuf *b = k->phases[p].kind == KPH_MAP || k->phases[p].kind == KPH_ROW ? &k->bufs[k->phases[p].buf] : NULL;
    if (b && (kb_tier(b) != tier || b->offset != off)) return false;
  }
  int64_t c_bytes = ((g->m - 1) * g->ldc + g->n) * isa_dtype_bytes(g->dt[2]);
  int64_t b_bytes = ((g->tb ? g->n : g->k) - 1) * g->ldb + (g->tb ? g->k : g->n);
  if (of_b) return i == 0 && has_buf(k, g->tier[1], g->off[1], b_bytes * isa_dtype_bytes(g->dt[1]));
  if (i == 0) return has_buf(k, g->aux_tier, g->aux_off, c_bytes) && has_buf(k, g->tier[2], g->off[2], 0);
  return i == 1 && g->bgrad && has_buf(k, g->tier[2], g->off[2], 0) && has_buf(k, g->bias_tier, g->bias_off, 0);
}

static int epilogue_kernels(const IsaGemm *g) {
  return g->gelu ? 1 : g->dgelu ? 1 + (g->bgrad == ISA_BGRAD_C) : g->bgrad == ISA_BGRAD_B;
}

/* Instruction touch t meets what lies between GEMM g and its epilogue kernels: C (a
 * GELU's or DGELU's: on one device the result, on another its input), or with the bias
 * gradient of B, B (the kernel reads it: no writes) and the vector. */
static bool meets_epilogue(const IsaGemm *g, const Touch *t) {
  int w = g->bgrad == ISA_BGRAD_B ? 1 : 2;
  int64_t rows = w == 2 ? g->m : g->tb ? g->n : g->k, cols = w == 2 ? g->n : g->tb ? g->k : g->n;
  int64_t ld = w == 2 ? g->ldc : g->ldb, hi = g->off[w] + ((rows - 1) * ld + cols) * isa_dtype_bytes(g->dt[w]);
  if (t->tier == g->tier[w] && t->lo < hi && g->off[w] < t->hi && (w == 2 || t->write)) return true;
  return g->bgrad && t->tier == g->bias_tier && t->lo < g->bias_off + g->n * 4 && g->bias_off < t->hi;
}

/* The epilogue kernels of a GEMM with a GELU, DGELU or BGRAD epilogue are the next
 * kernels or GEMMs after it, in order (epilogue_of), nothing between touching what they
 * work on (meets_epilogue), and every such GEMM has them. */
static int check_epilogues(V *v, const PSeq *s) {
  const IsaGemm *g = NULL;
  int done = 0; /* of g's epilogue kernels */
  for (v->at = 0; v->at < s->n; v->at++) {
    const IsaInstr *in = &s->v[v->at];
    if (in->op != ISA_KERNEL && in->op != ISA_GEMM) {
      Touch t[K_MAX_BUFS];
      int n = g ? instr_touch(v->p, in, t) : 0;
      for (int i = 0; i < n; i++)
        if (meets_epilogue(g, &t[i])) return fail(v, "touches a GEMM's operands before its epilogue kernels");
      continue;
    }
    if (in->op == ISA_KERNEL && in->kernel.epilogue) {
      if (!g || !epilogue_of(g, done, v->p->kernels[in->kernel.id]))
        return fail(v, "an epilogue kernel not right after its GEMM, or not over its output");
      if (++done == epilogue_kernels(g)) g = NULL;
      continue;
    }
    if (g) return fail(v, "a GEMM without its epilogue kernels after it");
    g = in->op == ISA_GEMM && epilogue_kernels(&in->gemm) ? &in->gemm : NULL;
    done = 0;
  }
  if (g) return fail(v, "a GEMM without its epilogue kernels after it");
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
  int part = tier == TIER_PARAMS ? PART_PARAMS : tier == TIER_GRADS ? PART_GRADS : tier == TIER_OPT ? PART_OPT : -1;
  if (part < 0) return 0;
  if (part == PART_OPT && p->opt_v_offset && lo >= p->opt_v_offset) lo -= p->opt_v_offset, hi -= p->opt_v_offset;
  Loc need = on_host ? LOC_HOST : LOC_DEVICE;
  for (int c = 0; c < op->nchunks; c++) {
    const OChunk *ch = &op->chunk[c];
    int it = c * PART_COUNT + part;
    if (!(ch->start < hi && lo < ch->end)) continue;
    if (!(w->at[it] & 1u << need))
      return fail(v, "touches chunk %d's %s, which is not on the %s", c, isa_part_names[part], isa_loc_names[need]);
    if (w->busy[it])
      return fail(v, "touches chunk %d's %s while a move or drop of it is in flight (no wait)", c,
                  isa_part_names[part]);
  }
  return 0;
}

/* The list as dp rank r runs it (-1: every rank alike). */
static int walk_offload(V *v, Where *w, const PSeq *s, int r) {
  const Program *p = v->p;
  Touch t[K_MAX_BUFS];
  for (v->at = 0; v->at < s->n; v->at++) {
    const IsaInstr *in = &s->v[v->at];
    const IsaMove *m = &in->move;
    int it = m->chunk * PART_COUNT + m->part;
    if (in->dp_rank >= 0 && r >= 0 && in->dp_rank != r) continue;
    if (in->op == ISA_MOVE) {
      if (m->from != LOC_ZERO && !(w->at[it] & 1u << m->from))
        return fail(v, "move of chunk %d's %s from %s, where it is not", m->chunk, isa_part_names[m->part],
                    isa_loc_names[m->from]);
      if (w->at[it] & 1u << m->to)
        return fail(v, "move of chunk %d's %s to %s, where it already is", m->chunk, isa_part_names[m->part],
                    isa_loc_names[m->to]);
      if (m->from == LOC_ZERO && m->keep) return fail(v, "a move from zero keeps nothing");
      w->at[it] |= 1u << m->to;
      if (!m->keep && m->from != LOC_ZERO) w->at[it] &= ~(1u << m->from);
      w->busy[it] = true;
    } else if (in->op == ISA_DROP) {
      if (!(w->at[it] & 1u << m->from))
        return fail(v, "drop of chunk %d's %s at %s, where it is not", m->chunk, isa_part_names[m->part],
                    isa_loc_names[m->from]);
      w->at[it] &= ~(1u << m->from);
      w->busy[it] = true;
    } else if (in->op == ISA_WAIT) {
      w->busy[it] = false;
    } else {
      int n = instr_touch(p, in, t);
      bool on_host = in->op == ISA_KERNEL && in->kernel.on_host;
      for (int i = 0; i < n; i++)
        if (touch_parts(v, w, t[i].tier, t[i].lo, t[i].hi, on_host)) return -1;
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
  int64_t g = op->granule, staging = (program_staging(p) + g - 1) / g * g;
  if ((program_work_bytes(p) + g - 1) / g * g + staging > op->work_bytes)
    return fail(v, "the work tier and the staging buffer (%lld bytes) exceed the %lld the offload plan keeps for them",
                (long long)staging, (long long)op->work_bytes);
  Where w = {calloc(n + 1, 1), calloc(n + 1, sizeof(bool))};
  if (!w.at || !w.busy) rc = fail(v, "out of memory");
  for (int r = owners ? 0 : -1; !rc && r < (owners ? p->dp : 0); r++) {
    for (int it = 0; it < n; it++) w.at[it] = (unsigned char)home_bits(op, it, r), w.busy[it] = false;
    const PSeq *lists[4] = {&p->step, &p->sync, &p->gradnorm, &p->update};
    const char *names[4] = {"step", "sync", "gradnorm", "update"};
    for (int l = 0; l < 4 && !rc; l++) v->list = names[l], v->kind = (At)l, rc = walk_offload(v, &w, lists[l], r);
    v->at = -1;
    for (int it = 0; !rc && it < n; it++)
      if (w.at[it] != home_bits(op, it, r))
        rc = fail(v, "after update, chunk %d's %s is not at its home (%s) only on dp rank %d", it / PART_COUNT,
                  isa_part_names[it % PART_COUNT], isa_loc_names[op->chunk[it / PART_COUNT].home[it % PART_COUNT]], r);
  }
  free(w.at), free(w.busy);
  return rc;
}

/* ---- the whole ---------------------------------------------------------------------------- */

/* Each list of the program with its place: the components of the step until
 * compose_lists has made the lists the program carries, then those. */
static int verify_lists(V *v) {
  const Program *p = v->p;
  const PSeq *parts[5] = {&p->step, &p->sync, &p->gradnorm, &p->update, &p->forward};
  const char *names[5] = {"step", "sync", "gradnorm", "update", "forward"};
  for (int l = 0; l < 5 && p->named[PROG_LIST_TRAIN] < 0; l++) {
    v->list = names[l], v->kind = (At)l, v->index = p->nlists;
    if (check_list(v, parts[l]) || check_overlap(v, parts[l]) || check_epilogues(v, parts[l])) return -1;
  }
  static const At kinds[PROG_NLISTS] = {AT_TRAIN, AT_EVAL, AT_FORWARD, AT_GATHER, AT_GATHER};
  for (int l = 0; l < p->nlists; l++) {
    v->list = p->lists[l].name, v->index = l;
    v->kind = !strcmp(v->list, "schedule") ? AT_SCHEDULE : AT_PROC;
    for (int k = 0; k < PROG_NLISTS; k++)
      if (p->named[k] == l) v->kind = kinds[k];
    if (check_list(v, &p->lists[l].seq) || check_overlap(v, &p->lists[l].seq) || check_epilogues(v, &p->lists[l].seq))
      return -1;
  }
  return 0;
}

static int verify_one(V *v) {
  const Program *p = v->p;
  if (verify_lists(v)) return -1;
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
    V v = {ps[s], "", AT_STEP, ps[s]->nlists, s, nps, err, errlen, -1, 1};
    if (verify_one(&v)) return -1;
  }
  if (nps > 1 && pipe_check_order(ps, nps, err, errlen)) return -1;
  return 0;
}
