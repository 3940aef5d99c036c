#!/usr/bin/env bash
# GPU training benchmark (run by tests/gpu/run.sh on a machine with a GPU): GPT-2 124M,
# batch 16, seq 1024, compiled by colossalc (gpu-carry/train-gpt2, tests/gpu/prepare.sh)
# and run with --device cuda, against the same step in PyTorch on the same GPU in this
# script (bench/torch_step.py, f32 without TF32 as ours). Prints ms per step (median of
# the timed steps), tokens/s, achieved TFLOP/s (the model's FLOPs per step from
# colossalc's cost model, recorded by prepare.sh), the GPU memory in use at the end of
# ours (nvidia-smi) and PyTorch's peak, and PyTorch's time over ours.
# Usage: bench/train_gpu.sh CARRY_DIR OUT_DIR [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
carry=$1 out=$2 steps=${3:-10}
flops=$(cat "$carry/train-gpt2.flops")
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
"$carry/train-gpt2" --device cuda --kernel-cache "$carry/kc" --data "$carry/genesis.bin" --steps $((steps + 1)) \
  --log "$out/gpt2.jsonl" > "$out/gpt2.out" &
pid=$!
peak=0
while kill -0 $pid 2> /dev/null; do   # the most GPU memory in use while ours runs
  used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  [ "${used:-0}" -gt "$peak" ] && peak=$used
  sleep 0.5
done
wait $pid
ms=$(tail -n "$steps" "$out/gpt2.jsonl" | grep -o '"ms": *[0-9.e+-]*' | awk '{print $2}' | sort -g |
     awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
python3 bench/torch_step.py 50257 1024 768 12 12 16 1024 "$steps" 16 cuda > "$out/torch.txt"
torch_ms=$(awk '/torch_ms_per_step/ {print $2}' "$out/torch.txt")
torch_mib=$(awk '/torch_peak_mib/ {print $2}' "$out/torch.txt")
printf '%-28s %10s %10s %9s %12s %10s %12s %8s\n' model ms/step tok/s TFLOP/s gpu_MiB torch_ms torch_MiB speedup
awk -v ms="$ms" -v f="$flops" -v mib="$peak" -v tm="$torch_ms" -v tmib="$torch_mib" 'BEGIN {
  printf "%-28s %10.1f %10.0f %9.1f %12.0f %10.1f %12.0f %7.2fx\n", "gpt2-124M b16 t1024 f32", ms, 16 * 1024 / (ms / 1000),
         f / (ms / 1000) / 1e12, mib, tm, tmib, tm / ms }'
