#!/bin/sh
# Resume equals uninterrupted, for a compiled model: 6 steps of gpt2-tiny (2 layers)
# in one run, then 3 steps with a checkpoint and 3 more resumed from it; the logged
# losses of steps 4-6 and the final parameters must be bit-identical. With PRECISION
# fp16, from a loss scale of 2^20 whose first steps are skipped: the checkpoint carries
# the scale and the count of skipped steps. With fp8, the checkpoint carries the
# delayed-scaling states (amax histories), without which the resumed steps would
# quantize at scale 1.
# Usage: run_resume.sh COLOSSALC MKTOKENS SRCDIR WORKDIR [PRECISION]
set -eu
cc=$1 mk=$2 src=$3 work=$4 prec=${5:-fp32}
extra=""
[ "$prec" = fp16 ] && extra="--loss-scale 1048576"
mkdir -p "$work" && cd "$work"
rm -rf ckpt full.jsonl part.jsonl full.safetensors part.safetensors
"$cc" "$src/models/gpt2-tiny.model" --set layers=2 --precision "$prec" -o train
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
# shellcheck disable=SC2086
./train --data genesis.bin --steps 6 --threads 2 --log full.jsonl --save full.safetensors $extra > /dev/null
# shellcheck disable=SC2086
./train --data genesis.bin --steps 3 --threads 2 --ckpt-dir ckpt --ckpt-every 3 $extra > /dev/null
./train --data genesis.bin --steps 6 --threads 2 --ckpt-dir ckpt --resume --log part.jsonl --save part.safetensors > /dev/null
if [ "$prec" = fp16 ] && ! grep -q '"skipped": true' full.jsonl; then
  echo "0 passed, 1 failed: no step skipped from a loss scale of 2^20"; exit 1
fi
want=$(grep -o '"loss": *[^,]*' full.jsonl | tail -3)
got=$(grep -o '"loss": *[^,]*' part.jsonl | tail -3)
echo "uninterrupted: $want" | tr '\n' ' '; echo
echo "resumed:       $got" | tr '\n' ' '; echo
[ "$want" = "$got" ] || { echo "0 passed, 1 failed: losses differ"; exit 1; }
cmp full.safetensors part.safetensors || { echo "1 passed, 1 failed: parameters differ"; exit 1; }
echo "2 passed, 0 failed"
