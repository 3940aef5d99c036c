#!/usr/bin/env bash
# The main job: install what is missing, build colossalc, compile the byte-level
# gpt2-tiny into a `train` executable, and train it on the Book of Genesis
# (data/genesis.txt, public domain) for a few minutes on the CPU: the loss falls,
# then the model writes a sample. STEPS (default 5000) sets the length of the run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p build out
echo "== building colossalc (log: build/build.log)"
cmake -S . -B build > build/build.log 2>&1 || { cat build/build.log; exit 1; }
cmake --build build -j"$(nproc)" >> build/build.log 2>&1 || { tail -50 build/build.log; exit 1; }
echo "== the model"
./build/colossalc models/gpt2-tiny.model --summary | sed -n '1,8p'
echo "== compiling models/gpt2-tiny.model into out/train"
./build/colossalc models/gpt2-tiny.model -o out/train
./build/tools/colossalc-mktokens data/genesis.txt out/genesis.bin
echo "== training"
./out/train --data out/genesis.bin --steps "${STEPS:-5000}" --lr-schedule cosine --warmup 100 \
            --log out/train.jsonl --save out/gpt2-tiny.safetensors --sample 400 |
  awk '/^step / { split($2, s, "/"); if (s[1] % 250 == 1 || s[1] == s[2]) { print; fflush() } next } { print; fflush() }'
