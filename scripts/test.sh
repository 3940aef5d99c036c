#!/usr/bin/env bash
# The whole test suite, as CI runs it: install what is missing; build with warnings as
# errors and run every CTest test; build again with AddressSanitizer and
# UndefinedBehaviorSanitizer and run them again; then fuzz the front end for a
# bounded time (FUZZ_SECONDS, default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)

echo "== build (warnings are errors)"
cmake -S . -B build -DCOLOSSALC_WERROR=ON > /dev/null
cmake --build build -j"$jobs"
echo "== tests"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== build with ASan+UBSan"
cmake -S . -B build-asan -DCOLOSSALC_WERROR=ON -DCOLOSSALC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug > /dev/null
cmake --build build-asan -j"$jobs"
echo "== tests under ASan+UBSan"
ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== fuzzing the front end for ${FUZZ_SECONDS:-60} s"
scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
