#!/usr/bin/env python3
"""Compares two `train` runs: the loss of every logged step (JSON lines) and, when
given, every parameter tensor of two --save files, to a relative TOL. A tensor's
difference is ||a - b|| / ||b|| (as tests/e2e/compare.py: Adam turns a near-zero
gradient into a full-size step whose sign is rounding noise, so single elements may
differ more than the tensor does; the largest elementwise difference is printed too).
With --last N only the last N logged steps are compared, with --first N the first N;
with --field NAME the logged NAME (grad_norm, say) instead of the loss. With --skip REGEX:LO:HI the
elements [LO, HI) of the tensors whose names match are left out: those whose gradient
is zero in exact arithmetic (an attention key bias), which Adam moves by rounding noise
alone, large in bf16 (tests/e2e/compare.py's NOISE bounds how far they move).

usage: compare_runs.py [--first N | --last N] [--field NAME] [--skip REGEX:LO:HI] TOL WANT.jsonl GOT.jsonl [WANT.safetensors GOT.safetensors]"""
import json, os, sys
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from compare import kept, read_safetensors  # noqa: E402  (one reader of --save files)


def losses(path, field="loss"):
    return [(json.loads(l)["step"], json.loads(l)[field]) for l in open(path)
            if l.strip() and field in json.loads(l)]


def main(argv):
    opt = {"--first": None, "--last": None, "--field": "loss", "--skip": None}
    while argv[:1] and argv[0] in opt:
        opt[argv[0]], argv = argv[1], argv[2:]
    first, last, field = opt["--first"], opt["--last"], opt["--field"]
    skip = opt["--skip"].split(":") if opt["--skip"] else None
    first, last = (int(first) if first else None), (int(last) if last else None)
    tol, want_log, got_log, files = float(argv[0]), argv[1], argv[2], argv[3:]
    want, got = losses(want_log, field), losses(got_log, field)
    if first is not None:
        want, got = want[:first], got[:first]
    if last is not None:
        want, got = want[-last:], got[-last:]
    failed, worst = 0, 0.0
    if len(want) != len(got) or not want or [s for s, _ in want] != [s for s, _ in got]:
        print(f"FAIL: logged steps differ: {[s for s, _ in want]} vs {[s for s, _ in got]}")
        return 1
    for (k, a), (_, b) in zip(want, got):
        rel = abs(a - b) / abs(a)
        worst = max(worst, rel)
        ok = rel <= tol
        failed += not ok
        print(f"step {k}: {field} {a:.7f} vs {b:.7f} relative difference {rel:.2e} {'ok' if ok else 'FAIL'}")
    print(f"{field}: max relative difference {worst:.2e}")
    checks = len(want)
    if files:
        a, b = read_safetensors(files[0]), read_safetensors(files[1])
        if set(a) != set(b):
            print("FAIL: parameter names differ:", sorted(set(a) ^ set(b)))
            return 1
        worst, worst_name, max_abs = 0.0, "", 0.0
        for name in a:
            ref = kept(skip, name, a[name])
            diff = kept(skip, name, b[name]).astype(np.float64) - ref
            if not diff.size:  # left out whole
                continue
            rel = float(np.linalg.norm(diff) / max(np.linalg.norm(ref), 1e-30))
            max_abs = max(max_abs, float(np.max(np.abs(diff))))
            if rel >= worst:
                worst, worst_name = rel, name
        ok = worst <= tol
        failed += not ok
        checks += 1
        print(f"parameters: max relative difference {worst:.2e} ({worst_name}), "
              f"largest elementwise difference {max_abs:.2e} {'ok' if ok else 'FAIL'}")
    print(f"{checks - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
