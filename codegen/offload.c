/* Offload planning (codegen/offload.h). */
#include "codegen/offload.h"
#include "codegen/compose.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "plan/cost.h"
#include "program/program.h"

enum { GRANULE = 4096, WINDOW = 16 };
static const double INF = 1e300;

static int64_t up(int64_t x, int64_t g) { return (x + g - 1) / g * g; }
static int64_t down(int64_t x, int64_t g) { return x / g * g; }
static int64_t pbytes(const Program *p, int k) { return up(pparam_bytes(&p->params[k]), 64); }

/* ---- chunks ------------------------------------------------------------------------------ */

/* Chunk c's part's bytes at granules (the optimizer part holds AdamW's m and v). */
static int64_t part_bytes_of(const Program *p, const OffloadPlan *op, int c, int part) {
  int64_t b = up(op->chunk[c].end, GRANULE) - down(op->chunk[c].start, GRANULE);
  return part == PART_OPT && train_moments(&p->g->train) == 2 ? 2 * b : b;
}

/* Packs the parameters in order into chunks of at most size bytes; returns the count and
 * the waste (chunk size less the bytes held, summed), or -1 when a parameter is larger. */
static int pack(const Program *p, int64_t size, OChunk *out, int64_t *waste) {
  int n = 0;
  *waste = 0;
  for (int k = 0; k < p->nparams;) {
    int64_t start = p->params[k].offset, used = 0;
    int lo = k;
    while (k < p->nparams && p->params[k].offset + pbytes(p, k) - start <= size)
      used = p->params[k].offset + pbytes(p, k) - start, k++;
    if (k == lo) return -1;
    if (out) out[n] = (OChunk){.lo = lo, .hi = k, .start = start, .end = start + used};
    *waste += size - used;
    n++;
  }
  return n;
}

/* The chunk size that wastes least, of candidates from the largest parameter up to
 * `most`: the largest parameter times 1, 1.125, 1.25, ... and every parameter boundary
 * sum that ends a chunk exactly. */
static int64_t choose_chunk(const Program *p, int64_t most, int64_t *waste_out) {
  int64_t largest = 0, best = -1, best_waste = 0;
  for (int k = 0; k < p->nparams; k++) largest = pbytes(p, k) > largest ? pbytes(p, k) : largest;
  if (largest > most) return -1;
  for (int64_t i = 0; i <= 64; i++) {
    int64_t size = largest + largest * i / 8;
    if (size > most) size = most;
    int64_t w;
    if (pack(p, size, NULL, &w) < 0) continue;
    if (best < 0 || w < best_waste || (w == best_waste && size < best)) best = size, best_waste = w;
    if (size == most) break;
  }
  *waste_out = best_waste;
  return best;
}

/* ---- what an instruction touches ------------------------------------------------------------ */

static int gemm_touch(const IsaGemm *g, Touch *t) {
  int64_t rows[3] = {g->ta ? g->k : g->m, g->tb ? g->n : g->k, g->m};
  int64_t cols[3] = {g->ta ? g->m : g->k, g->tb ? g->k : g->n, g->n};
  int64_t ld[3] = {g->lda, g->ldb, g->ldc};
  for (int j = 0; j < 3; j++) {
    int64_t last =
        (g->batch[0] - 1) * g->stride[j][0] + (g->batch[1] - 1) * g->stride[j][1] + (rows[j] - 1) * ld[j] + cols[j];
    t[j] = (Touch){g->tier[j], g->off[j], g->off[j] + last * isa_dtype_bytes(g->dt[j]), j == 2};
  }
  int n = 3;
  if (g->bias || g->bgrad) t[n++] = (Touch){g->bias_tier, g->bias_off, g->bias_off + g->n * 4, g->bgrad};
  if (g->aux || g->dgelu)
    t[n++] = (Touch){g->aux_tier, g->aux_off, g->aux_off + ((g->m - 1) * g->ldc + g->n) * isa_dtype_bytes(g->dt[2]),
                     !g->dgelu};
  return n;
}

int instr_touch(const Program *p, const IsaInstr *in, Touch *t) {
  if (in->op == ISA_GEMM) return gemm_touch(&in->gemm, t);
  if (in->op == ISA_COMM) {
    int64_t b[2];
    isa_comm_bytes(&in->comm, p->tp, b);
    t[0] = (Touch){in->comm.tier[0], in->comm.off[0], in->comm.off[0] + b[0], false};
    t[1] = (Touch){in->comm.tier[1], in->comm.off[1], in->comm.off[1] + b[1], true};
    return 2;
  }
  if (in->op == ISA_ZERO)
    return t[0] = (Touch){in->zero.tier, in->zero.offset, in->zero.offset + in->zero.bytes, true}, 1;
  if (in->op == ISA_TRUST) /* LAMB's norms read, its ratios written over them */
    return t[0] = (Touch){TIER_WORK, in->trust.offset, in->trust.offset + 8 * in->trust.count, true}, 1;
  if (in->op != ISA_KERNEL) return 0;
  const Kernel *k = p->kernels[in->kernel.id];
  for (int i = 0; i < k->nbufs; i++)
    t[i] = (Touch){k->bufs[i].shared ? TIER_SHARED : k->bufs[i].tier, k->bufs[i].offset,
                   k->bufs[i].offset + k->bufs[i].numel * kbuf_elem_bytes(&k->bufs[i]), k->bufs[i].tier != TIER_PARAMS};
  return k->nbufs;
}

