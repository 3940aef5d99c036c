/* Lowering against the reference interpreter: a model is compiled to a Program
 * (kernels, GEMMs, memory plan), the program is run with the kernel form's reference
 * evaluator and a plain GEMM, and the loss, every parameter gradient, the logits of
 * the forward program and one AdamW update are compared with ir/interp.c on the same
 * graph. This checks fusion, views, the memory plan (buffers that share bytes) and
 * every kernel rule, independent of the LLVM and CUDA emitters.
 * Usage: test_lower MODEL [NAME=VALUE ...] */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/lower.h"
#include "frontend/frontend.h"
#include "ir/interp.h"
#include "passes/passes.h"
#include "program/program.h"
#include "tests/common/lowered.h"

static uint64_t rng = 88172645463325252ull;
static double urand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (rng >> 11) * 0x1.0p-53;
}

static void run_seq(const Program *p, const PSeq *s, char *const *tiers, const float *scalars) {
  for (int i = 0; i < s->n; i++) {
    const IsaInstr *in = &s->v[i];
    if (in->op == ISA_KERNEL) kernel_eval(p->kernels[in->kernel.id], tiers, scalars);
    else if (in->op == ISA_GEMM) lowered_gemm_ref(&in->gemm, tiers);
    else memset(tiers[in->zero.tier] + in->zero.offset, 0, in->zero.bytes);
  }
}

static int failures, checks;
static double tol_floor = 0; /* 16-bit programs: a few units in the last place of their precision */

/* max |got - want| relative to max |want| */
static void compare(const char *what, const float *got, const double *want, int64_t n, double tol) {
  double diff = 0,
         scale = fmax(1e-6, tol_floor / 32); /* gradients that are zero in exact arithmetic (a key bias) are noise */
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]);
    if (!(d <= diff)) diff = d;
    if (fabs(want[i]) > scale) scale = fabs(want[i]);
  }
  checks++;
  if (!(diff / scale <= fmax(tol, tol_floor))) {
    failures++;
    printf("FAIL %s: max difference %.3g relative to %.3g\n", what, diff / scale, scale);
  }
}

/* The gradient of program parameter q (the program lays parameters out in its own order,
 * codegen/lower.c's layout_params), or NULL. */
static const Node *grad_of(const Graph *g, const PParam *q) {
  for (int j = 0; j < g->nparams; j++)
    if (g->params[j] == q->node) return g->param_grads[j];
  return NULL;
}

/* The multi-tensor kernels (codegen/compose.h makes them from runs of parameters) over all
 * the parameters against one kernel per parameter, from the same state: the update equal bit
 * for bit on every parameter (the weight decay selected by row), the padding between them
 * left zero, a skipped fp16 step keeping every value; the gradient norm's partial sums the
 * same bits (when the program's norm has rows that runs share). */
