/* The program verifier (codegen/verify.h): a lowered model and its offload plan pass,
 * and each kind of wrong program is refused with its place and reason: a kernel buffer
 * beyond its tier, a slot outside `step`, an input in an unscheduled program, a ZeRO
 * owner outside the dp group, a GEMM's epilogue kernels missing or out of order (and a
 * bias-gradient or DGELU epilogue on a GEMM that cannot have it), in the lists the program carries a loop past its
 * list's end, a call of a list that is not one to call or of itself and a norm outside train, and in an offload plan a
 * kernel that runs before the wait of the move bringing its part, a move from where the part is not, and a step that
 * ends with a part away from home. (Messages out of order between pipeline stages: tests/unit/test_pipeline.c.)
 *
 * Usage: test_verify MODEL [NAME=VALUE ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/compose.h"
#include "codegen/offload.h"
#include "codegen/verify.h"
#include "tests/common/lowered.h"

static int failures;
#define CHECK(c, ...)               \
  do {                              \
    if (!(c)) {                     \
      printf("FAIL: " __VA_ARGS__); \
      printf("\n");                 \
      failures++;                   \
    }                               \
  } while (0)

static Program *lowered(Arena *a, int argc, char **argv) {
  char *args[32];
  for (int i = 0; i < argc && i < 32; i++) args[i] = arena_strdup(a, argv[i]);
  return lowered_model(a, argc, args);
}

/* p fails verification with want in the message (NULL: passes). */
static void expect(Program *p, const char *name, const char *want) {
  char err[512] = "";
  int rc = program_verify(&p, 1, err, sizeof err);
  if (want) CHECK(rc != 0 && strstr(err, want), "%s: expected '%s', got '%s'", name, want, rc ? err : "no error");
  else CHECK(rc == 0, "%s: %s", name, err);
  printf("%-26s %s\n", name, rc ? err : "passes");
}

static int first_of(const PSeq *s, IsaOp op) {
  for (int i = 0; i < s->n; i++)
    if (s->v[i].op == op) return i;
  return -1;
}

/* The lists the program carries (codegen/compose.h, compose_lists): they pass, and a
 * loop past its list's end, a call of a list that is not one to call or of itself,
 * and a "norm" outside train are refused. */
static void check_lists(Arena *a, Program *p) {
  compose_lists(&p, 1);
  expect(p, "lists", NULL);
  PSeq *train = &p->lists[p->named[PROG_LIST_TRAIN]].seq, *eval = &p->lists[p->named[PROG_LIST_EVAL]].seq;
  int l = first_of(train, ISA_LOOP), c = first_of(train, ISA_CALL), n = first_of(train, ISA_NORM);
  CHECK(l >= 0 && c >= 0 && n >= 0, "train without a loop, a call or a norm");
  if (l < 0 || c < 0 || n < 0) return;
  int64_t body = train->v[l].loop.body;
  train->v[l].loop.body = train->n;
  expect(p, "loop past its list", "past its list");
  train->v[l].loop.body = body;
  int callee = train->v[c].call.list;
  train->v[c].call.list = p->named[PROG_LIST_EVAL];
  expect(p, "call of a named list", "only a list to call");
  train->v[c].call.list = callee;
  PSeq *step = &p->lists[callee].seq; /* a list calling itself: no recursion */
  pseq_push(a, step, ISA_CALL)->call.list = callee;
  expect(p, "a list calling itself", "before this one");
  step->n--;
  *pseq_push(a, eval, ISA_NORM) = train->v[n];
  expect(p, "norm in eval", "norm only in train");
  eval->n--;
}

/* The GEMMs' epilogues: the backward GEMM of an MLP's GELU applies GELU's gradient and
 * sums the bias gradient (dgelu, bgrad), its two epilogue kernels right after it, and a
 * weight's gradient GEMM sums its bias's gradient from its B operand; a missing or
 * misplaced epilogue kernel, a bias gradient of C without DGELU, a DGELU GEMM that
 * accumulates (beta 1) and a batched GEMM with the bias gradient of B are refused. */
