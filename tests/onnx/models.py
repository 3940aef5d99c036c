"""The torch models the ONNX import tests export (run by Debian's python3-torch 1.13).

Each takes (tokens, targets), int64 [batch, seq], and returns the mean cross-entropy of
predicting targets, so that the exported graph's one scalar output is the loss and
`train` feeds it from an llm.c token file:

  mlp    an MLP classifier of each token: an embedding, residual blocks of LayerNorm,
         Linear, GELU (the erf form, nn.GELU's default) and Linear, a Linear head on the
         tokens flattened to rows (ONNX's Gemm); the loss as log_softmax + nll_loss
         (ONNX's LogSoftmax + NegativeLogLikelihoodLoss)
  gpt2   GPT-2 as models/gpt2.model writes it (Hugging Face's layout and names:
         Conv1D weights [in, out], tanh GELU, layernorm eps 1e-5, the head tied to
         wte, a causal mask from a bool buffer applied by masked_fill), with labels,
         so that the loss is an output (F.cross_entropy: SoftmaxCrossEntropyLoss)
  llama  a LLaMA-style model (Hugging Face's LlamaForCausalLM names): RMSNorm, rotary
         embeddings from cos and sin tables (rotate_half), an additive causal mask
         from triu, SwiGLU, no biases, an untied head

transformers' GPT2LMHeadModel is not used: its loss shifts the labels inside the model
(logits[:, :-1] against labels[:, 1:]), which neither `train`'s data layout (targets
are the tokens shifted already) nor models/gpt2.model has; this module is the same
network without the shift."""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class MlpBlock(nn.Module):
    """x + fc2(gelu(fc1(norm(x))))"""

    def __init__(self, d, hidden):
        super().__init__()
        self.norm = layer_norm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Mlp(nn.Module):
    def __init__(self, vocab, d, hidden, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([MlpBlock(d, hidden) for _ in range(layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, targets):
        x = self.emb(tokens)
        for block in self.layers:
            x = block(x)
        logp = F.log_softmax(self.head(x.reshape(-1, x.shape[-1])), dim=-1)  # 2-D: a Gemm
        return F.nll_loss(logp, targets.view(-1))


class Conv1D(nn.Module):
    """Hugging Face's GPT-2 projection: x @ weight [in, out] + bias"""

    def __init__(self, n_in, n_out, std):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * std)
        self.bias = nn.Parameter(0.02 * torch.randn(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class GptAttention(nn.Module):
    def __init__(self, d, heads, ctx):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(d, 3 * d, 0.02)
        self.c_proj = Conv1D(d, d, 0.02)
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        w = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)
        w = w.masked_fill(~self.bias[:, :, :T, :T], float("-inf"))
        return self.c_proj((w.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C))


class GptMlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = Conv1D(d, 4 * d, 0.02)
        self.c_proj = Conv1D(4 * d, d, 0.02)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


def layer_norm(d):
    ln = nn.LayerNorm(d, eps=1e-5)
    with torch.no_grad():  # non-trivial norms, so that their gradients matter
        ln.weight.add_(0.1 * torch.randn(d))
        ln.bias.add_(0.1 * torch.randn(d))
    return ln


class GptBlock(nn.Module):
    def __init__(self, d, heads, ctx):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = layer_norm(d), GptAttention(d, heads, ctx), layer_norm(d), GptMlp(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    def __init__(self, vocab, ctx, d, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        with torch.no_grad():
            self.wte.weight.normal_(0, 0.02)
            self.wpe.weight.normal_(0, 0.01)
        self.h = nn.ModuleList([GptBlock(d, heads, ctx) for _ in range(layers)])
        self.ln_f = layer_norm(d)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, d, heads, ctx, theta):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))
        hd = d // heads
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
        f = torch.outer(torch.arange(ctx).float(), inv)
        emb = torch.cat((f, f), -1)
        self.register_buffer("cos_cached", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None], persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = (p(x).view(B, T, self.heads, hd).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        cos, sin = self.cos_cached[:, :, :T], self.sin_cached[:, :, :T]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        w = q @ k.transpose(2, 3) / math.sqrt(hd)
        w = (w + torch.full((T, T), float("-inf")).triu(1)).softmax(-1)
        return self.o_proj((w @ v).transpose(1, 2).reshape(B, T, C))


class LlamaMlp(nn.Module):
    def __init__(self, d, ffn):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, d, heads, ctx, ffn, theta):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)
        self.self_attn, self.mlp = LlamaAttention(d, heads, ctx, theta), LlamaMlp(d, ffn)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, vocab, d, heads, ctx, ffn, layers, theta):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([LlamaLayer(d, heads, ctx, ffn, theta) for _ in range(layers)])
        self.norm = RMSNorm(d)


class Llama(nn.Module):
    def __init__(self, vocab, ctx, d, heads, ffn, layers, theta=10000.0):
        super().__init__()
        self.model = LlamaModel(vocab, d, heads, ctx, ffn, layers, theta)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x)
        logits = self.lm_head(self.model.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def build(kind, sizes):
    if kind == "mlp":
        return Mlp(sizes["vocab"], sizes["d"], sizes["hidden"], sizes["layers"])
    if kind == "gpt2":
        return Gpt2(sizes["vocab"], sizes["ctx"], sizes["d"], sizes["heads"], sizes["layers"])
    if kind == "llama":
        return Llama(sizes["vocab"], sizes["ctx"], sizes["d"], sizes["heads"], sizes["ffn"], sizes["layers"],
                     sizes.get("theta", 10000.0))
    raise ValueError(kind)


def export(model, path, batch, seq, opset, dynamic=False):
    """Training-mode export, every initialiser a parameter (as docs/onnx.md asks)."""
    x = torch.zeros(batch, seq, dtype=torch.int64)
    axes = {"tokens": {0: "batch"}, "targets": {0: "batch"}} if dynamic else None
    torch.onnx.export(model, (x, x), path, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      keep_initializers_as_inputs=False, opset_version=opset, input_names=["tokens", "targets"],
                      output_names=["loss"], dynamic_axes=axes)
