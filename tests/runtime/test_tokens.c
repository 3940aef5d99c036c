/* test_tokens: token files round-trip through tokens_write_file/tokens_open; a
 * step reads the B*T+1 tokens at step*B*T modulo the count, inputs then targets
 * shifted by one; the rows of data-parallel ranks put together equal the 1-rank
 * batch; huge step numbers do not overflow; malformed files and impossible batch
 * shapes are refused with clear messages. uint32 files (llm.c's magic 20240801)
 * round-trip too, and a token beyond i32 is refused. Shuffled (a Philox key), every
 * sequence is read once per epoch, each epoch in another order, the ranks' rows
 * still make up the 1-rank batch, and philox_permute is a bijection.
 *
 *   test_tokens                        the unit checks
 *   test_tokens mktokens-check IN OUT  OUT (made by colossalc-mktokens) holds the
 *                                      bytes of IN as tokens
 */
#include "runtime/io/fileio.h"
#include "runtime/philox.h"
#include "runtime/io/tokens.h"

#include "rt_test.h"

#include <errno.h>
#include <stdint.h>

static char err[1024];

enum { NTOK = 1000 };
static uint16_t toks[NTOK];

static TokenFile *open_ok(const char *path) {
  TokenFile *tf = tokens_open(path, err, sizeof err);
  if (!tf) fprintf(stderr, "tokens_open: %s\n", err);
  CHECK(tf != NULL);
  return tf;
}

/* Expected token at position p of the stream (any p >= 0, as 128-bit math). */
static int32_t ref_at(unsigned __int128 p) { return toks[(size_t)(p % NTOK)]; }

/* One step of one rank against the reference formula. */
static void check_step(const TokenFile *tf, int64_t step, int B, int T, int rank, int world) {
  int local = B / world * T;
  int32_t *in = malloc(local * sizeof *in), *tg = malloc(local * sizeof *tg);
  CHECK(tokens_read_batch(tf, step, B, T, rank, world, NULL, in, tg, err, sizeof err) == 0);
  unsigned __int128 start = (unsigned __int128)step * B * T + (unsigned __int128)rank * local;
  int bad = 0;
  for (int i = 0; i < local; i++) bad += in[i] != ref_at(start + i) || tg[i] != ref_at(start + i + 1);
  CHECK(bad == 0);
  free(in);
  free(tg);
}

/* The ranks' rows, concatenated in rank order, equal the 1-rank batch. */
static void check_ranks_concat_key(const TokenFile *tf, int64_t step, int B, int T, int world, const uint32_t *key) {
  int32_t *in1 = malloc(B * T * sizeof *in1), *tg1 = malloc(B * T * sizeof *tg1);
  int32_t *in = malloc(B * T * sizeof *in), *tg = malloc(B * T * sizeof *tg);
  CHECK(tokens_read_batch(tf, step, B, T, 0, 1, key, in1, tg1, err, sizeof err) == 0);
  int local = B / world * T;
  for (int r = 0; r < world; r++)
    CHECK(tokens_read_batch(tf, step, B, T, r, world, key, in + r * local, tg + r * local, err, sizeof err) == 0);
  CHECK(memcmp(in, in1, B * T * sizeof *in) == 0);
  CHECK(memcmp(tg, tg1, B * T * sizeof *tg) == 0);
  free(in1), free(tg1), free(in), free(tg);
}

static void check_ranks_concat(const TokenFile *tf, int64_t step, int B, int T, int world) {
  check_ranks_concat_key(tf, step, B, T, world, NULL);
}

