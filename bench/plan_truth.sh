#!/usr/bin/env bash
# The plan against colossalc's own runs: this machine calibrated (colossalc --calibrate),
# then gpt2-tiny at a larger configuration and GPT-2 124M at a small batch compiled for
# it (--cluster) on 1, 2, 4 and 8 ranks (dp, tp, pp with 1F1B, interleaved and ZB-H1
# (the search's schedule where none is forced), DeepSpeed-Ulysses on tp, ZeRO-1 and 3,
# recompute, offload under a device budget: the plan's own figure) and trained.
# Each row: the plan, its predicted step time, the measured step time (train's log:
# "ms" beside "predicted_ms"), the error, and the device memory the plan predicts per
# rank against the largest rank's measured peak (the log's "device_memory_peak"); after
# it the steps' median, and each tier's memory as the plan prices it on its largest
# stage against the largest rank's peak (the log's "memory_peak": params, grads, opt, and
# work for the activations and buffers; train logs it for several ranks or ZeRO, "-" on
# one rank, whose tiers are whole). The tiers are where the runtime commits memory:
# ZeRO-3's gathered parameters and the pieces of an offloaded state on the device are in
# the params, grads and opt tiers, where the plan counts them as buffers (work).
# Bounds (docs/plan.md, "Calibration"): time within 10 % where the ranks are no more
# than the cores (the others are reported), memory within 5 % on every row. Prints
# PASS or FAIL per row and a last line with the count of rows out of their bounds.
# The rows are trained in PASSES passes over all of them, each pass after a calibration
# of its own. This machine is shared: its neighbours slow it for seconds at a time (one
# step of the same program took 364 to 708 ms within a minute), and a calibration of
# 20 s can fall wholly in such a time (streaming 14 GB/s against 20 uncontended). They
# never speed it up, so both sides take the machine at its fast end, neither at an
# extreme: each figure of the calibrations (each already its fastest round's) at the
# passes' median (the GEMM curve whole from the calibration of the median peak; each
# collective's time at each size), for which each row's plan (saved from the first
# pass's, so the same plan as compiled: --plan) is priced, against the fast end of the
# row's timed steps in all the passes (their 10th percentile). The fastest of the passes'
# fastest rounds would be an extreme: one pass's calibration at 183 GFLOP/s and 22.7 GB/s
# against 172 to 173 and 17.8 to 18.5 in the other two, while its own steps were the
# slowest of the three. Each pass's fastest step follows the bounds, then
# where the pass of the fastest steps spent them (train --profile, the slowest rank's):
# its compute (kernels, GEMMs) against the plan's for the slowest stage (its
# micro-batches' forward, backward and recompute, and the update), and the rest of the
# step (waiting for other ranks: collectives, a pipeline's bubble) against the plan's.
# Usage: bench/plan_truth.sh [BUILD_DIR] [STEPS] [PASSES]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-12}
passes=${3:-3}
cc=$build/colossalc
cores=$(nproc)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun=$(grep -m1 '^MPIEXEC_EXECUTABLE:' "$build/CMakeCache.txt" | cut -d= -f2)
flags=$(grep -m1 '^COLOSSALC_MPIEXEC_FLAGS:' "$build/CMakeCache.txt" | cut -d= -f2)
"$build/tools/colossalc-mktokens" data/genesis.txt "$work/genesis.bin" > /dev/null
echo "machine: $cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
calibrate() { # pass k's calibration, printed
  "$cc" --calibrate=cpu -o "$work/machine$1.json" 2> "$work/calibrate$1.txt"
  echo "calibration $1:"
  grep -E 'GEMM fit|streaming|all-reduce fitted' "$work/calibrate$1.txt"
}
calibrate 0

TINY="models/gpt2-tiny.model --set d=256 --set heads=4 --set layers=4 --set seq=128 --set batch=16"
GPT2="models/gpt2.model --set batch=4 --set seq=64"
printf '%-8s %-34s %-5s %10s %10s %8s %6s %10s %10s %8s %6s\n' model plan ranks pred_ms meas_ms err time \
  pred_MiB meas_MiB err mem
