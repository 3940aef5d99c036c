#!/usr/bin/env python3
"""Two programs of one model (fused and materialized kernels) after one SGD step from
the same parameters: the loss of the step (the logs) and the gradient of every
parameter, g = (initial - final) / lr, each tensor's ||g_fused - g_materialized|| /
||g_materialized|| within TOL. With lr large against the parameters, (initial - final)
/ lr is the gradient to f32's precision.

usage: compare_step.py INIT.safetensors LR TOL FUSED_LOG FUSED.safetensors MAT_LOG MAT.safetensors"""
import json, sys
import numpy as np
from compare import read_safetensors


def main():
    init, lr, tol = read_safetensors(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    logs = [[json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in (sys.argv[4], sys.argv[6])]
    fused, mat = read_safetensors(sys.argv[5]), read_safetensors(sys.argv[7])
    bad = 0
    for a, b in zip(*logs):
        rel = abs(a - b) / abs(b)
        print("loss fused %.9g materialized %.9g  rel %.2e" % (a, b, rel))
        bad += rel > tol
    if not logs[0] or len(logs[0]) != len(logs[1]):
        print("FAIL: logs of %d and %d steps" % (len(logs[0]), len(logs[1])))
        bad += 1
    for name in sorted(mat):
        p0 = init[name].astype(np.float64)
        gf, gm = (p0 - fused[name]) / lr, (p0 - mat[name]) / lr
        norm = np.linalg.norm(gm)
        rel = np.linalg.norm(gf - gm) / norm if norm > 0 else np.linalg.norm(gf)
        print("grad %-6s |g| %.4g  rel %.2e%s" % (name, norm, rel, "  FAIL" if not rel <= tol else ""))
        bad += not rel <= tol
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
