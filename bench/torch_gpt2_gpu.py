#!/usr/bin/env python3
"""PyTorch's GPT-2 training step on a GPU as its users write it, the baseline of
bench/train_gpu.sh: bf16 autocast, attention through F.scaled_dot_product_attention
(causal: FlashAttention's kernels), tanh GELU, the head tied to the token embedding,
AdamW (fused), the gradients clipped to norm 1; torch.compile'd where it works (else
eager, and it says so). Times STEPS steps after WARMUP; prints
`torch_mode compiled|eager`, `torch_ms_per_step X` (median), `torch_peak_mib X`.
usage: torch_gpt2_gpu.py vocab ctx d heads layers B T STEPS [eager]"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab, ctx, d, heads, layers):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    vocab, ctx, d, heads, layers, B, T, steps = (int(a) for a in sys.argv[1:9])
    eager = len(sys.argv) > 9 and sys.argv[9] == "eager"
    dev = "cuda"
    torch.manual_seed(1)
    model = GPT2(vocab, ctx, d, heads, layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    x = torch.randint(0, vocab, (B, T), device=dev)
    y = torch.randint(0, vocab, (B, T), device=dev)

    def step(fwd):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    fwd, mode = model, "eager"
    if not eager:
        try:
            fwd = torch.compile(model)
            for _ in range(3):  # compiles forward and backward
                step(fwd)
            mode = "compiled"
        except Exception as e:  # an image without a working Triton: eager, said
            print(f"torch.compile failed ({type(e).__name__}: {str(e)[:200]}): eager", file=sys.stderr)
            fwd = model
    for _ in range(2):
        step(fwd)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step(fwd)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    if not math.isfinite(float(loss)):
        print("torch: loss not finite", file=sys.stderr)
        sys.exit(1)
    print(f"torch_mode {mode}")
    print(f"torch_ms_per_step {1000 * times[len(times) // 2]:.2f}")
    print(f"torch_peak_mib {torch.cuda.max_memory_allocated() / 2**20:.0f}")


if __name__ == "__main__":
    main()
