/* test_records: record files round-trip through records_write_file/records_open (every
 * field's name, dtype, shape and values); rows in order wrap at the end and shuffled
 * rows read every record once per epoch, a new order each epoch; malformed files are
 * refused with a message naming the file and what is wrong.
 *
 *   test_records                         the unit checks
 *   test_records mkdata-check FILE N     FILE (made by colossalc-mkdata from
 *                                        tests/runtime/make_npy.py's arrays) holds them
 */
#include "runtime/io/fileio.h"
#include "runtime/philox.h"
#include "runtime/io/records.h"

#include "rt_test.h"

#include <stdint.h>

static char err[1024];

enum { NREC = 50 };

/* Two fields: "x" f32 [2, 3] = r + k / 10, "y" i32 [] = 7 r - 100. */
static int write_two(const char *path, int64_t n) {
  static float x[NREC * 6];
  static int32_t y[NREC];
  for (int r = 0; r < NREC; r++) {
    for (int k = 0; k < 6; k++) x[6 * r + k] = (float)r + (float)k / 10;
    y[r] = 7 * r - 100;
  }
  RecField f[2] = {{"x", REC_F32, 2, {2, 3}, 6}, {"y", REC_I32, 0, {0}, 1}};
  const void *data[2] = {x, y};
  return records_write_file(path, f, 2, data, n, err, sizeof err);
}

static void test_roundtrip(void) {
  CHECK(write_two(rt_path("two.bin"), NREC) == 0);
  RecordFile *rf = records_open(rt_path("two.bin"), err, sizeof err);
  CHECK(rf != NULL);
  if (!rf) return;
  CHECK(records_count(rf) == NREC && records_nfields(rf) == 2);
  CHECK(records_find(rf, "y") == 1 && records_find(rf, "z") == -1);
  const RecField *x = records_field(rf, 0);
  CHECK(x->dtype == REC_F32 && x->ndim == 2 && x->shape[1] == 3 && x->elems == 6);
  CHECK(records_field(rf, 1)->ndim == 0 && records_field(rf, 1)->elems == 1);
  float v[6];
  int32_t y;
  records_get(rf, 0, 17, v);
  records_get(rf, 1, 17, &y);
  CHECK(v[0] == 17.0f && v[5] == 17.5f && y == 19);
  records_close(rf);
}

static void test_rows(void) {
  RecordFile *rf = records_open(rt_path("two.bin"), err, sizeof err);
  if (!rf) return;
  CHECK(records_row(rf, 0, 8, 3, NULL) == 3 && records_row(rf, 6, 8, 3, NULL) == 1);
  CHECK(records_row(rf, INT64_MAX / 8, 8, 7, NULL) == ((INT64_MAX / 8) % NREC * 8 + 7) % NREC);
  uint32_t key[2];
  philox_key_derive(1337, "shuffle", key);
  int first[2][NREC];
  for (int e = 0; e < 2; e++) { /* 10 rows a step: an epoch is 5 steps */
    int seen[NREC] = {0};
    for (int k = 0; k < 5; k++)
      for (int b = 0; b < 10; b++) {
        int64_t r = records_row(rf, 5 * e + k, 10, b, key);
        CHECK(r >= 0 && r < NREC && !seen[r]);
        seen[r >= 0 && r < NREC ? r : 0] = 1;
        first[e][10 * k + b] = (int)r;
      }
  }
  CHECK(memcmp(first[0], first[1], sizeof first[0]) != 0);
  records_close(rf);
}

/* A header with magic, version, count, fields, then field 0 named "a" of dtype and ndim
 * with dims {2, 0...}, and bytes of body after it. */
static void make_file(const char *name, int32_t magic, int32_t version, int32_t n, int32_t nf, int32_t dtype,
                      int32_t ndim, int32_t dim, size_t body) {
  static unsigned char buf[1024 + 4096];
  memset(buf, 0, sizeof buf);
  int32_t w[4] = {magic, version, n, nf};
  for (int i = 0; i < 4; i++) file_put_le32(buf + 4 * i, (uint32_t)w[i]);
  for (int f = 0; f < nf && f < 12; f++) {
    unsigned char *d = buf + 16 + 80 * f;
    d[0] = 'a', d[1] = nf == 2 ? 0 : (unsigned char)('a' + f); /* two: both "a" */
    file_put_le32(d + 48, (uint32_t)dtype);
    file_put_le32(d + 52, (uint32_t)ndim);
    file_put_le32(d + 56, (uint32_t)dim);
  }
  rt_write_raw(rt_path(name), buf, 1024 + body);
}

static void expect_bad(const char *name, const char *want) {
  RecordFile *rf = records_open(rt_path(name), err, sizeof err);
  CHECK(rf == NULL);
  records_close(rf);
  CHECK_ERR(err, name);
  CHECK_ERR(err, want);
}

