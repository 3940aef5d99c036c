#!/bin/sh
# End to end from ONNX: a torch model (tests/onnx/models.py) exported with torch.onnx
# (training mode, no constant folding, initialisers as parameters), compiled by
# colossalc, its forward loss against onnxruntime's (relative 1e-5, ort_check.py) and
# 5 AdamW steps of `train --init-from` the exporter's state dict against PyTorch's
# (each step's loss and the final parameters, relative 1e-4, tests/e2e/compare.py).
# The optimizer comes from a training file (mlp), colossalc's flags (gpt2) or train's
# (llama); llama is exported with a symbolic batch, given by --set batch.
# With MPIRUN and PLAN (colossalc's plan options, commas for spaces), the model is
# compiled for that plan and run under MPIRUN -np (the plan's ranks), against the same
# one-process PyTorch reference.
# Usage: run_onnx.sh COLOSSALC MKTOKENS PYTHON SRCDIR WORKDIR mlp|gpt2|llama [MPIRUN PLAN]
set -eu
cc=$1 mk=$2 py=$3 src=$4 work=$5 kind=$6 mpirun=${7:-} plan=$(echo "${8:-}" | tr , ' ') launch=""
batch=2 seq=32 steps=5 export="" compile="" run="" noise=""
case $kind in
mlp)   batch=4 seq=16 export="--opset 17" compile="--train-file $src/tests/onnx/mlp.train" ;;
gpt2)  compile="--lr 1e-3 --beta2 0.95 --weight-decay 0.1 --clip 1"
       # the key biases (d = 64: c_attn.bias[64:128]) have a zero gradient in exact
       # arithmetic: Adam follows rounding noise there, at most lr a step (compare.py, NOISE)
       noise="h[.][0-9]+[.]attn[.]c_attn[.]bias:64:128:0.005" ;;
llama) export="--opset 17 --dynamic" compile="--set batch=$batch"
       run="--lr 1e-3 --warmup 0 --lr-schedule constant --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0" ;;
*)     echo "run_onnx.sh: unknown model $kind" >&2; exit 2 ;;
esac
mkdir -p "$work" && cd "$work"
rm -f log.jsonl final.safetensors train
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
"$py" "$src/tests/onnx/onnx_reference.py" $kind genesis.bin . $batch $seq $steps 1e-3 $export 2>&1 | grep -v -i warn || true
if [ -n "$plan" ]; then
  "$cc" model.onnx $compile $plan -o train 2> plan.txt
  head -1 plan.txt
  launch="$mpirun -np $(sed -n 's/.*mpirun -np \([0-9]*\).*/\1/p' plan.txt)"
else
  "$cc" model.onnx $compile -o train
fi
# shellcheck disable=SC2086
$launch ./train --data genesis.bin --init-from init.safetensors --steps $steps $run --log log.jsonl --save final.safetensors > /dev/null
grep '"loss"' log.jsonl > losses.jsonl  # (the step records)
"$py" "$src/tests/onnx/ort_check.py" model.onnx genesis.bin $batch $seq losses.jsonl 1e-5
"$py" "$src/tests/e2e/compare.py" . losses.jsonl final.safetensors 1e-4 $noise
