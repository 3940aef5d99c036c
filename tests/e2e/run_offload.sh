#!/bin/sh
# Offload trains bit for bit: gpt2-tiny widened to d 256 (a 50 MiB training state,
# 1.4 MiB of activations) compiled with --device-memory 12M (the state 4.2 times the
# device), 16M and 24M, and at 12M with a host of 1 MiB (parameters and optimizer
# state homed in NVMe files under --nvme-dir), each trained for 5 steps against the
# program compiled without a budget: the losses of every step equal exactly
# (compare_runs.py with tolerance 0) and the saved parameters are the same bytes
# (cmp); the measured device peak stays under the budget and every measured peak is
# within 5% of the compiler's prediction (train's closing offload line); the NVMe
# files are gone after the run.
# DEVICE=cuda EMUL=DIR (tests/multirank/device.sh): the budgeted programs run on the
# emulated CUDA device, its moves on the copy stream, against the same CPU reference;
# the kernels are then the CUDA C compiled for the host, whose rounding differs from
# the CPU device's in the last bits, so the losses and parameters agree to a relative
# 1e-5 (compare_runs.py) instead of bit for bit; the peaks are checked the same way.
# EXPECT_DIFFER=1 (with the emulation's waits dropped): the 12M budget must differ
# from the reference, or fail (the emulation reports memory used after it was unmapped).
# PRECISION=fp16 compiles every program in fp16 and trains from a loss scale of 2^20,
# so that steps overflow and are skipped: their update lists still run for the moves,
# the kernels keeping every value, and the runs equal the reference as above.
# PRECISION=fp8: every program in fp8 (the scaling states pinned in the work tier).
# Last, 2 micro-batches of one row at 12M (the compiler writes both into the step, what
# runs on the last micro-batch only once, there: the gradient sums, fp8's scaling)
# against the same plan without a budget, bit for bit.
# Usage: run_offload.sh COLOSSALC MKTOKENS SRCDIR WORKDIR PYTHON
set -eu
cc=$1 mk=$2 src=$3 work=$4 py=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work"
. "$src/tests/multirank/device.sh"
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
model="$src/models/gpt2-tiny.model"
sizes="--set seq=16 --set d=256 --set layers=4 --precision ${PRECISION:-fp32}"
cfg="--set batch=1 $sizes"
args="--data genesis.bin --steps 5 --threads 1 --eps 1e-6" # eps: tests/multirank/run_equal.sh
[ "${PRECISION:-fp32}" = fp16 ] && args="$args --loss-scale 1048576"
"$cc" "$model" $cfg -o train-ref
./train-ref $args --device cpu --log ref.jsonl --save ref.safetensors > ref.out
if [ "${PRECISION:-fp32}" = fp16 ] && ! grep -q '"skipped": true' ref.jsonl; then
  echo "FAIL: no fp16 step was skipped, so the skipped updates' moves go untested"; exit 1
fi
run() { # name budget [colossalc flags...] -- [train flags...]
  name=$1 budget=$2
  shift 2
  cflags="" tflags=""
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do cflags="$cflags $1"; shift; done
  [ $# -gt 0 ] && shift
  tflags="$*"
  "$cc" "$model" $cfg --device-memory "$budget" $cflags --dump-plan > "$name.plan"
  "$cc" "$model" $cfg --device-memory "$budget" $cflags -o "train-$name" 2> "$name.cc"
  device_prepare "./train-$name"
  "./train-$name" $args $tflags $devargs --log "$name.jsonl" --save "$name.safetensors" > "$name.out"
  sed -n '1,3p' "$name.plan"
  grep '^offload: device peak' "$name.out"
  if [ -n "$devargs" ]; then
    cmpargs="1e-5 ref.jsonl $name.jsonl ref.safetensors $name.safetensors"
  else
    cmpargs="0 ref.jsonl $name.jsonl"
    cmp ref.safetensors "$name.safetensors"
  fi
  "$py" "$src/tests/multirank/compare_runs.py" $cmpargs > "$name.cmp" || { cat "$name.cmp"; exit 1; }
  tail -1 "$name.cmp"
  # "offload: device peak A MiB of C MiB capacity (predicted P MiB) | host peak A (predicted P) | nvme peak ..."
  sed -n 's/^offload: //p' "$name.out" | tr '|' '\n' | awk -v name="$name" '
    /peak/ { for (i = 1; i <= NF; i++) { if ($i == "peak") got = $(i + 1); if ($i == "(predicted") want = $(i + 1) }
             kind = $1; ok = want == 0 ? got == 0 : (got - want) / want <= 0.05 && (want - got) / want <= 0.05
             if (kind == "device") { cap = $0; sub(/.* of /, "", cap); sub(/ MiB capacity.*/, "", cap); ok = ok && got + 0 <= cap + 0 }
             printf "%s %s: measured %s MiB, predicted %s MiB %s\n", name, kind, got, want, ok ? "ok" : "FAIL"; bad += !ok; n++ }
    END { if (n != 3) { print name ": no offload report"; exit 1 } exit bad > 0 }'
}
if [ "${EXPECT_DIFFER:-0}" = 1 ]; then # the copy stream's hazard test (tests/cuda_emul/tests.cmake)
  "$cc" "$model" $cfg --device-memory 12M -o train-d12 2> /dev/null
  device_prepare ./train-d12
  if ! ./train-d12 $args $devargs --log d12.jsonl --save d12.safetensors > d12.out 2>&1; then
    echo "the run failed, as expected (the emulation touched memory already unmapped): $(tail -1 d12.out)"
    exit 0
  fi
  if "$py" "$src/tests/multirank/compare_runs.py" 1e-5 ref.jsonl d12.jsonl ref.safetensors d12.safetensors \
       > d12.cmp; then
    echo "FAIL: equal to the reference although EXPECT_DIFFER=1"; exit 1
  fi
  tail -2 d12.cmp
  echo "differs from the reference, as expected"
  exit 0
fi
run d12 12M
run d16 16M
run d24 24M
mkdir -p nvme
run nvme 12M --host-memory 1M -- --nvme-dir nvme
grep -q 'nvme' nvme.plan || { echo "the 1 MiB host did not send the state to NVMe"; exit 1; }
[ -z "$(ls nvme)" ] || { echo "NVMe files left behind: $(ls nvme)"; exit 1; }
if [ -z "$devargs" ]; then
  mb2="--set batch=2 --gpus 1 --gpu cpu --dp 1 --tp 1 --pp 1 --zero 0 --microbatch-size 1"
  "$cc" "$model" $sizes $mb2 -o train-ref2 2> /dev/null
  ./train-ref2 $args --device cpu --log ref2.jsonl --save ref2.safetensors > ref2.out
  "$cc" "$model" $sizes $mb2 --device-memory 12M -o train-mb2 2> /dev/null
  ./train-mb2 $args --device cpu --log mb2.jsonl --save mb2.safetensors > mb2.out
  "$py" "$src/tests/multirank/compare_runs.py" 0 ref2.jsonl mb2.jsonl | tail -1
  cmp ref2.safetensors mb2.safetensors
fi
echo "offload: 4 budgets equal the reference${devargs:+ (to 1e-5 on the emulated CUDA device)}, peaks as predicted"
