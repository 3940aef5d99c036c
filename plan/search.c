/* The plan search (plan/search.h). The enumeration is nested loops in a fixed
 * order (tensor, pipeline, micro-batch size, recompute, sharding candidate,
 * schedule, ZeRO stage); each candidate is priced by price_plan, which is also
 * what `--dump-plan` prints, so the search and the dump never disagree. */
#include "plan/search.h"
#include "plan/schedule.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const offload_names[OFFLOAD_KINDS + 1] = {"none", "optimizer", "state", NULL};
const char *const schedule_names[PS_KINDS + 1] = {"1f1b", "interleaved", "zb-h1", NULL};

#define GIB (1024.0 * 1024.0 * 1024.0)
enum { MAX_MBS = 64, MAX_V = 8, MAX_MESH = 512, OFFLOAD_MAX_M = 64 };
/* Fraction of compute time that communication on its own stream can hide behind:
 * NCCL kernels take streaming multiprocessors from the compute they overlap. On a
 * device that is a share of one machine (DeviceSpec.shares_host: a calibrated CPU) it
 * hides behind none: MPI's shared-memory copies, the offload's and the host's AdamW run
 * on the cores the ranks compute on. */
#define OVERLAP 0.8

/* The fraction of a node's host memory bandwidth a vectorised CPU AdamW (DeepSpeed's
 * CPUAdam) sustains: it streams parameters, gradients and moments once each way. */
static const double HOST_MEM_EFF = 0.7;

void plan_force_init(PlanForce *f) {
  *f = (PlanForce){.dp = -1,
                   .tp = -1,
                   .pp = -1,
                   .zero = -1,
                   .mbs = -1,
                   .v = -1,
                   .schedule = -1,
                   .rc = -1,
                   .offload = -1,
                   .attn = ATTN_FUSED,
                   .op_strategy = NULL,
                   .precision = -1};
}

/* Bytes of an activation element as priced: 2 under mixed precision (the autocast
 * pass stores activations in 16 bits), 4 in fp32. And of an element of a collective
 * or a pipeline message: 4 but under --what-if's mixed precision, as the autocast pass
 * casts what tensor-parallel collectives and pipeline chunks exchange to f32
 * (passes/autocast.c, ir/ops.def). */
static double act_bytes(const PlanResult *r) { return r->mixed ? 2 : 4; }
static double comm_bytes(const PlanResult *r, const PlanForce *f) { return r->mixed && !f->exec ? 2 : 4; }

/* ---- sharding candidates, cached per (tp, mbs, recompute) ------------------------- */

/* Parameters of a segment under a candidate: totals, and the uses of parameters
 * that other segments use too (tied embeddings), which stages count once. */
typedef struct SegParams {
  double dp, dptp, dptp_mb, max_seg; /* dptp_mb: dptp whose parameter has other uses too (tp_mixed) */
  double max_param;                  /* the largest parameter (its elements on one tensor-parallel rank) */
  double pair, first, last; /* ZeRO-3's gathers: the most of two parameters read one after the other (the one in
                             * use, the next gathered ahead), the first and the last read */
  int nshared;
  ParamUse *shared;
} SegParams;

typedef struct CandSet {
  int tp, mbs;
  Recompute rc;
  int n;
  ShardCand *c;
  SegParams **sp; /* [n][nseg] */
  int ***part;    /* [n][K] chunk starts (K + 1 entries), computed on demand */
} CandSet;

typedef struct Best {
  bool set;
  PlanChoice ch;
  PlanPrice pr;
} Best;

typedef struct Mesh {
  int dp, tp, pp;
  Best feas, infeas, rc_feas[RC_COUNT], rc_infeas[RC_COUNT], z_feas[4], z_infeas[4];
  Best s_feas[PS_KINDS], s_infeas[PS_KINDS]; /* by pipeline schedule */
  Best least;                                /* the plan that misses memory by the least */
} Mesh;

typedef struct Search {
  Arena *a;
  PlanResult *r;
  const PlanForce *f;
  int N, gpn, L;   /* GPUs, GPUs per node, layer segments */
  int64_t B;       /* global batch */
  int *param_nseg; /* [g->n] segments that use each parameter */
  CandSet *sets;
  int nsets, capsets;
  Mesh *mesh;
  int nmesh;
  StageCost *stage;                  /* scratch [max pp] */
  int *segbuf, *seg_stage;           /* scratch [nseg]: a stage's segments; the stage of each segment */
  double *times, *wtimes;            /* scratch [max pp]: each stage's time, and its W passes' (ZB-H1) */
  int slots_of[4], *slots;           /* (pp, v, m, schedule) and the slots of its stages (stage_inflight) */
  int **param_segs;                  /* [g->n] the segments that use each parameter */
  ParamUse *shared_buf, *shared_all; /* stage_shared's: [shared_cap] */
  int shared_cap;
  char why_none[256];     /* why no plan matched the forced parts */
  bool selective_matters; /* layers have an attention core to recompute (materialized scores, softmax) */
} Search;

static double overlap(const Search *S) { return S->r->cl->dev.shares_host ? 0 : OVERLAP; }

/* Seconds to commit, first write and release `bytes` of fresh pages (0: not measured). */
static double commit_time(const Cluster *cl, double bytes) {
  return cl->dev.commit_bw > 0 ? bytes / cl->dev.commit_bw : 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A parameter whose gradient is a tensor-parallel partial sum (a dptp use) but that
 * also has a use of another kind among u[0..n): a compiled program sums its gradient
 * over tp in each micro-batch's backward, not once a step (passes/autodiff.c sums
 * after the step only the gradients of parameters that tp_copy alone reads). */
static bool tp_mixed(const ParamUse *u, int n, int node) {
  bool dptp = false, plain = false;
  for (int j = 0; j < n; j++)
    if (u[j].node == node) dptp |= u[j].dptp, plain |= !u[j].dptp;
  return dptp && plain;
}

static void seg_params(Search *S, const ShardCand *c, int k, SegParams *sp) {
  const SegCost *sc = &c->seg[k];
  *sp = (SegParams){.shared = arena_array(S->a, sc->nparam + 1, sizeof(ParamUse))};
  for (int i = 0; i < sc->nparam; i++) {
    const ParamUse *u = &sc->param[i];
    bool dup = false;
    for (int j = 0; j < i && !dup; j++) dup = sc->param[j].node == u->node && sc->param[j].pl == u->pl;
    if (dup) continue;
    if (u->elems > sp->max_param) sp->max_param = u->elems;
    sp->pair = fmax(sp->pair, sp->last + u->elems), sp->last = u->elems;
    if (!sp->first) sp->first = u->elems;
    if (S->param_nseg[u->node] > 1) sp->shared[sp->nshared++] = *u;
    else if (u->dptp) *(tp_mixed(sc->param, sc->nparam, u->node) ? &sp->dptp_mb : &sp->dptp) += u->elems;
    else sp->dp += u->elems;
    sp->max_seg += u->elems;
  }
}

static CandSet *get_set(Search *S, int tp, int mbs, Recompute rc) {
  for (int i = 0; i < S->nsets; i++)
    if (S->sets[i].tp == tp && S->sets[i].mbs == mbs && S->sets[i].rc == rc) return &S->sets[i];
  if (S->nsets == S->capsets) {
    S->capsets = S->capsets ? 2 * S->capsets : 64;
    CandSet *n = arena_array(S->a, S->capsets, sizeof *n);
    if (S->nsets) memcpy(n, S->sets, sizeof *n * S->nsets);
    S->sets = n;
  }
  CandSet *cs = &S->sets[S->nsets++];
  const PlanResult *r = S->r;
  ShardCtx x = {.pm = r->pm,
                .cl = r->cl,
                .t = tp,
                .mbs = mbs,
                .rc = rc,
                .attn = (AttnKernel)S->f->attn,
                .act_bytes = act_bytes(r),
                .comm_bytes = comm_bytes(r, S->f),
                .peak = r->peak,
                .peak_fp8 = r->fp8 ? r->cl->dev.peak_fp8 : 0,
                .fp8_classifier = S->f->fp8_classifier,
                .classifier_fused = S->f->classifier_fused,
                .state_bytes = r->w_bytes + r->g_bytes + r->o_bytes,
                .force = S->f->op_strategy,
                .exec = S->f->exec};
  *cs = (CandSet){.tp = tp, .mbs = mbs, .rc = rc};
  cs->n = shard_candidates(S->a, &x, &cs->c);
  cs->sp = arena_array(S->a, cs->n, sizeof *cs->sp);
  cs->part = arena_array(S->a, cs->n, sizeof *cs->part);
  for (int i = 0; i < cs->n; i++) {
    cs->sp[i] = arena_array(S->a, r->pm->nseg, sizeof(SegParams));
    for (int k = 0; k < r->pm->nseg; k++) seg_params(S, &cs->c[i], k, &cs->sp[i][k]);
    cs->part[i] = arena_array(S->a, S->L + 2, sizeof(int *));
  }
  return cs;
}

