#!/bin/sh
# End to end against PyTorch, as run_vs_torch.sh does for gpt2-tiny, for the other zoo
# models at small configs: bert (vocabulary 260, 2 layers, width 32, seq 32, batch 4) and
# vit (16x16 images of 4x4 patches, 16 classes, 2 layers, width 32, batch 4) from record
# files (zoo_data.py's arrays through colossalc-mkdata), llama (vocabulary 256, 2 layers,
# width 32, 4 heads, seq 16, batch 2) from the genesis token file. zoo_reference.py
# writes random initial weights and runs 5 AdamW steps in PyTorch on the rows train
# reads; `train --init-from` runs the same 5 steps; each step's loss and every final
# parameter agree to a relative 1e-4 (compare.py). Dropout off (pdrop = 0).
# Usage: run_zoo_vs_torch.sh COLOSSALC MKDATA MKTOKENS PYTHON SRCDIR WORKDIR bert|vit|llama
set -eu
cc=$1 mk=$2 mktok=$3 py=$4 src=$5 work=$6 what=$7
steps=5 lr=1e-3
mkdir -p "$work" && cd "$work"
rm -f log.jsonl final.safetensors
case $what in
bert) # reference: layers d heads ffn ctx batch steps lr vocab
  "$cc" "$src/models/bert.model" --set vocab=260 --set ctx=32 --set d=32 --set heads=2 --set layers=2 \
        --set ffn=64 --set batch=4 --set seq=32 --set pdrop=0 -o train
  "$py" "$src/tests/e2e/zoo_data.py" bert . "$src/data/genesis.txt" 64 32
  "$mk" data.bin tokens=tokens.npy token_types=token_types.npy targets=targets.npy
  ref="2 32 2 64 32 4 $steps $lr 260" ;;
vit) # reference: layers d heads mlp_dim patch batch steps lr classes
  "$cc" "$src/models/vit.model" --set image=16 --set patch=4 --set classes=16 --set d=32 --set heads=2 \
        --set layers=2 --set mlp_dim=64 --set batch=4 --set pdrop=0 -o train
  "$py" "$src/tests/e2e/zoo_data.py" vit . 64 16 3 4
  "$mk" data.bin images=images.npy labels=labels.npy
  ref="2 32 2 64 4 4 $steps $lr 16" ;;
llama) # reference: layers d heads ffn seq batch steps lr vocab
  "$cc" "$src/models/llama.model" --set vocab=256 --set d=32 --set heads=4 --set layers=2 --set ffn=48 \
        --set batch=2 --set seq=16 -o train
  "$mktok" "$src/data/genesis.txt" data.bin > /dev/null
  ref="2 32 4 48 16 2 $steps $lr 256" ;;
esac
refdata=.
[ "$what" = llama ] && refdata=data.bin
"$py" "$src/tests/e2e/zoo_reference.py" "$what" "$refdata" . $ref
./train --data data.bin --init-from init.safetensors --steps $steps --lr $lr --warmup 0 --lr-schedule constant \
        --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0 --log log.jsonl --save final.safetensors \
        > train.out
"$py" "$src/tests/e2e/compare.py" . log.jsonl final.safetensors 1e-4
