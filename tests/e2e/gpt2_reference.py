#!/usr/bin/env python3
"""PyTorch reference for the end-to-end training test (run by Debian's python3-torch).

Builds the GPT-2 of models/gpt2.model (Hugging Face layout: Conv1D weights [in, out],
tanh GELU, layernorm eps 1e-5, head tied to wte) in float32, initialises it from
random numbers, and writes:
  init.safetensors   the initial parameters, by their checkpoint names
  ref.json           the loss of each of the first STEPS AdamW steps (--lamb: LAMB's, as
                     ColossalAI's Lamb computes it, written out below) (the forward loss
                     before each update) and, as ref.safetensors, the parameters after
Then `train --init-from init.safetensors` must reproduce both.

usage: gpt2_reference.py [--lamb] [--bf16 | --fp8 H [--fp8-head] | --fp16 [--scale S]] TOKENS.bin OUTDIR vocab ctx d heads layers batch seq steps lr
"""
import json, math, struct, sys
import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)


def read_tokens(path):
    data = open(path, "rb").read()
    header = np.frombuffer(data[:1024], dtype="<i4")
    assert header[0] == 20240520 and header[1] == 1, "not an llm.c token file"
    return np.frombuffer(data[1024:], dtype="<u2")[: header[2]].astype(np.int64)


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().cpu().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_params(vocab, ctx, d, layers, gen):
    p = {"wte.weight": torch.randn(vocab, d, generator=gen) * 0.02,
         "wpe.weight": torch.randn(ctx, d, generator=gen) * 0.01}
    for i in range(layers):
        h = f"h.{i}."
        for ln in ("ln_1", "ln_2"):  # non-trivial norms so their gradients matter
            p[h + ln + ".weight"] = 1 + 0.1 * torch.randn(d, generator=gen)
            p[h + ln + ".bias"] = 0.1 * torch.randn(d, generator=gen)
        for name, (n_in, n_out) in {"attn.c_attn": (d, 3 * d), "attn.c_proj": (d, d),
                                    "mlp.c_fc": (d, 4 * d), "mlp.c_proj": (4 * d, d)}.items():
            p[h + name + ".weight"] = torch.randn(n_in, n_out, generator=gen) * 0.02
            p[h + name + ".bias"] = 0.02 * torch.randn(n_out, generator=gen)
    p["ln_f.weight"] = 1 + 0.1 * torch.randn(d, generator=gen)
    p["ln_f.bias"] = 0.1 * torch.randn(d, generator=gen)
    return {k: v.float().requires_grad_(True) for k, v in p.items()}


# Mixed precision (--bf16): colossalc's autocast pass written out: GEMMs on bf16 copies
# of their inputs with a bf16 result; the activations stored in bf16 (embeddings, layer
# norms computed in f32 from the widened input and rounded, a product plus its f32 bias
# added in f32 and rounded, the residual sums in bf16); attention as the fused kernel
# computes it, in f32 on the bf16 q, k and v, its output f32; the loss in f32.
LOW = None


def mm(a, b):
    # f32 sums of the 16-bit-rounded inputs, rounded once, as colossalc's GEMMs and tensor
    # cores sum: CPU torch has no f16 GEMM, and its bf16 GEMM sums in bf16 for some layouts
    # on CPUs without AVX-512 (torch 1.13: a @ b of 64 x 4096 and 4096 x 256 off by 7 %)
    if LOW:
        return (a.to(LOW).float() @ b.to(LOW).float()).to(LOW)
    return a @ b


def f32(x):
    return x.float() if LOW else x


def low(x):
    """An activation stored in 16 bits."""
    return x.to(LOW) if LOW else x


# fp8 (--fp8 HISTORY): bf16 as above but for the linear layers' GEMMs, Transformer
# Engine's delayed scaling as colossalc compiles it (ir/ops.def): each operand quantized
# to e4m3 with its own scale, the output's gradient to e5m2 with a third; a scale is
# 448 (57344) / the largest amax of the last HISTORY steps, 1 before any; the GEMMs sum
# the quantized values in f32 and divide by the two scales. Rounding is numpy's
# ml_dtypes (PyPI) after saturating to the largest finite value. --fp8-head (after
# --fp8 HISTORY): the classifier's GEMM too (colossalc --fp8-classifier).
FP8 = None
FP8_HEAD = False


