#!/usr/bin/env python3
"""transformers as the outside reference for `train --init-from` and `--save-hf`
(run by /usr/bin/python3: Debian's torch, transformers from PyPI, scripts/setup.sh).

make FAMILY OUT TOKENS.bin LAYOUT DTYPE SHARD STEPS LR
    Random-initialises a small GPT2LMHeadModel, LlamaForCausalLM (llama: LLaMA 2's
    attention; llama3: 2 key/value heads for 4 query heads, theta 500000; llama31: the
    same with LLaMA 3.1's rotary scaling, factor 8 from an original context of 64,
    which transformers 4.40 predates: its rotary frequencies are replaced by those of
    llama3_inv_freq below, transformers' later formula),
    MistralForCausalLM (2 key/value heads, a window of 8 keys in 32) or
    Qwen2ForCausalLM (1 key/value head, q/k/v biases, theta 1e6) (the configs below,
    which the zoo's models are compiled to match: run_hf.sh),
    and writes it to OUT/ckpt as transformers writes it:
      LAYOUT pretrained  save_pretrained(..., max_shard_size=SHARD) ("none": one file)
             hub         one model.safetensors as the hub holds GPT-2 and older LLaMA
                         files: no "transformer." prefix, GPT-2's attn.bias and
                         attn.masked_bias buffers, LLaMA's rotary inv_freq
             tied        (llama) tie_word_embeddings: the file has no lm_head.weight
      DTYPE f32, f16 or bf16: the tensors' dtype in the file
    Then it reloads OUT/ckpt with from_pretrained in float32 (the model `train` starts
    from) and runs STEPS steps of AdamW on the batches `train` reads (docs/train.md:
    step k reads batch x seq + 1 tokens from k x batch x seq), computing each loss from
    transformers' logits, and writes OUT/ref.json (the losses) and OUT/ref_logits.npy
    (the logits after the steps on the next batch).

check OUT TOKENS.bin LOG.jsonl HFDIR [first]
    The first step's loss in `train`'s log against the reference (relative 1e-5), and
    the model `train --save-hf` wrote, loaded by from_pretrained, against the reference
    logits (max |difference| / max |reference| within 1e-5). With "first", only the
    loss (the tied layout: transformers keeps the head tied while `train` trains two).
"""
import json, math, os, sys
import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from gpt2_reference import read_tokens  # noqa: E402  (llm.c's token file)

torch.set_num_threads(2)
B, T = 2, 32  # the compiled batch and seq (run_hf.sh)
TOL = 1e-5


WINDOW = 8  # mistral: the keys a query sees (models/mistral.model --set window=8)


def window_offset():
    """Keys a query sees in the installed transformers' sliding-window mask beyond the
    window: 1 where sliding_window = W shows W + 1 keys (4.40's masks), 0 where it shows
    W (later versions' masking_utils, kv_idx > q_idx - W). colossalc's window, and the
    sliding_window files hold (written by --save-hf, read by --init-from), is the W
    most recent keys, as the later versions count it."""
    from transformers.modeling_attn_mask_utils import AttentionMaskConverter
    n, w = 8, 3
    mask = AttentionMaskConverter._make_causal_mask((1, n), torch.float32, torch.device("cpu"), sliding_window=w)
    return int((mask[0, 0, -1] == 0).sum().item()) - w


ROPE_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64, "rope_type": "llama3"}  # llama31


