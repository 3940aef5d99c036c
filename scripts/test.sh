#!/usr/bin/env bash
# The whole test suite, as CI runs it: install what is missing; check that the C
# sources follow .clang-format (scripts/format.sh); build with warnings as errors and
# run every CTest test; build again with AddressSanitizer and UndefinedBehaviorSanitizer
# and run the fast tier and each area's sample (label sanitize, tests/labels.cmake says
# why) under them; then fuzz what colossalc and train read (scripts/fuzz.sh) for a
# bounded time (FUZZ_SECONDS, default 30, for each of the three fuzz targets).
# With --fast: install what is missing, build with warnings as errors, and run only the
# fast tier (ctest -L fast: tests/labels.cmake says what the labels mean), a few minutes.
# Either way it ends with the time it took.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
case "${1-}" in
  --fast) fast=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--fast]" >&2; exit 2 ;;
esac
# the time this run took, as its last line (after a failure too)
print_duration() { awk -v s="$SECONDS" 'BEGIN { printf "scripts/test.sh: %.1f minutes\n", s / 60 }'; }
trap print_duration EXIT
scripts/setup.sh
jobs=$(nproc)

if [ "$fast" = 0 ]; then
  echo "== format (.clang-format)"
  scripts/format.sh --check
fi

echo "== build (warnings are errors)"
cmake -S . -B build -DCOLOSSALC_WERROR=ON > /dev/null
cmake --build build -j"$jobs"
passed=0 skipped=0
# Runs ctest in DIR (with the ctest flags after it); on success adds its counts to
# $passed and $skipped (a test that needs a GPU skips itself on machines without one).
run_ctest() {
  local log total skip
  log=$(mktemp)
  ctest --test-dir "$1" --output-on-failure -j"$jobs" "${@:2}" | tee "$log"
  total=$(sed -n 's/.*tests passed, 0 tests failed out of \([0-9]*\).*/\1/p' "$log")
  skip=$(grep -c '\*\*\*Skipped' "$log" || true)
  passed=$((passed + total - skip))
  skipped=$((skipped + skip))
  rm -f "$log"
}

if [ "$fast" = 1 ]; then
  echo "== fast tests (ctest -L fast)"
  run_ctest build -L fast
  echo "summary: $passed passed, 0 failed, $skipped skipped"
  exit 0
fi

echo "== tests"
run_ctest build

echo "== build with ASan+UBSan"
cmake -S . -B build-asan -DCOLOSSALC_WERROR=ON -DCOLOSSALC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug > /dev/null
cmake --build build-asan -j"$jobs"
echo "== tests under ASan+UBSan"
# the tests that set ASAN_OPTIONS themselves start it with the same flag (CMakeLists.txt
# says why: LeakSanitizer's tracer and dlopen'ed libraries' thread-local storage)
export ASAN_OPTIONS=${ASAN_OPTIONS:-intercept_tls_get_addr=0}
run_ctest build-asan -L "^(fast|sanitize)$" -LE "^(slow|vendor)$"

echo "== fuzzing the readers for ${FUZZ_SECONDS:-30} s"
scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
echo "both CTest runs and the fuzz run:"
echo "summary: $((passed + 1)) passed, 0 failed, $skipped skipped"
