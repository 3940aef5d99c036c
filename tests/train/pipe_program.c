/* pipe_program: a hand-written pipeline program (test_program.h) for the mesh
 * dp any x tp 2 x pp 2, the model of pipe_kernels.h:
 *   stage 0: x = E[tokens]; h_local = x W_local (W [8, 8] split by columns over tp);
 *            h = all_gather(h_local); send h to stage 1. Backward: receive dh,
 *            dh_local = split(dh); dW_local += x^T dh_local; dx = all_reduce(dh_local
 *            W_local^T); dE[tokens] += dx
 *   stage 1: receive h; logits = h E^T; loss; dh = dlogits E; dE += dlogits^T h;
 *            send dh back
 * E (wte.weight) is tied: held by both stages. The schedule: two micro-batches in two
 * WORK slots, all forwards then all backwards (GPipe), each phase a loop over the
 * micro-batches, with "input", "loss" (tp rank 0 counts it), "send", "recv", "slot" and
 * "comm" instructions; then the sums (the tied E over the stages, the gradients over
 * dp); the norm counts E on stage 0's tp rank 0 and W on every tp rank, dp rank 0 only
 * (as codegen/compose.h composes a step); "norm"; the update, one kernel per parameter.
 * `train` is all of it after zeroing the gradients, `eval` the schedule alone.
 * pipe_ref_program.c is the same model as one unsplit stage; the multi-rank tests check
 * that both train the same model.
 *   stage 0 WORK (per slot): tok 0, tgt 32, x 64, h_local 320, h 448, dh 704,
 *     dh_local 960, dx partial 1088, dx 1344, loss 1600, gradnorm 1616 (24 parts);
 *     PARAMS E 0, W_local [8, 4] 512; OPT v at 640
 *   stage 1 WORK: tok 0, tgt 32, h 64, logits 320, dlogits 832, dh 1344, row
 *     losses 1600, loss 1632, gradnorm 1648 (16 parts); PARAMS E 0; OPT v at 512
 */
#include "pipe_kernels.h"
#include "test_program.h"

/* stage 0 */
static const IsaInstr s0_step[] = {
    LOOP(2, 6, 1), /* the forwards, micro-batch i in slot i */
    SLOT(0, 1),
    INPUT(0, 0, 1, 0),
    KERNEL(0, 8),
    GEMM(.m = 8, .n = 4, .k = 8, .lda = 8, .ldb = 4, .ldc = 4, .tier = {TIER_WORK, TIER_PARAMS, TIER_WORK},
         .off = {64, 512, 320}),
    COMM(.kind = ISA_COMM_ALL_GATHER, .tier = {TIER_WORK, TIER_WORK}, .off = {320, 448}, .outer = 8, .n = 8,
         .inner = 1),
    SEND(1, 0, 448, 64),
    LOOP(2, 7, 1), /* the backwards */
    SLOT(0, 1),
    RECV(1, 1, 704, 64),
    COMM(.kind = ISA_COMM_SPLIT, .tier = {TIER_WORK, TIER_WORK}, .off = {704, 960}, .outer = 8, .n = 8, .inner = 1),
    GEMM(.ta = 1, .m = 8, .n = 4, .k = 8, .lda = 8, .ldb = 4, .ldc = 4, .beta = 1,
         .tier = {TIER_WORK, TIER_WORK, TIER_GRADS}, .off = {64, 960, 512}),
    GEMM(.tb = 1, .m = 8, .n = 8, .k = 4, .lda = 4, .ldb = 4, .ldc = 8, .tier = {TIER_WORK, TIER_PARAMS, TIER_WORK},
         .off = {960, 512, 1088}),
    COMM(.kind = ISA_COMM_ALL_REDUCE, .tier = {TIER_WORK, TIER_WORK}, .off = {1088, 1344}, .outer = 1, .n = 64,
         .inner = 1),
    KERNEL(1, 1),
};

