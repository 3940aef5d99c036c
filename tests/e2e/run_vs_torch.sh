#!/bin/sh
# End to end against PyTorch: compile a small GPT-2 (gpt2-tiny with 2 layers, batch 2,
# seq 32) into `train`, write random initial weights and run 5 AdamW steps in PyTorch
# (gpt2_reference.py), run the same 5 steps with `train --init-from`, and compare
# each step's loss and the final parameters to a relative 1e-4.
# Usage: run_vs_torch.sh COLOSSALC MKTOKENS PYTHON SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 py=$3 src=$4 work=$5
mkdir -p "$work" && cd "$work"
rm -f log.jsonl final.safetensors
"$cc" "$src/models/gpt2-tiny.model" --set batch=2 --set seq=32 --set layers=2 -o train
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
"$py" "$src/tests/e2e/gpt2_reference.py" genesis.bin . 256 256 128 4 2 2 32 5 1e-3
./train --data genesis.bin --init-from init.safetensors --steps 5 --lr 1e-3 --warmup 0 --lr-schedule constant \
        --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0 --log log.jsonl --save final.safetensors
"$py" "$src/tests/e2e/compare.py" . log.jsonl final.safetensors 1e-4
