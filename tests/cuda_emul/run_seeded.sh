#!/bin/sh
# The emulation catches a bug of each kind seeded in a test kernel (seeded.c): a race on
# shared memory (a barrier left out), a race of a block's threads on global memory, a
# race between blocks, a write out of bounds (the process ends, naming the kernel), one
# past the end of its allocation not through the bounds check (the guard page), and
# launches a GPU refuses (2048 threads a block, no blocks); the same kernel with its
# barrier runs clean, with a GPU's values.
# Usage: run_seeded.sh SEEDED EMUL_LIB_DIR WORKDIR
set -u
seeded=$1 emul=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failed=0
# expect CASE EXIT_STATUS PATTERN: the case ends with the status (0, 1, abort's 134 or
# SIGSEGV's 139)
# and its output (stdout and stderr) matches the pattern
expect() {
  LD_LIBRARY_PATH=$emul "$seeded" "$1" > "$1.out" 2>&1
  status=$?
  if [ "$status" = "$2" ] && grep -q "$3" "$1.out"; then
    echo "ok   $1: $(grep "$3" "$1.out" | head -1)"
  else
    echo "FAIL $1: exit $status (expected $2), output:"
    cat "$1.out"
    failed=1
  fi
}
expect ok 0 "values: as on a GPU"
expect shared_race 1 "race in seed_shared_race: block 0 thread [0-9]* [a-z]* .* and block 0 thread [0-9]* [a-z]* it, with no barrier"
expect global_race 1 "race in seed_global_race: block 0 thread [0-9]* writes .* and block 0 thread [0-9]* writes it"
expect block_race 1 "race in seed_block_race: block 0 thread [0-9]* writes .* and block 1 thread [0-9]* writes it"
expect bounds 134 "out of bounds in seed_bounds: block 1 thread 63 writes element 128 of a buffer of 128"
expect past_end 139 "an illegal address .*, 0 bytes past the end of the allocation of 512 bytes"
expect too_many_threads 1 "launch: error 1 "
expect no_blocks 1 "launch: error 1 "
exit $failed