def llama3_inv_freq(theta, dim, rs):
    """LLaMA 3.1's scaled rotary frequencies (transformers' _compute_llama3_parameters,
    Meta's apply_scaling): wavelengths above original / low_freq_factor slowed by the
    factor, those below original / high_freq_factor kept, those between blended."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old / lo, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
    return torch.where(medium, smoothed, scaled)


def scale_rotary(model):
    for layer in model.model.layers:
        emb = layer.self_attn.rotary_emb
        emb.inv_freq = llama3_inv_freq(model.config.rope_theta, emb.dim, ROPE_SCALING)  # forward reads only this


def config(family, tied=False):
    if family == "gpt2":  # models/gpt2-tiny.model --set layers=2
        return transformers.GPT2Config(vocab_size=256, n_positions=256, n_embd=128, n_layer=2, n_head=4,
                                       activation_function="gelu_new", layer_norm_epsilon=1e-5,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    # models/{llama,llama3,mistral,qwen2}.model --set vocab=256 --set d=64 --set heads=4 --set layers=2 --set ffn=160
    small = dict(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=256, tie_word_embeddings=tied)
    if family == "llama":
        return transformers.LlamaConfig(num_key_value_heads=4, rms_norm_eps=1e-5, rope_theta=10000.0, **small)
    if family in ("llama3", "llama31"):  # --set kv_heads=2 (llama31: --set rope_factor=8 --set rope_ctx=64)
        return transformers.LlamaConfig(num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=500000.0, **small)
    if family == "mistral":  # --set kv_heads=2 --set window=8
        return transformers.MistralConfig(num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0,
                                          sliding_window=WINDOW - window_offset(), **small)
    return transformers.Qwen2Config(num_key_value_heads=1, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                    use_sliding_window=False, **small)  # qwen2, --set kv_heads=1


def model_class(family):
    return {"gpt2": transformers.GPT2LMHeadModel, "mistral": transformers.MistralForCausalLM,
            "qwen2": transformers.Qwen2ForCausalLM}.get(family, transformers.LlamaForCausalLM)


def load(family, path):
    """from_pretrained in float32 with eager attention (the explicit masks); a Mistral
    file's sliding_window (colossalc's W keys) as the installed transformers counts it;
    LLaMA 3.1's rope_scaling, which transformers 4.40 refuses, read past and applied."""
    kw = {}
    if family == "llama31":
        cfg = json.load(open(f"{path}/config.json"))
        assert cfg.pop("rope_scaling") == ROPE_SCALING, "config.json's rope_scaling"
        kw["config"] = transformers.LlamaConfig(**cfg)
    model = model_class(family).from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager", **kw)
    if family == "mistral":
        model.config.sliding_window = WINDOW - window_offset()
    if family == "llama31":
        scale_rotary(model)
    return model


def batch(tokens, k):
    start, n = k * B * T, len(tokens)
    chunk = torch.tensor([tokens[(start + i) % n] for i in range(B * T + 1)])
    return chunk[:-1].view(B, T), chunk[1:].view(B, T)


def loss_of(model, x, y):
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def random_model(family, tied):
    torch.manual_seed(1234)
    model = model_class(family)(config(family, tied))
    with torch.no_grad():  # norms and biases away from 1 and 0, so their gradients matter
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape))
    return model


