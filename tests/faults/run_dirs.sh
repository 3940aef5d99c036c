#!/bin/sh
# --nvme-dir is made when missing, parents too (an offload program whose state goes to
# NVMe; its files are removed at the end, the folder stays). A path that cannot be a
# folder is refused with the flag's name.
# Usage: run_dirs.sh WORKDIR
set -eu
work=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
run=$work/dirs && rm -rf "$run" && mkdir -p "$run" && cd "$run"
"$work/train-nvme" --data "$work/genesis.bin" --steps 2 --threads 1 --nvme-dir nvme/a/b > nvme.out
grep -q 'nvme files in nvme/a/b' nvme.out || fail "the offload line does not name nvme/a/b"
grep -q 'nvme peak [1-9]' nvme.out || fail "nothing went to NVMe"
[ -d nvme/a/b ] || fail "--nvme-dir nvme/a/b was not made"
touch file
st=0
"$work/train-nvme" --data "$work/genesis.bin" --steps 1 --threads 1 --nvme-dir file/sub > bad.out 2> bad.err || st=$?
[ "$st" -eq 1 ] && grep -q '^train: --nvme-dir: cannot create file/sub: Not a directory$' bad.err ||
  fail "--nvme-dir under a file: status $st, $(cat bad.err)"
echo "--nvme-dir made its folder"
