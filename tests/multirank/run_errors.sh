#!/bin/sh
# Errors under mpirun end every rank with status 1, without hanging (each run has 120
# s), with the message printed once: a bad flag on every rank, a bad flag on one rank
# only and a missing data file on one rank only (two app contexts, A : B), and a
# token outside the vocabulary in rank 1's rows of step 2 (after a step of training).
# Usage: run_errors.sh WORKDIR "MPIRUN"
set -eu
work=$1 mpirun=$2
run=$work/errors
rm -rf "$run" && mkdir -p "$run" && cd "$run"
t="$work/train-b2" data="--data $work/genesis.bin --steps 2 --threads 1"
passed=0 failed=0
# expect NAME MESSAGE -- MPIRUN-ARGS...: status 1 and MESSAGE exactly once on stderr
expect() {
  name=$1 msg=$2; shift 3
  status=0
  timeout 120 $mpirun "$@" > out.txt 2> err.txt || status=$?
  n=$(grep -c -F "train: $msg" err.txt || true)
  if [ "$status" -eq 1 ] && [ "$n" -eq 1 ]; then
    passed=$((passed + 1)); echo "$name: exit 1, message once: ok"
  else
    failed=$((failed + 1)); echo "$name: FAIL (status $status, message $n times)"; cat err.txt
  fi
}
expect bad_flag_all "--zero: the ZeRO stage is part of the plan" -- -np 2 "$t" $data --zero 2
expect bad_flag_one "unknown flag '--bogus'" -- -np 1 "$t" $data : -np 1 "$t" $data --bogus
expect missing_data_one "nothere.bin: cannot open" -- -np 1 "$t" $data : -np 1 "$t" --data nothere.bin --steps 2
# token 300 at position 200: step 1 (from 0) reads [128, 257); rank 1 has [192, 256)
cp "$work/genesis.bin" bad.bin
printf '\054\001' | dd of=bad.bin bs=1 seek=$((1024 + 2 * 200)) conv=notrunc 2> /dev/null
expect bad_token_rank1 "bad.bin: input tokens: 300 in batch 1 (row 2, position 8) is outside [0, 256)" \
  -- -np 2 "$t" --data bad.bin --steps 3 --threads 1
grep -q '^step 1/3' out.txt || { failed=$((failed + 1)); echo "bad_token_rank1: step 1 missing"; }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
