#!/usr/bin/python3
"""Writes the reference safetensors file that test_safetensors reads ("pyref").

The file is written BY HAND (struct + json + numpy; the `safetensors` package is
not installed) the way the reference implementation lays it out: an 8-byte
little-endian header length, a JSON header padded with spaces to a multiple of 8,
then the tensors' bytes. BF16 values are rounded by PyTorch, F16 by numpy (and
checked against PyTorch). Beside it, ref.json holds for every tensor its dtype,
shape and the expected f32 values as uint32 bit patterns (exact, NaN included),
or no values for a dtype the C reader must refuse to convert.

Usage: /usr/bin/python3 make_safetensors.py OUTDIR
Needs torch and numpy: without them this fails, and so does the CTest fixture.
"""
import json
import os
import struct
import sys

import numpy as np
import torch


def tensors():
    """(name, dtype, raw little-endian bytes, shape, expected f32 array or None)."""
    rng = np.random.default_rng(20240520)
    out = []
    f32 = rng.standard_normal((3, 4)).astype(np.float32)
    f32[0, :4] = [np.inf, -0.0, np.float32(1e-45), np.nan]
    out.append(("h.0.mlp.c_fc.weight", "F32", f32.astype("<f4").tobytes(), f32.shape, f32))

    src = (rng.standard_normal((2, 5)) * 3).astype(np.float32)
    src[0, :4] = [1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 3.0e38, -1.0e-40]  # ties, overflow, subnormal
    bf = torch.from_numpy(src).to(torch.bfloat16)
    bf_bits = bf.view(torch.int16).numpy().astype("<i2").tobytes()
    out.append(("wte_bf16", "BF16", bf_bits, src.shape, bf.to(torch.float32).numpy()))

    h = np.array([0.1, -2.5, 65504.0, 6.0e-8, 1.0e-5, -np.inf, np.nan, -0.0, 1e5],
                 dtype=np.float32)
    with np.errstate(over="ignore"):  # 1e5 overflows to inf on purpose
        f16 = h.astype(np.float16)
    assert np.array_equal(torch.from_numpy(h).half().numpy().view(np.uint16),
                          f16.view(np.uint16)), "numpy and torch round F16 differently"
    out.append(("ln_f.weight_f16", "F16", f16.astype("<f2").tobytes(), f16.shape,
                f16.astype(np.float32)))

    s = np.array(3.25, dtype=np.float32)
    out.append(("scalar", "F32", s.astype("<f4").tobytes(), (), s.reshape(1)))
    out.append(("empty", "F16", b"", (0, 3), np.zeros((0,), np.float32)))
    ints = np.array([1, -2, 3], dtype="<i4")
    out.append(("step_i32", "I32", ints.tobytes(), ints.shape, None))
    return out


def write(outdir):
    os.makedirs(outdir, exist_ok=True)
    header, ref, blobs, off = {}, {"tensors": {}, "metadata": {}}, [], 0
    metadata = {"format": "pt", "producer": "make_safetensors.py"}
    for name, dtype, raw, shape, expect in reversed(tensors()):  # data order != header order
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        entry = {"dtype": dtype, "shape": list(shape)}
        if expect is not None:
            entry["f32_bits"] = [int(b) for b in np.ascontiguousarray(expect, np.float32).reshape(-1).view("<u4")]
        ref["tensors"][name] = entry
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = metadata
    ref["metadata"] = metadata
    text = json.dumps(dict(sorted(header.items())), separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(outdir, "ref.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    with open(os.path.join(outdir, "ref.json"), "w") as f:
        json.dump(ref, f)
    print("make_safetensors: wrote %d tensors (%d data bytes) to %s, torch %s, numpy %s"
          % (len(ref["tensors"]), off, outdir, torch.__version__, np.__version__))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_safetensors.py OUTDIR")
    write(sys.argv[1])
