/* test_shards: pieces of tensors in shards and sets read back in other pieces
 * (runtime/io/shards.h), against the whole tensors they came from.
 *
 * A 3-D tensor of 2.4 MB (three checksum blocks) and a 1-D one are written by three
 * "ranks", each its own shard: the 3-D one in blocks along its middle dimension, two of
 * them held inside larger arrays (as a tp rank holds its blocks), the 1-D one in two
 * pieces. Then, with the read buffer at its smallest (1 MiB: several windows a piece):
 * every box of a list (whole, rows, columns, a corner, a single element, one across
 * every piece) is read and compared element by element; a box of elements no piece
 * holds, a tensor of another shape and a missing tensor are refused; the set merged
 * into one file (shards_fill) reads back whole; and one byte flipped in a shard fails
 * the reads of boxes that touch its block, with "checksum", while a box elsewhere in
 * that piece still reads.
 */
#include "runtime/io/shards.h"

#include "rt_test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/fileio.h"

static char err[1024];

enum { A = 12, B = 50, C = 1000 }; /* 600,000 floats: 2.4 MB */
static const int64_t shape3[3] = {A, B, C}, shape1[1] = {10};
static float *whole3, whole1[10];

/* The box [lo, lo + n) of whole3 read from s, compared element by element; 0 if equal. */
static int read_box(ShardSet *s, const int64_t lo[3], const int64_t n[3]) {
  float *got = calloc((size_t)(n[0] * n[1] * n[2]) + 1, sizeof *got);
  ShardPiece w = {.key = "t3", .ndim = 3, .gshape = shape3, .data = got};
  memcpy(w.gstart, lo, 3 * sizeof *lo), memcpy(w.count, n, 3 * sizeof *n);
  int rc = shards_read(s, &w, err, sizeof err), bad = 0;
  for (int64_t i = 0; rc == 0 && i < n[0]; i++)
    for (int64_t j = 0; j < n[1]; j++)
      for (int64_t k = 0; k < n[2]; k++)
        bad += got[(i * n[1] + j) * n[2] + k] != whole3[((lo[0] + i) * B + lo[1] + j) * C + lo[2] + k];
  free(got);
  return rc != 0 ? -1 : bad;
}

static const int64_t boxes[][2][3] = {
    {{0, 0, 0}, {A, B, C}},      {{3, 0, 0}, {2, B, C}},  {{0, 0, 17}, {A, B, 300}},  {{11, 49, 999}, {1, 1, 1}},
    {{5, 10, 990}, {7, 25, 10}}, {{0, 7, 0}, {A, 36, C}}, {{6, 20, 500}, {1, 30, 1}},
};

/* Rank r's shard: t3's middle dimension in three blocks [0,8) [8,40) [40,50) (rank 1's of
 * 1.5 MB: two checksum blocks), blocks 1 and 2 held in arrays wider than the block; t1
 * in two pieces, on ranks 0 and 2. */
static void write_rank(int r, float *scratch) {
  static const int64_t lo[3] = {0, 8, 40}, len[3] = {8, 32, 10};
  int64_t ashape[3] = {A, len[r] + 3 * r, C}; /* rank r's array: its block at column 2r */
  for (int64_t i = 0; i < A; i++)
    for (int64_t j = 0; j < len[r]; j++)
      memcpy(scratch + (i * ashape[1] + 2 * r + j) * C, whole3 + (i * B + lo[r] + j) * C, C * sizeof(float));
  ShardPiece ps[2] = {{.key = "t3", .ndim = 3, .gshape = shape3, .data = scratch, .ashape = ashape}};
  ps[0].gstart[1] = lo[r], ps[0].astart[1] = 2 * r;
  ps[0].count[0] = A, ps[0].count[1] = len[r], ps[0].count[2] = C;
  int n = 1;
  if (r != 1) {
    ps[1] = (ShardPiece){.key = "t1", .ndim = 1, .gshape = shape1, .data = whole1 + (r ? 4 : 0)};
    ps[1].gstart[0] = r ? 4 : 0, ps[1].count[0] = r ? 6 : 4;
    n = 2;
  }
  char path[600];
  snprintf(path, sizeof path, "%s/shard-%d.safetensors", rt_path("set"), r);
  CHECK(shards_write(path, ps, n, NULL, NULL, 0, 1 << 20, err, sizeof err) == 0);
}

