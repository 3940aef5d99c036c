#!/bin/sh
# Damaged checkpoints, on one rank of gpt2-tiny (2 layers, seq 32, batch 2): a run of 4
# steps with a checkpoint every 2 is the reference. Then, with the newest checkpoint
# damaged, --resume refuses it, names the tensor and says "checksum" (a flipped bit) or
# what else is wrong (a shard truncated at a random offset, a missing shard, an index cut
# short), falls back to the older checkpoint, says so, and goes on to the reference's
# final parameters bit for bit; with every checkpoint damaged it stops with the reason.
# A checkpoint of another model (3 layers) is refused, naming the shapes. --keep-ckpts 2
# leaves the newest two. A disk that fills up while checkpointing (a tmpfs of 1.5 shards, or a
# file-size limit where mounting is not allowed) fails the run and leaves the previous
# checkpoint whole: a resume from it equals the reference. A run whose step 3 was skipped
# for a NaN (COLOSSALC_FAULT_NAN) and checkpointed after step 4 resumes to the
# uninterrupted run's parameters bit for bit (the checkpoint keeps the count of skipped
# updates, which Adam's bias corrections leave out, in every precision).
# Usage: run_damage.sh COLOSSALC MKTOKENS SRCDIR WORKDIR
set -eu
cc=$1 mk=$2 src=$3 work=$4/damage
rm -rf "$work" && mkdir -p "$work" && cd "$work"
m="$src/models/gpt2-tiny.model"
"$cc" "$m" --set layers=2 --set seq=32 --set batch=2 -o train
"$cc" "$m" --set layers=3 --set seq=32 --set batch=2 -o train-l3
"$mk" "$src/data/genesis.txt" genesis.bin > /dev/null
args="--data genesis.bin --threads 1"
fail() { echo "FAIL: $*"; exit 1; }
./train $args --steps 4 --ckpt-dir ref --ckpt-every 2 --save ref.safetensors > ref.out
[ -f ref/ckpt-2/index.json ] && [ -f ref/ckpt-4/shard-00000-of-00001.safetensors ] || fail "no checkpoints"
[ "$(cat ref/latest)" = ckpt-4 ] || fail "latest is not ckpt-4"

# resume with ckpt-4 damaged by $1: refused with message $2, ckpt-2 taken, the end equal
damaged() {
  what=$1 want=$2
  grep -q "$want" resume.err || { cat resume.err; fail "$what: no '$want' in the refusal"; }
  grep -q "resuming from ck/ckpt-2" resume.err || { cat resume.err; fail "$what: no fallback to ckpt-2"; }
  cmp ref.safetensors end.safetensors || fail "$what: the resumed run differs from the reference"
  echo "ok: $what: $(grep 'cannot resume' resume.err | head -1 | cut -c1-160)"
}
resume() { ./train $args --steps 4 --ckpt-dir ck --resume --save end.safetensors > resume.out 2> resume.err; }
shard=ck/ckpt-4/shard-00000-of-00001.safetensors
size=$(wc -c < ref/ckpt-4/shard-00000-of-00001.safetensors)

# a flipped bit in the data of a tensor
rm -rf ck && cp -r ref ck
off=$((size - 1000))
b=$(od -An -tu1 -j"$off" -N1 "$shard" | tr -d ' ')
printf "$(printf '\\%03o' $((b ^ 4)))" | dd of="$shard" bs=1 seek="$off" conv=notrunc 2> /dev/null
resume || fail "bit flip: the resume failed"
damaged "a flipped bit" "checksum mismatch"
grep -q "tensor 'opt_v/" resume.err || fail "bit flip: the tensor is not named"

# truncated at random offsets
for i in 1 2 3; do
  rm -rf ck && cp -r ref ck
  cut=$(awk -v s="$size" -v i="$i" 'BEGIN { srand(i * 7919); print int(rand() * (s - 1)) }')
  truncate -s "$cut" "$shard"
  resume || fail "truncated at $cut: the resume failed"
  damaged "truncated at byte $cut of $size" "ckpt-4"
done

