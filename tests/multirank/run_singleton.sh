#!/bin/sh
# One rank without mpirun: the plain run (self backend, MPI never initialised) and a
# singleton MPI_Init (COLOSSALC_COMM=mpi) log the same losses and norms bit for bit,
# and write the same parameters.
# Usage: run_singleton.sh WORKDIR
set -eu
work=$1
run=$work/singleton
rm -rf "$run" && mkdir -p "$run" && cd "$run"
args="--data $work/genesis.bin --steps 5 --threads 1"
"$work/train-b4" $args --log self.jsonl --save self.safetensors > self.out
COLOSSALC_COMM=mpi timeout 120 "$work/train-b4" $args --log mpi.jsonl --save mpi.safetensors > mpi.out
! grep -q '^data parallel' self.out mpi.out
cut -d, -f1-4 self.jsonl > self.cut && cut -d, -f1-4 mpi.jsonl > mpi.cut
cmp self.cut mpi.cut && cmp self.safetensors mpi.safetensors
echo "self and singleton MPI runs are identical"