/* ---- the simulation --------------------------------------------------------------------------- */

typedef struct Sim {
  Program *p;
  OffloadPlan *op;
  const OffloadOptions *o;
  int nitems;                /* chunk * PART_COUNT + part */
  Loc *where;                /* [nitems] where the valid copy is (params: home stays valid too) */
  bool *dev;                 /* [nitems] on the device */
  bool *host;                /* [nitems] memory on the host */
  bool *pending;             /* [nitems] a move was issued and not waited for */
  int64_t cap;               /* room for chunk parts on the device */
  int64_t dev_used;          /* page-rounded bytes, the accounting that keeps under cap */
  PSeq out;                  /* the list being written */
  int **uses, *nuses, *next; /* [nitems] step instruction indices using the item */
  double t_main, t_copy;     /* the timeline */
  double *done_at;           /* [nitems] when its last issued transfer completes */
  int point;
  int ranks;   /* the op's per-rank figures: dp with ZeRO-3, else 1 */
  bool zero3;  /* chunks dealt to owners (codegen/offload.h) */
  bool *bcast; /* [nitems] ZeRO-3: a device copy of parameters filled from
                * its owner since it came */
} Sim;

static int64_t part_size(const Sim *S, int item) {
  return part_bytes_of(S->p, S->op, item / PART_COUNT, item % PART_COUNT);
}

static IsaInstr *put(Sim *S, IsaOp op) { return pseq_push(S->p->arena, &S->out, op); }

static double bandwidth(const Sim *S, Loc a, Loc b) {
  if (a == LOC_NVME || b == LOC_NVME) return S->o->cl ? S->o->cl->nvme_bw : 3e9;
  return S->o->cl ? S->o->cl->host_link_bw : 25e9;
}

/* Memory at a location: the pages of the parts there, each page once (as the runtime
 * commits them), tier by tier; the optimizer part is two ranges of OPT (m and v). Of
 * rank r (-1: every chunk): the device holds every rank's chunks alike, the host and
 * NVMe only the chunks r holds (its own under ZeRO-3). */
static bool is_at(const Sim *S, int it, Loc at, int r) {
  const OChunk *c = &S->op->chunk[it / PART_COUNT];
  if (at != LOC_DEVICE && r >= 0 && c->owner >= 0 && c->owner != r) return false;
  return at == LOC_DEVICE ? S->dev[it] : at == LOC_HOST ? S->host[it] : c->home[it % PART_COUNT] == LOC_NVME;
}

/* The pages of the part's ranges at `at` not already counted below *last (ranges come
 * in increasing order, m's then v's, so a page they share counts once). */
static int64_t union_pages(const Sim *S, Loc at, int r, int part, int64_t shift, int64_t *lastp) {
  int64_t total = 0, last = *lastp;
  for (int c = 0; c < S->op->nchunks; c++) {
    if (!is_at(S, c * PART_COUNT + part, at, r)) continue;
    int64_t lo = down(shift + S->op->chunk[c].start, GRANULE), hi = up(shift + S->op->chunk[c].end, GRANULE);
    if (lo < last) lo = last;
    if (hi > lo) total += hi - lo;
    if (hi > last) last = hi;
  }
  *lastp = last;
  return total;
}

static int64_t pages_at(const Sim *S, Loc at, int r) {
  int64_t lp = -1, lg = -1, lo = -1;
  int64_t total = union_pages(S, at, r, PART_PARAMS, 0, &lp) + union_pages(S, at, r, PART_GRADS, 0, &lg) +
                  union_pages(S, at, r, PART_OPT, 0, &lo);
  if (S->p->opt_v_offset && train_moments(&S->p->g->train) == 2)
    total += union_pages(S, at, r, PART_OPT, S->p->opt_v_offset, &lo);
  return total;
}

/* The peaks over every state the moves pass through, in issue order (the order the
 * copy thread makes them in); a move puts memory at its destination before it frees
 * its source, so both count for a moment. The host's per rank (the most of them is
 * host_peak). */
static void peaks(Sim *S) {
  OffloadPlan *op = S->op;
  int64_t d = up(op->work_bytes, GRANULE) + pages_at(S, LOC_DEVICE, -1);
  if (d > op->device_peak) op->device_peak = d;
  for (int r = 0; r < S->ranks; r++) {
    int64_t h = pages_at(S, LOC_HOST, S->zero3 ? r : -1);
    if (h > op->rank_host_peak[r]) op->rank_host_peak[r] = h;
    if (h > op->host_peak) op->host_peak = h;
  }
}

static void sample(Sim *S) {
  OffloadPlan *op = S->op;
  peaks(S);
  op->dev_at[S->point] = up(op->work_bytes, GRANULE) + pages_at(S, LOC_DEVICE, -1);
  op->host_at[S->point] = pages_at(S, LOC_HOST, -1);
  S->point++;
}

/* Bytes a move copies: the part's range (twice for AdamW's m and v). */
static int64_t copy_bytes(const Sim *S, int item) {
  const OChunk *c = &S->op->chunk[item / PART_COUNT];
  int64_t b = c->end - c->start;
  return item % PART_COUNT == PART_OPT && train_moments(&S->p->g->train) == 2 ? 2 * b : b;
}

static int owner_of(const Sim *S, int item) { return S->op->chunk[item / PART_COUNT].owner; }

