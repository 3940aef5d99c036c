#!/bin/sh
# A dp x tp x pp plan compiled and run equals one rank: gpt2-tiny (4 layers, seq 32,
# global batch 4) planned for DP*TP*PP CPU ranks with the forced degrees and the given
# colossalc flags (micro-batch size, schedule, a plan file forcing strategies), run
# under mpirun for 5 AdamW steps, against one rank of the same model with batch 4
# (train-l4-b4): every step's loss and every parameter tensor after the last update
# (--save gathers the split and staged parameters) to a relative 1e-5
# (compare_runs.py; --eps 1e-6 for the reason run_equal.sh gives), and every step's
# measured device memory equal to the compiler's prediction (check_memory.py).
# DEVICE=cuda EMUL=DIR in the environment run the ranks on the CUDA device of the
# host emulation in DIR (tests/cuda_emul: its NCCL on MPI), against the same one-rank
# run on the CPU device (device.sh). EXPECT_DIFFER=1 turns the check around: the run
# must differ from one rank, or fail (its check that the replicas agree), as the stream
# hazard tests want. PRECISION=bf16 (or fp16) compiles both the plan and the one-rank
# reference in that precision: a rank's partial GEMM results round to 16 bits before
# the f32 all-reduce sums them, where one rank rounds the whole sum once, and the
# activations and their gradients are 16-bit, so such a difference is a 16-bit unit
# (4e-3) of what the next layer reads; to a relative 3e-2 (a bias summed from those
# gradients moves by them), the key biases (zero gradient: rounding noise) left out. PRECISION=fp8:
# the losses to a relative 2e-3, not the parameters: besides the roundings of partial
# sums, the first step quantizes at scale 1, where the gradients of a micro-batch of
# fewer rows are larger and fewer of them fall below e5m2's range, and a rounding that
# moves by an eighth of a value becomes full-size AdamW steps in the small tensors.
# ONE_MICROBATCH=N compiles the one-rank reference (of any precision) with micro-batches
# of N rows, and compares as fp32 does (1e-5, losses and parameters): with data
# parallelism alone and N the mesh's micro-batch size, each rank's micro-batches are
# the reference's, and fp8's scales the same only when the ranks' amaxes are reduced
# over the mesh (the first step's gradients, at scale 1, depend on the micro-batch's
# rows: hence N). RESUME=1 also runs the plan for 3 steps with a checkpoint and resumes
# it for steps 4-5 on the same ranks: the losses and parameters must be the uninterrupted
# run's bit for bit (fp8: the scaling states, the same on every rank of a stage, saved in
# the model's order and restored on each); with ONE_MICROBATCH, the one-rank reference
# resumes the same checkpoint too, equal to the plan to a relative 1e-5 (a checkpoint,
# fp8's states included, is the same file whatever the plan); so does the one-rank
# reference of OPTIMIZER below. SHUFFLE=1
# trains both with --shuffle (the plan reads the same shuffled batches as one rank),
# and checks that the one-rank losses differ from those of the unshuffled order.
# OPTIMIZER=lamb compiles both the plan and the one-rank reference with that optimizer
# (LAMB: each parameter's trust ratio from its norms summed over its shards and pieces,
# on every mesh the same as on one rank), trained at lr 1e-2 and eps 1e-3: LAMB's step is
# lr times the parameter's norm, so a larger rate makes a wrong ratio show in the
# parameters; and the ratio of c_attn.bias takes the norm of the key biases' steps, which
# are rounding noise (a zero gradient) turned into steps of up to 1 by Adam's
# normalisation at a small eps, moving the whole tensor's ratio by a part in 1e4.
# CLUSTER=FILE plans the mesh for that cluster file rather than the cpu profile (whose
# nodes hold 2 ranks: a tensor-parallel group of 4 needs a node of 4).
# SETS="--set NAME=V ..." compiles both with those constants too: with 1 layer and 32
# positions, ZeRO deals the MLP's weights, each more than half a rank's share, in pieces
# (codegen/zero.h).
# Usage: run_mesh.sh COLOSSALC WORKDIR PYTHON SRCDIR "MPIRUN" NAME DP TP PP [COLOSSALC FLAGS...]
set -eu
cc=$1 work=$2 py=$3 src=$4 mpirun=$5 name=$6 dp=$7 tp=$8 pp=$9
shift 9
np=$((dp * tp * pp))
run=$work/mesh-$name${DEVICE:+-$DEVICE} && rm -rf "$run" && mkdir -p "$run" && cd "$run"
. "$src/tests/multirank/device.sh"
prec=${PRECISION:-fp32} one="$work/train-l4-b4" tol=1e-5 skip="" opt=${OPTIMIZER:+--optimizer $OPTIMIZER}
sets=${SETS:-} machine="--gpu cpu"
[ -n "${CLUSTER:-}" ] && machine="--cluster $CLUSTER"
"$cc" "$src/models/gpt2-tiny.model" --set layers=4 --set seq=32 --set batch=4 $sets --gpus "$np" $machine \
      --dp "$dp" --tp "$tp" --pp "$pp" --zero 0 --precision "$prec" $opt "$@" --dump-plan -o train-mesh > plan.txt
