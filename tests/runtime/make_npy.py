#!/usr/bin/env python3
"""Arrays for colossalc-mkdata's tests (test_records mkdata-check reads the result):
pixels.npy f32 [N, 2, 2] = r + k / 4, label.npy int16 [N] = r % 3, ids.npy int64 [N, 3]
= 1000 r + k, flag.npy bool [N] = r odd; tokens.npy int64 [N * 10] = 109 i (ids above
65535: a uint32 token file), small.npy uint8 [N * 10] (a uint16 one); and what the tool
refuses: fortran.npy (Fortran order), wide.npy (an int64 beyond i32), short.npy
(another count of records), text.npy (a string array).

usage: make_npy.py OUTDIR N"""
import sys
import numpy as np


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    r = np.arange(n)
    np.save(f"{out}/pixels.npy", (r[:, None, None] + np.arange(4).reshape(1, 2, 2) / 4).astype(np.float32))
    np.save(f"{out}/label.npy", (r % 3).astype(np.int16))
    np.save(f"{out}/ids.npy", (1000 * r[:, None] + np.arange(3)).astype(np.int64))
    np.save(f"{out}/flag.npy", r % 2 == 1)
    np.save(f"{out}/tokens.npy", (np.arange(n * 10) * 109).astype(np.int64))
    np.save(f"{out}/small.npy", (np.arange(n * 10) % 256).astype(np.uint8))
    np.save(f"{out}/fortran.npy", np.asfortranarray(np.zeros((n, 3), np.float32)))
    np.save(f"{out}/wide.npy", np.full(n, 2 ** 40, np.int64))
    np.save(f"{out}/short.npy", np.zeros(n - 1, np.int32))
    np.save(f"{out}/text.npy", np.array(["a"] * n))


if __name__ == "__main__":
    main()
