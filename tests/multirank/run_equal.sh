#!/bin/sh
# Data parallelism equals one rank: NP ranks of train-b2 (global batch 2*NP; ZERO 0)
# or of train-dpNP-zeroZERO (planned with that ZeRO stage, build.sh) against one rank
# of the program compiled for batch 2*NP, 5 AdamW steps
# from the same Philox initialisation: every step's loss and every parameter tensor
# after the last update (--save) to a relative 1e-5 (compare_runs.py), and every step's
# measured device memory equal to the compiler's prediction (check_memory.py). With ZeRO,
# the startup line must also show the sharded tiers at about 1/NP of their size.
#
# --eps 1e-6, not the model's 1e-8: the key bias of attention has a gradient that is
# exactly zero in exact arithmetic (softmax ignores a constant added to every key),
# so what it receives is rounding noise, whose value depends on the order of the
# sums (NP per-rank means then their mean, against one mean over the global batch).
# AdamW divides by sqrt(v) + eps and so turns noise into steps; at eps 1e-8 those
# steps differ between the runs by 1.7e-4 of that tensor's norm, at 1e-6 by 1e-6,
# while every other tensor agrees to about 3e-7 either way.
# DEVICE=cuda EMUL=DIR: the ranks on the emulated CUDA device (run_mesh.sh, device.sh),
# whose shards are reserved address space as on a GPU (with the emulation's page-sized
# granule).
# Usage: run_equal.sh WORKDIR PYTHON SRCDIR "MPIRUN" NP ZERO
set -eu
work=$1 py=$2 src=$3 mpirun=$4 np=$5 zero=$6
run=$work/equal-np$np-zero$zero${DEVICE:+-$DEVICE}
rm -rf "$run" && mkdir -p "$run" && cd "$run"
. "$src/tests/multirank/device.sh"
args="--data $work/genesis.bin --steps 5 --threads 1 --eps 1e-6"
"$work/train-b$((2 * np))" $args --device cpu --log one.jsonl --save one.safetensors > one.out
prog=$work/train-b2
[ "$zero" -eq 0 ] || prog=$work/train-dp$np-zero$zero
device_prepare "$prog"
# MPIRUN is the launcher and its flags, as words
timeout 300 $mpirun -np "$np" "$prog" $args $devargs --log many.jsonl --save many.safetensors > many.out
grep '^data parallel' many.out
"$py" "$src/tests/multirank/compare_runs.py" 1e-5 one.jsonl many.jsonl one.safetensors many.safetensors
"$py" "$src/tests/multirank/check_memory.py" many.jsonl
[ "$zero" -eq 0 ] && exit 0
# the startup line's "params A MiB[ of B MiB], grads ..., opt C MiB of D MiB": held /
# whole <= 1/np + 0.05 (the closing "peak memory" line has the same form)
check_tier() {
  sed -n "s/^data parallel.* $1 \([0-9.]*\) MiB of \([0-9.]*\) MiB.*/\1 \2/p" many.out |
    awk -v np="$np" -v tier="$1" '{ r = $1 / $2; ok = r <= 1 / np + 0.05;
      printf "%s: %.2f of %.2f MiB held by the largest rank (%.2f) %s\n", tier, $1, $2, r, ok ? "ok" : "FAIL";
      found = 1; exit !ok } END { if (!found) { print tier ": no sharded size on the startup line"; exit 1 } }'
}
check_tier opt
[ "$zero" -lt 3 ] || check_tier params
