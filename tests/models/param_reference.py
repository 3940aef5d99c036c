#!/usr/bin/python3
"""Reference parameter counts for the models in models/, computed outside colossalc.

Each model is rebuilt from torch.nn layers (nn.Embedding, nn.Linear, nn.LayerNorm,
nn.Conv2d) the way its original code base builds it: Hugging Face GPT-2,
LlamaForCausalLM and BertForMaskedLM, timm's VisionTransformer. The configurations
are written out here from the published configs, not read from the .model files.
Module attribute names follow the checkpoints, so named_parameters() gives the
checkpoint names. Tied weights are one nn.Parameter shared by two modules, which
parameters() yields once. Everything is built on the meta device: shapes without
storage, so GPT-3 175B costs no memory.

    /usr/bin/python3 tests/models/param_reference.py            # MODEL PARAMS lines
    /usr/bin/python3 tests/models/param_reference.py --json     # one JSON object
    /usr/bin/python3 tests/models/param_reference.py --shapes llama   # NAME [dims] lines
    /usr/bin/python3 tests/models/param_reference.py --check build/colossalc

--check compiles each models/MODEL.model with the given colossalc and compares its
parameters (names, shapes and the --summary total) with the reference; it exits 1 on
any difference.

Run it with /usr/bin/python3 (Debian's python3-torch).
"""
import argparse
import json
import os
import re
import subprocess
import sys

import torch
from torch import nn

DEV = torch.device("meta")


def tree(**children):
    """A module that only holds named children (a level of the checkpoint's names)."""
    m = nn.Module()
    for name, child in children.items():
        setattr(m, name, child)
    return m


def param(*shape):
    return nn.Parameter(torch.empty(*shape, device=DEV))


def linear(n_in, n_out, bias=True):
    return nn.Linear(n_in, n_out, bias=bias, device=DEV)


def layernorm(d, eps):
    return nn.LayerNorm(d, eps=eps, device=DEV)


def embedding(rows, d):
    return nn.Embedding(rows, d, device=DEV)


class Conv1D(nn.Module):
    """Hugging Face GPT-2's projection: weight [in, out], bias [out]."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = param(n_in, n_out)
        self.bias = param(n_out)


class RMSNorm(nn.Module):
    """LLaMA's RMSNorm: a weight, no bias (torch 1.13 has no nn.RMSNorm)."""

    def __init__(self, d):
        super().__init__()
        self.weight = param(d)


def gpt2(vocab, ctx, d, layers):
    """Hugging Face GPT2LMHeadModel's transformer, with the head tied to wte."""
    def block():
        return tree(ln_1=layernorm(d, 1e-5),
                    attn=tree(c_attn=Conv1D(d, 3 * d), c_proj=Conv1D(d, d)),
                    ln_2=layernorm(d, 1e-5),
                    mlp=tree(c_fc=Conv1D(d, 4 * d), c_proj=Conv1D(4 * d, d)))
    m = tree(wte=embedding(vocab, d), wpe=embedding(ctx, d),
             h=nn.ModuleList(block() for _ in range(layers)),
             ln_f=layernorm(d, 1e-5), lm_head=linear(d, vocab, bias=False))
    m.lm_head.weight = m.wte.weight
    return m


def llama(vocab, d, layers, ffn):
    """Hugging Face LlamaForCausalLM: no biases, untied lm_head."""
    def layer():
        return tree(self_attn=tree(q_proj=linear(d, d, False), k_proj=linear(d, d, False),
                                   v_proj=linear(d, d, False), o_proj=linear(d, d, False)),
                    mlp=tree(gate_proj=linear(d, ffn, False), up_proj=linear(d, ffn, False),
                             down_proj=linear(ffn, d, False)),
                    input_layernorm=RMSNorm(d), post_attention_layernorm=RMSNorm(d))
    return tree(model=tree(embed_tokens=embedding(vocab, d),
                           layers=nn.ModuleList(layer() for _ in range(layers)),
                           norm=RMSNorm(d)),
                lm_head=linear(d, vocab, bias=False))