/* A copy from or to the host or NVMe: its owner's (every rank's without ZeRO-3). */
static void transfer(Sim *S, int item, Loc from, Loc to) {
  int64_t b = copy_bytes(S, item);
  if (from == LOC_ZERO) return;
  double t = (double)b / bandwidth(S, from, to);
  S->t_copy = fmax(S->t_copy, S->t_main) + t;
  S->done_at[item] = S->t_copy;
  S->op->transfer_bytes += b;
  S->op->transfer_s += t;
  for (int r = 0; r < S->ranks; r++)
    if (owner_of(S, item) < 0 || owner_of(S, item) == r) S->op->rank_transfer[r] += b;
}

static void event(Sim *S, int item, Loc from, Loc to) {
  OffloadPlan *op = S->op;
  int *e = op->event[op->nevents++];
  e[0] = S->point, e[1] = item / PART_COUNT, e[2] = item % PART_COUNT, e[3] = from, e[4] = to;
}

static void put_move(Sim *S, int item, Loc from, Loc to, bool keep, int rank) {
  IsaInstr *in = put(S, ISA_MOVE);
  in->move = (IsaMove){.chunk = item / PART_COUNT, .part = item % PART_COUNT, .from = from, .to = to, .keep = keep};
  in->dp_rank = (int16_t)rank;
}

static void put_drop(Sim *S, int item, Loc at, int rank) {
  IsaInstr *in = put(S, ISA_DROP);
  in->move = (IsaMove){.chunk = item / PART_COUNT, .part = item % PART_COUNT, .from = at};
  in->dp_rank = (int16_t)rank;
}

/* A move of the owner's copy (every rank's without ZeRO-3, or from zero: every rank
 * creates it). Under ZeRO-3 the other ranks create their device copy when it comes to
 * the device and drop it when it leaves. */
static void move(Sim *S, int item, Loc from, Loc to, bool keep) {
  int o = from == LOC_ZERO ? -1 : owner_of(S, item);
  put_move(S, item, from, to, keep, o);
  for (int r = 0; r < S->ranks && o >= 0; r++)
    if (r != o && to == LOC_DEVICE) put_move(S, item, LOC_ZERO, LOC_DEVICE, false, r);
    else if (r != o && from == LOC_DEVICE) put_drop(S, item, LOC_DEVICE, r);
  transfer(S, item, from, to);
  event(S, item, from, to);
  if (to == LOC_DEVICE) S->dev[item] = true, S->dev_used += part_size(S, item);
  if (to == LOC_HOST) S->host[item] = true;
  peaks(S);
  if (!keep && from == LOC_DEVICE) S->dev[item] = false, S->dev_used -= part_size(S, item);
  if (!keep && from == LOC_HOST) S->host[item] = false;
  S->where[item] = to;
  S->pending[item] = true;
}

/* A drop at the device is every rank's (each holds a copy there), elsewhere the owner's. */
static void drop(Sim *S, int item, Loc at) {
  put_drop(S, item, at, at == LOC_DEVICE ? -1 : owner_of(S, item));
  if (at == LOC_DEVICE) S->bcast[item] = false;
  event(S, item, at, LOC_NONE);
  if (at == LOC_DEVICE) S->dev[item] = false, S->dev_used -= part_size(S, item);
  if (at == LOC_HOST) S->host[item] = false;
  if (S->where[item] == at) S->where[item] = LOC_NONE;
  S->pending[item] = true;
}

static void wait_for(Sim *S, int item) {
  if (!S->pending[item]) return;
  IsaInstr *in = put(S, ISA_WAIT);
  in->move = (IsaMove){.chunk = item / PART_COUNT, .part = item % PART_COUNT};
  if (S->done_at[item] > S->t_main) S->op->exposed_s += S->done_at[item] - S->t_main, S->t_main = S->done_at[item];
  S->pending[item] = false;
}

static double next_use(const Sim *S, int item) {
  return S->next[item] < S->nuses[item] ? S->uses[item][S->next[item]] : INF;
}

/* ZeRO-3: one collective over the dp group on a chunk's parameters (a broadcast from
 * its owner) or gradients (a reduce onto it), in place. */
static void chunk_comm(Sim *S, IsaCommKind kind, int item) {
  const OChunk *c = &S->op->chunk[item / PART_COUNT];
  int tier = item % PART_COUNT == PART_PARAMS ? TIER_PARAMS : TIER_GRADS;
  int64_t end = c->end < S->p->tiers[tier] ? c->end : S->p->tiers[tier];
  IsaInstr *in = put(S, ISA_COMM);
  in->comm = (IsaComm){.kind = kind,
                       .tier = {tier, tier},
                       .off = {c->start, c->start},
                       .outer = 1,
                       .n = (end - c->start) / 4,
                       .inner = 1,
                       .group = ISA_GROUP_DP,
                       .root = c->owner};
  /* in order with the compute, priced as the broadcast or reduce of the chunk over the dp
   * group */
  const Cluster *cl = S->o->cl;
  if (!cl || S->ranks < 2) return;
  int local = cl->gpus_per_node < S->ranks ? cl->gpus_per_node : S->ranks;
  Group g = {S->ranks, local > 0 ? local : 1};
  double t =
      cost_collective(cl, kind == ISA_COMM_BROADCAST ? COLL_BROADCAST : COLL_REDUCE, (double)(end - c->start), g);
  S->t_main += t, S->op->comm_s += t;
}

