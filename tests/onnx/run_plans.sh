#!/bin/sh
# The imported GPT-2 plans as models/gpt2.model does: tests/onnx/models.py's GPT-2 at
# the sizes below, exported with torch.onnx, against the model with the same sizes
# (--set), under several plan searches; --dump-plan's text and JSON must agree but for
# the source file and the IR node numbers (compare_plans.py).
# Usage: run_plans.sh COLOSSALC PYTHON SRCDIR WORKDIR
set -eu
cc=$1 py=$2 src=$3 work=$4
mkdir -p "$work" && cd "$work"
sizes="vocab=4096 ctx=1024 d=256 heads=8 layers=4"
batch=8 seq=1024
"$py" "$src/tests/onnx/onnx_reference.py" gpt2 - . $batch $seq 0 0 --export-only --name gpt2.onnx \
      --sizes "$(echo $sizes | tr ' ' ,)" 2>&1 | grep -v -i warn || true
set_args=$(for s in $sizes batch=$batch seq=$seq; do printf ' --set %s' "$s"; done)
status=0
for opts in "--gpus 8" "--gpus 8 --tp 2 --pp 2" "--gpus 64 --gpus-per-node 8" "--gpus 8 --zero 3 --recompute full" \
            "--gpus 16 --gpu h100-sxm --precision bf16"; do
  echo "== $opts"
  for fmt in text json; do
    "$cc" gpt2.onnx $opts --dump-plan=$fmt > onnx.$fmt
    "$cc" "$src/models/gpt2.model" $set_args $opts --dump-plan=$fmt > model.$fmt
    "$py" "$src/tests/onnx/compare_plans.py" $fmt onnx.$fmt model.$fmt || status=1
  done
  sed -n '4,6p' onnx.text
done
exit $status
