#!/usr/bin/python3
"""PyTorch reference for `train` on the bigram test program (linreg_program.c).

Writes to OUTDIR:
  init.safetensors   initial parameters: wte.weight as F32, bias as BF16 (so
                     --init-from converts), written by hand (no safetensors package)
  args.txt           the train flags (one per line) this reference was computed with
  ref_losses.txt     the loss of each step (before its update), "%.9g" per line
  final.safetensors  the parameters after the last update, F32
The model is torch's own: logits = embedding(W, x) + b, mean cross-entropy,
torch.optim.AdamW (weight decay on the 2-D W only), clip_grad_norm_, and the
learning-rate schedule of train_loop.h set per step. The C side
(test_train_check pyref) runs train with args.txt and compares.

Usage: /usr/bin/python3 bigram_ref.py TOKENS OUTDIR
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

B, T, V = 4, 16, 256  # as in tests/train/linreg_program.c
STEPS = 5
HP = {"lr": 0.05, "warmup": 2, "min_lr": 0.005, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8,
      "weight_decay": 0.1, "clip": 0.1}


def read_tokens(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    assert header[0] == 20240520 and header[1] == 1, "not an llm.c token file"
    return np.fromfile(path, dtype="<u2", count=int(header[2]), offset=1024).astype(np.int64)


def batch(toks, k):
    """Step k (from 0): the B*T+1 tokens at k*B*T, wrapping (runtime/io/tokens.h)."""
    idx = (k * B * T + np.arange(B * T + 1)) % len(toks)
    w = torch.from_numpy(toks[idx])
    return w[:-1].reshape(B, T), w[1:].reshape(B, T)


def lr_at(t, steps):
    lr, warm, lo = HP["lr"], HP["warmup"], HP["min_lr"]
    if warm > 0 and t <= warm:
        return lr * t / warm
    progress = min(1.0, (t - warm) / (steps - warm))
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * progress))


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, off = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors))


def f32_bytes(t):
    return t.detach().contiguous().numpy().astype("<f4").tobytes()


def make_init(outdir):
    g = torch.Generator().manual_seed(20240520)
    W = torch.randn(V, V, generator=g) * 0.3
    b = ((torch.rand(V, generator=g) - 0.5)).to(torch.bfloat16)
    write_safetensors(os.path.join(outdir, "init.safetensors"), [
        ("bias", "BF16", (V,), b.view(torch.int16).numpy().astype("<i2").tobytes()),
        ("wte.weight", "F32", (V, V), f32_bytes(W))])
    return W.clone().requires_grad_(True), b.to(torch.float32).requires_grad_(True)


def train(toks, W, b):
    opt = torch.optim.AdamW([{"params": [W], "weight_decay": HP["weight_decay"]},
                             {"params": [b], "weight_decay": 0.0}],
                            lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"])
    losses = []
    for t in range(1, STEPS + 1):
        for group in opt.param_groups:
            group["lr"] = lr_at(t, STEPS)
        x, y = batch(toks, t - 1)
        logits = torch.nn.functional.embedding(x, W) + b
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([W, b], HP["clip"])
        opt.step()
        losses.append(loss.item())
    return losses


def main(tokens, outdir):
    os.makedirs(outdir, exist_ok=True)
    W, b = make_init(outdir)
    losses = train(read_tokens(tokens), W, b)
    write_safetensors(os.path.join(outdir, "final.safetensors"), [
        ("bias", "F32", (V,), f32_bytes(b)), ("wte.weight", "F32", (V, V), f32_bytes(W))])
    with open(os.path.join(outdir, "ref_losses.txt"), "w") as f:
        f.writelines("%.9g\n" % l for l in losses)
    args = ["--init-from", os.path.join(outdir, "init.safetensors"), "--steps", str(STEPS),
            "--lr", repr(HP["lr"]), "--warmup", str(HP["warmup"]), "--min-lr", repr(HP["min_lr"]),
            "--lr-schedule", "cosine", "--beta1", repr(HP["beta1"]), "--beta2", repr(HP["beta2"]),
            "--eps", repr(HP["eps"]), "--weight-decay", repr(HP["weight_decay"]),
            "--clip", repr(HP["clip"])]
    with open(os.path.join(outdir, "args.txt"), "w") as f:
        f.writelines(a + "\n" for a in args)
    shown = " ".join("%.6f" % l for l in losses)
    print("bigram_ref: %d steps, losses %s, torch %s" % (STEPS, shown, torch.__version__))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: bigram_ref.py TOKENS OUTDIR")
    main(sys.argv[1], sys.argv[2])
