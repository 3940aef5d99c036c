#!/usr/bin/env bash
# GPU training benchmark (run by tests/gpu/run.sh on a machine with a GPU): GPT-2 124M,
# batch 16, seq 1024, bf16 mixed precision, compiled by colossalc (gpu-carry/train-gpt2,
# tests/gpu/prepare.sh) and run with --device cuda, against the same step in PyTorch on
# the same GPU in this script as its users write it (bench/torch_gpt2_gpu.py: bf16
# autocast, scaled_dot_product_attention, fused AdamW, torch.compile where it works).
# Prints for each: ms per step (median of the timed steps), tokens/s, achieved TFLOP/s
# and MFU (the model's FLOPs per step from colossalc's cost model, recorded by
# prepare.sh, the same for both; the GPU's dense bf16 peak from its name), GPU memory
# (ours: the most nvidia-smi showed while it ran; PyTorch's peak allocation); then ours
# over PyTorch's tokens/s. Exits 1 when ours is below 0.8 of PyTorch's.
# Usage: bench/train_gpu.sh CARRY_DIR OUT_DIR [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
carry=$1 out=$2 steps=${3:-10}
flops=$(cat "$carry/train-gpt2.flops")
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
# dense bf16 tensor-core peaks (vendor data sheets), TFLOP/s; 0: not known here
case $gpu in
*H100*PCIe*) peak=756 ;;
*H100* | *H200* | *GH200*) peak=989.4 ;;
*A100*) peak=312 ;;
*L40S*) peak=362 ;;
*) peak=0 ;;
esac
echo "gpu: $gpu (bf16 peak ${peak} TFLOP/s), commit $(git rev-parse --short HEAD 2> /dev/null || echo '?')"
"$carry/train-gpt2" --device cuda --kernel-cache "$carry/kc" --data "$carry/genesis.bin" --steps $((steps + 2)) \
  --log "$out/gpt2.jsonl" > "$out/gpt2.out" &
pid=$!
mib=0
while kill -0 $pid 2> /dev/null; do # the most GPU memory in use while ours runs
  used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  [ "${used:-0}" -gt "$mib" ] && mib=$used
  sleep 0.5
done
wait $pid
ms=$(tail -n "$steps" "$out/gpt2.jsonl" | grep -o '"ms": *[0-9.e+-]*' | awk '{print $2}' | sort -g |
  awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
python3 bench/torch_gpt2_gpu.py 50257 1024 768 12 12 16 1024 "$steps" > "$out/torch.txt" 2> "$out/torch.err"
tmode=$(awk '/torch_mode/ {print $2}' "$out/torch.txt")
tms=$(awk '/torch_ms_per_step/ {print $2}' "$out/torch.txt")
tmib=$(awk '/torch_peak_mib/ {print $2}' "$out/torch.txt")
printf '%-34s %9s %9s %8s %6s %9s\n' run ms/step tok/s TFLOP/s MFU gpu_MiB
row() { # name ms mib
  awk -v n="$1" -v ms="$2" -v f="$flops" -v p="$peak" -v mib="$3" 'BEGIN {
    t = f / (ms / 1000) / 1e12
    printf "%-34s %9.1f %9.0f %8.1f %5s %9.0f\n", n, ms, 16 * 1024 / (ms / 1000), t,
      (p > 0 ? sprintf("%.1f%%", 100 * t / p) : "n/a"), mib }'
}
row "colossalc gpt2-124M b16 t1024 bf16" "$ms" "$mib"
row "pytorch ($tmode, sdpa, bf16)" "$tms" "$tmib"
awk -v a="$ms" -v b="$tms" 'BEGIN {
  r = b / a
  printf "colossalc over pytorch: %.2fx tokens/s (pass: at least 0.80)\n", r
  exit !(r >= 0.8) }'