/* ---- pipeline stages: layers cut into chunks balanced by the cost model ----------- */

static double seg_time(const SegCost *s) { return s->t_fwd + s->t_bwd + s->c_fwd + s->c_bwd + s->t_rc; }

/* Layer segment l's time, with the ops before the layers on the first and those
 * after on the last. */
static double layer_time(const Search *S, const ShardCand *c, int l) {
  const PlanModel *pm = S->r->pm;
  double t = seg_time(&c->seg[pm->first_layer_seg + l]);
  if (l == 0) t += seg_time(&c->seg[0]);
  if (l == S->L - 1) t += seg_time(&c->seg[pm->nseg - 1]);
  return t;
}

/* Can the layers be cut into at most K chunks of at most x each? */
static bool fits_chunks(const double *t, int L, int K, double x) {
  int used = 1;
  double sum = 0;
  for (int l = 0; l < L; l++) {
    if (t[l] > x) return false;
    if (sum + t[l] > x) used++, sum = 0;
    sum += t[l];
  }
  return used <= K;
}

/* Chunk starts (K + 1 entries): the slowest chunk as fast as it can be (bisection
 * on the bottleneck), and the others as even as that allows (each chunk aims at
 * the mean of what remains, taking more only when the rest would not fit). */
static int *partition(Search *S, const ShardCand *c, int K) {
  int L = S->L, *start = arena_array(S->a, K + 1, sizeof(int));
  if (L == 0) return start;
  double *t = arena_array(S->a, L, sizeof(double)), lo = 0, hi = 0;
  for (int l = 0; l < L; l++) {
    t[l] = layer_time(S, c, l);
    hi += t[l];
    if (t[l] > lo) lo = t[l];
  }
  for (int it = 0; it < 60 && hi - lo > 1e-12 * hi; it++) {
    double mid = (lo + hi) / 2;
    if (fits_chunks(t, L, K, mid)) hi = mid;
    else lo = mid;
  }
  double x = hi * (1 + 1e-9);
  int l = 0;
  for (int k = 0; k < K; k++) {
    double rest = 0, sum = t[l];
    for (int j = l; j < L; j++) rest += t[j];
    start[k] = l++;
    while (l < L && L - l > K - k - 1) {
      bool must = k == K - 1 || !fits_chunks(t + l, L - l, K - k - 1, x);
      bool want = sum + t[l] <= x && sum + t[l] / 2 <= rest / (K - k);
      if (!must && !want) break;
      sum += t[l++];
    }
  }
  start[K] = L;
  return start;
}

static const int *get_partition(Search *S, CandSet *cs, int ci, int K) {
  if (!cs->part[ci][K]) cs->part[ci][K] = partition(S, &cs->c[ci], K);
  return cs->part[ci][K];
}

/* ---- pricing one plan ------------------------------------------------------------- */

/* Stage of chunk c, and whether chunk c holds the ops before / after the layers. */
static int chunk_stage(int c, int pp) { return c % pp; }

static double xfer_time(const Search *S, const SegCost *s, int tp, bool intra) {
  const Cluster *cl = S->r->cl;
  Group g = {2, intra ? 2 : 1}, t = {tp, tp};
  double whole = cost_collective(cl, COLL_SEND_RECV, s->xfer_whole, g);
  if (tp > 1) { /* Megatron's scatter/gather: send 1/t, all-gather inside the node */
    double sg = cost_collective(cl, COLL_SEND_RECV, s->xfer_whole / tp, g) +
                cost_collective(cl, COLL_ALL_GATHER, s->xfer_whole, t);
    if (sg < whole) whole = sg;
  }
  return cost_collective(cl, COLL_SEND_RECV, s->xfer_split, g) + whole;
}

static bool same_node(const Search *S, int stage_a, int stage_b, int dp, int tp) {
  return stage_a * dp * tp / S->gpn == stage_b * dp * tp / S->gpn;
}

/* The segments of stage i: its chunks' layers, the ops before the layers on stage
 * 0, those after on the last stage. */
static int stage_segments(const Search *S, const int *start, int p, int v, int i, int *segs) {
  const PlanModel *pm = S->r->pm;
  int n = 0, K = p * v;
  for (int j = 0; j < v; j++) {
    int c = i + j * p;
    if (c == 0) segs[n++] = 0;
    for (int l = start[c]; l < start[c + 1]; l++) segs[n++] = pm->first_layer_seg + l;
    if (c == K - 1 && pm->nseg > 1) segs[n++] = pm->nseg - 1;
  }
  return n;
}

/* Whether a compiled program holds parameter `node` whole: its uses under candidate
 * ci want different placements, and the partition pass stores such a parameter
 * replicated on every stage that reads it (passes/partition.c, place). */
static bool held_whole(const Search *S, const CandSet *cs, int ci, int node, int pl) {
  if (!S->r->exec) return false;
  for (int k = 0; k < S->r->pm->nseg; k++) {
    const SegParams *sp = &cs->sp[ci][k];
    for (int u = 0; u < sp->nshared; u++)
      if (sp->shared[u].node == node && sp->shared[u].pl != pl) return true;
  }
  return false;
}

/* Elements of the weights the stage holds whole (held_whole) and splits for a use: a
 * compiled program all-gathers such a weight's gradient whole at the end of its
 * backward pass, through the collectives' staging buffer (program/isa.h): twice its
 * bytes. */
static double stage_split_whole(const Search *S, const CandSet *cs, int ci, const int *segs, int n) {
  ParamUse *seen = S->shared_buf; /* stage_shared's scratch, free again */
  int ns = 0;
  double e = 0;
  for (int a = 0; a < n; a++) {
    const SegParams *sp = &cs->sp[ci][segs[a]];
    for (int u = 0; u < sp->nshared; u++) {
      const ParamUse *pu = &sp->shared[u];
      int w = 0;
      while (w < ns && seen[w].node != pu->node) w++;
      if (w < ns || ns == S->shared_cap || pu->pl < PL_S0 || !held_whole(S, cs, ci, pu->node, pu->pl)) continue;
      seen[ns++] = *pu;
      e += (double)shape_numel(&S->r->g->nodes[pu->node]->shape);
    }
  }
  return e;
}

/* Parameters used by several segments (tied embeddings), counted once per stage;
 * *tie gets the elements also held by another stage, whose gradients those stages
 * all-reduce; *dptp and *dptp_mb those whose gradients are tensor-parallel partial
 * sums, held by other stages too or not (*tie_tp: the former). */
static double stage_shared(Search *S, const CandSet *cs, int ci, const int *segs, int n, int i, const int *seg_stage,
                           double *tie, double *dptp, double *dptp_mb, double *tie_tp) {
  ParamUse *seen = S->shared_buf, *all = S->shared_all;
  int ns = 0, na = 0;
  double elems = 0;
  *tie = *dptp = *dptp_mb = *tie_tp = 0;
  for (int a = 0; a < n; a++) {
    const SegParams *sp = &cs->sp[ci][segs[a]];
    for (int u = 0; u < sp->nshared; u++) {
      ParamUse whole = sp->shared[u];
      if (held_whole(S, cs, ci, whole.node, whole.pl))
        whole.pl = PL_R, whole.elems = (double)shape_numel(&S->r->g->nodes[whole.node]->shape);
      const ParamUse *pu = &whole;
      if (na < S->shared_cap) all[na++] = *pu;
      int w = 0;
      while (w < ns && !(seen[w].node == pu->node && seen[w].pl == pu->pl)) w++;
      if (w == ns && ns == S->shared_cap) continue;
      if (w == ns) seen[ns++] = *pu, elems += pu->elems;
      seen[w].dptp |= pu->dptp; /* the uses' gradients are summed before any reduction */
    }
  }
  for (int w = 0; w < ns; w++) {
    bool other = false;
    for (int k = 0; k < S->param_nseg[seen[w].node] && !other; k++)
      other = seg_stage[S->param_segs[seen[w].node][k]] != i;
    if (other) *tie += seen[w].elems;
    if (seen[w].dptp) *(tp_mixed(all, na, seen[w].node) ? dptp_mb : dptp) += seen[w].elems;
    if (seen[w].dptp && other) *tie_tp += seen[w].elems;
  }
  return elems;
}

bool plan_tp_sums_once(const PlanChoice *ch) { return ch->zero <= 1 && ch->offload != OFFLOAD_STATE; }

/* ZeRO's two collectives: a compiled program sums each parameter's gradient onto its
 * owner and sends the parameter from there (codegen/compose.c, codegen/zero.c: a reduce
 * and a broadcast a parameter); a plan for other systems, a reduce-scatter and an
 * all-gather of the whole (Rajbhandari et al. 2020). */
