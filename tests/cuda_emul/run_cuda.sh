#!/bin/sh
# The CUDA device without a GPU (tests/cuda_emul/tests.cmake).
#   one_rank     gpt2-tiny (2 layers) for 5 steps on the emulated CUDA device against the
#                CPU device: every step's loss and every parameter after the last step to
#                a relative 1e-5 (compare_runs.py); the second start finds all kernel
#                units in the cache; a damaged entry is found, rebuilt, and the run equal;
#                with an emulated cuBLASLt that has no GELU, DGELU or BGRAD epilogue
#                (COLOSSALC_EMUL_LT_EPILOGUES=bias) the GEMM shapes that ask for one
#                run without it and their epilogue kernels run: said, and the run equal
#   bf16         gpt2-tiny compiled with --precision bf16 for 5 steps on the emulated CUDA
#                device (bf16 GEMM layouts in cuBLASLt) against the CPU device: the kernels'
#                libm (tanh, exp) differs in the last bits and can move a bf16 rounding, so
#                to a relative 1e-2 (small biases follow the noise too), the key biases
#                (zero gradient: only rounding noise) left out; then again with the
#                emulated cuBLASLt lacking the GELU, DGELU and BGRAD epilogues
#   fused        gpt2-tiny with the classifier fused too (classifier_ce: chunked GEMMs at
#                row offsets, the cross-entropy's gradient in place; attention is fused by
#                default) for 5 steps on the emulated CUDA device against the CPU device,
#                to a relative 1e-5
#   gqa          grouped-query attention (Mistral: 2 key/value heads for 4, a window of 12
#                keys in 32) for 5 steps on the emulated CUDA device against the CPU
#                device, to a relative 1e-5; then in bf16 with heads of 16 features (the
#                fused attention on tensor-core tiles), to 1e-2 as bf16 above
#   fp8          gpt2-tiny with --precision fp8 (e4m3 and e5m2 GEMM operands in cuBLASLt's
#                "TN" layouts, the emulation refusing any other) against the CPU device for
#                5 steps: the first step's loss (the forward pass on the same weights) to a
#                relative 5e-4 and its gradient norm (its backward pass) to 5e-3 (bf16's
#                differ from fp8's by 1e-3 and 1e-2), every step's loss to 1e-3. Not
#                tighter: the fused attention's tensor cores round P and dS to bf16
#                where the CPU's kernel keeps f32 (2e-4 and 1.6e-3 here, an 8-bit
#                rounding after it magnifying that; 1e-5 and 1e-4 before). Nor the
#                parameters: the
#                two devices' kernels differ in the last bits (libm, and the order of the
#                CPU kernels' vector sums, which follows the CPU's vector width), and such
#                a difference moves an 8-bit rounding now and then (an eighth of a value),
#                which AdamW turns into full-size steps of small tensors (1e-4 after 5
#                steps on an AVX-512 CPU); a wrong scale or rounding point moves the loss
#                by far more
#   gpu_bounds   the bounds tests/gpu/run.sh holds a GPU to, against a GEMM that sums
#                in another order than the CPU's (COLOSSALC_EMUL_GEMM_SPLITK=3): f32 for
#                20 steps (first loss 1e-5; losses, parameters 1e-4), bf16 (losses 2^-8)
#   nvrtc_cache  real NVRTC (no GPU, no driver): train --compile-kernels for sm_80 and
#                sm_90, every unit compiled, then every unit from the cache, then one
#                damaged entry rebuilt
#   no_gpu       --device cuda where no driver is: one line naming libcuda.so.1, exit 1
#   libsearch    the libraries found where users have them: the emulated driver through
#                LD_LIBRARY_PATH, NVRTC in CUDA_HOME/lib64, cuBLASLt and NCCL in an
#                active Python environment's NVIDIA wheels (VIRTUAL_ENV/lib/python3.X/
#                site-packages/nvidia/PKG/lib): train --device-info names each file and the
#                emulated GPU, and a run on the emulated device from there equals the
#                CPU device (the step line's MFU against the emulated H100's peak); an
#                A100 with COLOSSALC_EMUL_GPU=a100; without the driver, --device-info says
#                so with every place
#                it looked and still lists the libraries
#   too_few_gpus 2 ranks (\$MPIRUN) on a node whose driver shows 1 GPU: refused in one line
#                before NCCL starts (it cannot put two ranks of a communicator on one GPU)
#   gpu_fails    2 ranks, rank 1's 20th kernel launch fails: its CUDA error is printed and
#                every rank ends (comm_fatal says so, then MPI_Abort: rank 0 is not left
#                waiting in a collective; Open MPI's own report of the abort is not always
#                printed)
# (Several ranks and offload on the emulated device: the other cuda_emul_* tests of
# tests.cmake, through tests/multirank's and tests/e2e's scripts.)
# Usage: run_cuda.sh COLOSSALC MKTOKENS SRCDIR WORKDIR PYTHON EMUL_LIB_DIR CHECK
set -eu
cc=$1 mktokens=$2 src=$3 work=$4 py=$5 emul=$6 check=$7
run=$work/$check
rm -rf "$run" && mkdir -p "$run" && cd "$run"
"$mktokens" "$src/data/genesis.txt" genesis.bin > /dev/null
"$cc" "$src/models/gpt2-tiny.model" --set layers=2 --set seq=32 --set batch=4 -o train 2> compile.err
args="--data genesis.bin --steps 5 --threads 2 --eps 1e-6"   # eps: see tests/multirank/run_equal.sh

