#!/bin/sh
# Golden IR test: `colossalc MODEL --dump-ir` must print exactly GOLDEN.
# Run from the source root, so the dump names the model by its relative path.
# Usage: check_dump.sh COLOSSALC MODEL GOLDEN
set -u
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$1" "$2" --dump-ir > "$out" || { echo "colossalc failed on $2"; exit 1; }
if ! diff -u "$3" "$out" > "$out.diff"; then
  head -40 "$out.diff"
  echo "$2: --dump-ir differs from $3 (scripts/update-golden.sh regenerates it after a deliberate change)"
  rm -f "$out.diff"
  exit 1
fi
rm -f "$out.diff"
echo "$2: $(grep -c '^%' "$out") ops match $3"
