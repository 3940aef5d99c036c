#!/bin/sh
# Regenerates tests/golden/*.ir from models/*.model after a deliberate change to the
# IR, the printer or a model. Review the diff before committing it.
# Usage: scripts/update-golden.sh [BUILD_DIR]
set -eu
cd "$(dirname "$0")/.."
bin=${1:-build}/colossalc
for m in models/*.model; do
  stem=$(basename "$m" .model)
  "$bin" "$m" --dump-ir > "tests/golden/$stem.ir"
  echo "tests/golden/$stem.ir: $(grep -c '^%' "tests/golden/$stem.ir") ops"
done