static void zero_kinds(bool exec, CollKind *sum, CollKind *gather) {
  *sum = exec ? COLL_REDUCE : COLL_REDUCE_SCATTER;
  *gather = exec ? COLL_BROADCAST : COLL_ALL_GATHER;
}

/* Gradient synchronisation over the data-parallel ranks (and ZeRO's gathers) of
 * one stage: the time exposed after overlap with its backward. */
static double stage_dp_time(const Search *S, const PlanChoice *ch, const StageCost *st, int i, double e_dp,
                            double e_dptp, double e_dptp_mb) {
  const Cluster *cl = S->r->cl;
  const PlanResult *r = S->r;
  int dp = ch->dp, tp = ch->tp;
  if (dp * tp <= 1) return 0;
  int in_node = S->gpn / tp < 1 ? 1 : S->gpn / tp;
  Group gd = {dp, dp < in_node ? dp : in_node}, gdt = {dp * tp, dp * tp < S->gpn ? dp * tp : S->gpn};
  double gb = r->g_bytes, wb = r->w_bytes, e = e_dp + e_dptp + e_dptp_mb, tp_ar = 0, tp_end = 0;
  if (S->f->exec) { /* compiled: over tp (once a step, or in each micro-batch's backward), then with the rest */
    Group gt = {tp, tp};
    double t = cost_collective(cl, COLL_ALL_REDUCE, e_dptp * gb, gt);
    *(plan_tp_sums_once(ch) ? &tp_end : &tp_ar) = t;
    tp_ar += cost_collective(cl, COLL_ALL_REDUCE, e_dptp_mb * gb, gt);
    e_dp = e, e_dptp = 0;
  } else {
    e_dptp += e_dptp_mb;
  }
  CollKind k_rs, k_ag;
  zero_kinds(S->f->exec, &k_rs, &k_ag);
  double ar =
      cost_collective(cl, COLL_ALL_REDUCE, e_dp * gb, gd) + cost_collective(cl, COLL_ALL_REDUCE, e_dptp * gb, gdt);
  double rs = cost_collective(cl, k_rs, e_dp * gb, gd) + cost_collective(cl, k_rs, e_dptp * gb, gdt);
  double ag = cost_collective(cl, k_ag, e * wb, gd);
  double end = 0, per_mb = 0, in_order = 0, after = 0, hide = overlap(S) * st->t_bwd;
  /* A compiled plan overlaps what its program does (codegen/compose.h, codegen/zero.h):
   * the end-of-step reduction of a data-parallel-only plan, and ZeRO-3's gathers; its
   * per-micro-batch reductions (ZeRO-2, 3) and a tensor- or pipeline-parallel plan's
   * end-of-step one run in order with the compute. */
  bool compiled = S->f->exec, alone = tp == 1 && ch->pp == 1;
  if (dp == 1) end = ar; /* only the tensor-parallel reduction of replicated weights */
  else if (ch->zero == 0) end = ar;
  else if (ch->zero == 1) end = rs, after = ag;
  else if (ch->zero == 2) per_mb = rs, after = ag;
  else per_mb = (ch->rc == RC_FULL ? 3 : 2) * ag + rs, hide = overlap(S) * (st->t_fwd + st->t_bwd + st->t_rc);
  end += tp_end;
  if (compiled && ch->zero >= 2) in_order = rs, per_mb -= rs;
  /* the end-of-step reduction overlaps the last micro-batch's backward, and later
   * stages finish their backward earlier; per-micro-batch traffic overlaps that
   * micro-batch's compute, except the first layer's share */
  double slack = (compiled && !alone ? 0 : overlap(S) * st->t_bwd) + i * (st->t_bwd + st->t_rc);
  double exposed = end > slack ? end - slack : 0;
  double first = st->nlayers > 0 ? per_mb / st->nlayers : per_mb;
  double mb = per_mb - hide > first ? per_mb - hide : first;
  /* the pages of what each micro-batch gathers (ZeRO-3) and of its gradients a rank
   * does not own (ZeRO-2, 3), committed and released by the rank's own thread */
  double other = e * (dp - 1) / dp,
         paged = (ch->zero == 3 ? (ch->rc == RC_FULL ? 3 : 2) * other * wb : 0) + (ch->zero >= 2 ? other * gb : 0);
  return exposed + (per_mb > 0 ? ch->m * mb : 0) + ch->m * (in_order + tp_ar) + after + commit_time(cl, ch->m * paged);
}

typedef struct StageSums {
  double stash, wgrad_hold, wgrad_first, work, dp, dptp, dptp_mb, maxp, flops_rc;
  double max_param;     /* the stage's largest parameter */
  double work_held[3];  /* one micro-batch's backward at its largest: a segment's working set beside the stash
                         * of the segments before it, less the whole stash; [1] with ZeRO-3's gathered
                         * parameters, [2] with the offloaded state's two segments on the device */
  double work_apart;    /* work with the weight's 16-bit copy, where no stash makes room for it */
  double work_apart_w;  /* ... under a split backward (ZB-H1: SegCost.grad_work_w) */
  double split_whole;   /* stage_split_whole */
  double exchange;      /* stage_exchange: in each slot */
  double exchange_work; /* ... and in the working set */
} StageSums;

static void stage_sum(Search *S, const CandSet *cs, int ci, const int *segs, int n, StageCost *st, StageSums *q) {
  const ShardCand *c = &cs->c[ci];
  const PlanModel *pm = S->r->pm;
  *q = (StageSums){0};
  double held_rc[3] = {0, 0, 0};
  st->first_layer = -1;
  for (int a = 0; a < n; a++) {
    const SegCost *s = &c->seg[segs[a]];
    const SegParams *sp = &cs->sp[ci][segs[a]];
    st->t_fwd += s->t_fwd, st->t_bwd += s->t_bwd, st->tp_comm += s->c_fwd + s->c_bwd, st->t_rc += s->t_rc;
    st->t_w += s->t_w;
    q->stash += s->stash, q->wgrad_hold += s->wgrad_hold;
    if (s->wgrad_first > 0) q->wgrad_first = s->wgrad_first; /* the stage's last */
    /* the backward working set: a recomputed segment's activations with its stash, else
     * its gradients beside the stash already counted */
    double ws = s->transient > 0 ? s->stash + s->transient : s->grad_work;
    if (ws > q->work) q->work = ws;
    if (ws + s->wcopy > q->work_apart) q->work_apart = ws + s->wcopy;
    double wsw = s->transient > 0 ? ws : s->grad_work_w;
    if (wsw + s->wcopy > q->work_apart_w) q->work_apart_w = wsw + s->wcopy;
    q->dp += sp->dp, q->dptp += sp->dptp, q->dptp_mb += sp->dptp_mb, q->flops_rc += s->flops_rc;
    if (sp->max_seg > q->maxp) q->maxp = sp->max_seg;
    const SegParams *prev = a > 0 ? &cs->sp[ci][segs[a - 1]] : NULL;
    double held[3] = {0, fmax(sp->pair, sp->first + (prev ? prev->last : 0)), /* across segments too */
                      sp->max_seg + (prev ? prev->max_seg : 0)};
    for (int z = 0; z < 3; z++) /* beside the stash up to this segment (a recomputed one: the whole stash) */
      if (s->transient > 0) held_rc[z] = fmax(held_rc[z], ws + held[z] * S->r->w_bytes);
      else q->work_held[z] = fmax(q->work_held[z], q->stash + ws + held[z] * S->r->w_bytes);
    if (sp->max_param > q->max_param) q->max_param = sp->max_param;
    if (pm->seg[segs[a]].kind == SEG_LAYER) {
      if (st->first_layer < 0) st->first_layer = pm->seg[segs[a]].layer;
      st->nlayers++;
    }
  }
  for (int z = 0; z < 3; z++) q->work_held[z] = fmax(q->work_held[z] - q->stash, held_rc[z]);
}

/* p2p time per micro-batch of stage i: each of its chunks but the last sends its
 * activations forward and receives their gradients back. */
static double stage_p2p(const Search *S, const ShardCand *c, const int *start, const PlanChoice *ch, int i) {
  int p = ch->pp, K = p * ch->v;
  double t = 0;
  for (int j = 0; j < ch->v; j++) {
    int k = i + j * p;
    if (k == K - 1 || p == 1) continue;
    const SegCost *last = &c->seg[S->r->pm->first_layer_seg + start[k + 1] - 1];
    t += 2 * xfer_time(S, last, ch->tp, same_node(S, i, (i + 1) % p, ch->dp, ch->tp));
  }
  return t;
}

