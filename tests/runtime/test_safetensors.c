/* test_safetensors: the safetensors reader and writer.
 *
 *   test_safetensors roundtrip   writer -> reader: names, order, shapes, values bit
 *                                for bit, metadata, 8-byte header padding, slices,
 *                                writer argument errors
 *   test_safetensors malformed   hand-made bad files, each refused by
 *                                safetensors_open with its expected message
 *   test_safetensors pyref DIR   DIR/ref.safetensors written by make_safetensors.py
 *                                (F32, BF16, F16, ...) read and compared, bit for
 *                                bit, with the f32 values in DIR/ref.json
 */
#include "runtime/io/safetensors.h"

#include "rt_test.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>

#include "runtime/io/fileio.h"

static char err[1024];

static uint32_t f32_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

static SafeTensors *open_ok(const char *path) {
  SafeTensors *st = safetensors_open(path, err, sizeof err);
  if (!st) fprintf(stderr, "safetensors_open: %s\n", err);
  CHECK(st != NULL);
  return st;
}

/* ---- roundtrip ------------------------------------------------------------------ */

enum { NT = 6 };
static const char *rt_names[NT] = {"wte",      "scalar", "empty", "h.0.attn.c_attn.weight", "名前 with \"quotes\"\\",
                                   "ln_f.bias"};
static const int rt_ndims[NT] = {2, 0, 2, 3, 1, 1};
static const int64_t rt_shapes[NT][3] = {{5, 3}, {0}, {0, 4}, {2, 3, 4}, {1}, {7}};
static float rt_data[NT][24];

static void fill_roundtrip(SafeTensorOut *out) {
  for (int i = 0; i < NT; i++) {
    for (int j = 0; j < 24; j++) rt_data[i][j] = (float)(i * 100 + j) * 0.37f - 3.0f;
    out[i] = (SafeTensorOut){rt_names[i], rt_ndims[i], rt_shapes[i], rt_data[i]};
  }
  rt_data[0][1] = -0.0f;
  rt_data[0][2] = INFINITY;
  rt_data[0][3] = NAN;
  rt_data[0][4] = 1e-45f; /* subnormal */
}

static void check_tensor_back(const SafeTensors *st, int i) {
  const SafeTensor *t = safetensors_get(st, i);
  CHECK(t && safetensors_find(st, rt_names[i]) == t);
  if (!t) return;
  CHECK(strcmp(t->name, rt_names[i]) == 0 && t->dtype == ST_DTYPE_F32);
  CHECK(t->ndim == rt_ndims[i]);
  int64_t numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    CHECK(t->shape[d] == rt_shapes[i][d]);
    numel *= rt_shapes[i][d];
  }
  CHECK(t->numel == numel);
  float got[24];
  CHECK(safetensors_read_f32(st, t, got, numel, err, sizeof err) == 0);
  for (int j = 0; j < numel; j++) CHECK(f32_bits(got[j]) == f32_bits(rt_data[i][j]));
}

static void check_roundtrip_file(const char *path) {
  SafeTensors *st = open_ok(path);
  if (!st) return;
  CHECK(safetensors_count(st) == NT);
  for (int i = 0; i < NT; i++) check_tensor_back(st, i);
  CHECK(safetensors_find(st, "nope") == NULL);
  CHECK(safetensors_metadata_count(st) == 2 + NT - 1); /* and a checksum of each tensor with data */
  CHECK(safetensors_metadata(st, "format") && !strcmp(safetensors_metadata(st, "format"), "pt"));
  CHECK(safetensors_metadata(st, "step") && !strcmp(safetensors_metadata(st, "step"), "100"));
  CHECK(safetensors_metadata(st, "missing") == NULL);
  const SafeTensor *t = safetensors_find(st, "h.0.attn.c_attn.weight");
  float part[5];
  CHECK(safetensors_read_f32_range(st, t, 10, 5, part, err, sizeof err) == 0);
  CHECK(memcmp(part, rt_data[3] + 10, sizeof part) == 0);
  CHECK(safetensors_read_f32_range(st, t, 20, 5, part, err, sizeof err) == -1);
  CHECK_ERR(err, "elements [20, 20+5) out of range for 24 elements");
  CHECK(safetensors_read_f32(st, t, part, 5, err, sizeof err) == -1);
  CHECK_ERR(err, "has 24 elements but the buffer holds 5");
  CHECK(t && t->crc && strlen(t->crc) == 8 && safetensors_verify(st, t, err, sizeof err) == 0);
  CHECK(safetensors_find(st, "empty")->crc == NULL);
  safetensors_close(st);
}

