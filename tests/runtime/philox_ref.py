#!/usr/bin/python3
"""Pure-Python reference of runtime/philox.h's documented mapping.

Prints the Random123 known-answer results and a few (seed, name, index) values as
C initialisers; test_philox.c embeds them, so the C code is checked against an
implementation written independently from the documentation. Run:
    /usr/bin/python3 tests/runtime/philox_ref.py
"""
import math
import struct

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def philox4x32_10(ctr, key):
    x = list(ctr)
    k0, k1 = key
    for r in range(10):
        if r:
            k0 = (k0 + 0x9E3779B9) & M32
            k1 = (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * x[0]
        p1 = 0xCD9E8D57 * x[2]
        x = [((p1 >> 32) ^ x[1] ^ k0) & M32, p1 & M32,
             ((p0 >> 32) ^ x[3] ^ k1) & M32, p0 & M32]
    return x


def fnv1a64(name):
    h = 0xcbf29ce484222325
    for b in name.encode("utf-8"):
        h = ((h ^ b) * 0x100000001b3) & M64
    return h


def splitmix64(x):
    z = (x + 0x9e3779b97f4a7c15) & M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def key_derive(seed, name):
    k = splitmix64(fnv1a64(name) ^ splitmix64(seed))
    return (k & M32, k >> 32)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def uniform(key, i):
    out = philox4x32_10((i & M32, i >> 32, 0, 0), key)
    return ((out[0] >> 9) + 0.5) * 2.0 ** -23


def normal(key, i):
    out = philox4x32_10((i & M32, i >> 32, 0, 0), key)
    u1 = (out[0] + 0.5) * 2.0 ** -32
    u2 = (out[1] + 0.5) * 2.0 ** -32
    return f32(math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586476925286766559 * u2))


def main():
    kats = [((0, 0, 0, 0), (0, 0)),
            ((M32,) * 4, (M32, M32)),
            ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0))]
    for ctr, key in kats:
        print("kat", ", ".join("0x%08x" % v for v in philox4x32_10(ctr, key)))
    cases = [(0, "wte", 0), (1234, "h.0.attn.c_attn.weight", 7), (42, "", 1 << 33),
             (2**64 - 1, "lm_head", 2**32 - 1)]
    for seed, name, i in cases:
        key = key_derive(seed, name)
        print('{%uull, "%s", %uull, 0x%08x, 0x%08x, 0x%08xu, 0x%08xu},' % (
            seed, name, i, key[0], key[1], f32_bits(uniform(key, i)), f32_bits(normal(key, i))))


if __name__ == "__main__":
    main()
