#!/bin/sh
# ZeRO inside the step: a data-parallel plan (DP x TP x 1) compiled with --zero STAGE
# (2 or 3) and micro-batches of one sequence, so each dp rank accumulates 2
# micro-batches. colossalc places the gathers and reductions in `step` (codegen/zero.h).
#  (a) run_mesh.sh: 5 AdamW steps equal one rank (train-l4-b4) to a relative 1e-5.
#  (b) the peak memory of the largest rank over the steps (train's closing "peak
#      memory" line) stays under a bound derived below, for GRADS (stage 2, 3) and
#      PARAMS (stage 3), where the runtime's ZeRO without the compiler's schedule
#      holds the whole tier (every gradient is written before any reduction, every
#      parameter gathered for the whole step).
#
# The bound. Between steps a rank holds its owned shard: HELD, the startup line's
# "TIER A MiB of B MiB" (about B/DP). Inside the step it adds what the step gathers
# (stage 3) or creates (gradients) and has not yet released or reduced. The compiled
# step gathers a parameter before its first use in the forward (or backward) pass and
# releases it after its last one there; a gradient lives from its first write to its
# last. The model (models/gpt2-tiny.model, d 128, vocab 256, ctx 256, 4 layers) runs
# layer after layer, so at any time that is at most
#   - one layer's parameters or gradients: 12 d^2 weights (c_attn d x 3d, c_proj d x d,
#     c_fc d x 4d, c_proj 4d x d; each split over TP in the megatron plan) and at most
#     13 d biases and layernorm values: 12 d^2 / TP + 13 d floats;
#   - the token embedding, tied to the output head: read at the start and the end of
#     the forward pass (held in between), its gradient written at the start and the
#     end of the backward pass; and the position embedding, whose sum with it is an
#     expression the first layer's kernels compute inline (so it may be held into
#     layer 0): (vocab + ctx) d floats at most (neither split counts against it);
#   - the granule rounding: a range committed on its own adds at most 2 pages of 4 KiB
#     beyond its bytes, for each of the 12 parameters of a layer and the 2 embeddings.
# So PEAK <= HELD + 4 (12 d^2 / TP + 13 d + (vocab + ctx) d) bytes + 14 x 8 KiB (+ 0.01
# MiB for the printed rounding). For DP 2, TP 1 that is about HELD + 1.0 MiB against a
# whole tier of 3.28 MiB (HELD 1.67): 2.7 MiB; the runtime's ZeRO alone reaches 3.28.
# Usage: run_zero.sh COLOSSALC WORKDIR PYTHON SRCDIR "MPIRUN" NAME DP TP STAGE [COLOSSALC FLAGS...]
set -eu
cc=$1 work=$2 py=$3 src=$4 mpirun=$5 name=$6 dp=$7 tp=$8 zero=$9
shift 9
sh "$src/tests/multirank/run_mesh.sh" "$cc" "$work" "$py" "$src" "$mpirun" "$name" "$dp" "$tp" 1 \
  --microbatch-size 1 --zero "$zero" "$@"
cd "$work/mesh-$name${DEVICE:+-$DEVICE}"
. "$src/tests/multirank/device.sh"
grep -q "ZeRO stage $zero; 2 micro-batches of 1" plan.txt ||
  { echo "FAIL: the plan is not ZeRO-$zero with 2 micro-batches:"; sed -n '4,5p' plan.txt; exit 1; }

# "TIER A MiB of B MiB" on the line that starts with $1
sizes() {
  sed -n "s/^$1.* $2 \([0-9.]*\) MiB of \([0-9.]*\) MiB.*/\1 \2/p" many.out
}
check_peak() {
  held=$(sizes "data parallel" "$1") peak=$(sizes "peak memory" "$1")
  echo "$held $peak" | awk -v tier="$1" -v dp="$dp" -v tp="$tp" '
    { d = 128; vocab = 256; ctx = 256; page = 4096
      extra = 4 * (12 * d * d / tp + 13 * d + (vocab + ctx) * d) + 14 * 2 * page
      held = $1; whole = $2; peak = $3; bound = held + extra / 1048576 + 0.01
      ok = NF == 4 && held <= whole / dp + 0.05 * whole && peak >= held && peak <= bound && peak < whole
      printf "%s: peak %.2f MiB of the whole %.2f MiB (%.0f%%), held between steps %.2f MiB, bound %.2f MiB %s\n",
             tier, peak, whole, 100 * peak / whole, held, bound, ok ? "ok" : "FAIL"
      exit !ok }
    END { if (NR == 0) { print tier ": no sizes"; exit 1 } }'
}
check_peak grads
[ "$zero" -lt 3 ] || check_peak params