/* One bit flipped in a tensor's data: its checksum refuses it, the others still read. */
static void check_flipped(const char *path) {
  size_t n = 0;
  unsigned char *b = file_read_all(path, &n, err, sizeof err);
  CHECK(b && n > 20);
  if (!b) return;
  b[n - 5] ^= 0x10; /* inside ln_f.bias, the last tensor */
  rt_write_raw(rt_path("flip.safetensors"), b, n);
  free(b);
  SafeTensors *st = open_ok(rt_path("flip.safetensors"));
  if (!st) return;
  float got[24];
  const SafeTensor *t = safetensors_find(st, "ln_f.bias");
  CHECK(safetensors_read_f32(st, t, got, 7, err, sizeof err) == -1);
  CHECK_ERR(err, "tensor 'ln_f.bias': checksum mismatch in bytes [0, 28)");
  CHECK(safetensors_verify(st, t, err, sizeof err) == -1);
  CHECK(safetensors_read_f32(st, safetensors_find(st, "wte"), got, 15, err, sizeof err) == 0);
  safetensors_close(st);
  unlink(rt_path("flip.safetensors"));
}

static void check_padding(const char *path) {
  size_t n = 0;
  unsigned char *b = file_read_all(path, &n, err, sizeof err);
  CHECK(b && n >= 8);
  uint64_t hlen = 0;
  for (int i = 7; b && i >= 0; i--) hlen = hlen << 8 | b[i];
  CHECK(hlen % 8 == 0);
  CHECK(b && n == 8 + hlen + 4 * (15 + 1 + 0 + 24 + 1 + 7));
  free(b);
}

static void test_roundtrip(void) {
  SafeTensorOut out[NT];
  fill_roundtrip(out);
  const char *keys[2] = {"format", "step"}, *vals[2] = {"pt", "100"};
  CHECK(safetensors_write(rt_path("w.safetensors"), out, NT, keys, vals, 2, err, sizeof err) == 0);
  check_roundtrip_file(rt_path("w.safetensors"));
  check_padding(rt_path("w.safetensors"));
  check_flipped(rt_path("w.safetensors"));
  rt_data[3][0] = 42.0f; /* overwrite in place */
  CHECK(safetensors_write(rt_path("w.safetensors"), out, NT, keys, vals, 2, err, sizeof err) == 0);
  check_roundtrip_file(rt_path("w.safetensors"));
  CHECK(safetensors_write(rt_path("none.safetensors"), NULL, 0, NULL, NULL, 0, err, sizeof err) == 0);
  SafeTensors *st = open_ok(rt_path("none.safetensors"));
  CHECK(st && safetensors_count(st) == 0 && safetensors_metadata_count(st) == 0);
  safetensors_close(st);
  CHECK(rt_count_entries() == 2);
}

static void expect_write_error(const SafeTensorOut *ts, int n, const char *want) {
  int before = rt_count_entries();
  CHECK(safetensors_write(rt_path("bad.safetensors"), ts, n, NULL, NULL, 0, err, sizeof err) == -1);
  CHECK_ERR(err, want);
  CHECK(rt_count_entries() == before);
}