/* A part leaves the device: a clean parameter copy is dropped, a gradient goes home
 * (under ZeRO-3 summed onto its owner first). */
static void evict(Sim *S, int item) {
  if (item % PART_COUNT != PART_GRADS) {
    drop(S, item, LOC_DEVICE);
    return;
  }
  if (S->zero3) chunk_comm(S, ISA_COMM_REDUCE, item);
  move(S, item, LOC_DEVICE, LOC_HOST, false);
}

/* The part comes to the device. */
static void fetch(Sim *S, int item) {
  int part = item % PART_COUNT;
  const OChunk *c = &S->op->chunk[item / PART_COUNT];
  if (part == PART_PARAMS)
    move(S, item, c->home[PART_PARAMS], LOC_DEVICE, true), S->op->chunk[item / PART_COUNT].fetches++;
  else if (S->where[item] == LOC_NONE) move(S, item, LOC_ZERO, LOC_DEVICE, false);
  else move(S, item, S->where[item], LOC_DEVICE, false);
}

static bool needed(const int *need, int nn, int item) {
  for (int i = 0; i < nn; i++)
    if (need[i] == item) return true;
  return false;
}

/* Room for size bytes, evicting the resident parts used furthest ahead (not need). */
static void make_room(Sim *S, int64_t size, const int *need, int nn, int at) {
  while (S->dev_used + size > S->cap) {
    int victim = -1;
    double far = -1;
    for (int it = 0; it < S->nitems; it++)
      if (S->dev[it] && !needed(need, nn, it) && next_use(S, it) > far) far = next_use(S, it), victim = it;
    if (victim < 0)
      error_plain("the device memory (%.1f MiB) cannot hold what instruction %d needs: %.1f MiB of parameters and "
                  "gradients beside %.1f MiB of activations (the work tier); give more device memory",
                  S->op->capacity / 1048576.0, at, (double)(S->dev_used + size) / 1048576.0,
                  S->op->work_bytes / 1048576.0);
    evict(S, victim);
  }
}

/* The chunk parts instruction in touches (once each), into need. */
static int parts_of(const Sim *S, const IsaInstr *in, int *need, int max, bool step) {
  Touch t[K_MAX_BUFS > 3 ? K_MAX_BUFS : 3];
  int nt = instr_touch(S->p, in, t), nn = 0;
  for (int i = 0; i < nt; i++) {
    int part = t[i].tier == TIER_PARAMS  ? PART_PARAMS
               : t[i].tier == TIER_GRADS ? PART_GRADS
               : t[i].tier == TIER_OPT   ? PART_OPT
                                         : -1;
    if (part < 0 || (step && part == PART_OPT)) continue;
    int64_t lo = t[i].lo, hi = t[i].hi;
    if (part == PART_OPT && S->p->opt_v_offset && lo >= S->p->opt_v_offset)
      lo -= S->p->opt_v_offset, hi -= S->p->opt_v_offset;
    for (int c = 0; c < S->op->nchunks; c++) {
      const OChunk *ch = &S->op->chunk[c];
      int it = c * PART_COUNT + part;
      if (ch->start < hi && lo < ch->end && !needed(need, nn, it)) {
        ir_assert(nn < max);
        need[nn++] = it;
      }
    }
  }
  return nn;
}

static double instr_time(const Sim *S, const IsaInstr *in) {
  const Cluster *cl = S->o->cl;
  if (!cl) return 0;
  if (in->op == ISA_GEMM) {
    const IsaGemm *g = &in->gemm;
    double f = 2.0 * g->m * g->n * g->k * g->batch[0] * g->batch[1];
    return f / (cl->dev.peak_fp32 * cl->dev.gemm_eff);
  }
  if (in->op == ISA_KERNEL) {
    const Kernel *k = S->p->kernels[in->kernel.id];
    double bytes = 0;
    for (int i = 0; i < k->nbufs; i++) bytes += (double)k->bufs[i].numel * kbuf_elem_bytes(&k->bufs[i]);
    return bytes / (cl->dev.memory_bw * cl->dev.mem_eff) + cl->dev.kernel_overhead;
  }
  return 0;
}

static void run_instr(Sim *S, const IsaInstr *in, bool on_host) {
  IsaInstr *x = put(S, (IsaOp)in->op);
  *x = *in;
  if (x->op == ISA_KERNEL) x->kernel.on_host = on_host;
  double t = instr_time(S, in);
  S->t_main += t;
  S->op->compute_s += t;
  sample(S);
}

