/* colossalc-mkdata: numpy arrays (.npy files, as numpy.save writes them) into the data
 * files of `train`:
 *
 *     colossalc-mkdata OUT.bin NAME=ARRAY.npy [NAME=ARRAY.npy ...]
 *         a record file (runtime/io/records.h): field NAME holds ARRAY, whose first
 *         dimension is the records (the same in every array) and whose other
 *         dimensions are one record's value; integer and boolean arrays become i32
 *         (each value must fit), floating ones f32
 *     colossalc-mkdata --tokens ARRAY.npy OUT.bin
 *         an llm.c token file (runtime/io/tokens.h) from a 1-D integer array of token ids:
 *         uint16 tokens (magic 20240520) when every id is below 65,536, else uint32
 *         (magic 20240801)
 *
 * .npy: format versions 1 to 3, C order, little-endian (or one-byte) integers, unsigned
 * integers, booleans and floats of 2, 4 or 8 bytes.
 */
#include "runtime/io/fileio.h"
#include "runtime/io/records.h"
#include "runtime/io/tokens.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NPY_MAX_DIMS = 8 };

typedef struct Npy {
  unsigned char *file;       /* the whole file (file_read_all) */
  const unsigned char *data; /* [numel * size] the values */
  char kind;                 /* 'i', 'u', 'b' or 'f' */
  int size;                  /* bytes per value */
  int ndim;
  int64_t shape[NPY_MAX_DIMS];
  int64_t numel;
} Npy;

static char err[512];

static int mkdata_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int mkdata_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "colossalc-mkdata: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

/* The text after 'key': in the header dict h, or NULL. */
static const char *npy_key(const char *h, const char *key) {
  const char *p = strstr(h, key);
  if (!p) return NULL;
  p += strlen(key);
  while (*p == ' ' || *p == ':' || *p == '\'') p++;
  return p;
}

/* 'descr': '<f4' and the like: kind and size; 0, or -1 for what this tool does not read. */
static int npy_descr(const char *d, Npy *a) {
  if (!d || !(d[0] == '<' || d[0] == '|' || d[0] == '=')) return -1; /* big-endian or structured */
  a->kind = d[1];
  a->size = atoi(d + 2);
  if (a->kind == 'f' && (a->size == 2 || a->size == 4 || a->size == 8)) return 0;
  if ((a->kind == 'i' || a->kind == 'u') && (a->size == 1 || a->size == 2 || a->size == 4 || a->size == 8)) return 0;
  return a->kind == 'b' && a->size == 1 ? 0 : -1;
}

/* 'shape': (3, 4), into a->shape. */
static int npy_shape(const char *s, Npy *a) {
  if (!s || *s != '(') return -1;
  a->ndim = 0, a->numel = 1;
  for (s++; *s && *s != ')';) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0 || a->ndim == NPY_MAX_DIMS || __builtin_mul_overflow(a->numel, v, &a->numel)) return -1;
    a->shape[a->ndim++] = v;
    for (s = end; *s == ',' || *s == ' ' || *s == 'L'; s++)
      ;
  }
  return *s == ')' ? 0 : -1;
}

/* The header dict h of path: dtype, order, shape, and values enough after it (at of len). */
static int npy_dict(const char *path, const char *h, Npy *a, size_t at, size_t len) {
  const char *fortran = npy_key(h, "'fortran_order'");
  if (npy_descr(npy_key(h, "'descr'"), a) != 0)
    return mkdata_fail("%s: a dtype this tool does not read (little-endian integers, booleans, "
                       "floats)",
                       path);
  if (!fortran || strncmp(fortran, "False", 5) != 0)
    return mkdata_fail("%s: Fortran order: save a C-ordered array (numpy.ascontiguousarray)", path);
  if (npy_shape(npy_key(h, "'shape'"), a) != 0) return mkdata_fail("%s: cannot read its shape", path);
  if ((uint64_t)a->numel * (uint64_t)a->size > len - at)
    return mkdata_fail("%s: truncated: fewer values than its shape", path);
  a->data = a->file + at;
  return 0;
}