static void check_epilogues(Program *p) {
  PSeq *s = &p->step;
  int g = -1;
  for (int i = 0; i < s->n && g < 0; i++)
    if (s->v[i].op == ISA_GEMM && s->v[i].gemm.dgelu && s->v[i].gemm.bgrad) g = i;
  CHECK(g >= 0 && g + 2 < s->n, "no GEMM with the DGELU and BGRAD epilogues");
  if (g < 0 || g + 2 >= s->n) return;
  IsaInstr *e0 = &s->v[g + 1], *e1 = &s->v[g + 2];
  CHECK(e0->op == ISA_KERNEL && e0->kernel.epilogue && e1->op == ISA_KERNEL && e1->kernel.epilogue,
        "the DGELU GEMM's epilogue kernels are not right after it");
  IsaInstr keep = *e0;
  e0->kernel.epilogue = false;
  expect(p, "epilogue kernel unmarked", "without its epilogue kernels");
  *e0 = *e1, *e1 = keep; /* the bias gradient's sum before GELU's gradient */
  expect(p, "epilogue kernels swapped", "not right after its GEMM");
  *e1 = *e0, *e0 = keep;
  IsaGemm *m = &s->v[g].gemm;
  m->dgelu = false;
  expect(p, "bgrad without dgelu", "without DGELU");
  m->dgelu = true, m->beta = 1;
  expect(p, "dgelu accumulating", "DGELU epilogue needs beta 0");
  m->beta = 0;
  expect(p, "epilogues restored", NULL);
  int w = -1; /* a weight's gradient GEMM that sums its bias's gradient from its B operand */
  for (int i = 0; i < s->n && w < 0; i++)
    if (s->v[i].op == ISA_GEMM && s->v[i].gemm.bgrad == ISA_BGRAD_B) w = i;
  CHECK(w >= 0 && w + 1 < s->n && s->v[w + 1].op == ISA_KERNEL && s->v[w + 1].kernel.epilogue,
        "no GEMM with the bias gradient of B and its epilogue kernel after it");
  if (w < 0 || w + 1 >= s->n) return;
  m = &s->v[w].gemm;
  m->batch[0] = 2; /* the same matrices twice */
  expect(p, "bgrad of B, batched", "bias gradient epilogue of B needs");
  m->batch[0] = 1;
  s->v[w + 1].kernel.epilogue = false;
  expect(p, "bgrad of B, kernel unmarked", "without its epilogue kernels");
  s->v[w + 1].kernel.epilogue = true;
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: test_verify MODEL [NAME=VALUE ...]\n"), 2;
  Arena *a = arena_new();
  Program *p = lowered(a, argc - 1, argv + 1);
  if (!p) return 1;
  expect(p, "lowered", NULL);

  Kernel *k = p->kernels[p->step.v[first_of(&p->step, ISA_KERNEL)].kernel.id];
  int64_t off = k->bufs[0].offset;
  k->bufs[0].offset = p->tiers[k->bufs[0].tier];
  expect(p, "buffer beyond its tier", "outside the");
  k->bufs[0].offset = off;

  PSeq keep = p->gradnorm;
  p->gradnorm = (PSeq){0};
  for (int i = 0; i < keep.n; i++) *pseq_push(a, &p->gradnorm, (IsaOp)keep.v[i].op) = keep.v[i];
  pseq_push(a, &p->gradnorm, ISA_SLOT);
  expect(p, "slot in gradnorm", "gradnorm[");
  p->gradnorm = keep;

  PSeq step = p->step;
  p->step = (PSeq){0};
  pseq_push(a, &p->step, ISA_INPUT);
  expect(p, "input, unscheduled", "input only in a step's schedule");
  p->step = step;

  p->zero_stage = 1, p->dp = 2;
  for (int i = 0; i < p->nparams; i++) p->params[i].owner = i % 2;
  expect(p, "ZeRO-1 owners", NULL);
  p->params[1].owner = 2;
  expect(p, "owner outside dp", "is not a rank of the 2");
  p->zero_stage = 0, p->dp = 0;
  check_epilogues(p);
  check_lists(a, p);

  /* an offload plan at a third of the state */
  Program *q = lowered(a, argc - 1, argv + 1);
  Cluster cl;
  cluster_from_profile(&cl, "cpu", 1, 1);
  int64_t state = q->tiers[TIER_PARAMS] + q->tiers[TIER_GRADS] + q->tiers[TIER_OPT];
  OffloadOptions o = {.device_memory = q->tiers[TIER_WORK] + state / 3 + (1 << 16), .cl = &cl};
  OffloadPlan *op = offload_chunks(q, &o);
  CHECK(op != NULL, "no offload plan at a third of the state");
  if (!op) return 1;
  offload_plan(q, op, &o);
  expect(q, "offload plan", NULL);
  int w = first_of(&q->step, ISA_WAIT);
  CHECK(w >= 0, "the plan's step has no wait");
  uint8_t was = q->step.v[w].op;
  q->step.v[w].op = ISA_JOIN; /* the wait gone (a join in its place) */
  expect(q, "no wait before use", "in flight");
  q->step.v[w].op = was;
  int m = first_of(&q->step, ISA_MOVE);
  Loc from = q->step.v[m].move.from;
  q->step.v[m].move.from = from == LOC_HOST ? LOC_NVME : LOC_HOST;
  expect(q, "move from elsewhere", "where it is not");
  q->step.v[m].move.from = from;
  int last = -1;
  for (int i = 0; i < q->update.n; i++)
    if (q->update.v[i].op == ISA_MOVE || q->update.v[i].op == ISA_DROP) last = i;
  if (last >= 0) {
    q->update.v[last].op = ISA_WAIT; /* the last move or drop home gone */
    expect(q, "not home after update", "is not at its home");
  }
  arena_free(a);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures != 0;
}
