#!/usr/bin/env python3
"""Baseline for bench/train_cpu.sh and bench/train_gpu.sh: the same GPT-2 training step
(forward, backward, clipping, AdamW) in PyTorch, f32 (no TF32), on the CPU or a CUDA
GPU, timed over STEPS steps after one warm-up. Prints `torch_ms_per_step X`.
usage: torch_step.py vocab ctx d heads layers B T STEPS THREADS [cpu|cuda]"""
import sys, time
import torch
sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tests/e2e")
from gpt2_reference import make_params, forward

vocab, ctx, d, heads, layers, B, T, steps, threads = (int(a) for a in sys.argv[1:10])
dev = sys.argv[10] if len(sys.argv) > 10 else "cpu"
torch.set_num_threads(threads)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
p = make_params(vocab, ctx, d, layers, torch.Generator().manual_seed(1))
p = {k: v.detach().to(dev).requires_grad_(True) for k, v in p.items()}
opt = torch.optim.AdamW(list(p.values()), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
x = torch.randint(0, vocab, (B, T)).to(dev)
y = torch.randint(0, vocab, (B, T)).to(dev)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
times = []
for i in range(steps + 1):
    sync()
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = forward(p, x, y, heads, layers)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
    opt.step()
    sync()
    times.append(time.perf_counter() - t0)
times = sorted(times[1:])
print(f"torch_ms_per_step {1000 * times[len(times) // 2]:.1f}")
if dev == "cuda":
    print(f"torch_peak_mib {torch.cuda.max_memory_allocated() / 2**20:.0f}")