def bert_mlm(vocab, ctx, types, d, layers, ffn, eps):
    """Hugging Face BertForMaskedLM (no pooler): decoder weight tied to the word
    embeddings, decoder bias the same parameter as cls.predictions.bias."""
    def layer():
        return tree(attention=tree(**{"self": tree(query=linear(d, d), key=linear(d, d), value=linear(d, d)),
                                      "output": tree(dense=linear(d, d), LayerNorm=layernorm(d, eps))}),
                    intermediate=tree(dense=linear(d, ffn)),
                    output=tree(dense=linear(ffn, d), LayerNorm=layernorm(d, eps)))
    bert = tree(embeddings=tree(word_embeddings=embedding(vocab, d), position_embeddings=embedding(ctx, d),
                                token_type_embeddings=embedding(types, d), LayerNorm=layernorm(d, eps)),
                encoder=tree(layer=nn.ModuleList(layer() for _ in range(layers))))
    predictions = tree(transform=tree(dense=linear(d, d), LayerNorm=layernorm(d, eps)),
                       decoder=linear(d, vocab))
    predictions.bias = predictions.decoder.bias
    predictions.decoder.weight = bert.embeddings.word_embeddings.weight
    return tree(bert=bert, cls=tree(predictions=predictions))


class ViT(nn.Module):
    """timm's VisionTransformer (class token, learned positions, pre-LN blocks)."""

    def __init__(self, image, patch, d, layers, mlp, classes, eps):
        super().__init__()
        patches = (image // patch) ** 2
        self.cls_token = param(1, 1, d)
        self.pos_embed = param(1, patches + 1, d)
        self.patch_embed = tree(proj=nn.Conv2d(3, d, patch, stride=patch, device=DEV))
        self.blocks = nn.ModuleList(
            tree(norm1=layernorm(d, eps), attn=tree(qkv=linear(d, 3 * d), proj=linear(d, d)),
                 norm2=layernorm(d, eps), mlp=tree(fc1=linear(d, mlp), fc2=linear(mlp, d)))
            for _ in range(layers))
        self.norm = layernorm(d, eps)
        self.head = linear(d, classes)


# model file stem -> the reference module, in the published configuration
MODELS = {
    "gpt2": lambda: gpt2(vocab=50257, ctx=1024, d=768, layers=12),
    "gpt2-tiny": lambda: gpt2(vocab=256, ctx=256, d=128, layers=4),
    "gpt3": lambda: gpt2(vocab=50257, ctx=2048, d=12288, layers=96),
    "llama": lambda: llama(vocab=32000, d=4096, layers=32, ffn=11008),
    "bert": lambda: bert_mlm(vocab=30522, ctx=512, types=2, d=768, layers=12, ffn=3072, eps=1e-12),
    "vit": lambda: ViT(image=224, patch=32, d=768, layers=12, mlp=3072, classes=1000, eps=1e-6),
}


def count(module):
    return sum(p.numel() for p in module.parameters())  # a shared parameter once


def shapes(module):
    return {name: list(p.shape) for name, p in module.named_parameters()}


def colossalc_params(colossalc, model):
    """The parameters colossalc declares for models/MODEL.model, and its total."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", model + ".model")
    ir = subprocess.run([colossalc, path, "--dump-ir"], check=True, capture_output=True, text=True).stdout
    summary = subprocess.run([colossalc, path, "--summary"], check=True, capture_output=True, text=True).stdout
    params = {m[1]: [int(x) for x in m[2].split(",")]
              for m in re.finditer(r"^%\d+ = param (\S+) .*?: \w+\[([\d, ]+)\]", ir, re.M)}
    return params, int(re.search(r"^parameters: (\d+)$", summary, re.M)[1])


def check(colossalc):
    ok = True
    for model, build in MODELS.items():
        ref = build()
        want, want_total = shapes(ref), count(ref)
        got, got_total = colossalc_params(colossalc, model)
        for name in sorted(want.keys() | got.keys()):
            if want.get(name) != got.get(name):
                print(f"{model}: {name}: reference {want.get(name)}, colossalc {got.get(name)}")
                ok = False
        if got_total != want_total:
            print(f"{model}: --summary says {got_total} parameters, the reference {want_total}")
            ok = False
        print(model, want_total, "ok" if got == want and got_total == want_total else "MISMATCH")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object {model: params}")
    ap.add_argument("--shapes", metavar="MODEL", choices=sorted(MODELS),
                    help="print each parameter of MODEL as NAME [dims]")
    ap.add_argument("--check", metavar="COLOSSALC", help="compare with what this colossalc builds")
    args = ap.parse_args()
    if args.check:
        sys.exit(0 if check(args.check) else 1)
    if args.shapes:
        for name, dims in shapes(MODELS[args.shapes]()).items():
            print(name, dims)
        return
    counts = {name: count(build()) for name, build in MODELS.items()}
    if args.json:
        json.dump(counts, sys.stdout, indent=1)
        print()
    else:
        for name, n in counts.items():
            print(name, n)


if __name__ == "__main__":
    main()
