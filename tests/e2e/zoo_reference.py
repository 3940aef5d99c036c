#!/usr/bin/env python3
"""PyTorch references for the zoo's end-to-end tests (run by Debian's python3-torch):
models/bert.model, models/vit.model and models/llama.model written out as plain torch
code, op for op as the model files say and ir/interp.h defines the ops, in float32:

  bert   BertForMaskedLM without the pooler: word + position + token-type embeddings,
         layernorm (eps 1e-12); post-LN layers (self-attention, bidirectional; dense,
         residual, layernorm; intermediate GELU, dense, residual, layernorm); the MLM
         head (dense, GELU, layernorm, the decoder tied to the word embeddings, plus its
         bias); cross-entropy over the targets that are not -1
  vit    timm's vit_base_patch32_224 shape: the patches (channel, row, column order) times
         the Conv2d weight as a matmul, plus its bias; the class token before them, the
         position embeddings added; pre-LN blocks (qkv as one linear sliced in three,
         attention, proj; fc1, GELU, fc2), layernorm (eps 1e-6), the head on the class
         token; cross-entropy over the labels
  llama  LlamaForCausalLM: RMSNorm (eps 1e-5), rotary q and k (theta 10000, HF's
         rotate_half), causal attention, SwiGLU, final RMSNorm, an untied head;
         cross-entropy over the next tokens
GELU is the tanh form, dropout is off (the tests compile with pdrop = 0). The parameters
start from random values (norms 1 + 0.1 N(0,1) and biases 0.1 N(0,1), so every gradient
matters), written to init.safetensors by their checkpoint names; then STEPS AdamW steps
(betas 0.9, 0.95, eps 1e-8, decay 0.1 on tensors of 2 or more dimensions, the global norm
clipped to 1, constant lr) on the rows `train` reads in order: step k takes rows k*B to
k*B+B-1 of the data (records modulo their count; a token file's B*T+1 tokens from k*B*T).
ref.json gets each step's loss (before its update) and ref.safetensors the parameters
after, in tests/e2e/compare.py's format.

usage: zoo_reference.py bert DATADIR OUT layers d heads ffn ctx batch steps lr vocab
       zoo_reference.py vit DATADIR OUT layers d heads mlp_dim patch batch steps lr classes
       zoo_reference.py llama TOKENS.bin OUT layers d heads ffn seq batch steps lr vocab
(bert: DATADIR holds tokens.npy, token_types.npy and targets.npy; vit: images.npy and
labels.npy, the channels and image size theirs)."""
import json, math, os, sys
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import read_tokens, write_safetensors  # noqa: E402

torch.set_num_threads(2)


def rand(gen, *shape, std=0.02):
    return torch.randn(*shape, generator=gen) * std


def norm_params(p, name, d, gen, bias=True):
    p[name + ".weight"] = 1 + 0.1 * torch.randn(d, generator=gen)
    if bias:
        p[name + ".bias"] = 0.1 * torch.randn(d, generator=gen)


def linear_params(p, name, n_in, n_out, gen, bias=True):
    p[name + ".weight"] = rand(gen, n_out, n_in)
    if bias:
        p[name + ".bias"] = 0.02 * torch.randn(n_out, generator=gen)


def linear(p, name, x, bias=True):
    y = x @ p[name + ".weight"].t()
    return y + p[name + ".bias"] if bias else y


def attention(q, k, v, heads, causal=False):
    """ir/interp.h's attention on [B, S, H*hd]: softmax(q k^T / sqrt(hd)) v per head."""
    B, S, D = q.shape
    hd = D // heads
    q, k, v = (t.view(B, S, heads, hd).transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-2, -1) / math.sqrt(hd)
    if causal:
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf"))
    return (s.softmax(-1) @ v).transpose(1, 2).reshape(B, S, D)


def gelu(x):
    return F.gelu(x, approximate="tanh")


# ---- BERT -------------------------------------------------------------------------------

def bert_params(vocab, ctx, types, d, layers, ffn, gen):
    e = "bert.embeddings."
    p = {e + "word_embeddings.weight": rand(gen, vocab, d), e + "position_embeddings.weight": rand(gen, ctx, d),
         e + "token_type_embeddings.weight": rand(gen, types, d)}
    norm_params(p, e + "LayerNorm", d, gen)
    for i in range(layers):
        h = f"bert.encoder.layer.{i}."
        for name in ("query", "key", "value"):
            linear_params(p, h + "attention.self." + name, d, d, gen)
        linear_params(p, h + "attention.output.dense", d, d, gen)
        norm_params(p, h + "attention.output.LayerNorm", d, gen)
        linear_params(p, h + "intermediate.dense", d, ffn, gen)
        linear_params(p, h + "output.dense", ffn, d, gen)
        norm_params(p, h + "output.LayerNorm", d, gen)
    c = "cls.predictions."
    p[c + "bias"] = 0.02 * torch.randn(vocab, generator=gen)
    linear_params(p, c + "transform.dense", d, d, gen)
    norm_params(p, c + "transform.LayerNorm", d, gen)
    return p


