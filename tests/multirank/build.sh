#!/bin/sh
# Builds what the multi-rank tests share: gpt2-tiny (2 layers, seq 32) compiled for
# a batch of 2, 4 and 8 (train-b2, train-b4, train-b8), with 4 layers for a batch of 4
# (train-l4-b4, the one-rank run the mesh tests compare with) and the token file of
# data/genesis.txt.
# Usage: build.sh COLOSSALC MKTOKENS SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 src=$3 work=$4
mkdir -p "$work" && cd "$work"
for b in 2 4 8; do
  "$cc" "$src/models/gpt2-tiny.model" --set layers=2 --set seq=32 --set batch=$b -o train-b$b
done
"$cc" "$src/models/gpt2-tiny.model" --set layers=4 --set seq=32 --set batch=4 -o train-l4-b4
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
echo "built train-b2, train-b4, train-b8, train-l4-b4 and genesis.bin in $work"
