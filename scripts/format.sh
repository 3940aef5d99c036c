#!/usr/bin/env bash
# Formats the tree's C sources and headers with clang-format-14 and the root's
# .clang-format (third_party/ excepted), or with --check only says which differ and
# exits 1 (scripts/test.sh runs that).
#
#   scripts/format.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.h' | grep -v '^third_party/')
if [ "${1:-}" = --check ]; then
  if ! clang-format-14 --dry-run --Werror "${files[@]}" 2> /tmp/format-check.$$; then
    grep -o '^[^ :]*:[0-9]*:[0-9]*: error: code should' /tmp/format-check.$$ | cut -d: -f1 | sort -u |
      sed 's/^/format: differs from .clang-format: /' >&2
    rm -f /tmp/format-check.$$
    echo "format: run scripts/format.sh to reformat" >&2
    exit 1
  fi
  rm -f /tmp/format-check.$$
  echo "format: ${#files[@]} files follow .clang-format"
else
  clang-format-14 -i "${files[@]}"
fi
