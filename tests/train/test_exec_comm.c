/* test_exec_comm: the executor's "comm" instruction (runtime/program.h) of every
 * kind over a tp group of all ranks (1 alone, any number under mpirun), on an
 * A x N x I tensor with A = 3, N = 2 x ranks, I = 2, so the reorders of all_gather
 * and reduce_scatter matter; plus an in-place all_reduce, an all_reduce taking the
 * largest ("reduction": "max") and a comm in the second of two WORK slots. Rank r's values f(r, a, n, i) are small
 * integers and halves, so every sum is exact and each result is checked element by element against a plain loop. Rank 0
 * prints "N passed, M failed" for all ranks together.
 */
#include "runtime/comm.h"
#include "runtime/executor.h"
#include "runtime/train_program.h"

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

/* Offsets (floats) in each slot: src 0, dst at DST; one slot holds 2 tensors. */
static int64_t whole(void) { return (int64_t)A * 2 * c->size * I; }

static char *program_json(void) {
  int64_t n = 2 * c->size, dst = whole() * 4, work = 2 * whole() * 4 + 64;
  char *json = malloc(8200);
  snprintf(json, 8192,
           "{\"version\": 1, \"model\": \"comm-test\", \"batch\": 1, \"seq\": 1, \"vocab\": 1,"
           " \"tiers\": [4, 4, 8, %lld], \"opt_v_offset\": 4, \"slots\": 2,"
           " \"mesh\": {\"dp\": 1, \"tp\": %d, \"pp\": 1},"
           " \"train\": {\"optimizer\": \"adamw\", \"lr\": 0.1, \"beta1\": 0.9, \"beta2\": 0.95,"
           " \"eps\": 1e-8, \"weight_decay\": 0, \"momentum\": 0, \"clip\": 0, \"warmup\": 0,"
           " \"min_lr\": 0, \"schedule\": \"constant\"},"
           " \"params\": [{\"name\": \"p\", \"shape\": [1], \"offset\": 0, \"decay\": false,"
           " \"init\": \"zeros\"}],"
           " \"inputs\": [{\"name\": \"t\", \"role\": \"tokens\", \"shape\": [1, 1], \"offset\": 0},"
           " {\"name\": \"g\", \"role\": \"targets\", \"shape\": [1, 1], \"offset\": 4}],"
           " \"loss_offset\": 0, \"logits_offset\": 0, \"gradnorm_offset\": 0, \"gradnorm_parts\": 1,"
           " \"flops_per_step\": 0, \"kernels\": [\"dummy\"],"
           " \"step\": [{\"op\": \"slot\", \"index\": 1},"
           " {\"op\": \"comm\", \"kind\": \"KIND\", \"src\": [3, 0], \"dst\": [3, %lld],"
           " \"outer\": %d, \"n\": %lld, \"inner\": %d}],"
           " \"sync\": [], \"gradnorm\": [], \"update\": [], \"forward\": [{\"op\": \"comm\", \"kind\":"
           " \"all_reduce\", \"src\": [3, 0], \"dst\": [3, 0], \"outer\": %d, \"n\": %lld,"
           " \"inner\": %d}]}",
           (long long)work, c->size, (long long)dst, A, (long long)n, I, A, (long long)n, I);
  return json;
}

/* The program with "KIND" replaced by kind, loaded and given an executor. */
static int setup(const char *kind, RtProgram *p, Executor *ex, Device *dev) {
  char err[512], *json = program_json(), *at = strstr(json, "KIND");
  char *text = malloc(strlen(json) + 32);
  snprintf(text, strlen(json) + 32, "%.*s%s%s", (int)(at - json), json, kind, at + 4);
  free(json);
  int rc = program_load(text, 1, p, err, sizeof err);
  free(text);
  if (rc != 0 || exec_init(ex, p, dev, err, sizeof err) != 0) {
    fprintf(stderr, "rank %d: %s\n", c->rank, err);
    return -1;
  }
  ex->ctx.tp = c;
  return 0;
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

#define ALL_REDUCE_MAX "all_reduce\", \"reduction\": \"max" /* spliced in for KIND */

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
  RtProgram p;
  Executor ex;
  float sc[TRAIN_SCALARS] = {0};
  if (setup(kind, &p, &ex, dev) != 0) {
    check(0, kind);
    return;
  }
  int gather = !strcmp(kind, "all_gather");
  int full = gather || !strcmp(kind, "all_reduce") || !strcmp(kind, ALL_REDUCE_MAX);
  float *slot1 = (float *)(ex.tiers[RT_TIER_WORK] + p.tiers[RT_TIER_WORK]);
  fill(slot1, gather);
  exec_run(&ex, &p.step, sc);
  int len = full ? 2 * c->size : 2, ok = 1;
  const float *dst = slot1 + whole();
  for (int a = 0; a < A; a++)
    for (int k = 0; k < len; k++)
      for (int i = 0; i < I; i++) ok &= dst[(a * len + k) * I + i] == expect(kind, a, k, i);
  check(ok, strcmp(kind, ALL_REDUCE_MAX) ? kind : "all_reduce (max)");
  if (!strcmp(kind, "all_reduce")) { /* forward: in place, in slot 0 */
    float *slot0 = (float *)ex.tiers[RT_TIER_WORK];
    fill(slot0, 0);
    exec_run(&ex, &p.forward, sc);
    ok = 1;
    for (int a = 0; a < A; a++)
      for (int k = 0; k < len; k++)
        for (int i = 0; i < I; i++) ok &= slot0[(a * len + k) * I + i] == sum_over_ranks(a, k, i);
    check(ok, "all_reduce in place");
  }
  exec_free(&ex);
  program_free(&p);
}

