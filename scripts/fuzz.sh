#!/usr/bin/env bash
# Fuzzes what colossalc and train read from users: builds tests/fuzz/fuzz_frontend (the
# model language and IR text), tests/fuzz/fuzz_onnx (ONNX files) and
# tests/fuzz/fuzz_files (train's safetensors, transformers index, token and record
# files) with clang, libFuzzer, ASan and UBSan in build-fuzz/ (colossalc_core and
# colossalc_rt instrumented for coverage), seeds a corpus for each (models/, tests/bad/,
# tests/golden/ and tests/fuzz/seeds/; tests/fuzz/onnx/, tests/onnx/bad/,
# tests/onnx/models/ and 200 random graphs from tests/fuzz/gen_onnx.py;
# tests/fuzz/files/), and runs each for SECONDS (default 60), as many at once as the
# machine has cores (each libFuzzer process is one thread), each one's output in
# .fuzz-corpus/TARGET.log, its last lines printed when it ends.
# Exits non-zero on any finding (crash, hang, leak, undefined behaviour, out of
# memory); the reproducer is left in .fuzz-corpus/findings/. The corpora grow in
# .fuzz-corpus/work*/ from run to run; none of it is committed.
#
#   scripts/fuzz.sh [SECONDS [frontend|onnx|files]]   (all three unless one is named)
#   build-fuzz/fuzz_frontend .fuzz-corpus/findings/crash-...   # replay a finding
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
targets=${2:-frontend onnx files}
root=.fuzz-corpus

echo "fuzz: building build-fuzz/fuzz_frontend, fuzz_onnx and fuzz_files"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCOLOSSALC_SANITIZE=ON -DCOLOSSALC_FUZZ=ON \
      -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link > /dev/null
cmake --build build-fuzz --target fuzz_frontend fuzz_onnx fuzz_files -j"$(nproc)" > build-fuzz/fuzz-build.log 2>&1 ||
  { tail -40 build-fuzz/fuzz-build.log; exit 1; }

rm -rf "$root/seed" "$root/seed-onnx"
mkdir -p "$root/seed" "$root/seed-onnx" "$root/work" "$root/work-onnx" "$root/work-files" "$root/findings"
cp models/*.model tests/bad/*.model tests/golden/*.ir tests/fuzz/seeds/* "$root/seed/"
cp tests/fuzz/onnx/*.onnx tests/onnx/bad/*.onnx tests/onnx/models/*.onnx "$root/seed-onnx/"
# and random graphs of the supported ops, which reach the folds past protobuf decoding
/usr/bin/python3 tests/fuzz/gen_onnx.py "$root/seed-onnx" 200 "$RANDOM"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# One target's run, its output in its log; the status is libFuzzer's.
fuzz_one() {
  local t=$1 work seed extra
  case $t in
  frontend) work=$root/work seed=$root/seed extra="-dict=tests/fuzz/model.dict -max_len=4096" ;;
  onnx) work=$root/work-onnx seed=$root/seed-onnx extra="-dict=tests/fuzz/onnx.dict -max_len=32768" ;;
  files) work=$root/work-files seed=tests/fuzz/files extra="-dict=tests/fuzz/files.dict -max_len=8192" ;;
  esac
  build-fuzz/fuzz_"$t" "$work" "$seed" $extra -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$root/findings/" -print_final_stats=1 > "$root/$t.log" 2>&1
}
for t in $targets; do
  case $t in frontend | onnx | files) ;; *) echo "fuzz: unknown target $t (frontend, onnx or files)" >&2; exit 2 ;; esac
done
queue=($targets) failed=""
for ((at = 0; at < ${#queue[@]}; at += $(nproc))); do
  batch=("${queue[@]:at:$(nproc)}") pids=()
  for t in "${batch[@]}"; do
    echo "fuzz: running fuzz_$t for $secs s"
    fuzz_one "$t" &
    pids+=($!)
  done
  for k in "${!batch[@]}"; do
    t=${batch[k]}
    if wait "${pids[k]}"; then
      tail -3 "$root/$t.log"
      echo "fuzz: no finding in fuzz_$t in $secs s"
    else
      tail -40 "$root/$t.log" >&2
      echo "fuzz: FINDING in fuzz_$t; reproducer in $root/findings/:" >&2
      failed="$failed $t"
    fi
  done
done
if [ -n "$failed" ]; then
  ls -t "$root/findings" | head -5 >&2
  exit 1
fi