/* step: forward and backward, parameters and gradients through the device. */
static void plan_step(Sim *S, const PSeq *step) {
  int n = step->n, nitems = S->nitems;
  int **need = arena_array(S->p->arena, n + 1, sizeof *need), *nneed = arena_array(S->p->arena, n + 1, sizeof(int));
  S->uses = arena_array(S->p->arena, nitems, sizeof *S->uses);
  S->nuses = arena_array(S->p->arena, nitems, sizeof(int));
  S->next = arena_array(S->p->arena, nitems, sizeof(int));
  int max = K_MAX_BUFS * S->op->nchunks + 4, *parts = arena_array(S->p->arena, max, sizeof(int));
  for (int i = 0; i < n; i++) { /* each instruction's list as long as it is (not max: GPT-3's would take GBs) */
    nneed[i] = parts_of(S, &step->v[i], parts, max, true);
    need[i] = arena_array(S->p->arena, nneed[i] + 1, sizeof(int));
    memcpy(need[i], parts, (size_t)nneed[i] * sizeof(int));
    for (int j = 0; j < nneed[i]; j++) S->nuses[need[i][j]]++;
  }
  for (int it = 0; it < nitems; it++)
    S->uses[it] = arena_array(S->p->arena, S->nuses[it] + 1, sizeof(int)), S->nuses[it] = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < nneed[i]; j++) S->uses[need[i][j]][S->nuses[need[i][j]]++] = i;
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < nneed[i]; j++) {
      int it = need[i][j];
      if (S->dev[it]) continue;
      make_room(S, part_size(S, it), need[i], nneed[i], i);
      fetch(S, it);
    }
    for (int j = 0; j < nneed[i]; j++) wait_for(S, need[i][j]);
    for (int j = 0; j < nneed[i] && S->zero3; j++) /* the owner's copy has landed: to every rank */
      if (need[i][j] % PART_COUNT == PART_PARAMS && !S->bcast[need[i][j]])
        chunk_comm(S, ISA_COMM_BROADCAST, need[i][j]), S->bcast[need[i][j]] = true;
    run_instr(S, &step->v[i], false);
    for (int j = 0; j < nneed[i]; j++) {
      int it = need[i][j];
      S->next[it]++;
      if (S->next[it] == S->nuses[it]) evict(S, it); /* not used again in the step */
    }
    /* prefetch what the next instructions need into the free room */
    for (int k = i + 1, seen = 0; k < n && seen < WINDOW; k++) {
      if (!nneed[k]) continue;
      seen++;
      for (int j = 0; j < nneed[k]; j++) {
        int it = need[k][j];
        if (!S->dev[it] && S->dev_used + part_size(S, it) <= S->cap) fetch(S, it);
      }
    }
  }
  for (int it = 0; it < nitems; it++)
    if (S->dev[it]) evict(S, it);
}

static void chunk_parts_kernels(const Sim *S, const PSeq *s, int *chunk_of) {
  int max = K_MAX_BUFS * S->op->nchunks + 4, *need = arena_array(S->p->arena, max, sizeof(int));
  for (int i = 0; i < s->n; i++) {
    int nn = parts_of(S, &s->v[i], need, max, false);
    chunk_of[i] = nn ? need[0] / PART_COUNT : -1;
  }
}

/* gradnorm and update: on the host, chunk by chunk; parts homed in NVMe come to the
 * host for their chunk's update (the next chunk's read issued before this one's
 * kernels) and go back after it. A kernel waits for every part it touches: a
 * multi-tensor norm kernel (codegen/compose.h) reads the gradients of several chunks.
 * LAMB's update passes over the chunks three times (moments, norms, the update after
 * "trust": codegen/compose.h), each pass as one; a chunk's gradients go after the last
 * kernel that reads them. */
static void plan_host_list(Sim *S, const PSeq *list, bool update) {
  int *chunk_of = arena_array(S->p->arena, list->n + 1, sizeof(int));
  chunk_parts_kernels(S, list, chunk_of);
  int parts[2] = {PART_OPT, PART_PARAMS}, max = K_MAX_BUFS * S->op->nchunks + 4;
  int *need = arena_array(S->p->arena, max, sizeof(int)), *grads_last = NULL;
  if (update) {
    grads_last = arena_array(S->p->arena, S->op->nchunks + 1, sizeof(int));
    for (int c = 0; c < S->op->nchunks; c++) grads_last[c] = -1;
    for (int i = 0; i < list->n; i++)
      for (int j = 0, nn = parts_of(S, &list->v[i], need, max, false); j < nn; j++)
        if (need[j] % PART_COUNT == PART_GRADS) grads_last[need[j] / PART_COUNT] = i;
  }
  for (int i = 0; i < list->n; i++) {
    int c = chunk_of[i];
    bool first = c >= 0 && (i == 0 || chunk_of[i - 1] != c);
    if (first && update)
      for (int nc = c; nc <= c + 1 && nc < S->op->nchunks; nc++) /* this chunk (if not prefetched) and the next */
        for (int k = 0; k < 2; k++) {
          int it = nc * PART_COUNT + parts[k];
          if (S->op->chunk[nc].home[parts[k]] == LOC_NVME && !S->host[it]) move(S, it, LOC_NVME, LOC_HOST, false);
        }
    if (first) {
      wait_for(S, c * PART_COUNT + PART_GRADS);
      if (update) wait_for(S, c * PART_COUNT + PART_OPT), wait_for(S, c * PART_COUNT + PART_PARAMS);
    }
    for (int j = 0, nn = parts_of(S, &list->v[i], need, max, false); j < nn; j++) wait_for(S, need[j]);
    run_instr(S, &list->v[i], c >= 0);
    bool last = c >= 0 && (i + 1 == list->n || chunk_of[i + 1] != c);
    if (update && c >= 0 && grads_last[c] == i) drop(S, c * PART_COUNT + PART_GRADS, LOC_HOST);
    if (last && update) {
      for (int k = 0; k < 2; k++)
        if (S->op->chunk[c].home[parts[k]] == LOC_NVME) move(S, c * PART_COUNT + parts[k], LOC_HOST, LOC_NVME, false);
    }
  }
  if (update)
    for (int it = 0; it < S->nitems; it++) wait_for(S, it); /* every part home before the step ends */
}

