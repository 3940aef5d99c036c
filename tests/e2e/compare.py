#!/usr/bin/env python3
"""Compares a `train` run with the PyTorch reference: the loss of every step (from the
JSON-lines log) and every parameter tensor at the end (from --save), to a relative
TOL. A tensor's difference is ||ours - reference|| / ||reference||: Adam turns a
gradient that is almost zero into a full-size step whose sign is rounding noise, so
single elements may differ more than the tensor does (the largest elementwise
difference is printed too).

With NOISE=REGEX:LO:HI:BOUND, the elements [LO, HI) of the parameters whose names match
REGEX are left out of that comparison and checked instead to have moved at most BOUND
from their initial values (REF_DIR/init.safetensors): a gradient that is zero in exact
arithmetic (an attention key bias: softmax does not change when a row shifts) leaves
Adam nothing but rounding noise to follow, which bf16 makes large; its steps are still
at most the learning rate each.

usage: compare.py REF_DIR LOG.jsonl FINAL.safetensors TOL [NOISE]"""
import json, re, struct, sys
import numpy as np


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", t["dtype"]
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(t["shape"])
    return out


def kept(spec, name, x):
    """x flattened, without elements [LO, HI) when name matches spec = [REGEX, LO, HI, ...]
    (the zero-gradient elements compare.py's NOISE and compare_runs.py's --skip leave out)."""
    x = np.asarray(x).reshape(-1)
    if spec and re.fullmatch(spec[0], name):
        x = np.delete(x, np.s_[int(spec[1]):int(spec[2])])
    return x


def main():
    ref_dir, log, final, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    refj = json.load(open(f"{ref_dir}/ref.json"))
    ref = refj["losses"]
    records = [json.loads(line) for line in open(log) if line.strip()]
    ours = [r["loss"] for r in records]
    failed = 0
    if "skipped" in refj:  # fp16: the steps skipped for an inf or NaN gradient
        skipped = sum(1 for r in records if r.get("skipped"))
        ok = skipped == refj["skipped"]
        failed += not ok
        print(f"skipped steps (inf/NaN gradients): {skipped}, reference {refj['skipped']} {'ok' if ok else 'FAIL'}")
    if len(ours) != len(ref):
        print(f"FAIL: {len(ours)} logged steps, reference has {len(ref)}")
        return 1
    for k, (a, b) in enumerate(zip(ours, ref), 1):
        rel = abs(a - b) / abs(b)
        ok = rel <= tol
        failed += not ok
        print(f"step {k}: loss {a:.7f} reference {b:.7f} relative difference {rel:.2e} {'ok' if ok else 'FAIL'}")
    want, got = read_safetensors(f"{ref_dir}/ref.safetensors"), read_safetensors(final)
    if set(want) != set(got):
        print("FAIL: parameter names differ:", sorted(set(want) ^ set(got)))
        return 1
    noise = sys.argv[5].split(":") if len(sys.argv) > 5 else None
    init = read_safetensors(f"{ref_dir}/init.safetensors") if noise else {}
    worst, worst_name, max_abs = 0.0, "", 0.0
    for name in want:
        if noise and re.fullmatch(noise[0], name):
            lo, hi, bound = int(noise[1]), int(noise[2]), float(noise[3])
            moved = float(np.max(np.abs(got[name].reshape(-1)[lo:hi].astype(np.float64) - init[name].reshape(-1)[lo:hi])))
            ok = moved <= bound
            failed += not ok
            print(f"{name}[{lo}:{hi}] (zero gradient): moved at most {moved:.2e} of {bound:.2e} {'ok' if ok else 'FAIL'}")
        base = kept(noise, name, want[name])
        diff = kept(noise, name, got[name]).astype(np.float64) - base
        rel = float(np.linalg.norm(diff) / max(np.linalg.norm(base), 1e-30))
        max_abs = max(max_abs, float(np.max(np.abs(diff))))
        if rel > worst:
            worst, worst_name = rel, name
    ok = worst <= tol
    failed += not ok
    print(f"parameters after {len(ref)} steps: max relative difference {worst:.2e} ({worst_name}), "
          f"largest elementwise difference {max_abs:.2e} {'ok' if ok else 'FAIL'}")
    print(f"{len(ref) + 1 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
