#!/bin/sh
# End to end against PyTorch: compile a small GPT-2 (gpt2-tiny with 2 layers, batch 2,
# seq 32) into `train`, write random initial weights and run 5 AdamW steps in PyTorch
# (gpt2_reference.py), run the same 5 steps with `train --init-from`, and compare
# each step's loss and the final parameters to a relative 1e-4.
# With PRECISION bf16, fp16 or fp8: compiled with --precision, 20 steps against the
# reference with the same casts (gpt2_reference.py --bf16, --fp16, --fp8), to a relative 1e-2 (fp8: 3e-2; the losses,
# and every parameter tensor but the key biases, whose gradient is rounding noise); fp16
# from a loss scale of 2^20, its first steps skipped (the same ones as GradScaler).
# FLAGS (one word, commas for spaces) go to colossalc: --classifier,fused checks the fused
# classifier against the same reference; with fp8, --fp8-classifier checks against the
# reference whose classifier GEMM is fp8 too, and that the run is closer to it than the
# one with the classifier in bf16 is; --optimizer,lamb trains with LAMB against the
# reference's (gpt2_reference.py --lamb).
# Usage: run_vs_torch.sh COLOSSALC MKTOKENS PYTHON SRCDIR WORKDIR [PRECISION [FLAGS]]
set -eu
cc=$1 mk=$2 py=$3 src=$4 work=$5 prec=${6:-fp32} flags=$(echo "${7:-}" | tr , ' ')
steps=5 tol=1e-4 ref="" noise=""
# bf16: the key biases (d = 128, the second third of c_attn.bias) have a zero gradient
# in exact arithmetic; checked to move at most lr x steps (compare.py, NOISE)
[ "$prec" = bf16 ] && steps=20 tol=1e-2 ref=--bf16 noise="h[.][0-9]+[.]attn[.]c_attn[.]bias:128:256:0.02"
# fp16: dynamic loss scaling against the reference's GradScaler; from 2^20 the first steps
# overflow and are skipped, the same ones on both sides
[ "$prec" = fp16 ] && steps=20 tol=1e-2 ref="--fp16 --scale 1048576" noise="h[.][0-9]+[.]attn[.]c_attn[.]bias:128:256:0.02"
# fp8: the same against the reference's delayed scaling (--fp8 HISTORY), a history of 4
# steps so that the run rolls it over; 12 steps, as a flipped e4m3 rounding (an eighth of
# a value) grows faster than a bf16 one, to 3e-2: the GEMMs' inputs are 16-bit
# activations, so a last-bit difference of an f32 sum (another order than PyTorch's)
# becomes a bf16 unit before it meets the e4m3 grid (the closer-than checks below hold)
[ "$prec" = fp8 ] && steps=12 tol=3e-2 ref="--fp8 4" noise="h[.][0-9]+[.]attn[.]c_attn[.]bias:128:256:0.02" \
  flags="$flags --fp8-history 4"
case " $flags " in *" --fp8-classifier "*) ref="$ref --fp8-head" ;; esac # the classifier's GEMM in fp8 too
case " $flags " in *" --optimizer lamb "*) ref="--lamb $ref" ;; esac
scale=""
[ "$prec" = fp16 ] && scale="--loss-scale 1048576"
mkdir -p "$work" && cd "$work"
rm -f log.jsonl final.safetensors
"$cc" "$src/models/gpt2-tiny.model" --set batch=2 --set seq=32 --set layers=2 --precision "$prec" $flags -o train
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
"$py" "$src/tests/e2e/gpt2_reference.py" $ref genesis.bin . 256 256 128 4 2 2 32 $steps 1e-3
./train --data genesis.bin --init-from init.safetensors --steps $steps --lr 1e-3 --warmup 0 --lr-schedule constant \
        --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0 --log log.jsonl --save final.safetensors $scale
"$py" "$src/tests/e2e/compare.py" . log.jsonl final.safetensors $tol $noise
[ "$prec" = fp32 ] && exit 0
# and closer to that reference than f32 training is (closer.py)
mkdir -p f32
"$py" "$src/tests/e2e/gpt2_reference.py" genesis.bin f32 256 256 128 4 2 2 32 $steps 1e-3 > /dev/null
"$py" "$src/tests/e2e/closer.py" . f32 final.safetensors "$noise"
[ "$prec" = fp8 ] || exit 0
# fp8: and closer to it than bf16 training is
mkdir -p bf16
"$py" "$src/tests/e2e/gpt2_reference.py" --bf16 genesis.bin bf16 256 256 128 4 2 2 32 $steps 1e-3 > /dev/null
"$py" "$src/tests/e2e/closer.py" . bf16 final.safetensors "$noise"
case "$ref" in *--fp8-head*) ;; *) exit 0 ;; esac
# --fp8-classifier: and closer to it than the reference with the classifier in bf16 is
mkdir -p fp8-bf16-head
"$py" "$src/tests/e2e/gpt2_reference.py" --fp8 4 genesis.bin fp8-bf16-head 256 256 128 4 2 2 32 $steps 1e-3 > /dev/null
"$py" "$src/tests/e2e/closer.py" . fp8-bf16-head final.safetensors "$noise"
