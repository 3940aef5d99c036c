#!/bin/sh
# Offload across data-parallel ranks: gpt2-tiny widened to d 256 (a 50 MiB training
# state) compiled with --device-memory 12M for any number of ranks (ZeRO stage 0: every
# rank holds the whole state at its homes, codegen/compose.h sums each gradient right
# after its last write, before it leaves the device), run on NP ranks of one row each
# against one rank of NP rows without a budget: the losses and the saved parameters
# agree to a relative 1e-5, and every rank's measured device, host and NVMe peaks are
# within 5% of the compiler's prediction (its closing "rank R: offload: ..." line).
# With nvme, a host of 1 MiB sends the state to NVMe files under --nvme-dir, one
# folder per rank, which are gone after the run. With mb2, a plan of NP ranks (ZeRO 0)
# gives each rank 2 micro-batches of one row (the compiler writes both into the step,
# and the offload plan keeps the gradients across them), against one rank of 2 NP rows.
# With tp2 or pp2, a plan of NP/2 data-parallel ranks by 2 tensor-parallel ranks or 2
# pipeline stages (each stage its own offload plan; the tied embedding's gradients come
# back to the device for their sum over the stages), against one rank of NP/2 rows; with
# tp2pp2, NP/4 by 2 by 2. These meshes train a vocabulary of 2,048 at seq 64 (the tp
# gather of the logits reorders 0.5 MiB through the collectives' staging buffer) under a
# tight budget: 5% above the least the compiler accepts (after its refusals of smaller
# ones, which say "needs N MiB" or "at least N MiB", a stage at a time), so that
# the device is full and whatever the plan does not count shows (the staging buffer did:
# "the device would hold ... above the plan's device_capacity").
# With planned, no --device-memory: the plan search itself, for NP devices of 16 MiB
# (a cluster file on the cpu profile), finds that only ZeRO-3 with the state offloaded
# fits, and -o compiles that plan for the devices' memory.
# With ZERO 3, a plan of NP ranks at ZeRO stage 3: the chunks are dealt to the ranks,
# each holding only its own at its homes (codegen/offload.h), and the run also saves a
# checkpoint after 2 steps and resumes from it to step 4, again equal to one rank.
# DEVICE=cuda EMUL=DIR (device.sh): the ranks run the emulated CUDA device.
# OPTIMIZER=lamb: both programs train with LAMB, whose update passes over the chunks three
# times (codegen/offload.h), at lr 1e-2 and eps 1e-3 (tests/multirank/run_mesh.sh says why).
# SCHEDULE=S compiles a pipeline's plan with --schedule S (zb-h1: each stage's offload plan
# walks its B and W passes).
# Usage: run_offload_dp.sh COLOSSALC WORK PYTHON SRCDIR MPIRUN NP [host|nvme|mb2|tp2|pp2|tp2pp2|planned] [ZERO]
set -eu
cc=$1 work=$2 py=$3 src=$4 mpirun=$5 np=$6 mode=${7:-host} zero=${8:-0}
[ "$mode" = planned ] && zero=3 # what the search chooses (checked below)
run=$work/offload-dp$np-$mode-z$zero${OPTIMIZER:+-$OPTIMIZER}${DEVICE:+-$DEVICE} && rm -rf "$run" && mkdir -p "$run" && cd "$run"
. "$src/tests/multirank/device.sh"
model="$src/models/gpt2-tiny.model"
cfg="--set seq=16 --set d=256 --set layers=4${OPTIMIZER:+ --optimizer $OPTIMIZER}"
args="--data $work/genesis.bin --steps 4 --threads 1 --eps 1e-6"
[ -n "${OPTIMIZER:-}" ] && args="$args --lr 1e-2 --eps 1e-3"
dp=$np tp=1 pp=1 cplan="--set batch=1"
case $mode in tp2) dp=$((np / 2)) tp=2 ;; pp2) dp=$((np / 2)) pp=2 ;; tp2pp2) dp=$((np / 4)) tp=2 pp=2 ;; esac
[ $((tp * pp)) -gt 1 ] && cfg="$cfg --set vocab=2048 --set seq=64"
rows=$dp
[ "$mode" = mb2 ] && rows=$((2 * dp))
if [ "$mode" = mb2 ] || [ $((tp * pp)) -gt 1 ] || [ "$zero" != 0 ]; then
  cplan="--set batch=$rows --gpus $np --gpu cpu --dp $dp --tp $tp --pp $pp --zero $zero --microbatch-size 1"
  [ -n "${SCHEDULE:-}" ] && cplan="$cplan --schedule $SCHEDULE"