/* Bytes a compiled stage i keeps for its chunks' exchanges (codegen/lower.c,
 * loosen_exchanges): in each slot, under mixed precision, the f32 activations each chunk
 * receives, which its backward reads again (their 16-bit rounding is recomputed where
 * read); in its working set (*work), the gradients a chunk's backward receives and sends,
 * which live in that pass (what a chunk sends is copied by the send). */
static double stage_exchange(const Search *S, const ShardCand *c, const int *start, const PlanChoice *ch, int i,
                             double *work) {
  int p = ch->pp, K = p * ch->v;
  double b = 0;
  *work = 0;
  if (!S->f->exec || p == 1) return 0;
  for (int j = 0; j < ch->v; j++) {
    int k = i + j * p;
    double grads = 0;
    for (int e = k - 1; e <= k; e++) /* the boundary before the chunk and after it */
      if (e >= 0 && e < K - 1) {
        const SegCost *last = &c->seg[S->r->pm->first_layer_seg + start[e + 1] - 1];
        double x = last->xfer_split + last->xfer_whole;
        grads += x;
        if (e == k - 1 && S->r->mixed) b += x;
      }
    if (grads > *work) *work = grads;
  }
  return b;
}

/* The micro-batches whose activations stage i holds at once. A compiled program gives
 * each a work-tier slot on the stage, holding all the stage's chunks, from its first
 * action there to its last (plan/schedule.h, codegen/pipeline.c); --what-if prices
 * Megatron's count of chunks in flight. */
static double stage_inflight(Search *S, const PlanChoice *ch, int i) {
  if (!S->f->exec || ch->pp == 1) return cost_inflight(i, ch->pp, ch->m, ch->v);
  int key[4] = {ch->pp, ch->v, ch->m, ch->sched};
  if (!S->slots || memcmp(key, S->slots_of, sizeof key)) {
    S->slots = arena_array(S->a, ch->pp, sizeof *S->slots);
    for (int s = 0; s < ch->pp; s++) S->slots[s] = pipe_slots(ch->pp, ch->v, ch->m, (PipeSchedule)key[3], s);
    memcpy(S->slots_of, key, sizeof key);
  }
  return S->slots[i];
}

static void stage_memory(Search *S, const PlanChoice *ch, int i, const StageSums *q, double shared, StageCost *st) {
  const PlanResult *r = S->r;
  double e = q->dp + q->dptp + q->dptp_mb + shared, dp = ch->dp;
  /* a compiled program's ZeRO deals parameters whole (codegen/zero.c: the largest first,
   * each to the least loaded rank), so a rank owns at least the largest, except in one
   * stage without offload, where those above half a share are dealt in dp pieces
   * (codegen/zero.h: zero_split_params) */
  bool pieces = ch->pp == 1 && ch->offload != OFFLOAD_STATE;
  if (S->f->exec && ch->zero >= 1 && !pieces && q->max_param * dp > e) dp = e / q->max_param;
  ModelStates ms = cost_zero_states(e, ch->zero, dp, r->w_bytes, r->g_bytes, r->o_bytes);
  st->params = e;
  st->weights = ms.weights, st->grads = ms.grads, st->optimizer = ms.optimizer;
  st->host = 0;
  if (ch->offload == OFFLOAD_OPTIMIZER) st->host = st->optimizer, st->optimizer = 0; /* its state lives on the host */
  if (ch->offload == OFFLOAD_STATE) { /* the shard lives off the device: one layer's gradients wait there to go down */
    st->host = st->weights + st->grads + st->optimizer;
    st->weights = st->optimizer = 0;
    st->grads = q->maxp * r->g_bytes;
  }
  /* ZB-H1: a slot holds its micro-batch until its W, which reads what B left
   * (wgrad_hold): at B's start the whole stash and the first gradient W keeps (the
   * loss stage's: the logits'), at its end all W reads; the working set is then the
   * gradients W does not keep. The first stage sends no gradient, so its whole backward
   * is W (codegen/lower.c, w_nodes) and nothing waits between. */
  bool split_w = ch->sched == PS_ZBH1 && i > 0;
  double held = stage_inflight(S, ch, i);
  double slot = split_w ? fmax(q->stash + q->wgrad_first, q->wgrad_hold) : q->stash;
  st->activations = (slot + q->exchange) * held;
  /* one layer's backward working set, which the micro-batches in flight share (a compiled
   * pipeline stage keeps its passes' working set, with the 16-bit copies of its weights,
   * in the region its slots share, codegen/lower.c, lower_stage, and its stash in
   * theirs; one program's copy reuses what the stash no longer holds). One stage (ZeRO-2
   * and 3 need one) holds it beside the stash of the layers before it, ZeRO-3 also
   * beside the weights it gathered, the one in use and the next (codegen/zero.h), an
   * offloaded state beside two segments' weights (one in use, the next moved ahead:
   * codegen/offload.h); ZeRO-2 holds the whole gradient of a weight the stage uses at
   * both ends (a tied embedding: its classifier's part from the start of the backward
   * pass, its embedding's at the end) */
  int gathered = ch->offload == OFFLOAD_STATE ? 2 : ch->zero == 3;
  double work = ch->pp == 1  ? q->work_held[gathered]
                : S->f->exec ? (split_w ? q->work_apart_w : q->work_apart) + q->exchange_work
                             : q->work;
  st->buffers = work + (ch->zero == 2 ? shared * r->g_bytes * (dp - 1) / dp : 0) + 2 * q->split_whole * r->g_bytes;
  st->total = st->weights + st->grads + st->optimizer + st->activations + st->buffers;
}

/* What price_plan adds up over the stages. */
typedef struct StepSums {
  double dp_time, tie_time, opt_time, flops_rc, link_bytes, link_time, link_exposed;
} StepSums;

/* Stage i of plan ch: its time per micro-batch, memory, and its data-parallel,
 * tied-weight and optimizer time, folded into `sum` (the slowest stage counts). */
static void price_stage(Search *S, CandSet *cs, int ci, const PlanChoice *ch, const int *start, int i, StageCost *st,
                        StepSums *sum) {
  const PlanResult *r = S->r;
  const Cluster *cl = r->cl;
  StageSums q;
  double tie, sdptp, sdptp_mb, tie_tp;
  int n = stage_segments(S, start, ch->pp, ch->v, i, S->segbuf);
  stage_sum(S, cs, ci, S->segbuf, n, st, &q);
  double shared = stage_shared(S, cs, ci, S->segbuf, n, i, S->seg_stage, &tie, &sdptp, &sdptp_mb, &tie_tp);
  st->p2p = stage_p2p(S, &cs->c[ci], start, ch, i);
  st->time = st->t_fwd + st->t_bwd + st->tp_comm + st->t_rc + st->p2p;
  q.split_whole = stage_split_whole(S, cs, ci, S->segbuf, n);
  q.exchange = stage_exchange(S, &cs->c[ci], start, ch, i, &q.exchange_work);
  stage_memory(S, ch, i, &q, shared, st);
  st->params_dptp = q.dptp + sdptp, st->params_dptp_mb = q.dptp_mb + sdptp_mb;
  double d = stage_dp_time(S, ch, st, i, q.dp + shared - tie - (sdptp + sdptp_mb - tie_tp), st->params_dptp,
                           st->params_dptp_mb);
  if (d > sum->dp_time) sum->dp_time = d;
  if (tie > 0) { /* tied weights on several stages: their gradients are summed */
    Group g = {2, same_node(S, 0, ch->pp - 1, ch->dp, ch->tp) ? 2 : 1};
    double t = cost_collective(cl, COLL_ALL_REDUCE, tie * r->g_bytes, g);
    if (t > sum->tie_time) sum->tie_time = t;
  }
  double shard = st->params / (ch->zero >= 1 ? ch->dp : 1);
  /* the update streams the state: AdamW and SGD read it and write it once; LAMB reads the
   * gradient and moments and writes the moments, reads the weights and moments for its
   * norms, then reads them again to write the weights (codegen/compose.h) */
  double moved = r->g->train.opt == OPT_LAMB ? 3 * r->w_bytes + r->g_bytes + 4 * r->o_bytes
                                             : 2 * (r->w_bytes + r->g_bytes + r->o_bytes);
  double opt = shard * moved / (cl->dev.memory_bw * cl->dev.mem_eff);
  double cpu_adam = shard * moved / (cl->host_mem_bw / cl->gpus_per_node * HOST_MEM_EFF);
  if (ch->offload ==
      OFFLOAD_OPTIMIZER) /* gradients down and weights up over the host link, AdamW streaming the host's memory */
    opt = shard * (r->g_bytes + r->w_bytes) / cl->host_link_bw + cpu_adam;
  if (ch->offload == OFFLOAD_STATE) {
    /* every micro-batch, the shard's weights up for forward and backward (and
     * recompute) and its gradients down (accumulated on the host); while the step's
     * compute runs, but for its first layer's */
    double link = ch->m * shard * (r->w_bytes * (ch->rc == RC_FULL ? 3 : 2) + r->g_bytes);
    double t = link / cl->host_link_bw + commit_time(cl, link), compute = ch->m * (st->t_fwd + st->t_bwd + st->t_rc);
    double first = st->nlayers > 0 ? t / st->nlayers : t, exposed = t - overlap(S) * compute;
    opt = cpu_adam;
    if (link > sum->link_bytes) sum->link_bytes = link, sum->link_time = t;
    if (exposed < first) exposed = first;
    if (exposed > sum->link_exposed) sum->link_exposed = exposed;
  }
  if (opt > sum->opt_time) sum->opt_time = opt;
  sum->flops_rc += q.flops_rc;
}

