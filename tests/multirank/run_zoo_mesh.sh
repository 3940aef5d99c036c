#!/bin/sh
# Each zoo model's dp x tp x pp plan equals one rank, as run_mesh.sh holds it for
# gpt2-tiny: llama (vocabulary 256, 4 layers, width 32, 4 heads, seq 16) from the
# genesis token file, bert (vocabulary 260, 4 layers, width 32, 2 heads, seq 32) and vit
# (16x16 images of 4x4 patches, 16 classes, 4 layers, width 32, 2 heads) from record
# files (tests/e2e/zoo_data.py through colossalc-mkdata), dropout off, a global batch of
# 4 rows. The plan is compiled for DP*TP*PP CPU ranks with the forced degrees, the
# layers sharded as Megatron-LM does (megatron-MODEL.plan.json: q, k and v (ViT's qkv)
# by columns, attention by heads, the output projection by rows; the MLP's first
# matmuls by columns, its last by rows; the search picks the rest) and micro-batches
# of one row (llama3 and mistral: grouped-query attention, Mistral's in a window, with
# megatron-llama3.plan.json, which leaves k and v to the search: by columns where the
# ranks divide the key/value heads, else whole, each rank taking its head from them),
# run under mpirun for 5 AdamW steps (--eps 1e-6, as run_equal.sh says why),
# and compared with one rank of the same model and batch: every step's loss and every
# parameter after the last update (--save gathers the split and staged parameters) to a
# relative 1e-5 (compare_runs.py), and every step's measured device memory equal to the
# compiler's prediction (check_memory.py). BERT's loss ignores the unmasked positions:
# every record has as many masked ones, so the plan's mean of its micro-batches' means
# is the one-rank mean; its attention key biases, whose gradient is zero in exact
# arithmetic (a tensor of their own here, not a slice of a qkv bias as in GPT-2), are left
# out of the comparison. ViT to 3e-5: its biases start at zero, so after 5 steps an MLP
# bias's norm is about 0.01 and one element's rounding difference of 1e-7 (an element
# with a near-zero gradient, which Adam turns into whole steps) reads as 1e-5; measured
# 1.8e-5 and 2.1e-5 (blocks.0.mlp.fc1.bias) with two forms of the CPU attention kernel
# (whose exps differ in the last bit for some scores), the largest elementwise
# difference 5e-7 and 4e-7.
# CLUSTER=FILE plans for that cluster file rather than the cpu profile (2 ranks a node).
# Usage: run_zoo_mesh.sh COLOSSALC MKDATA MKTOKENS WORKDIR PYTHON SRCDIR "MPIRUN" MODEL DP TP PP [COLOSSALC FLAGS...]
set -eu
cc=$1 mk=$2 mktok=$3 work=$4 py=$5 src=$6 mpirun=$7 model=$8 dp=$9
shift 9
tp=$1 pp=$2
shift 2
np=$((dp * tp * pp))
run=$work/zoo-$model-dp$dp-tp$tp-pp$pp && rm -rf "$run" && mkdir -p "$run" && cd "$run"
tol=1e-5 skip="" plan=$src/tests/multirank/megatron-$model.plan.json
case $model in
llama)
  config="--set vocab=256 --set d=32 --set heads=4 --set layers=4 --set ffn=48 --set seq=16"
  "$mktok" "$src/data/genesis.txt" data.bin > /dev/null ;;
llama3 | mistral) # 2 (1) key/value heads for 4 query heads, a window of 5 keys in 16
  config="--set vocab=256 --set d=32 --set heads=4 --set layers=4 --set ffn=48 --set seq=16 --set kv_heads=2"
  [ $model = mistral ] && config="$config --set kv_heads=1 --set window=5"
  plan=$src/tests/multirank/megatron-llama3.plan.json
  "$mktok" "$src/data/genesis.txt" data.bin > /dev/null ;;
bert)
  config="--set vocab=260 --set ctx=32 --set d=32 --set heads=2 --set layers=4 --set ffn=64 --set seq=32 --set pdrop=0"
  "$py" "$src/tests/e2e/zoo_data.py" bert . "$src/data/genesis.txt" 64 32
  "$mk" data.bin tokens=tokens.npy token_types=token_types.npy targets=targets.npy > /dev/null
  skip="bert[.]encoder[.]layer[.][0-9]+[.]attention[.]self[.]key[.]bias:0:32" ;;
vit)
  config="--set image=16 --set patch=4 --set classes=16 --set d=32 --set heads=2 --set layers=4 --set mlp_dim=64 --set pdrop=0"
  "$py" "$src/tests/e2e/zoo_data.py" vit . 64 16 3 4
  "$mk" data.bin images=images.npy labels=labels.npy > /dev/null
  tol=3e-5 ;;
esac
"$cc" "$src/models/$model.model" $config --set batch=4 -o train-one 2> /dev/null
machine="--gpu cpu"
[ -n "${CLUSTER:-}" ] && machine="--cluster $CLUSTER" # as run_mesh.sh: a node of more ranks
"$cc" "$src/models/$model.model" $config --set batch=4 --gpus "$np" $machine --dp "$dp" --tp "$tp" --pp "$pp" \
      --zero 0 --microbatch-size 1 --plan "$plan" "$@" --dump-plan \
      -o train-mesh > plan.txt
sed -n '4,5p' plan.txt
args="--data data.bin --steps 5 --threads 1 --eps 1e-6 --lr 1e-3 --warmup 0"
./train-one $args --log one.jsonl --save one.safetensors > one.out
timeout 600 $mpirun -np "$np" ./train-mesh $args --log many.jsonl --save many.safetensors > many.out
head -3 many.out
"$py" "$src/tests/multirank/compare_runs.py" ${skip:+--skip "$skip"} $tol one.jsonl many.jsonl one.safetensors \
  many.safetensors
"$py" "$src/tests/multirank/check_memory.py" many.jsonl
