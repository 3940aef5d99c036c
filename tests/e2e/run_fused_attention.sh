#!/bin/sh
# Fused attention (flash_attention: one kernel forward, one per gradient, the scores
# never stored) equals materialized attention (GEMMs and a softmax): the loss and the
# gradient of every parameter after one SGD step of tests/models/attention.model, to a
# relative 1e-5, causal and not, head sizes 32, 64 and 128, sequence lengths that are
# not multiples of the key block (32) and one that is. Each case's fused program must
# hold flash_attention kernels and the materialized one none.
# Usage: run_fused_attention.sh COLOSSALC MKTOKENS PYTHON SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 py=$3 src=$4 work=$5
lr=1e4 # large against the parameters: (initial - final) / lr is the gradient (compare_attention.py)
mkdir -p "$work" && cd "$work"
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
# d heads seq causal: head sizes 32, 64, 128
for c in "128 4 45 1" "128 4 45 0" "128 2 70 1" "256 2 33 0" "256 2 64 1" "512 4 100 1"; do
  set -- $c
  echo "== d $1, heads $2 (head size $(($1 / $2))), seq $3, causal $4"
  for form in fused materialized; do
    "$cc" "$src/tests/models/attention.model" --set d=$1 --set heads=$2 --set seq=$3 --set causal=$4 \
          --attention $form -o train-$form --emit-kernels kernels-$form.txt 2> /dev/null
    n=$(grep -c "^kernel .*flash" kernels-$form.txt || true)
    if [ "$form" = fused ] && [ "$n" -ne 4 ]; then echo "FAIL: $n flash_attention kernels in the fused program"; exit 1; fi
    if [ "$form" = materialized ] && [ "$n" -ne 0 ]; then echo "FAIL: flash_attention kernels in the materialized program"; exit 1; fi
    rm -f $form.jsonl
    ./train-$form --data genesis.bin --steps 1 --lr $lr --clip 0 --warmup 0 --lr-schedule constant \
                  --log $form.jsonl --save $form.safetensors > /dev/null
  done
  ./train-fused --data genesis.bin --steps 0 --save init.safetensors > /dev/null
  PYTHONPATH="$src/tests/e2e" "$py" "$src/tests/e2e/compare_attention.py" init.safetensors $lr 1e-5 \
      fused.jsonl fused.safetensors materialized.jsonl materialized.safetensors
done
