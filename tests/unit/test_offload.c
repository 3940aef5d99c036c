/* Offload plans (codegen/offload.h), checked by an independent walk over the lists
 * they write: for device budgets down to a quarter of the training state (and a host
 * budget that sends the optimizer state, then the parameters, to NVMe), every kernel
 * and GEMM of the step finds the parameter and gradient parts it touches on the
 * device with no move in flight, every gradient-norm and optimizer kernel finds its
 * parts on the host, the device never holds more than its capacity (work tier plus the
 * committed pages of the parts there, counted as the runtime counts them), the step
 * ends with every part at home and the gradients gone, and the plan's predicted peaks
 * equal the walk's. A budget below what one instruction needs is refused.
 *
 * Usage: test_offload MODEL [NAME=VALUE ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/offload.h"
#include "tests/common/lowered.h"

enum { G = 4096 };
static int64_t up(int64_t x) { return (x + G - 1) / G * G; }
static int64_t down(int64_t x) { return x / G * G; }

typedef struct W {
  const Program *p;
  const OffloadPlan *op;
  bool *dev, *host, *busy; /* per chunk * 3 + part */
  int64_t dev_peak, host_peak;
  int fails;
} W;

static int64_t pages(const W *w, const bool *at, int part, int64_t shift, int64_t *lastp) {
  int64_t t = 0, last = *lastp;
  for (int c = 0; c < w->op->nchunks; c++) {
    if (!at[c * 3 + part]) continue;
    int64_t lo = down(shift + w->op->chunk[c].start), hi = up(shift + w->op->chunk[c].end);
    if (lo < last) lo = last;
    if (hi > lo) t += hi - lo;
    if (hi > last) last = hi;
  }
  *lastp = last;
  return t;
}

static int64_t held(const W *w, const bool *at) {
  int64_t a = -1, b = -1, c = -1;
  int64_t t = pages(w, at, PART_PARAMS, 0, &a) + pages(w, at, PART_GRADS, 0, &b) + pages(w, at, PART_OPT, 0, &c);
  if (w->p->g->train.opt == OPT_ADAMW) t += pages(w, at, PART_OPT, w->p->opt_v_offset, &c);
  return t;
}

static void account(W *w, const char *where) {
  int64_t d = up(w->op->work_bytes) + held(w, w->dev), h = held(w, w->host);
  if (d > w->op->capacity)
    printf("FAIL %s: the device holds %lld bytes, capacity %lld\n", where, (long long)d, (long long)w->op->capacity),
        w->fails++;
  if (d > w->dev_peak) w->dev_peak = d;
  if (h > w->host_peak) w->host_peak = h;
}

/* The parts whose bytes [lo, hi) of tier touch, checked present where they must be. */
static void check_touch(W *w, int tier, int64_t lo, int64_t hi, bool on_host, const char *where) {
  int part = tier == TIER_PARAMS ? PART_PARAMS : tier == TIER_GRADS ? PART_GRADS : tier == TIER_OPT ? PART_OPT : -1;
  if (part < 0) return;
  if (part == PART_OPT && lo >= w->p->opt_v_offset) lo -= w->p->opt_v_offset, hi -= w->p->opt_v_offset;
  for (int c = 0; c < w->op->nchunks; c++) {
    const OChunk *ch = &w->op->chunk[c];
    if (!(ch->start < hi && lo < ch->end)) continue;
    int it = c * 3 + part;
    bool ok = (on_host ? w->host[it] : w->dev[it]) && !w->busy[it];
    if (!ok)
      printf("FAIL %s: chunk %d %s not on the %s (or in flight)\n", where, c, isa_part_names[part],
             on_host ? "host" : "device"),
          w->fails++;
  }
}

static void walk(W *w, const PSeq *s, const char *list) {
  char where[96];
  for (int i = 0; i < s->n; i++) {
    const IsaInstr *in = &s->v[i];
    const IsaMove *m = &in->move;
    snprintf(where, sizeof where, "%s[%d]", list, i);
    int it = m->chunk * 3 + m->part;
    if (in->op == ISA_MOVE) {
      if (m->to == LOC_DEVICE) w->dev[it] = true;
      if (m->to == LOC_HOST) w->host[it] = true;
      account(w, where);
      if (!m->keep && m->from == LOC_DEVICE) w->dev[it] = false;
      if (!m->keep && m->from == LOC_HOST) w->host[it] = false;
      w->busy[it] = true;
    } else if (in->op == ISA_DROP) {
      if (m->from == LOC_DEVICE) w->dev[it] = false;
      if (m->from == LOC_HOST) w->host[it] = false;
      w->busy[it] = true;
    } else if (in->op == ISA_WAIT) {
      w->busy[it] = false;
    } else if (in->op == ISA_KERNEL) {
      const Kernel *k = w->p->kernels[in->kernel.id];
      for (int b = 0; b < k->nbufs; b++)
        check_touch(w, k->bufs[b].tier, k->bufs[b].offset, k->bufs[b].offset + k->bufs[b].numel * 4, in->kernel.on_host,
                    where);
    } else if (in->op == ISA_GEMM) {
      const IsaGemm *g = &in->gemm;
      for (int j = 0; j < 3; j++)
        check_touch(w, g->tier[j], g->off[j], g->off[j] + 4, false, where); /* its first element */
      if (g->bias || g->bgrad) check_touch(w, g->bias_tier, g->bias_off, g->bias_off + 4, false, where);
      if (g->aux || g->dgelu) check_touch(w, g->aux_tier, g->aux_off, g->aux_off + 4, false, where);
    } else if (in->op == ISA_ZERO) {
      check_touch(w, in->zero.tier, in->zero.offset, in->zero.offset + in->zero.bytes, false, where);
    }
  }
}

