#!/usr/bin/env python3
"""Bad transformers checkpoints and models `train` refuses: each case is one clear
message and exit status 1 (never a signal). From a good GPT-2 checkpoint that
transformers writes (one file and sharded, in WORK/good), this writes damaged copies
and runs TRAIN --steps 0 --init-from on each; then --save-hf with the programs in WORK
that do not make a transformers model (run_hf_errors.sh compiles them), and EXPORT
(colossalc-export) on a file `train` did not write.

usage: hf_errors.py TRAIN EXPORT WORK"""
import json, os, re, shutil, subprocess, sys
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference  # noqa: E402


def write(path, tensors):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_file(tensors, path, metadata={"format": "pt"})


def sharded(work, name, good, edit):
    """A copy of the sharded checkpoint in good/sharded with its index edited."""
    d = f"{work}/{name}"
    shutil.copytree(f"{good}/sharded", d, dirs_exist_ok=True)
    index = json.load(open(f"{d}/model.safetensors.index.json"))
    text = edit(index)
    open(f"{d}/model.safetensors.index.json", "w").write(text if isinstance(text, str) else json.dumps(index))
    return d


def cases(work, good):
    sd = load_file(f"{good}/ckpt/model.safetensors")
    first = lambda ix: sorted(ix["weight_map"].items())[0]

    def missing():
        write(f"{work}/missing/model.safetensors", {k: v for k, v in sd.items() if not k.startswith("transformer.h.1.")})
        return f"{work}/missing", r"missing tensors \(12\): h\.1\.ln_1\.weight, .*"

    def extra():
        write(f"{work}/extra/model.safetensors", {**sd, "transformer.h.0.attn.rotary": torch.zeros(4)})
        return f"{work}/extra", r"does not match the model; unexpected tensors \(1\): transformer\.h\.0\.attn\.rotary$"

    def shape():
        t = dict(sd)
        t["transformer.h.0.attn.c_attn.weight"] = t["transformer.h.0.attn.c_attn.weight"].t().contiguous()
        write(f"{work}/shape/model.safetensors", t)
        return (f"{work}/shape", r"wrong shapes \(1\): transformer\.h\.0\.attn\.c_attn\.weight "
                r"\(file \[384,128\], model \[128,384\]: transposed\)")

    def dtype():
        t = dict(sd)
        t["transformer.ln_f.bias"] = t["transformer.ln_f.bias"].double()
        write(f"{work}/dtype/model.safetensors", t)
        return f"{work}/dtype", r"unsupported dtypes \(1\): transformer\.ln_f\.bias \(F64\); F32, F16 and BF16 load"

    def tied():
        write(f"{work}/tied/model.safetensors", {**sd, "lm_head.weight": sd["transformer.wte.weight"] + 1})
        return f"{work}/tied", r"lm_head\.weight differs from transformer\.wte\.weight, but the model ties"

    def twice():
        write(f"{work}/twice/model.safetensors", {**sd, "wpe.weight": sd["transformer.wpe.weight"].clone()})
        return f"{work}/twice", r"'transformer\.wpe\.weight' and 'wpe\.weight' are both the model's wpe\.weight"

    def empty_dir():
        os.makedirs(f"{work}/empty", exist_ok=True)
        return f"{work}/empty", r"a directory with neither model\.safetensors\.index\.json nor model\.safetensors"

    def index_json():
        return sharded(work, "index_json", good, lambda ix: "{not json"), r"bad index: not valid JSON"

    def index_no_map():
        return sharded(work, "index_no_map", good, lambda ix: "{}"), r"bad index: no \"weight_map\" object"

    def index_wrong_shard():
        def edit(ix):
            name, shard = first(ix)
            other = [s for s in set(ix["weight_map"].values()) if s != shard][0]
            ix["weight_map"][name] = other
        return sharded(work, "index_wrong_shard", good, edit), r"bad index: it puts '[^']+' in model-\d+-of-\d+\.safetensors, which does not hold it"

    def index_unlisted():
        def edit(ix):
            del ix["weight_map"][first(ix)[0]]
        return (sharded(work, "index_unlisted", good, edit),
                r"bad index: shard model-\d+-of-\d+\.safetensors holds '[^']+', which the weight_map does not list")

    def index_no_shard():
        def edit(ix):
            ix["weight_map"][first(ix)[0]] = "model-lost.safetensors"
        return sharded(work, "index_no_shard", good, edit), r"model-lost\.safetensors: cannot open: No such file"

    def index_path():
        def edit(ix):
            ix["weight_map"][first(ix)[0]] = "../model.safetensors"
        return sharded(work, "index_path", good, edit), r"is not the name of a file beside the index"

    return [missing, extra, shape, dtype, tied, twice, empty_dir, index_json, index_no_map, index_wrong_shard,
            index_unlisted, index_no_shard, index_path]


