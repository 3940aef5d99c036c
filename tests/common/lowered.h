/* Test helpers shared by the tests that run lowered models (tests/unit/test_lower.c,
 * tests/codegen/test_llvm.c, tests/codegen/test_cuda.c): compiling a model with
 * NAME=VALUE overrides down to a Program, filling its parameters and inputs with
 * reproducible values, and the reference GEMM in double. Header-only: each test is one
 * translation unit. */
#ifndef COLOSSALC_TESTS_LOWERED_H
#define COLOSSALC_TESTS_LOWERED_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "codegen/lower.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "program/program.h"

/* MODEL [NAME=VALUE ...] -> Program (decompose, autodiff, verify, lower); NULL after
 * reporting an error. Modifies the NAME=VALUE strings in place. */
static inline Program *lowered_model(Arena *a, int argc, char **argv) {
  ConfigOverride ov[16];
  int nov = 0, first = 1;
  volatile DType low = DT_F32; /* "--precision=bf16" (fp16, fp8) after the model: passes/autocast.c */
  volatile unsigned fuse = 0;  /* "--attention=fused", "--classifier=fused" (passes/decompose.c) */
  for (; first < argc && !strncmp(argv[first], "--", 2); first++) {
    if (!strncmp(argv[first], "--precision=", 12))
      low = !strcmp(argv[first] + 12, "bf16") ? DT_BF16 : !strcmp(argv[first] + 12, "fp8") ? DT_E4M3 : DT_F16;
    else if (!strcmp(argv[first], "--attention=fused")) fuse |= FUSE_ATTENTION;
    else if (!strcmp(argv[first], "--classifier=fused")) fuse |= FUSE_CLASSIFIER;
  }
  for (int i = first; i < argc && nov < 16; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) return NULL;
    *eq = 0;
    ov[nov++] = (ConfigOverride){argv[i], eq + 1, false};
  }
  diag_stream = stderr;
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    diag_pop(&j);
    return NULL;
  }
  size_t len;
  char *text = frontend_read_file(a, argv[0], &len);
  Graph *g = frontend_compile(a, argv[0], text, len, ov, nov);
  if (!g) {
    diag_pop(&j);
    return NULL;
  }
  g = pass_decompose(g, fuse);
  if (low == DT_E4M3) g = pass_autocast_fp8(g, 16, 0, false);
  else if (low != DT_F32) g = pass_autocast(g, low);
  pass_autodiff(g);
  ir_verify(g);
  Program *p = lower_program(g);
  diag_pop(&j);
  return p;
}

/* xorshift64, uniform in [0, 1) */
static inline double lowered_urand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return (double)(*s >> 11) * 0x1.0p-53;
}

/* The largest index an input may hold: the rows of every table it selects from. */
static inline int64_t lowered_index_range(const Program *p, const Node *in) {
  int64_t range = p->vocab ? p->vocab : 16;
  for (int u = 0; u < p->g->n; u++) {
    const Node *n = p->g->nodes[u];
    if (n->op == OP_EMBEDDING && n->in[1] == in && n->in[0]->shape.d[0] < range) range = n->in[0]->shape.d[0];
  }
  return range;
}

/* Parameters near their initial scale, token ids inside every table they index, and
 * some ignored (-1) targets where the loss has ignore_index -1. */
static inline void lowered_init(const Program *p, char **tiers, uint64_t seed) {
  const Graph *g = p->g;
  for (int i = 0; i < p->nparams; i++) {
    const Node *n = p->params[i].node;
    float *dst = (float *)(tiers[TIER_PARAMS] + p->params[i].offset);
    for (int64_t e = 0; e < shape_numel(&n->shape); e++)
      dst[e] = (float)(n->init.kind == INIT_ONES ? 1 + 0.1 * (lowered_urand(&seed) - 0.5)
                                                 : 0.2 * (lowered_urand(&seed) - 0.5));
  }
  for (int i = 0; i < p->ninputs; i++) {
    const Node *n = p->inputs[i].node;
    int64_t range = lowered_index_range(p, n);
    void *dst = tiers[TIER_WORK] + p->inputs[i].offset;
    for (int64_t e = 0; e < shape_numel(&n->shape); e++) {
      if (n->dtype != DT_I32) {
        ((float *)dst)[e] = (float)lowered_urand(&seed);
        continue;
      }
      bool ignored = p->inputs[i].role == PIN_TARGETS && e % 7 == 3 && g->loss->op == OP_CROSS_ENTROPY &&
                     attr_int(g->loss, "ignore_index") == -1;
      ((int32_t *)dst)[e] = ignored ? -1 : (int32_t)(lowered_urand(&seed) * range);
    }
  }
}

/* f32 bit patterns a 16-bit store must round right: zeros, infinities, NaNs, ties and
 * their neighbours for bf16 and f16, f16's overflow and subnormal edges. */
