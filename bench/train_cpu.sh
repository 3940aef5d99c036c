#!/usr/bin/env bash
# CPU training benchmark: GPT-2 124M (batch 4, seq 64) and gpt2-tiny (seq 64, and 1024 with
# attention fused and materialized), compiled by
# colossalc, against the same step in PyTorch run by this script (Debian's
# python3-torch 1.13) on the same machine. Prints ms per step (median of the timed
# steps), tokens/s, achieved GFLOP/s (the model's FLOPs per step from colossalc's
# cost model over the step time) and its ratio to the best sgemm rate OpenBLAS reaches
# here (colossalc --calibrate's largest GEMMs, as train runs them), peak resident
# memory, and the speed-up over PyTorch. `train` runs as a user runs it (its default
# threads and kernels); the first lines name the kernels it ran (its build of the CPU
# kernels and OpenBLAS's core type, docs/train.md "CPUs").
# Usage: bench/train_cpu.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-6}
threads=$(nproc)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/tools/colossalc-mktokens" data/genesis.txt "$work/genesis.bin" > /dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
"$build/colossalc" --calibrate -o "$work/machine.json" 2> "$work/calibrate.txt"
sgemm=$(awk '/^  gemm / && $(NF-1) > best { best = $(NF-1) } END { print best }' "$work/calibrate.txt")
echo "best sgemm here: $sgemm GFLOP/s (colossalc --calibrate)"
printf '%-22s %10s %10s %10s %7s %10s %10s %10s\n' model ms/step tok/s GFLOP/s /sgemm peak_MiB torch_ms speedup

bench() { # name model-file torch-config... -- colossalc --set flags
  local name=$1 model=$2 cfg=$3; shift 3
  "$build/colossalc" "$model" "$@" -o "$work/train-$name" > /dev/null 2> "$work/cc.err" || { cat "$work/cc.err"; exit 1; }
  local flops tokens
  flops=$("$build/colossalc" "$model" "$@" --summary | awk -F'[:(]' '/FLOPs per training step/ {print $2+0}')
  /usr/bin/time -f '%M' -o "$work/rss" "$work/train-$name" --data "$work/genesis.bin" --steps $((steps + 1)) \
      --log "$work/$name.jsonl" > "$work/$name.out"
  [ -n "${kernels_named-}" ] || { kernels_named=1; echo "kernels: $(head -1 "$work/$name.out" | sed 's/.*| cpu kernels/cpu kernels/')"; }
  local ms
  ms=$(tail -n "$steps" "$work/$name.jsonl" | grep -o '"ms": *[0-9.e+-]*' | awk '{print $2}' | sort -g |
       awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  read -r _ b t _ <<< "$cfg"
  tokens=$(echo "$cfg" | awk '{print $6 * $7}')
  local torch_ms
  torch_ms=$(/usr/bin/python3 bench/torch_step.py $cfg 3 "$threads" | awk '{print $2}')
  awk -v n="$name" -v ms="$ms" -v tok="$tokens" -v f="$flops" -v rss="$(cat "$work/rss")" -v tm="$torch_ms" \
      -v best="$sgemm" 'BEGIN { g = f / (ms / 1000) / 1e9
    printf "%-22s %10.1f %10.0f %10.1f %7.2f %10.0f %10.1f %9.2fx\n", n, ms, tok / (ms / 1000), g, g / best, rss / 1024, tm,
           tm / ms }'
}

bench gpt2-124M-b4-t64 models/gpt2.model "50257 1024 768 12 12 4 64" --set batch=4 --set seq=64
bench gpt2-tiny models/gpt2-tiny.model "256 256 128 4 4 4 64"
# the same steps in bf16 mixed precision (--precision bf16; PyTorch's column is its f32 step)
bench gpt2-124M-bf16 models/gpt2.model "50257 1024 768 12 12 4 64" --set batch=4 --set seq=64 --precision bf16
bench gpt2-tiny-bf16 models/gpt2-tiny.model "256 256 128 4 4 4 64" --precision bf16
# and in fp8 (--precision fp8: the linear layers' GEMMs on e4m3/e5m2 copies, emulated in f32 here)
bench gpt2-124M-fp8 models/gpt2.model "50257 1024 768 12 12 4 64" --set batch=4 --set seq=64 --precision fp8
bench gpt2-tiny-fp8 models/gpt2-tiny.model "256 256 128 4 4 4 64" --precision fp8
# attention at seq 1024: fused (the default: flash_attention kernels, no scores stored)
# against materialized (OpenBLAS GEMMs and a softmax over the stored scores)
bench gpt2-tiny-s1024 models/gpt2-tiny.model "256 1024 128 4 4 2 1024" --set batch=2 --set seq=1024 --set ctx=1024
bench gpt2-tiny-s1024-mat models/gpt2-tiny.model "256 1024 128 4 4 2 1024" --set batch=2 --set seq=1024 --set ctx=1024 \
      --attention materialized
