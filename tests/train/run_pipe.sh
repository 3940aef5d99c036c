#!/bin/sh
# The hand-written pipeline program (pipe_program.c: mesh dp any x tp 2 x pp 2,
# scheduled, tied embedding, a column-split weight) against the same model as one
# unsplit rank (pipe_ref_program.c built for the same global batch).
#   equal NP REF [FLAGS]: NP ranks of the pipeline and one rank of REF train 6 AdamW
#       steps from the same Philox initialisation: every step's loss and every
#       parameter after the last update (--save, global tensors) agree to 1e-5
#   resume NP REF: NP ranks, 6 steps in one run, against 3 steps with a checkpoint
#       resumed for 3 more by NP ranks (bit for bit) and by one rank of REF (1e-5:
#       the checkpoint holds the global model whatever the mesh that wrote it)
# Usage: run_pipe.sh WORKDIR PYTHON SRCDIR "MPIRUN" PIPE MODE NP REF [FLAGS...]
set -eu
work=$1 py=$2 src=$3 mpirun=$4 pipe=$5 mode=$6 np=$7 ref=$8
shift 8
run=$work/pipe-$mode-np$np$(echo "$*" | tr -d ' -')
rm -rf "$run" && mkdir -p "$run" && cd "$run"
# llm.c token file of 4000 ids below the vocabulary of 16
"$py" -c "
import struct, random
random.seed(7)
ids = [(i * 7 + random.randrange(3)) % 16 for i in range(4000)]
hdr = [20240520, 1, len(ids)] + [0] * 253
open('tok.bin', 'wb').write(struct.pack('<256i', *hdr) + struct.pack('<%dH' % len(ids), *ids))"
args="--data tok.bin --threads 1 $*"
cmp_runs="$py $src/tests/multirank/compare_runs.py"
mpi() { timeout 300 $mpirun -np "$np" "$pipe" $args "$@"; }
if [ "$mode" = equal ]; then
  "$ref" $args --steps 6 --log one.jsonl --save one.safetensors > one.out
  mpi --steps 6 --log many.jsonl --save many.safetensors > many.out
  grep '^mesh dp' many.out
  grep '^data parallel' many.out
  $cmp_runs 1e-5 one.jsonl many.jsonl one.safetensors many.safetensors
  exit 0
fi
# a constant rate: cosine depends on --steps, which differs between the runs
args="$args --lr-schedule constant"
mpi --steps 6 --log full.jsonl --save full.safetensors > full.out
mpi --steps 3 --ckpt-dir ck --ckpt-every 3 > part.out
cp -r ck ck1
mpi --steps 6 --ckpt-dir ck --resume --log res.jsonl --save res.safetensors > res.out
$cmp_runs --last 3 0 full.jsonl res.jsonl full.safetensors res.safetensors
cmp full.safetensors res.safetensors
echo "pipeline resume is bit-identical"
"$ref" $args --steps 6 --ckpt-dir ck1 --resume --log one.jsonl --save one.safetensors > one.out
$cmp_runs --last 3 1e-5 full.jsonl one.jsonl full.safetensors one.safetensors
echo "one rank resumes the pipeline's checkpoint"