static void test_malformed(void) {
  make_file("ok.bin", RECORDS_MAGIC, 1, 3, 1, REC_I32, 1, 2, 24);
  RecordFile *rf = records_open(rt_path("ok.bin"), err, sizeof err);
  CHECK(rf != NULL);
  records_close(rf);
  make_file("magic.bin", 20240520, 1, 3, 1, REC_I32, 1, 2, 24);
  expect_bad("magic.bin", "bad magic 20240520 (expected 20250601): not a record file");
  make_file("version.bin", RECORDS_MAGIC, 2, 3, 1, REC_I32, 1, 2, 24);
  expect_bad("version.bin", "unsupported version 2 (expected 1)");
  make_file("nf.bin", RECORDS_MAGIC, 1, 3, 13, REC_I32, 1, 2, 24);
  expect_bad("nf.bin", "3 records of 13 fields (1 to 12)");
  make_file("dtype.bin", RECORDS_MAGIC, 1, 3, 1, 3, 1, 2, 24);
  expect_bad("dtype.bin", "field aa: unknown dtype 3");
  make_file("ndim.bin", RECORDS_MAGIC, 1, 3, 1, REC_I32, 7, 2, 24);
  expect_bad("ndim.bin", "field aa: ndim 7 outside [0, 6]");
  make_file("dim.bin", RECORDS_MAGIC, 1, 3, 1, REC_I32, 1, 0, 24);
  expect_bad("dim.bin", "field aa: bad dimension 0");
  make_file("dup.bin", RECORDS_MAGIC, 1, 3, 2, REC_I32, 1, 2, 48);
  expect_bad("dup.bin", "two fields named a");
  make_file("trunc.bin", RECORDS_MAGIC, 1, 3, 1, REC_I32, 1, 2, 20);
  expect_bad("trunc.bin", "truncated: the header says 3 records (1048 bytes) but the file has 1044");
  make_file("extra.bin", RECORDS_MAGIC, 1, 3, 1, REC_I32, 1, 2, 28);
  expect_bad("extra.bin", "unexpected bytes");
  make_file("short.bin", RECORDS_MAGIC, 1, 3, 1, REC_I32, 1, 2, 0);
  rt_write_raw(rt_path("short.bin"), "abc", 3);
  expect_bad("short.bin", "truncated: 3 bytes, shorter than the 1024-byte header of a record file");
  RecField bad = {"no space", REC_I32, 0, {0}, 1};
  const void *data[1] = {""};
  CHECK(records_write_file(rt_path("w.bin"), &bad, 1, data, 0, err, sizeof err) == -1);
  CHECK_ERR(err, "field 'no space': a name of 1 to 47 letters");
  CHECK(write_two(rt_path("no/dir/two.bin"), NREC) == -1);
  CHECK_ERR(err, "no/dir/two.bin");
}

/* make_npy.py's arrays: "pixels" f32 [N, 2, 2] = r + k / 4, "label" i32 [N] = r % 3,
 * "ids" i32 [N, 3] = 1000 r + k (from int64), "flag" i32 [N] from bools (r odd). */
static int mkdata_check(const char *path, int64_t n) {
  RecordFile *rf = records_open(path, err, sizeof err);
  if (!rf) {
    fprintf(stderr, "mkdata-check: %s\n", err);
    return 1;
  }
  CHECK(records_count(rf) == n && records_nfields(rf) == 4);
  int px = records_find(rf, "pixels"), lb = records_find(rf, "label"), id = records_find(rf, "ids"),
      fl = records_find(rf, "flag");
  CHECK(px >= 0 && lb >= 0 && id >= 0 && fl >= 0);
  CHECK(records_field(rf, px)->dtype == REC_F32 && records_field(rf, id)->dtype == REC_I32);
  int bad = 0;
  for (int64_t r = 0; r < n && px >= 0 && lb >= 0 && id >= 0 && fl >= 0; r++) {
    float p[4];
    int32_t l, ids[3], f;
    records_get(rf, px, r, p), records_get(rf, lb, r, &l);
    records_get(rf, id, r, ids), records_get(rf, fl, r, &f);
    for (int k = 0; k < 4; k++) bad += p[k] != (float)r + (float)k / 4;
    for (int k = 0; k < 3; k++) bad += ids[k] != 1000 * r + k;
    bad += l != r % 3 || f != r % 2;
  }
  CHECK(bad == 0);
  printf("mkdata-check: %lld records of 4 fields as written\n", (long long)n);
  records_close(rf);
  return rt_finish("test_records mkdata-check");
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "mkdata-check") == 0) return mkdata_check(argv[2], atoll(argv[3]));
  rt_mkdir_scratch("records");
  test_roundtrip();
  test_rows();
  test_malformed();
  return rt_finish("test_records");
}