def bert_forward(p, batch, heads, layers):
    tokens, types, targets = batch
    S = tokens.shape[1]
    e = "bert.embeddings."
    ln = lambda x, n: F.layer_norm(x, (x.shape[-1],), p[n + ".weight"], p[n + ".bias"], 1e-12)
    x = p[e + "word_embeddings.weight"][tokens] + p[e + "position_embeddings.weight"][torch.arange(S)] \
        + p[e + "token_type_embeddings.weight"][types]
    x = ln(x, e + "LayerNorm")
    for i in range(layers):
        h = f"bert.encoder.layer.{i}."
        a = h + "attention."
        y = attention(*(linear(p, a + "self." + n, x) for n in ("query", "key", "value")), heads)
        x = ln(x + linear(p, a + "output.dense", y), a + "output.LayerNorm")
        y = gelu(linear(p, h + "intermediate.dense", x))
        x = ln(x + linear(p, h + "output.dense", y), h + "output.LayerNorm")
    c = "cls.predictions."
    y = ln(gelu(linear(p, c + "transform.dense", x)), c + "transform.LayerNorm")
    logits = y @ p[e + "word_embeddings.weight"].t() + p[c + "bias"]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)


# ---- ViT --------------------------------------------------------------------------------

def vit_params(classes, channels, patch, patches, d, layers, mlp, gen):
    p = {"cls_token": rand(gen, 1, 1, d), "pos_embed": rand(gen, 1, patches + 1, d),
         "patch_embed.proj.weight": rand(gen, d, channels, patch, patch),
         "patch_embed.proj.bias": 0.02 * torch.randn(d, generator=gen)}
    for i in range(layers):
        b = f"blocks.{i}."
        norm_params(p, b + "norm1", d, gen)
        linear_params(p, b + "attn.qkv", d, 3 * d, gen)
        linear_params(p, b + "attn.proj", d, d, gen)
        norm_params(p, b + "norm2", d, gen)
        linear_params(p, b + "mlp.fc1", d, mlp, gen)
        linear_params(p, b + "mlp.fc2", mlp, d, gen)
    norm_params(p, "norm", d, gen)
    linear_params(p, "head", d, classes, gen)
    return p


def vit_forward(p, batch, heads, layers):
    images, labels = batch
    B, C, I, _ = images.shape
    d, P = p["cls_token"].shape[-1], p["patch_embed.proj.weight"].shape[-1]
    G = I // P
    ln = lambda x, n: F.layer_norm(x, (d,), p[n + ".weight"], p[n + ".bias"], 1e-6)
    x = images.reshape(B, C, G, P, G, P).permute(0, 2, 4, 1, 3, 5).reshape(B, G * G, C * P * P)
    x = x @ p["patch_embed.proj.weight"].reshape(d, C * P * P).t() + p["patch_embed.proj.bias"]
    x = torch.cat([p["cls_token"].expand(B, 1, d), x], dim=1) + p["pos_embed"]
    for i in range(layers):
        b = f"blocks.{i}."
        qkv = linear(p, b + "attn.qkv", ln(x, b + "norm1"))
        x = x + linear(p, b + "attn.proj", attention(qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:], heads))
        x = x + linear(p, b + "mlp.fc2", gelu(linear(p, b + "mlp.fc1", ln(x, b + "norm2"))))
    logits = linear(p, "head", ln(x, "norm")[:, 0])
    return F.cross_entropy(logits, labels)


# ---- LLaMA ------------------------------------------------------------------------------

def llama_params(vocab, d, layers, ffn, gen):
    p = {"model.embed_tokens.weight": rand(gen, vocab, d), "lm_head.weight": rand(gen, vocab, d)}
    for i in range(layers):
        h = f"model.layers.{i}."
        norm_params(p, h + "input_layernorm", d, gen, bias=False)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            linear_params(p, h + "self_attn." + name, d, d, gen, bias=False)
        norm_params(p, h + "post_attention_layernorm", d, gen, bias=False)
        linear_params(p, h + "mlp.gate_proj", d, ffn, gen, bias=False)
        linear_params(p, h + "mlp.up_proj", d, ffn, gen, bias=False)
        linear_params(p, h + "mlp.down_proj", ffn, d, gen, bias=False)
    norm_params(p, "model.norm", d, gen, bias=False)
    return p


