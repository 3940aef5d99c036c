#!/bin/sh
# Recompute changes memory, never values: gpt2-tiny compiled with --recompute none,
# full, selective and auto (a budget between), 3 steps each; the logged losses and the
# saved parameters must be bit-identical to the run without recompute. With MPIRUN
# (the launcher and its flags, one word list), also a tensor-parallel (tp 2) and a
# pipeline (pp 2) plan, each with --recompute full against --recompute none.
# Usage: run_recompute.sh COLOSSALC MKTOKENS SRCDIR WORKDIR [MPIRUN]
set -eu
cc=$1 mk=$2 src=$3 work=$4 mpirun=${5:-}
mkdir -p "$work" && cd "$work"
rm -f ./*.jsonl ./*.safetensors
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
pass=0 fail=0
for rc in none full selective auto; do
  extra=""
  [ "$rc" = auto ] && extra="--activation-memory 6M"
  # shellcheck disable=SC2086
  "$cc" "$src/models/gpt2-tiny.model" --recompute $rc $extra -o "train_$rc"
  "./train_$rc" --data genesis.bin --steps 3 --threads 2 --log "$rc.jsonl" --save "$rc.safetensors" > /dev/null
  [ "$rc" = none ] && continue
  want=$(grep -o '"loss": *[^,]*' none.jsonl)
  got=$(grep -o '"loss": *[^,]*' "$rc.jsonl")
  echo "$rc: $got" | tr '\n' ' '; echo
  if [ "$want" = "$got" ] && cmp none.safetensors "$rc.safetensors"; then pass=$((pass + 1))
  else echo "FAIL --recompute $rc: losses or parameters differ from --recompute none"; fail=$((fail + 1)); fi
done
for mesh in tp pp; do
  [ -n "$mpirun" ] || break
  for rc in none full; do
    "$cc" "$src/models/gpt2-tiny.model" --gpus 2 --$mesh 2 --recompute $rc -o "train_${mesh}_$rc" 2> /dev/null
    # shellcheck disable=SC2086
    $mpirun -np 2 "./train_${mesh}_$rc" --data genesis.bin --steps 3 --threads 1 --log "${mesh}_$rc.jsonl" \
      --save "${mesh}_$rc.safetensors" > /dev/null
  done
  want=$(grep -o '"loss": *[^,]*' "${mesh}_none.jsonl")
  got=$(grep -o '"loss": *[^,]*' "${mesh}_full.jsonl")
  echo "$mesh=2 full: $got" | tr '\n' ' '; echo
  if [ "$want" = "$got" ] && cmp "${mesh}_none.safetensors" "${mesh}_full.safetensors"; then pass=$((pass + 1))
  else echo "FAIL --$mesh 2 --recompute full: losses or parameters differ"; fail=$((fail + 1)); fi
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