echo "(meas_ms: the 10th percentile of the timed steps of all passes; their median follows each row)"
bad=0 rows=0
names=() nps=() descs=() models=()
row() { # name ranks model-args... -- plan-args...: planned and compiled now, trained by the passes below
  local name=$1 np=$2
  shift 2
  local args=() plan=()
  while [ "$1" != -- ]; do args+=("$1"); shift; done
  shift
  plan=("$@")
  local dir=$work/$rows && mkdir -p "$dir"
  rows=$((rows + 1))
  names+=("$name") nps+=("$np") descs+=("${plan[*]}") models+=("${args[*]}")
  "$cc" "${args[@]}" --cluster "$work/machine0.json" --gpus "$np" "${plan[@]}" --dump-plan=json \
    --plan-out "$dir/plan.json" 2> "$dir/err" || { echo "no plan: $(head -1 "$dir/err")" > "$dir/failed"; return; }
  local budget=() # an offload plan is compiled for the device memory it prices
  case " ${plan[*]} " in *" --offload state "*)
    budget=(--device-memory "$(python3 -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["memory"]["peak_bytes_per_device"]))' "$dir/plan.json")") ;;
  esac
  "$cc" "${args[@]}" --cluster "$work/machine0.json" --gpus "$np" --plan "$dir/plan.json" "${budget[@]}" \
    -o "$dir/train" > /dev/null 2> "$dir/err" || echo "compile failed: $(head -1 "$dir/err")" > "$dir/failed"
}
train_pass() { # pass k: the machine calibrated again, every row trained
  local k=$1 i
  [ "$k" -gt 0 ] && calibrate "$k"
  for ((i = 0; i < rows; i++)); do
    local dir=$work/$i np=${nps[$i]} launch=()
    [ -e "$dir/failed" ] && continue
    [ "$np" -gt 1 ] && launch=($mpirun $flags -np "$np")
    (cd "$dir" && "${launch[@]}" ./train --data "$work/genesis.bin" --steps $((steps + 3)) --log "log$k.jsonl" --profile \
      --nvme-dir "$dir" > "out$k.txt" 2>&1) || echo "train failed: $(tail -1 "$dir/out$k.txt")" > "$dir/failed"
  done
}
merged() { # the passes' calibrations merged, each figure at their median, and every row priced for it
  python3 - "$work" "$passes" <<'EOF'
import json, statistics, sys
work, passes = sys.argv[1], int(sys.argv[2])
cals = [json.load(open("%s/machine%d.json" % (work, k))) for k in range(passes)]
by_peak = sorted(cals, key=lambda c: c["device"]["peak_fp32_tflops"])
best = json.loads(json.dumps(by_peak[(len(cals) - 1) // 2]))  # the GEMM curve whole, from one
mid = statistics.median_low
for part, field in (("device", "memory_bandwidth_gbs"), ("device", "commit_bandwidth_gbs"),
                    ("device", "kernel_overhead_us"), ("intra_node", "bandwidth_gbs"), ("intra_node", "latency_us"),
                    ("inter_node", "bandwidth_gbs"), ("inter_node", "latency_us"), ("host", "link_bandwidth_gbs"),
                    ("host", "memory_bandwidth_gbs"), ("host", "nvme_bandwidth_gbs")):
    best[part][field] = mid(c[part][field] for c in cals)
for kind, pts in best["intra_node"]["collectives"].items():  # each size at its median
    if kind != "ranks":
        pts[:] = [[b, mid(c["intra_node"]["collectives"][kind][i][1] for c in cals)] for i, (b, _) in enumerate(pts)]
best["name"] = best["name"].replace("(calibrated)", "(calibrated, the median of %d)" % passes)
json.dump(best, open(work + "/merged.json", "w"), indent=1)
d = best["device"]
print("median: GEMM %.1f GFLOP/s, streaming %.1f GB/s, launch %.1f us, all-reduce %.2f GB/s a rank" %
      (d["peak_fp32_tflops"] * 1e3, d["memory_bandwidth_gbs"], d["kernel_overhead_us"], best["intra_node"]["bandwidth_gbs"]))
EOF
  local i
  for ((i = 0; i < rows; i++)); do
    local dir=$work/$i
    [ -e "$dir/failed" ] && continue
    # shellcheck disable=SC2086 # the model's arguments, split as given
    "$cc" ${models[$i]} --cluster "$work/merged.json" --gpus "${nps[$i]}" --plan "$dir/plan.json" --dump-plan=json \
      --plan-out "$dir/pred.json" 2> "$dir/err" || echo "no price: $(head -1 "$dir/err")" > "$dir/failed"
  done
}
report() { # row i: the fast end of its steps against the plan for the median calibration
  local i=$1 dir=$work/$1
  if [ -e "$dir/failed" ]; then
    printf '%-8s %-34s %-5s %s\n' "${names[$i]}" "${descs[$i]:0:34}" "${nps[$i]}" "$(cat "$dir/failed")"
    return 1
  fi
  python3 - "$dir" "${names[$i]}" "${descs[$i]}" "${nps[$i]}" "$cores" "$steps" "$passes" <<'EOF'
import json, sys
d, name, desc = sys.argv[1], sys.argv[2], sys.argv[3]
np, cores, steps, passes = (int(x) for x in sys.argv[4:8])
plan = json.load(open(d + "/plan.json"))
steps_all, fastest, mem_meas, tiers = [], [], 0, {}
for k in range(passes):
    log = [json.loads(l) for l in open("%s/log%d.jsonl" % (d, k))]
    recs = [r for r in log if "ms" in r and "step" in r]
    ms = [r["ms"] for r in recs[-steps:]]
    steps_all += ms
    fastest.append(min(ms))
    mem_meas = max([mem_meas] + [r["device_memory_peak"] / 2**20 for r in recs])
    for r in log:  # each tier's peak on the largest rank
        for t, b in r.get("memory_peak", {}).items():
            tiers[t] = max(tiers.get(t, 0), b / 2**20)
# the machine at its fast end on both sides: the fast end of every pass's steps against
# the plan priced for the passes' calibrations at their median
meas = sorted(steps_all)[len(steps_all) // 10]
pred = json.load(open(d + "/pred.json"))["predicted"]["step_time_s"] * 1e3
et = pred / meas - 1
mem_pred = plan["memory"]["peak_bytes_per_device"] / 2**20
em = mem_pred / mem_meas - 1
tok = "PASS" if abs(et) <= 0.10 else ("report" if np > cores else "FAIL")
mok = "PASS" if abs(em) <= 0.05 else "FAIL"
# the pass of the fastest steps, as its profile splits them, against the plan's split
profs = [r["profile"] for k in range(passes) for r in (json.loads(l) for l in open("%s/log%d.jsonl" % (d, k)))
         if "profile" in r]
prof = min(profs, key=lambda p: max(x["step_ms"] for x in p["ranks"]))
p_step = max(x["step_ms"] for x in prof["ranks"])
p_comp = max(x["compute_ms"] for x in prof["ranks"])
pj = json.load(open(d + "/pred.json"))
plan_comp = 1e3 * max(s["compute_per_step_s"] for s in pj["stages"])
sm = plan["stages"][plan["memory"]["peak_stage"]]["memory"]
by_tier = [("params", sm["weights_bytes"]), ("grads", sm["gradients_bytes"]), ("opt", sm["optimizer_bytes"]),
           ("work", sm["activations_bytes"] + sm["buffers_bytes"])]
print("%-8s %-34s %-5d %10.2f %10.2f %+7.1f%% %6s %10.1f %10.1f %+7.1f%% %6s   median %.0f; fastest step of each pass"
      " %s; compute %.0f (plan %.0f), the rest %.0f (plan %.0f); MiB by tier, plan (run): %s" %
      (name, desc[:34], np, pred, meas, 100 * et, tok, mem_pred, mem_meas, 100 * em, mok,
       sorted(steps_all)[len(steps_all) // 2], " ".join("%.0f" % m for m in fastest), p_comp, plan_comp,
       p_step - p_comp, pred - plan_comp,
       ", ".join("%s %.1f (%s)" % (t, b / 2**20, "%.1f" % tiers[t] if t in tiers else "-") for t, b in by_tier)))
sys.exit((tok == "FAIL") + (mok == "FAIL"))
EOF
}
set +e
row tiny 1 $TINY -- --dp 1
row tiny 1 $TINY -- --dp 1 --recompute full
row gpt2 1 $GPT2 -- --dp 1
row tiny 2 $TINY -- --dp 2 --tp 1 --pp 1
row tiny 2 $TINY -- --dp 2 --tp 1 --pp 1 --zero 1
row tiny 2 $TINY -- --dp 2 --tp 1 --pp 1 --zero 3
row tiny 2 $TINY -- --dp 1 --tp 2 --pp 1
row tiny 2 $TINY -- --dp 1 --tp 1 --pp 2 --schedule 1f1b --microbatch-size 4
row tiny 2 $TINY -- --dp 1 --tp 1 --pp 2 --schedule interleaved --virtual-stages 2 --microbatch-size 4
row tiny 2 $TINY -- --dp 1 --tp 1 --pp 2 --schedule zb-h1 --microbatch-size 4
row tiny 2 $TINY -- --dp 1 --tp 2 --pp 1 --plan tests/multirank/ulysses-tiny.plan.json --microbatch-size 1
row gpt2 2 $GPT2 -- --dp 2 --tp 1 --pp 1
row tiny 4 $TINY -- --dp 2 --tp 2 --pp 1
row tiny 4 $TINY -- --dp 4 --tp 1 --pp 1 --zero 3
row tiny 4 $TINY -- --dp 1 --tp 2 --pp 2 --microbatch-size 4
row tiny 8 $TINY -- --dp 2 --tp 2 --pp 2 --microbatch-size 4
row tiny 2 $TINY -- --dp 2 --tp 1 --pp 1 --offload state
for ((k = 0; k < passes; k++)); do train_pass $k; done
merged
for ((i = 0; i < rows; i++)); do report $i || bad=$((bad + 1)); done
echo "$bad of $rows rows out of their bounds"