/* The step from the stages: pipeline time, and its breakdown on the slowest stage. */
static void price_step(const Search *S, const PlanChoice *ch, const StageCost *st, const StepSums *sum, PlanPrice *pr) {
  const PlanResult *r = S->r;
  double pipe = ch->sched == PS_ZBH1 ? cost_pipeline_time_zb(S->times, S->wtimes, ch->pp, ch->m)
                                     : cost_pipeline_time(S->times, ch->pp, ch->m, ch->v);
  const StageCost *c = &st[pr->critical_stage];
  pr->compute = ch->m * (c->t_fwd + c->t_bwd);
  pr->recompute = ch->m * c->t_rc;
  pr->tp_comm = ch->m * c->tp_comm;
  pr->p2p = ch->m * c->p2p;
  pr->bubble = pipe - ch->m * c->time;
  pr->dp_comm = sum->dp_time + sum->tie_time;
  pr->link_bytes = sum->link_bytes, pr->link_time = sum->link_time, pr->offload = sum->link_exposed;
  /* STATE's NVMe part is read and written once a step (LAMB: once in each of its update's
   * three passes, codegen/offload.h), by the node's ranks at once */
  const Cluster *cl = r->cl;
  int passes = r->g->train.opt == OPT_LAMB ? 3 : 1;
  pr->nvme_time = pr->nvme > 0 ? 2 * passes * pr->nvme / cl->nvme_bw : 0;
  pr->optimizer = sum->opt_time + pr->nvme_time;
  pr->step = pipe + pr->dp_comm + pr->optimizer + pr->offload;
  pr->fits = pr->peak <= r->usable;
  double n = r->cl->gpus, hw = r->stats.train_flops + sum->flops_rc * ch->m * ch->dp * ch->tp;
  pr->tflops = r->stats.train_flops / pr->step / n / 1e12;
  pr->hw_tflops = hw / pr->step / n / 1e12;
  pr->mfu = pr->tflops * 1e12 / r->peak;
}

double plan_stage_compute(const Plan *p, int i) {
  const StageCost *s = &p->stage[i];
  return p->ch.m * (s->t_fwd + s->t_bwd + s->t_rc) + p->pr.optimizer;
}

/* Price plan ch (sharding candidate ci of cs). With `out`, keep the stages and
 * chunks for the dump. */
static void price_plan(Search *S, CandSet *cs, int ci, const PlanChoice *ch, Plan *out, PlanPrice *pr) {
  const PlanModel *pm = S->r->pm;
  int p = ch->pp, K = p * ch->v;
  const int *start = get_partition(S, cs, ci, K);
  StageCost *st = out ? arena_array(S->a, p, sizeof *st) : S->stage;
  memset(st, 0, sizeof *st * p);
  for (int k = 0; k < K; k++)
    for (int l = start[k]; l < start[k + 1]; l++) S->seg_stage[pm->first_layer_seg + l] = chunk_stage(k, p);
  S->seg_stage[0] = 0;
  if (pm->nseg > 1) S->seg_stage[pm->nseg - 1] = chunk_stage(K - 1, p);
  StepSums sum = {0};
  *pr = (PlanPrice){.fits = true};
  for (int i = 0; i < p; i++) {
    price_stage(S, cs, ci, ch, start, i, &st[i], &sum);
    S->times[i] = st[i].time;
    S->wtimes[i] = st[i].t_w;
    if (st[i].total > pr->peak) pr->peak = st[i].total, pr->peak_stage = i;
    if (st[i].host * S->r->cl->gpus_per_node > pr->host) pr->host = st[i].host * S->r->cl->gpus_per_node;
    if (st[i].time > st[pr->critical_stage].time) pr->critical_stage = i;
  }
  if (ch->offload == OFFLOAD_STATE && pr->host > S->r->cl->host_memory) /* the rest on the node's NVMe */
    pr->nvme = pr->host - S->r->cl->host_memory, pr->host = S->r->cl->host_memory;
  price_step(S, ch, st, &sum, pr);
  if (out) {
    *out = (Plan){.ch = *ch, .pr = *pr, .sc = &cs->c[ci], .nchunks = K, .stage = st};
    out->chunk_lo = arena_array(S->a, K, sizeof(int));
    out->chunk_hi = arena_array(S->a, K, sizeof(int));
    for (int k = 0; k < K; k++) out->chunk_lo[k] = start[k], out->chunk_hi[k] = start[k + 1];
  }
}

/* ---- keeping the best and the runners-up -------------------------------------------- */

static bool better(const Best *b, const PlanPrice *pr) { return !b->set || pr->step < b->pr.step; }

static void keep(Best *b, const PlanChoice *ch, const PlanPrice *pr) {
  if (better(b, pr)) *b = (Best){true, *ch, *pr};
}

static Mesh *get_mesh(Search *S, int dp, int tp, int pp) {
  for (int i = 0; i < S->nmesh; i++)
    if (S->mesh[i].dp == dp && S->mesh[i].tp == tp && S->mesh[i].pp == pp) return &S->mesh[i];
  if (S->nmesh == MAX_MESH) return NULL;
  Mesh *m = &S->mesh[S->nmesh++];
  *m = (Mesh){.dp = dp, .tp = tp, .pp = pp};
  return m;
}

static void record(Search *S, Mesh *m, const PlanChoice *ch, const PlanPrice *pr) {
  S->r->evaluated++;
  if (!m) return;
  if (pr->fits) {
    S->r->feasible++;
    keep(&m->feas, ch, pr), keep(&m->rc_feas[ch->rc], ch, pr), keep(&m->z_feas[ch->zero], ch, pr);
    keep(&m->s_feas[ch->sched], ch, pr);
  } else {
    keep(&m->infeas, ch, pr), keep(&m->rc_infeas[ch->rc], ch, pr), keep(&m->z_infeas[ch->zero], ch, pr);
    keep(&m->s_infeas[ch->sched], ch, pr);
    if (!m->least.set || pr->peak < m->least.pr.peak) m->least = (Best){true, *ch, *pr};
  }
}

/* ---- the enumeration ------------------------------------------------------------------ */

static int divisors(long n, long cap, int *out, int max) {
  int k = 0;
  for (long d = 1; d <= n && d <= cap && k < max; d++)
    if (n % d == 0) out[k++] = (int)d;
  return k;
}

static void why_none(Search *S, const char *fmt, long a, long b) {
  if (!S->why_none[0]) snprintf(S->why_none, sizeof S->why_none, fmt, a, b);
}

/* Schedules to try for (pp, m), each with its chunks per stage (v): 1F1B; ZB-H1 where
 * there is a pipeline; and interleaved with v chunks per stage where m divides into groups of pp (as
 * Megatron requires) and layers suffice. */
static int schedules(Search *S, int pp, int m, int *v, PipeSchedule *sched) {
  const PlanForce *f = S->f;
  int n = 0;
  if ((f->schedule < 0 || f->schedule == PS_1F1B) && f->v <= 1) v[n] = 1, sched[n++] = PS_1F1B;
  if ((f->schedule < 0 || f->schedule == PS_ZBH1) && f->v <= 1) {
    if (pp > 1) v[n] = 1, sched[n++] = PS_ZBH1;
    else if (f->schedule == PS_ZBH1) why_none(S, "the zb-h1 schedule needs a pipeline (--pp %ld%.0ld)", pp, 0);
  }
  if (f->schedule == PS_1F1B || f->schedule == PS_ZBH1 || f->v == 1 || pp < 2) {
    if (f->schedule == PS_INTERLEAVED) why_none(S, "the interleaved schedule needs a pipeline (--pp %ld%.0ld)", pp, 0);
    return n;
  }
  for (int k = 2; k <= MAX_V; k++) {
    if ((f->v > 1 && k != f->v) || (long)pp * k > S->L) continue;
    if (m % pp) {
      why_none(S, "the interleaved schedule needs the micro-batches (%ld) to be a multiple of --pp %ld", m, pp);
      continue;
    }
    v[n] = k, sched[n++] = PS_INTERLEAVED;
  }
  if (f->v > 1 && n == 0 && (long)pp * f->v > S->L)
    why_none(S, "--virtual-stages %ld needs %ld layers or more", f->v, (long)pp * f->v);
  return n;
}

