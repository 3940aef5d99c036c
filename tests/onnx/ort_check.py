#!/usr/bin/env python3
"""The forward loss of an ONNX model in onnxruntime (PyPI) on the first batch of a
token file (inputs the first batch*seq tokens, targets the same shifted by one, as
`train` reads step 1), against the loss `train` logged for step 1: relative TOL.

usage: ort_check.py MODEL.onnx TOKENS.bin BATCH SEQ LOG.jsonl TOL"""
import json, sys
import numpy as np
import onnxruntime as ort


def main():
    model, tokens, batch, seq, log, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], float(sys.argv[6])
    data = open(tokens, "rb").read()
    count = int(np.frombuffer(data[:1024], dtype="<i4")[2])
    toks = np.frombuffer(data[1024:], dtype="<u2")[:count].astype(np.int64)
    chunk = toks[: batch * seq + 1]
    feeds = {"tokens": chunk[:-1].reshape(batch, seq), "targets": chunk[1:].reshape(batch, seq)}
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = float(sess.run(None, feeds)[0])
    got = json.loads(open(log).readline())["loss"]
    rel = abs(got - want) / abs(want)
    ok = rel <= tol
    print(f"forward loss: train {got:.9g}, onnxruntime {ort.__version__} {want:.9g}, relative difference {rel:.2e} "
          f"{'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
