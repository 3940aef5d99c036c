#!/usr/bin/env python3
"""Training data for the zoo models that do not read one token stream, as numpy arrays
that colossalc-mkdata turns into a record file (runtime/io/records.h):

  bert OUTDIR TEXT RECORDS SEQ    masked-LM records from the bytes of TEXT (vocabulary
                                  260: bytes 0-255, [MASK] 256, [CLS] 257, [SEP] 258):
      tokens.npy       int32 [RECORDS, SEQ]  [CLS] a [SEP] b [SEP], a and b two
                       consecutive pieces of TEXT, each of its (SEQ-3)//2 tokens
                       masked by BERT's rule: 15% of the text positions (the same
                       count in every record) chosen, 80% of those replaced by
                       [MASK], 10% by a random byte, 10% kept
      token_types.npy  int32 [RECORDS, SEQ]  0 up to the first [SEP], 1 after
      targets.npy      int32 [RECORDS, SEQ]  the original byte at chosen positions,
                       -1 (ignored) elsewhere
  vit OUTDIR RECORDS IMAGE CHANNELS PATCH  images and classes:
      images.npy       float32 [RECORDS, CHANNELS, IMAGE, IMAGE]  N(0, 1) pixels, with
                       one patch brightened by 3
      labels.npy       int32 [RECORDS]  the index of that patch (row-major over the
                       (IMAGE/PATCH)^2 patches): the model has something to learn

Every record has as many counted targets, so a data-parallel plan's mean of its ranks'
mean losses is the one-rank mean. Seeded: the same files every time.

usage: zoo_data.py bert OUTDIR TEXT RECORDS SEQ | vit OUTDIR RECORDS IMAGE CHANNELS PATCH"""
import sys
import numpy as np

MASK, CLS, SEP = 256, 257, 258


def bert(out, text, records, seq):
    data = np.frombuffer(open(text, "rb").read(), dtype=np.uint8).astype(np.int32)
    rng = np.random.default_rng(1234)
    half = (seq - 3) // 2
    picks = max(1, round(0.15 * 2 * half))
    tokens = np.full((records, seq), SEP, np.int32)
    types = np.zeros((records, seq), np.int32)
    targets = np.full((records, seq), -1, np.int32)
    for r in range(records):
        start = (r * 2 * half) % (len(data) - 2 * half)
        a, b = data[start:start + half], data[start + half:start + 2 * half]
        row = np.concatenate([[CLS], a, [SEP], b, [SEP]])
        tokens[r, :len(row)] = row
        types[r, half + 2:] = 1
        text_pos = np.concatenate([np.arange(1, 1 + half), np.arange(half + 2, half + 2 + half)])
        chosen = rng.choice(text_pos, picks, replace=False)
        targets[r, chosen] = tokens[r, chosen]
        how = rng.random(picks)
        tokens[r, chosen[how < 0.8]] = MASK
        rand = chosen[(how >= 0.8) & (how < 0.9)]
        tokens[r, rand] = rng.integers(0, 256, len(rand))
    np.save(f"{out}/tokens.npy", tokens)
    np.save(f"{out}/token_types.npy", types)
    np.save(f"{out}/targets.npy", targets)


def vit(out, records, image, channels, patch):
    rng = np.random.default_rng(4321)
    grid = image // patch
    images = rng.standard_normal((records, channels, image, image)).astype(np.float32)
    labels = rng.integers(0, grid * grid, records).astype(np.int32)
    for r in range(records):
        y, x = divmod(int(labels[r]), grid)
        images[r, :, y * patch:(y + 1) * patch, x * patch:(x + 1) * patch] += 3.0
    np.save(f"{out}/images.npy", images)
    np.save(f"{out}/labels.npy", labels)


def main():
    if sys.argv[1] == "bert":
        bert(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        vit(sys.argv[2], *(int(a) for a in sys.argv[3:7]))


if __name__ == "__main__":
    main()
