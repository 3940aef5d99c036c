#!/bin/sh
# Resume equals uninterrupted, for a compiled model: 6 steps of gpt2-tiny (2 layers)
# in one run, then 3 steps with a checkpoint and 3 more resumed from it; the logged
# losses of steps 4-6 and the final parameters must be bit-identical.
# Usage: run_resume.sh COLOSSALC MKTOKENS SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 src=$3 work=$4
mkdir -p "$work" && cd "$work"
rm -rf ckpt full.jsonl part.jsonl full.safetensors part.safetensors
"$cc" "$src/models/gpt2-tiny.model" --set layers=2 -o train
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
./train --data genesis.bin --steps 6 --threads 2 --log full.jsonl --save full.safetensors > /dev/null
./train --data genesis.bin --steps 3 --threads 2 --ckpt-dir ckpt --ckpt-every 3 > /dev/null
./train --data genesis.bin --steps 6 --threads 2 --ckpt-dir ckpt --resume --log part.jsonl --save part.safetensors > /dev/null
want=$(grep -o '"loss": *[^,]*' full.jsonl | tail -3)
got=$(grep -o '"loss": *[^,]*' part.jsonl | tail -3)
echo "uninterrupted: $want" | tr '\n' ' '; echo
echo "resumed:       $got" | tr '\n' ' '; echo
[ "$want" = "$got" ] || { echo "0 passed, 1 failed: losses differ"; exit 1; }
cmp full.safetensors part.safetensors || { echo "1 passed, 1 failed: parameters differ"; exit 1; }
echo "2 passed, 0 failed"
