#!/usr/bin/env bash
# Offload benchmark (docs/memory.md).
#  1. The step-time overhead of offload against no offload for a model that fits both
#     ways: gpt2-tiny widened to d 512, 8 layers (25.5M parameters, a 408 MB training
#     state, 75 MB of activations; batch 4 x 64 tokens), compiled without a budget and
#     with --device-memory 160M (the state 2.7 times the device), the median ms/step of
#     steps 3..STEPS of each, run one after the other in this script.
#  2. The largest GPT (byte vocabulary, d and layers from the list) that trains under a
#     1 GiB device with this machine's host memory (and NVMe files under NVME_DIR for
#     what the host does not hold), for one step (two with STEPS2=2), against the bound
#     of host memory over 16 bytes a parameter (f32 weights, gradients, AdamW moments all
#     in host memory). It prints the step time and the predicted and measured peaks.
#  3. The largest GPT (from the list RANKS4) that trains on 4 data-parallel ranks of
#     this machine under a 256 MiB device each, at ZeRO stage 3 (each rank's chunks at
#     its homes: its quarter of 80% of the host memory, then NVMe files), for one step (STEPS2),
#     against the bound of this machine's host memory plus the free disk of NVME_DIR
#     over 16 bytes a parameter; each rank's measured and predicted peaks.
# Usage: bench/offload.sh [BUILD_DIR] [d:layers ...]   (default: 1024:24 2048:24 2560:38)
# Environment: STEPS (default 8), STEPS2 (default 1), NVME_DIR (default a temporary
# directory on the disk of /var/tmp), RANKS4 (default "768:12 1536:24 1536:48 1792:48"),
# MPIRUN (default: mpirun, as root with --allow-run-as-root; --oversubscribe), ONLY (the
# sections to run, default 123).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
configs=${*:-"1024:24 2048:24 2560:38"}
steps=${STEPS:-8}
work=$(mktemp -d /var/tmp/colossalc-offload.XXXXXX)
nvme=${NVME_DIR:-$work/nvme}
mkdir -p "$nvme"
trap 'rm -rf "$work"' EXIT
cc=$build/colossalc
"$build/tools/colossalc-mktokens" data/genesis.txt "$work/genesis.bin" > /dev/null
host_kib=$(awk '/MemTotal/ {print $2}' /proc/meminfo)
echo "machine: $(nproc) cores, $((host_kib / 1024)) MiB of host memory, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

median_ms() { # jsonl: the median "ms" of steps 3..
  /usr/bin/python3 -c 'import json, statistics, sys
ms = [json.loads(l)["ms"] for l in open(sys.argv[1]) if "\"loss\"" in l]
print("%.1f" % statistics.median(ms[2:] if len(ms) > 2 else ms))' "$1"
}

only=${ONLY:-123}
if [[ $only == *1* ]]; then
echo
echo "== 1. offload overhead (gpt2-tiny d 512, 8 layers, batch 4 x 64)"
cfg=(--set batch=4 --set seq=64 --set d=512 --set layers=8 --set heads=8)
"$cc" models/gpt2-tiny.model "${cfg[@]}" -o "$work/t-ref"
"$cc" models/gpt2-tiny.model "${cfg[@]}" --device-memory 160M -o "$work/t-off" 2> /dev/null
args=(--data "$work/genesis.bin" --steps "$steps" --threads "$(nproc)")
"$work/t-ref" "${args[@]}" --log "$work/ref.jsonl" > /dev/null
"$work/t-off" "${args[@]}" --log "$work/off.jsonl" > "$work/off.out"
ref=$(median_ms "$work/ref.jsonl") off=$(median_ms "$work/off.jsonl")
printf '%-34s %10s\n' "no offload, ms/step" "$ref" "offload to 160 MiB, ms/step" "$off"
awk -v a="$ref" -v b="$off" 'BEGIN { printf "%-34s %9.2fx\n", "offload / no offload", b / a }'
grep '^offload: device peak' "$work/off.out"
fi

