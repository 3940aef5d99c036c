/* tokens: reading and writing llm.c token files (format and batch layout in
 * tokens.h). The file is validated when opened and then memory-mapped read-only
 * (file_map), so a batch read is a copy out of the page cache with no allocation,
 * and files larger than memory work. Header words and tokens are decoded byte by
 * byte as little-endian, so the code does not depend on the host's byte order.
 */
#include "runtime/io/tokens.h"

#include "runtime/io/fileio.h"
#include "runtime/philox.h"

#include <stdlib.h>
#include <string.h>

#define TOKENS_HEADER_BYTES (TOKENS_HEADER_INTS * 4)

struct TokenFile {
  char *path;
  FileMap map;   /* the whole file (read-only mapping) */
  int64_t count; /* tokens after the header */
  int width;     /* bytes per token: 2 or 4 */
};

/* The token width of a (magic, version) pair: 2, 4, or -1 with a message. */
static int tokens_kind(const char *path, int32_t magic, int32_t version, char *err, size_t errlen) {
  if (magic != TOKENS_MAGIC && magic != TOKENS_MAGIC_U32)
    return file_set_error(err, errlen,
                          "%s: bad magic %d (expected %d, or %d for uint32 tokens): not an "
                          "llm.c token file",
                          path, magic, TOKENS_MAGIC, TOKENS_MAGIC_U32);
  int want = magic == TOKENS_MAGIC ? TOKENS_VERSION : TOKENS_VERSION_U32;
  if (version != want)
    return file_set_error(err, errlen, "%s: unsupported version %d (expected %d with magic %d)", path, version, want,
                          magic);
  return magic == TOKENS_MAGIC ? 2 : 4;
}

/* Checks the header of a file of `size` bytes; fills count and width. */
static int tokens_check_header(TokenFile *tf, const unsigned char *h, uint64_t size, char *err, size_t errlen) {
  const char *path = tf->path;
  int32_t n = (int32_t)file_le32(h + 8);
  tf->width = tokens_kind(path, (int32_t)file_le32(h), (int32_t)file_le32(h + 4), err, errlen);
  if (tf->width < 0) return -1;
  if (n < 0) return file_set_error(err, errlen, "%s: negative token count %d in header", path, n);
  uint64_t want = TOKENS_HEADER_BYTES + (uint64_t)tf->width * (uint64_t)n;
  if (size < want)
    return file_set_error(err, errlen,
                          "%s: truncated: header says %d tokens (%llu bytes) but the "
                          "file has %llu bytes",
                          path, n, (unsigned long long)want, (unsigned long long)size);
  if (size > want)
    return file_set_error(err, errlen,
                          "%s: %llu unexpected bytes after the %d tokens the header "
                          "declares",
                          path, (unsigned long long)(size - want), n);
  tf->count = n;
  return 0;
}