fail() { echo "FAIL: $*"; exit 1; }
# the "cuda kernels:" line of OUT must contain TEXT
expect_line() {
  grep '^cuda' "$1" | tee /dev/stderr | grep -q "$2" || fail "$1: no '$2' in its cuda line"
}

# cpu_vs_cuda NAME "COLOSSALC FLAGS" COMPARE_RUNS ARGS...: the model compiled with the flags,
# trained on the CPU device and on the emulated CUDA device, the runs compared
cpu_vs_cuda() {
  name=$1 flags=$2
  shift 2
  "$cc" "$src/models/gpt2-tiny.model" --set layers=2 --set seq=32 --set batch=4 $flags -o "$name" 2> "$name.err"
  "./$name" $args --device cpu --log cpu.jsonl --save cpu.safetensors > cpu.out
  LD_LIBRARY_PATH=$emul "./$name" $args --device cuda --kernel-cache kc --log cuda.jsonl --save cuda.safetensors \
    > cuda.out
  "$py" "$src/tests/multirank/compare_runs.py" "$@" cpu.jsonl cuda.jsonl cpu.safetensors cuda.safetensors
}

case $check in
one_rank)
  ./train $args --device cpu --log cpu.jsonl --save cpu.safetensors > cpu.out
  LD_LIBRARY_PATH=$emul ./train $args --device cuda --kernel-cache kc --log cuda.jsonl --save cuda.safetensors \
    > cuda.out
  expect_line cuda.out "0 from the cache"
  "$py" "$src/tests/multirank/compare_runs.py" 1e-5 cpu.jsonl cuda.jsonl cpu.safetensors cuda.safetensors
  LD_LIBRARY_PATH=$emul ./train $args --device cuda --kernel-cache kc --log again.jsonl > again.out
  units=$(sed -n 's/.*kernels: \([0-9]*\) units\{0,1\}.*/\1/p' again.out)
  expect_line again.out "$units from the cache"
  entry=$(ls kc/*.cubin | head -1)
  head -c 100 "$entry" > kc/cut && mv kc/cut "$entry"      # a truncated entry
  LD_LIBRARY_PATH=$emul ./train $args --device cuda --kernel-cache kc --log damaged.jsonl \
    --save damaged.safetensors > damaged.out
  expect_line damaged.out "1 damaged cache entry rebuilt"
  "$py" "$src/tests/multirank/compare_runs.py" 1e-5 cpu.jsonl damaged.jsonl cpu.safetensors damaged.safetensors
  # a cuBLASLt without the GELU, DGELU and BGRAD epilogues: those GEMMs run without them, their
  # epilogue kernels after them, and the run is the same
  COLOSSALC_EMUL_LT_EPILOGUES=bias LD_LIBRARY_PATH=$emul ./train $args --device cuda --kernel-cache kc \
    --log plain.jsonl --save plain.safetensors > plain.out
  grep "^cuda gemms: cuBLASLt has no algorithm with the GELU, DGELU or BGRAD epilogue for [0-9]* of " plain.out ||
    fail "the GEMMs without their epilogues not reported"
  "$py" "$src/tests/multirank/compare_runs.py" 1e-5 cpu.jsonl plain.jsonl cpu.safetensors plain.safetensors
  ;;
bf16)
  cpu_vs_cuda train16 "--precision bf16" --skip "h[.][0-9]+[.]attn[.]c_attn[.]bias:128:256" 1e-2
  # the same without cuBLASLt's DGELU and BGRAD epilogues (the f32 bias gradient beside a
  # bf16 result is the setting a cuBLASLt may lack): their kernels run, the same bound
  COLOSSALC_EMUL_LT_EPILOGUES=bias LD_LIBRARY_PATH=$emul ./train16 $args --device cuda --kernel-cache kc \
    --log plain.jsonl --save plain.safetensors > plain.out
  grep "^cuda gemms: cuBLASLt has no algorithm with the GELU, DGELU or BGRAD epilogue for [0-9]* of " plain.out ||
    fail "the GEMMs without their epilogues not reported"
  "$py" "$src/tests/multirank/compare_runs.py" --skip "h[.][0-9]+[.]attn[.]c_attn[.]bias:128:256" 1e-2 cpu.jsonl \
    plain.jsonl cpu.safetensors plain.safetensors
  ;;
fused)
  cpu_vs_cuda trainf "--classifier fused" 1e-5
  ;;
gqa)
  mistral="$src/models/mistral.model --set vocab=256 --set d=64 --set heads=4 --set kv_heads=2 --set window=12
           --set layers=2 --set ffn=96 --set seq=32 --set batch=4"
  for prec in fp32 bf16; do
    "$cc" $mistral --precision $prec -o train-$prec 2> train-$prec.err
    ./train-$prec $args --device cpu --log cpu-$prec.jsonl --save cpu-$prec.safetensors > cpu-$prec.out
    LD_LIBRARY_PATH=$emul ./train-$prec $args --device cuda --kernel-cache kc --log cuda-$prec.jsonl \
      --save cuda-$prec.safetensors > cuda-$prec.out
    tol=1e-5
    [ $prec = bf16 ] && tol=1e-2
    "$py" "$src/tests/multirank/compare_runs.py" $tol cpu-$prec.jsonl cuda-$prec.jsonl cpu-$prec.safetensors \
      cuda-$prec.safetensors
  done
  ;;
fp8)
  "$cc" "$src/models/gpt2-tiny.model" --set layers=2 --set seq=32 --set batch=4 --precision fp8 -o train8 2> train8.err
  ./train8 $args --device cpu --log cpu.jsonl > cpu.out
  LD_LIBRARY_PATH=$emul ./train8 $args --device cuda --kernel-cache kc --log cuda.jsonl > cuda.out
  "$py" "$src/tests/multirank/compare_runs.py" --first 1 5e-4 cpu.jsonl cuda.jsonl
  "$py" "$src/tests/multirank/compare_runs.py" --first 1 --field grad_norm 5e-3 cpu.jsonl cuda.jsonl
  "$py" "$src/tests/multirank/compare_runs.py" 1e-3 cpu.jsonl cuda.jsonl
  ;;
gpu_bounds)
  # tests/gpu/run.sh's bounds, with the emulated cuBLASLt summing every product in 3
  # pieces, last first (another order than the CPU's sgemm, as a GPU's): f32 for 20
  # steps, the first loss to 1e-5, every loss and parameter to 1e-4; bf16 for 20 steps,
  # every loss to 2^-8
  for prec in fp32 bf16; do
    "$cc" "$src/models/gpt2-tiny.model" --set layers=2 --set seq=32 --set batch=4 --precision $prec -o "t$prec" \
      2> "t$prec.err"
    a="--data genesis.bin --steps 20 --threads 2 --eps 1e-6"
    "./t$prec" $a --device cpu --log "c$prec.jsonl" --save "c$prec.safetensors" > "c$prec.out"
    COLOSSALC_EMUL_GEMM_SPLITK=3 LD_LIBRARY_PATH=$emul "./t$prec" $a --device cuda --kernel-cache kc \
      --log "g$prec.jsonl" --save "g$prec.safetensors" > "g$prec.out"
  done
  "$py" "$src/tests/multirank/compare_runs.py" --first 1 1e-5 cfp32.jsonl gfp32.jsonl
  "$py" "$src/tests/multirank/compare_runs.py" 1e-4 cfp32.jsonl gfp32.jsonl cfp32.safetensors gfp32.safetensors
  "$py" "$src/tests/multirank/compare_runs.py" 0.00390625 cbf16.jsonl gbf16.jsonl
  ;;
nvrtc_cache)
  for arch in sm_80 sm_90; do
    ./train --compile-kernels $arch --kernel-cache kc > $arch.out
    expect_line $arch.out "0 from the cache"
    units=$(sed -n 's/.*kernels: \([0-9]*\) units\{0,1\}.*/\1/p' $arch.out)
    ./train --compile-kernels $arch --kernel-cache kc > $arch.again
    expect_line $arch.again "$units from the cache"
  done
  entry=$(ls kc/*.cubin | head -1)
  printf 'garbage' | dd of="$entry" bs=1 seek=64 conv=notrunc 2> /dev/null   # a flipped byte range
  ./train --compile-kernels sm_80 --kernel-cache kc > sm80.damaged
  ./train --compile-kernels sm_90 --kernel-cache kc > sm90.damaged
  cat sm80.damaged sm90.damaged | grep -q "1 damaged cache entry rebuilt" || fail "the damaged entry was not rebuilt"
  ./train --compile-kernels sm_90a_bad --kernel-cache kc > bad.out 2> bad.err && fail "a bad architecture compiled"
  tail -1 bad.err
  ;;
no_gpu)
  if ./train --device cuda $args > out 2> err; then fail "--device cuda ran without a GPU"; fi
  cat err
  [ "$(wc -l < err)" -eq 1 ] || fail "expected one line, got: $(cat err)"
  grep -q "libcuda.so.1" err || fail "the line does not name libcuda.so.1"
  ./train $args > auto.out   # the default: the CPU, as no GPU is visible
  grep -q "| cpu," auto.out || fail "the default device is not the CPU here"
  ;;
libsearch)
  mkdir -p drv home/lib64 venv/lib/python3.11/site-packages/nvidia/cublas/lib \
    venv/lib/python3.11/site-packages/nvidia/nccl/lib
  cp "$emul/libcuda.so.1" drv/
  cp "$emul/libnvrtc.so.13" home/lib64/
  cp "$emul/libcublasLt.so.13" venv/lib/python3.11/site-packages/nvidia/cublas/lib/
  cp "$emul/libnccl.so.2" venv/lib/python3.11/site-packages/nvidia/nccl/lib/
  placed="LD_LIBRARY_PATH=$run/drv CUDA_HOME=$run/home VIRTUAL_ENV=$run/venv"
  env $placed ./train --device-info > info.out
  cat info.out
  grep -q "^driver  *$run/drv/libcuda.so.1, CUDA " info.out || fail "the driver not from LD_LIBRARY_PATH"
  grep -q "^NVRTC  *$run/home/lib64/libnvrtc.so.13, " info.out || fail "NVRTC not from CUDA_HOME"
  grep -q "^cuBLASLt  *$run/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublasLt.so.13, " info.out ||
    fail "cuBLASLt not from VIRTUAL_ENV's wheels"
  grep -q "^NCCL  *$run/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2, " info.out ||
    fail "NCCL not from VIRTUAL_ENV's wheels"
  grep -q "^GPU 0  *NVIDIA H100 80GB HBM3 .*, 79.6 GiB, compute capability 9.0, 132 SMs" info.out ||
    fail "the emulated H100 not listed with its attributes"
  env $placed COLOSSALC_EMUL_GPU=a100 ./train --device-info | grep -q "^GPU 0 .*A100.*compute capability 8.0, 108 SMs" ||
    fail "COLOSSALC_EMUL_GPU=a100: no A100"
  ./train $args --device cpu --log cpu.jsonl --save cpu.safetensors > cpu.out
  env $placed ./train $args --device cuda --kernel-cache kc --log cuda.jsonl --save cuda.safetensors > cuda.out
  "$py" "$src/tests/multirank/compare_runs.py" 1e-5 cpu.jsonl cuda.jsonl cpu.safetensors cuda.safetensors
  grep -q "^step 5/5 .*| MFU [0-9.]*%" cuda.out || fail "no MFU in the step line (the H100's peak unknown?)"
  env -u LD_LIBRARY_PATH CUDA_HOME=/nonexistent/cuda ./train --device-info > nodrv.out
  cat nodrv.out
  grep -q "^driver  *not found: libcuda.so.1 not found: .*looked in LD_LIBRARY_PATH (unset), the loader's path, " \
    nodrv.out || fail "no driver: not said with the places looked in"
  grep -q "^GPUs  *none (no driver)" nodrv.out || fail "no driver: the GPUs not said"
  [ "$(grep -c '^NVRTC\|^cuBLASLt\|^NCCL' nodrv.out)" = 3 ] || fail "no driver: the libraries not all listed"
  ;;
too_few_gpus)
  status=0
  COLOSSALC_EMUL_GPUS=1 LD_LIBRARY_PATH=$emul timeout 120 $MPIRUN -np 2 ./train --device cuda $args > out 2> err ||
    status=$?
  cat err
  [ "$status" -ne 0 ] || fail "two ranks ran on one GPU"
  grep -q "2 ranks on this node and 1 GPU visible" err || fail "no line saying two ranks need two GPUs"
  ;;
gpu_fails)
  status=0
  COLOSSALC_EMUL_FAIL_LAUNCH=20 LD_LIBRARY_PATH=$emul timeout 120 $MPIRUN -np 2 ./train --device cuda $args > out 2> err ||
    status=$?
  cat err
  [ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "status $status: not ended by the failure"
  grep -q "train: CUDA error: .*LaunchKernel" err || fail "no CUDA error line"
  grep -q "train: rank 1 of 2 failed; ending every rank" err || fail "the ranks were not aborted together"
  ;;
esac
echo "ok $check"