def config_cases(work, good):
    """A Mistral checkpoint whose config.json (or k_proj) disagrees with the model."""
    def variant(name, edit, weights=None):
        d = f"{work}/{name}"
        shutil.copytree(f"{good}/mistral", d, dirs_exist_ok=True)
        cfg = json.load(open(f"{d}/config.json"))
        edit(cfg)
        json.dump(cfg, open(f"{d}/config.json", "w"))
        if weights:
            weights.save_pretrained(d + "-w", safe_serialization=True)
            shutil.copy(f"{d}-w/model.safetensors", f"{d}/model.safetensors")
        return d
    wide = hf_reference.random_model("mistral", False)  # k_proj and v_proj 4 heads wide
    wide = type(wide)(type(wide.config)(**{**wide.config.to_dict(), "num_key_value_heads": 4}))
    return [
        (variant("window", lambda c: c.update(sliding_window=16)),
         r'config\.json: "sliding_window" is 16, but the model computes 8$'),
        (variant("kv_heads", lambda c: c.update(num_key_value_heads=4)),
         r'config\.json: "num_key_value_heads" is 4, but the model computes 2$'),
        (variant("heads", lambda c: c.update(num_attention_heads=8)),
         r'config\.json: "num_attention_heads" is 8, but the model computes 4$'),
        (variant("scaling", lambda c: c.update(rope_scaling={"type": "linear", "factor": 2.0})),
         r'config\.json: "rope_scaling" is \{"type":"linear","factor":2\}, but the model computes without it$'),
        (variant("theta", lambda c: c.update(rope_theta=500000.0)),
         r'config\.json: "rope_theta" is 500000, but the model computes 10000$'),
        (variant("act", lambda c: c.update(hidden_act="gelu")),
         r'config\.json: "hidden_act" is "gelu", but the model computes "silu"$'),
        (variant("type", lambda c: c.update(model_type="llama")),
         r'config\.json: "model_type" is "llama", but the model computes "mistral"$'),
        (variant("width", lambda c: None, wide),
         r"does not match the model; wrong shapes \(4\): model\.layers\.0\.self_attn\.k_proj\.weight "
         r"\(file \[64,64\], model \[32,64\]\)"),
    ]


def expect(argv, pattern):
    r = subprocess.run(argv, capture_output=True, text=True)
    msg = r.stderr.strip()
    ok = r.returncode == 1 and re.search(pattern, msg, re.M) is not None
    print(f"{'ok  ' if ok else 'FAIL'} exit {r.returncode}: {msg}")
    if not ok:
        print(f"     expected exit 1 and /{pattern}/")
    return ok


def main():
    train, export, work = sys.argv[1:4]
    good = f"{work}/good"
    model = hf_reference.random_model("gpt2", False)
    model.save_pretrained(f"{good}/ckpt")
    model.save_pretrained(f"{good}/sharded", max_shard_size="500KB")
    mistral = hf_reference.random_model("mistral", False)
    mistral.config.sliding_window = hf_reference.WINDOW
    mistral.save_pretrained(f"{good}/mistral", safe_serialization=True)
    failed = 0
    for case in cases(work, good):
        path, pattern = case()
        failed += not expect([train, "--steps", "0", "--init-from", path], pattern)
    for path, pattern in config_cases(work, good):  # a config.json the model does not match: the field named
        failed += not expect([f"{work}/train-mistral", "--steps", "0", "--init-from", path], pattern)
    # --save-hf: refused before training, for a model transformers does not compute
    failed += not expect([f"{work}/train-relu", "--steps", "0", "--save-hf", f"{work}/out-relu"],
                         r"--save-hf .*: the model does not compute what transformers' gpt2 \(GPT2LMHeadModel\) "
                         r"does: its activation is relu, not gelu_tanh")
    failed += not expect([f"{work}/train-named", "--steps", "0", "--save-hf", f"{work}/out-named"],
                         r"--save-hf .*: the model's parameters follow no transformers layout")
    failed += not expect([export, f"{good}/ckpt/model.safetensors", f"{work}/out-export"],
                         r"colossalc-export: .*model\.safetensors: no \"arch\" in its metadata: written by a `train` "
                         r"older than --save-hf")
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