class Fp8State:
    def __init__(self, fmax):
        self.fmax, self.amax, self.cur, self.hist = fmax, 0.0, 0.0, None

    def scale(self):
        if self.amax == 0:
            return np.float32(1)
        return np.float32(self.fmax) / np.float32(self.amax)

    def quantize(self, x):
        """x's values on the scaled grid (q / s) and s; records max |x|."""
        xf = x.detach().float()
        self.cur = max(self.cur, float(xf.abs().max()))
        s = self.scale()
        v = np.clip(xf.numpy() * s, -self.fmax, self.fmax)  # f32 product, saturated
        kind = ml_dtypes.float8_e4m3fn if self.fmax == 448 else ml_dtypes.float8_e5m2
        return torch.from_numpy(v.astype(kind).astype(np.float32)), s

    def end_step(self, t):
        if self.hist is None:
            self.hist = [0.0] * FP8
        self.hist[t % FP8] = self.cur
        self.amax, self.cur = max(self.hist), 0.0


class Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, states):
        qx, sx = states[0].quantize(x)
        qw, sw = states[1].quantize(w)
        ctx.save_for_backward(qx, qw)
        ctx.s, ctx.states = (sx, sw), states
        return ((qx.reshape(-1, qx.shape[-1]) @ qw) / torch.tensor(sx * sw)).reshape(*x.shape[:-1], -1).to(torch.bfloat16)

    @staticmethod
    def backward(ctx, g):
        qx, qw = ctx.saved_tensors
        (sx, sw), st = ctx.s, ctx.states
        qg, sg = st[2].quantize(g)
        q2 = qg.reshape(-1, qg.shape[-1])
        dx = ((q2 @ qw.t()) / torch.tensor(sg * sw)).reshape(qx.shape)
        dw = (qx.reshape(-1, qx.shape[-1]).t() @ q2) / torch.tensor(sx * sg)
        return dx, dw, None  # autograd casts dx to x's dtype, as colossalc's straight-through rule


STATES = {}


def linear(x, w, name):
    if not FP8:
        return mm(x, w)
    st = STATES.setdefault(name, [Fp8State(448), Fp8State(448), Fp8State(57344)])
    return Fp8Linear.apply(x, w, st)