/* ZeRO stages to try: all four with data parallelism, but stages 2 and 3 (which
 * reduce gradients every micro-batch) only without a pipeline, as DeepSpeed. */
static void try_choice(Search *S, Mesh *mesh, CandSet *cs, int ci, PlanChoice ch) {
  const PlanForce *f = S->f;
  int zlo = f->zero >= 0 ? f->zero : 0, zhi = f->zero >= 0 ? f->zero : ch.dp == 1 ? 0 : ch.pp > 1 ? 1 : 3;
  /* offload: the optimizer's state when there is some, the whole state with ZeRO-3
   * (over one rank too: layer by layer). Code generation compiles the whole state's
   * offload of data-parallel plans (codegen/offload.h; tensor and pipeline parallelism
   * with offload compile from forced plans) with every micro-batch written into the step,
   * so at most OFFLOAD_MAX_M of them; the optimizer's state alone is priced only. */
  int olo = f->offload >= 0 ? f->offload : 0, ohi = f->offload >= 0 ? f->offload : OFFLOAD_STATE;
  const Cluster *cl = S->r->cl;
  for (int off = olo; off <= ohi; off++) {
    if (off == OFFLOAD_OPTIMIZER && S->r->o_bytes == 0 && f->offload < 0) continue;
    if (f->exec &&
        (off == OFFLOAD_OPTIMIZER || (off == OFFLOAD_STATE && (ch.tp > 1 || ch.pp > 1 || ch.m > OFFLOAD_MAX_M))))
      continue;
    int lo = off == OFFLOAD_STATE ? 3 : zlo, hi = off == OFFLOAD_STATE ? 3 : zhi;
    if (off == OFFLOAD_STATE && ((f->zero >= 0 && f->zero != 3) || ch.pp > 1))
      continue; /* ZeRO-3 runs without a pipeline */
    for (int z = lo; z <= hi; z++) {
      PlanPrice pr;
      ch.zero = z, ch.offload = (OffloadKind)off;
      price_plan(S, cs, ci, &ch, NULL, &pr);
      if (off == OFFLOAD_OPTIMIZER && pr.host > cl->host_memory) continue; /* the host cannot hold it */
      if (off == OFFLOAD_STATE && pr.nvme > cl->nvme) continue;            /* nor the host and NVMe */
      record(S, mesh, &ch, &pr);
    }
  }
}

static void search_mbs(Search *S, Mesh *mesh, int dp, int tp, int pp, int mbs) {
  const PlanForce *f = S->f;
  PipeSchedule sched[MAX_V + 2];
  int m = (int)(S->B / ((int64_t)dp * mbs)), v[MAX_V + 2], nv = schedules(S, pp, m, v, sched);
  for (int rc = 0; rc < RC_COUNT; rc++) {
    if (f->rc >= 0 && rc != f->rc) continue;
    if (rc != RC_NONE && S->L == 0) continue; /* recompute works on layers */
    if (rc == RC_SELECTIVE && f->rc < 0 && !S->selective_matters) continue;
    CandSet *cs = get_set(S, tp, mbs, (Recompute)rc);
    for (int ci = 0; ci < cs->n; ci++)
      for (int k = 0; k < nv; k++) {
        PlanChoice ch = {.dp = dp,
                         .tp = tp,
                         .pp = pp,
                         .mbs = mbs,
                         .m = m,
                         .v = v[k],
                         .rc = (Recompute)rc,
                         .sched = sched[k],
                         .attn = (AttnKernel)f->attn,
                         .cand = ci};
        try_choice(S, mesh, cs, ci, ch);
      }
  }
}

static void search_mesh(Search *S, int dp, int tp, int pp) {
  const PlanForce *f = S->f;
  if (S->B % dp) {
    why_none(S, "the global batch of %ld sequences does not split evenly over %ld data-parallel ranks", (long)S->B, dp);
    return;
  }
  int mbs[MAX_MBS], n = divisors(S->B / dp, MAX_MBS, mbs, MAX_MBS);
  if (f->mbs > 0) {
    if ((S->B / dp) % f->mbs) {
      why_none(S, "--microbatch-size %ld does not divide the %ld sequences of each data-parallel rank", f->mbs,
               (long)(S->B / dp));
      return;
    }
    mbs[0] = f->mbs, n = 1;
  }
  Mesh *mesh = get_mesh(S, dp, tp, pp);
  for (int i = 0; i < n; i++) search_mbs(S, mesh, dp, tp, pp, mbs[i]);
}

static void enumerate(Search *S) {
  const PlanForce *f = S->f;
  int tps[64], pps[64];
  int ntp = divisors(S->N, S->gpn, tps, 64);
  if (f->tp > 0) tps[0] = f->tp, ntp = 1;
  for (int a = 0; a < ntp; a++) {
    int tp = tps[a];
    if (S->gpn % tp) continue; /* a tensor-parallel group would straddle two nodes */
    int npp = divisors(S->N / tp, S->L > 0 ? S->L : 1, pps, 64);
    if (f->pp > 0) pps[0] = f->pp, npp = 1;
    for (int b = 0; b < npp; b++) {
      int pp = pps[b];
      if (S->N % ((long)tp * pp)) continue;
      int dp = S->N / (tp * pp);
      if (f->dp > 0 && dp != f->dp) continue;
      search_mesh(S, dp, tp, pp);
    }
  }
}

/* Forced parts that cannot make a plan on this cluster, said plainly. */
static void check_forced(const Search *S) {
  const PlanForce *f = S->f;
  if (f->tp > 0 && f->tp > S->gpn)
    error_plain("tensor parallelism stays inside a node: --tp %d is more than the %d GPUs of a node", f->tp, S->gpn);
  if (f->tp > 0 && S->gpn % f->tp)
    error_plain("--tp %d does not divide the %d GPUs of a node, so its groups would straddle nodes", f->tp, S->gpn);
  if (f->tp > 0 && S->N % f->tp) error_plain("--tp %d does not divide the %d GPUs", f->tp, S->N);
  if (f->pp > 0 && S->N % f->pp) error_plain("--pp %d does not divide the %d GPUs", f->pp, S->N);
  if (f->dp > 0 && S->N % f->dp) error_plain("--dp %d does not divide the %d GPUs", f->dp, S->N);
  if (f->pp > 1 && f->pp > S->L)
    error_plain("--pp %d needs at least %d layers to cut between, and the model has %d", f->pp, f->pp, S->L);
  long dp = f->dp, tp = f->tp, pp = f->pp;
  if (dp > 0 && tp > 0 && pp > 0 && dp * tp * pp != S->N)
    error_plain("--dp %ld x --tp %ld x --pp %ld makes %ld GPUs, but the cluster has %d", dp, tp, pp, dp * tp * pp,
                S->N);
  if (dp > 0 && S->B % dp)
    error_plain("the global batch of %ld sequences does not split evenly over %ld data-parallel ranks (%.4g each)",
                (long)S->B, dp, (double)S->B / dp);
  if (f->zero > 3) error_plain("--zero takes 0, 1, 2 or 3, got %d", f->zero);
  if (f->zero >= 2 && f->pp > 1)
    error_plain("ZeRO stage %d partitions gradients, which a pipeline (--pp %d) cannot keep: its micro-batches would "
                "each reduce every gradient; use ZeRO-1 with pipelines (as DeepSpeed requires)",
                f->zero, f->pp);
}

/* ---- the result -------------------------------------------------------------------- */

static CandSet *set_of(Search *S, const PlanChoice *ch) { return get_set(S, ch->tp, ch->mbs, ch->rc); }

static void full_plan(Search *S, const PlanChoice *ch, Plan *out) {
  PlanPrice pr;
  price_plan(S, set_of(S, ch), ch->cand, ch, out, &pr);
}

static const char *biggest_loss(const PlanPrice *a, const PlanPrice *w) {
  const char *names[] = {"compute",
                         "recompute",
                         "tensor-parallel communication",
                         "pipeline transfers",
                         "pipeline bubble",
                         "data-parallel communication",
                         "optimizer step"};
  double d[] = {a->compute - w->compute, a->recompute - w->recompute, a->tp_comm - w->tp_comm,    a->p2p - w->p2p,
                a->bubble - w->bubble,   a->dp_comm - w->dp_comm,     a->optimizer - w->optimizer};
  int k = 0;
  for (int i = 1; i < 7; i++)
    if (d[i] > d[k]) k = i;
  return names[k];
}

