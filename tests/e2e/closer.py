#!/usr/bin/env python3
"""A mixed-precision run follows its own rounding: the parameters it saved are closer to
the reference computed with the same casts (REF_LOW/ref.safetensors) than the f32
reference (REF_F32/ref.safetensors) is, over every tensor together (the zero-gradient
elements of NOISE, as compare.py, left out). Without this, a program that kept f32
would pass compare.py's tolerance too.

usage: closer.py REF_LOW REF_F32 FINAL.safetensors NOISE"""
import sys
import numpy as np
from compare import kept, read_safetensors


def distance(a, b, noise):
    total = 0.0
    for name in a:
        d = kept(noise, name, a[name]).astype(np.float64) - kept(noise, name, b[name])
        total += float(np.sum(d * d))
    return total ** 0.5


def main():
    low, f32, final, noise = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(":")
    want = read_safetensors(f"{low}/ref.safetensors")
    ours = distance(read_safetensors(final), want, noise)
    theirs = distance(read_safetensors(f"{f32}/ref.safetensors"), want, noise)
    ok = ours < theirs
    print(f"distance to the low-precision reference: ours {ours:.3e}, the f32 reference's {theirs:.3e} "
          f"{'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
