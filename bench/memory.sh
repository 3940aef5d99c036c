#!/usr/bin/env bash
# Memory by precision and attention. Part 1: the per-device memory the plan search
# predicts, as compiled (no --what-if), for GPT-3 on 64 A100-80GB and LLaMA-2 7B on one
# A100-80GB, in fp32, bf16 and fp16 (the mesh is printed), and the same on H100s in bf16
# and fp8 (A100s have no fp8 tensor cores), with attention fused and materialized. Part 2: the smallest device budget
# (--device-memory, found by bisection to 1/64 of the range) that each small model of
# the zoo trains under with offload, in fp32, bf16 and fp8, with attention and classifier
# fused (--attention fused --classifier fused) and with both materialized; the same
# budget's compiled program is the figure. Part 3: gpt2-tiny
# at seq 4096 trained with fused attention, its measured peak beside the prediction,
# and what materialized attention's program would need. Ratios are against fp32 fused
# (parts 1, 2) and fused (part 3) in the same run.
# Usage: bench/memory.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cc="$build/colossalc"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

echo "== predicted memory per device (plan search, as compiled) =="
printf '%-28s %-6s %-12s %-16s %12s %10s\n' model precision attention mesh GiB/device vs_first
plan() { # name "precisions" model args...
  local name=$1 precs=$2 model=$3 base=""
  shift 3
  for prec in $precs; do
    for attn in fused materialized; do
      local json
      json=$("$cc" "$model" "$@" --precision $prec --attention $attn --dump-plan=json 2> /dev/null) || {
        printf '%-28s %-6s %-12s %s\n' "$name" $prec $attn "no plan fits"
        continue
      }
      read -r mesh peak < <(python3 -c 'import json,sys; d=json.load(sys.stdin); m=d["mesh"]
print("dp%d/tp%d/pp%d" % (m["dp"], m["tp"], m["pp"]), d["memory"]["peak_bytes_per_device"])' <<< "$json")
      [ -n "$base" ] || base=$peak
      awk -v n="$name" -v p=$prec -v a=$attn -v m="$mesh" -v b="$peak" -v f="$base" \
        'BEGIN { printf "%-28s %-6s %-12s %-16s %12.2f %10s\n", n, p, a, m, b / 2^30, sprintf("%.2fx", b / f) }'
    done
  done
}
plan "gpt3 on 64 x a100-80g" "fp32 bf16 fp16" models/gpt3.model --gpus 64 --gpu a100-80g
plan "llama-2-7b on 1 x a100-80g" "fp32 bf16 fp16" models/llama.model --gpus 1 --gpu a100-80g
plan "gpt3 on 64 x h100-sxm" "bf16 fp8" models/gpt3.model --gpus 64 --gpu h100-sxm
plan "llama-2-7b on 1 x h100-sxm" "bf16 fp8" models/llama.model --gpus 1 --gpu h100-sxm

echo "== smallest device budget that trains (offload; attention and classifier fused or materialized) =="
printf '%-12s %-6s %-12s %12s %10s\n' model precision kernels MiB vs_first
fits() { "$cc" "$@" --dump-plan > /dev/null 2>&1; }
smallest() { # name model args...
  local name=$1 model=$2 base=""
  shift 2
  for prec in fp32 bf16 fp8; do
    for attn in fused materialized; do
      local hi=4096 lo=1 a=(--precision $prec --attention $attn --classifier $attn)
      fits "$model" "$@" "${a[@]}" --device-memory ${hi}M || {
        printf '%-12s %-6s %-12s %12s\n' "$name" $prec $attn "> ${hi}"
        continue
      }
      while ((hi - lo > 1 && (hi - lo) * 64 > hi)); do # bisection in MiB, to 1/64 of the budget
        local mid=$(((lo + hi) / 2))
        if fits "$model" "$@" "${a[@]}" --device-memory ${mid}M; then hi=$mid; else lo=$mid; fi
      done
      [ -n "$base" ] || base=$hi
      awk -v n="$name" -v p=$prec -v at=$attn -v m=$hi -v f="$base" \
        'BEGIN { printf "%-12s %-6s %-12s %12d %10s\n", n, p, at, m, sprintf("%.2fx", m / f) }'
    done
  done
}
smallest gpt2-tiny models/gpt2-tiny.model
smallest gpt-v2048 models/gpt2-tiny.model --set vocab=2048 --set batch=4 --set seq=64
smallest gpt2 models/gpt2.model --set batch=4 --set seq=256
smallest bert models/bert.model --set batch=4 --set seq=128
smallest vit models/vit.model --set batch=8

echo "== gpt2-tiny at seq 4096 (batch 1): measured peak with fused attention, predictions =="
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
long=(models/gpt2-tiny.model --set seq=4096 --set ctx=4096 --set batch=1)
"$build/tools/colossalc-mktokens" data/genesis.txt "$work/g.bin" > /dev/null
predicted() { # attention -> the program's predicted bytes
  "$cc" "${long[@]}" --attention "$1" --emit-kernels "$work/k-$1.txt" -o "$work/train-$1" 2> /dev/null
  python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().split("\nprogram ", 1)[1])["predicted_memory"][0])' \
    "$work/k-$1.txt"
}
fused=$(predicted fused)
mat=$(predicted materialized)
"$work/train-fused" --data "$work/g.bin" --steps 2 --log "$work/log.jsonl" > /dev/null
peak=$(python3 -c 'import json,sys; print(max(json.loads(l)["device_memory_peak"] for l in open(sys.argv[1])))' "$work/log.jsonl")
printf '%-44s %12s %10s\n' what MiB vs_fused
awk -v f="$fused" -v m="$mat" -v p="$peak" 'BEGIN {
  printf "%-44s %12.1f %10s\n", "fused attention, predicted", f / 2^20, "1.00x"
  printf "%-44s %12.1f %10s\n", "fused attention, measured (2 steps)", p / 2^20, sprintf("%.2fx", p / f)
  printf "%-44s %12.1f %10s\n", "materialized attention, predicted", m / 2^20, sprintf("%.2fx", m / f) }'
