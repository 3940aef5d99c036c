#!/bin/sh
# The zoo's models start and train from their data files: bert and vit (small configs)
# from record files that colossalc-mkdata writes from zoo_data.py's arrays, and gpt2-tiny
# with a vocabulary of 70,001 from a uint32 token file; with --shuffle and dropout on,
# 40 steps (vit 300: finding the bright patch takes the class token longer; the vocabulary
# of 70,001 20), the mean
# loss of the last 10 steps below that of the first 10.
# Usage: run_zoo_train.sh COLOSSALC MKDATA PYTHON SRCDIR WORKDIR bert|vit|gpt2-u32
set -eu
cc=$1 mk=$2 py=$3 src=$4 work=$5 what=$6 steps=40
mkdir -p "$work" && cd "$work"
rm -f log.jsonl
case $what in
bert)
  "$cc" "$src/models/bert.model" --set vocab=260 --set ctx=32 --set d=32 --set heads=2 --set layers=2 \
        --set ffn=64 --set batch=8 --set seq=32 -o train
  "$py" "$src/tests/e2e/zoo_data.py" bert . "$src/data/genesis.txt" 512 32
  "$mk" data.bin tokens=tokens.npy token_types=token_types.npy targets=targets.npy ;;
vit)
  "$cc" "$src/models/vit.model" --set image=16 --set patch=4 --set classes=16 --set d=32 --set heads=2 \
        --set layers=2 --set mlp_dim=64 --set batch=8 -o train
  "$py" "$src/tests/e2e/zoo_data.py" vit . 512 16 3 4
  "$mk" data.bin images=images.npy labels=labels.npy
  steps=300 ;;
gpt2-u32)
  "$cc" "$src/models/gpt2-tiny.model" --set vocab=70001 --set layers=1 --set batch=4 --set seq=16 -o train
  "$py" -c 'import numpy as np; np.save("ids.npy", (np.arange(20000) * 7 % 5 + 69990).astype(np.int64))'
  "$mk" --tokens ids.npy data.bin
  steps=20 ;;
esac
./train --data data.bin --steps $steps --lr 1e-3 --warmup 0 --shuffle --log log.jsonl | sed -n '1p;2p;$p'
"$py" - <<'EOF'
import json, sys
loss = [json.loads(l)["loss"] for l in open("log.jsonl")]
first, last = sum(loss[:10]) / 10, sum(loss[-10:]) / 10
print(f"mean loss of the first 10 steps {first:.4f}, of the last 10 {last:.4f}: {'falls' if last < first else 'FAIL'}")
sys.exit(0 if last < first else 1)
EOF