static int one(int argc, char **argv, double frac, int64_t host_limit, bool expect_nvme) {
  Arena *a = arena_new();
  char *args[32];
  for (int i = 0; i < argc && i < 32; i++) args[i] = strdup(argv[i]);
  Program *p = lowered_model(a, argc, args);
  if (!p) return 1;
  int64_t state = up(p->tiers[TIER_PARAMS]) + up(p->tiers[TIER_GRADS]) + up(p->tiers[TIER_OPT]);
  Cluster cl;
  cluster_from_profile(&cl, "cpu", 1, 1);
  OffloadOptions o = {
      .device_memory = up(p->tiers[TIER_WORK]) + (int64_t)(frac * (double)state), .host_memory = host_limit, .cl = &cl};
  int nstep = p->step.n;
  OffloadPlan *op = offload_chunks(p, &o);
  if (op) offload_plan(p, op, &o);
  W w = {.p = p, .op = op};
  if (!op) {
    printf("FAIL: budget %.2f of the state planned nothing\n", frac);
    return 1;
  }
  w.dev = calloc(op->nchunks * 3, 1), w.host = calloc(op->nchunks * 3, 1), w.busy = calloc(op->nchunks * 3, 1);
  bool nvme = false;
  for (int c = 0; c < op->nchunks; c++)
    for (int k = 0; k < 3; k++) {
      w.host[c * 3 + k] = op->chunk[c].home[k] == LOC_HOST;
      nvme |= op->chunk[c].home[k] == LOC_NVME;
    }
  if (nvme != expect_nvme)
    printf("FAIL: NVMe homes %s, expected %s\n", nvme ? "used" : "unused", expect_nvme ? "used" : "unused"), w.fails++;
  account(&w, "start");
  walk(&w, &p->step, "step");
  walk(&w, &p->gradnorm, "gradnorm");
  walk(&w, &p->update, "update");
  for (int c = 0; c < op->nchunks; c++)
    for (int k = 0; k < 3; k++) {
      int it = c * 3 + k;
      bool home_host = op->chunk[c].home[k] == LOC_HOST;
      if (w.dev[it] || w.busy[it] || w.host[it] != home_host)
        printf("FAIL end: chunk %d %s not (only) at its home %s\n", c, isa_part_names[k],
               isa_loc_names[op->chunk[c].home[k]]),
            w.fails++;
    }
  if (w.dev_peak != op->device_peak || w.host_peak != op->host_peak)
    printf("FAIL: predicted peaks device %lld host %lld, walked %lld and %lld\n", (long long)op->device_peak,
           (long long)op->host_peak, (long long)w.dev_peak, (long long)w.host_peak),
        w.fails++;
  int moves = 0;
  for (int i = 0; i < p->step.n; i++) moves += p->step.v[i].op == ISA_MOVE;
  printf("%s budget %.2f of the state (%.2f MiB of %.2f MiB, work %.2f MiB): %d chunks of %.2f MiB, step %d -> %d "
         "instructions (%d moves), peak device %.2f host %.2f nvme %.2f MiB, %.2f MiB moved, %.4f s exposed\n",
         argv[0], frac, o.device_memory / 1048576.0, state / 1048576.0, p->tiers[TIER_WORK] / 1048576.0, op->nchunks,
         op->chunk_bytes / 1048576.0, nstep, p->step.n, moves, op->device_peak / 1048576.0, op->host_peak / 1048576.0,
         op->nvme_peak / 1048576.0, op->transfer_bytes / 1048576.0, op->exposed_s);
  free(w.dev), free(w.host), free(w.busy);
  for (int i = 0; i < argc && i < 32; i++) free(args[i]);
  arena_free(a);
  return w.fails != 0;
}

/* A budget below one instruction's needs: the plan is refused with the numbers. */
static int refused(int argc, char **argv) {
  Arena *a = arena_new();
  char *args[32];
  for (int i = 0; i < argc && i < 32; i++) args[i] = strdup(argv[i]);
  Program *p = lowered_model(a, argc, args);
  int bad = 1;
  DiagJump j;
  diag_push(&j);
  FILE *saved = diag_stream;
  diag_stream = NULL;
  if (setjmp(j.jb)) {
    bad = !strstr(diag_last, "device memory");
    printf("a budget of the work tier and one page is refused: %s\n", diag_last);
  } else {
    OffloadOptions o = {.device_memory = up(p->tiers[TIER_WORK]) + G};
    offload_chunks(p, &o);
    printf("FAIL: a budget of the work tier and one page was accepted\n");
  }
  diag_pop(&j);
  diag_stream = saved;
  for (int i = 0; i < argc && i < 32; i++) free(args[i]);
  arena_free(a);
  return bad;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int fails = 0;
  const double fracs[] = {0.25, 0.4, 0.6, 0.9};
  for (int i = 0; i < 4; i++) fails += one(argc - 1, argv + 1, fracs[i], 0, false);
  fails += one(argc - 1, argv + 1, 0.25, 1, true); /* a host of one byte: the state goes to NVMe */
  fails += refused(argc - 1, argv + 1);
  printf("%s\n", fails ? "FAILED" : "ok");
  return fails != 0;
}