def forward(p, tokens, targets, heads, layers):
    B, T = tokens.shape
    d = p["wte.weight"].shape[1]
    x = low(p["wte.weight"][tokens]) + low(p["wpe.weight"][torch.arange(T)])
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(layers):
        h = f"h.{i}."
        y = low(F.layer_norm(f32(x), (d,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5))
        qkv = low(linear(y, p[h + "attn.c_attn.weight"], h + "c_attn") + p[h + "attn.c_attn.bias"])
        q, k, v = qkv.split(d, dim=2)
        q, k, v = (f32(t).view(B, T, heads, d // heads).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads)
        s = s.masked_fill(~mask, float("-inf"))
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d)
        x = x + low(linear(y, p[h + "attn.c_proj.weight"], h + "attn.c_proj") + p[h + "attn.c_proj.bias"])
        y = low(F.layer_norm(f32(x), (d,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5))
        y = low(linear(y, p[h + "mlp.c_fc.weight"], h + "c_fc") + p[h + "mlp.c_fc.bias"])
        y = low(F.gelu(f32(y), approximate="tanh"))  # computed in f32, as the kernels do
        x = x + low(linear(y, p[h + "mlp.c_proj.weight"], h + "mlp.c_proj") + p[h + "mlp.c_proj.bias"])
    x = low(F.layer_norm(f32(x), (d,), p["ln_f.weight"], p["ln_f.bias"], 1e-5))
    logits = linear(x, p["wte.weight"].t(), "lm_head") if FP8_HEAD else mm(x, p["wte.weight"].t())
    return F.cross_entropy(f32(logits).view(-1, logits.shape[-1]), targets.reshape(-1))


class Lamb:
    """LAMB (You et al. 2020) as ColossalAI's Lamb computes it: Adam's moments with bias
    correction, u = m^ / (sqrt(v^) + eps) + wd w, and each parameter's step lr r u scaled by
    its trust ratio r = |w| / |u| (1 where either norm is 0)."""

    def __init__(self, groups, lr, betas, eps):
        self.groups, self.lr, self.betas, self.eps, self.t = groups, lr, betas, eps, 0
        self.state = {id(p): (torch.zeros_like(p), torch.zeros_like(p)) for g in groups for p in g["params"]}

    def zero_grad(self):
        for g in self.groups:
            for p in g["params"]:
                p.grad = None

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.betas
        for g in self.groups:
            for p in g["params"]:
                m, v = self.state[id(p)]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                u = (m / (1 - b1**self.t)) / ((v / (1 - b2**self.t)).sqrt() + self.eps) + g["weight_decay"] * p
                wn, un = p.norm().item(), u.norm().item()
                r = wn / un if wn > 0 and un > 0 else 1.0
                p.sub_(self.lr * r * u)


def main():
    global LOW, FP8, FP8_HEAD, ml_dtypes
    scale = None  # --fp16 [--scale S]: dynamic loss scaling as torch.cuda.amp.GradScaler (init S)
    lamb = sys.argv[1] == "--lamb"
    if lamb:
        del sys.argv[1]
    if sys.argv[1] == "--bf16":
        LOW = torch.bfloat16
        del sys.argv[1]
    if sys.argv[1] == "--fp8":
        import ml_dtypes
        LOW, FP8 = torch.bfloat16, int(sys.argv[2])
        del sys.argv[1:3]
        if sys.argv[1] == "--fp8-head":
            FP8_HEAD = True
            del sys.argv[1]
    if sys.argv[1] == "--fp16":
        LOW, scale = torch.float16, 65536.0
        del sys.argv[1]
        if sys.argv[1] == "--scale":
            scale = float(sys.argv[2])
            del sys.argv[1:3]
    tok_path, out = sys.argv[1], sys.argv[2]
    vocab, ctx, d, heads, layers, B, T, steps = (int(a) for a in sys.argv[3:11])
    lr = float(sys.argv[11])
    tokens = read_tokens(tok_path)
    gen = torch.Generator().manual_seed(1234)
    p = make_params(vocab, ctx, d, layers, gen)
    write_safetensors(f"{out}/init.safetensors", p)
    decay = [t for t in p.values() if t.dim() >= 2]
    no_decay = [t for t in p.values() if t.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    opt = (Lamb if lamb else torch.optim.AdamW)(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses, skipped, good = [], 0, 0
    n = len(tokens)
    for step in range(steps):
        start = step * B * T
        chunk = torch.tensor([tokens[(start + i) % n] for i in range(B * T + 1)])
        x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
        opt.zero_grad()
        loss = forward(p, x, y, heads, layers)
        losses.append(loss.item())
        if scale is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
            opt.step()
            for st in STATES.values():  # the step's end: t is the 1-based step
                for x in st:
                    x.end_step(step + 1)
            continue
        (loss * scale).backward()  # GradScaler: scale, unscale, skip on inf/NaN, update
        if not all(torch.isfinite(t.grad).all() for t in p.values()):
            scale, good, skipped = scale * 0.5, 0, skipped + 1
            continue
        for t in p.values():
            t.grad /= scale
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        opt.step()
        good += 1
        if good == 2000:
            scale, good = scale * 2, 0
    write_safetensors(f"{out}/ref.safetensors", p)
    json.dump({"losses": losses, "skipped": skipped}, open(f"{out}/ref.json", "w"))
    print("reference losses:", " ".join(f"{l:.6f}" for l in losses))


if __name__ == "__main__":
    main()
