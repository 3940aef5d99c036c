#!/usr/bin/env bash
# The main job: install what is missing, build colossalc, and compile GPT-2 124M,
# printing its structure (parameters, FLOPs per step, per-layer table).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p build
cmake -S . -B build > build/build.log 2>&1 || { cat build/build.log; exit 1; }
cmake --build build -j"$(nproc)" >> build/build.log 2>&1 || { tail -50 build/build.log; exit 1; }
./build/colossalc models/gpt2.model --summary