static const uint32_t lowered_half_specials[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffa00000u, 0x3f808000u, 0x3f818000u,
    0x3f808001u, 0x3f817fffu, 0x7f7fffffu, 0x7f7f8000u, 0x3f801000u, 0x3f803000u, 0x3f801001u, 0x477fe000u,
    0x477fefffu, 0x477ff000u, 0x33000000u, 0x33c00000u, 0x34200000u, 0x38800000u, 0x387fe000u, 0x387ff000u,
    0x387fffffu, 0x33800000u, 0x32ffffffu, 0xb3400000u, 0x00000001u, 0x80800000u,
};
enum { LOWERED_HALF_SPECIALS = sizeof lowered_half_specials / sizeof *lowered_half_specials };

/* The reference GEMM (row-major, cblas semantics) with its bias, in double; a "gelu"
 * GEMM leaves GELU's input (in aux, if given) for its epilogue kernel, as on the CPU. */
/* Element i of a GEMM operand of dtype t, as f32. */
static inline float lowered_elem(const char *base, DType t, int64_t i) {
  if (t == DT_BF16 || t == DT_F16) return kx_to_f32(t, ((const uint16_t *)base)[i]);
  if (t == DT_E4M3 || t == DT_E5M2) return isa_fp8_to_f32(kx_fp8(t), ((const uint8_t *)base)[i]);
  return ((const float *)base)[i];
}

static inline void lowered_gemm_ref(const IsaGemm *g, char *const *tiers) {
  for (int64_t b0 = 0; b0 < g->batch[0]; b0++)
    for (int64_t b1 = 0; b1 < g->batch[1]; b1++) {
      const char *ma = tiers[g->tier[0]] + g->off[0], *mb = tiers[g->tier[1]] + g->off[1];
      int64_t sa = b0 * g->stride[0][0] + b1 * g->stride[0][1], sb = b0 * g->stride[1][0] + b1 * g->stride[1][1];
      int64_t sc = b0 * g->stride[2][0] + b1 * g->stride[2][1];
      char *mc = tiers[g->tier[2]] + g->off[2];
      for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
          double s = 0;
          for (int64_t q = 0; q < g->k; q++)
            s += (double)lowered_elem(ma, (DType)g->dt[0], sa + (g->ta ? q * g->lda + i : i * g->lda + q)) *
                 lowered_elem(mb, (DType)g->dt[1], sb + (g->tb ? j * g->ldb + q : q * g->ldb + j));
          double bias = g->bias ? ((const float *)(tiers[g->bias_tier] + g->bias_off))[j] : 0;
          double x = g->alpha * s +
                     (g->beta != 0 ? g->beta * lowered_elem(mc, (DType)g->dt[2], sc + i * g->ldc + j) : 0) + bias;
          if (g->aux) { /* GELU's input, for its epilogue kernel (f32 only) */
            ((float *)(tiers[g->aux_tier] + g->aux_off))[i * g->ldc + j] = (float)x;
          } else if (g->dt[2] == ISA_BF16 || g->dt[2] == ISA_F16) {
            ((uint16_t *)mc)[sc + i * g->ldc + j] = kx_from_f32((DType)g->dt[2], (float)x);
          } else {
            ((float *)mc)[sc + i * g->ldc + j] = (float)x;
          }
        }
    }
}

/* A kernel's run (got) against the reference run (ref) from the same memory (before):
 * max |got - ref| / max |ref| over the elements either run changed, in every tier. */
static inline double lowered_written_error(const Program *p, char *const *ref, char *const *got, char *const *before) {
  double diff = 0, scale = 0;
  for (int t = 0; t < TIERS; t++) {
    const float *w = (const float *)ref[t], *g = (const float *)got[t], *b = (const float *)before[t];
    for (int64_t i = 0; i < p->tiers[t] / 4; i++) {
      bool same = !memcmp(&w[i], &g[i], 4) || (isnan(w[i]) && isnan(g[i]));
      if (same && !memcmp(&w[i], &b[i], 4)) continue;
      if (fabs(w[i]) > scale) scale = fabs(w[i]);
      double d = same ? 0 : fabs((double)g[i] - w[i]);
      if (!(d <= diff)) diff = d;
    }
  }
  return diff / (scale > 0 ? scale : 1);
}

/* What a kernel's result may differ by beyond tol: where it sums (a reduction phase,
 * attention) and stores a 16-bit value, two f32 sums that differ in their last bits
 * (vector lanes, another order) may round to neighbouring 16-bit values, one unit in
 * the last place apart (relative 2^-7 for bf16, 2^-10 for f16, of the largest value
 * written, as lowered_written_error measures). */
static inline double lowered_store_tolerance(const Kernel *k, double tol) {
  bool sums = k->attn != NULL;
  for (int i = 0; i < k->nphases; i++) sums |= k->phases[i].kind == KPH_REDUCE;
  double t = tol;
  for (int i = 0; sums && i < k->nphases + (k->attn != NULL); i++) {
    int b = i < k->nphases ? k->phases[i].buf : k->attn->res.buf;
    if (i < k->nphases && k->phases[i].kind == KPH_REDUCE) continue;
    DType d = k->bufs[b].dtype;
    double u = d == DT_BF16 ? 0x1p-7 : d == DT_F16 ? 0x1p-10 : 0;
    if (u > t) t = u;
  }
  return t;
}

#endif