/* ---- the plan ----------------------------------------------------------------------------------- */

/* Homes, for each rank's chunks (every chunk without ZeRO-3): its share of the host
 * (o->host_memory over the ranks sharing a node) holds the parameters and, after
 * backward, the gradients when it can, else the parameters live on NVMe too; the
 * optimizer state stays on the host chunk by chunk while the rest of the share holds
 * it (less two chunks' worth, which the update brings up from NVMe), the remainder on
 * NVMe. Unlimited host memory (0): everything on the host. */
static void choose_homes(Program *p, OffloadPlan *op, const OffloadOptions *o, int ranks) {
  int per_node = o->ranks_per_node > 1 ? (o->ranks_per_node < ranks ? o->ranks_per_node : ranks) : 1;
  int64_t share = o->host_memory / per_node, most_opt = 0;
  for (int c = 0; c < op->nchunks; c++) {
    int64_t ob = part_bytes_of(p, op, c, PART_OPT);
    most_opt = ob > most_opt ? ob : most_opt;
  }
  for (int r = 0; r < ranks; r++) {
    int64_t params = 0;
    for (int c = 0; c < op->nchunks; c++)
      if (op->chunk[c].owner < 0 || op->chunk[c].owner == r) params += part_bytes_of(p, op, c, PART_PARAMS);
    bool ph = o->host_memory <= 0 || 2 * params <= share;
    int64_t room = o->host_memory <= 0 ? INT64_MAX : share - (ph ? 2 * params : params) - 2 * most_opt;
    for (int c = 0; c < op->nchunks; c++) {
      OChunk *ch = &op->chunk[c];
      if (ch->owner >= 0 && ch->owner != r) continue;
      int64_t ob = part_bytes_of(p, op, c, PART_OPT);
      ch->home[PART_PARAMS] = ph ? LOC_HOST : LOC_NVME, ch->home[PART_GRADS] = LOC_NONE;
      ch->home[PART_OPT] = !p->tiers[TIER_OPT] ? LOC_NONE : ob <= room ? LOC_HOST : LOC_NVME;
      if (ch->home[PART_OPT] == LOC_HOST) room -= ob;
    }
  }
}

/* ZeRO-3: whole chunks to the ranks, the largest first to the least loaded (ties: the
 * lower rank), each parameter owned by its chunk's owner. */
static void deal_chunks(Program *p, OffloadPlan *op, int ranks) {
  int64_t *load = arena_array(p->arena, ranks, sizeof *load);
  bool *dealt = arena_array(p->arena, op->nchunks + 1, sizeof *dealt);
  for (int n = 0; n < op->nchunks; n++) {
    int c = -1, r = 0;
    for (int k = 0; k < op->nchunks; k++)
      if (!dealt[k] && (c < 0 || op->chunk[k].end - op->chunk[k].start > op->chunk[c].end - op->chunk[c].start)) c = k;
    for (int k = 1; k < ranks; k++) r = load[k] < load[r] ? k : r;
    dealt[c] = true, load[r] += op->chunk[c].end - op->chunk[c].start, op->chunk[c].owner = r;
    for (int k = op->chunk[c].lo; k < op->chunk[c].hi; k++) p->params[k].owner = r;
  }
}

/* The work tier (every slot of a pipeline stage) with the collectives' staging buffer
 * (program_staging; compose adds no collective that reorders), and the state, at granules,
 * as the runtime holds them. */
static int64_t work_of(const Program *p) {
  return up(program_work_bytes(p), GRANULE) + up(program_staging(p), GRANULE);
}
static int64_t state_of(const Program *p) {
  return up(p->tiers[TIER_PARAMS], GRANULE) + up(p->tiers[TIER_GRADS], GRANULE) + up(p->tiers[TIER_OPT], GRANULE);
}

OffloadPlan *offload_chunks(Program *p, const OffloadOptions *o) {
  Arena *a = p->arena;
  if (p->zero_stage == 1 || p->zero_stage == 2)
    error_plain(
        "--device-memory plans offload with ZeRO stage 0 (every rank holding the whole state at its homes) or 3 "
        "(each rank its own chunks), not %lld",
        (long long)p->zero_stage);
  bool zero3 = p->zero_stage == 3;
  int ranks = zero3 ? (int)p->dp : 1;
  int64_t work = work_of(p), state = state_of(p);
  if (work + state <= o->device_memory) return NULL;
  int64_t room = o->device_memory - work;
  if (room <= 0)
    error_plain(
        "the device memory (%.1f MiB) does not hold the activations alone: the work tier (and staging) needs %.1f MiB "
        "(recompute or a smaller micro-batch lowers it)",
        o->device_memory / 1048576.0, work / 1048576.0);
  OffloadPlan *op = arena_alloc(a, sizeof *op);
  *op = (OffloadPlan){.capacity = o->device_memory, .work_bytes = work, .state_bytes = state, .granule = GRANULE};
  /* a chunk's parameters and gradients, and the next chunk's in flight, must fit; under
   * ZeRO-3 no chunk above a rank's share, when the largest parameter allows it */
  int64_t largest = 0, most = room / 4 - 2 * GRANULE, share = up(p->tiers[TIER_PARAMS] / ranks, 64);
  for (int k = 0; k < p->nparams; k++) largest = pbytes(p, k) > largest ? pbytes(p, k) : largest;
  if (ranks > 1 && share >= largest && share < most) most = share;
  op->chunk_bytes = choose_chunk(p, most, &op->waste);
  if (op->chunk_bytes < 0) {
    error_plain(
        "the device memory (%.1f MiB) is too small: beside %.1f MiB of activations (and staging) it must hold the largest "
        "parameter (%.1f MiB) with its gradient, and the next ones in flight: at least %.1f MiB",
        o->device_memory / 1048576.0, work / 1048576.0, largest / 1048576.0,
        (work + 4 * (largest + 2 * GRANULE)) / 1048576.0);
  }
  op->chunk = arena_array(a, p->nparams + 1, sizeof *op->chunk);
  op->nchunks = pack(p, op->chunk_bytes, op->chunk, &op->waste);
  for (int c = 0; c < op->nchunks; c++) op->chunk[c].owner = -1;
  if (zero3) deal_chunks(p, op, ranks);
  op->ranks = ranks;
  op->rank_host_peak = arena_array(a, ranks, sizeof(int64_t));
  op->rank_nvme_peak = arena_array(a, ranks, sizeof(int64_t));
  op->rank_transfer = arena_array(a, ranks, sizeof(int64_t));
  choose_homes(p, op, o, ranks);
  return op;
}