static const IsaInstr s0_sync[] = {
    COMM(.kind = ISA_COMM_REDUCE, .group = ISA_GROUP_STAGES, .tier = {TIER_GRADS, TIER_GRADS}, .off = {0, 0},
         .outer = 1, .n = 128, .inner = 1),
    COMM(.kind = ISA_COMM_BROADCAST, .group = ISA_GROUP_STAGES, .tier = {TIER_GRADS, TIER_GRADS}, .off = {0, 0},
         .outer = 1, .n = 128, .inner = 1),
    COMM(.kind = ISA_COMM_ALL_REDUCE, .group = ISA_GROUP_DP, .tier = {TIER_GRADS, TIER_GRADS}, .off = {0, 0},
         .outer = 1, .n = 160, .inner = 1),
};

static const IsaInstr s0_gradnorm[] = {
    ZERO(TIER_WORK, 1616, 96),
    KERNEL_ON(2, 16, 0, 0),
    KERNEL_ON(3, 8, 0, -1),
};

static const IsaInstr s0_update[] = {
    KERNEL(4, 16),
    KERNEL(5, 8),
};

/* stage 1 */
static const IsaInstr s1_step[] = {
    LOOP(2, 9, 1), /* micro-batch i in slot i, forward and backward */
    SLOT(0, 1),
    INPUT(1, 0, 1, 32),
    RECV(0, 0, 64, 64),
    GEMM(.tb = 1, .m = 8, .n = 16, .k = 8, .lda = 8, .ldb = 8, .ldc = 16, .tier = {TIER_WORK, TIER_PARAMS, TIER_WORK},
         .off = {64, 0, 320}),
    KERNEL(6, 1),
    LOSS_ON(1632, -1, 0),
    GEMM(.m = 8, .n = 8, .k = 16, .lda = 16, .ldb = 8, .ldc = 8, .tier = {TIER_WORK, TIER_PARAMS, TIER_WORK},
         .off = {832, 0, 1344}),
    GEMM(.ta = 1, .m = 16, .n = 8, .k = 8, .lda = 16, .ldb = 8, .ldc = 8, .beta = 1,
         .tier = {TIER_WORK, TIER_WORK, TIER_GRADS}, .off = {832, 64, 0}),
    SEND(0, 1, 1344, 64),
};

static const IsaInstr s1_sync[] = {
    COMM(.kind = ISA_COMM_REDUCE, .group = ISA_GROUP_STAGES, .tier = {TIER_GRADS, TIER_GRADS}, .off = {0, 0},
         .outer = 1, .n = 128, .inner = 1),
    COMM(.kind = ISA_COMM_BROADCAST, .group = ISA_GROUP_STAGES, .tier = {TIER_GRADS, TIER_GRADS}, .off = {0, 0},
         .outer = 1, .n = 128, .inner = 1),
    COMM(.kind = ISA_COMM_ALL_REDUCE, .group = ISA_GROUP_DP, .tier = {TIER_GRADS, TIER_GRADS}, .off = {0, 0},
         .outer = 1, .n = 128, .inner = 1),
};

static const IsaInstr s1_gradnorm[] = {
    ZERO(TIER_WORK, 1648, 64),
};

static const IsaInstr s1_update[] = {
    KERNEL(8, 16),
};

/* Stage s's lists: train (zeroing, the schedule, the sums, the norm, the update) and
 * eval (zeroing, the schedule), into t. */
static void stage_lists(IsaInstr *t, TpList *lists, int64_t grads, int64_t gn, int64_t parts, const IsaInstr *step,
                        int nstep, const IsaInstr *sync, int nsync, const IsaInstr *gnorm, int ngnorm,
                        const IsaInstr *update, int nupdate) {
  const IsaInstr zero[] = {ZERO(TIER_GRADS, 0, grads)}, norm[] = {NORM(gn, parts, 2)};
  int n = tp_cat(t, 128, 6, TP_PART(zero), step, nstep, sync, nsync, gnorm, ngnorm, TP_PART(norm), update, nupdate);
  int e = tp_cat(t + n, 128 - n, 2, TP_PART(zero), step, nstep);
  lists[0] = (TpList){"train", t, n}, lists[1] = (TpList){"eval", t + n, e};
}

