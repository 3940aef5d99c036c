#!/bin/sh
# Resharding: a checkpoint written by one plan resumes under others. gpt2-tiny widened
# to d 256 and a vocabulary of 8,192 (4 layers, seq 16, global batch 2), compiled as one
# rank (one), dp 2 x tp 2 with Megatron's sharding (dp2tp2), 2 pipeline stages of 2
# interleaved chunks each (pp2i), ZeRO-3 over 2 ranks with the state offloaded to the
# host (z3off, each rank holding only its own chunks), and ZeRO-3 over 2 ranks in device
# memory (z3), whose token embedding (40 % of the model) is dealt in two pieces, one to
# each rank (codegen/zero.h). Each plan trains 3 steps and checkpoints; each checkpoint
# resumes under two or three other plans for steps 4-6. Every resumed run's losses
# and final parameters equal the uninterrupted one-rank run's to a relative 1e-5, the
# tolerance of the mesh tests (tests/multirank/run_mesh.sh), and every checkpoint merged
# into one file (colossalc-export --merge) holds the same tensor names. A resumed copy is
# removed once checked.
# Usage: run_reshard.sh COLOSSALC MKTOKENS EXPORT WORKDIR PYTHON SRCDIR "MPIRUN"
set -eu
cc=$1 mk=$2 export=$3 work=$4/reshard py=$5 src=$6 mpirun=$7
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
m="$src/models/gpt2-tiny.model"
cfg="--set seq=16 --set d=256 --set layers=4 --set batch=2 --set vocab=8192"
plan="--gpu cpu --microbatch-size 1"
"$cc" "$m" $cfg -o one 2> /dev/null
"$cc" "$m" $cfg $plan --gpus 4 --dp 2 --tp 2 --pp 1 --plan "$src/tests/multirank/megatron-tiny.plan.json" \
  -o dp2tp2 2> /dev/null
"$cc" "$m" $cfg $plan --gpus 2 --dp 1 --tp 1 --pp 2 --schedule interleaved --virtual-stages 2 -o pp2i 2> /dev/null
"$cc" "$m" $cfg $plan --gpus 2 --dp 2 --tp 1 --pp 1 --zero 3 --device-memory 52M -o z3off 2> /dev/null
"$cc" "$m" $cfg $plan --gpus 2 --dp 2 --tp 1 --pp 1 --zero 3 -o z3 2> /dev/null
./z3 --dump-program | grep -q 'name="wte.weight".* start=[1-9]' || { echo "FAIL: z3 holds no parameter in pieces"; exit 1; }
ranks() { case $1 in one) echo 1 ;; dp2tp2) echo 4 ;; *) echo 2 ;; esac; }
run() { # PLAN ARGS...
  p=$1
  shift
  if [ "$p" = one ]; then ./one "$@"; else timeout 600 $mpirun -np "$(ranks "$p")" "./$p" "$@"; fi
}
args="--data genesis.bin --threads 1 --eps 1e-6"
./one $args --steps 6 --log ref.jsonl --save ref.safetensors > ref.out
for src_plan in dp2tp2 pp2i z3off z3 one; do
  run $src_plan $args --steps 3 --ckpt-dir ck-$src_plan > w-$src_plan.out 2>&1 || { tail w-$src_plan.out; exit 1; }
  "$export" --merge ck-$src_plan/ckpt-3 m-$src_plan.safetensors > /dev/null
  case $src_plan in
    dp2tp2) to="pp2i z3off" ;; pp2i) to="one dp2tp2 z3" ;; z3off) to="one z3" ;; z3) to="one dp2tp2" ;;
    one) to="dp2tp2 z3off" ;;
  esac
  for dst in $to; do
    d=$src_plan-to-$dst
    cp -r ck-$src_plan ck-$d
    run $dst $args --steps 6 --ckpt-dir ck-$d --resume --log $d.jsonl --save $d.safetensors > $d.out 2>&1 ||
      { tail $d.out; exit 1; }
    grep -q "resumed from ck-$d at step 3" $d.out || { tail $d.out; echo "FAIL: $d did not resume"; exit 1; }
    "$py" "$src/tests/multirank/compare_runs.py" --last 3 1e-5 ref.jsonl $d.jsonl ref.safetensors $d.safetensors \
      > $d.cmp || { cat $d.cmp; echo "FAIL: $d differs from one rank"; exit 1; }
    echo "ok: $(ranks $src_plan)-rank $src_plan checkpoint resumed by $(ranks $dst)-rank $dst: $(tail -1 $d.cmp)"
    rm -rf ck-$d # checked: 120 MB each, 2 GB in all if kept (a failed case keeps its own)
  done
done
"$py" - m-one.safetensors m-dp2tp2.safetensors m-pp2i.safetensors m-z3off.safetensors m-z3.safetensors << 'PY'
import json, struct, sys
def names(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return sorted(k for k in json.loads(f.read(n)) if k != "__metadata__")
ref = names(sys.argv[1])
for p in sys.argv[2:]:
    assert names(p) == ref, p + ": other tensors than " + sys.argv[1]
print("ok: the five plans' checkpoints hold the same %d tensors" % len(ref))
PY
