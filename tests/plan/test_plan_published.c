/* The cost model against published measurements of large GPT training runs on
 * A100 clusters: Narayanan et al. 2021 ("Efficient Large-Scale Language Model
 * Training on GPU Clusters Using Megatron-LM"), Table 1 (weak scaling from 1.7B to
 * 1T parameters on Selene's DGX A100 nodes, 8 x 200 Gb/s HDR InfiniBand each), and
 * the GPT-3 175B figure of their §5 (1024 GPUs, batch 1536, 140 TFLOP/s per GPU).
 *
 * Each run is a forced plan: their tensor and pipeline degrees, data parallelism
 * for the rest, full recompute and no ZeRO as they ran, attention materialized as
 * Megatron's kernels did then; micro-batch size and schedule are left to the
 * search (the paper does not list them). The paper's TFLOP/s count recomputation
 * (their eq. 3, 96BSlh²...), so the prediction compared is hw_tflops. Within ±25%. */
#include "plan/search.h"
#include "tests/plan/plan_test.h"

typedef struct Run {
  const char *name;
  int gpus, t, p, d;
  const char *h, *a, *l, *batch, *vocab;
  double tflops;
} Run;

static const Run runs[] = {
    {"GPT-3 175B, 1024 GPUs (5.1)", 1024, 8, 16, 8, "d=12288", "heads=96", "layers=96", "batch=1536", "vocab=50257",
     140},
    {"1.7B, 32 GPUs", 32, 1, 1, 32, "d=2304", "heads=24", "layers=24", "batch=512", "vocab=51200", 137},
    {"3.6B, 64 GPUs", 64, 2, 1, 32, "d=3072", "heads=32", "layers=30", "batch=512", "vocab=51200", 138},
    {"7.5B, 128 GPUs", 128, 4, 1, 32, "d=4096", "heads=32", "layers=36", "batch=512", "vocab=51200", 142},
    {"18.4B, 256 GPUs", 256, 8, 1, 32, "d=6144", "heads=48", "layers=40", "batch=1024", "vocab=51200", 135},
    {"39.1B, 512 GPUs", 512, 8, 2, 32, "d=8192", "heads=64", "layers=48", "batch=1536", "vocab=51200", 138},
    {"76.1B, 1024 GPUs", 1024, 8, 4, 32, "d=10240", "heads=80", "layers=60", "batch=1792", "vocab=51200", 140},
    {"145.6B, 1536 GPUs", 1536, 8, 8, 24, "d=12288", "heads=96", "layers=80", "batch=2304", "vocab=51200", 148},
    {"310.1B, 1920 GPUs", 1920, 8, 16, 15, "d=16384", "heads=128", "layers=96", "batch=2160", "vocab=51200", 155},
    {"529.6B, 2520 GPUs", 2520, 8, 35, 9, "d=20480", "heads=128", "layers=105", "batch=2520", "vocab=51200", 163},
    {"1T, 3072 GPUs", 3072, 8, 64, 6, "d=25600", "heads=160", "layers=128", "batch=3072", "vocab=51200", 163},
};

static void check_run(const Run *r) {
  Arena *a = arena_new();
  const char *set[] = {r->h, r->a, r->l, r->batch, r->vocab, NULL};
  Graph *g = load_model(a, "models/gpt3.model", set);
  Cluster cl;
  PlanForce f;
  plan_force_init(&f);
  f.tp = r->t, f.pp = r->p, f.dp = r->d, f.zero = 0, f.rc = RC_FULL, f.attn = ATTN_MATERIALIZED, f.offload = 0;
  f.lowp = true; /* Megatron-LM's runs: 16-bit mixed precision */
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    printf("FAIL %s: no plan (%s)\n", r->name, diag_last);
    failures++;
    arena_free(a);
    return;
  }
  cluster_from_profile(&cl, "a100-80g", r->gpus, 8);
  PlanResult *res = plan_search(a, g, &cl, &f);
  diag_pop(&j);
  const PlanPrice *p = &res->best.pr;
  char what[160];
  snprintf(what, sizeof what, "%s t=%d p=%d d=%d (mbs %d, %s v=%d): TFLOP/s per GPU", r->name, r->t, r->p, r->d,
           res->best.ch.mbs, schedule_names[res->best.ch.sched], res->best.ch.v);
  check_rel(what, p->hw_tflops, r->tflops, 0.25);
  arena_free(a);
}

int main(void) {
  diag_stream = stderr;
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) check_run(&runs[i]);
  printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
  return failures != 0;
}
