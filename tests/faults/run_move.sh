#!/bin/sh
# An offload move that fails on one rank at step 3 (COLOSSALC_FAULT_MOVE=3:RANK, test only,
# as a failed copy to or from the host would) ends the job within 30 s with that rank's
# message and a status other than 0, no rank left behind: the other ranks wait for the
# failed one in the step's messages (a pipeline) or collectives (ZeRO-3's chunks), so it
# ends the job itself, saying so (and which stage it is).
# Usage: run_move.sh WORKDIR "MPIRUN" PROGRAM RANK (train-pp2-off or train-dp2-off of build.sh)
set -eu
work=$1 mpirun=$2 prog=$3 rank=$4
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
TRAIN_NAME=$prog
run=$work/move-$prog-$rank && rm -rf "$run" && mkdir -p "$run" && cd "$run"
start=$(date +%s)
status=0
COLOSSALC_FAULT_MOVE=3:$rank timeout 120 $mpirun -np 2 "$work/$prog" --data "$work/genesis.bin" --steps 50 \
  --threads 1 > out 2> err || status=$?
took=$(($(date +%s) - start))
cat err | grep '^train' || true
left=$(live_pids)
for p in $left; do kill -9 "$p"; done
[ -z "$left" ] || fail "ranks still alive after the job ended: $left"
[ "$status" -ne 0 ] || fail "the job exited with status 0"
[ "$status" -ne 124 ] || fail "the job hung until the 120 s timeout"
[ "$took" -le 30 ] || fail "the job took $took s to end"
grep -q "test fault (COLOSSALC_FAULT_MOVE): a move failed at step 3 on rank $rank" err ||
  fail "no rank said the move failed"
stage=""
case $prog in *pp2*) stage=" (pipeline stage $rank)" ;; esac
grep -q "^train: rank $rank$stage: .*test fault.*; ending the job$" err || fail "the failed rank did not say it ends the job"
grep -q "^step 3/" out && fail "step 3 was reported done"
echo "a failed move on rank $rank of $prog at step 3 ended the job in $took s (status $status)"
