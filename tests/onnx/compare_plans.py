#!/usr/bin/env python3
"""The same plan from two sources of one model: the --dump-plan outputs of an imported
ONNX file and of its model-language twin must agree in everything but the source file
and the IR node numbers (%N: an ONNX file declares a parameter where it is first read,
the language where the block declares it). Text: line by line, without the search's
timing line. JSON: every field.

usage: compare_plans.py text|json ONNX_OUTPUT MODEL_OUTPUT"""
import json, re, sys


def text_lines(path):
    out = []
    for line in open(path):
        if line.startswith("search:"):  # "search: N plans priced, N fit, 0.17 s"
            line = re.sub(r", [0-9.]+ s$", "", line.rstrip("\n"))
        line = re.sub(r"^plan for (\S+) \(\S+\)", r"plan for \1 (SOURCE)", line)
        out.append(re.sub(r"%\d+ *", "%N ", line.rstrip("\n")))  # (and the column they pad)
    return out


def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in ("node", "source")}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x


def main():
    kind, a, b = sys.argv[1:4]
    if kind == "json":
        same = strip(json.load(open(a))) == strip(json.load(open(b)))
        print(f"plans (json): {'the same' if same else 'DIFFER'}")
        return 0 if same else 1
    la, lb = text_lines(a), text_lines(b)
    diffs = [(i + 1, x, y) for i, (x, y) in enumerate(zip(la, lb)) if x != y]
    if len(la) != len(lb):
        diffs.append((min(len(la), len(lb)) + 1, f"{len(la)} lines", f"{len(lb)} lines"))
    for line, x, y in diffs[:10]:
        print(f"line {line}:\n  onnx:  {x}\n  model: {y}")
    print(f"plans (text, {len(la)} lines): {'the same' if not diffs else 'DIFFER'}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