void tp_program(ProgBuild *b) {
  static const char *const codes[] = {"s0_embed",  "s0_embed_back", "s0_gn_e", "s0_gn_w",  "s0_adam_e",
                                      "s0_adam_w", "s1_xent",       "s1_gn_e", "s1_adam_e"};
  static const TpParam e = {"wte.weight", 2, {PV, PH}, 0, 1, PROG_INIT_NORMAL, 0.5, 0, -1};
  static const TpParam p0[] = {{"wte.weight", 2, {PV, PH}, 0, 1, PROG_INIT_NORMAL, 0.5, 0, -1},
                               {"w.weight", 2, {PH, PH / 2}, 512, 1, PROG_INIT_NORMAL, 0.3, 0, 1}};
  static const TpInput in[] = {{"tokens", PROG_ROLE_TOKENS, {2, 4}, 0}, {"targets", PROG_ROLE_TARGETS, {2, 4}, 32}};
  static const int64_t groups[] = {2, 0, 1}; /* the holders of E: stages 0 and 1 */
  static IsaInstr t0[256], t1[256];
  static TpList l0[2], l1[2];
  stage_lists(t0, l0, 640, 1616, 24, TP_PART(s0_step), TP_PART(s0_sync), TP_PART(s0_gradnorm), TP_PART(s0_update));
  stage_lists(t1, l1, 512, 1648, 16, TP_PART(s1_step), TP_PART(s1_sync), TP_PART(s1_gradnorm), TP_PART(s1_update));
  ProgStage s = {.batch = 2,
                 .seq = 4,
                 .vocab = PV,
                 .microbatches = 2,
                 .tp = 2,
                 .pp = 2,
                 TP_ADAMW(1),
                 .slots = 2,
                 .logits_offset = -1,
                 .flops_per_step = 1000};
  TpStage st[2] = {{.s = s,
                    .params = p0,
                    .nparams = 2,
                    .inputs = in,
                    .ninputs = 2,
                    .lists = l0,
                    .nlists = 2,
                    .groups = groups,
                    .ngroups = 1,
                    .ngroup_ints = 3},
                   {.s = s,
                    .params = &e,
                    .nparams = 1,
                    .inputs = in,
                    .ninputs = 2,
                    .lists = l1,
                    .nlists = 2,
                    .groups = groups,
                    .ngroups = 1,
                    .ngroup_ints = 3}};
  const int64_t t0s[TIERS] = {640, 640, 1280, 2224}, t1s[TIERS] = {512, 512, 1024, 1712};
  memcpy(st[0].s.tiers, t0s, sizeof t0s), memcpy(st[1].s.tiers, t1s, sizeof t1s);
  st[0].s.stage = 0, st[0].s.opt_v_offset = 640, st[0].s.norm_parts = 24;
  st[1].s.stage = 1, st[1].s.opt_v_offset = 512, st[1].s.norm_parts = 16;
  tp_write(b, "pipe-test", st, 2, codes, 9);
}

static void s0_embed(char *const *tiers, int64_t lo, int64_t hi, const float *sc) { pk_embed(tiers, 0, 64, lo, hi); }

static void s0_embed_back(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_embed_back(tiers, 0, 1344);
}

static void s0_gn_e(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_gnorm(tiers, 0, PH, 1616, 0, lo, hi);
}

static void s0_gn_w(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_gnorm(tiers, 512, PH / 2, 1616, PV, lo, hi);
}

static void s0_adam_e(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_adamw(tiers, 0, PH, 640, lo, hi, sc);
}

static void s0_adam_w(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_adamw(tiers, 512, PH / 2, 640, lo, hi, sc);
}

static void s1_xent(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_xent(tiers, 320, 32, 832, 1600, 1632);
}

static void s1_gn_e(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_gnorm(tiers, 0, PH, 1648, 0, lo, hi);
}

static void s1_adam_e(char *const *tiers, int64_t lo, int64_t hi, const float *sc) {
  pk_adamw(tiers, 0, PH, 512, lo, hi, sc);
}

static const ProgKernelFn kernels[] = {s0_embed,  s0_embed_back, s0_gn_e, s0_gn_w,  s0_adam_e,
                                       s0_adam_w, s1_xent,       s1_gn_e, s1_adam_e};
const ProgCpuBuild colossalc_cpu_builds[] = {{"any (written by hand)", "", kernels}};
const int colossalc_ncpu_builds = 1;
const int colossalc_nkernels = sizeof kernels / sizeof kernels[0];
