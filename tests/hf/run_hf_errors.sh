#!/bin/sh
# `train --init-from` on damaged transformers checkpoints and `--save-hf` on models that
# are not transformers models, colossalc-export on a file without the program's arch: one
# clear message each, exit status 1 (hf_errors.py).
# Usage: run_hf_errors.sh COLOSSALC EXPORT PYTHON SRCDIR WORKDIR
set -eu
cc=$1 export=$2 py=$3 src=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work"
tiny="--set batch=2 --set seq=32 --set layers=2"
"$cc" "$src/models/gpt2-tiny.model" $tiny -o train
# GPT-2's names with ReLU (not what GPT2LMHeadModel computes), and other names
sed 's/gelu(/relu(/' "$src/models/gpt2-tiny.model" > relu.model
sed 's/wpe\.weight/pos.weight/g' "$src/models/gpt2-tiny.model" > named.model
"$cc" relu.model $tiny -o train-relu
"$cc" named.model $tiny -o train-named
# Mistral as hf_reference.py configures it: 2 key/value heads, a window of 8 keys
"$cc" "$src/models/mistral.model" $tiny --set vocab=256 --set d=64 --set heads=4 --set ffn=160 --set kv_heads=2 \
      --set window=8 -o train-mistral
"$py" "$src/tests/hf/hf_errors.py" "$PWD/train" "$export" "$PWD"