def hub_state(family, model):
    """The state dict as the hub's files hold it: buffers included, no base prefix."""
    sd = {k.removeprefix("transformer."): v.contiguous() for k, v in model.state_dict().items()}
    if family == "gpt2":  # tied to wte
        sd.pop("lm_head.weight", None)
    n = model.config.num_hidden_layers
    for i in range(n):
        if family == "gpt2":
            P = model.config.n_positions
            sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P).to(sd["wte.weight"].dtype)
            sd[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4).to(sd["wte.weight"].dtype)
        else:
            hd = model.config.hidden_size // model.config.num_attention_heads
            inv = 1.0 / (model.config.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
            sd[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = inv
    return sd


def write_checkpoint(family, model, ckpt, layout, dtype, shard):
    model = model.to({"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype])
    if family == "mistral":  # as transformers' current masks count it (masking_utils: kv_idx > q_idx - W)
        model.config.sliding_window = WINDOW
    if layout == "hub":
        os.makedirs(ckpt, exist_ok=True)
        save_file(hub_state(family, model), f"{ckpt}/model.safetensors", metadata={"format": "pt"})
        model.config.save_pretrained(ckpt)
    else:
        model.save_pretrained(ckpt, safe_serialization=True, max_shard_size=shard if shard != "none" else "10GB")
    if family == "llama31":  # as LLaMA 3.1's released config.json gives it
        cfg = json.load(open(f"{ckpt}/config.json"))
        cfg["rope_scaling"] = ROPE_SCALING
        json.dump(cfg, open(f"{ckpt}/config.json", "w"), indent=2)
    files = sorted(os.listdir(ckpt))
    print(f"{layout} checkpoint in {dtype}: {', '.join(files)}")


def adamw_steps(model, tokens, steps, lr):
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for k in range(steps):
        x, y = batch(tokens, k)
        opt.zero_grad()
        loss = loss_of(model, x, y)
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return losses


def make(family, out, tok_path, layout, dtype, shard, steps, lr):
    tokens = read_tokens(tok_path)
    write_checkpoint(family, random_model(family, layout == "tied"), f"{out}/ckpt", layout, dtype, shard)
    model = load(family, f"{out}/ckpt")
    model.train()  # the configs have no dropout
    x, _ = batch(tokens, steps)
    with torch.no_grad():
        before = model(input_ids=x).logits
    losses = adamw_steps(model, tokens, steps, lr)
    with torch.no_grad():
        after = model(input_ids=x).logits
    np.save(f"{out}/ref_logits.npy", after.numpy())
    moved = (after - before).abs().max().item() / after.abs().max().item()
    json.dump({"losses": losses, "moved": moved, "family": family}, open(f"{out}/ref.json", "w"))
    print("reference losses:", " ".join(f"{l:.7f}" for l in losses), f"(logits moved {moved:.3g} relative)")


def check(out, tok_path, log, hfdir, first_only):
    ref = json.load(open(f"{out}/ref.json"))
    ours = [json.loads(line)["loss"] for line in open(log) if line.strip() and '"loss"' in line]
    failed = 0
    for k, (a, b) in enumerate(zip(ours, ref["losses"])):
        rel = abs(a - b) / abs(b)
        ok = rel <= TOL or (k > 0 and first_only)
        failed += not ok
        print(f"step {k} loss: train {a:.9g}, transformers {b:.9g}, relative difference {rel:.3g}"
              f"{'' if k == 0 or not first_only else ' (not compared: the head is tied there)'} {'ok' if ok else 'FAIL'}")
    if first_only:
        return failed
    tokens = read_tokens(tok_path)
    config = json.load(open(f"{hfdir}/config.json"))
    if ref["family"] == "mistral" and config["sliding_window"] != WINDOW:
        print(f"--save-hf wrote sliding_window {config['sliding_window']}, not the model's {WINDOW} FAIL")
        failed += 1
    model = load(ref["family"], hfdir)
    assert type(model) is model_class(ref["family"]), type(model)
    if ref["family"] != "llama31":  # (4.40 refuses LLaMA 3.1's rope_scaling: load() reads it)
        assert type(transformers.AutoConfig.from_pretrained(hfdir)) is type(model.config), "config.json's model_type"
    model.eval()
    x, _ = batch(tokens, len(ref["losses"]))
    with torch.no_grad():
        logits = model(input_ids=x).logits.numpy()
    want = np.load(f"{out}/ref_logits.npy")
    rel = np.abs(logits - want).max() / np.abs(want).max()
    ok = rel <= TOL
    failed += not ok
    print(f"--save-hf loaded as {type(model).__name__}: logits after {len(ref['losses'])} AdamW steps against "
          f"transformers' own steps: max relative difference {rel:.3g} (the steps moved them {ref['moved']:.3g}) "
          f"{'ok' if ok else 'FAIL'}")
    return failed


def main():
    if sys.argv[1] == "make":
        family, out, tok, layout, dtype, shard, steps, lr = sys.argv[2:10]
        make(family, out, tok, layout, dtype, shard, int(steps), float(lr))
        return 0
    out, tok, log, hfdir = sys.argv[2:6]
    return 1 if check(out, tok, log, hfdir, len(sys.argv) > 6 and sys.argv[6] == "first") else 0


if __name__ == "__main__":
    sys.exit(main())
