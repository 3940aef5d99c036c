#!/bin/sh
# Builds the programs of the fault tests (tests/faults/tests.cmake) in WORKDIR: gpt2-tiny
# (2 layers, seq 32) for one rank (train-b2, and in bf16 and fp16 train-bf16, train-fp16), 2 data-parallel
# ranks (train-dp2), 2 with ZeRO-2 (train-dp2-zero2), 4 (train-dp4), 2 pipeline stages
# (train-pp2), dp2 x tp2 x pp2 on 4 layers (train-mesh8, Megatron's sharding), an
# offload program with state on NVMe (train-nvme), offload programs of 2 pipeline stages
# and of 2 data-parallel ranks with ZeRO-3 under a 12 MiB device (train-pp2-off, train-dp2-off: gpt2-tiny
# at d 256), and the token file of data/genesis.txt.
# Usage: build.sh COLOSSALC MKTOKENS SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 src=$3 work=$4
mkdir -p "$work" && cd "$work"
m="$src/models/gpt2-tiny.model"
tiny="--set layers=2 --set seq=32"
mesh() { "$cc" "$m" --gpu cpu --tp 1 "$@" 2> /dev/null; }
"$cc" "$m" $tiny --set batch=2 -o train-b2
"$cc" "$m" $tiny --set batch=2 --precision bf16 -o train-bf16
"$cc" "$m" $tiny --set batch=2 --precision fp16 -o train-fp16
mesh $tiny --set batch=4 --gpus 2 --dp 2 --pp 1 --microbatch-size 2 -o train-dp2
mesh $tiny --set batch=4 --gpus 2 --dp 2 --pp 1 --zero 2 --microbatch-size 2 -o train-dp2-zero2
mesh $tiny --set batch=8 --gpus 4 --dp 4 --pp 1 --microbatch-size 2 -o train-dp4
mesh $tiny --set batch=4 --gpus 2 --dp 1 --pp 2 --microbatch-size 1 -o train-pp2
"$cc" "$m" --set layers=4 --set seq=32 --set batch=4 --gpus 8 --gpu cpu --dp 2 --tp 2 --pp 2 --microbatch-size 1 \
  --plan "$src/tests/multirank/megatron-tiny.plan.json" -o train-mesh8 2> /dev/null
"$cc" "$m" --set batch=1 --set seq=16 --set d=256 --set layers=4 --device-memory 12M --host-memory 1M \
  -o train-nvme > /dev/null
off="--set seq=16 --set d=256 --set layers=4 --device-memory 12M --microbatch-size 1"
mesh $off --set batch=1 --gpus 2 --dp 1 --pp 2 -o train-pp2-off
mesh $off --set batch=2 --gpus 2 --dp 2 --pp 1 --zero 3 -o train-dp2-off
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
echo "built the fault tests' programs and genesis.bin in $work"
