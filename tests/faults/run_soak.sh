#!/bin/sh
# A soak: 2,000 steps of gpt2-tiny (2 layers, seq 32) on 4 data-parallel ranks with a
# checkpoint every 100 steps, killed three times (kill -9 of a random rank at a random
# moment of what is left of the run) and resumed each time by this driver (--resume from what `latest` names, or
# from the start when no checkpoint was made yet), ends with the parameters of the
# uninterrupted run, bit for bit (the --save files compare equal).
# Usage: run_soak.sh COLOSSALC MKTOKENS SRCDIR WORKDIR "MPIRUN" [STEPS [EVERY]]
set -eu
cc=$1 mk=$2 src=$3 work=$4/soak mpirun=$5 steps=${6:-2000} every=${7:-100}
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$cc" "$src/models/gpt2-tiny.model" --set layers=2 --set seq=32 --set batch=8 --gpus 4 --gpu cpu --dp 4 --tp 1 \
  --pp 1 --microbatch-size 2 -o soak-dp4 2> /dev/null
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
args="--data genesis.bin --threads 1 --steps $steps --ckpt-every $every --keep-ckpts 3"
start=$(date +%s)
timeout 1200 $mpirun -np 4 ./soak-dp4 $args --ckpt-dir full --save full.safetensors > full.out 2>&1 ||
  { tail full.out; echo "FAIL: the uninterrupted run"; exit 1; }
took=$(($(date +%s) - start))
echo "uninterrupted: $steps steps in $took s"
seed=$$
for kill in 1 2 3; do
  resume=""
  [ -f ck/latest ] && resume=--resume
  timeout 1200 $mpirun -np 4 ./soak-dp4 $args --ckpt-dir ck $resume --save soak.safetensors > run$kill.out 2>&1 &
  job=$!
  done_steps=0
  [ -f ck/latest ] && done_steps=$(sed 's/ckpt-//' ck/latest)
  # a moment inside the run: 20% to 80% of what is left of it
  wait_s=$(awk -v t="$took" -v s="$seed" -v k="$kill" -v left=$((steps - done_steps)) -v n="$steps" \
    'BEGIN { srand(s + k); printf "%.1f", t * left / n * (0.2 + 0.6 * rand()) }')
  sleep "$wait_s"
  pids=$(pgrep -x soak-dp4 || true)
  [ -n "$pids" ] || { wait $job || true; tail run$kill.out; echo "FAIL: the run ended before the kill"; exit 1; }
  victim=$(echo "$pids" | awk -v s="$seed" -v k="$kill" 'BEGIN { srand(s * 3 + k) } { p[NR] = $1 } END { print p[int(rand() * NR) + 1] }')
  kill -9 "$victim"
  t0=$(date +%s)
  if wait $job; then echo "FAIL: the job survived kill -9 of a rank"; exit 1; fi
  while [ -n "$(pgrep -x soak-dp4 || true)" ] && [ $(($(date +%s) - t0)) -le 30 ]; do sleep 0.2; done
  gone=$(($(date +%s) - t0))
  [ -z "$(pgrep -x soak-dp4 || true)" ] || { echo "FAIL: ranks left 30 s after a rank died"; exit 1; }
  echo "kill $kill: rank pid $victim killed after $wait_s s (latest: $(cat ck/latest 2> /dev/null || echo none)); the job ended in $gone s"
done
resume=""
[ -f ck/latest ] && resume=--resume
timeout 1200 $mpirun -np 4 ./soak-dp4 $args --ckpt-dir ck $resume --save soak.safetensors > final.out 2>&1 ||
  { tail final.out; echo "FAIL: the last resume"; exit 1; }
grep "resumed from" final.out || true
cmp full.safetensors soak.safetensors || { echo "FAIL: the soak's parameters differ from the uninterrupted run's"; exit 1; }
echo "ok: after three kills and resumes the parameters equal the uninterrupted run's bit for bit"