sed -n '4,5p' plan.txt
if [ -n "${ONE_MICROBATCH:-}" ]; then
  "$cc" "$src/models/gpt2-tiny.model" --set layers=4 --set seq=32 --set batch=4 $sets --gpus 1 --gpu cpu --dp 1 --tp 1 \
        --pp 1 --zero 0 --microbatch-size "$ONE_MICROBATCH" --precision "$prec" -o train-one 2> /dev/null
  one=./train-one
elif [ "$prec" != fp32 ]; then
  "$cc" "$src/models/gpt2-tiny.model" --set layers=4 --set seq=32 --set batch=4 $sets --precision "$prec" -o train-one 2> /dev/null
  one=./train-one tol=3e-2 skip="h[.][0-9]+[.]attn[.]c_attn[.]bias:128:256"
fi
args="--data $work/genesis.bin --steps 5 --threads 1 --eps 1e-6"
if [ -n "$opt$sets" ]; then
  [ -z "${ONE_MICROBATCH:-}" ] && [ "$prec" = fp32 ] || { echo "OPTIMIZER, SETS: fp32 without ONE_MICROBATCH"; exit 1; }
  "$cc" "$src/models/gpt2-tiny.model" --set layers=4 --set seq=32 --set batch=4 $sets $opt -o train-one 2> /dev/null
  one=./train-one
  [ -n "$opt" ] && args="$args --lr 1e-2 --eps 1e-3"
fi
if [ "${SHUFFLE:-0}" = 1 ]; then
  "$one" $args --device cpu --log ordered.jsonl > /dev/null
  args="$args --shuffle"
fi
"$one" $args --device cpu --log one.jsonl --save one.safetensors > one.out
if [ "${SHUFFLE:-0}" = 1 ] && "$py" "$src/tests/multirank/compare_runs.py" 1e-3 ordered.jsonl one.jsonl > /dev/null; then
  echo "FAIL: --shuffle trained on the same batches as the file's order"; exit 1
fi
device_prepare ./train-mesh
if [ "${EXPECT_DIFFER:-0}" = 1 ] &&
   ! timeout 600 $mpirun -np "$np" ./train-mesh $args $devargs --log many.jsonl --save many.safetensors > many.out 2>&1
then # the run itself caught it (the ranks' parameters diverged)
  grep 'train: ' many.out | head -1
  echo "the run failed, as expected"
  exit 0
fi
[ "${EXPECT_DIFFER:-0}" = 1 ] ||
  timeout 600 $mpirun -np "$np" ./train-mesh $args $devargs --log many.jsonl --save many.safetensors > many.out
head -3 many.out
if [ "${EXPECT_DIFFER:-0}" = 1 ]; then # the hazard test (tests/cuda_emul/tests.cmake)
  if "$py" "$src/tests/multirank/compare_runs.py" 1e-5 one.jsonl many.jsonl one.safetensors many.safetensors \
       > compare.out; then
    echo "FAIL: the run equals one rank although EXPECT_DIFFER=1"; exit 1
  fi
  tail -2 compare.out
  echo "differs from one rank, as expected"
  exit 0
fi
if [ "$prec" = fp8 ] && [ -z "${ONE_MICROBATCH:-}" ]; then
  "$py" "$src/tests/multirank/compare_runs.py" 2e-3 one.jsonl many.jsonl
else
  "$py" "$src/tests/multirank/compare_runs.py" ${skip:+--skip "$skip"} $tol one.jsonl many.jsonl one.safetensors \
    many.safetensors
fi
"$py" "$src/tests/multirank/check_memory.py" many.jsonl
if [ "${RESUME:-0}" = 1 ]; then
  timeout 600 $mpirun -np "$np" ./train-mesh $args $devargs --steps 3 --ckpt-dir ck --ckpt-every 3 > part.out
  rm -rf ck-one && cp -r ck ck-one
  timeout 600 $mpirun -np "$np" ./train-mesh $args $devargs --ckpt-dir ck --resume --log resumed.jsonl \
    --save resumed.safetensors > resumed.out
  "$py" "$src/tests/multirank/compare_runs.py" --last 2 0 many.jsonl resumed.jsonl many.safetensors resumed.safetensors
  cmp many.safetensors resumed.safetensors
  echo "resumed from step 3: bit-identical"
  if [ -n "${ONE_MICROBATCH:-}$opt" ]; then
    "$one" $args --device cpu --ckpt-dir ck-one --resume --log one-resumed.jsonl --save one-resumed.safetensors \
      > one-resumed.out
    "$py" "$src/tests/multirank/compare_runs.py" --last 2 1e-5 many.jsonl one-resumed.jsonl many.safetensors \
      one-resumed.safetensors
    echo "one rank resumed the plan's checkpoint"
  fi
fi
