#!/bin/sh
# Training quality under mixed precision: gpt2-tiny (its default size) trained on
# data/genesis.txt for 2,000 steps in fp32 and in bf16 (--precision bf16) from the same
# seed; the bf16 run's final loss (the mean of the last 100 steps) is within 2 % of
# fp32's.
# Usage: run_quality.sh COLOSSALC MKTOKENS SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 src=$3 work=$4
mkdir -p "$work" && cd "$work"
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
for prec in fp32 bf16; do
  "$cc" "$src/models/gpt2-tiny.model" --precision $prec -o "train-$prec" 2> /dev/null
  "./train-$prec" --data genesis.bin --steps 2000 --log "$prec.jsonl" > /dev/null
done
final() { tail -n 100 "$1" | sed -n 's/.*"loss": *\([0-9.e+-]*\).*/\1/p' | awk '{s += $1} END {print s / NR}'; }
f32=$(final fp32.jsonl) b16=$(final bf16.jsonl)
awk -v a="$f32" -v b="$b16" 'BEGIN {
  rel = (b - a) / a; rel = rel < 0 ? -rel : rel
  printf "final loss (mean of the last 100 steps): fp32 %.4f, bf16 %.4f, relative difference %.2f%% %s\n",
         a, b, 100 * rel, rel <= 0.02 ? "ok" : "FAIL"
  exit rel <= 0.02 ? 0 : 1 }'
