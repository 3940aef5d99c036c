"""PyTorch reference for tests/unit/test_interp_torch.c: the interpreter's forward
numerics of the tricky ops (and a few gradient ops) against torch in float64.

Usage: /usr/bin/python3 test_interp_torch.py OUT.txt  (Debian's python3-torch)

For each case named like one of the C test's cases, writes the inputs (named like the
IR's `input` nodes) and the expected output `out`:

    case NAME
    tensor NAME COUNT v1 ... vCOUNT
    ...
    end

Inputs are drawn from a seeded generator; torch computes in float64 (casts: from
float32-exact values, so torch's double->float->bf16/f16 path rounds once, like the
interpreter). Attention and rotary are written out by hand, the rotary as Hugging
Face's LLaMA rotate_half.
"""
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

rng = np.random.default_rng(20240601)
D64 = torch.float64


def normal(*shape, std=1.0, mean=0.0):
    return torch.from_numpy(rng.normal(mean, std, size=shape)).to(D64)


def ints(values, shape):
    return torch.tensor(values, dtype=torch.int64).reshape(shape)


def f32_exact(values):
    return torch.tensor(np.array(values, dtype=np.float32).astype(np.float64))


def grad_of(f, x, g, *rest):
    x = x.clone().requires_grad_(True)
    f(x, *rest).backward(g)
    return x.grad


