#!/bin/sh
# Builds what the multi-rank tests share: gpt2-tiny (2 layers, seq 32) compiled for
# a batch of 2, 4 and 8 (train-b2, train-b4, train-b8), the same planned for 2 and 4
# data-parallel ranks of 2 rows each with ZeRO stage 1, 2 and 3 (train-dpN-zeroS: the
# stage and the parameters' owners are the plan's), with 4 layers for a batch of 4
# (train-l4-b4, the one-rank run the mesh tests compare with) and the token file of
# data/genesis.txt.
# Usage: build.sh COLOSSALC MKTOKENS SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 src=$3 work=$4
mkdir -p "$work" && cd "$work"
for b in 2 4 8; do
  "$cc" "$src/models/gpt2-tiny.model" --set layers=2 --set seq=32 --set batch=$b -o train-b$b
done
for np in 2 4; do
  for z in 1 2 3; do
    "$cc" "$src/models/gpt2-tiny.model" --set layers=2 --set seq=32 --set batch=$((2 * np)) --gpus $np --gpu cpu \
      --dp $np --tp 1 --pp 1 --zero $z --microbatch-size 2 -o train-dp$np-zero$z 2> /dev/null
  done
done
"$cc" "$src/models/gpt2-tiny.model" --set layers=4 --set seq=32 --set batch=4 -o train-l4-b4
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
echo "built train-b2, train-b4, train-b8, train-dp{2,4}-zero{1,2,3}, train-l4-b4 and genesis.bin in $work"
