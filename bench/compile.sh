#!/usr/bin/env bash
# Compile-time benchmark: the wall time and peak memory of `colossalc -o train` for the
# headline commands, and the size of the `train` written, against the goals of a 2-core
# machine (GPT-3 175B, 96 layers, for 8, 64 and 1024 GPUs in under 60 s each, the 64
# GPUs' plan of 1,536 micro-batches in a `train` under 100 MB; LLaMA-2 7B in under
# 20 s), with the kernels each program runs and the codes they share (codegen/share.c).
# The baseline, run in the same script: GPT-3 cut to one layer (--set layers=1) on one
# rank; the 96-layer model's compile time is printed as a ratio to it, which says how
# far the cost still grows with the layers.
# Usage: bench/compile.sh [BUILD_DIR] [REPEATS]   (best of REPEATS runs, default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -x /usr/bin/time ] || { echo "bench/compile.sh needs GNU time (/usr/bin/time, Debian package 'time')"; exit 2; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
printf '%-44s %8s %9s %9s %8s %7s %6s  %s\n' command wall_s peak_MiB train_MB kernels codes goal_s result

best_wall=0
# run NAME GOAL [MAX_MB] ARGS...: the best wall time of REPEATS compiles, the peak
# resident memory of the compiler, the size of `train` (its goal MAX_MB when given: a
# number before the model file), and what it printed about the kernels.
run() {
  local name=$1 goal=$2 max_mb=-
  shift 2
  [[ $1 =~ ^[0-9]+$ ]] && max_mb=$1 && shift
  local best=999999 peak=0 status=ok
  for ((i = 0; i < repeats; i++)); do
    if ! /usr/bin/time -f '%e %M' -o "$work/time" "$build/colossalc" "$@" -o "$work/train" 2> "$work/err" > /dev/null; then
      status="failed: $(grep -m1 'error' "$work/err" | cut -c1-160)"
      break
    fi
    read -r wall kb < "$work/time"
    best=$(echo "if ($wall < $best) $wall else $best" | bc -l)
    [ "$kb" -gt "$peak" ] && peak=$kb
  done
  if [ "$status" != ok ]; then
    printf '%-44s %8s %9s %9s %8s %7s %6s  %s\n' "$name" - - - - - "$goal" "$status"
    best_wall=0
    return
  fi
  local kernels codes result mb
  kernels=$(sed -n 's/.*wrote .*: \([0-9]*\) kernels\{0,1\} sharing.*/\1/p' "$work/err")
  codes=$(sed -n 's/.* sharing \([0-9]*\) codes\{0,1\}.*/\1/p' "$work/err")
  mb=$(echo "$(stat -c %s "$work/train") / 1000000" | bc -l)
  result=met
  [ "$goal" != - ] && [ "$(echo "$best > $goal" | bc -l)" = 1 ] && result="MISSED"
  [ "$max_mb" != - ] && [ "$(echo "$mb > $max_mb" | bc -l)" = 1 ] && result="MISSED (train over $max_mb MB)"
  [ "$goal" = - ] && result=baseline
  printf '%-44s %8.2f %9.1f %9.1f %8s %7s %6s  %s\n' "$name" "$best" "$(echo "$peak / 1024" | bc -l)" "$mb" "$kernels" \
    "$codes" "$goal" "$result"
  best_wall=$best
}

run "gpt3 --gpus 8" 60 models/gpt3.model --gpus 8
run "gpt3 --gpus 64 (1,536 micro-batches)" 60 100 models/gpt3.model --gpus 64
run "gpt3 --gpus 1024 --gpus-per-node 8" 60 models/gpt3.model --gpus 1024 --gpus-per-node 8
run "llama --gpus 8" 20 models/llama.model --gpus 8
run "llama (one rank)" 20 models/llama.model
run "gpt3, one layer (one rank)" - models/gpt3.model --set layers=1
base=$best_wall
run "gpt3, 96 layers (one rank)" 60 models/gpt3.model
if [ "$(echo "$base > 0 && $best_wall > 0" | bc -l)" = 1 ]; then
  printf 'gpt3 on one rank: 96 layers take %.1fx the compile time of one layer\n' "$(echo "$best_wall / $base" | bc -l)"
fi