static void test_write_errors(void) {
  float x[2] = {1, 2};
  int64_t s2[1] = {2}, sneg[1] = {-1};
  SafeTensorOut dup[2] = {{"a", 1, s2, x}, {"a", 1, s2, x}};
  expect_write_error(dup, 2, "tensor 'a': duplicate name");
  SafeTensorOut meta[1] = {{"__metadata__", 1, s2, x}};
  expect_write_error(meta, 1, "invalid tensor name '__metadata__'");
  SafeTensorOut neg[1] = {{"n", 1, sneg, x}};
  expect_write_error(neg, 1, "tensor 'n': bad shape[0] = -1");
  SafeTensorOut nodata[1] = {{"d", 1, s2, NULL}};
  expect_write_error(nodata, 1, "tensor 'd': no data");
  SafeTensorOut ok[1] = {{"a", 1, s2, x}};
  CHECK(safetensors_write(rt_path("no/dir/x.safetensors"), ok, 1, NULL, NULL, 0, err, sizeof err) == -1);
  CHECK_ERR(err, "no/dir/x.safetensors");
}

/* ---- malformed files ---------------------------------------------------------- */

/* Writes 8-byte length hlen (or the JSON's own length when hlen is UINT64_MAX-1),
 * the JSON, then ndata bytes of data. */
static void write_st(const char *path, uint64_t hlen, const char *json, size_t ndata) {
  size_t jl = strlen(json);
  if (hlen == UINT64_MAX - 1) hlen = jl;
  unsigned char *b = calloc(8 + jl + ndata + 1, 1);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen >> (8 * i));
  memcpy(b + 8, json, jl);
  rt_write_raw(path, b, 8 + jl + ndata);
  free(b);
}

#define AUTO (UINT64_MAX - 1)

static const struct BadCase {
  const char *file;
  uint64_t hlen;
  const char *json;
  size_t ndata;
  const char *want;
} bad_cases[] = {
    {"huge_hlen", 1ull << 40, "{}", 0, "header length 1099511627776 exceeds the file size"},
    {"max_hlen", UINT64_MAX, "{}", 0, "exceeds the file size"},
    {"zero_hlen", 0, "", 8, "header length 0 is too small"},
    {"bad_json", AUTO, "{\"a\": {\"dtype\": \"F32\", ", 0, "header is not valid JSON"},
    {"trailing", AUTO, "{} xyz", 0, "trailing bytes after the object"},
    {"not_object", AUTO, "[1, 2]", 0, "header is not a JSON object"},
    {"entry_number", AUTO, "{\"a\": 3}", 0, "tensor 'a': entry is not a JSON object"},
    {"no_dtype", AUTO, "{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
     "tensor 'a': missing or non-string \"dtype\""},
    {"unknown_dtype", AUTO, "{\"a\": {\"dtype\": \"F33\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
     "tensor 'a': unknown dtype 'F33'"},
    {"shape_string", AUTO, "{\"a\": {\"dtype\": \"F32\", \"shape\": \"1\", \"data_offsets\": [0, 4]}}", 4,
     "missing or non-array \"shape\""},
    {"shape_negative", AUTO, "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4,
     "shape[0] is not a non-negative integer"},
    {"shape_fraction", AUTO, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 1.5], \"data_offsets\": [0, 12]}}", 12,
     "shape[1] is not a non-negative integer"},
    {"shape_9d", AUTO, "{\"a\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", 1,
     "9 dimensions (at most 8)"},
    {"shape_overflow", AUTO,
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [9007199254740992, 9007199254740992], "
     "\"data_offsets\": [0, 4]}}",
     4, "shape product overflows"},
    {"bytes_overflow", AUTO,
     "{\"a\": {\"dtype\": \"F64\", \"shape\": [4294967296, 1073741824], "
     "\"data_offsets\": [0, 8]}}",
     8, "shape product overflows"},
    {"no_offsets", AUTO, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "\"data_offsets\" must be [begin, end]"},
    {"offsets_three", AUTO, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 8,
     "\"data_offsets\" must be [begin, end]"},
    {"offsets_strings", AUTO, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [\"0\", \"4\"]}}", 4,
     "\"data_offsets\" must be [begin, end]"},
    {"offsets_reversed", AUTO, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8,
     "data_offsets [8, 4]: begin is after end"},
    {"out_of_range", AUTO, "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8,
     "data_offsets [0, 16] out of range: the data section has 8 bytes"},
    {"size_mismatch", AUTO, "{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8,
     "size mismatch: data_offsets span 8 bytes but F32 with 3 elements needs 12"},
    {"bf16_mismatch", AUTO, "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}", 16,
     "BF16 with 4 elements needs 8"},
    {"overlap", AUTO,
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
     "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
     12, "tensors 'a' and 'b' overlap"},
    {"overlap_inside", AUTO,
     "{\"b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [5, 6]}, "
     "\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}, "
     "\"c\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [12, 13]}}",
     16, "overlap"},
    {"duplicate", AUTO,
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
     "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
     8, "duplicate tensor name 'a'"},
    {"meta_not_object", AUTO, "{\"__metadata__\": [1]}", 0, "\"__metadata__\" is not a JSON object"},
    {"meta_not_string", AUTO, "{\"__metadata__\": {\"step\": 100}}", 0,
     "\"__metadata__\" value of 'step' is not a string"},
    {"meta_twice", AUTO, "{\"__metadata__\": {}, \"__metadata__\": {}}", 0, "duplicate \"__metadata__\""},
    {"huge_offset", AUTO, "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1e300, 1e300]}}", 1,
     "\"data_offsets\" must be [begin, end]"},
};