/* Parses the file in a->file (len bytes): magic, version, header. */
static int npy_header(const char *path, Npy *a, size_t len) {
  const unsigned char *f = a->file;
  if (len < 12 || memcmp(f, "\x93NUMPY", 6) != 0 || f[6] < 1 || f[6] > 3)
    return mkdata_fail("%s: not a .npy file (format 1 to 3)", path);
  size_t start = f[6] == 1 ? 10 : 12;
  size_t hlen = f[6] == 1 ? (size_t)(f[8] | f[9] << 8) : (size_t)file_le32(f + 8);
  if (hlen > len - start) return mkdata_fail("%s: truncated .npy header", path);
  char *h = strndup((const char *)f + start, hlen);
  int rc = h ? npy_dict(path, h, a, start + hlen, len) : mkdata_fail("%s: out of memory", path);
  free(h);
  return rc;
}

static int npy_load(const char *path, Npy *a) {
  size_t len;
  memset(a, 0, sizeof *a);
  if (!(a->file = file_read_all(path, &len, err, sizeof err))) return mkdata_fail("%s", err);
  return npy_header(path, a, len);
}

/* Value i of an integer or boolean array. */
static int64_t npy_int(const Npy *a, int64_t i) {
  const unsigned char *p = a->data + i * a->size;
  uint64_t u = 0;
  for (int b = 0; b < a->size; b++) u |= (uint64_t)p[b] << 8 * b;
  if (a->kind == 'i' && a->size < 8 && (u >> (8 * a->size - 1) & 1)) u |= ~0ull << 8 * a->size; /* sign-extend */
  return (int64_t)u;
}

