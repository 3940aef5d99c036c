"""Fails unless every F32 tensor of a safetensors file holds finite values only.
Usage: finite.py FILE"""
import array
import json
import math
import struct
import sys

with open(sys.argv[1], "rb") as f:
    data = f.read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8 : 8 + n])
body = data[8 + n :]
count = 0
for name, t in header.items():
    if name == "__metadata__":
        continue
    assert t["dtype"] == "F32", name
    lo, hi = t["data_offsets"]
    values = array.array("f")
    values.frombytes(body[lo:hi])
    bad = sum(1 for v in values if not math.isfinite(v))
    if bad:
        sys.exit(f"FAIL: {name}: {bad} non-finite values")
    count += len(values)
print(f"{sys.argv[1]}: {count} values, all finite")