static void test_roundtrip_and_batches(void) {
  for (int i = 0; i < NTOK; i++) toks[i] = (uint16_t)((i * 7919u + 13) % 65536); /* values above 255 too */
  toks[5] = 65535;
  CHECK(tokens_write_file(rt_path("t.bin"), toks, NTOK, err, sizeof err) == 0);
  TokenFile *tf = open_ok(rt_path("t.bin"));
  if (!tf) return;
  CHECK(tokens_count(tf) == NTOK);
  CHECK(tokens_at(tf, 5) == 65535 && tokens_at(tf, NTOK + 5) == 65535);
  int32_t in[32], tg[32];
  CHECK(tokens_read_batch(tf, 0, 4, 8, 0, 1, NULL, in, tg, err, sizeof err) == 0);
  CHECK(in[0] == toks[0] && tg[0] == toks[1] && in[31] == toks[31] && tg[31] == toks[32]);
  for (int64_t step = 0; step < 70; step++) /* 32 does not divide 1000: wraps mid-batch */
    check_step(tf, step, 4, 8, 0, 1);
  check_step(tf, 31, 4, 8, 0, 1); /* window 992..1024: wraps */
  check_step(tf, INT64_MAX / 64, 4, 8, 0, 1);
  check_step(tf, 1000000000000ll, 6, 111, 1, 3);
  for (int64_t step = 0; step < 40; step++) {
    check_ranks_concat(tf, step, 8, 16, 2);
    check_ranks_concat(tf, step, 8, 16, 4);
    check_ranks_concat(tf, step, 6, 5, 3);
    check_step(tf, step, 8, 16, 3, 4);
  }
  check_ranks_concat(tf, 0, 9, 111, 1); /* B*T+1 == count exactly */
  tokens_close(tf);
}

static void test_batch_errors(void) {
  TokenFile *tf = open_ok(rt_path("t.bin"));
  if (!tf) return;
  int32_t in[1024], tg[1024];
  CHECK(tokens_check_batch(tf, 9, 111, 1, err, sizeof err) == 0);
  CHECK(tokens_check_batch(tf, 10, 100, 1, err, sizeof err) == -1); /* needs 1001 */
  CHECK_ERR(err, "1000 tokens, but one step of batch 10 x sequence 100 needs 1001");
  CHECK(tokens_read_batch(tf, 0, 10, 100, 0, 1, NULL, in, tg, err, sizeof err) == -1);
  CHECK_ERR(err, "needs 1001");
  CHECK(tokens_read_batch(tf, 0, 6, 4, 0, 4, NULL, in, tg, err, sizeof err) == -1);
  CHECK_ERR(err, "global batch 6 does not divide over 4");
  CHECK(tokens_read_batch(tf, 0, 8, 4, 4, 4, NULL, in, tg, err, sizeof err) == -1);
  CHECK_ERR(err, "rank 4 out of range for world 4");
  CHECK(tokens_read_batch(tf, -1, 8, 4, 0, 4, NULL, in, tg, err, sizeof err) == -1);
  CHECK_ERR(err, "negative step");
  CHECK(tokens_read_batch(tf, 0, 0, 4, 0, 1, NULL, in, tg, err, sizeof err) == -1);
  CHECK_ERR(err, "must all be positive");
  tokens_close(tf);
}

/* A header of 256 little-endian int32 with the given first three words. */
static void make_header(unsigned char *h, int32_t magic, int32_t version, int32_t count) {
  memset(h, 0, 1024);
  int32_t w[3] = {magic, version, count};
  for (int i = 0; i < 3; i++)
    for (int b = 0; b < 4; b++) h[4 * i + b] = (unsigned char)((uint32_t)w[i] >> (8 * b));
}

static void expect_open_error(const char *name, const void *bytes, size_t len, const char *want) {
  rt_write_raw(rt_path(name), bytes, len);
  TokenFile *tf = tokens_open(rt_path(name), err, sizeof err);
  CHECK(tf == NULL);
  tokens_close(tf);
  CHECK_ERR(err, name);
  CHECK_ERR(err, want);
}

