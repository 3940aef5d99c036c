#!/bin/sh
# A `train` compiled here runs on older x86-64 CPUs (qemu-x86_64 emulates them): by
# default it carries the build host's kernels and the portable x86-64-v3 ones, and runs
# the best its CPU has. Under -cpu Haswell (AVX2, FMA, no AVX-512) it runs the portable
# build, with the first losses of the native run to 1e-4 (the builds vectorize the sums
# differently); under -cpu Nehalem (no AVX) it refuses in one line naming what is
# missing, exit 1, no illegal instruction; `--cpu x86-64-v2` builds what Nehalem runs and
# `--cpu haswell` (or a --cluster file's host.cpu) what Haswell runs;
# an unknown --cpu is refused by colossalc; OpenBLAS runs kernels for the CPU's features
# where its own detection falls short. Exit 77 (skipped) without qemu-x86_64 or
# off x86-64.
# Usage: run_cpu_builds.sh COLOSSALC MKTOKENS SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 src=$3 work=$4
[ "$(uname -m)" = x86_64 ] && command -v qemu-x86_64 > /dev/null || { echo "skipped: no qemu-x86_64 on x86-64"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$mk" "$src/data/genesis.txt" g.bin > /dev/null
m="$src/models/gpt2-tiny.model"
small="--set batch=1 --set seq=16 --set layers=1"
run="--data g.bin --steps 2 --threads 1"
fail() { echo "FAIL: $*"; exit 1; }
"$cc" "$m" $small -o train 2> /dev/null
"$cc" "$m" $small --cpu x86-64-v2 -o train-v2 2> /dev/null
"$cc" "$m" $small --cpu haswell -o train-haswell 2> /dev/null
echo '{"name": "haswell nodes", "base": "cpu", "host": {"cpu": "haswell"}}' > nodes.json
"$cc" "$m" $small --cluster nodes.json -o train-nodes 2> /dev/null
./train $run > native.out
# the emulator warns of host features it does not model (invpcid, rtm): not ours
qemu-x86_64 -cpu Haswell ./train $run > haswell.out 2> haswell.err || { cat haswell.err; fail "train under -cpu Haswell"; }
grep -q "cpu kernels for x86-64-v3 (portable)" haswell.out || { cat haswell.out; fail "Haswell did not run the portable build"; }
losses() { sed -n 's/^step \([0-9]*\)\/.*| loss \([0-9.]*\) .*/\1 \2/p' "$1"; }
losses native.out > native.loss
losses haswell.out > haswell.loss
[ "$(wc -l < native.loss)" = 2 ] || fail "no losses in native.out"
awk 'NR == FNR { want[$1] = $2; next }
     { d = $2 - want[$1]; if (d < 0) d = -d; if (d > 1e-4 * want[$1]) bad = 1; n++ }
     END { exit bad || n != 2 }' native.loss haswell.loss || { paste native.loss haswell.loss; fail "losses differ"; }
echo "ok: -cpu Haswell ran the portable build: $(tr '\n' ' ' < haswell.loss)(native $(tr '\n' ' ' < native.loss))"
if qemu-x86_64 -cpu Nehalem ./train $run > nehalem.out 2> nehalem.err; then fail "train ran under -cpu Nehalem"; else rc=$?; fi
[ "$rc" = 1 ] || { cat nehalem.err; fail "exit status $rc under -cpu Nehalem (1 expected)"; }
grep -q "^train: this CPU cannot run the CPU kernels train was compiled with:.*x86-64-v3 (portable) needs avx, avx2" \
  nehalem.err || { cat nehalem.err; fail "no message naming what Nehalem lacks"; }
echo "ok: -cpu Nehalem refused: $(grep '^train:' nehalem.err)"
qemu-x86_64 -cpu Nehalem ./train-v2 $run > v2.out 2> v2.err || { cat v2.err; fail "--cpu x86-64-v2 under -cpu Nehalem"; }
grep -q "cpu kernels for x86-64-v2" v2.out || fail "--cpu x86-64-v2 not named"
echo "ok: --cpu x86-64-v2 runs under -cpu Nehalem"
qemu-x86_64 -cpu Haswell ./train-haswell $run > hw.out 2> hw.err || { cat hw.err; fail "--cpu haswell under -cpu Haswell"; }
grep -q "cpu kernels for haswell" hw.out || fail "--cpu haswell not named"
echo "ok: --cpu haswell (the C compiler's -march features) runs under -cpu Haswell"
./train-nodes $run > nodes.out
grep -q "cpu kernels for haswell" nodes.out || { head -1 nodes.out; fail "the cluster file's host.cpu not built"; }
echo "ok: a cluster file's host.cpu (haswell) is the build beside the portable one"
# OpenBLAS's own choice under -cpu max (a CPU model it does not know) is an SSE core
# (Opteron); train sets OPENBLAS_CORETYPE by the features (AVX2 and FMA: Haswell) and
# starts again (natively: the emulator does not follow an exec); a value the user set stays
qemu-x86_64 -cpu max ./train $run > max.out 2> max.err || { cat max.err; fail "train under -cpu max"; }
grep -q "OpenBLAS Haswell$" max.out || { head -1 max.out; fail "OpenBLAS's core not raised to Haswell"; }
OPENBLAS_CORETYPE=Prescott qemu-x86_64 -cpu max ./train $run > user.out 2> user.err || fail "-cpu max, Prescott"
grep -q "OpenBLAS Prescott$" user.out || { head -1 user.out; fail "the user's OPENBLAS_CORETYPE not kept"; }
echo "ok: OpenBLAS under -cpu max: $(sed -n 's/.*\(OpenBLAS [A-Za-z]*\)$/\1/p' max.out) (the user's Prescott kept)"
if "$cc" "$m" $small --cpu no-such-cpu -o bad 2> bad.err; then fail "--cpu no-such-cpu accepted"; fi
grep -q "no-such-cpu: the C compiler .* knows no such -march CPU" bad.err || { cat bad.err; fail "--cpu no-such-cpu message"; }
echo "ok: $(cat bad.err)"
