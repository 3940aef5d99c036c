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
 * Memory. Four tiers, each one allocation made once at start-up and zeroed, nothing
 * allocated in the step loop (fp8's scaling states rely on the zeros: codegen/lower.c):
 *     RT_TIER_PARAMS   every parameter, f32, at RtParam.offset
 *     RT_TIER_GRADS    every parameter's gradient, f32, at the same offset as the parameter
 *     RT_TIER_OPT      optimizer state: AdamW m at RtParam.offset and v at
 *                      opt_v_offset + RtParam.offset (SGD momentum at RtParam.offset)
 *     RT_TIER_WORK     inputs, activations and scratch, at offsets from the memory plan
 * A kernel's buffer or a GEMM operand names a tier and a byte offset; the runtime
 * resolves them against the tier base pointers (a kernel receives the addresses).
 *
 * Execution. A step is: zero the gradient tier, then for each micro-batch write its
 * rows into the inputs (each input's batch rows at its "offset") and run `step` (forward and
 * backward: the loss lands at loss_offset; gradients are ADDED into RT_TIER_GRADS, so
 * micro-batches accumulate), then run `sync` (the gradients summed over the ranks that
 * hold copies of them, below), then `gradnorm` (partial sums of squares of the
 * gradients this rank counts land at gradnorm_offset, gradnorm_parts f32 values; the
 * runtime adds them in double, and the ranks' sums over the world, with the loss, in
 * one host reduction: the norm's square), compute the scalars, run `update`. The
 * compiler composes these lists for every rank of the plan (codegen/compose.h): which
 * collectives sum the gradients, which rank counts each parameter in the norm, which
 * rank updates it and broadcasts it after.
 * Rank conditions: a "kernel", "gemm" or "zero" instruction may carry "dp_rank": R
 * and/or "tp_rank": R; it then runs only on the ranks whose coordinate in the mesh
 * (below) is R, and is skipped elsewhere. In `step` of an unscheduled program any
 * instruction may carry "last_microbatch": true: it runs only in the step's last run of
 * `step` (not in validation). A "comm" all_reduce over the dp group may carry
 * "overlap": true: nothing after it in its list touches its bytes (the compiler
 * verifies it), so a device with a communication stream runs it there beside the
 * following instructions and waits for it at the list's end (executor.h, Device.fork).
 * The compiler places a data-parallel plan's gradient sums this way: in `step`, each
 * bucket after the last instruction touching its gradients (codegen/compose.h).
 * Scalars passed to every kernel of `update` (RT_SC_*):
 *     [0] lr for this step (schedule applied)     [1] 1 / (1 - beta1^t)
 *     [2] 1 / (1 - beta2^t)                       [3] gradient scale: min(1, clip / (norm + 1e-6)), 1 without clipping
 *     [4] t, the 1-based step number
 *     [5..9] beta1, beta2, eps, weight decay, momentum, [10] the loss scale (fp16's
 *     dynamic loss scaling, the backward pass's seed; 1 otherwise), [11] 1, or 0 on a
 *     step fp16 skips (an overflow): the update kernels of a program with loss scaling
 *     then keep every value, and the list runs for its moves (offload) all the same;
 *     when the program says "scalars": 12 (every kernel of every list gets the array)
 * `forward` computes the logits for sampling (batch x seq x vocab at logits_offset,
 * of element type logits_dtype: f32, or the 16-bit logits of a mixed-precision GEMM,
 * which the loss reads widened) from the token inputs, without the loss or backward; a
 * program whose classifier is fused with its loss (classifier_ce) has none:
 * logits_offset -1.
 *
 * JSON schema (all offsets and sizes in bytes, all counts int64):
 * {
 *   "version": 1, "model": "gpt2-tiny",
 *   "batch": 4, "seq": 64, "vocab": 256,
 *   "arch": {"heads": 4, "causal": 1, "attention_scale": false, "norm": "layernorm",
 *            "norm_eps": 1e-5, "activation": "gelu_tanh", "rope_theta": 10000},
 *     (optional: what the whole model's ops say, for the checkpoint formats of other
 *      frameworks (runtime/hf.h, --save-hf): the attention ops' heads, whether they are
 *      causal (1 all, 0 none, -1 some) and whether one gives its own scale (not
 *      1/sqrt(head size)); the norms' kind ("layernorm", "rmsnorm") and eps; the
 *      activation ("gelu_tanh", "silu", "relu"); the rotary ops' base. A kind the ops
 *      disagree on is "mixed", a number -1; what no op states is left out.)
 *   "tiers": [params_bytes, grads_bytes, opt_bytes, work_bytes],
 *   "opt_v_offset": N,
 *   "train": {"optimizer": "adamw"|"sgd", "lr": .., "beta1": .., "beta2": .., "eps": ..,
 *             "weight_decay": .., "momentum": .., "clip": .., "warmup": N, "min_lr": ..,
 *             "schedule": "cosine"|"constant",
 *             "loss_scale": {"init": 65536, "growth": 2, "backoff": 0.5, "interval": 2000}},
 *     the last only in fp16 programs: the gradients come multiplied by the scale (scalar
 *     [10]); a step whose gradient norm is not finite is skipped and the scale times
 *     backoff, and after `interval` good steps in a row it grows (PyTorch's GradScaler).
 *   "params": [{"name": "wte.weight", "shape": [256, 128], "offset": 0, "decay": true,
 *               "init": "normal"|"uniform"|"zeros"|"ones"|"constant", "a": 0.02, "b": 0,
 *               "owner": R}, ...],
 *     (owner: with "zero_stage" 1 to 3, the rank of its dp group that owns the parameter
 *      (its optimizer state, its reduced gradient, its shard), dealt by the compiler;
 *      such a program gives a fixed "dp", and stages 2 and 3 are "zero_scheduled")
 *   "inputs": [{"name": "tokens", "role": "tokens"|"targets"|"data", "dtype": "i32"|"f32",
 *               "shape": [4, 64], "offset": N, "range": [LO, HI], "ignore": V}, ...],
 *     (at most 16, names unique. shape: [batch, ...], the rows of one micro-batch; 4-byte
 *      values, row-major, at WORK offset N (the instructions' "input" places them in a
 *      scheduled program, which may leave "offset" out). dtype: "i32" if absent. role: what
 *      `train` fills the input with (runtime/data.h): "tokens", i32 [batch, seq], the token
 *      ids of a language model, and "targets", the same shifted by one (one of each at
 *      most; from an llm.c token file, or a record file's fields of those names), or
 *      "data", any input a record file fills from the field of its name. range (i32 only):
 *      every value v is in [LO, HI), or equals "ignore" when given; the compiler bounds an
 *      input by the rows of each embedding it indexes and the classes of each loss it is
 *      the targets of, with the loss's ignore_index; without "range" the values of tokens
 *      and targets are checked below "vocab", those of data not at all. "seq" is the
 *      tokens' second dimension, 1 in a program without them; "vocab" is the classes the
 *      loss scores.)
 *   "loss_offset": N, "logits_offset": N, "gradnorm_offset": N, "gradnorm_parts": N,
 *   "logits_dtype": "f32" | "bf16" | "f16",   (optional, default f32)
 *   "fp8": {"offset": O, "rows": R, "width": W, "total": T, "runs": [[G, L, C], ...]},
 *                      (optional, --precision fp8: the delayed-scaling states, R rows of
 *                      W f32 at O of the work tier (slot 0), the same on every rank of a
 *                      stage; a pipeline stage's runs put its rows L..L+C-1 at rows
 *                      G..G+C-1 of the model's T (without runs: T = R, in order).
 *                      Checkpoints save and restore them in the model's order)
 *   "flops_per_step": F,
 *   "predicted_memory": [B, ...],  (optional: the device memory one training step holds
 *                      at its peak, per dp rank of a ZeRO plan or one value, as the
 *                      runtime counts it: tiers, ZeRO's committed pages, staging)
 *   "kernels": ["k0_embedding", ...],                   (names, index = kernel id)
 *   "cuda_launch": [[256, 40], ...],                     (optional: per kernel, the CUDA
 *                      threads per block and blocks; the object then also defines
 *                      const char colossalc_cuda_source[]: the CUDA C of the kernels,
 *                      the prelude and one unit per kernel separated by form feeds,
 *                      which the CUDA device compiles with NVRTC, runtime/cuda_kernels.h)
 *   "step": [INSTR, ...], "sync": [INSTR, ...], "gradnorm": [INSTR, ...], "update": [INSTR, ...],
 *   "forward": [INSTR, ...],
 *   "stage_groups": [[S, ...], ...]  (optional, pipelines: groups of stages, ascending, the
 *                      same list in every stage; a "comm" with "group": "stages" names one)
 * }
 * INSTR is one of
 *   {"op": "kernel", "kernel": ID, "extent": N, "args": [[tier, offset, bytes], ...]}
 *     run kernel ID over [0, N) of its parallel range; its buffer i is the bytes
 *     [offset, offset+bytes) of the tier (the WORK tier: of the current slot; with a
 *     fourth element 1, [3, offset, bytes, 1], of slot 0 whatever slot is current: a
 *     pipeline stage's fp8 scaling states), and the kernel receives their addresses
 *     (tiers[tier] + offset, at most 16). Kernels
 *     that differ only in where their buffers lie are one function called with
 *     different "args" (codegen/share.c): the 96 layers of GPT-3 share their kernels.
 *   {"op": "zero", "tier": T, "offset": O, "bytes": B}
 *   {"op": "gemm", "ta": 0|1, "tb": 0|1, "m": M, "n": N, "k": K, "lda": .., "ldb": .., "ldc": ..,
 *    "alpha": 1.0, "beta": 0.0|1.0, "a": [tier, offset], "b": [tier, offset], "c": [tier, offset],
 *    "batch": [B0, B1], "sa": [s0, s1], "sb": [s0, s1], "sc": [s0, s1]}
 *     C[i][j] = alpha * op(A[i][j]) op(B[i][j]) + beta * C[i][j] for i < B0, j < B1, where
 *     X[i][j] starts at X's offset + (i*sX[0] + j*sX[1]) elements; row-major f32,
 *     op() transposes when ta/tb is 1 (cblas_sgemm semantics with CblasRowMajor).
 *     Optional "bias": [tier, offset] (beta 0): the epilogue adds bias[j], n f32 at
 *     that offset, to every row of every C[i][j] (the add of a bias vector the
 *     compiler fuses into the GEMM: cuBLASLt's BIAS epilogue on a GPU).
 *     Optional "dtypes": [a, b, c] of "f32", "bf16", "f16", "e4m3", "e5m2" (f32 if
 *     absent; a and b alike, or both 8-bit; c not 8-bit): 16- and 8-bit operands are
 *     multiplied exactly and summed in f32, a 16-bit C is rounded once (to nearest even;
 *     program/isa.h's isa_from_f32); offsets and strides count elements of each
 *     operand's type, a bias stays f32. 8-bit operands (fp8) come with ta 0 and tb 1
 *     (both K-contiguous), the only layout cuBLASLt's fp8 GEMMs take.
 *     Optional "gelu": true (with "bias", batch [1, 1], ldc a multiple of 8): then every
 *     C[i][j] = gelu(C[i][j]), the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 *     x^3))); with "aux": [tier, offset] (16-byte aligned), GELU's input is also written
 *     there, m x n with leading dimension ldc (cuBLASLt's GELU_AUX_BIAS; GELU_BIAS
 *     without aux). The next kernel or GEMM of the list is then a kernel marked
 *     "epilogue": true that computes C = gelu(aux, or C): a device whose GEMMs apply
 *     the GELU (a GPU) skips it; the others (the CPU) leave GELU's input in aux (or C)
 *     from the GEMM and run it, the same compiled code as an unfused GELU.
 *
 * ---- Parallel programs: tensor and pipeline parallelism -----------------------------
 *
 * Mesh. A program may say "mesh": {"dp": D, "tp": T, "pp": P} (absent: tp 1, pp 1 and
 * dp from the top-level "dp", which must equal mesh.dp when both are given; D 0 means
 * any: the runtime takes world / (T*P)). The world is D*T*P ranks, and
 *     rank = pp_rank * (D*T) + dp_rank * T + tp_rank
 * (tensor-parallel ranks adjacent, pipeline stages furthest apart). Groups: the tp
 * group of a rank is the T ranks with its dp and pp coordinates; the dp group the D
 * ranks with its tp and pp coordinates (data parallelism and ZeRO work inside it, as
 * train_zero.h describes for the world today); the pp group the P ranks with its dp
 * and tp coordinates. Every rank of a dp group's tp and pp peers reads the same rows:
 * dp rank d reads rows [d*R, (d+1)*R) of the global batch, R = batch*microbatches.
 *
 * Stages. With P > 1 the JSON text is an array of P program objects; element s is
 * the program of pipeline stage s (its "stage": s), and a rank runs the element of
 * its pp rank. Each element is a whole program as above: its own params, tiers,
 * kernels (ids into the one shared colossalc_kernels table), lists. The stages agree
 * on model, mesh, batch, seq, vocab, microbatches, scheduled, scalars, zero_stage
 * and train. With P = 1 the text is one object, as before.
 *
 * Tensor-parallel parameters. A parameter split over the tp group carries
 * "tp": {"dim": d, "blocks": b}; its "shape" is the local shape, the global shape has
 * shape[d]*T along d. Dimension d of the global tensor is b equal blocks, each split
 * in T equal parts (b divides shape[d]); a rank holds its part of every block, in
 * block order. So local
 * index i along d (L = shape[d], c = L/b) is global index
 *     (i / c) * (c*T) + tp_rank * c + (i % c)
 * and every other dimension is the same. Initialisation draws each local element at
 * its global element index (row-major in the global shape), so every mesh initialises
 * the same model; checkpoints hold global tensors (saving gathers, loading slices).
 * A parameter without "tp" is replicated over the tp group.
 *
 * Tied parameters. A name that appears in the params of several stages is one
 * parameter held by each of them (the token embedding that is also the output
 * head): after the step the holders' gradients are summed (over the pp group, same
 * dp and tp coordinates), so every copy gets the same update. The copies have the
 * same shape, "tp", init and decay in every stage that holds them.
 *
 * Scheduled steps. A program with "scheduled": true runs `step` once per training
 * step: the list itself walks all micro-batches (the pipeline schedule, 1F1B or
 * interleaved, chosen by the compiler) and contains the instructions below. Without
 * it (the default) the runtime runs `step` once per micro-batch as above.
 * A scheduled program lists the inputs its `input` instructions place (a pipeline
 * stage: those its chunks read) and has no logits for sampling (logits_offset is not
 * checked).
 * "slots": S (default 1): the work tier is S slots of tiers[3] bytes each, one per
 * micro-batch in flight; every list starts at slot 0.
 * New instructions (all WORK offsets are relative to the current slot):
 *   {"op": "slot", "index": K}                       following instructions use slot K
 *   {"op": "input", "input": I, "microbatch": K, "offset": O}
 *       writes rows [K*batch, (K+1)*batch) of this rank's rows of the step of input I
 *       (an index into "inputs") at WORK offset O
 *   {"op": "loss", "offset": O}                      the f32 at WORK offset O is one
 *       micro-batch's loss; the step's loss is the sum over them / microbatches
 *   "input" and "loss" appear only in `step` of a scheduled program.
 *   {"op": "send", "peer": Q, "tag": G, "at": [tier, O], "count": N}
 *   {"op": "recv", "peer": Q, "tag": G, "at": [tier, O], "count": N}
 *       N f32 to / from pipeline stage Q (the rank of stage Q with this rank's dp and
 *       tp coordinates). A send does not wait for its receiver (the runtime copies
 *       the data out and completes every send before the step ends); a recv blocks.
 *       Messages between two ranks with the same tag are received in the order sent.
 *       G is in [0, 16384) (RT_TAG_LIMIT).
 *   {"op": "comm", "kind": "all_reduce"|"all_gather"|"reduce_scatter"|"split"|
 *            "broadcast"|"reduce",
 *    "src": [tier, O], "dst": [tier, O], "outer": A, "n": N, "inner": I,
 *    "group": "tp"|"dp"|"stages", "stage_group": K, "root": R, "reduction": "sum"|"max"}
 *       over a group of this rank (size T, this rank r in it): "group" "tp" (the
 *       default) the tensor-parallel group, "dp" the data-parallel group, "stages" the
 *       ranks of the stages in stage_groups[K] with this rank's dp and tp coordinates
 *       (ranked by stage; the program's stage is in it). The global tensor is A x N x I
 *       f32, row-major; the split kinds (all_gather, reduce_scatter, split; over the
 *       tp group only) split it in T parts of N/T along the middle dimension, the others
 *       take all A*N*I elements, whatever N is:
 *         all_reduce      src, dst: A x N x I; dst = the sum over the group of src
 *                         (with "reduction" "max": the largest; the other kinds sum)
 *         all_gather      src: A x N/T x I (this rank's part); dst: A x N x I
 *         reduce_scatter  src: A x N x I (a partial sum); dst: A x N/T x I, part r of
 *                         the sum over the group
 *         split           src: A x N x I; dst: A x N/T x I, part r of src
 *         broadcast       dst = root R's src on every rank
 *         reduce          root R's dst = the sum over the group of src (the others' dst
 *                         is left undefined)
 *       src and dst may be the same bytes (in place) for the kinds that split nothing,
 *       and must not overlap otherwise. "comm" may also appear in `step` of
 *       unscheduled programs, in `sync`, `update` and `forward`; `sync` holds only
 *       "comm".
 * Loss and norm over the mesh: the logged loss is the sum of the step losses of the
 * last stage's tp rank 0 over the dp ranks, over D. The gradient norm's sum of
 * squares is the world's sum of every rank's partial sums: the program's `gradnorm`
 * counts each parameter element once (split parameters on every tp rank, replicated
 * ones on tp rank 0, tied ones on the lowest stage holding them, one dp rank: the
 * owner from ZeRO stage 2, else dp rank 0), by rank conditions on its kernels and by
 * zeroing its partial sums first. Tied gradients are summed by `sync` (a reduce onto
 * the lowest holder and a broadcast back, over their stage group).
 *
 * ---- Memory tiers and offload -----------------------------------------------------
 *
 * A program may say "offload": {...}: its parameters, gradients and optimizer state do
 * not all fit in device memory, and the compiler planned where every byte of them is
 * at every instruction. Three locations: "device" (the tiers the kernels address),
 * "host" (host memory) and "nvme" (files under train's --nvme-dir). On the CPU device
 * the device location is still a separate allocation: its committed bytes are what the
 * device holds and may not exceed "device_capacity" (a commit beyond it is an internal
 * error naming the instruction: the plan is wrong).
 *   "offload": {
 *     "device_capacity": BYTES,   device memory of the plan: all four tiers' committed bytes
 *     "chunks": [{"params": [LO, HI], "home": {"params": L, "grads": "none", "opt": L},
 *                 "owner": R}, ...]           (owner: ZeRO stage 3 only)
 *   }
 * Chunk c holds parameters LO..HI-1 (program order, contiguous in the tiers). Its three
 * parts are byte ranges at the same offsets the kernels use: "params" [start, end) of
 * PARAMS, with start = params[LO].offset and end = params[HI-1].offset + its bytes
 * rounded up to 64 (the last chunk: the end of the tier); "grads" the same range of
 * GRADS; "opt" the same range of OPT and, with AdamW, of OPT at opt_v_offset + the
 * range (m and v move together). Every byte of PARAMS, GRADS and OPT is in exactly one
 * chunk: chunks follow each other from byte 0, GRADS is the size of PARAMS, OPT the
 * size of PARAMS (SGD; or 0 without momentum) or twice it with opt_v_offset = the size
 * of PARAMS (AdamW). The WORK tier is on the device, whole, for the whole run.
 * Committed bytes are counted per granule of the device (a 4 KiB page on the CPU): a
 * granule shared by two parts counts once, and WORK counts rounded up to granules.
 * Offload runs on any mesh (each tensor-parallel rank and pipeline stage holding its
 * own tiers, each stage its own plan), at ZeRO stage 0 or 3, with one micro-batch unless
 * "scheduled" (the compiler writes every micro-batch into `step`). At stage 0 every
 * data-parallel rank holds the whole state at its homes (its gradient sums are in
 * `step`, codegen/compose.h); at stage 3 each chunk has an "owner" (a dp rank, the
 * owner of its parameters too), and only the owner holds it at its homes: elsewhere the
 * chunk's parts have no home and exist only on the device inside a step (codegen/
 * offload.h: the owner's copy is broadcast, the gradients reduced onto it, by "comm"
 * instructions of `step`). Moves, drops and waits may carry a "dp_rank" condition.
 * `sync` may hold moves too (a pipeline's tied gradients come back to the device for
 * their sum). Each rank's NVMe files live under --nvme-dir/rank-R (R: its world rank).
 * Home: where a part lives between steps (and where initialisation, --init-from,
 * --resume and checkpoints read and write it): "device", "host" or "nvme"; grads are
 * "none" (they exist only inside a step). A step starts with every part at its home
 * and with grads nowhere, and the compiled lists bring it back there by the end of
 * `update`. The runtime does not zero the GRADS tier of an offload program: a grads
 * part is created zero by a move from "zero".
 * Instructions (in `step`, `sync`, `gradnorm` and `update`; the program's lists run in order,
 * moves asynchronously on one copy thread, in the order issued):
 *   {"op": "move", "chunk": C, "part": "params"|"grads"|"opt", "from": F, "to": T,
 *    "keep": true|false}                             (keep: default false)
 *       F: "device", "host", "nvme" or "zero"; T: "device", "host" or "nvme". Puts memory
 *       behind the part's range at T (the device: counted against the capacity), copies
 *       it from F (from "zero": zeroes), then, unless keep, takes F's memory back (its
 *       copy is no longer valid). keep: F's memory and copy stay (a clean copy: when
 *       the part later leaves T unchanged, the compiler drops it instead of moving it).
 *       From "zero" keeps nothing ("keep": true is refused). The source must hold the
 *       part and T must not (a runtime check: an internal error naming the move).
 *   {"op": "drop", "chunk": C, "part": P, "at": L}
 *       takes the memory of the part at L back, without copying (a clean copy, or grads
 *       no longer needed); queued on the copy thread like a move. L must hold the part.
 *   {"op": "wait", "chunk": C, "part": P}
 *       blocks until every move and drop of that part issued so far has completed.
 *       Kernels and GEMMs never touch a range with a move or drop in flight.
 *   {"op": "kernel", ..., "on": "host"}
 *       in `gradnorm` and `update` only: runs the kernel with the PARAMS, GRADS and OPT
 *       bases of the host location (WORK stays the device's; on the CPU device both are
 *       host memory), as CPUAdam runs the optimizer of host-resident parameters.
 * After `update` every part must be at its home only (grads nowhere): an internal
 * error otherwise. Validation runs `step` alone: the runtime then brings every part
 * home itself (grads dropped, other copies dropped or moved home). Sampling runs
 * `forward` with every parameter copied to the device for the time (kept at home),
 * which train refuses at start-up when WORK and PARAMS exceed device_capacity.
 * train reports, beside the plan's prediction (optional top-level "predicted":
 * {"device_peak": B, "host_peak": B, "nvme_peak": B, "transfer_bytes": B}; at ZeRO
 * stage 3 host_peak, nvme_peak and transfer_bytes are arrays, one per dp rank), the
 * measured peak of each location (committed bytes, counted as above), the bytes the
 * moves of one training step copy (transfer_bytes: a part's end - start bytes, twice
 * for AdamW's opt, per move not from "zero"; the mean over the steps run) and the time
 * the lists waited on moves.
 * An NVMe write that fails (a full disk, an I/O error) stops the run with the file,
 * the offset and the error, before any checkpoint is touched.
 *
 * ---- ZeRO inside the step ------------------------------------------------------------
 *
 * Ownership (zero_stage 1 to 3, each parameter's "owner"): `update` runs parameter i's
 * kernel only where "dp_rank" is its owner, and at stages 1 and 2 ends with each
 * parameter broadcast from its owner over the dp group; at stage 1 each gradient is
 * reduced onto its owner (at stage 0 all-reduced), in `step` or `sync`
 * (codegen/compose.h). The runtime keeps the memory side: a
 * rank commits only its owners' shards of the tiers ZeRO reserves (train_zero.h).
 * A program with "zero_scheduled": true (zero_stage 2 or 3; not scheduled, one
 * stage: mesh pp 1, no offload) places ZeRO's communication in `step`
 * (codegen/zero.h), so the runtime neither gathers every parameter before the step
 * nor reduces the gradients after it, and runs it only at its zero_stage:
 *   {"op": "zero_gather", "param": I}   stage 3: every rank but I's owner puts memory
 *       behind parameter I and receives it from the owner (a broadcast over the dp group)
 *   {"op": "zero_release", "param": I}  stage 3: every rank but the owner gives that
 *       memory back
 *   {"op": "zero_grad", "param": I}     before the micro-batch's first write of I's
 *       gradient: every rank but the owner puts zeroed memory behind it (the owner's
 *       accumulates over the micro-batches of the step)
 *   {"op": "join"}                      what follows waits for every "overlap"
 *       instruction issued before it (on a device without a communication stream
 *       those ran in order: nothing to wait for)
 *   {"op": "zero_reduce", "param": I}   after the micro-batch's last write of it: the
 *       dp group's gradients of I are summed into the owner's (a reduce), and every
 *       rank but the owner gives the memory back
 * A zero_gather may carry "overlap": true: the compiler issues it ahead (at the start
 * of the previous group of uses, codegen/zero.h), and nothing touches the parameter
 * before the next "join" (the compiler verifies it), so a device with a communication
 * stream runs the broadcast there while that group computes.
 * Every rank of a dp group runs the same list, so the collectives match. A parameter
 * the step writes no gradient for still gets zero_grad and zero_reduce at the end.
 * The four appear only in `step` of such a program ("param" in [0, nparams));
 * zero_gather and zero_release only at zero_stage 3. The runtime zeroes the owned
 * gradients once at the start of a step (not per micro-batch), so the owner's sum over
 * the micro-batches is exact; outside zero_grad .. zero_reduce a non-owner holds no
 * memory for that gradient (nor, stage 3, outside zero_gather .. zero_release for
 * that parameter) beyond pages it shares with what it holds, so zero_grad zeroes the
 * whole gradient, not only fresh memory.
 * Sampling and checkpoints (outside `step`) gather and release every parameter as
 * before; validation runs `step`, so it gathers as the step does.
 */
#ifndef COLOSSALC_PROGRAM_H
#define COLOSSALC_PROGRAM_H
#include <stdint.h>

enum { RT_TIER_PARAMS, RT_TIER_GRADS, RT_TIER_OPT, RT_TIER_WORK, RT_TIERS };
#define RT_MAX_INPUTS 16 /* "inputs" of a program */
enum { RT_SC_LR, RT_SC_BC1, RT_SC_BC2, RT_SC_GSCALE, RT_SC_STEP, RT_SCALARS };
/* With "scalars": 12 in the program, kernels also read the optimizer's
 * hyperparameters (after command-line overrides), the loss scale and whether the
 * step's update applies at these indices. */
enum {
  RT_SC_BETA1 = RT_SCALARS,
  RT_SC_BETA2,
  RT_SC_EPS,
  RT_SC_WD,
  RT_SC_MOMENTUM,
  RT_SC_LOSS_SCALE,
  RT_SC_APPLY,
  RT_SCALARS_ALL
};

/* bufs[i]: the address of the kernel's buffer i (the instruction's "args"). */
typedef void (*RtKernelFn)(char *const *bufs, int64_t lo, int64_t hi, const float *scalars);

extern const char colossalc_program_json[];
extern const RtKernelFn colossalc_kernels[];
extern const int colossalc_nkernels;
/* The CUDA C of the kernels ("cuda_launch" above); NULL in a program without it. */
extern const char colossalc_cuda_source[] __attribute__((weak));

#endif
