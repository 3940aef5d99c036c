/* test_exec_comm: the executor's "comm" instruction (program/isa.h) of every kind over a
 * tp group of all ranks (1 alone, any number under mpirun), on an A x N x I tensor with
 * A = 3, N = 2 x ranks, I = 2, so the reorders of all_gather and reduce_scatter matter;
 * plus an in-place all_reduce, an all_reduce taking the largest (reduction max) and a
 * comm in the second of two WORK slots. The program is a stage's view over structs of
 * this file (program/program.h). Rank r's values f(r, a, n, i) are small integers and
 * halves, so every sum is exact and each result is checked element by element against
 * a plain loop. Rank 0 prints "N passed, M failed" for all ranks together.
 */
#include "runtime/comm/comm.h"
#include "runtime/executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { A = 3, I = 2 };

static Comm *c;
static int passed, failed;

static void check(int ok, const char *what) {
  ok ? passed++ : failed++;
  if (!ok) fprintf(stderr, "rank %d: FAIL: %s\n", c->rank, what);
}

static float f(int r, int a, int n, int i) { return 100.0f * (float)r + 10.0f * (float)a + (float)n + 0.5f * (float)i; }

static void dummy(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {}

/* Offsets (floats) in each slot: src 0, dst at whole(); one slot holds 2 tensors. */
static int64_t whole(void) { return (int64_t)A * 2 * c->size * I; }

/* The program: list 0 chooses slot 1 and runs the comm of kind (reduction red) from src to
 * dst; list 1 all-reduces slot 0's tensor in place. */
typedef struct CommProg {
  ProgStage s;
  IsaInstr v[3];
  ProgList lists[2];
  Prog p;
} CommProg;

static const Prog *comm_program(CommProg *cp, IsaCommKind kind, IsaRed red) {
  int64_t n = 2 * c->size;
  IsaComm comm = {.kind = kind,
                  .red = red,
                  .tier = {TIER_WORK, TIER_WORK},
                  .off = {0, whole() * 4},
                  .outer = A,
                  .n = n,
                  .inner = I};
  memset(cp, 0, sizeof *cp);
  cp->s = (ProgStage){
      .tiers = {4, 4, 8, 2 * whole() * 4 + 64}, .slots = 2, .tp = c->size, .pp = 1, .dp = 1, .staging = A * n * I * 4};
  cp->v[0] = isa_instr(ISA_SLOT), cp->v[0].slot.mb = 1;
  cp->v[1] = isa_instr(ISA_COMM), cp->v[1].comm = comm;
  cp->v[2] = isa_instr(ISA_COMM), cp->v[2].comm = comm;
  cp->v[2].comm.kind = ISA_COMM_ALL_REDUCE, cp->v[2].comm.red = ISA_RED_SUM, cp->v[2].comm.off[1] = 0;
  cp->lists[0] = (ProgList){.first = 0, .n = 2}, cp->lists[1] = (ProgList){.first = 2, .n = 1};
  cp->p = (Prog){.s = &cp->s, .instrs = cp->v, .lists = cp->lists, .strings = ""};
  return &cp->p;
}

/* src of slot 1: the whole tensor of this rank, or (gather) its part. */
static void fill(float *src, int part_only) {
  int n = 2 * c->size, per = 2;
  for (int a = 0; a < A; a++)
    for (int k = 0; k < (part_only ? per : n); k++)
      for (int i = 0; i < I; i++)
        src[(a * (part_only ? per : n) + k) * I + i] = f(c->rank, a, part_only ? c->rank * per + k : k, i);
}

static float sum_over_ranks(int a, int n, int i) {
  float s = 0;
  for (int r = 0; r < c->size; r++) s += f(r, a, n, i);
  return s;
}

#define ALL_REDUCE_MAX "all_reduce (max)"

/* Expected dst[a][k][i] (k over the dst's middle length) for each kind. */
static float expect(const char *kind, int a, int k, int i) {
  int per = 2;
  if (!strcmp(kind, "all_reduce")) return sum_over_ranks(a, k, i);
  if (!strcmp(kind, ALL_REDUCE_MAX)) return f(c->size - 1, a, k, i); /* f grows with the rank */
  if (!strcmp(kind, "all_gather")) return f(k / per, a, k, i);
  if (!strcmp(kind, "reduce_scatter")) return sum_over_ranks(a, c->rank * per + k, i);
  return f(c->rank, a, c->rank * per + k, i); /* split */
}

static void test_kind(const char *kind, Device *dev) {
  static const IsaCommKind kinds[5] = {ISA_COMM_ALL_REDUCE, ISA_COMM_ALL_GATHER, ISA_COMM_REDUCE_SCATTER,
                                       ISA_COMM_SPLIT, ISA_COMM_ALL_REDUCE};
  static const char *const names[5] = {"all_reduce", "all_gather", "reduce_scatter", "split", ALL_REDUCE_MAX};
  char err[512];
  int which = 0;
  while (strcmp(names[which], kind)) which++;
  CommProg cp;
  Executor ex;
  const Prog *p = comm_program(&cp, kinds[which], which == 4 ? ISA_RED_MAX : ISA_RED_SUM);
  if (exec_init(&ex, p, dev, err, sizeof err) != 0) {
    fprintf(stderr, "rank %d: %s\n", c->rank, err);
    check(0, kind);
    return;
  }
  ex.ctx.tp = c;
  int gather = !strcmp(kind, "all_gather");
  int full = gather || !strcmp(kind, "all_reduce") || !strcmp(kind, ALL_REDUCE_MAX);
  float *slot1 = (float *)(ex.tiers[TIER_WORK] + p->s->tiers[TIER_WORK]);
  fill(slot1, gather);
  check(exec_run(&ex, &p->lists[0]) == 0, "exec_run");
  int len = full ? 2 * c->size : 2, ok = 1;
  const float *dst = slot1 + whole();
  for (int a = 0; a < A; a++)
    for (int k = 0; k < len; k++)
      for (int i = 0; i < I; i++) ok &= dst[(a * len + k) * I + i] == expect(kind, a, k, i);
  check(ok, kind);
  if (!strcmp(kind, "all_reduce")) { /* list 1: in place, in slot 0 */
    float *slot0 = (float *)ex.tiers[TIER_WORK];
    fill(slot0, 0);
    exec_run(&ex, &p->lists[1]);
    ok = 1;
    for (int a = 0; a < A; a++)
      for (int k = 0; k < len; k++)
        for (int i = 0; i < I; i++) ok &= slot0[(a * len + k) * I + i] == sum_over_ranks(a, k, i);
    check(ok, "all_reduce in place");
  }
  exec_free(&ex);
}

int main(int argc, char **argv) {
  static const ProgKernelFn kernels[1] = {dummy};
  char err[512];
  if (!(c = comm_open(&argc, &argv, err, sizeof err))) {
    fprintf(stderr, "test_exec_comm: %s\n", err);
    return 1;
  }
  Device *dev = device_cpu_new(kernels, 1, 1, err, sizeof err);
  const char *kinds[5] = {"all_reduce", "all_gather", "reduce_scatter", "split", ALL_REDUCE_MAX};
  for (int k = 0; dev && k < 5; k++) test_kind(kinds[k], dev);
  if (dev) dev->destroy(dev);
  double t[2] = {passed, failed + (dev ? 0 : 1)};
  c->host_all_reduce(c, t, 2, COMM_SUM);
  if (c->rank == 0) printf("exec comm, ranks %d: %.0f passed, %.0f failed\n", c->size, t[0], t[1]);
  c->destroy(c);
  return t[1] > 0 ? 1 : 0;
}