/* Value i of a floating array, as a float (f8 rounded once, f2 exact). */
static float npy_real(const Npy *a, int64_t i) {
  const unsigned char *p = a->data + i * a->size;
  if (a->size == 4) {
    uint32_t u = file_le32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  if (a->size == 8) {
    uint64_t u = file_le32(p) | (uint64_t)file_le32(p + 4) << 32;
    double d;
    memcpy(&d, &u, 8);
    return (float)d;
  }
  int h = p[0] | p[1] << 8, e = h >> 10 & 31, m = h & 1023; /* IEEE half */
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
  return h & 0x8000 ? -v : v;
}

/* The array as a record file's field: i32 (every value fits) or f32, values in out. */
static int npy_field(const char *name, const char *path, const Npy *a, RecField *fl, void **out) {
  if (a->ndim < 1 || a->ndim - 1 > RECORDS_MAX_DIMS || strlen(name) >= RECORDS_NAME_BYTES)
    return mkdata_fail("%s: needs 1 to 7 dimensions (the records first) and a name under 48 bytes", path);
  memset(fl, 0, sizeof *fl);
  strcpy(fl->name, name);
  fl->dtype = a->kind == 'f' ? REC_F32 : REC_I32;
  fl->ndim = a->ndim - 1, fl->elems = 1;
  for (int d = 1; d < a->ndim; d++) fl->shape[d - 1] = a->shape[d], fl->elems *= a->shape[d];
  uint32_t *v = *out = malloc((size_t)(a->numel ? a->numel : 1) * 4);
  if (!v) return mkdata_fail("%s: out of memory", path);
  for (int64_t i = 0; i < a->numel; i++) {
    float f = a->kind == 'f' ? npy_real(a, i) : 0;
    int64_t x = a->kind == 'f' ? 0 : npy_int(a, i);
    if ((a->kind == 'u' && a->size == 8 && x < 0) || x < INT32_MIN || x > INT32_MAX)
      return mkdata_fail("%s: an integer outside the i32 range", path);
    int32_t x32 = (int32_t)x;
    memcpy(&v[i], a->kind == 'f' ? (const void *)&f : (const void *)&x32, 4);
  }
  return 0;
}

/* Argument NAME=ARRAY.npy into field f; *records: the first array's records (-1 before). */
static int mkdata_field(char *arg, RecField *fl, void **data, int64_t *records) {
  char *eq = strchr(arg, '=');
  Npy a;
  if (!eq || eq == arg) return mkdata_fail("expected NAME=ARRAY.npy, got '%s'", arg);
  *eq = 0;
  int rc = npy_load(eq + 1, &a) || npy_field(arg, eq + 1, &a, fl, data);
  if (!rc && *records >= 0 && a.shape[0] != *records)
    rc = mkdata_fail("%s: its first dimension differs from the first array's (each array holds "
                     "one value per record)",
                     eq + 1);
  if (!rc) *records = a.shape[0];
  free(a.file);
  return rc;
}

/* NAME=ARRAY.npy arguments into a record file at out. */
static int mkdata_records(const char *out, int n, char **args) {
  RecField fields[RECORDS_MAX_FIELDS] = {0};
  void *data[RECORDS_MAX_FIELDS] = {0};
  int64_t records = -1;
  int rc = n > RECORDS_MAX_FIELDS ? mkdata_fail("%s: at most %d fields", out, RECORDS_MAX_FIELDS) : 0;
  for (int f = 0; f < n && !rc; f++) rc = mkdata_field(args[f], &fields[f], &data[f], &records);
  if (!rc && records_write_file(out, fields, n, (const void *const *)data, records, err, sizeof err) != 0)
    rc = mkdata_fail("%s", err);
  if (!rc)
    printf("colossalc-mkdata: wrote %lld records of %d field%s to %s\n", (long long)records, n, n == 1 ? "" : "s", out);
  for (int f = 0; f < n && f < RECORDS_MAX_FIELDS; f++) free(data[f]);
  return rc;
}

/* A 1-D integer array into a token file: uint16 when every id fits, else uint32. */
static int mkdata_tokens(const char *in, const char *out) {
  Npy a;
  int rc = npy_load(in, &a);
  if (!rc && (a.ndim != 1 || a.kind == 'f' || a.kind == 'b'))
    rc = mkdata_fail("%s: token ids are a 1-D integer array", in);
  uint32_t *ids = rc ? NULL : malloc((size_t)(a.numel ? a.numel : 1) * 4);
  uint16_t *small = rc ? NULL : malloc((size_t)(a.numel ? a.numel : 1) * 2);
  int64_t max = 0;
  for (int64_t i = 0; !rc && ids && small && i < a.numel; i++) {
    int64_t x = npy_int(&a, i);
    if (x < 0 || x > UINT32_MAX) rc = mkdata_fail("%s: a token id outside [0, 2^32)", in);
    ids[i] = (uint32_t)x, small[i] = (uint16_t)x, max = x > max ? x : max;
  }
  if (!rc && (!ids || !small)) rc = mkdata_fail("%s: out of memory", in);
  if (!rc && (max < 65536 ? tokens_write_file(out, small, (size_t)a.numel, err, sizeof err)
                          : tokens_write_file32(out, ids, (size_t)a.numel, err, sizeof err)) != 0)
    rc = mkdata_fail("%s", err);
  if (!rc)
    printf("colossalc-mkdata: wrote %lld %s tokens to %s\n", (long long)a.numel, max < 65536 ? "uint16" : "uint32",
           out);
  free(ids), free(small), free(a.file);
  return rc;
}

static int mkdata_usage(FILE *f, int rc) {
  fprintf(f, "usage: colossalc-mkdata OUT.bin NAME=ARRAY.npy [NAME=ARRAY.npy ...]\n"
             "         a record file: field NAME of each record from ARRAY (its first dimension\n"
             "         the records; integers become i32, floats f32), for train --data\n"
             "       colossalc-mkdata --tokens ARRAY.npy OUT.bin\n"
             "         an llm.c token file from a 1-D array of token ids (uint16 ids, or uint32\n"
             "         when an id is 65,536 or more)\n");
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) return mkdata_usage(stdout, 0);
  if (argc == 4 && strcmp(argv[1], "--tokens") == 0) return mkdata_tokens(argv[2], argv[3]);
  if (argc < 3 || argv[1][0] == '-') return mkdata_usage(stderr, 2);
  return mkdata_records(argv[1], argc - 2, argv + 2);
}