void offload_plan(Program *p, OffloadPlan *op, const OffloadOptions *o) {
  Arena *a = p->arena;
  ir_assert((p->microbatches == 1 || p->scheduled) && !p->offload);
  int ranks = op->ranks;
  bool zero3 = p->zero_stage == 3;
  Sim S = {.p = p,
           .op = op,
           .o = o,
           .nitems = op->nchunks * PART_COUNT,
           .cap = op->capacity - op->work_bytes,
           .ranks = ranks,
           .zero3 = zero3};
  S.bcast = arena_array(a, S.nitems, sizeof *S.bcast);
  S.where = arena_array(a, S.nitems, sizeof *S.where);
  S.dev = arena_array(a, S.nitems, sizeof *S.dev);
  S.host = arena_array(a, S.nitems, sizeof *S.host);
  S.pending = arena_array(a, S.nitems, sizeof *S.pending);
  S.done_at = arena_array(a, S.nitems, sizeof *S.done_at);
  for (int c = 0; c < op->nchunks; c++)
    for (int part = 0; part < PART_COUNT; part++) {
      int it = c * PART_COUNT + part;
      S.where[it] = op->chunk[c].home[part];
      S.host[it] = S.where[it] == LOC_HOST;
    }
  int total = p->step.n + p->sync.n + p->gradnorm.n + p->update.n + 1;
  op->dev_at = arena_array(a, total, sizeof *op->dev_at);
  op->host_at = arena_array(a, total, sizeof *op->host_at);
  op->phase_end = arena_array(a, 3, sizeof(int));
  op->event = arena_array(a, 8 * (total + S.nitems) + 64, sizeof *op->event);
  for (int r = 0; r < ranks; r++) { /* nvme_peak: the most of a rank */
    op->rank_nvme_peak[r] = pages_at(&S, LOC_NVME, zero3 ? r : -1);
    op->nvme_peak = op->rank_nvme_peak[r] > op->nvme_peak ? op->rank_nvme_peak[r] : op->nvme_peak;
  }
  PSeq step = p->step, sync = p->sync, gn = p->gradnorm, upd = p->update;
  plan_step(&S, &step);
  p->step = S.out, S.out = (PSeq){0};
  if (sync.n) { /* the tied weights' sums: their gradients come back to the device for it */
    plan_step(&S, &sync);
    p->sync = S.out, S.out = (PSeq){0};
  }
  op->phase_end[0] = S.point;
  plan_host_list(&S, &gn, false);
  p->gradnorm = S.out, S.out = (PSeq){0};
  op->phase_end[1] = S.point;
  plan_host_list(&S, &upd, true);
  p->update = S.out;
  op->phase_end[2] = op->npoints = S.point;
  for (int it = 0; it < S.nitems; it++) /* the cycle closes: every part at home */
    if (S.dev[it] || (it % PART_COUNT == PART_GRADS && S.host[it]))
      diag_internal(__FILE__, __LINE__, "offload: a part is not home at the end of the step");
  p->offload = op;
  p->zero_scheduled = zero3; /* its gathers and reductions are in `step` */
}

/* ---- showing it --------------------------------------------------------------------------------- */

static double mib(int64_t b) { return (double)b / 1048576.0; }