static void check_runs(Program *p, char *const *tiers, float *scalars) {
  int64_t pb = p->tiers[TIER_PARAMS], ob = p->tiers[TIER_OPT];
  char *p0 = malloc(pb + 1), *o0 = malloc(ob + 1), *p1 = malloc(pb + 1), *o1 = malloc(ob + 1);
  memcpy(p0, tiers[TIER_PARAMS], pb), memcpy(o0, tiers[TIER_OPT], ob);
  run_seq(p, &p->update, tiers, scalars);
  memcpy(p1, tiers[TIER_PARAMS], pb), memcpy(o1, tiers[TIER_OPT], ob);
  for (int apply = 1; apply >= 0; apply -= p->g->train.loss_scaling ? 1 : 2) {
    memcpy(tiers[TIER_PARAMS], p0, pb), memcpy(tiers[TIER_OPT], o0, ob);
    scalars[SC_APPLY] = (float)apply;
    int kernels = 0;
    for (int lo = 0, hi; lo < p->nparams; lo = hi, kernels++) {
      hi = lower_update_end(p, lo, p->nparams);
      kernel_eval(lower_update_kernel(p, lo, hi, p->nkernels), tiers, scalars);
    }
    bool same = true, zero = true;
    for (int k = 0; k < p->nparams; k++) {
      int64_t off = p->params[k].offset, b = pparam_bytes(&p->params[k]),
              end = k + 1 < p->nparams ? p->params[k + 1].offset : pb;
      for (int64_t t = 0; t <= ob; t += pb) { /* PARAMS; OPT's m at 0, AdamW's v at pb */
        char *got = t ? tiers[TIER_OPT] + t - pb : tiers[TIER_PARAMS], *want = t       ? (apply ? o1 : o0) + t - pb
                                                                               : apply ? p1
                                                                                       : p0;
        same &= !memcmp(got + off, want + off, b);
        for (int64_t i = off + b; i < end; i++) zero &= got[i] == 0;
      }
    }
    checks++;
    if (!same || !zero) {
      failures++;
      printf("FAIL %d multi-tensor update kernel%s (applies %d): %s\n", kernels, kernels == 1 ? "" : "s", apply,
             same ? "the padding changed" : "not the bits of one kernel per parameter");
    }
  }
  scalars[SC_APPLY] = 1;
  memcpy(tiers[TIER_PARAMS], p1, pb), memcpy(tiers[TIER_OPT], o1, ob);
  free(p0), free(o0), free(p1), free(o1);
  if (!p->norm_row) return;
  float *parts[2];
  for (int run = 0; run < 2; run++) {
    memset(tiers[TIER_WORK] + p->gradnorm_offset, 0, p->gradnorm_parts * 4);
    if (run) kernel_eval(lower_norm_kernel(p, 0, p->nparams, p->nkernels), tiers, scalars);
    else run_seq(p, &p->gradnorm, tiers, scalars);
    parts[run] = malloc(p->gradnorm_parts * 4);
    memcpy(parts[run], tiers[TIER_WORK] + p->gradnorm_offset, p->gradnorm_parts * 4);
  }
  checks++;
  if (memcmp(parts[0], parts[1], p->gradnorm_parts * 4)) {
    failures++;
    printf(
        "FAIL the norm in one multi-tensor kernel (rows of %lld): not the partial sums of one kernel per parameter\n",
        (long long)p->norm_row);
  }
  free(parts[0]), free(parts[1]);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(
        stderr,
        "usage: test_lower MODEL [--precision=bf16|fp16] [--attention=fused] [--classifier=fused] [NAME=VALUE ...]\n");
    return 2;
  }
  DType low = DT_F32; /* --precision: the graph autocast (16-bit rounding points: looser tolerances) */
  int first = 2;
  unsigned fuse = 0; /* --attention=fused, --classifier=fused (passes/decompose.c) */
  for (; first < argc && !strncmp(argv[first], "--", 2); first++) {
    if (!strcmp(argv[first], "--attention=fused") || !strcmp(argv[first], "--classifier=fused")) {
      fuse |= argv[first][2] == 'a' ? FUSE_ATTENTION : FUSE_CLASSIFIER;
      continue;
    }
    if (strncmp(argv[first], "--precision=", 12)) return 2;
    low = !strcmp(argv[first] + 12, "bf16") ? DT_BF16 : DT_F16;
    tol_floor = low == DT_BF16 ? 0x1p-5 : 0x1p-8; /* 4 ulp of 1: roundings that f32 and double place apart */
  }
  diag_stream = stderr;
  Arena *a = arena_new();
  ConfigOverride ov[16];
  int nov = 0;
  for (int i = first; i < argc && nov < 16; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) return 2;
    *eq = 0;
    ov[nov++] = (ConfigOverride){argv[i], eq + 1, false};
  }
  size_t len;
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    printf("0 passed, 1 failed\n");
    return 1;
  }
  char *text = frontend_read_file(a, argv[1], &len);
  Graph *g = frontend_compile(a, argv[1], text, len, ov, nov);
  if (!g) return 1;
  g = pass_decompose(g, fuse);
  if (low != DT_F32) g = pass_autocast(g, low);
  pass_autodiff(g);
  ir_verify(g);
  Program *p = lower_program(g);
  diag_pop(&j);

  char *tiers[TIERS];
  for (int t = 0; t < TIERS; t++) tiers[t] = calloc(1, p->tiers[t] + 64);
  double **vals = calloc(g->n, sizeof *vals);
  for (int k = 0; k < p->nparams; k++) { /* random parameters, the same in both */
    const Node *n = p->params[k].node;
    int64_t cnt = shape_numel(&n->shape);
    vals[n->id] = malloc(cnt * sizeof(double));
    float *dst = (float *)(tiers[TIER_PARAMS] + p->params[k].offset);
    for (int64_t i = 0; i < cnt; i++) {
      dst[i] = (float)(n->init.kind == INIT_ONES ? 1 + 0.1 * (urand() - 0.5) : 0.2 * (urand() - 0.5));
      vals[n->id][i] = dst[i];
    }
  }
  /* ignored targets carry the loss's ignore_index (-1 in the model zoo, -100 from torch.onnx) */
  int32_t ignored = g->loss->op == OP_CROSS_ENTROPY || g->loss->op == OP_CLASSIFIER_CE
                        ? (int32_t)attr_int(g->loss, "ignore_index")
                        : -1;
  for (int i = 0; i < p->ninputs; i++) {
    const Node *n = p->inputs[i].node;
    int64_t cnt = shape_numel(&n->shape);
    vals[n->id] = malloc(cnt * sizeof(double));
    int64_t range = lowered_index_range(p, n); /* indices must fit every table they select rows of */
    for (int64_t e = 0; e < cnt; e++) {
      void *dst = tiers[TIER_WORK] + p->inputs[i].offset;
      if (n->dtype == DT_I32) {
        int32_t v = (int32_t)(urand() * range);
        if (p->inputs[i].role == PIN_TARGETS && e % 7 == 3 && n->shape.ndim) v = ignored; /* ignored targets too */
        ((int32_t *)dst)[e] = v;
        vals[n->id][e] = v;
      } else {
        ((float *)dst)[e] = (float)urand();
        vals[n->id][e] = ((float *)dst)[e];
      }
    }
  }

  const TrainSpec *ts = &g->train;
  float scalars[SC_COUNT] = {1e-2f,
                             1 / (1 - (float)ts->beta1),
                             1 / (1 - (float)ts->beta2),
                             1.0f,
                             1,
                             (float)ts->beta1,
                             (float)ts->beta2,
                             (float)ts->eps,
                             (float)ts->weight_decay,
                             (float)ts->momentum,
                             1.0f /* the loss scale */,
                             1.0f /* the update applies */};
  run_seq(p, &p->step, tiers, scalars);
  interp_run(g, vals, (int64_t)scalars[SC_STEP]); /* the same dropout masks */
  float loss = *(float *)(tiers[TIER_WORK] + p->loss_offset);
  compare("loss", &loss, vals[g->loss->id], 1, 1e-5);
  printf("loss %.7f (reference %.7f)\n", loss, vals[g->loss->id][0]);
  for (int k = 0; k < p->nparams; k++) {
    const Node *gn = grad_of(g, &p->params[k]);
    if (!gn) continue;
    char what[256];
    snprintf(what, sizeof what, "gradient of %s", p->params[k].node->name);
    compare(what, (float *)(tiers[TIER_GRADS] + p->params[k].offset), vals[gn->id], shape_numel(&gn->shape), 2e-4);
  }
  /* the forward program alone reproduces the logits (stored 16-bit under mixed
   * precision, where the loss reads them widened) */
  if (p->forward.n) {
    const Node *logits = g->loss->in[0];
    int64_t nl = shape_numel(&logits->shape);
    int size = isa_dtype_bytes(p->logits_dtype);
    memset(tiers[TIER_GRADS], 0, p->tiers[TIER_GRADS]);
    char *lg = tiers[TIER_WORK] + p->logits_offset;
    memset(lg, 0, nl * size);
    run_seq(p, &p->forward, tiers, scalars);
    float *wide = malloc(nl * sizeof *wide);
    for (int64_t i = 0; i < nl; i++)
      wide[i] = size == 4 ? ((float *)lg)[i] : isa_to_f32(p->logits_dtype, ((unsigned short *)lg)[i]);
    compare("forward logits", wide, vals[logits->id], nl, 1e-5);
    free(wide);
    run_seq(p, &p->step, tiers, scalars); /* gradients back in place */
  }
  /* one AdamW step (t = 1) against the formula in double, from the program's own f32
   * gradients (Adam's first step is about sign(g): a tiny gradient's rounding moves it) */
  if (g->train.opt == OPT_ADAMW) {
    float *before = malloc(p->tiers[TIER_PARAMS]);
    memcpy(before, tiers[TIER_PARAMS], p->tiers[TIER_PARAMS]);
    run_seq(p, &p->update, tiers, scalars);
    const TrainSpec *t = &g->train;
    for (int k = 0; k < p->nparams; k++) {
      const Node *n = p->params[k].node, *gn = grad_of(g, &p->params[k]);
      int64_t cnt = shape_numel(&n->shape);
      double *want = malloc(cnt * sizeof *want), wd = p->params[k].decay ? t->weight_decay : 0, lr = scalars[0];
      for (int64_t i = 0; i < cnt; i++) {
        double gr = gn ? ((float *)(tiers[TIER_GRADS] + p->params[k].offset))[i] : 0, m = (1 - t->beta1) * gr,
               v = (1 - t->beta2) * gr * gr;
        want[i] = ((float *)((char *)before + p->params[k].offset))[i] * (1 - lr * wd) -
                  lr * scalars[1] * m / (sqrt(v * scalars[2]) + t->eps);
      }
      compare("adamw update", (float *)(tiers[TIER_PARAMS] + p->params[k].offset), want, cnt, 1e-4);
      free(want);
    }
    free(before);
  }
  if (p->nparams > 1) check_runs(p, tiers, scalars);
  printf("%d kernels, %d step instructions, work tier %lld bytes: %d passed, %d failed\n", p->nkernels, p->step.n,
         (long long)p->tiers[TIER_WORK], checks - failures, failures);
  interp_release(g, vals);
  for (int i = 0; i < g->n; i++)
    if (g->nodes[i]->op == OP_INPUT || g->nodes[i]->op == OP_PARAM) free(vals[i]);
  free(vals);
  for (int t = 0; t < TIERS; t++) free(tiers[t]);
  arena_free(a);
  return failures != 0;
}
