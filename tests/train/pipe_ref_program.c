/* pipe_ref_program: the model of pipe_kernels.h as one unsplit stage (test_program.h),
 * REF_MB micro-batches of batch 2, each its inputs, a call of `step` and its loss, as
 * the compiler writes an unscheduled program's loop: the one-rank reference the pipeline
 * program (pipe_program.c) must match. Built once per micro-batch count (-DREF_MB=N) so
 * its global batch equals a mesh's.
 *   WORK: tok 0, tgt 32, x 64, h 320, logits 576, dlogits 1088, dh 1600, dx 1856,
 *     row losses 2112, loss 2144, gradnorm 2160 (24 parts)
 *   PARAMS: E [16, 8] 0, W [8, 8] 512; OPT v at 768
 */
#include "pipe_kernels.h"
#include "test_program.h"

#ifndef REF_MB
#define REF_MB 2
#endif

static const IsaInstr step_list[] = {
    KERNEL(0, 8),
    GEMM(.m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8, .tier = {TIER_WORK, TIER_PARAMS, TIER_WORK},
         .off = {64, 512, 320}),
    GEMM(.tb = 1, .m = 8, .n = 16, .k = 8, .lda = 8, .ldb = 8, .ldc = 16, .tier = {TIER_WORK, TIER_PARAMS, TIER_WORK},
         .off = {320, 0, 576}),
    KERNEL(1, 1),
    GEMM(.m = 8, .n = 8, .k = 16, .lda = 16, .ldb = 8, .ldc = 8, .tier = {TIER_WORK, TIER_PARAMS, TIER_WORK},
         .off = {1088, 0, 1600}),
    GEMM(.ta = 1, .m = 16, .n = 8, .k = 8, .lda = 16, .ldb = 8, .ldc = 8, .beta = 1,
         .tier = {TIER_WORK, TIER_WORK, TIER_GRADS}, .off = {1088, 320, 0}),
    GEMM(.ta = 1, .m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8, .beta = 1,
         .tier = {TIER_WORK, TIER_WORK, TIER_GRADS}, .off = {64, 1600, 512}),
    GEMM(.tb = 1, .m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8, .tier = {TIER_WORK, TIER_PARAMS, TIER_WORK},
         .off = {1600, 512, 1856}),
    KERNEL(2, 1),
};

#define MICROBATCHES(final) LOOP(REF_MB, 4, final), INPUT(0, 0, 1, 0), INPUT(1, 0, 1, 32), CALL(0), LOSS(2144)
static const IsaInstr train[] = {ZERO(TIER_GRADS, 0, 768), MICROBATCHES(1), KERNEL(3, 16), KERNEL(4, 8),
                                 NORM(2160, 24, REF_MB),   KERNEL(5, 16),   KERNEL(6, 8)};
static const IsaInstr eval[] = {ZERO(TIER_GRADS, 0, 768), MICROBATCHES(0)};

void tp_program(ProgBuild *b) {
  static const char *const codes[] = {"r_embed", "r_xent", "r_embed_back", "r_gn_e", "r_gn_w", "r_adam_e", "r_adam_w"};
  static const TpParam params[] = {{"wte.weight", 2, {PV, PH}, 0, 1, PROG_INIT_NORMAL, 0.5, 0, -1},
                                   {"w.weight", 2, {PH, PH}, 512, 1, PROG_INIT_NORMAL, 0.3, 0, -1}};
  static const TpInput in[] = {{"tokens", PROG_ROLE_TOKENS, {2, 4}, 0}, {"targets", PROG_ROLE_TARGETS, {2, 4}, 32}};
  static const TpList lists[] = {TP_LIST("step", step_list), TP_LIST("train", train), TP_LIST("eval", eval)};
  TpStage st = {.s = {.batch = 2,
                      .seq = 4,
                      .vocab = PV,
                      .microbatches = REF_MB,
                      .tp = 1,
                      .pp = 1,
                      TP_ADAMW(1),
                      .tiers = {768, 768, 1536, 2256},
                      .opt_v_offset = 768,
                      .slots = 1,
                      .norm_parts = 24,
                      .logits_offset = 576,
                      .flops_per_step = 1000},
                .params = params,
                .nparams = 2,
                .inputs = in,
                .ninputs = 2,
                .lists = lists,
                .nlists = 3};
  tp_write(b, "pipe-test", &st, 1, codes, 7);
}

static void r_embed(char *const *tiers, int64_t lo, int64_t hi, const float *sc) { pk_embed(tiers, 0, 64, lo, hi); }

static void r_xent(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_xent(tiers, 576, 32, 1088, 2112, 2144);
}

static void r_embed_back(char *const *tiers, int64_t lo, int64_t hi, const float *sc) { pk_embed_back(tiers, 0, 1856); }

static void r_gn_e(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_gnorm(tiers, 0, PH, 2160, 0, lo, hi);
}

static void r_gn_w(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_gnorm(tiers, 512, PH, 2160, PV, lo, hi);
}

static void r_adam_e(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_adamw(tiers, 0, PH, 768, lo, hi, sc);
}

static void r_adam_w(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_adamw(tiers, 512, PH, 768, lo, hi, sc);
}

static const ProgKernelFn kernels[] = {r_embed, r_xent, r_embed_back, r_gn_e, r_gn_w, r_adam_e, r_adam_w};
const ProgCpuBuild colossalc_cpu_builds[] = {{"any (written by hand)", "", kernels}};
const int colossalc_ncpu_builds = 1;
const int colossalc_nkernels = sizeof kernels / sizeof kernels[0];
