#!/bin/sh
# SIGTERM (as Slurm and Kubernetes send it) during a step, on one rank and on 2 ranks
# under mpirun: the step finishes, a checkpoint of it is written, train says so and exits
# 0 without --save; resumed, the run ends with the uninterrupted run's parameters, bit for
# bit. SIGTERM to one of the 2 ranks stops both at the same step. Without --ckpt-dir:
# status 143 (SIGINT: 130) and a line saying that nothing could be saved. A second signal
# (SIGINT and SIGTERM delivered together to a stopped process) exits at once, with no
# line and no checkpoint of its own, and the last checkpoint of --ckpt-every resumes.
# Usage: run_sigterm.sh WORKDIR "MPIRUN"
set -eu
work=$1 mpirun=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
run=$work/sigterm && rm -rf "$run" && mkdir -p "$run" && cd "$run"
steps=300
args="--data $work/genesis.bin --steps $steps --threads 1"

# launch NP NAME [flags]: the program in the background, its pid in job
launch() {
  np=$1 name=$2
  shift 2
  if [ "$np" = 1 ]; then "$work/$prog" $args "$@" > "$name.out" 2> "$name.err" &
  else $mpirun -np "$np" "$work/$prog" $args "$@" > "$name.out" 2> "$name.err" & fi
  job=$!
}

# interrupt NP NAME SIGNAL RANKS [flags]: SIGNAL at a random step to the ranks named
interrupt() {
  np=$1 name=$2 sig=$3 ranks=$4
  shift 4
  launch "$np" "$name" "$@"
  wait_steps "$name.out" $((2 + $(random_below 20))) 120
  if [ "$np" = 1 ]; then kill -"$sig" $job
  else
    pids=""
    for r in $ranks; do pids="$pids $(rank_pids "$r")"; done
    [ "$(echo $pids | wc -w)" -eq "$(echo $ranks | wc -w)" ] || fail "$name: the processes of ranks $ranks not found"
    kill -"$sig" $pids
  fi
  wait_bounded $job 120
  cat "$name.err"
}

# saved NP TAG RANKS: a run interrupted by SIGTERM, checkpointed, resumed
saved() {
  np=$1 tag=$2 ranks=$3
  interrupt "$np" "$tag" TERM "$ranks" --ckpt-dir "ck-$tag" --save "$tag-part.safetensors"
  [ "$status" -eq 0 ] || fail "$tag: status $status after SIGTERM with --ckpt-dir"
  line=$(grep '^train: SIGTERM at step [0-9]*: checkpoint written to ck-'"$tag"', exiting$' "$tag.err") ||
    fail "$tag: no line saying the checkpoint was written"
  s=$(echo "$line" | sed 's/^train: SIGTERM at step \([0-9]*\).*/\1/')
  [ -f "ck-$tag/ckpt-$s/index.json" ] || fail "$tag: no ck-$tag/ckpt-$s"
  [ "$(cat "ck-$tag/latest")" = "ckpt-$s" ] || fail "$tag: ck-$tag/latest is not ckpt-$s"
  [ ! -e "$tag-part.safetensors" ] || fail "$tag: --save was done after SIGTERM"
  [ "$s" -lt "$steps" ] || fail "$tag: the run ended before the signal"
  [ "$(steps_done "$tag.out")" -eq "$s" ] || fail "$tag: steps after the checkpoint's"
  if [ "$np" = 1 ]; then "$work/$prog" $args --ckpt-dir "ck-$tag" --resume --save "$tag.safetensors" > "$tag-resumed.out"
  else $mpirun -np "$np" "$work/$prog" $args --ckpt-dir "ck-$tag" --resume --save "$tag.safetensors" > "$tag-resumed.out"; fi
  cmp "full-$prog.safetensors" "$tag.safetensors" || fail "$tag: the resumed run differs from the uninterrupted one"
  echo "$tag: SIGTERM at step $s, checkpoint, resumed: the parameters equal the uninterrupted run's"
}

# unsaved NP TAG SIGNAL STATUS: no --ckpt-dir
unsaved() {
  interrupt "$1" "$2" "$3" "0 1"
  [ "$status" -eq "$4" ] || fail "$2: status $status after SIG$3 without --ckpt-dir, not $4"
  grep -q "^train: SIG$3 at step [0-9]*: nothing could be saved (no --ckpt-dir), exiting$" "$2.err" ||
    fail "$2: no line saying that nothing could be saved"
  echo "$2: SIG$3 without --ckpt-dir: status $status"
}

prog=train-b2 TRAIN_NAME=$prog
"$work/$prog" $args --save "full-$prog.safetensors" > "full-$prog.out"
saved 1 one ""
unsaved 1 one-nockpt TERM 143
unsaved 1 one-int INT 130

# SIGINT then SIGTERM, pending together while the process is stopped
prog=train-b2
launch 1 twice --ckpt-dir ck-twice --ckpt-every 5
wait_steps twice.out $((7 + $(random_below 20))) 120
kill -STOP $job
kill -INT $job
kill -TERM $job
kill -CONT $job
wait_bounded $job 60
cat twice.err
[ "$status" -eq 143 ] || [ "$status" -eq 130 ] || fail "twice: status $status after two signals"
if grep 'train: SIG' twice.err; then fail "twice: the second signal did not end train at once"; fi
latest=$(cat ck-twice/latest)
"$work/$prog" $args --ckpt-dir ck-twice --resume --save twice.safetensors > twice-resumed.out
grep -q "^resumed from ck-twice at step" twice-resumed.out || fail "twice: $latest did not resume"
cmp "full-$prog.safetensors" twice.safetensors || fail "twice: the resumed run differs from the uninterrupted one"
echo "twice: two signals ended train at once (status $status); $latest resumed to the uninterrupted run's parameters"

prog=train-dp2 TRAIN_NAME=$prog
$mpirun -np 2 "$work/$prog" $args --save "full-$prog.safetensors" > "full-$prog.out"
saved 2 two "0 1"
saved 2 two-rank1 "1"
unsaved 2 two-nockpt TERM 143
