/* The compiled training program as the runtime sees it: the contract between the
 * compiler's back end (codegen/program.c writes it) and the `train` runtime
 * (runtime/train_main.c and runtime/executor.c read and run it).
 *
 * How it reaches the runtime. `colossalc MODEL -o train` emits one object file that
 * defines three symbols, and links it with the runtime libraries:
 *     const char colossalc_program_json[];          the program below, as JSON
 *     const RtKernelFn colossalc_kernels[];          CPU kernels, in kernel-index order
 *     const int colossalc_nkernels;
 * (later also the CUDA sources of the same kernels, for NVRTC at start-up).
 *
 * Memory. Four tiers, each one allocation made once at start-up, nothing allocated
 * in the step loop:
 *     RT_TIER_PARAMS   every parameter, f32, at RtParam.offset
 *     RT_TIER_GRADS    every parameter's gradient, f32, at the same offset as the parameter
 *     RT_TIER_OPT      optimizer state: AdamW m at RtParam.offset and v at
 *                      opt_v_offset + RtParam.offset (SGD momentum at RtParam.offset)
 *     RT_TIER_WORK     inputs, activations and scratch, at offsets from the memory plan
 * A kernel or GEMM names a tier and a byte offset; the runtime passes the tier base
 * pointers as `tiers[]`.
 *
 * Execution. A step is: zero the gradient tier, then for each micro-batch write its
 * rows into the inputs (i32 token ids at RtInput.offset) and run `step` (forward and
 * backward: the loss lands at loss_offset; gradients are ADDED into RT_TIER_GRADS, so
 * micro-batches accumulate), then run `gradnorm` (partial sums of
 * squares of all gradients land at gradnorm_offset, gradnorm_parts f32 values; the
 * runtime adds them in double), compute the scalars, run `update`.
 * Scalars passed to every kernel of `update` (RT_SC_*):
 *     [0] lr for this step (schedule applied)     [1] 1 / (1 - beta1^t)
 *     [2] 1 / (1 - beta2^t)                       [3] gradient scale: min(1, clip / (norm + 1e-6)), 1 without clipping
 *     [4] t, the 1-based step number
 *     [5..9] beta1, beta2, eps, weight decay, momentum, when the program says
 *     "scalars": 10 (every kernel of every list gets the array)
 * `forward` computes the logits for sampling (batch x seq x vocab f32 at
 * logits_offset) from the token inputs, without the loss or backward.
 *
 * JSON schema (all offsets and sizes in bytes, all counts int64):
 * {
 *   "version": 1, "model": "gpt2-tiny",
 *   "batch": 4, "seq": 64, "vocab": 256,
 *   "tiers": [params_bytes, grads_bytes, opt_bytes, work_bytes],
 *   "opt_v_offset": N,
 *   "train": {"optimizer": "adamw"|"sgd", "lr": .., "beta1": .., "beta2": .., "eps": ..,
 *             "weight_decay": .., "momentum": .., "clip": .., "warmup": N, "min_lr": ..,
 *             "schedule": "cosine"|"constant"},
 *   "params": [{"name": "wte.weight", "shape": [256, 128], "offset": 0, "decay": true,
 *               "init": "normal"|"uniform"|"zeros"|"ones"|"constant", "a": 0.02, "b": 0}, ...],
 *   "inputs": [{"name": "tokens", "role": "tokens"|"targets", "shape": [4, 64], "offset": N}, ...],
 *   "loss_offset": N, "logits_offset": N, "gradnorm_offset": N, "gradnorm_parts": N,
 *   "flops_per_step": F,
 *   "kernels": ["k0_embedding", ...],                   (names, index = kernel id)
 *   "step": [INSTR, ...], "gradnorm": [INSTR, ...], "update": [INSTR, ...], "forward": [INSTR, ...]
 * }
 * INSTR is one of
 *   {"op": "kernel", "kernel": ID, "extent": N}          run kernel ID over [0, N) of its parallel range
 *   {"op": "zero", "tier": T, "offset": O, "bytes": B}
 *   {"op": "gemm", "ta": 0|1, "tb": 0|1, "m": M, "n": N, "k": K, "lda": .., "ldb": .., "ldc": ..,
 *    "alpha": 1.0, "beta": 0.0|1.0, "a": [tier, offset], "b": [tier, offset], "c": [tier, offset],
 *    "batch": [B0, B1], "sa": [s0, s1], "sb": [s0, s1], "sc": [s0, s1]}
 *     C[i][j] = alpha * op(A[i][j]) op(B[i][j]) + beta * C[i][j] for i < B0, j < B1, where
 *     X[i][j] starts at X's offset + (i*sX[0] + j*sX[1]) elements; row-major f32,
 *     op() transposes when ta/tb is 1 (cblas_sgemm semantics with CblasRowMajor).
 */
#ifndef COLOSSALC_PROGRAM_H
#define COLOSSALC_PROGRAM_H
#include <stdint.h>

enum { RT_TIER_PARAMS, RT_TIER_GRADS, RT_TIER_OPT, RT_TIER_WORK, RT_TIERS };
enum { RT_SC_LR, RT_SC_BC1, RT_SC_BC2, RT_SC_GSCALE, RT_SC_STEP, RT_SCALARS };
/* With "scalars": 10 in the program, kernels also read the optimizer's
 * hyperparameters (after command-line overrides) at these indices. */
enum { RT_SC_BETA1 = RT_SCALARS, RT_SC_BETA2, RT_SC_EPS, RT_SC_WD, RT_SC_MOMENTUM, RT_SCALARS_ALL };

typedef void (*RtKernelFn)(char *const *tiers, int64_t lo, int64_t hi, const float *scalars);

extern const char colossalc_program_json[];
extern const RtKernelFn colossalc_kernels[];
extern const int colossalc_nkernels;

#endif