static void test_malformed_files(void) {
  static unsigned char buf[1024 + 2 * 100 + 8];
  make_header(buf, 1234, 1, 100);
  expect_open_error("magic.bin", buf, 1024 + 200,
                    "bad magic 1234 (expected 20240520, or 20240801 for uint32 tokens): not an llm.c token file");
  make_header(buf, TOKENS_MAGIC, 2, 100);
  expect_open_error("version.bin", buf, 1024 + 200, "unsupported version 2 (expected 1 with magic 20240520)");
  make_header(buf, TOKENS_MAGIC, 1, 100);
  expect_open_error("trunc.bin", buf, 1024 + 150,
                    "truncated: header says 100 tokens (1224 bytes) but the file has 1174");
  expect_open_error("short.bin", buf, 600, "truncated: 600 bytes, shorter than the 1024");
  expect_open_error("zero.bin", buf, 0, "truncated: 0 bytes");
  expect_open_error("extra.bin", buf, 1024 + 204, "4 unexpected bytes after the 100 tokens");
  make_header(buf, TOKENS_MAGIC, 1, -5);
  expect_open_error("negative.bin", buf, 1024, "negative token count -5");
  CHECK(tokens_open(rt_path("missing.bin"), err, sizeof err) == NULL);
  CHECK_ERR(err, "missing.bin: cannot open");
  CHECK_ERR(err, strerror(ENOENT));
  make_header(buf, TOKENS_MAGIC, 1, 0); /* valid, but no step fits */
  rt_write_raw(rt_path("none.bin"), buf, 1024);
  TokenFile *tf = open_ok(rt_path("none.bin"));
  if (tf) {
    CHECK(tokens_count(tf) == 0);
    CHECK(tokens_check_batch(tf, 1, 1, 1, err, sizeof err) == -1);
    CHECK_ERR(err, "0 tokens, but one step of batch 1 x sequence 1 needs 2");
    tokens_close(tf);
  }
}

static void test_write_errors(void) {
  CHECK(tokens_write_file(rt_path("no/dir/t.bin"), toks, 10, err, sizeof err) == -1);
  CHECK_ERR(err, "no/dir/t.bin");
}

/* uint32 tokens: llm.c's second header, values past 65535, and one past i32. */
static void test_uint32(void) {
  static uint32_t big[NTOK];
  for (int i = 0; i < NTOK; i++) big[i] = (uint32_t)i * 40000u + 7; /* up to about 4e7 */
  CHECK(tokens_write_file32(rt_path("u32.bin"), big, NTOK, err, sizeof err) == 0);
  TokenFile *tf = open_ok(rt_path("u32.bin"));
  if (!tf) return;
  CHECK(tokens_width(tf) == 4 && tokens_count(tf) == NTOK);
  CHECK(tokens_at(tf, 999) == big[999] && tokens_at(tf, NTOK + 3) == big[3]);
  int32_t in[64], tg[64];
  CHECK(tokens_read_batch(tf, 2, 4, 16, 1, 2, NULL, in, tg, err, sizeof err) == 0);
  CHECK(in[0] == (int32_t)big[160] && tg[31] == (int32_t)big[192]);
  tokens_close(tf);
  big[200] = 0x80000000u;
  CHECK(tokens_write_file32(rt_path("u32big.bin"), big, NTOK, err, sizeof err) == 0);
  if (!(tf = open_ok(rt_path("u32big.bin")))) return;
  CHECK(tokens_read_batch(tf, 0, 4, 16, 0, 1, NULL, in, tg, err, sizeof err) == 0);
  CHECK(tokens_read_batch(tf, 3, 4, 16, 0, 1, NULL, in, tg, err, sizeof err) == -1);
  CHECK_ERR(err, "token 2147483648 at position 200 does not fit an i32 id");
  tokens_close(tf);
  static unsigned char buf[1024 + 8];
  make_header(buf, TOKENS_MAGIC_U32, 1, 2);
  expect_open_error("u32version.bin", buf, 1024 + 8, "unsupported version 1 (expected 7 with magic 20240801)");
  make_header(buf, TOKENS_MAGIC_U32, TOKENS_VERSION_U32, 2);
  expect_open_error("u32trunc.bin", buf, 1024 + 4, "header says 2 tokens (1032 bytes)");
}

/* philox_permute maps [0, n) onto itself one to one, for sizes around powers of 4. */
static void test_permutation(void) {
  static const uint64_t sizes[] = {1, 2, 3, 4, 5, 16, 17, 1000, 4097};
  static unsigned char seen[4097];
  uint32_t key[2];
  philox_key_derive(7, "shuffle", key);
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    uint64_t n = sizes[s], fixed = 0;
    memset(seen, 0, sizeof seen);
    for (uint64_t i = 0; i < n; i++) {
      uint64_t p = philox_permute(key, 3, n, i);
      CHECK(p < n && !seen[p]);
      seen[p < n ? p : 0] = 1;
      fixed += p == i;
    }
    CHECK(n < 1000 || fixed < n / 100); /* shuffled, not the identity */
  }
}