static void expect_open_error(const char *path, const char *want) {
  SafeTensors *st = safetensors_open(path, err, sizeof err);
  CHECK(st == NULL);
  safetensors_close(st);
  CHECK_ERR(err, path);
  CHECK_ERR(err, want);
}

/* A valid file cut short by 4 bytes, an empty file, a 5-byte file, a directory. */
static void test_truncated(void) {
  float x[3] = {1, 2, 3};
  int64_t s[1] = {3};
  SafeTensorOut t[1] = {{"x", 1, s, x}};
  CHECK(safetensors_write(rt_path("cut.safetensors"), t, 1, NULL, NULL, 0, err, sizeof err) == 0);
  struct stat sb;
  CHECK(stat(rt_path("cut.safetensors"), &sb) == 0);
  CHECK(truncate(rt_path("cut.safetensors"), sb.st_size - 4) == 0);
  expect_open_error(rt_path("cut.safetensors"), "out of range");
  rt_write_raw(rt_path("empty.safetensors"), "", 0);
  expect_open_error(rt_path("empty.safetensors"), "truncated: 0 bytes");
  rt_write_raw(rt_path("five.safetensors"), "\x05\0\0\0\0", 5);
  expect_open_error(rt_path("five.safetensors"), "truncated: 5 bytes");
  expect_open_error(rt_dir, "not a regular file");
  expect_open_error(rt_path("missing.safetensors"), "cannot open");
}

static void test_malformed(void) {
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const struct BadCase *c = &bad_cases[i];
    char name[128];
    snprintf(name, sizeof name, "%s.safetensors", c->file);
    write_st(rt_path(name), c->hlen, c->json, c->ndata);
    expect_open_error(rt_path(name), c->want);
  }
  test_truncated();
  /* Opens, but an I32 tensor cannot be read as f32. */
  write_st(rt_path("i32.safetensors"), AUTO, "{\"i\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
           8);
  SafeTensors *st = open_ok(rt_path("i32.safetensors"));
  float f[2];
  CHECK(st && safetensors_read_f32(st, safetensors_find(st, "i"), f, 2, err, sizeof err) == -1);
  CHECK_ERR(err, "tensor 'i': cannot convert dtype I32 to f32");
  safetensors_close(st);
}

