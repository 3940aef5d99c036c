#!/bin/sh
# A data-parallel plan compiled and run: gpt2-tiny (2 layers, seq 32, global batch 4)
# planned for 2 CPU ranks with micro-batches of 1 sequence (so each rank runs 2
# micro-batches, accumulating gradients) and ZeRO-1, compiled by colossalc from the
# plan and launched under mpirun, equals one rank of the same model with batch 4:
# every step's loss and every parameter tensor to a relative 1e-5 (compare_runs.py;
# --eps 1e-6 for the reason run_equal.sh gives). The program also refuses a launch on
# a number of ranks its plan was not made for.
# Usage: run_plan.sh COLOSSALC WORKDIR PYTHON SRCDIR "MPIRUN"
set -eu
cc=$1 work=$2 py=$3 src=$4 mpirun=$5
run=$work/plan && rm -rf "$run" && mkdir -p "$run" && cd "$run"
"$cc" "$src/models/gpt2-tiny.model" --set layers=2 --set seq=32 --set batch=4 --gpus 2 --gpu cpu \
      --dp 2 --tp 1 --pp 1 --microbatch-size 1 --zero 1 --dump-plan -o train-plan | sed -n '4,5p'
args="--data $work/genesis.bin --steps 5 --threads 1 --eps 1e-6"
"$work/train-b4" $args --log one.jsonl --save one.safetensors > one.out
timeout 300 $mpirun -np 2 ./train-plan $args --log many.jsonl --save many.safetensors > many.out
head -2 many.out
"$py" "$src/tests/multirank/compare_runs.py" 1e-5 one.jsonl many.jsonl one.safetensors many.safetensors
if ./train-plan $args > wrong.out 2>&1; then echo "a 1-rank launch of a 2-rank plan was accepted"; exit 1; fi
grep -q "planned for 2 data-parallel ranks" wrong.out || { cat wrong.out; exit 1; }
echo "a 1-rank launch is refused: $(tail -1 wrong.out)"