if [[ $only == *2* ]]; then
echo
echo "== 2. the largest GPT under a 1 GiB device (byte vocabulary, batch 1 x 64)"
printf '%-10s %14s %8s %10s %9s %9s %9s %9s %10s\n' d:layers parameters homes step_s dev_MiB dev_pred host_GiB host_pred vs_bound
bound=$((host_kib * 1024 / 16))
for c in $configs; do
  d=${c%%:*} layers=${c##*:}
  heads=$((d / 128))
  gcfg=(--set vocab=256 --set ctx=64 --set seq=64 --set batch=1 --set d="$d" --set heads="$heads" --set layers="$layers")
  params=$("$cc" models/gpt2-tiny.model "${gcfg[@]}" --summary | awk '/^parameters:/ {print $2}')
  if ! "$cc" models/gpt2-tiny.model "${gcfg[@]}" --device-memory 1G --dump-plan > "$work/plan.txt" 2> "$work/cc.err" ||
     ! "$cc" models/gpt2-tiny.model "${gcfg[@]}" --device-memory 1G -o "$work/t-big" 2> "$work/cc.err"; then
    echo "$c: does not compile: $(tail -1 "$work/cc.err")"
    continue
  fi
  homes=$(awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print $4 "/" $6; exit}' "$work/plan.txt")
  if ! "$work/t-big" --data "$work/genesis.bin" --steps "${STEPS2:-1}" --threads "$(nproc)" --nvme-dir "$nvme" \
       --log "$work/big.jsonl" > "$work/big.out" 2>&1; then
    echo "$c ($params parameters): did not train: $(tail -1 "$work/big.out")"
    continue
  fi
  /usr/bin/python3 - "$c" "$params" "$homes" "$work/big.jsonl" "$bound" <<'PY'
import json, sys
c, params, homes, log, bound = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
rec = [json.loads(l) for l in open(log)]
ms = [r["ms"] for r in rec if "loss" in r]
off = [r["offload"] for r in rec if "offload" in r][-1]
M, G = 2**20, 2**30
print("%-10s %14d %8s %10.1f %9.1f %9.1f %9.2f %9.2f %9.2fx" % (c, params, homes, ms[-1] / 1000, off["device_peak"] / M,
      off["predicted_device_peak"] / M, off["host_peak"] / G, off["predicted_host_peak"] / G, params / bound))
PY
  rm -f "$nvme"/*
done
echo "bound: host memory / 16 bytes a parameter = $bound parameters"
fi

[[ $only == *3* ]] || exit 0
echo
echo "== 3. the largest GPT on 4 ranks under a 256 MiB device each (ZeRO-3, byte vocabulary, batch 4 x 64)"
mpirun=${MPIRUN:-mpirun --oversubscribe$([ "$(id -u)" = 0 ] && echo ' --allow-run-as-root')}
disk_kib=$(df -k --output=avail "$nvme" | tail -1)
bound4=$(((host_kib + disk_kib) * 1024 / 16))
printf '%-10s %14s %10s %9s %9s %9s %9s %9s %9s %10s\n' d:layers parameters step_s dev_MiB dev_pred \
  host_GiB host_pred nvme_GiB nvme_pred vs_bound
largest=""
for c in ${RANKS4:-768:12 1536:24 1536:48 1792:48}; do
  d=${c%%:*} layers=${c##*:}
  heads=$((d / 128))
  gcfg=(--set vocab=256 --set ctx=64 --set seq=64 --set batch=4 --set d="$d" --set heads="$heads" --set layers="$layers")
  params=$("$cc" models/gpt2-tiny.model "${gcfg[@]}" --summary | awk '/^parameters:/ {print $2}')
  if ! "$cc" models/gpt2-tiny.model "${gcfg[@]}" --gpus 4 --gpus-per-node 4 --gpu cpu --dp 4 --tp 1 --pp 1 --zero 3 \
       --microbatch-size 1 --device-memory 256M -o "$work/t-4" 2> "$work/cc.err"; then
    echo "$c: does not compile: $(tail -1 "$work/cc.err")"
    continue
  fi
  t0=$(date +%s.%N)
  if ! $mpirun -np 4 "$work/t-4" --data "$work/genesis.bin" --steps "${STEPS2:-1}" --threads 1 --nvme-dir "$nvme" \
       --log "$work/four.jsonl" > "$work/four.out" 2>&1; then
    echo "$c ($params parameters): did not train: $(grep -m1 -i 'error\|train:' "$work/four.out" | cut -c1-200)"
    continue
  fi
  largest="$c ($params parameters, $(echo "$(date +%s.%N) - $t0" | bc -l | cut -c1-6) s for the whole run)"
  /usr/bin/python3 - "$c" "$params" "$work/four.jsonl" "$work/four.out" "$bound4" <<'PY'
import json, re, sys
c, params, log, out, bound = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
ms = [json.loads(l)["ms"] for l in open(log) if '"loss"' in l]
M, G = 2**20, 2**30
# the most of the ranks' "rank R: offload: device peak A MiB ... (predicted P MiB) | host peak ... | nvme peak ..."
most = [0.0] * 6
for line in open(out):
    if re.match(r"rank \d+: offload: ", line):
        parts = line.split("|")
        for k, part in enumerate(parts[:3]):
            got, want = re.search(r"peak ([0-9.]+) MiB", part).group(1), re.search(r"predicted ([0-9.]+) MiB", part).group(1)
            most[2 * k] = max(most[2 * k], float(got))
            most[2 * k + 1] = max(most[2 * k + 1], float(want))
print("%-10s %14d %10.1f %9.1f %9.1f %9.2f %9.2f %9.2f %9.2f %9.3fx" % (c, params, ms[-1] / 1000, most[0], most[1],
      most[2] / 1024, most[3] / 1024, most[4] / 1024, most[5] / 1024, params / bound))
PY
  rm -rf "${nvme:?}"/*
done
echo "largest trained on 4 ranks: ${largest:-none}"
echo "bound: (host memory + free disk) / 16 bytes a parameter = $bound4 parameters"
