#!/bin/sh
# train --profile: gpt2-tiny (2 layers, seq 32, batch 8) on 2 pipeline stages in 4
# micro-batches under mpirun prints one line a rank of where its steps went, and logs
# the same (check_profile.py): every rank computed (GEMMs and kernels), stage 0 sent
# activations and received gradients, stage 1 received, the instructions' times add up
# to no more than the step, each stage's planned compute is the plan's (--plan-out), and
# 1F1B's bubble shows as the ranks' waiting. One rank
# run for a single step has no step after the first to profile, and says so.
# Usage: run_profile.sh COLOSSALC WORKDIR PYTHON SRCDIR "MPIRUN"
set -eu
cc=$1 work=$2 py=$3 src=$4 mpirun=$5
run=$work/profile && rm -rf "$run" && mkdir -p "$run" && cd "$run"
"$cc" "$src/models/gpt2-tiny.model" --set layers=2 --set seq=32 --set batch=8 --gpus 2 --gpu cpu \
      --dp 1 --tp 1 --pp 2 --schedule 1f1b --microbatch-size 2 --dump-plan=json --plan-out plan.json -o train-pp > /dev/null
# 15 steps profiled: a rank's step is held to rank 0's logged ones within a fifth, and
# steps of 10 ms under the sanitizers vary by more than that over 5
timeout 300 $mpirun -np 2 ./train-pp --data "$work/genesis.bin" --steps 16 --profile --log pp.jsonl > pp.out
"$py" "$src/tests/multirank/check_profile.py" pp.out pp.jsonl 15 2 plan.json
"$work/train-b4" --data "$work/genesis.bin" --steps 1 --threads 1 --profile > one.out 2> one.err
grep -q "no step after the first ran" one.err || { cat one.out one.err; exit 1; }
! grep -q '^profile:' one.out
echo "one step: $(cat one.err)"
