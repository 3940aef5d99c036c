#!/bin/sh
# The numerical stops, on one rank and on 2 with ZeRO-2 (COLOSSALC_FAULT_NAN as in
# run_nan.sh): --on-nan stop checkpoints the last good state at the bad step and stops
# with status 1 and a line naming the step; the checkpoint resumes. --max-bad-steps 2 stops
# at the second of NaN steps 3-6; the default (10) skips three bad steps in a row and goes
# on; a bad --on-nan value is refused. fp16's overflow skips are not bad steps.
# Usage: run_nan_stop.sh WORKDIR "MPIRUN"
set -eu
work=$1 mpirun=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
run=$work/nan-stop && rm -rf "$run" && mkdir -p "$run" && cd "$run"
train() {
  if [ "$np" = 1 ]; then "$work/$prog" --data "$work/genesis.bin" --threads 1 "$@"
  else $mpirun -np "$np" "$work/$prog" --data "$work/genesis.bin" --threads 1 "$@"; fi
}
# expect STATUS NAME: the status of the last command (set +e around it)
for case in "1 train-b2" "2 train-dp2-zero2"; do
  np=${case%% *} prog=${case#* }
  st=0
  COLOSSALC_FAULT_NAN=3 train --steps 6 --on-nan stop --ckpt-dir "ck-$prog" --save "x-$prog.safetensors" \
    > "stop-$prog.out" 2> "stop-$prog.err" || st=$?
  cat "stop-$prog.err"
  [ "$st" -eq 1 ] || fail "$prog --on-nan stop: status $st, not 1"
  grep -q "^train: step 3: non-finite gradient norm (--on-nan stop): its update was skipped; the last good state (2 updates) is in ck-$prog/ckpt-3; stopping$" "stop-$prog.err" ||
    fail "$prog --on-nan stop: no line naming step 3 and its checkpoint"
  [ -f "ck-$prog/ckpt-3/index.json" ] || fail "$prog: no checkpoint of step 3"
  [ ! -e "x-$prog.safetensors" ] || fail "$prog: --save was done after a numerical stop"
  [ "$(steps_done "stop-$prog.out")" -eq 3 ] || fail "$prog: steps after the stop"
  train --steps 6 --ckpt-dir "ck-$prog" --resume --save "resumed-$prog.safetensors" > "resumed-$prog.out"
  grep -q "^resumed from ck-$prog at step 3$" "resumed-$prog.out" || fail "$prog: not resumed at step 3"
  /usr/bin/python3 "$here/finite.py" "resumed-$prog.safetensors"

  st=0
  COLOSSALC_FAULT_NAN=3-6 train --steps 8 --max-bad-steps 2 > "many-$prog.out" 2> "many-$prog.err" || st=$?
  cat "many-$prog.err"
  [ "$st" -eq 1 ] || fail "$prog --max-bad-steps 2: status $st, not 1"
  grep -q '^train: steps 3-4: 2 consecutive steps with a non-finite loss or gradient norm (--max-bad-steps 2): their updates were skipped; no --ckpt-dir: nothing saved; stopping$' "many-$prog.err" ||
    fail "$prog --max-bad-steps 2: no line naming steps 3-4"
  [ "$(steps_done "many-$prog.out")" -eq 4 ] || fail "$prog --max-bad-steps 2: did not stop at step 4"

  COLOSSALC_FAULT_NAN=3-5 train --steps 8 --save "skip-$prog.safetensors" > "skip-$prog.out" 2> "skip-$prog.err"
  [ "$(grep -c '| skipped: non-finite gradient norm' "skip-$prog.out")" -eq 3 ] || fail "$prog: not 3 steps skipped"
  grep -q '^step 5/8 .*(bad step 3 in a row, 3 in all)$' "skip-$prog.out" || fail "$prog: step 5 is not the third bad step"
  grep -q '^step 8/8 | loss [0-9.]* | .* | norm [0-9.]* |' "skip-$prog.out" || fail "$prog: step 8 is not finite"
  /usr/bin/python3 "$here/finite.py" "skip-$prog.safetensors"
  echo "$prog on $np rank(s): --on-nan stop, --max-bad-steps 2 and the default behave"
done
# fp16: a NaN gradient with a finite loss is an overflow of the loss scale, skipped and
# backed off as ever, and not a bad step (neither --on-nan stop nor --max-bad-steps 1 stop)
np=1 prog=train-fp16
COLOSSALC_FAULT_NAN=3 train --steps 5 --on-nan stop --max-bad-steps 1 --loss-scale 1024 > fp16.out 2> fp16.err
grep -q '^step 3/5 .*| skipped: inf/NaN gradient at loss scale 1024, now 512$' fp16.out ||
  fail "fp16: step 3 is not an overflow skip"
[ "$(steps_done fp16.out)" -eq 5 ] || fail "fp16: an overflow skip stopped the run"
echo "fp16: a NaN gradient is a loss-scale overflow, not a bad step"
st=0
"$work/train-b2" --data "$work/genesis.bin" --on-nan panic > bad.out 2> bad.err || st=$?
[ "$st" -eq 1 ] && grep -q "^train: --on-nan: expected skip or stop, got 'panic'$" bad.err || fail "--on-nan panic accepted"