/* The program with from replaced by to is refused with a message holding want. */
static void expect_refused(const char *from, const char *to, const char *want) {
  char err[512], *json = program_json(), *kind = strstr(json, "KIND"), *at;
  if (strcmp(from, "KIND") != 0) /* a valid kind, "split" fits the 4 letters' place */
    memmove(kind + 5, kind + 4, strlen(kind + 4) + 1), memcpy(kind, "split", 5);
  at = strstr(json, from);
  char *text = malloc(strlen(json) + strlen(to) + 1);
  sprintf(text, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
  RtProgram *st = NULL;
  int n = 0, rc = program_load_stages(text, 1, &st, &n, err, sizeof err);
  if (rc == 0) program_free_stages(st, n);
  check(rc != 0 && strstr(err, want) != NULL, want);
  if (rc == 0 || !strstr(err, want)) fprintf(stderr, "rank %d: got: %s\n", c->rank, rc ? err : "loaded");
  free(json), free(text);
}

/* Validation of the parallel fields and instructions (train_program.h). */
static void test_refusals(void) {
  expect_refused("KIND", "gather", "program: step[1].kind: unknown value \"gather\"");
  expect_refused("{\"op\": \"slot\", \"index\": 1}", "{\"op\": \"slot\", \"index\": 2}",
                 "program: step[0].index: out of range");
  expect_refused("\"slots\": 2", "\"slots\": 1", "program: step[0].index: out of range");
  expect_refused("{\"op\": \"slot\", \"index\": 1}", "{\"op\": \"loss\", \"offset\": 0}",
                 "program: step[0].op: \"loss\" only in `step` of a scheduled program");
  expect_refused("{\"op\": \"slot\", \"index\": 1}",
                 "{\"op\": \"send\", \"peer\": 1, \"tag\": 0, \"at\": [3, 0], \"count\": 1}",
                 "program: step[0].peer: out of range");
  expect_refused("{\"op\": \"slot\", \"index\": 1}",
                 "{\"op\": \"recv\", \"peer\": 0, \"tag\": 0, \"at\": [3, 0], \"count\": 100000}",
                 "outside the work tier");
  expect_refused("\"pp\": 1}", "\"pp\": 2}", "program: mesh.pp: above 1 needs an array");
  expect_refused("\"dst\": [3, ", "\"reduction\": \"max\", \"dst\": [3, ",
                 "program: step[1].reduction: only an all_reduce takes one");
  expect_refused("KIND", ALL_REDUCE_MAX "imum", "program: step[1].reduction: unknown value \"maximum\"");
}

int main(int argc, char **argv) {
  static const RtKernelFn kernels[1] = {dummy};
  char err[512];
  if (!(c = comm_open(&argc, &argv, err, sizeof err))) {
    fprintf(stderr, "test_exec_comm: %s\n", err);
    return 1;
  }
  Device *dev = device_cpu_new(kernels, 1, 1, err, sizeof err);
  const char *kinds[5] = {"all_reduce", "all_gather", "reduce_scatter", "split", ALL_REDUCE_MAX};
  for (int k = 0; dev && k < 5; k++) test_kind(kinds[k], dev);
  test_refusals();
  if (dev) dev->destroy(dev);
  double t[2] = {passed, failed + (dev ? 0 : 1)};
  c->host_all_reduce(c, t, 2, COMM_SUM);
  if (c->rank == 0) printf("exec comm, ranks %d: %.0f passed, %.0f failed\n", c->size, t[0], t[1]);
  c->destroy(c);
  return t[1] > 0 ? 1 : 0;
}