static void test_boxes(ShardSet *s) {
  for (size_t b = 0; b < sizeof boxes / sizeof *boxes; b++) CHECK(read_box(s, boxes[b][0], boxes[b][1]) == 0);
  float t1[6];
  ShardPiece w = {.key = "t1", .ndim = 1, .gshape = shape1, .data = t1, .gstart = {2}, .count = {6}};
  CHECK(shards_read(s, &w, err, sizeof err) == 0 && memcmp(t1, whole1 + 2, sizeof t1) == 0);
  int64_t big[3] = {A, B + 1, C}; /* another model's shape */
  float one;
  ShardPiece x = {.key = "t3", .ndim = 3, .gshape = big, .data = &one, .count = {1, 1, 1}};
  CHECK(shards_read(s, &x, err, sizeof err) == -1);
  CHECK_ERR(err, "a checkpoint of another model");
  x.key = "nope", x.gshape = shape3;
  CHECK(shards_read(s, &x, err, sizeof err) == -1);
  CHECK_ERR(err, "holds no tensor 'nope'");
}

static void test_merge(ShardSet *s) {
  static const char *const keys[2] = {"t3", "t1"};
  SafeTensorOut out[2] = {{"t3", 3, shape3, NULL}, {"t1", 1, shape1, NULL}};
  ShardFill f = {.set = s, .keys = keys, .tensor = -1};
  CHECK(safetensors_write_stream(rt_path("merged.safetensors"), out, 2, NULL, NULL, 0, shards_fill, &f, 1 << 20, err,
                                 sizeof err) == 0);
  shards_fill_free(&f);
  ShardSet *m = shards_open(rt_path("merged.safetensors"), err, sizeof err);
  CHECK(m != NULL && shards_count(m) == 2);
  if (m) CHECK(read_box(m, boxes[0][0], boxes[0][1]) == 0 && shards_verify(m, err, sizeof err) == 0);
  shards_close(m);
}

/* One byte of rank 1's shard flipped, in the second block of its t3 piece. */
static void test_flip(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/shard-1.safetensors", rt_path("set"));
  size_t n = 0;
  unsigned char *b = file_read_all(path, &n, err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  b[n - 100] ^= 1; /* in rank 1's piece, its file's only tensor: its second block */
  rt_write_raw(path, b, n);
  free(b);
  ShardSet *s = shards_open(rt_path("set"), err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  int64_t last[3] = {11, 39, 999}, one[3] = {1, 1, 1}, first[3] = {0, 8, 0}, row[3] = {1, 1, C};
  CHECK(read_box(s, last, one) == -1);
  CHECK_ERR(err, "checksum mismatch");
  CHECK(read_box(s, first, row) == 0); /* its first block is whole */
  CHECK(shards_verify(s, err, sizeof err) == -1);
  shards_close(s);
}

int main(void) {
  rt_mkdir_scratch("shards");
  setenv("COLOSSALC_IO_BUFFER_MB", "1", 1);
  whole3 = malloc((size_t)A * B * C * sizeof *whole3);
  float *scratch = calloc((size_t)A * (B + 6) * C, sizeof *scratch);
  for (int64_t i = 0; i < (int64_t)A * B * C; i++) whole3[i] = (float)i * 0.5f - 7.0f;
  for (int i = 0; i < 10; i++) whole1[i] = (float)i + 0.25f;
  mkdir(rt_path("set"), 0755);
  for (int r = 0; r < 3; r++) write_rank(r, scratch);
  const char *names[3] = {"shard-0.safetensors", "shard-1.safetensors", "shard-2.safetensors"};
  static const char *const k[1] = {"step"}, *const v[1] = {"7"};
  CHECK(shards_write_index(rt_path("set"), names, 3, "test", k, v, 1, err, sizeof err) == 0);
  ShardSet *s = shards_open(rt_path("set"), err, sizeof err);
  CHECK(s != NULL);
  if (s) {
    CHECK(shards_count(s) == 2 && shards_meta(s, "step") && !strcmp(shards_meta(s, "step"), "7"));
    test_boxes(s);
    test_merge(s);
    CHECK(shards_verify(s, err, sizeof err) == 0);
  }
  shards_close(s);
  /* a box no piece covers: rank 2's shard left out of the index */
  CHECK(shards_write_index(rt_path("set"), names, 2, "test", NULL, NULL, 0, err, sizeof err) == 0);
  s = shards_open(rt_path("set"), err, sizeof err);
  int64_t lo[3] = {0, 36, 0}, n[3] = {1, 10, 1};
  CHECK(s && read_box(s, lo, n) == -1);
  CHECK_ERR(err, "its pieces hold 4 of the 10 elements read");
  shards_close(s);
  CHECK(shards_write_index(rt_path("set"), names, 3, "test", NULL, NULL, 0, err, sizeof err) == 0);
  test_flip();
  free(whole3), free(scratch);
  return rt_finish("test_shards");
}
