#!/bin/sh
# The emulated NCCL ends seeded schedules as NCCL would (seeded_nccl.c): a deadlock (two
# ranks each sending first, outside a group; a collective one rank leaves out) is
# reported after the timeout, naming the operation, and ends the job; a send that meets a
# receive of another size is an error at once; the correct forms (a group, a send on a
# stream of its own) complete with the peer's values, and the collectives give NCCL's.
# Usage: run_seeded_nccl.sh SEEDED_NCCL EMUL_LIB_DIR WORKDIR   (MPIRUN: the launcher)
set -u
seeded=$1 emul=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failed=0
# expect CASE OK PATTERN: the job succeeds (OK 0) or fails (1), its output matching PATTERN
expect() {
  COLOSSALC_EMUL_NCCL_TIMEOUT=3 LD_LIBRARY_PATH=$emul timeout 120 $MPIRUN -np 2 "$seeded" "$1" > "$1.out" 2>&1
  status=$?
  ok=1
  [ "$status" = 0 ] && ok=0
  if [ "$ok" = "$2" ] && grep -q "$3" "$1.out"; then
    echo "ok   $1: $(grep "$3" "$1.out" | head -1)"
  else
    echo "FAIL $1: exit $status, output:"
    cat "$1.out"
    failed=1
  fi
}
expect exchange_group 0 "rank 1: received rank 0's 300000 values"
expect two_streams 0 "rank 0: received rank 1's 300000 values"
expect collectives 0 "rank 1: every collective's values as NCCL's"
expect exchange 1 "ncclSend (1200000 bytes to rank [01]) has waited 3 s for rank [01]'s receive: a deadlock"
expect mismatch 1 "rank 0 of 2: ncclSend of 16 bytes to rank 1 met a receive of 32 bytes there"
expect missing 1 "rank 0 of 2: ncclAllReduce (64 bytes from rank 1) has waited 3 s for rank 1's send: a deadlock"
exit $failed
