/* records: reading and writing record files (format and row layout in records.h).
 * As token files, the file is validated when opened and then memory-mapped read-only
 * (file_map): a batch read is a copy out of the page cache with no allocation, and
 * files larger than memory work. Words and values are decoded as little-endian.
 */
#include "runtime/io/records.h"

#include "runtime/io/fileio.h"
#include "runtime/philox.h"

#include <stdlib.h>
#include <string.h>

#define RECORDS_HEADER_INTS 256
#define RECORDS_HEADER_BYTES (RECORDS_HEADER_INTS * 4)
#define RECORDS_DESC_INTS 20 /* words per field descriptor */

struct RecordFile {
  char *path;
  FileMap map;
  int64_t count; /* records */
  int nfields;
  RecField fields[RECORDS_MAX_FIELDS];
  uint64_t start[RECORDS_MAX_FIELDS]; /* byte offset of each field's first record */
};

/* A field name: 1 to 47 bytes of letters, digits, '_' and '.', NUL-padded to 48. */
static int records_name_ok(const unsigned char *p) {
  int n = 0;
  while (n < RECORDS_NAME_BYTES && p[n]) n++;
  if (n == 0 || n == RECORDS_NAME_BYTES) return 0;
  for (int i = 0; i < n; i++)
    if (!(p[i] == '_' || p[i] == '.' || (p[i] >= '0' && p[i] <= '9') || ((p[i] | 32) >= 'a' && (p[i] | 32) <= 'z')))
      return 0;
  return 1;
}

/* Field f's descriptor at d (RECORDS_DESC_INTS words) into rf->fields[f]. */
static int records_parse_field(RecordFile *rf, int f, const unsigned char *d, char *err, size_t errlen) {
  RecField *fl = &rf->fields[f];
  if (!records_name_ok(d))
    return file_set_error(err, errlen,
                          "%s: field %d: a bad name (1 to 47 letters, digits, "
                          "'_' or '.', padded with NULs)",
                          rf->path, f);
  memcpy(fl->name, d, RECORDS_NAME_BYTES);
  int32_t dtype = (int32_t)file_le32(d + 48), ndim = (int32_t)file_le32(d + 52);
  if (dtype != REC_I32 && dtype != REC_F32)
    return file_set_error(err, errlen, "%s: field %s: unknown dtype %d (1 i32, 2 f32)", rf->path, fl->name, dtype);
  if (ndim < 0 || ndim > RECORDS_MAX_DIMS)
    return file_set_error(err, errlen, "%s: field %s: ndim %d outside [0, %d]", rf->path, fl->name, ndim,
                          RECORDS_MAX_DIMS);
  fl->dtype = (RecDtype)dtype, fl->ndim = ndim, fl->elems = 1;
  for (int k = 0; k < ndim; k++) {
    int32_t dim = (int32_t)file_le32(d + 56 + 4 * k);
    fl->shape[k] = dim;
    if (dim < 1 || __builtin_mul_overflow(fl->elems, (int64_t)dim, &fl->elems) || fl->elems > INT32_MAX)
      return file_set_error(err, errlen, "%s: field %s: bad dimension %d", rf->path, fl->name, dim);
  }
  for (int g = 0; g < f; g++)
    if (!strcmp(rf->fields[g].name, fl->name))
      return file_set_error(err, errlen, "%s: two fields named %s", rf->path, fl->name);
  return 0;
}

/* The header and the file's size: N records of the fields, nothing more or less. */
static int records_parse(RecordFile *rf, char *err, size_t errlen) {
  const unsigned char *h = rf->map.data;
  int32_t magic = (int32_t)file_le32(h), version = (int32_t)file_le32(h + 4);
  int32_t n = (int32_t)file_le32(h + 8), nf = (int32_t)file_le32(h + 12);
  if (magic != RECORDS_MAGIC)
    return file_set_error(err, errlen, "%s: bad magic %d (expected %d): not a record file", rf->path, magic,
                          RECORDS_MAGIC);
  if (version != RECORDS_VERSION)
    return file_set_error(err, errlen, "%s: unsupported version %d (expected %d)", rf->path, version, RECORDS_VERSION);
  if (n < 0 || nf < 1 || nf > RECORDS_MAX_FIELDS)
    return file_set_error(err, errlen, "%s: %d records of %d fields (1 to %d)", rf->path, n, nf, RECORDS_MAX_FIELDS);
  rf->count = n, rf->nfields = nf;
  uint64_t at = RECORDS_HEADER_BYTES;
  for (int f = 0; f < nf; f++) {
    if (records_parse_field(rf, f, h + 16 + 4 * RECORDS_DESC_INTS * f, err, errlen) != 0) return -1;
    rf->start[f] = at;
    at += (uint64_t)n * (uint64_t)rf->fields[f].elems * 4;
  }
  if (rf->map.len != at)
    return file_set_error(err, errlen,
                          "%s: %s: the header says %d records (%llu bytes) but "
                          "the file has %llu bytes",
                          rf->path, rf->map.len < at ? "truncated" : "unexpected bytes", n, (unsigned long long)at,
                          (unsigned long long)rf->map.len);
  return 0;
}

