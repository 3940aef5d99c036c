#!/bin/sh
# A rank killed with SIGKILL at a random step of a run of NP ranks ends the job: every
# rank is gone within 30 s, the job's status is not 0, and the survivors' line names
# the rank and the step it died in (between the steps rank 0 had printed when it was
# killed and the step after the last rank 0 logged), and no other rank.
# Usage: run_kill.sh WORKDIR "MPIRUN" NP PROGRAM (a program of build.sh)
set -eu
work=$1 mpirun=$2 np=$3 prog=$4
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
TRAIN_NAME=$prog
run=$work/kill-$prog && rm -rf "$run" && mkdir -p "$run" && cd "$run"
victim=$(random_below "$np") at=$((3 + $(random_below 20)))
$mpirun -np "$np" "$work/$prog" --data "$work/genesis.bin" --steps 1000000 --threads 1 --log log.jsonl > out 2> err &
job=$!
wait_steps out "$at" 300
pid=$(rank_pids "$victim")
[ -n "$pid" ] || fail "no process of rank $victim"
seen=$(steps_done out)
kill -9 $pid
wait_bounded $job 30
last=$(steps_logged log.jsonl)
cat err
[ "$status" -ne 0 ] || fail "the job exited with status 0"
[ -z "$(live_pids)" ] || fail "ranks still alive: $(live_pids)"
line=$(grep -m1 '^train: rank [0-9]* died at step [0-9]*; stopping$' err) || fail "no rank said which rank died"
r=$(echo "$line" | sed 's/^train: rank \([0-9]*\) died at step \([0-9]*\).*/\1/')
s=$(echo "$line" | sed 's/^train: rank \([0-9]*\) died at step \([0-9]*\).*/\2/')
[ "$r" -eq "$victim" ] || fail "rank $victim was killed, the message names rank $r"
[ "$s" -ge "$seen" ] && [ "$s" -le $((last + 1)) ] ||
  fail "rank $victim was killed after rank 0 printed step $seen (its last logged: $last); the message says step $s"
if grep 'died at step' err | grep -v "^train: rank $victim died at step $s; stopping$"; then
  fail "another rank or step named"
fi
echo "rank $victim of $np killed after step $seen: '$line'; every rank gone in ${waited} s (status $status)"