void offload_print(FILE *f, const Program *p, const OffloadPlan *op) {
  fprintf(f, "offload plan for %s: device %.1f MiB (%.1f MiB of activations, the work tier; the rest for chunks)\n",
          p->g->name, mib(op->capacity), mib(op->work_bytes));
  fprintf(f, "  training state %.1f MiB (%.1fx the device): %d chunks of up to %.2f MiB, %.2f MiB wasted\n",
          mib(op->state_bytes), (double)op->state_bytes / (double)op->capacity, op->nchunks, mib(op->chunk_bytes),
          mib(op->waste));
  if (op->ranks > 1) {
    fprintf(f,
            "  ZeRO-3 over %d data-parallel ranks: each holds its own chunks at their homes; a chunk comes to every\n"
            "  rank's device from its owner (a broadcast), its gradients go back summed onto the owner (a reduce)\n",
            op->ranks);
    fprintf(f, "  predicted peak: device %.2f MiB on every rank\n", mib(op->device_peak));
    for (int r = 0; r < op->ranks; r++)
      fprintf(f, "    rank %d: host %.2f MiB, nvme %.2f MiB, moved %.2f MiB a step\n", r, mib(op->rank_host_peak[r]),
              mib(op->rank_nvme_peak[r]), mib(op->rank_transfer[r]));
  } else
    fprintf(f, "  predicted peak: device %.2f MiB, host %.2f MiB, nvme %.2f MiB\n", mib(op->device_peak),
            mib(op->host_peak), mib(op->nvme_peak));
  fprintf(f, "  transfers %.2f MiB a step: %.4f s of copies, %.4f s hidden behind %.4f s of compute, %.4f s exposed\n",
          mib(op->transfer_bytes), op->transfer_s,
          op->transfer_s - op->exposed_s < 0 ? 0 : op->transfer_s - op->exposed_s, op->compute_s, op->exposed_s);
  if (op->ranks > 1)
    fprintf(f, "  ZeRO-3's broadcasts and reduces: %.4f s a step, in order with the compute\n", op->comm_s);
  fprintf(f, "  chunk placement per phase (home: between steps; forward/backward: fetched to the device as used;\n"
             "  gradient norm and optimizer on the host):\n");
  fprintf(f, "  chunk  parameters                               MiB   params  grads  opt   fetches a step%s\n",
          op->ranks > 1 ? "  owner" : "");
  for (int c = 0; c < op->nchunks; c++) {
    const OChunk *ch = &op->chunk[c];
    char range[48];
    snprintf(range, sizeof range, "%s..", p->params[ch->lo].node->name);
    fprintf(f, "  %5d  %-36.36s %7.2f   %-6s  %-5s  %-5s %-14d", c, range, mib(ch->end - ch->start),
            isa_loc_names[ch->home[PART_PARAMS]], "host", isa_loc_names[ch->home[PART_OPT]], ch->fetches);
    if (op->ranks > 1) fprintf(f, "  %d", ch->owner);
    fputc('\n', f);
  }
}

void offload_svg(FILE *f, const Program *p, const OffloadPlan *op) {
  const int W = 900, H = 360, L = 70, T = 40, PW = W - L - 20, PH = 220;
  int64_t top = op->capacity > op->host_peak ? op->capacity : op->host_peak;
  if (top <= 0) top = 1;
  int n = op->npoints > 1 ? op->npoints : 2;
  fprintf(
      f,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n",
      W, H);
  fprintf(f, "<title>offload plan for %s: memory per tier over one step</title>\n", p->g->name);
  fprintf(f, "<text x=\"%d\" y=\"20\">%s: device and host memory over one step (device capacity %.1f MiB)</text>\n", L,
          p->g->name, mib(op->capacity));
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", L, T, PW, PH);
  double cy = T + PH - (double)op->capacity / (double)top * PH;
  fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/>\n", L, cy,
          L + PW, cy);
  fprintf(f, "<text x=\"%d\" y=\"%.1f\" fill=\"#c00\">capacity</text>\n", L + PW - 60, cy - 4);
  const char *color[2] = {"#1f77b4", "#2ca02c"}, *name[2] = {"device", "host"};
  for (int s = 0; s < 2; s++) {
    const int64_t *v = s ? op->host_at : op->dev_at;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color[s]);
    for (int i = 0; i < op->npoints; i++)
      fprintf(f, "%.1f,%.1f ", L + (double)i / (n - 1) * PW, T + PH - (double)v[i] / (double)top * PH);
    fprintf(f, "\"/>\n<text x=\"%d\" y=\"%d\" fill=\"%s\">%s (peak %.1f MiB)</text>\n", L + 10 + 200 * s, T + PH + 40,
            color[s], name[s], mib(s ? op->host_peak : op->device_peak));
  }
  const char *phase[3] = {"forward + backward", "gradient norm", "optimizer"};
  for (int k = 0, start = 0; k < 3; k++) {
    double x = L + (double)op->phase_end[k] / (n - 1) * PW;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#aaa\"/>\n", x, T, x, T + PH);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" fill=\"#555\">%s</text>\n", L + (double)start / (n - 1) * PW + 3, T + 14,
            phase[k]);
    start = op->phase_end[k];
  }
  /* moves: a tick per move under the plot, colored by destination */
  for (int e = 0; e < op->nevents; e++) {
    double x = L + (double)op->event[e][0] / (n - 1) * PW;
    int to = op->event[e][4];
    const char *c = to == LOC_DEVICE ? "#1f77b4" : to == LOC_HOST ? "#2ca02c" : to == LOC_NVME ? "#9467bd" : "#bbb";
    fprintf(
        f,
        "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\"><title>chunk %d %s: %s to %s</title></line>\n",
        x, T + PH + 6, x, T + PH + 18, c, op->event[e][1], isa_part_names[op->event[e][2]],
        isa_loc_names[op->event[e][3]], isa_loc_names[op->event[e][4]]);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#555\">moves (to device, host, nvme, dropped)</text>\n", L, T + PH + 62);
  fprintf(f, "<text x=\"5\" y=\"%d\">%.0f MiB</text><text x=\"5\" y=\"%d\">0</text>\n", T + 10, mib(top), T + PH);
  fprintf(f, "</svg>\n");
}
