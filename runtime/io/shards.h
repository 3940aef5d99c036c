/* shards: a set of tensors written in parts by many writers and read back in other
 * parts, whatever the parts were: what checkpoints are made of (io/ckpt.h).
 *
 * A part ("piece") is a box of a global tensor: its start in each dimension and its
 * shape. A writer holds each piece somewhere inside a host array of its own (a rank's
 * slice of a parameter): ShardPiece says where. Pieces of one tensor never overlap.
 *
 * On disk. A shard is a safetensors file (safetensors.h: each tensor's CRC-32C per block
 * in its metadata) whose tensors are pieces, row-major, named KEY for a whole tensor and
 * KEY@s0,s1,... (the box's start) otherwise, the box's shape as the tensor's shape; its
 * metadata "shape:KEY" gives each global tensor's shape. A set is a directory of shards
 * and index.json, written last (shards_write_index), which lists every tensor, its shape
 * and its pieces with their shard files, and the caller's metadata:
 *
 *   {"format": ..., "metadata": {"step": "100", ...},
 *    "tensors": {"param/wte.weight": {"shape": [64, 32],
 *                "pieces": [{"file": "shard-00000-of-00002.safetensors",
 *                            "start": [0, 0], "shape": [32, 32]}, ...]}, ...}}
 *
 * A single safetensors file of whole tensors (what shards_merge writes, and older
 * checkpoints) is a set too.
 *
 * Reading (shards_read) fills one piece of a tensor, from every stored piece it meets:
 * only the bytes of the blocks holding the box are read (pread, through one buffer),
 * and each block's checksum is checked before it is used. A box the stored pieces do
 * not cover in full is an error naming the tensor.
 *
 * Errors: -1 or NULL with a message naming the file and the tensor.
 */
#ifndef COLOSSALC_RUNTIME_SHARDS_H
#define COLOSSALC_RUNTIME_SHARDS_H

#include "runtime/io/safetensors.h"

#include <stddef.h>
#include <stdint.h>

#define SHARDS_INDEX "index.json"

typedef struct ShardPiece {
  const char *key; /* the tensor: "param/wte.weight" */
  int ndim;
  const int64_t *gshape;       /* [ndim] the whole tensor's */
  int64_t gstart[ST_MAX_DIMS]; /* the box in the whole tensor */
  int64_t count[ST_MAX_DIMS];  /* its shape */
  float *data;                 /* the host array holding the box */
  const int64_t *ashape;       /* [ndim] the array's shape (NULL: count) */
  int64_t astart[ST_MAX_DIMS]; /* where the box starts in the array */
} ShardPiece;

/* Elements of a piece. */
int64_t shards_numel(const ShardPiece *p);
/* fn for each line of p's box (its innermost dimension, in order): where the line starts
 * in p's array, the global row-major index of its first element, its length. */
void shards_lines(const ShardPiece *p, void (*fn)(void *arg, float *dst, int64_t gindex, int64_t len), void *arg);

/* Writes one shard: the pieces, metadata "shape:KEY" of their tensors and the caller's
 * nmeta pairs, streamed through a buffer of buf_bytes. 0, or -1 with a message. */
int shards_write(const char *path, const ShardPiece *ps, int n, const char *const keys[], const char *const vals[],
                 int nmeta, size_t buf_bytes, char *err, size_t errlen);
/* dir/index.json (atomically) from the headers of the shards named (files in dir), with
 * "format" fmt and the metadata pairs: the set is complete once it exists. */
int shards_write_index(const char *dir, const char *const shards[], int nshards, const char *fmt,
                       const char *const keys[], const char *const vals[], int nmeta, char *err, size_t errlen);

typedef struct ShardSet ShardSet;
/* A directory with index.json, or one safetensors file. NULL with a message. */
ShardSet *shards_open(const char *path, char *err, size_t errlen);
void shards_close(ShardSet *s);
/* The set's metadata (the index's, or the file's); NULL when absent. */
const char *shards_meta(const ShardSet *s, const char *key);
/* Tensors, in the index's (or file's) order: key, rank and shape. */
int shards_count(const ShardSet *s);
const char *shards_key(const ShardSet *s, int i, int *ndim, const int64_t **shape);
/* Tensor key's index, or -1. */
int shards_find(const ShardSet *s, const char *key);
/* Fills p's box from the set (p->gshape must be the stored tensor's shape). */
int shards_read(ShardSet *s, const ShardPiece *p, char *err, size_t errlen);
/* Checks every block of every shard the set names against its checksum (a whole read). */
int shards_verify(ShardSet *s, char *err, size_t errlen);

/* A writer's fill (safetensors.h) from a set: tensor i of a file being written is the
 * set's tensor keys[i], whole, read a slab of rows at a time (at most the writer's
 * buffer and two rows). Init with the set and keys; shards_fill_free after. */
typedef struct ShardFill {
  ShardSet *set;
  const char *const *keys;
  float *rows; /* the slab read last: tensor `tensor`, rows [lo, hi) */
  int64_t cap, lo, hi;
  int tensor;
} ShardFill;
int shards_fill(void *arg, int i, int64_t first, int64_t n, float *dst, char *err, size_t errlen);
void shards_fill_free(ShardFill *f);

/* The buffer of reads and writes (bytes): 64 MiB, or COLOSSALC_IO_BUFFER_MB. */
size_t shards_buffer_bytes(void);

#endif
