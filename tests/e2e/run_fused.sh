#!/bin/sh
# Fused kernels equal the materialized ones: the loss and the gradient of every
# parameter after one SGD step, to a relative 1e-5 (compare_step.py).
#   attention: flash_attention (one kernel forward, one per gradient, the scores never
#     stored) against GEMMs and a softmax, on tests/models/attention.model: causal and
#     not, head sizes 32, 64 and 128, sequence lengths off and on the key block (32).
#   classifier: classifier_ce (the classifier's GEMM and cross-entropy a chunk of rows
#     at a time, the logits never stored whole) against a GEMM and cross_entropy, w
#     [d, V] (attention.model) and tied [V, d] read transposed (classifier.model), with
#     row counts the chunk does not divide.
# Each fused program must hold the fused kernels and the materialized one none; a fused
# classifier's program refuses --sample (it never holds the logits).
# Usage: run_fused.sh attention|classifier COLOSSALC MKTOKENS PYTHON SRCDIR WORKDIR
set -eu
what=$1 cc=$2 mk=$3 py=$4 src=$5 work=$6
lr=1e4 # large against the parameters: (initial - final) / lr is the gradient (compare_step.py)
mkdir -p "$work" && cd "$work"
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
# check MODEL KERNELS_IN_FUSED (the count of kernels named after the fused op) SET...
check() {
  model=$1 want=$2
  shift 2
  sets=""
  for s in "$@"; do sets="$sets --set $s"; done
  echo "== $(basename "$model") $*"
  for form in fused materialized; do
    "$cc" "$model" $sets --$what $form -o train-$form --emit-kernels kernels-$form.txt 2> /dev/null
    pat=flash_attention
    [ "$what" = classifier ] && pat=classifier_ce
    n=$(grep -c "^kernel k[0-9]*_$pat" kernels-$form.txt || true)
    if [ "$form" = fused ] && [ "$n" -lt "$want" ]; then echo "FAIL: $n $pat kernels in the fused program"; exit 1; fi
    if [ "$form" = materialized ] && [ "$n" -ne 0 ]; then echo "FAIL: $pat kernels in the materialized program"; exit 1; fi
    rm -f $form.jsonl
    ./train-$form --data genesis.bin --steps 1 --lr $lr --clip 0 --warmup 0 --lr-schedule constant \
                  --log $form.jsonl --save $form.safetensors > /dev/null
  done
  ./train-fused --data genesis.bin --steps 0 --save init.safetensors > /dev/null
  PYTHONPATH="$src/tests/e2e" "$py" "$src/tests/e2e/compare_step.py" init.safetensors $lr 1e-5 \
      fused.jsonl fused.safetensors materialized.jsonl materialized.safetensors
}
if [ "$what" = attention ]; then
  # d heads seq causal: head sizes 32, 64, 128 (the forward kernel and dq, dk, dv: 4)
  for c in "128 4 45 1" "128 4 45 0" "128 2 70 1" "256 2 33 0" "256 2 64 1" "512 4 100 1"; do
    set -- $c
    check "$src/tests/models/attention.model" 4 d=$1 heads=$2 seq=$3 causal=$4
  done
else
  # w [d, V]: 90 rows in chunks of 64 (V / d = 2); tied w [V, d]: 135 rows in chunks of 64
  check "$src/tests/models/attention.model" 2 batch=2 seq=45
  check "$src/tests/models/classifier.model" 2
  check "$src/tests/models/classifier.model" 2 batch=1 seq=7 d=32
  # no logits to sample from: refused with what to do
  if ./train-fused --data genesis.bin --steps 0 --sample 4 > sample.txt 2>&1; then
    echo "FAIL: --sample ran on a program with the classifier fused"; exit 1
  fi
  grep -q -- "--classifier materialized" sample.txt || { cat sample.txt; echo "FAIL: --sample's refusal"; exit 1; }
fi
