#!/bin/sh
# Training quality under mixed precision: gpt2-tiny (its default size) trained on
# data/genesis.txt for 2,000 steps in fp32, bf16 and fp8 (--precision) from the same
# seed; the final loss (the mean of the last 100 steps) of bf16 is within 2 % of fp32's,
# fp8's within 4 %.
# Usage: run_quality.sh COLOSSALC MKTOKENS SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 src=$3 work=$4
mkdir -p "$work" && cd "$work"
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
for prec in fp32 bf16 fp8; do
  "$cc" "$src/models/gpt2-tiny.model" --precision $prec -o "train-$prec" 2> /dev/null
  "./train-$prec" --data genesis.bin --steps 2000 --log "$prec.jsonl" > /dev/null
done
final() { tail -n 100 "$1" | sed -n 's/.*"loss": *\([0-9.e+-]*\).*/\1/p' | awk '{s += $1} END {print s / NR}'; }
f32=$(final fp32.jsonl) status=0
for pair in bf16:0.02 fp8:0.04; do
  prec=${pair%%:*} tol=${pair##*:}
  awk -v a="$f32" -v b="$(final "$prec.jsonl")" -v p="$prec" -v tol="$tol" 'BEGIN {
    rel = (b - a) / a; rel = rel < 0 ? -rel : rel
    printf "final loss (mean of the last 100 steps): fp32 %.4f, %s %.4f, relative difference %.2f%% (at most %g%%) %s\n",
           a, p, b, 100 * rel, 100 * tol, rel <= tol ? "ok" : "FAIL"
    exit rel <= tol ? 0 : 1 }' || status=1
done
exit $status
