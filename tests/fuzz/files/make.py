#!/usr/bin/env python3
"""Writes the seeds of build-fuzz/fuzz_files (tests/fuzz/fuzz_files.c): each file is one
selector byte (0 safetensors, 1 transformers index, 2 token file, 3 record file) and a
small valid file of that kind. Run: /usr/bin/python3 tests/fuzz/files/make.py"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def safetensors():
    tensors = {"wte.weight": ("F32", [2, 3], struct.pack("<6f", *range(6))),
               "h.0.ln_1.bias": ("BF16", [2], struct.pack("<2H", 0x3F80, 0xBF80)),
               "h.0.attn.bias": ("F16", [1, 1], struct.pack("<H", 0x3C00))}
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def index():
    return json.dumps({"metadata": {"total_size": 24},
                       "weight_map": {"wte.weight": "model-00001-of-00002.safetensors",
                                      "wpe.weight": "model-00002-of-00002.safetensors"}}).encode()


def tokens(magic, version, fmt, toks):
    header = [0] * 256
    header[:3] = [magic, version, len(toks)]
    return struct.pack("<256i", *header) + struct.pack("<%d%s" % (len(toks), fmt), *toks)


def records():
    header = [0] * 256
    header[:4] = [20250601, 1, 2, 2]
    fields = [("images", 2, [2, 2]), ("labels", 1, [])]
    for f, (name, dtype, shape) in enumerate(fields):
        w = 4 + 20 * f
        header[w:w + 12] = struct.unpack("<12i", name.encode().ljust(48, b"\0"))
        header[w + 12], header[w + 13] = dtype, len(shape)
        header[w + 14:w + 14 + len(shape)] = shape
    body = struct.pack("<8f", *[0.5 * i for i in range(8)]) + struct.pack("<2i", 3, 7)
    return struct.pack("<256i", *header) + body


def main():
    seeds = {"safetensors": b"\0" + safetensors(), "index": b"\1" + index(),
             "tokens16": b"\2" + tokens(20240520, 1, "H", [1, 2, 3, 4, 65535]),
             "tokens32": b"\2" + tokens(20240801, 7, "I", [1, 70000, 3]), "records": b"\3" + records()}
    for name, data in seeds.items():
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