/* ---- the PyTorch/numpy-written reference -------------------------------------- */

static void check_ref_tensor(const SafeTensors *st, const cJSON *want) {
  const char *name = want->string;
  const SafeTensor *t = safetensors_find(st, name);
  CHECK(t != NULL);
  if (!t) return;
  const cJSON *dt = cJSON_GetObjectItem(want, "dtype"), *shape = cJSON_GetObjectItem(want, "shape");
  const cJSON *bits = cJSON_GetObjectItem(want, "f32_bits");
  CHECK(strcmp(safetensors_dtype_name(t->dtype), dt->valuestring) == 0);
  CHECK(t->ndim == cJSON_GetArraySize(shape));
  for (int d = 0; d < t->ndim; d++) CHECK(t->shape[d] == (int64_t)cJSON_GetArrayItem(shape, d)->valuedouble);
  float *got = malloc(((size_t)t->numel + 1) * sizeof *got);
  int rc = safetensors_read_f32(st, t, got, t->numel, err, sizeof err);
  if (!bits) { /* a dtype the reader must refuse to convert */
    CHECK(rc == -1);
    CHECK_ERR(err, "cannot convert dtype");
  } else {
    CHECK(rc == 0 && cJSON_GetArraySize(bits) == t->numel);
    int bad = 0;
    for (int64_t i = 0; rc == 0 && i < t->numel; i++) {
      uint32_t w = (uint32_t)cJSON_GetArrayItem(bits, (int)i)->valuedouble;
      float wf;
      memcpy(&wf, &w, sizeof wf);
      bad += isnan(wf) ? !isnan(got[i]) : f32_bits(got[i]) != w;
    }
    printf("pyref: %-10s %-5s %lld values, %d differ\n", name, dt->valuestring, (long long)t->numel, bad);
    CHECK(bad == 0);
  }
  free(got);
}

static int test_pyref(const char *dir) {
  char stp[512], jsp[512];
  snprintf(stp, sizeof stp, "%s/ref.safetensors", dir);
  snprintf(jsp, sizeof jsp, "%s/ref.json", dir);
  char *text = file_read_all(jsp, NULL, err, sizeof err);
  cJSON *ref = text ? cJSON_Parse(text) : NULL;
  SafeTensors *st = open_ok(stp);
  if (!ref || !st) {
    fprintf(stderr, "pyref: cannot load %s (%s): run make_safetensors.py first\n", jsp, err);
    return 1;
  }
  const cJSON *tensors = cJSON_GetObjectItem(ref, "tensors");
  CHECK(safetensors_count(st) == cJSON_GetArraySize(tensors));
  for (const cJSON *w = tensors ? tensors->child : NULL; w; w = w->next) check_ref_tensor(st, w);
  const cJSON *meta = cJSON_GetObjectItem(ref, "metadata");
  CHECK(safetensors_metadata_count(st) == cJSON_GetArraySize(meta));
  for (const cJSON *m = meta ? meta->child : NULL; m; m = m->next) {
    const char *v = safetensors_metadata(st, m->string);
    CHECK(v && strcmp(v, m->valuestring) == 0);
  }
  safetensors_close(st);
  cJSON_Delete(ref);
  free(text);
  return rt_finish("test_safetensors pyref");
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "pyref") == 0) return test_pyref(argv[2]);
  if (argc != 2 || (strcmp(argv[1], "roundtrip") != 0 && strcmp(argv[1], "malformed") != 0)) {
    fprintf(stderr, "usage: test_safetensors roundtrip | malformed | pyref DIR\n");
    return 2;
  }
  rt_mkdir_scratch("safetensors");
  if (strcmp(argv[1], "roundtrip") == 0) {
    test_roundtrip();
    test_write_errors();
  } else {
    test_malformed();
  }
  return rt_finish(strcmp(argv[1], "roundtrip") == 0 ? "test_safetensors roundtrip" : "test_safetensors malformed");
}
