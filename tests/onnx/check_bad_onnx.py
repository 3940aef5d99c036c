#!/usr/bin/python3
"""Runs colossalc on one malformed or unsupported ONNX file and checks how it fails.

    check_bad_onnx.py COLOSSALC FILE

expect.txt (beside FILE) has `NAME: expect: TEXT` (and optionally `NAME: args: ...`, extra
arguments). Checked: exit status exactly 1 (not a signal, not a sanitizer's status);
nothing on stdout; stderr is exactly one line, `FILE: ...` (the file, then what in it:
a node with its name, op type and opset, an initialiser or an input) holding TEXT, and
nothing else, so a crash, a sanitizer report or extra output fails the test."""
import os
import shlex
import subprocess
import sys


def main():
    cc, path = sys.argv[1], sys.argv[2]
    name = os.path.basename(path)
    spec = {}
    for line in open(os.path.join(os.path.dirname(path), "expect.txt")):
        for key in ("expect", "args"):
            if line.startswith(f"{name}: {key}: "):
                spec[key] = line[len(name) + len(key) + 4:].rstrip("\n")
    if "expect" not in spec:
        print(f"FAIL: no expect line for {name} in expect.txt")
        return 1
    r = subprocess.run([cc, path] + shlex.split(spec.get("args", "")), capture_output=True, timeout=60)
    err = r.stderr.decode("utf-8", "replace")
    lines = err.splitlines()
    problems = []
    if r.returncode != 1:
        problems.append(f"exit status {r.returncode}, expected 1")
    if r.stdout:
        problems.append("output on stdout: " + r.stdout.decode("utf-8", "replace")[:200])
    if len(lines) != 1 or not lines[0].startswith(path + ":") or spec["expect"] not in lines[0]:
        problems.append(f"stderr is not one line '{path}: ...{spec['expect']}...'")
    print(f"{name}: {err.strip()}")
    for p in problems:
        print("FAIL: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
