#!/bin/sh
# Checkpoints across ranks and ZeRO stages (programs planned with them, build.sh):
# 6 steps of 2 ranks with ZeRO-2 in one run; 3 steps of the same with a checkpoint, resumed for steps 4-6 by one rank of
# the batch-4 program: its losses and final parameters equal the uninterrupted run's
# to a relative 1e-5. The checkpoint holds the same tensors whatever the ZeRO stage that
# wrote it (ZeRO-0 and ZeRO-2 checkpoints merged into one file each compare equal byte
# for byte), and 2 ranks
# with ZeRO-3 resuming it repeat the uninterrupted run bit for bit.
# Usage: run_resume.sh WORKDIR PYTHON SRCDIR "MPIRUN" EXPORT
set -eu
work=$1 py=$2 src=$3 mpirun=$4 export=$5
run=$work/resume
rm -rf "$run" && mkdir -p "$run" && cd "$run"
args="--data $work/genesis.bin --threads 1 --eps 1e-6"
mpi() { prog=$1; shift; timeout 300 $mpirun -np 2 "$work/$prog" $args "$@"; } # programs of build.sh
mpi train-dp2-zero2 --steps 6 --log full.jsonl --save full.safetensors > full.out
mpi train-dp2-zero2 --steps 3 --ckpt-dir ck2 --ckpt-every 3 > part.out
mpi train-b2 --steps 3 --ckpt-dir ck0 --ckpt-every 3 > part0.out
# the shards differ (ZeRO-2's owners write the optimizer state), the tensors do not
"$export" --merge ck0/ckpt-3 m0.safetensors > /dev/null
"$export" --merge ck2/ckpt-3 m2.safetensors > /dev/null
cmp m0.safetensors m2.safetensors
echo "ZeRO-0 and ZeRO-2 checkpoints are identical"
cp -r ck2 ck3
"$work/train-b4" $args --steps 6 --ckpt-dir ck2 --resume --log one.jsonl --save one.safetensors > one.out
"$py" "$src/tests/multirank/compare_runs.py" --last 3 1e-5 full.jsonl one.jsonl full.safetensors one.safetensors
mpi train-dp2-zero3 --steps 6 --ckpt-dir ck3 --resume --log z3.jsonl --save z3.safetensors > z3.out
"$py" "$src/tests/multirank/compare_runs.py" --last 3 0 full.jsonl z3.jsonl full.safetensors z3.safetensors
cmp full.safetensors z3.safetensors
echo "ZeRO-3 resume is bit-identical"
