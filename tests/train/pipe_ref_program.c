/* pipe_ref_program: the model of pipe_kernels.h as one unsplit stage, REF_MB
 * micro-batches of batch 2 run by the runtime's micro-batch loop: the one-rank
 * reference the pipeline program (pipe_program.c) must match. Built once per
 * micro-batch count (-DREF_MB=N) so its global batch equals a mesh's.
 *   WORK: tok 0, tgt 32, x 64, h 320, logits 576, dlogits 1088, dh 1600, dx 1856,
 *     row losses 2112, loss 2144, gradnorm 2160 (24 parts)
 *   PARAMS: E [16, 8] 0, W [8, 8] 512; OPT v at 768
 */
#include "pipe_kernels.h"

/* Every kernel instruction passes the four tier bases as the kernel's buffers
 * (program.h, "args": [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]), in tier order, so
 * the kernels of pipe_kernels.h index tiers[]; bytes 0: each keeps to the layout above. */

#ifndef REF_MB
#define REF_MB 2
#endif
#define S_(x) #x
#define XS(x) S_(x)

const char colossalc_program_json[] =
    "{\"version\": 1, \"model\": \"pipe-test\", \"batch\": 2, \"seq\": 4, \"vocab\": 16, \"scalars\": 12,"
    " \"tiers\": [768, 768, 1536, 2256], \"opt_v_offset\": 768, \"train\": {\"optimizer\": \"adamw\", \"l"
    "r\": 0.05, \"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-08, \"weight_decay\": 0.1, \"momentum\": 0, "
    "\"clip\": 1.0, \"warmup\": 1, \"min_lr\": 0.005, \"schedule\": \"cosine\"}, \"params\": [{\"name\": "
    "\"wte.weight\", \"shape\": [16, 8], \"offset\": 0, \"decay\": true, \"init\": \"normal\", \"a\": 0.5"
    ", \"b\": 0}, {\"name\": \"w.weight\", \"shape\": [8, 8], \"offset\": 512, \"decay\": true, \"init\":"
    " \"normal\", \"a\": 0.3, \"b\": 0}], \"inputs\": [{\"name\": \"tokens\", \"role\": \"tokens\", \"sha"
    "pe\": [2, 4], \"offset\": 0}, {\"name\": \"targets\", \"role\": \"targets\", \"shape\": [2, 4], \"of"
    "fset\": 32}], \"loss_offset\": 2144, \"logits_offset\": 576, \"gradnorm_offset\": 2160, \"gradnorm_p"
    "arts\": 24, \"flops_per_step\": 1000, \"kernels\": [\"r_embed\", \"r_xent\", \"r_embed_back\", \"r_g"
    "n_e\", \"r_gn_w\", \"r_adam_e\", \"r_adam_w\"], \"microbatches\": " XS(
        REF_MB) ", \"step\": [{\"op\": \"kernel\", \"kernel\": 0, \"extent\": 8, \"args\": [[0, 0, 0], [1, 0, 0], [2,"
                " 0, 0], [3, 0, 0]]}, {\"op\": \"gemm\", \"ta\": 0, \"tb\": 0, \"m\": 8, \"n\": 8, \"k\": 8, \"lda\":"
                " 8, \"ldb\": 8, \"ldc\": 8, \"alpha\": 1.0, \"beta\": 0.0, \"a\": [3, 64], \"b\": [0, 512], \"c\": ["
                "3, 320], \"batch\": [1, 1], \"sa\": [0, 0], \"sb\": [0, 0], \"sc\": [0, 0]}, {\"op\": \"gemm\", \"ta"
                "\": 0, \"tb\": 1, \"m\": 8, \"n\": 16, \"k\": 8, \"lda\": 8, \"ldb\": 8, \"ldc\": 16, \"alpha\": 1.0"
                ", \"beta\": 0.0, \"a\": [3, 320], \"b\": [0, 0], \"c\": [3, 576], \"batch\": [1, 1], \"sa\": [0, 0],"
                " \"sb\": [0, 0], \"sc\": [0, 0]}, {\"op\": \"kernel\", \"kernel\": 1, \"extent\": 1, \"args\": [[0, "
                "0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]}, {\"op\": \"gemm\", \"ta\": 0, \"tb\": 0, \"m\": 8, \"n\": "
                "8, \"k\": 16, \"lda\": 16, \"ldb\": 8, \"ldc\": 8, \"alpha\": 1.0, \"beta\": 0.0, \"a\": [3, 1088], "
                "\"b\": [0, 0], \"c\": [3, 1600], \"batch\": [1, 1], \"sa\": [0, 0], \"sb\": [0, 0], \"sc\": [0, 0]},"
                " {\"op\": \"gemm\", \"ta\": 1, \"tb\": 0, \"m\": 16, \"n\": 8, \"k\": 8, \"lda\": 16, \"ldb\": 8, \""
                "ldc\": 8, \"alpha\": 1.0, \"beta\": 1.0, \"a\": [3, 1088], \"b\": [3, 320], \"c\": [1, 0], \"batch\""
                ": [1, 1], \"sa\": [0, 0], \"sb\": [0, 0], \"sc\": [0, 0]}, {\"op\": \"gemm\", \"ta\": 1, \"tb\": 0, "
                "\"m\": 8, \"n\": 8, \"k\": 8, \"lda\": 8, \"ldb\": 8, \"ldc\": 8, \"alpha\": 1.0, \"beta\": 1.0, \"a"
                "\": [3, 64], \"b\": [3, 1600], \"c\": [1, 512], \"batch\": [1, 1], \"sa\": [0, 0], \"sb\": [0, 0], \""
                "sc\": [0, 0]}, {\"op\": \"gemm\", \"ta\": 0, \"tb\": 1, \"m\": 8, \"n\": 8, \"k\": 8, \"lda\": 8, \""
                "ldb\": 8, \"ldc\": 8, \"alpha\": 1.0, \"beta\": 0.0, \"a\": [3, 1600], \"b\": [0, 512], \"c\": [3, 1"
                "856], \"batch\": [1, 1], \"sa\": [0, 0], \"sb\": [0, 0], \"sc\": [0, 0]}, {\"op\": \"kernel\", \"ker"
                "nel\": 2, \"extent\": 1, \"args\": [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]}], \"sync\": [], \"gradnorm\": [{\""
                "op\": \"kernel\", \"kernel\": 3, \"extent\": 16, \"args\": [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, "
                "0]]}, {\"op\": \"kernel\", \"kernel\": 4, \"extent\": 8, \"args\": [[0, 0, 0], [1, 0, 0], [2, 0, 0],"
                " [3, 0, 0]]}], \"update\": [{\"op\": \"kernel\", \"kernel\": 5, \"extent\": 16, \"args\": [[0, 0, 0]"
                ", [1, 0, 0], [2, 0, 0], [3, 0, 0]]}, {\"op\": \"kernel\", \"kernel\": 6, \"extent\": 8, \"args\": [["
                "0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]}], \"forward\": []}";

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

const RtKernelFn colossalc_kernels[] = {r_embed, r_xent, r_embed_back, r_gn_e, r_gn_w, r_adam_e, r_adam_w};
const int colossalc_nkernels = sizeof colossalc_kernels / sizeof colossalc_kernels[0];
