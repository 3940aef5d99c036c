#!/usr/bin/env bash
# Fuzzes the front end: builds tests/fuzz/fuzz_frontend with clang, libFuzzer, ASan
# and UBSan in build-fuzz/ (all of colossalc_core instrumented for coverage), seeds a
# corpus from models/, tests/bad/, tests/golden/ and tests/fuzz/seeds/, and runs for
# SECONDS (default 60). Exits non-zero on any finding (crash, hang, leak, undefined
# behaviour, out of memory); the reproducer is left in .fuzz-corpus/findings/. The
# corpus grows in .fuzz-corpus/work/ from run to run; none of it is committed.
#
#   scripts/fuzz.sh [SECONDS]
#   build-fuzz/fuzz_frontend .fuzz-corpus/findings/crash-...   # replay a finding
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
root=.fuzz-corpus

echo "fuzz: building build-fuzz/fuzz_frontend"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCOLOSSALC_SANITIZE=ON -DCOLOSSALC_FUZZ=ON \
      -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link > /dev/null
cmake --build build-fuzz --target fuzz_frontend -j"$(nproc)" > build-fuzz/fuzz-build.log 2>&1 ||
  { tail -40 build-fuzz/fuzz-build.log; exit 1; }

rm -rf "$root/seed"
mkdir -p "$root/seed" "$root/work" "$root/findings"
cp models/*.model tests/bad/*.model tests/golden/*.ir tests/fuzz/seeds/* "$root/seed/"

echo "fuzz: running for $secs s"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
if ! build-fuzz/fuzz_frontend "$root/work" "$root/seed" -dict=tests/fuzz/model.dict \
       -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$root/findings/" -print_final_stats=1; then
  echo "fuzz: FINDING; reproducer in $root/findings/:" >&2
  ls -t "$root/findings" | head -5 >&2
  exit 1
fi
echo "fuzz: no finding in $secs s"
