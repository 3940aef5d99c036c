#!/bin/sh
# A NaN written into one gradient of step 3 (COLOSSALC_FAULT_NAN=3:RANK, before the norm
# reads it) on NP ranks of PROGRAM: step 3 says it skipped its update, and its --log
# record too; the parameters after 3 steps equal those after 2, bit for bit (the update
# was skipped, not applied); 6 steps go on with finite norms and finite parameters.
# Usage: run_nan.sh WORKDIR "MPIRUN" NP PROGRAM RANK
set -eu
work=$1 mpirun=$2 np=$3 prog=$4 rank=$5
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
run=$work/nan-$prog-rank$rank && rm -rf "$run" && mkdir -p "$run" && cd "$run"
train() {
  if [ "$np" = 1 ]; then "$work/$prog" --data "$work/genesis.bin" --threads 1 "$@"
  else $mpirun -np "$np" "$work/$prog" --data "$work/genesis.bin" --threads 1 "$@"; fi
}
train --steps 2 --save two.safetensors > two.out
COLOSSALC_FAULT_NAN=3:$rank train --steps 3 --save three.safetensors --log three.jsonl > three.out 2> three.err
cat three.out three.err
grep -q "^train: test fault (COLOSSALC_FAULT_NAN): a NaN in a gradient at step 3 on rank $rank$" three.err ||
  fail "no NaN was written on rank $rank"
grep -q '^step 3/3 .*| norm nan .*| skipped: non-finite gradient norm (bad step 1 in a row, 1 in all)$' three.out ||
  fail "step 3 does not say it skipped its update"
grep -q '^{"step": 3, .*"grad_norm": null.*"skipped": true, "bad_steps_in_a_row": 1[,}]' three.jsonl ||
  fail "the --log record of step 3 does not say it was skipped"
cmp two.safetensors three.safetensors || fail "the parameters after the skipped step 3 differ from step 2's"
COLOSSALC_FAULT_NAN=3:$rank train --steps 6 --save six.safetensors > six.out 2> six.err
[ "$(grep -c 'skipped' six.out)" -eq 1 ] || fail "not only step 3 was skipped"
grep -q '^step 6/6 | loss [0-9.]* | .* | norm [0-9.]* |' six.out || fail "step 6 is not finite"
/usr/bin/python3 "$here/finite.py" six.safetensors
echo "a NaN in a gradient of step 3 on rank $rank of $np ($prog): skipped, reported, parameters finite"
