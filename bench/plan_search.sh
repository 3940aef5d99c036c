#!/usr/bin/env bash
# Plan-search benchmark: the wall time of `colossalc --dump-plan` (front end and
# search; the search's own time is what the text dump reports) for GPT-3 175B on
# 64, 512 and 1024 A100-80GB GPUs (8 per node) and GPT-2 124M on 8, with the plan
# chosen for each: mesh, ZeRO stage (+off: optimizer state offloaded to the host), micro-batches, recompute, schedule, predicted
# step time, TFLOP/s per GPU and MFU (model FLOPs), peak memory per device.
# Usage: bench/plan_search.sh [BUILD_DIR] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
printf '%-6s %5s %8s %8s  %-18s %-5s %-12s %-10s %-16s %9s %8s %6s %9s\n' model gpus wall_s search_s mesh zero micro-batches recompute schedule step_s TFLOP/s MFU peak_GiB

bench() { # model gpus
  local model=$1 gpus=$2 best=999 t0 t1 wall
  for ((i = 0; i < repeats; i++)); do
    t0=$(date +%s.%N)
    "$build/colossalc" "models/$model.model" --gpus "$gpus" --gpus-per-node 8 --gpu a100-80g --dump-plan > "$work/plan.txt"
    t1=$(date +%s.%N)
    wall=$(echo "$t1 - $t0" | bc -l)
    best=$(echo "if ($wall < $best) $wall else $best" | bc -l)
  done
  "$build/colossalc" "models/$model.model" --gpus "$gpus" --gpus-per-node 8 --gpu a100-80g --dump-plan=json > "$work/plan.json"
  local search
  search=$(awk '/^search:/ {print $(NF-1)}' "$work/plan.txt")
  /usr/bin/python3 - "$model" "$gpus" "$best" "$search" "$work/plan.json" <<'PY'
import json, sys
model, gpus, wall, search, path = sys.argv[1:]
d = json.load(open(path))
m, p = d["mesh"], d["predicted"]
sched = d["schedule"] + (" v=%d" % d["virtual_stages"] if d["virtual_stages"] > 1 else "")
print("%-6s %5s %8.3f %8s  %-18s %-5s %-12s %-10s %-16s %9.3f %8.1f %5.1f%% %9.1f" % (
    model, gpus, float(wall), search, "dp%d x tp%d x pp%d" % (m["dp"], m["tp"], m["pp"]),
    "%d%s" % (d["zero_stage"], "+off" if d.get("offload") == "optimizer" else ""),
    "%d x %d" % (d["microbatches"], d["microbatch_size"]), d["recompute"], sched, p["step_time_s"],
    p["tflops_per_gpu"], 100 * p["mfu"], d["memory"]["peak_bytes_per_device"] / 2**30))
PY
}

bench gpt3 64
bench gpt3 512
bench gpt3 1024
bench gpt2 8