# a missing shard, an index cut short
rm -rf ck && cp -r ref ck && rm "$shard"
resume || fail "missing shard: the resume failed"
damaged "a missing shard" "No such file or directory"
rm -rf ck && cp -r ref ck && truncate -s 100 ck/ckpt-4/index.json
resume || fail "short index: the resume failed"
damaged "an index cut short" "not a checkpoint index"

# nothing good left
rm -rf ck && cp -r ref ck
for c in 2 4; do truncate -s 64 ck/ckpt-$c/shard-00000-of-00001.safetensors; done
if resume; then fail "every checkpoint damaged: the resume went on"; fi
grep -q "no checkpoint in ck reads whole (2 tried)" resume.err || { cat resume.err; fail "no final refusal"; }
echo "ok: every checkpoint damaged: $(tail -1 resume.err)"

# another model's checkpoint
if ./train-l3 $args --steps 4 --ckpt-dir ref --resume > l3.out 2> l3.err; then fail "another model resumed"; fi
grep -q "a checkpoint of another model" l3.err || { cat l3.err; fail "another model: no reason"; }
echo "ok: another model: $(grep 'cannot resume' l3.err | head -1 | cut -c1-160)"

# --keep-ckpts 2
./train $args --steps 5 --ckpt-dir keep --ckpt-every 1 --keep-ckpts 2 > keep.out
[ "$(ls keep | tr '\n' ' ')" = "ckpt-4 ckpt-5 latest " ] || fail "--keep-ckpts 2 left: $(ls keep | tr '\n' ' ')"
echo "ok: --keep-ckpts 2 left ckpt-4 and ckpt-5"

# a disk that fills up while checkpointing: the previous checkpoint stays whole
mkdir -p full
kib=$((size * 3 / 2 / 1024)) # room for ckpt-2 and half of another
if mount -t tmpfs -o size=${kib}k tmpfs full 2> /dev/null; then
  trap 'umount "$work/full" 2> /dev/null || true' EXIT
  how="a $kib KiB tmpfs"
  limit=""
else # no mount here: a file-size limit fails the writes the same way (EFBIG)
  how="a $((size / 2048)) KiB file-size limit"
  limit="ulimit -f $((size / 1024));" # 512-byte blocks: half the shard
fi
cp -r ref/ckpt-2 full/ && echo ckpt-2 > full/latest
before=$(cat full/ckpt-2/shard-00000-of-00001.safetensors | cksum)
if sh -c "trap '' XFSZ; $limit ./train $args --steps 4 --ckpt-dir full --resume --ckpt-every 1" > full.out 2> full.err; then
  fail "disk full: the run succeeded"
fi
grep -q "No space left on device\|File too large" full.err || { cat full.err; fail "disk full: no reason given"; }
[ "$(cat full/latest)" = ckpt-2 ] || fail "disk full: latest moved to $(cat full/latest)"
[ ! -e full/ckpt-3 ] || fail "disk full: the failed ckpt-3 was left behind"
[ "$(cat full/ckpt-2/shard-00000-of-00001.safetensors | cksum)" = "$before" ] || fail "disk full: ckpt-2 changed"
mkdir -p again && cp -r full/ckpt-2 full/latest again/
./train $args --steps 4 --ckpt-dir again --resume --save again.safetensors > again.out
cmp ref.safetensors again.safetensors || fail "disk full: resuming the kept checkpoint differs"
echo "ok: disk full ($how): $(grep 'train:' full.err | head -1 | cut -c1-160); ckpt-2 intact and resumes"

# a skipped update before the checkpoint: the resumed run goes on as the uninterrupted one
COLOSSALC_FAULT_NAN=3 ./train $args --steps 6 --save nan-full.safetensors > nan-full.out 2>&1
grep -q "skipped: non-finite" nan-full.out || fail "the NaN step was not skipped"
COLOSSALC_FAULT_NAN=3 ./train $args --steps 6 --ckpt-dir nanck --ckpt-every 4 > nan-part.out 2>&1
printf 'ckpt-4\n' > nanck/latest
./train $args --steps 6 --ckpt-dir nanck --resume --save nan-resumed.safetensors > nan-resumed.out
cmp nan-full.safetensors nan-resumed.safetensors || fail "a resume after a skipped update differs"
echo "ok: a checkpoint after a skipped update resumes bit for bit"
