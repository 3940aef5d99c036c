#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU, from what tests/gpu/prepare.sh
# compiled and collected in gpu-carry/ on a machine without one (the GPU machine has no
# package registry, and LLVM 14, flex, bison, OpenBLAS and Open MPI need not be there):
#   1. every kernel of the CUDA emitter's tests on the GPU against kernel_eval
#      (test_codegen_cuda gpu: NVRTC for the GPU's architecture, the driver API)
#   2. gpt2-tiny for 20 steps with --device cuda against --device cpu: the first step's
#      loss to a relative 1e-5 (f32 with TF32 off: the two devices sum in other orders,
#      a few ulps of f32 over sums of a few hundred terms), every step's loss and every
#      parameter after the last step to a relative 1e-4 (those differences, grown by
#      20 AdamW steps)
#   2b. the same in bf16 (attention on tensor cores) against --device cpu in bf16: every
#      step's loss to a relative 2^-8 (bf16's rounding unit: the devices' last-bit
#      differences move roundings of 16-bit values by a unit; the loss, a mean over the
#      tokens, moves by at most that); the parameters not compared (AdamW turns a
#      gradient's rounding noise into full steps of small tensors). cuda_emul_gpu_bounds
#      holds the emulated GPU to these bounds with its GEMMs summed in another order
#   3. the kernel cache: a second start finds every unit there (at least one, all of
#      them from the cache) and compiles none
#   3b. offload: gpt2-tiny under a 6 MiB device budget (moves on the copy stream, the
#      optimizer of host-resident chunks on the CPU) against the CPU run of 2., and its
#      measured peaks against the plan's (train's closing offload line)
#   4. bench/train_gpu.sh: GPT-2 124M, batch 16, seq 1024, bf16, against PyTorch on the same
#      GPU (SDPA, torch.compile); fails below 0.8 of PyTorch's tokens/s
# Everything goes to $OUT (default gpu-out/), a line per check to $OUT/summary.txt.
# Exit status: 0 when every check passed. Usage: bash tests/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/gpu-carry
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
failed=0
note() { echo "$*" | tee -a "$out/summary.txt"; }
check() { # name command...: runs it, its output in $out/name.txt
  local name=$1
  shift
  local t0=$SECONDS
  if "$@" > "$out/$name.txt" 2>&1; then note "ok   $name ($((SECONDS - t0)) s)"
  else note "FAIL $name ($((SECONDS - t0)) s): $(tail -3 "$out/$name.txt" | tr '\n' ' ')"; failed=1; fi
}
[ -x "$carry/train-tiny" ] || { note "FAIL no $carry: run tests/gpu/prepare.sh first and carry gpu-carry"; exit 1; }
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
check kernels "$carry/test_codegen_cuda" gpu
work=$(mktemp -d)
tiny() { (cd "$work" && "$carry/train-tiny" --data "$carry/genesis.bin" --steps 20 --eps 1e-6 "$@"); }
check tiny_cpu tiny --device cpu --log cpu.jsonl --save cpu.safetensors
check tiny_cuda tiny --device cuda --kernel-cache "$carry/kc" --log cuda.jsonl --save cuda.safetensors
check tiny_equal python3 tests/multirank/compare_runs.py 1e-4 "$work/cpu.jsonl" "$work/cuda.jsonl" \
  "$work/cpu.safetensors" "$work/cuda.safetensors"
first_loss() { sed -n '1s/.*"loss": *\([0-9.e+-]*\).*/\1/p' "$1"; }
check tiny_first_step awk -v a="$(first_loss "$work/cpu.jsonl")" -v b="$(first_loss "$work/cuda.jsonl")" \
  'BEGIN { d = a - b; if (d < 0) d = -d; printf "first loss: cpu %s, cuda %s\n", a, b; exit !(a != "" && d <= 1e-5 * a) }'
tiny16() { (cd "$work" && "$carry/train-tiny-bf16" --data "$carry/genesis.bin" --steps 20 --eps 1e-6 "$@"); }
check bf16_cpu tiny16 --device cpu --log cpu16.jsonl
check bf16_cuda tiny16 --device cuda --kernel-cache "$carry/kc" --log cuda16.jsonl
check bf16_equal python3 tests/multirank/compare_runs.py 0.00390625 "$work/cpu16.jsonl" "$work/cuda16.jsonl"
# "cuda kernels: N units for sm_XY, M from the cache": M = N > 0, and nothing compiled
cache_hit() {
  local line n m
  line=$(cd "$work" && "$carry/train-tiny" --device cuda --kernel-cache "$carry/kc" --steps 0 | grep '^cuda kernels:')
  echo "$line"
  n=$(echo "$line" | sed -n 's/.*kernels: \([0-9]*\) units\{0,1\} for sm_[0-9]*, \([0-9]*\) from the cache.*/\1/p')
  m=$(echo "$line" | sed -n 's/.*kernels: \([0-9]*\) units\{0,1\} for sm_[0-9]*, \([0-9]*\) from the cache.*/\2/p')
  [ -n "$n" ] && [ "$n" -gt 0 ] && [ "$n" = "$m" ] && ! echo "$line" | grep -q compiled
}
check tiny_cache_hit cache_hit
grep -h '^cuda' "$out/tiny_cuda.txt" | tee -a "$out/summary.txt"
off() { (cd "$work" && "$carry/train-tiny-off" --data "$carry/genesis.bin" --steps 20 --eps 1e-6 "$@"); }
check offload_cuda off --device cuda --kernel-cache "$carry/kc" --log off.jsonl --save off.safetensors
check offload_equal python3 tests/multirank/compare_runs.py 1e-4 "$work/cpu.jsonl" "$work/off.jsonl" \
  "$work/cpu.safetensors" "$work/off.safetensors"
grep -h '^offload: device peak' "$out/offload_cuda.txt" | tee -a "$out/summary.txt"
check bench bash bench/train_gpu.sh "$carry" "$out"
cat "$out/bench.txt" >> "$out/summary.txt"
rm -rf "$work"
note "$([ $failed = 0 ] && echo 'all GPU checks passed' || echo 'some GPU checks FAILED')"
exit $failed