static void add_runner(Search *S, const Best *b, const char *label) {
  PlanResult *r = S->r;
  if (!b->set || r->nru >= 16 || !memcmp(&b->ch, &r->best.ch, sizeof b->ch)) return;
  for (int i = 0; i < r->nru; i++)
    if (!memcmp(&r->ru[i].plan.ch, &b->ch, sizeof b->ch)) return;
  RunnerUp *ru = &r->ru[r->nru++];
  full_plan(S, &b->ch, &ru->plan);
  const PlanPrice *w = &r->best.pr, *p = &ru->plan.pr;
  if (!p->fits)
    snprintf(ru->why, sizeof ru->why,
             "%sdoes not fit: needs %.1f GiB per device on stage %d, %.1f GiB usable (over by %.1f GiB)", label,
             p->peak / GIB, p->peak_stage, r->usable / GIB, (p->peak - r->usable) / GIB);
  else
    snprintf(ru->why, sizeof ru->why, "%sslower by %.1f%% (+%.3g s per step, mostly %s)", label,
             100 * (p->step / w->step - 1), p->step - w->step, biggest_loss(p, w));
}

static int cmp_best(const void *a, const void *b) { /* by step time, then mesh: a total order */
  const Best *x = *(const Best *const *)a, *y = *(const Best *const *)b;
  if (x->pr.step != y->pr.step) return x->pr.step < y->pr.step ? -1 : 1;
  if (x->ch.tp != y->ch.tp) return x->ch.tp - y->ch.tp;
  return x->ch.pp - y->ch.pp;
}

static void collect_runners(Search *S, const Mesh *win) {
  PlanResult *r = S->r;
  r->ru = arena_array(S->a, 16, sizeof *r->ru);
  for (int k = 0; k < RC_COUNT; k++)
    add_runner(S, win->rc_feas[k].set ? &win->rc_feas[k] : &win->rc_infeas[k], "same mesh, other recompute: ");
  for (int z = 0; z < 4; z++)
    add_runner(S, win->z_feas[z].set ? &win->z_feas[z] : &win->z_infeas[z], "same mesh, other ZeRO stage: ");
  for (int k = 0; k < PS_KINDS; k++)
    add_runner(S, win->s_feas[k].set ? &win->s_feas[k] : &win->s_infeas[k], "same mesh, other schedule: ");
  const Best **other = arena_array(S->a, S->nmesh + 1, sizeof *other);
  int n = 0;
  for (int i = 0; i < S->nmesh; i++)
    if (&S->mesh[i] != win && S->mesh[i].feas.set) other[n++] = &S->mesh[i].feas;
  qsort(other, n, sizeof *other, cmp_best);
  for (int i = 0; i < n && i < 5; i++) add_runner(S, other[i], "");
  n = 0;
  for (int i = 0; i < S->nmesh; i++)
    if (S->mesh[i].infeas.set && S->mesh[i].infeas.pr.step < r->best.pr.step) other[n++] = &S->mesh[i].infeas;
  qsort(other, n, sizeof *other, cmp_best);
  for (int i = 0; i < n && i < 3; i++) add_runner(S, other[i], "faster but ");
}

static const char *plan_text(const PlanChoice *c, char *buf, size_t len) {
  snprintf(buf, len, "dp=%d tp=%d pp=%d, ZeRO-%d, %d micro-batches of %d, recompute %s, %s%s%s", c->dp, c->tp, c->pp,
           c->zero, c->m, c->mbs, recompute_names[c->rc], schedule_names[c->sched], c->v > 1 ? " (virtual stages)" : "",
           c->offload == OFFLOAD_OPTIMIZER ? ", optimizer on the host"
           : c->offload == OFFLOAD_STATE   ? ", state on the host and NVMe"
                                           : "");
  return buf;
}

/* One plan's memory against the device, for the no-fit message. */
static void describe_fit(Search *S, const PlanChoice *ch, char *out, size_t len) {
  Plan p;
  char buf[160];
  full_plan(S, ch, &p);
  const StageCost *st = &p.stage[p.pr.peak_stage];
  snprintf(out, len,
           "%s: stage %d needs %.1f GiB per device (weights %.1f, gradients %.1f, optimizer states %.1f, "
           "activations %.1f, buffers %.1f GiB), over by %.1f GiB",
           plan_text(&p.ch, buf, sizeof buf), p.pr.peak_stage, st->total / GIB, st->weights / GIB, st->grads / GIB,
           st->optimizer / GIB, st->activations / GIB, st->buffers / GIB, (st->total - S->r->usable) / GIB);
}

static int least_cmp(const void *a, const void *b) {
  double x = (*(const Best *const *)a)->pr.peak, y = (*(const Best *const *)b)->pr.peak;
  return x < y ? -1 : x > y;
}

/* What the nodes offer an offloaded state, when offload was weighed. */
static const char *offload_room(Search *S) {
  static char buf[200];
  const Cluster *cl = S->r->cl;
  if (S->f->offload == OFFLOAD_NONE) return "";
  snprintf(buf, sizeof buf,
           "; offloaded, it has %.1f GiB of host memory (--host-memory) and %.1f GiB of NVMe "
           "(--nvme) on each of %d node%s",
           cl->host_memory / GIB, cl->nvme / GIB, cluster_nodes(cl), cluster_nodes(cl) == 1 ? "" : "s");
  return buf;
}

/* No plan fits: the forced plan's memory, or the three meshes that came closest and by
 * how much, and what the whole training state needs against all the devices hold. */
static _Noreturn void fail_memory(Search *S, bool forced) {
  const Best *close[MAX_MESH];
  int n = 0;
  for (int i = 0; i < S->nmesh; i++)
    if (S->mesh[i].least.set) close[n++] = &S->mesh[i].least;
  if (!n) error_plain("no plan matches the forced choices: %s", S->why_none[0] ? S->why_none : "none were possible");
  qsort(close, (size_t)n, sizeof *close, least_cmp);
  const Cluster *cl = S->r->cl;
  char line[3][600];
  for (int i = 0; i < n && i < 3; i++) describe_fit(S, &close[i]->ch, line[i], sizeof line[i]);
  if (forced)
    error_plain("the forced plan does not fit in memory: %.1f GiB are usable (%.0f GiB %s less %.1f GiB "
                "reserved); %s",
                S->r->usable / GIB, cl->dev.memory / GIB, cl->dev.name, cl->dev.reserved / GIB, line[0]);
  double state = S->r->pm->params * (S->r->w_bytes + S->r->g_bytes + S->r->o_bytes);
  error_plain(
      "no plan fits in memory: %.1f GiB are usable per device (%.0f GiB %s less %.1f GiB reserved); the "
      "closest of %ld plans priced:\n"
      "  1. %s%s%s%s%s\n"
      "  the training state alone (weights, gradients and optimizer state, %.0f bytes a parameter) is %.1f GiB; "
      "%s %d device%s hold%s %.1f GiB usable%s%s",
      S->r->usable / GIB, cl->dev.memory / GIB, cl->dev.name, cl->dev.reserved / GIB, S->r->evaluated, line[0],
      n > 1 ? "\n  2. " : "", n > 1 ? line[1] : "", n > 2 ? "\n  3. " : "", n > 2 ? line[2] : "",
      S->r->w_bytes + S->r->g_bytes + S->r->o_bytes, state / GIB, cl->gpus == 1 ? "its" : "the", cl->gpus,
      cl->gpus == 1 ? "" : "s", cl->gpus == 1 ? "s" : "", cl->gpus * S->r->usable / GIB, offload_room(S),
      S->f->exec && S->f->offload < 0 ? "; --what-if also weighs offloading the optimizer "
                                        "state alone (priced, not compiled yet)"
                                      : "");
}