TokenFile *tokens_open(const char *path, char *err, size_t errlen) {
  TokenFile *tf = calloc(1, sizeof *tf);
  if (!tf || !(tf->path = strdup(path))) {
    free(tf);
    file_set_error(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  if (file_map(path, TOKENS_HEADER_BYTES, "an llm.c token file", &tf->map, err, errlen) != 0 ||
      tokens_check_header(tf, tf->map.data, tf->map.len, err, errlen) != 0) {
    tokens_close(tf);
    return NULL;
  }
  return tf;
}

void tokens_close(TokenFile *tf) {
  if (!tf) return;
  file_unmap(&tf->map);
  free(tf->path);
  free(tf);
}

int64_t tokens_count(const TokenFile *tf) { return tf->count; }

int tokens_width(const TokenFile *tf) { return tf->width; }

uint32_t tokens_at(const TokenFile *tf, int64_t pos) {
  if (tf->count == 0) return 0;
  int64_t i = pos % tf->count;
  if (i < 0) i += tf->count;
  const unsigned char *p = tf->map.data + TOKENS_HEADER_BYTES + tf->width * i;
  return tf->width == 2 ? (uint32_t)(p[0] | p[1] << 8) : file_le32(p);
}

int tokens_check_batch(const TokenFile *tf, int B, int T, int world, char *err, size_t errlen) {
  if (B <= 0 || T <= 0 || world <= 0)
    return file_set_error(err, errlen, "%s: batch %d, sequence %d and world %d must all be positive", tf->path, B, T,
                          world);
  if (B % world != 0)
    return file_set_error(err, errlen, "%s: global batch %d does not divide over %d data-parallel ranks", tf->path, B,
                          world);
  int64_t need = (int64_t)B * T + 1;
  if (tf->count < need)
    return file_set_error(err, errlen,
                          "%s: %lld tokens, but one step of batch %d x sequence %d needs "
                          "%lld (batch*seq+1)",
                          tf->path, (long long)tf->count, B, T, (long long)need);
  return 0;
}

/* The first token of row `row` of step `step` (tokens.h): in order, or of its sequence. */
static int64_t tokens_row_start(const TokenFile *tf, int64_t step, int B, int T, int64_t row, const uint32_t *shuffle) {
  int64_t n = tf->count;
  if (shuffle) return (int64_t)philox_shuffle_pick(shuffle, (uint64_t)((n - 1) / T), step, B, row) * T;
  /* count < 2^31, so these products of residues fit in int64 */
  int64_t g = ((step % n) * (B % n) + row) % n;
  return g * T % n;
}

/* T inputs and targets from pos on (modulo the count); a token beyond i32 fails. */
static int tokens_read_row(const TokenFile *tf, int64_t pos, int T, int32_t *inputs, int32_t *targets, char *err,
                           size_t errlen) {
  uint32_t next = tokens_at(tf, pos);
  for (int i = 0; i < T; i++) {
    uint32_t cur = next;
    next = tokens_at(tf, pos + i + 1);
    if (cur > INT32_MAX || next > INT32_MAX)
      return file_set_error(err, errlen,
                            "%s: token %u at position %lld does not fit an "
                            "i32 id",
                            tf->path, cur > INT32_MAX ? cur : next,
                            (long long)((pos + i + (cur <= INT32_MAX)) % tf->count));
    inputs[i] = (int32_t)cur, targets[i] = (int32_t)next;
  }
  return 0;
}

int tokens_read_batch(const TokenFile *tf, int64_t step, int B, int T, int rank, int world, const uint32_t *shuffle,
                      int32_t *inputs, int32_t *targets, char *err, size_t errlen) {
  if (tokens_check_batch(tf, B, T, world, err, errlen) != 0) return -1;
  if (rank < 0 || rank >= world)
    return file_set_error(err, errlen, "%s: rank %d out of range for world %d", tf->path, rank, world);
  if (step < 0) return file_set_error(err, errlen, "%s: negative step %lld", tf->path, (long long)step);
  int rows = B / world;
  for (int b = 0; b < rows; b++) {
    int64_t pos = tokens_row_start(tf, step, B, T, (int64_t)rank * rows + b, shuffle);
    if (tokens_read_row(tf, pos, T, inputs + (int64_t)b * T, targets + (int64_t)b * T, err, errlen) != 0) return -1;
  }
  return 0;
}

/* The header and the tokens (width bytes each, little-endian) as one atomic write. */
static int tokens_write(const char *path, const void *tokens, size_t n, int width, char *err, size_t errlen) {
  if (n > INT32_MAX)
    return file_set_error(err, errlen, "%s: %zu tokens do not fit the int32 count of a token file", path, n);
  unsigned char header[TOKENS_HEADER_BYTES] = {0};
  file_put_le32(header, width == 2 ? TOKENS_MAGIC : TOKENS_MAGIC_U32);
  file_put_le32(header + 4, width == 2 ? TOKENS_VERSION : TOKENS_VERSION_U32);
  file_put_le32(header + 8, (uint32_t)n);
  unsigned char *body = malloc((size_t)width * n + 1);
  if (!body) return file_set_error(err, errlen, "%s: out of memory", path);
  for (size_t i = 0; i < n; i++) {
    uint32_t v = width == 2 ? ((const uint16_t *)tokens)[i] : ((const uint32_t *)tokens)[i];
    for (int b = 0; b < width; b++) body[width * i + b] = (unsigned char)(v >> 8 * b);
  }
  const void *chunks[2] = {header, body};
  size_t lens[2] = {sizeof header, (size_t)width * n};
  int rc = file_write_atomic(path, chunks, lens, 2, err, errlen);
  free(body);
  return rc;
}

int tokens_write_file(const char *path, const uint16_t *tokens, size_t n, char *err, size_t errlen) {
  return tokens_write(path, tokens, n, 2, err, errlen);
}

int tokens_write_file32(const char *path, const uint32_t *tokens, size_t n, char *err, size_t errlen) {
  return tokens_write(path, tokens, n, 4, err, errlen);
}
