#!/usr/bin/env bash
# Prepares a GPU run (tests/gpu/run.sh) on this machine, which has no GPU: the GPU
# machine reaches no package registry and takes at most 64 MiB of working tree, so
# what it runs is compiled here and carried in gpu-carry/ (ignored by git):
#   train-tiny    gpt2-tiny (4 layers, batch 4, seq 64): 20 steps on the GPU against the CPU
#   train-tiny-off  the same under a 6 MiB device budget: offload on the GPU's copy stream
#   train-tiny-bf16  the same in bf16 mixed precision (attention on tensor cores)
#   train-gpt2    GPT-2 124M, batch 16, seq 1024, bf16: the benchmark (bench/train_gpu.sh)
#   test_codegen_cuda   every emitter test kernel on the GPU against kernel_eval
#   genesis.bin   the tokens; kc/  the kernels precompiled for sm_90 (the H200), so the
#                 GPU's minutes go to running, not to NVRTC
#   lib/          the shared libraries these need that a bare image may lack (OpenBLAS,
#                 Open MPI, cJSON, ...: ldd's list without glibc's own)
# Usage: tests/gpu/prepare.sh [BUILD_DIR]; then run the GPU machine's command with
# gpu-carry carried: bash tests/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
carry=gpu-carry
rm -rf "$carry" && mkdir -p "$carry/lib"
"$build/tools/colossalc-mktokens" data/genesis.txt "$carry/genesis.bin" > /dev/null
"$build/colossalc" models/gpt2-tiny.model --set batch=4 --set seq=64 -o "$carry/train-tiny"
"$build/colossalc" models/gpt2-tiny.model --set batch=4 --set seq=64 --device-memory 6M -o "$carry/train-tiny-off"
"$build/colossalc" models/gpt2-tiny.model --set batch=4 --set seq=64 --precision bf16 -o "$carry/train-tiny-bf16"
"$build/colossalc" models/gpt2.model --set batch=16 --set seq=1024 --precision bf16 -o "$carry/train-gpt2"
"$build/colossalc" models/gpt2.model --set batch=16 --set seq=1024 --precision bf16 --summary |
  awk -F'[:(]' '/FLOPs per training step/ {print $2+0}' > "$carry/train-gpt2.flops"
cp "$build/tests/test_codegen_cuda" "$carry/"
for t in train-tiny train-tiny-off train-tiny-bf16 train-gpt2; do
  "$carry/$t" --compile-kernels sm_90 --kernel-cache "$carry/kc"
done
for bin in "$carry/train-tiny" "$carry/train-gpt2" "$carry/test_codegen_cuda"; do
  ldd "$bin" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
  libc.so.*|libm.so.*|libmvec.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libnvrtc*|libcuda.so*) ;;
  *) cp -L "$lib" "$carry/lib/" ;;
  esac
done
du -sh "$carry"
size=$(du -sm "$carry" | cut -f1)
[ "$size" -lt 60 ] || { echo "gpu-carry is $size MiB: over what the GPU machine takes with the tree"; exit 1; }
echo "prepared $carry: run tests/gpu/run.sh on the GPU machine with $carry carried"
