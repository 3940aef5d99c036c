#!/usr/bin/env bash
# Memory by precision. Part 1: the per-device memory the plan search predicts, as
# compiled (no --what-if), for GPT-3 on 64 A100-80GB and LLaMA-2 7B on one A100-80GB, in
# fp32, bf16 and fp16 (16-bit plans are data-parallel so far: the mesh is printed).
# Part 2: the smallest device budget (--device-memory, found by bisection to 1/64 of
# the range) that each small model of the zoo trains under with offload, in fp32 and in
# bf16, with attention and classifier materialized; the same budget's compiled program
# is the figure (the fused attention and the chunked classifier are not compiled yet,
# so their column is absent). Ratios are against fp32 in the same run.
# Usage: bench/memory.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cc="$build/colossalc"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

echo "== predicted memory per device (plan search, as compiled) =="
printf '%-28s %-6s %-22s %12s %10s\n' model precision mesh GiB/device vs_fp32
plan() { # name model args...
  local name=$1 model=$2 base=""
  shift 2
  for prec in fp32 bf16 fp16; do
    local json
    json=$("$cc" "$model" "$@" --precision $prec --dump-plan=json 2> /dev/null) || {
      printf '%-28s %-6s %s\n' "$name" $prec "no plan fits"
      continue
    }
    read -r mesh peak < <(python3 -c 'import json,sys; d=json.load(sys.stdin); m=d["mesh"]
print("dp%d/tp%d/pp%d" % (m["dp"], m["tp"], m["pp"]), d["memory"]["peak_bytes_per_device"])' <<< "$json")
    [ $prec != fp32 ] || base=$peak
    awk -v n="$name" -v p=$prec -v m="$mesh" -v b="$peak" -v f="$base" \
      'BEGIN { printf "%-28s %-6s %-22s %12.2f %10s\n", n, p, m, b / 2^30, f ? sprintf("%.2fx", b / f) : "-" }'
  done
}
plan "gpt3 on 64 x a100-80g" models/gpt3.model --gpus 64 --gpu a100-80g
plan "llama-2-7b on 1 x a100-80g" models/llama.model --gpus 1 --gpu a100-80g

echo "== smallest device budget that trains (offload, attention and classifier materialized) =="
printf '%-12s %-6s %12s %10s\n' model precision MiB vs_fp32
fits() { "$cc" "$@" --dump-plan > /dev/null 2>&1; }
smallest() { # name model args...
  local name=$1 model=$2 base=""
  shift 2
  for prec in fp32 bf16; do
    local hi=4096 lo=1
    fits "$model" "$@" --precision $prec --device-memory ${hi}M || {
      printf '%-12s %-6s %12s\n' "$name" $prec "> ${hi}"
      continue
    }
    while ((hi - lo > 1 && (hi - lo) * 64 > hi)); do # bisection in MiB, to 1/64 of the budget
      local mid=$(((lo + hi) / 2))
      if fits "$model" "$@" --precision $prec --device-memory ${mid}M; then hi=$mid; else lo=$mid; fi
    done
    [ $prec != fp32 ] || base=$hi
    awk -v n="$name" -v p=$prec -v m=$hi -v f="$base" \
      'BEGIN { printf "%-12s %-6s %12d %10s\n", n, p, m, f ? sprintf("%.2fx", m / f) : "-" }'
  done
}
smallest gpt2-tiny models/gpt2-tiny.model
smallest gpt2 models/gpt2.model --set batch=4 --set seq=256
smallest bert models/bert.model --set batch=4 --set seq=128
smallest vit models/vit.model --set batch=8
