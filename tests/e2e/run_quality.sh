#!/bin/sh
# Training quality under mixed precision: gpt2-tiny (its default size) trained on
# data/genesis.txt for 1,000 steps in fp32, bf16 and fp8 (--precision) from the same
# seed; the final loss (the mean of the last 100 steps) of bf16 is within 2 % of fp32's,
# fp8's within 4 %. bf16 and fp8 then sample 120 bytes (--sample, from the bf16 logits
# `forward` stores, which the sampler widens): at least 90 % of them are letters,
# spaces and punctuation, as the text they learned is (logits read wrong sample bytes
# that are not: uniform bytes would be a quarter of them).
# Usage: run_quality.sh COLOSSALC MKTOKENS SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 src=$3 work=$4
mkdir -p "$work" && cd "$work"
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
for prec in fp32 bf16 fp8; do
  "$cc" "$src/models/gpt2-tiny.model" --precision $prec -o "train-$prec" 2> /dev/null
  sample=120
  [ $prec = fp32 ] && sample=0
  "./train-$prec" --data genesis.bin --steps 1000 --log "$prec.jsonl" --sample $sample > "$prec.out"
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
for prec in bf16 fp8; do
  text=$(sed -n '/^--- sample (120 tokens) ---$/,$p' "$prec.out" | tail -n +2 | head -c 120 | tr -cd "A-Za-z ,.;:!?'\n" |
         wc -c)
  echo "$prec sample: $text of 120 bytes are letters, spaces and punctuation"
  [ "$text" -ge 108 ] || { echo "FAIL: $prec's sample"; sed -n '/^--- sample/,$p' "$prec.out"; status=1; }
done
exit $status
