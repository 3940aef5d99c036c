#!/bin/sh
# transformers checkpoints both ways, against transformers itself (hf_reference.py):
# compile a small GPT-2, LLaMA (2, or 3: grouped-query attention), Mistral (a window
# shorter than the sequence) or Qwen2 (q, k, v biases) to the reference's config, write a random model as
# transformers writes it (LAYOUT: pretrained, hub, tied; DTYPE: f32, f16, bf16; SHARD:
# save_pretrained's max_shard_size or none), `train --init-from` it (FROM: dir, the
# directory; index, its model.safetensors.index.json; file, its model.safetensors) for
# 3 AdamW steps with --save-hf, and check the first step's loss and the saved model's
# logits against transformers' own steps (1e-5 relative). For the tied layout only the
# first loss is compared (transformers trains one tied head, `train` two).
# With EXPORT (colossalc-export): the same run's --save file and --ckpt-dir checkpoint
# exported give the --save-hf files byte for byte, and --init-from the --save-hf
# directory reads back the parameters --save wrote.
# The learning rate is 1e-4: Adam moves a weight whose gradient is rounding noise by
# the rate whatever the noise's sign, and at 1e-3 LLaMA's logits came within 1e-5 of
# the reference by that alone (8.4e-6); at 1e-4 the steps still move them by 0.3.
# MESH="DP TP PP" with MPIRUN in the environment: planned for that mesh of CPU ranks and
# run under MPIRUN (--init-from read by every rank and sliced, --save-hf gathered).
# Usage: run_hf.sh COLOSSALC MKTOKENS PYTHON SRCDIR WORKDIR FAMILY LAYOUT DTYPE SHARD FROM [EXPORT]
set -eu
cc=$1 mk=$2 py=$3 src=$4 work=$5 fam=$6 layout=$7 dtype=$8 shard=$9 from=${10} export=${11:-}
steps=3 lr=1e-4 plan="" run=""
if [ -n "${MESH:-}" ]; then
  set -- $MESH
  plan="--gpus $(($1 * $2 * $3)) --gpu cpu --dp $1 --tp $2 --pp $3 --zero 0 --microbatch-size 1"
  run="$MPIRUN -np $(($1 * $2 * $3))"
fi
rm -rf "$work" && mkdir -p "$work" && cd "$work"
small="--set vocab=256 --set d=64 --set heads=4 --set layers=2 --set ffn=160 --set batch=2 --set seq=32"
case $fam in # the configs of hf_reference.py
  gpt2) "$cc" "$src/models/gpt2-tiny.model" --set batch=2 --set seq=32 --set layers=2 $plan -o train ;;
  llama) "$cc" "$src/models/llama.model" $small $plan -o train ;;
  llama3) "$cc" "$src/models/llama3.model" $small --set kv_heads=2 $plan -o train ;;
  llama31) "$cc" "$src/models/llama3.model" $small --set kv_heads=2 --set rope_factor=8 --set rope_ctx=64 $plan -o train ;;
  mistral) "$cc" "$src/models/mistral.model" $small --set kv_heads=2 --set window=8 $plan -o train ;;
  qwen2) "$cc" "$src/models/qwen2.model" $small --set kv_heads=1 $plan -o train ;;
esac
"$mk" "$src/data/genesis.txt" tokens.bin > /dev/null
"$py" "$src/tests/hf/hf_reference.py" make "$fam" . tokens.bin "$layout" "$dtype" "$shard" $steps $lr
case $from in
  dir) init=ckpt ;;
  index) init=ckpt/model.safetensors.index.json ;;
  file) init=ckpt/model.safetensors ;;
esac
$run ./train --data tokens.bin --init-from "$init" --steps $steps --lr $lr --warmup 0 --lr-schedule constant \
        --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0 --log log.jsonl \
        --save-hf hf --save final.safetensors --ckpt-dir ck | tee train.out
first=""
[ "$layout" = tied ] && first=first
"$py" "$src/tests/hf/hf_reference.py" check . tokens.bin log.jsonl hf $first
[ -z "$export" ] && exit 0
"$export" final.safetensors exported
"$export" ck/ckpt-$steps exported-ckpt
for f in model.safetensors config.json; do
  cmp hf/$f exported/$f
  cmp hf/$f exported-ckpt/$f
done
./train --steps 0 --init-from hf --save back.safetensors > /dev/null
cmp final.safetensors back.safetensors
echo "colossalc-export: the --save file and the checkpoint give the --save-hf files; --init-from reads them back"
