#!/bin/sh
# A rank stopped with SIGSTOP at a random step of a run of NP ranks with
# --collective-timeout 5 ends the job within the timeout and 20 s: the job's status is not
# 0, no rank is left (the stopped one included), a survivor's line names the rank, its
# step and the timeout, and no line names another rank or calls it dead.
# Usage: run_stop.sh WORKDIR "MPIRUN" NP PROGRAM (a program of build.sh)
set -eu
work=$1 mpirun=$2 np=$3 prog=$4
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
TRAIN_NAME=$prog
run=$work/stop-$prog && rm -rf "$run" && mkdir -p "$run" && cd "$run"
victim=$(random_below "$np") at=$((3 + $(random_below 20)))
$mpirun -np "$np" "$work/$prog" --data "$work/genesis.bin" --steps 1000000 --threads 1 --collective-timeout 5 \
  --log log.jsonl > out 2> err &
job=$!
wait_steps out "$at" 300
pid=$(rank_pids "$victim")
[ -n "$pid" ] || fail "no process of rank $victim"
seen=$(steps_done out)
kill -STOP $pid
wait_bounded $job 25
last=$(steps_logged log.jsonl)
cat err
left=$(live_pids)
for p in $left; do kill -9 "$p"; done
[ -z "$left" ] || fail "ranks still alive after the job ended: $left"
[ "$status" -ne 0 ] || fail "the job exited with status 0"
want="^train: rank $victim stalled at step [0-9]*: no progress for 5 s (--collective-timeout)$"
line=$(grep -m1 "$want" err) || fail "no line '$want'"
s=$(echo "$line" | sed 's/^train: rank [0-9]* stalled at step \([0-9]*\).*/\1/')
[ "$s" -ge "$seen" ] && [ "$s" -le $((last + 1)) ] ||
  fail "rank $victim was stopped after rank 0 printed step $seen (its last logged: $last); the message says step $s"
# the others may have seen the stopped rank killed by the launcher after the first line: a
# stall too, of less than the timeout
if grep 'stalled at step\|died at step' err | grep -v "^train: rank $victim stalled"; then fail "another rank named"; fi
echo "rank $victim of $np stopped after step $seen: '$line'; the job ended in ${waited} s (status $status)"