def rmsnorm(x, w):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w


def rotary(x, heads, theta=10000.0):
    """ir/interp.h's rotary: per head, i < hd/2 rotated with x[i + hd/2] by s theta^(-2i/hd)."""
    B, S, D = x.shape
    hd = D // heads
    ang = torch.arange(S, dtype=torch.float64)[:, None] * theta ** (-2 * torch.arange(hd // 2, dtype=torch.float64) / hd)
    cos, sin = ang.cos().float(), ang.sin().float()
    x = x.view(B, S, heads, hd)
    a, b = x[..., :hd // 2], x[..., hd // 2:]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).reshape(B, S, D)


def llama_forward(p, batch, heads, layers):
    tokens, targets = batch
    x = p["model.embed_tokens.weight"][tokens]
    for i in range(layers):
        h = f"model.layers.{i}."
        a = h + "self_attn."
        y = rmsnorm(x, p[h + "input_layernorm.weight"])
        q = rotary(linear(p, a + "q_proj", y, False), heads)
        k = rotary(linear(p, a + "k_proj", y, False), heads)
        x = x + linear(p, a + "o_proj", attention(q, k, linear(p, a + "v_proj", y, False), heads, causal=True), False)
        y = rmsnorm(x, p[h + "post_attention_layernorm.weight"])
        m = h + "mlp."
        x = x + linear(p, m + "down_proj", F.silu(linear(p, m + "gate_proj", y, False)) * linear(p, m + "up_proj", y, False), False)
    logits = rmsnorm(x, p["model.norm.weight"]) @ p["lm_head.weight"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ---- data and training ------------------------------------------------------------------

def record_batches(arrays, B):
    """Step k's rows k*B .. k*B+B-1, modulo the records (runtime/io/records.h, in order)."""
    n = len(arrays[0])
    def batch(k):
        rows = [(k * B + b) % n for b in range(B)]
        return tuple(torch.from_numpy(a[rows]).long() if a.dtype.kind in "iu" else torch.from_numpy(a[rows])
                     for a in arrays)
    return batch


def token_batches(tokens, B, T):
    """Step k's B*T+1 tokens from k*B*T, wrapping (runtime/io/tokens.h, in order)."""
    n = len(tokens)
    def batch(k):
        chunk = torch.tensor([tokens[(k * B * T + i) % n] for i in range(B * T + 1)])
        return chunk[:-1].view(B, T), chunk[1:].view(B, T)
    return batch


def setup(model, data, layers, d, heads, ffn, size, B, classes, gen):
    """The initial parameters, the loss and the batches of MODEL (size: bert's positions,
    vit's patch side, llama's sequence; classes: the vocabulary or the classes)."""
    if model == "bert":
        arrays = [np.load(f"{data}/{n}.npy") for n in ("tokens", "token_types", "targets")]
        return bert_params(classes, size, 2, d, layers, ffn, gen), bert_forward, record_batches(arrays, B)
    if model == "vit":
        arrays = [np.load(f"{data}/{n}.npy") for n in ("images", "labels")]
        channels, image = arrays[0].shape[1], arrays[0].shape[2]
        p = vit_params(classes, channels, size, (image // size) ** 2, d, layers, ffn, gen)
        return p, vit_forward, record_batches(arrays, B)
    return llama_params(classes, d, layers, ffn, gen), llama_forward, token_batches(read_tokens(data), B, size)


def main():
    model, data, out = sys.argv[1:4]
    layers, d, heads, ffn, size, B, steps = (int(a) for a in sys.argv[4:11])
    lr, classes = float(sys.argv[11]), int(sys.argv[12])
    gen = torch.Generator().manual_seed(1234)
    p, forward, batch = setup(model, data, layers, d, heads, ffn, size, B, classes, gen)
    p = {k: v.float().requires_grad_(True) for k, v in p.items()}
    write_safetensors(f"{out}/init.safetensors", p)
    decay = [t for t in p.values() if t.dim() >= 2]
    no_decay = [t for t in p.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for k in range(steps):
        opt.zero_grad()
        loss = forward(p, batch(k), heads, layers)
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        opt.step()
    write_safetensors(f"{out}/ref.safetensors", p)
    json.dump({"losses": losses}, open(f"{out}/ref.json", "w"))
    print(f"{model} reference losses:", " ".join(f"{l:.6f}" for l in losses))


if __name__ == "__main__":
    main()