/* Shuffled: T = 8 over 1000 tokens is S = 124 sequences (999 / 8); batch 4 gives 31
 * steps an epoch. Each epoch reads every sequence once, as whole sequences; the two
 * epochs and two keys differ; the ranks' rows make up the 1-rank batch. */
static void test_shuffle(void) {
  static uint32_t ident[NTOK];
  for (int i = 0; i < NTOK; i++) ident[i] = (uint32_t)i;
  CHECK(tokens_write_file32(rt_path("ident.bin"), ident, NTOK, err, sizeof err) == 0);
  TokenFile *tf = open_ok(rt_path("ident.bin"));
  if (!tf) return;
  uint32_t key[2], other[2];
  philox_key_derive(1337, "shuffle", key);
  philox_key_derive(1338, "shuffle", other);
  int32_t in[32], tg[32], first[2][124], diff_key = 0;
  for (int e = 0; e < 2; e++) {
    unsigned char seen[124] = {0};
    for (int k = 0; k < 31; k++) {
      CHECK(tokens_read_batch(tf, 31 * e + k, 4, 8, 0, 1, key, in, tg, err, sizeof err) == 0);
      for (int b = 0; b < 4; b++) {
        int32_t j = in[8 * b] / 8;
        CHECK(in[8 * b] % 8 == 0 && j >= 0 && j < 124 && !seen[j]);
        seen[j >= 0 && j < 124 ? j : 0] = 1;
        first[e][4 * k + b] = j;
        for (int i = 0; i < 8; i++) CHECK(in[8 * b + i] == 8 * j + i && tg[8 * b + i] == 8 * j + i + 1);
      }
      int32_t in2[32], tg2[32];
      CHECK(tokens_read_batch(tf, 31 * e + k, 4, 8, 0, 1, other, in2, tg2, err, sizeof err) == 0);
      diff_key += memcmp(in, in2, sizeof in) != 0;
    }
  }
  CHECK(memcmp(first[0], first[1], sizeof first[0]) != 0);
  CHECK(diff_key > 50);
  for (int64_t step = 0; step < 40; step++) {
    check_ranks_concat_key(tf, step, 8, 16, 2, key);
    check_ranks_concat_key(tf, step, 6, 5, 3, key);
  }
  CHECK(tokens_read_batch(tf, INT64_MAX / 8, 4, 8, 1, 2, key, in, tg, err, sizeof err) == 0);
  tokens_close(tf);
}

static int mktokens_check(const char *in, const char *out) {
  size_t n = 0;
  unsigned char *bytes = file_read_all(in, &n, err, sizeof err);
  TokenFile *tf = tokens_open(out, err, sizeof err);
  if (!bytes || !tf) {
    fprintf(stderr, "mktokens-check: %s\n", err);
    return 1;
  }
  CHECK(tokens_count(tf) == (int64_t)n);
  int bad = 0, high = 0;
  for (size_t i = 0; i < n && tokens_count(tf) == (int64_t)n; i++) {
    bad += tokens_at(tf, (int64_t)i) != bytes[i];
    high += bytes[i] >= 128; /* UTF-8 multi-byte sequences are in the sample */
  }
  CHECK(bad == 0);
  CHECK(high > 0);
  printf("mktokens-check: %zu tokens match the bytes of %s\n", n, in);
  tokens_close(tf);
  free(bytes);
  return rt_finish("test_tokens mktokens-check");
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "mktokens-check") == 0) return mktokens_check(argv[2], argv[3]);
  rt_mkdir_scratch("tokens");
  test_roundtrip_and_batches();
  test_batch_errors();
  test_malformed_files();
  test_write_errors();
  test_uint32();
  test_permutation();
  test_shuffle();
  return rt_finish("test_tokens");
}