RecordFile *records_open(const char *path, char *err, size_t errlen) {
  RecordFile *rf = calloc(1, sizeof *rf);
  if (!rf || !(rf->path = strdup(path))) {
    free(rf);
    file_set_error(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  if (file_map(path, RECORDS_HEADER_BYTES, "a record file", &rf->map, err, errlen) != 0 ||
      records_parse(rf, err, errlen) != 0) {
    records_close(rf);
    return NULL;
  }
  return rf;
}

void records_close(RecordFile *rf) {
  if (!rf) return;
  file_unmap(&rf->map);
  free(rf->path);
  free(rf);
}

int64_t records_count(const RecordFile *rf) { return rf->count; }

int records_nfields(const RecordFile *rf) { return rf->nfields; }

const RecField *records_field(const RecordFile *rf, int f) { return &rf->fields[f]; }

int records_find(const RecordFile *rf, const char *name) {
  for (int f = 0; f < rf->nfields; f++)
    if (!strcmp(rf->fields[f].name, name)) return f;
  return -1;
}

int64_t records_row(const RecordFile *rf, int64_t step, int64_t B, int64_t row, const uint32_t *shuffle) {
  int64_t n = rf->count;
  if (shuffle) return (int64_t)philox_shuffle_pick(shuffle, (uint64_t)n, step, B, row);
  return ((step % n) * (B % n) + row % n) % n; /* n < 2^31: the products fit */
}

void records_get(const RecordFile *rf, int f, int64_t r, void *out) {
  const RecField *fl = &rf->fields[f];
  const unsigned char *p = rf->map.data + rf->start[f] + (uint64_t)r * fl->elems * 4;
  uint32_t *o = out;
  for (int64_t i = 0; i < fl->elems; i++) o[i] = file_le32(p + 4 * i);
}

/* The header of n records of the fields; -1 - f when field f's name or shape cannot be one. */
static int records_header(unsigned char *h, const RecField *fields, int nf, int64_t n) {
  memset(h, 0, RECORDS_HEADER_BYTES);
  file_put_le32(h, RECORDS_MAGIC);
  file_put_le32(h + 4, RECORDS_VERSION);
  file_put_le32(h + 8, (uint32_t)n);
  file_put_le32(h + 12, (uint32_t)nf);
  for (int f = 0; f < nf; f++) {
    unsigned char *d = h + 16 + 4 * RECORDS_DESC_INTS * f;
    if (!records_name_ok((const unsigned char *)fields[f].name) || fields[f].ndim < 0 ||
        fields[f].ndim > RECORDS_MAX_DIMS)
      return -1 - f;
    memcpy(d, fields[f].name, strlen(fields[f].name));
    file_put_le32(d + 48, (uint32_t)fields[f].dtype);
    file_put_le32(d + 52, (uint32_t)fields[f].ndim);
    for (int k = 0; k < fields[f].ndim; k++) file_put_le32(d + 56 + 4 * k, (uint32_t)fields[f].shape[k]);
  }
  return 0;
}

int records_write_file(const char *path, const RecField *fields, int nfields, const void *const *data, int64_t n,
                       char *err, size_t errlen) {
  unsigned char header[RECORDS_HEADER_BYTES];
  const uint32_t one = 1;
  if (*(const unsigned char *)&one != 1)
    return file_set_error(err, errlen, "%s: writing a record file needs a little-endian host", path);
  if (nfields < 1 || nfields > RECORDS_MAX_FIELDS || n < 0 || n > INT32_MAX)
    return file_set_error(err, errlen,
                          "%s: %lld records of %d fields do not fit a record "
                          "file (up to 2^31 - 1 records, 1 to %d fields)",
                          path, (long long)n, nfields, RECORDS_MAX_FIELDS);
  int bad = -1 - records_header(header, fields, nfields, n);
  if (bad >= 0)
    return file_set_error(err, errlen,
                          "%s: field '%.47s': a name of 1 to 47 letters, digits, "
                          "'_' or '.', and up to %d dimensions",
                          path, fields[bad].name, RECORDS_MAX_DIMS);
  const void *chunks[1 + RECORDS_MAX_FIELDS] = {header};
  size_t lens[1 + RECORDS_MAX_FIELDS] = {sizeof header};
  for (int f = 0; f < nfields; f++) /* a little-endian host: the values as they are */
    chunks[1 + f] = data[f], lens[1 + f] = (size_t)(n * fields[f].elems * 4);
  return file_write_atomic(path, chunks, lens, 1 + nfields, err, errlen);
}