fi
"$cc" "$model" $cfg --set batch="$rows" -o train-ref 2> /dev/null
./train-ref $args --device cpu --log one.jsonl --save one.safetensors > one.out
cflags="--device-memory 12M" tflags=""
if [ "$mode" = nvme ]; then
  mkdir -p nvme
  cflags="$cflags --host-memory 1M" tflags="--nvme-dir nvme"
fi
if [ $((tp * pp)) -gt 1 ]; then # the tight budget, from the compiler's refusals of smaller ones
  b=1 least=""
  for try in 1 2 3 4 5 6; do
    if msg=$("$cc" "$model" $cfg $cplan --device-memory ${b}M -o tight-probe 2>&1); then least=$b && break; fi
    b=$(echo "$msg" | sed -n 's/.*\(needs\|at least\) \([0-9.]*\) MiB.*/\2/p' | awk '{ printf "%.2f", $1 + 0.1 }')
    [ -n "$b" ] || { echo "$msg"; echo "no least budget in the compiler's refusal"; exit 1; }
  done
  [ -n "$least" ] || { echo "$msg"; echo "the compiler refused every budget tried"; exit 1; }
  cflags="--device-memory $(awk -v m="$least" 'BEGIN { printf "%.2f", 1.05 * m }')M"
  echo "budget: $cflags (the compiler's least: $least MiB)"
fi
if [ "$mode" = planned ]; then
  printf '{"base": "cpu", "gpus": %d, "gpus_per_node": %d, "device": {"memory_gib": 0.015625, "reserved_gib": 0}}\n' \
    "$np" "$np" > small.json
  cplan="--set batch=$rows --cluster small.json" cflags=""
fi
"$cc" "$model" $cfg $cplan $cflags -o train-off 2> cc.err
if [ "$mode" = planned ]; then
  head -2 cc.err
  grep -q "ZeRO-3, .*state on the host" cc.err || { cat cc.err; echo "the search did not plan state offload"; exit 1; }
fi
device_prepare ./train-off
timeout 600 $mpirun -np "$np" ./train-off $args $tflags $devargs --log many.jsonl --save many.safetensors > many.out 2>&1 ||
  { tail -20 many.out; exit 1; }
sed -n '1,3p' many.out
"$py" "$src/tests/multirank/compare_runs.py" 1e-5 one.jsonl many.jsonl one.safetensors many.safetensors > cmp.out ||
  { cat cmp.out; exit 1; }
tail -1 cmp.out
# "rank R: offload: device peak A MiB of C MiB capacity (predicted P MiB) | host peak A (predicted P) | ..."
grep '^rank [0-9]*: offload: ' many.out | awk -v np="$np" -v mode="$mode" '
  { rank = $2; line = $0; sub(/^rank [0-9]*: offload: /, "", line); n = split(line, part, "|")
    for (k = 1; k <= 3; k++) {
      m = split(part[k], w, " "); got = ""; want = ""
      for (i = 1; i <= m; i++) { if (w[i] == "peak") got = w[i + 1]; if (w[i] == "(predicted") want = w[i + 1] }
      ok = want == 0 ? got == 0 : (got - want) / want <= 0.05 && (want - got) / want <= 0.05
      printf "rank %s %s: measured %s MiB, predicted %s MiB %s\n", rank, w[1], got, want, ok ? "ok" : "FAIL"
      bad += !ok
    }
    if (mode == "nvme" && w[1] == "nvme" && got + 0 == 0) { print "rank " rank ": nothing on NVMe"; bad++ }
    ranks++ }
  END { if (ranks != np) { print "expected " np " offload reports, got " ranks; exit 1 } exit bad > 0 }'
if [ "$zero" = 3 ]; then # checkpoints from the owners' homes, and back into them
  timeout 600 $mpirun -np "$np" ./train-off $args $tflags $devargs --steps 2 --ckpt-dir ck --ckpt-every 2 \
    --log resumed.jsonl > first.out 2>&1 || { tail -20 first.out; exit 1; }
  timeout 600 $mpirun -np "$np" ./train-off $args $tflags $devargs --ckpt-dir ck --resume --log resumed.jsonl \
    --save resumed.safetensors > resumed.out 2>&1 || { tail -20 resumed.out; exit 1; }
  grep '^resumed from' resumed.out
  "$py" "$src/tests/multirank/compare_runs.py" 1e-5 one.jsonl resumed.jsonl one.safetensors resumed.safetensors \
    > cmp-resumed.out || { cat cmp-resumed.out; exit 1; }
  tail -1 cmp-resumed.out
fi
if [ "$mode" = nvme ] && [ -n "$(ls nvme)" ]; then
  echo "NVMe folders left behind: $(ls nvme)"; exit 1
fi
echo "offload on $np ranks (dp $dp x tp $tp x pp $pp, $mode, ZeRO $zero) equals one rank; every rank's peaks as predicted"