def rotary_hf(x, heads, theta, inverse):
    *lead, S, D = x.shape
    hd = D // heads
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=D64) / hd))
    freqs = torch.outer(torch.arange(S, dtype=D64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    if inverse:
        sin = -sin
    xh = x.reshape(*lead, S, heads, hd)
    rot = torch.cat((-xh[..., hd // 2:], xh[..., : hd // 2]), dim=-1)
    return (xh * cos + rot * sin).reshape(x.shape)


def attention(q, k, v, heads, causal, scale=None):
    B, S, Fd = q.shape
    T, hd = k.shape[1], Fd // heads
    if scale is None:
        scale = 1 / math.sqrt(hd)
    split = lambda t, L: t.reshape(B, L, heads, hd).transpose(1, 2)
    s = split(q, S) @ split(k, T).transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(S, T, dtype=torch.bool).triu(T - S + 1), -math.inf)
    return (s.softmax(-1) @ split(v, T)).transpose(1, 2).reshape(B, S, Fd)


def causal_softmax(x):
    S, T = x.shape[-2:]
    return x.masked_fill(torch.ones(S, T, dtype=torch.bool).triu(T - S + 1), -math.inf).softmax(-1)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def cross_entropy(x, t, ignore):
    if not (t != ignore).any():
        return torch.zeros((), dtype=D64)  # colossalc's convention; torch gives nan
    return F.cross_entropy(x.reshape(-1, x.shape[-1]), t.reshape(-1), ignore_index=ignore)


def case_list():
    c = {}
    a = normal(4, 7, std=3)
    c["gelu"] = dict(a=a, out=F.gelu(a, approximate="tanh"))
    a = normal(4, 7, std=3)
    c["silu"] = dict(a=a, out=F.silu(a))
    x, w, b = normal(3, 5, 16, std=2, mean=0.5), normal(16), normal(16)
    c["layernorm"] = dict(x=x, w=w, b=b, out=F.layer_norm(x, (16,), w, b, 1e-5))
    x, w, b = normal(4, 6, std=0.1), normal(6), normal(6)
    c["layernorm_eps"] = dict(x=x, w=w, b=b, out=F.layer_norm(x, (6,), w, b, 0.1))
    x, w = normal(3, 16, std=2), normal(16)
    c["rmsnorm"] = dict(x=x, w=w, out=rmsnorm(x, w, 1e-6))
    a = normal(3, 7, std=4)
    c["softmax"] = dict(a=a, out=a.softmax(-1))
    a = normal(2, 5, 3, std=4)
    c["softmax_axis1"] = dict(a=a, out=a.softmax(1))
    a = normal(2, 4, 6, std=4)
    c["softmax_causal"] = dict(a=a, out=causal_softmax(a))
    x = normal(2, 5, 7, std=3)
    t = ints([1, 6, -1, 0, 3, 2, -1, 6, 5, 4], (2, 5))
    c["cross_entropy"] = dict(x=x, t=t, out=cross_entropy(x, t, -1))
    x = normal(6, 4, std=3)
    t = ints([2, 0, 2, 3, 1, 2], (6,))
    c["cross_entropy_ignore2"] = dict(x=x, t=t, out=cross_entropy(x, t, 2))
    x = normal(3, 4)
    t = ints([-1, -1, -1], (3,))
    c["cross_entropy_none"] = dict(x=x, t=t, out=cross_entropy(x, t, -1))
    q, k, v = normal(2, 5, 16), normal(2, 5, 16), normal(2, 5, 16)
    c["attention_causal"] = dict(q=q, k=k, v=v, out=attention(q, k, v, 4, True))
    q, k, v = normal(2, 3, 8), normal(2, 6, 8), normal(2, 6, 8)
    c["attention_cross"] = dict(q=q, k=k, v=v, out=attention(q, k, v, 2, False, 0.3))
    x = normal(2, 6, 16)
    c["rotary"] = dict(x=x, out=rotary_hf(x, 2, 10000.0, False))
    x = normal(5, 8)
    c["rotary_inverse"] = dict(x=x, out=rotary_hf(x, 1, 500.0, True))
    a, b = normal(2, 1, 4, 3), normal(3, 5, 4)
    c["matmul_bcast_tt"] = dict(a=a, b=b, out=a.transpose(-1, -2) @ b.transpose(-1, -2))
    a, b = normal(2, 3, 4), normal(4, 5)
    c["matmul_batched_2d"] = dict(a=a, b=b, out=a @ b)
    tab, idx = normal(7, 5), ints([3, 6, 0, 3, 1, 1, 6, 2], (2, 4))
    c["embedding"] = dict(tab=tab, idx=idx, out=F.embedding(idx, tab))
    special = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2**-130, 3 * 2**-134, 3.0e38, 3.4028234663852886e38,
               0.1, -0.3, 1e-40, 0.0, 12345.678]
    x = f32_exact(special + list(rng.normal(0, 100, size=8)))
    c["cast_bf16"] = dict(x=x, out=x.to(torch.bfloat16).to(D64))
    special = [65519.0, 65520.0, -65520.0, 1e-7, 2**-25, 3 * 2**-25, 1 + 2**-11, 1 + 3 * 2**-11, 6.1e-5, 0.1, -2.5]
    x = f32_exact(special + list(rng.normal(0, 100, size=8)))
    c["cast_f16"] = dict(x=x, out=x.to(torch.float16).to(D64))
    x = f32_exact([-2.7, 2.7, -0.5, 0.5, 1e5, -123456.75, 0.0, 7.0])
    c["cast_i32"] = dict(x=x, out=x.to(torch.int32).to(D64))
    x = normal(3, 8)
    c["sum_keepdim"] = dict(x=x, out=x.sum(1, keepdim=True))
    x, g = normal(4, 7, std=3), normal(4, 7)
    c["gelu_grad"] = dict(x=x, g=g, out=grad_of(lambda t: F.gelu(t, approximate="tanh"), x, g))
    c["silu_grad"] = dict(x=x, g=g, out=grad_of(F.silu, x, g))
    x, w, g = normal(3, 8, std=2, mean=0.3), normal(8), normal(3, 8)
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    br = torch.zeros(8, dtype=D64, requires_grad=True)
    F.layer_norm(xr, (8,), wr, br, 1e-5).backward(g)
    for which, grad in enumerate([xr.grad, wr.grad, br.grad]):
        c[f"layernorm_grad{which}"] = dict(x=x, w=w, g=g, out=grad)
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    rmsnorm(xr, wr, 1e-6).backward(g)
    for which, grad in enumerate([xr.grad, wr.grad]):
        c[f"rmsnorm_grad{which}"] = dict(x=x, w=w, g=g, out=grad)
    x, g = normal(2, 3, 5, std=2), normal(2, 3, 5)
    c["softmax_grad"] = dict(y=x.softmax(1), g=g, out=grad_of(lambda t: t.softmax(1), x, g))
    x, g = normal(2, 5, 7, std=3), torch.tensor(0.7, dtype=D64)
    t = ints([1, 6, -1, 0, 3, 2, -1, 6, 5, 4], (2, 5))
    c["cross_entropy_grad"] = dict(x=x, t=t, g=g, out=grad_of(lambda u: cross_entropy(u, t, -1), x, g))
    x, g = normal(4, 7, std=3), normal(4, 7)
    c["gelu_erf"] = dict(a=x, out=F.gelu(x))
    c["gelu_erf_grad"] = dict(x=x, g=g, out=grad_of(F.gelu, x, g))
    return c


def main():
    with open(sys.argv[1], "w") as f:
        for name, tensors in case_list().items():
            f.write(f"case {name}\n")
            for tname, t in tensors.items():
                vals = t.detach().to(D64).reshape(-1).tolist()
                f.write(f"tensor {tname} {len(vals)} " + " ".join(repr(float(v)) for v in vals) + "\n")
            f.write("end\n")


if __name__ == "__main__":
    main()
