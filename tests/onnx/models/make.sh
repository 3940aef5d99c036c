#!/bin/sh
# Writes the ONNX files committed in the tree, tests/onnx/models.py's models exported by
# Debian's torch 1.13: mlp_tiny.onnx here (an imported model for the lowering, LLVM and
# CUDA tests: tests/CMakeLists.txt, COLOSSALC_TINY_MODELS) and the fuzzing seeds in
# tests/fuzz/onnx/ (every model at sizes of a few kilobytes). Run from anywhere:
#   sh tests/onnx/models/make.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
seeds=$here/../../fuzz/onnx
ref="/usr/bin/python3 $here/../onnx_reference.py"
$ref mlp - "$here" 2 8 0 0 --export-only --opset 17 --dynamic --sizes vocab=64,d=32,hidden=48,layers=2 --name mlp_tiny.onnx
$ref mlp - "$seeds" 1 2 0 0 --export-only --opset 14 --sizes vocab=4,d=2,hidden=2,layers=1 --name mlp.onnx
$ref gpt2 - "$seeds" 1 2 0 0 --export-only --opset 14 --sizes vocab=4,ctx=2,d=4,heads=2,layers=1 --name gpt2.onnx
$ref llama - "$seeds" 1 2 0 0 --export-only --opset 17 --dynamic --sizes vocab=4,ctx=2,d=4,heads=1,ffn=2,layers=1 \
     --name llama.onnx