static void init_result(Search *S, Arena *a, const Graph *g, const Cluster *cl) {
  PlanResult *r = S->r = arena_alloc(a, sizeof *r);
  r->g = g, r->cl = cl;
  r->pm = plan_model_new(a, g, S->f->op_strategy);
  graph_stats(g, &r->stats);
  /* the precision asked (the driver's default: bf16 on GPUs), where the device has it */
  r->exec = S->f->exec;
  r->mixed = !cl->dev.fp32_only && S->f->lowp;
  r->peak = r->mixed ? cluster_peak(cl) : cl->dev.peak_fp32;
  /* fp8: the linear layers' GEMMs at the fp8 peak (plan/shard.c), on a device that has one */
  r->fp8 = r->mixed && S->f->exec && S->f->fp8;
  r->precision = !r->mixed ? DT_F32 : S->f->exec && S->f->precision >= 0 ? S->f->precision : DT_BF16;
  if (r->fp8 && !(cl->dev.peak_fp8 > 0))
    error_plain("--precision fp8: the %s has no fp8 tensor cores (Hopper and Ada GPUs have them): use bf16, or a "
                "cluster whose device.peak_fp8_tflops is set",
                cl->dev.part);
  /* The training state a parameter costs. A compiled program keeps f32 weights (the
   * masters: passes/autocast.c feeds each GEMM a 16-bit copy) and f32 gradients, and
   * reduces and gathers them in f32; --what-if prices Megatron's layout instead:
   * 16-bit weights and gradients, the f32 masters with the optimizer's moments. */
  bool megatron = r->mixed && !S->f->exec;
  r->w_bytes = megatron ? 2 : 4, r->g_bytes = megatron ? 2 : 4;
  r->o_bytes = (megatron ? 4 : 0) + 4 * train_moments(&g->train);
  r->usable = cl->dev.memory - cl->dev.reserved;
  S->N = cl->gpus, S->gpn = cl->gpus_per_node, S->L = r->pm->nlayer_segs, S->B = r->pm->batch;
  for (int k = 0; k < r->pm->nseg; k++)
    for (int j = 0; j < r->pm->seg[k].nops && r->pm->seg[k].kind == SEG_LAYER; j++) {
      OpKind op = g->nodes[r->pm->seg[k].ops[j]]->op;
      S->selective_matters |= op == OP_SOFTMAX || (op == OP_ATTENTION && S->f->attn == ATTN_MATERIALIZED);
    }
  int nseg = r->pm->nseg;
  S->segbuf = arena_array(a, nseg + 1, sizeof(int));
  S->seg_stage = arena_array(a, nseg + 1, sizeof(int));
  S->stage = arena_array(a, S->L + 2, sizeof(StageCost)); /* pp <= layers */
  S->times = arena_array(a, S->L + 2, sizeof(double));
  S->wtimes = arena_array(a, S->L + 2, sizeof(double));
  S->mesh = arena_array(a, MAX_MESH, sizeof(Mesh));
  S->param_nseg = arena_array(a, g->n, sizeof(int));
  S->param_segs = arena_array(a, g->n, sizeof(int *));
  S->shared_cap = 64;
  S->shared_buf = arena_array(a, S->shared_cap, sizeof(ParamUse));
  S->shared_all = arena_array(a, S->shared_cap, sizeof(ParamUse));
  for (int k = 0; k < nseg; k++) {
    const Segment *s = &r->pm->seg[k];
    for (int j = 0; j < s->nops; j++) {
      const Node *n = g->nodes[s->ops[j]];
      for (int i = 0; i < n->nin; i++) {
        int p = n->in[i]->id;
        if (n->in[i]->op != OP_PARAM) continue;
        if (!S->param_segs[p]) S->param_segs[p] = arena_array(a, nseg + 1, sizeof(int));
        int c = S->param_nseg[p];
        if (!c || S->param_segs[p][c - 1] != k) S->param_segs[p][S->param_nseg[p]++] = k;
      }
    }
  }
}

PlanResult *plan_search(Arena *a, const Graph *g, const Cluster *cl, const PlanForce *f) {
  double t0 = now_s();
  Search S = {.a = a, .f = f};
  init_result(&S, a, g, cl);
  PlanResult *r = S.r;
  check_forced(&S);
  enumerate(&S);
  const Mesh *win = NULL;
  for (int i = 0; i < S.nmesh; i++)
    if (S.mesh[i].feas.set && (!win || S.mesh[i].feas.pr.step < win->feas.pr.step)) win = &S.mesh[i];
  bool forced = f->dp > 0 || f->tp > 0 || f->pp > 0 || f->zero >= 0 || f->mbs > 0 || f->rc >= 0 || f->schedule >= 0;
  if (!win) fail_memory(&S, forced);
  full_plan(&S, &win->feas.ch, &r->best);
  collect_runners(&S, win);
  r->search_s = now_s() - t0;
  return r;
}

/* ---- the collectives of a plan ---------------------------------------------------------- */

static void coll_put(PlanColl *out, int *n, int max, const char *axis, CollKind k, double bytes, double count,
                     double time, Group g) {
  if (count <= 0 || bytes <= 0) return;
  for (int i = 0; i < *n; i++)
    if (out[i].axis == axis && out[i].kind == k && out[i].bytes == bytes) {
      out[i].count += count, out[i].time += time;
      return;
    }
  if (*n < max) out[(*n)++] = (PlanColl){axis, k, bytes, count, time, g};
}

int plan_collectives(const PlanResult *r, const Plan *p, PlanColl *out, int max) {
  const PlanModel *pm = r->pm;
  const Cluster *cl = r->cl;
  const PlanChoice *ch = &p->ch;
  int n = 0, i = p->pr.critical_stage, gpn = cl->gpus_per_node;
  Group gt = {ch->tp, ch->tp};
  for (int k = 0; k < p->nchunks; k++) {
    if (k % ch->pp != i) continue;
    for (int s = 0; s < pm->nseg; s++) {
      bool in = (pm->seg[s].kind == SEG_LAYER && s - pm->first_layer_seg >= p->chunk_lo[k] &&
                 s - pm->first_layer_seg < p->chunk_hi[k]) ||
                (s == 0 && k == 0) || (s == pm->nseg - 1 && s > 0 && k == p->nchunks - 1);
      if (!in) continue;
      const SegCost *sc = &p->sc->seg[s];
      for (int c = 0; c < sc->ncoll; c++)
        coll_put(out, &n, max, "tp", sc->coll[c].kind, sc->coll[c].bytes, sc->coll[c].count * ch->m,
                 sc->coll[c].time * ch->m, gt);
      if (ch->pp > 1 && k < p->nchunks - 1 && pm->seg[s].kind == SEG_LAYER &&
          s - pm->first_layer_seg == p->chunk_hi[k] - 1) {
        Group g2 = {2, 1};
        double b = sc->xfer_split + sc->xfer_whole / (ch->tp > 1 ? ch->tp : 1);
        coll_put(out, &n, max, "pp", COLL_SEND_RECV, b, 2.0 * ch->m,
                 2.0 * ch->m * cost_collective(cl, COLL_SEND_RECV, b, g2), g2);
      }
    }
  }
  /* the data-parallel reduction as stage_dp_time prices it: the gradients of weights
   * replicated over the tensor-parallel ranks, partial sums there, over dp x tp */
  const StageCost *st = &p->stage[i];
  int in_node = gpn / ch->tp < 1 ? 1 : gpn / ch->tp, dt = ch->dp * ch->tp;
  Group gd = {ch->dp, ch->dp < in_node ? ch->dp : in_node}, gdt = {dt, dt < gpn ? dt : gpn};
  const char *axis_dt = ch->dp > 1 ? "dptp" : "tp";
  double ed = st->params - st->params_dptp - st->params_dptp_mb, et = st->params_dptp + st->params_dptp_mb;
  if (r->exec && ch->tp > 1) { /* compiled: over tp, then with the rest (stage_dp_time) */
    double times = plan_tp_sums_once(ch) ? 1 : ch->m, b = st->params_dptp * r->g_bytes,
           bm = st->params_dptp_mb * r->g_bytes;
    coll_put(out, &n, max, "tp", COLL_ALL_REDUCE, b, times, times * cost_collective(cl, COLL_ALL_REDUCE, b, gt), gt);
    coll_put(out, &n, max, "tp", COLL_ALL_REDUCE, bm, ch->m, ch->m * cost_collective(cl, COLL_ALL_REDUCE, bm, gt), gt);
    ed += et, et = 0;
  }
  if (ch->dp == 1 || ch->zero == 0) {
    if (ch->dp > 1)
      coll_put(out, &n, max, "dp", COLL_ALL_REDUCE, ed * r->g_bytes, 1,
               cost_collective(cl, COLL_ALL_REDUCE, ed * r->g_bytes, gd), gd);
    if (dt > 1)
      coll_put(out, &n, max, axis_dt, COLL_ALL_REDUCE, et * r->g_bytes, 1,
               cost_collective(cl, COLL_ALL_REDUCE, et * r->g_bytes, gdt), gdt);
  } else {
    double times = ch->zero >= 2 ? ch->m : 1, ag = ch->zero == 3 ? (ch->rc == RC_FULL ? 3.0 : 2.0) * ch->m : 1;
    double wb = st->params * r->w_bytes;
    CollKind k_rs, k_ag;
    zero_kinds(r->exec, &k_rs, &k_ag);
    coll_put(out, &n, max, "dp", k_rs, ed * r->g_bytes, times, times * cost_collective(cl, k_rs, ed * r->g_bytes, gd),
             gd);
    coll_put(out, &n, max, axis_dt, k_rs, et * r->g_bytes, times,
             times * cost_collective(cl, k_rs, et * r->g_bytes, gdt), gdt);
    coll_put(out, &n, max, "dp", k_ag, wb, ag, ag * cost_collective(cl, k_ag, wb, gd), gd);
  }
  return n;
}
