#!/usr/bin/env python3
"""PyTorch reference for the ONNX import tests (run by Debian's python3-torch 1.13).

Builds a model of tests/onnx/models.py from a fixed seed, exports it with torch.onnx
(training mode, no constant folding, initialisers kept as parameters) and, unless
--export-only, trains it as `train` does and writes, as tests/e2e/compare.py reads them:
  init.safetensors   the exporter's state dict (the parameters, by their ONNX names)
  ref.json           the loss of each of the first STEPS AdamW steps (the forward loss
                     before each update), and ref.safetensors the parameters after
Step k reads batch*seq+1 tokens from k*batch*seq (llm.c's token file, wrapping), the
inputs the first batch*seq and the targets the same shifted by one; AdamW with
betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on parameters of 2 or more dimensions,
gradients clipped to norm 1.

usage: onnx_reference.py KIND TOKENS.bin OUTDIR BATCH SEQ STEPS LR [--opset N] [--dynamic]
                         [--sizes NAME=V,...] [--export-only] [--name FILE]"""
import argparse, json, os, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import read_tokens, write_safetensors  # noqa: E402
import models  # noqa: E402

SIZES = {
    "mlp": dict(vocab=256, d=64, hidden=128, layers=2),
    "gpt2": dict(vocab=256, ctx=64, d=64, heads=4, layers=2),
    "llama": dict(vocab=256, ctx=64, d=64, heads=4, ffn=96, layers=2),
}


def train(model, tokens, batch, seq, steps, lr):
    params = dict(model.named_parameters())
    decay = [t for t in params.values() if t.dim() >= 2]
    no_decay = [t for t in params.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses, n = [], len(tokens)
    for step in range(steps):
        start = step * batch * seq
        chunk = torch.tensor([tokens[(start + i) % n] for i in range(batch * seq + 1)])
        x, y = chunk[:-1].view(batch, seq), chunk[1:].view(batch, seq)
        opt.zero_grad()
        loss = model(x, y)
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
    return losses


def main():
    ap = argparse.ArgumentParser()
    for a in ("kind", "tokens", "out"):
        ap.add_argument(a)
    for a in ("batch", "seq", "steps"):
        ap.add_argument(a, type=int)
    ap.add_argument("lr", type=float)
    ap.add_argument("--opset", type=int, default=14)
    ap.add_argument("--dynamic", action="store_true")
    ap.add_argument("--export-only", action="store_true")
    ap.add_argument("--sizes", default="")
    ap.add_argument("--name", default="model.onnx")
    a = ap.parse_args()
    sizes = dict(SIZES[a.kind])
    for kv in filter(None, a.sizes.split(",")):
        k, v = kv.split("=")
        sizes[k] = float(v) if "." in v else int(v)
    torch.manual_seed(1234)
    model = models.build(a.kind, sizes)
    models.export(model, os.path.join(a.out, a.name), a.batch, a.seq, a.opset, a.dynamic)
    if a.export_only:
        return
    write_safetensors(os.path.join(a.out, "init.safetensors"), dict(model.named_parameters()))
    losses = train(model, read_tokens(a.tokens), a.batch, a.seq, a.steps, a.lr)
    write_safetensors(os.path.join(a.out, "ref.safetensors"), dict(model.named_parameters()))
    json.dump({"losses": losses}, open(os.path.join(a.out, "ref.json"), "w"))
    print(f"{a.kind} reference losses:", " ".join(f"{x:.6f}" for x in losses))


if __name__ == "__main__":
    main()
