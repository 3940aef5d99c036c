/* safetensors: reader and writer of safetensors files (format in safetensors.h).
 *
 * Opening maps the file, parses the JSON header with cJSON and checks every entry
 * before anything is returned: a file that opens is safe to read. Tensors keep
 * header order; an index sorted by name serves lookups and finds duplicates, and
 * an index sorted by offset finds overlaps. The writer builds the header with
 * cJSON (integers as raw JSON text, so large offsets are never printed in
 * exponent form) and writes through file_write_atomic.
 */
#include "runtime/io/safetensors.h"

#include "runtime/io/crc32c.h"
#include "runtime/io/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors_write writes host floats as little-endian: port it for this host"
#endif

#define ST_MAX_HEADER (100u << 20)         /* the limit of the reference implementation */
#define ST_MAX_JSON_INT 9007199254740992.0 /* 2^53 */

struct SafeTensors {
  char *path;
  unsigned char *map; /* the whole file, map_len bytes (read-only mapping) */
  size_t map_len;
  const unsigned char *data; /* the data section, data_len bytes */
  uint64_t data_len;
  SafeTensor *tensors; /* [n] in header order */
  char **names;        /* [n] the tensors' names, owned */
  int n;
  int *by_name; /* [n] indices sorted by name */
  char **meta;  /* [2*nmeta] key, value, key, value... owned */
  int nmeta;
};

static const struct {
  const char *name;
  int size;
} st_dtypes[ST_DTYPE_COUNT] = {
#define ST_DTYPE_ROW(e, name, size) {name, size},
    ST_DTYPES(ST_DTYPE_ROW)
#undef ST_DTYPE_ROW
};

const char *safetensors_dtype_name(StDtype dt) { return (unsigned)dt < ST_DTYPE_COUNT ? st_dtypes[dt].name : "?"; }

int safetensors_dtype_size(StDtype dt) { return (unsigned)dt < ST_DTYPE_COUNT ? st_dtypes[dt].size : 0; }

void safetensors_shape_text(char *buf, size_t len, int ndim, const int64_t *shape) {
  size_t at = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && at < len; d++)
    at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, d ? "," : "", shape[d]);
  if (at < len) snprintf(buf + at, len - at, "]");
}

static int st_dtype_parse(const char *s, StDtype *dt) {
  for (int i = 0; i < ST_DTYPE_COUNT; i++) {
    if (strcmp(s, st_dtypes[i].name) == 0) {
      *dt = (StDtype)i;
      return 0;
    }
  }
  return -1;
}

/* ---- opening and validation ------------------------------------------------- */

/* A JSON number that is an integer in [0, 2^53]. */
static int st_json_uint(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item)) return -1;
  double v = item->valuedouble;
  if (!(v >= 0 && v <= ST_MAX_JSON_INT) || v != (double)(uint64_t)v) return -1;
  *out = (uint64_t)v;
  return 0;
}

static int st_parse_dtype(const char *path, const char *name, const cJSON *entry, SafeTensor *t, char *err,
                          size_t errlen) {
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
  if (!cJSON_IsString(d))
    return file_set_error(err, errlen, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
  if (st_dtype_parse(d->valuestring, &t->dtype) != 0)
    return file_set_error(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, name, d->valuestring);
  return 0;
}

/* Parses "shape" into t->shape/ndim and sets *numel (checked for overflow). */
static int st_parse_shape(const char *path, const char *name, const cJSON *entry, SafeTensor *t, uint64_t *numel,
                          char *err, size_t errlen) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(entry, "shape");
  if (!cJSON_IsArray(s))
    return file_set_error(err, errlen, "%s: tensor '%s': missing or non-array \"shape\"", path, name);
  int nd = cJSON_GetArraySize(s);
  if (nd > ST_MAX_DIMS)
    return file_set_error(err, errlen, "%s: tensor '%s': %d dimensions (at most %d)", path, name, nd, ST_MAX_DIMS);
  uint64_t prod = 1;
  for (int i = 0; i < nd; i++) {
    uint64_t v;
    if (st_json_uint(cJSON_GetArrayItem(s, i), &v) != 0)
      return file_set_error(err, errlen,
                            "%s: tensor '%s': shape[%d] is not a non-negative integer "
                            "(at most 2^53)",
                            path, name, i);
    if (v != 0 && prod > UINT64_MAX / v)
      return file_set_error(err, errlen, "%s: tensor '%s': shape product overflows", path, name);
    prod *= v;
    t->shape[i] = (int64_t)v;
  }
  t->ndim = nd;
  *numel = prod;
  return 0;
}

static int st_parse_offsets(const char *path, const char *name, const cJSON *entry, SafeTensor *t, char *err,
                            size_t errlen) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
  if (!cJSON_IsArray(o) || cJSON_GetArraySize(o) != 2 || st_json_uint(cJSON_GetArrayItem(o, 0), &t->begin) != 0 ||
      st_json_uint(cJSON_GetArrayItem(o, 1), &t->end) != 0)
    return file_set_error(err, errlen,
                          "%s: tensor '%s': \"data_offsets\" must be [begin, end], two "
                          "non-negative integers",
                          path, name);
  if (t->begin > t->end)
    return file_set_error(err, errlen, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "]: begin is after end",
                          path, name, t->begin, t->end);
  return 0;
}

/* Checks that t's offsets lie in the data section and match dtype x shape. */
static int st_check_extent(const SafeTensors *st, const SafeTensor *t, uint64_t numel, char *err, size_t errlen) {
  if (t->end > st->data_len)
    return file_set_error(err, errlen,
                          "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                          "] out of range: the data section has %" PRIu64 " bytes",
                          st->path, t->name, t->begin, t->end, st->data_len);
  uint64_t size = (uint64_t)safetensors_dtype_size(t->dtype);
  if (numel > UINT64_MAX / size)
    return file_set_error(err, errlen, "%s: tensor '%s': shape product overflows", st->path, t->name);
  if (numel * size != t->end - t->begin)
    return file_set_error(err, errlen,
                          "%s: tensor '%s': size mismatch: data_offsets span %" PRIu64 " bytes but %s with %" PRIu64
                          " elements needs %" PRIu64,
                          st->path, t->name, t->end - t->begin, st_dtypes[t->dtype].name, numel, numel * size);
  return 0;
}

static int st_parse_entry(SafeTensors *st, const cJSON *entry, SafeTensor *t, char *err, size_t errlen) {
  if (!cJSON_IsObject(entry))
    return file_set_error(err, errlen, "%s: tensor '%s': entry is not a JSON object", st->path, t->name);
  uint64_t numel = 0;
  if (st_parse_dtype(st->path, t->name, entry, t, err, errlen) != 0 ||
      st_parse_shape(st->path, t->name, entry, t, &numel, err, errlen) != 0 ||
      st_parse_offsets(st->path, t->name, entry, t, err, errlen) != 0 ||
      st_check_extent(st, t, numel, err, errlen) != 0)
    return -1;
  t->numel = (int64_t)numel; /* <= data_len, so it fits */
  return 0;
}

static int st_parse_metadata(SafeTensors *st, const cJSON *m, char *err, size_t errlen) {
  if (!cJSON_IsObject(m)) return file_set_error(err, errlen, "%s: \"__metadata__\" is not a JSON object", st->path);
  int n = cJSON_GetArraySize(m);
  st->meta = calloc((size_t)n * 2 + 1, sizeof *st->meta);
  if (!st->meta) return file_set_error(err, errlen, "%s: out of memory", st->path);
  for (const cJSON *kv = m->child; kv; kv = kv->next) {
    if (!cJSON_IsString(kv))
      return file_set_error(err, errlen, "%s: \"__metadata__\" value of '%s' is not a string", st->path, kv->string);
    char **slot = &st->meta[2 * st->nmeta];
    if (!(slot[0] = strdup(kv->string)) || !(slot[1] = strdup(kv->valuestring)))
      return file_set_error(err, errlen, "%s: out of memory", st->path);
    st->nmeta++;
  }
  return 0;
}

/* The tensor array the comparators below index into; set just before each qsort
 * (thread-local, so opening files on several threads at once stays safe). */
static _Thread_local const SafeTensor *st_sort_base;

static int st_cmp_name(const void *a, const void *b) {
  return strcmp(st_sort_base[*(const int *)a].name, st_sort_base[*(const int *)b].name);
}

static int st_cmp_offset(const void *a, const void *b) {
  const SafeTensor *x = &st_sort_base[*(const int *)a], *y = &st_sort_base[*(const int *)b];
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

static int st_check_duplicates(const SafeTensors *st, char *err, size_t errlen) {
  st_sort_base = st->tensors;
  qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, st_cmp_name);
  for (int i = 1; i < st->n; i++) {
    const char *a = st->tensors[st->by_name[i - 1]].name;
    if (strcmp(a, st->tensors[st->by_name[i]].name) == 0)
      return file_set_error(err, errlen, "%s: duplicate tensor name '%s'", st->path, a);
  }
  return 0;
}

static int st_check_overlaps(const SafeTensors *st, char *err, size_t errlen) {
  int *idx = malloc(((size_t)st->n + 1) * sizeof *idx);
  if (!idx) return file_set_error(err, errlen, "%s: out of memory", st->path);
  for (int i = 0; i < st->n; i++) idx[i] = i;
  st_sort_base = st->tensors;
  qsort(idx, (size_t)st->n, sizeof *idx, st_cmp_offset);
  int rc = 0, far = -1; /* far: the tensor reaching furthest so far */
  for (int i = 0; i < st->n && rc == 0; i++) {
    const SafeTensor *t = &st->tensors[idx[i]];
    if (far >= 0 && t->begin < st->tensors[far].end)
      rc = file_set_error(err, errlen, "%s: tensors '%s' and '%s' overlap in the data section", st->path,
                          st->tensors[far].name, t->name);
    if (far < 0 || t->end > st->tensors[far].end) far = idx[i];
  }
  free(idx);
  return rc;
}

static int st_hex_ok(const char *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f'))) return 0;
  return 1;
}

/* Each metadata "crc32c:NAME" to tensor NAME's crc: one 8-digit hex CRC-32C per block. */
static int st_attach_crcs(SafeTensors *st, char *err, size_t errlen) {
  for (int i = 0; i < st->nmeta; i++) {
    const char *k = st->meta[2 * i], *v = st->meta[2 * i + 1];
    if (strncmp(k, ST_CRC_KEY, strlen(ST_CRC_KEY)) != 0) continue;
    SafeTensor *t = (SafeTensor *)safetensors_find(st, k + strlen(ST_CRC_KEY));
    if (!t) return file_set_error(err, errlen, "%s: checksum of '%s', which the file does not hold", st->path, k + 7);
    uint64_t blocks = (t->end - t->begin + ST_CRC_BLOCK - 1) / ST_CRC_BLOCK;
    if (strlen(v) != blocks * 8 || !st_hex_ok(v, strlen(v)))
      return file_set_error(err, errlen, "%s: tensor '%s': its checksum metadata is not %" PRIu64 " CRC-32C values",
                            st->path, t->name, blocks);
    t->crc = v;
  }
  return 0;
}

/* Fills st->tensors from the parsed header object. */
static int st_parse_tensors(SafeTensors *st, const cJSON *root, char *err, size_t errlen) {
  int n = cJSON_GetArraySize(root);
  st->tensors = calloc((size_t)n + 1, sizeof *st->tensors);
  st->by_name = calloc((size_t)n + 1, sizeof *st->by_name);
  st->names = calloc((size_t)n + 1, sizeof *st->names);
  if (!st->tensors || !st->by_name || !st->names) return file_set_error(err, errlen, "%s: out of memory", st->path);
  for (const cJSON *e = root->child; e; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) {
      if (st->meta) return file_set_error(err, errlen, "%s: duplicate \"__metadata__\"", st->path);
      if (st_parse_metadata(st, e, err, errlen) != 0) return -1;
      continue;
    }
    SafeTensor *t = &st->tensors[st->n];
    if (!(st->names[st->n] = strdup(e->string))) return file_set_error(err, errlen, "%s: out of memory", st->path);
    t->name = st->names[st->n];
    st->by_name[st->n] = st->n;
    st->n++;
    if (st_parse_entry(st, e, t, err, errlen) != 0) return -1;
  }
  if (st_check_duplicates(st, err, errlen) != 0) return -1;
  if (st_check_overlaps(st, err, errlen) != 0) return -1;
  return st_attach_crcs(st, err, errlen);
}

static int st_is_blank(const char *p, const char *end) {
  for (; p < end; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return 0;
  return 1;
}

static int st_parse_header(SafeTensors *st, const char *hdr, size_t len, char *err, size_t errlen) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(hdr, len, &end, 0);
  if (!root)
    return file_set_error(err, errlen, "%s: header is not valid JSON (error near byte %td of %zu)", st->path,
                          end ? end - hdr : (ptrdiff_t)0, len);
  int rc = -1;
  if (!st_is_blank(end, hdr + len))
    file_set_error(err, errlen,
                   "%s: header is not valid JSON: trailing bytes after the object at "
                   "byte %td",
                   st->path, end - hdr);
  else if (!cJSON_IsObject(root)) file_set_error(err, errlen, "%s: header is not a JSON object", st->path);
  else rc = st_parse_tensors(st, root, err, errlen);
  cJSON_Delete(root);
  return rc;
}

static uint64_t st_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Reads the 8-byte header length and locates the header and data section. */
static int st_split(SafeTensors *st, uint64_t size, char *err, size_t errlen) {
  uint64_t n = st_le64(st->map);
  if (n > size - 8)
    return file_set_error(err, errlen,
                          "%s: header length %" PRIu64 " exceeds the file size (%" PRIu64
                          " bytes after the 8-byte length): truncated or not a "
                          "safetensors file",
                          st->path, n, size - 8);
  if (n > ST_MAX_HEADER)
    return file_set_error(err, errlen, "%s: header length %" PRIu64 " exceeds the limit %u", st->path, n,
                          ST_MAX_HEADER);
  if (n < 2) return file_set_error(err, errlen, "%s: header length %" PRIu64 " is too small", st->path, n);
  st->data = st->map + 8 + n;
  st->data_len = size - 8 - n;
  return st_parse_header(st, (const char *)st->map + 8, (size_t)n, err, errlen);
}

static int st_load(SafeTensors *st, int fd, char *err, size_t errlen) {
  struct stat sb;
  if (fstat(fd, &sb) != 0) return file_set_error(err, errlen, "%s: cannot stat: %s", st->path, strerror(errno));
  if (!S_ISREG(sb.st_mode)) return file_set_error(err, errlen, "%s: not a regular file", st->path);
  uint64_t size = (uint64_t)sb.st_size;
  if (size < 8)
    return file_set_error(err, errlen,
                          "%s: truncated: %" PRIu64 " bytes, too short for the 8-byte "
                          "header length of a safetensors file",
                          st->path, size);
  void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) return file_set_error(err, errlen, "%s: cannot map: %s", st->path, strerror(errno));
  st->map = m;
  st->map_len = (size_t)size;
  return st_split(st, size, err, errlen);
}

SafeTensors *safetensors_open(const char *path, char *err, size_t errlen) {
  SafeTensors *st = calloc(1, sizeof *st);
  if (!st || !(st->path = strdup(path))) {
    free(st);
    file_set_error(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    file_set_error(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    safetensors_close(st);
    return NULL;
  }
  int rc = st_load(st, fd, err, errlen);
  close(fd);
  if (rc != 0) {
    safetensors_close(st);
    return NULL;
  }
  return st;
}

void safetensors_close(SafeTensors *st) {
  if (!st) return;
  if (st->map) munmap(st->map, st->map_len);
  for (int i = 0; i < st->n; i++) free(st->names[i]);
  free(st->names);
  for (int i = 0; st->meta && st->meta[i]; i++) free(st->meta[i]);
  free(st->meta);
  free(st->tensors);
  free(st->by_name);
  free(st->path);
  free(st);
}

/* ---- queries ------------------------------------------------------------------ */

int safetensors_count(const SafeTensors *st) { return st->n; }

const SafeTensor *safetensors_get(const SafeTensors *st, int i) { return i >= 0 && i < st->n ? &st->tensors[i] : NULL; }

const SafeTensor *safetensors_find(const SafeTensors *st, const char *name) {
  int lo = 0, hi = st->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    const SafeTensor *t = &st->tensors[st->by_name[mid]];
    int c = strcmp(name, t->name);
    if (c == 0) return t;
    if (c < 0) hi = mid - 1;
    else lo = mid + 1;
  }
  return NULL;
}

const void *safetensors_raw(const SafeTensors *st, const SafeTensor *t) { return st->data + t->begin; }

uint64_t safetensors_data_offset(const SafeTensors *st) { return (uint64_t)(st->data - st->map); }

uint32_t safetensors_block_crc(const SafeTensor *t, int64_t b) {
  uint32_t v = 0;
  for (int i = 0; i < 8; i++) {
    char c = t->crc[8 * b + i];
    v = v << 4 | (uint32_t)(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return v;
}

int safetensors_check_block(const char *path, const SafeTensor *t, int64_t b, const void *bytes, char *err,
                            size_t errlen) {
  if (!t->crc) return 0;
  uint64_t lo = (uint64_t)b * ST_CRC_BLOCK, len = t->end - t->begin - lo;
  len = len < ST_CRC_BLOCK ? len : ST_CRC_BLOCK;
  uint32_t want = safetensors_block_crc(t, b), got = crc32c(0, bytes, (size_t)len);
  if (want == got) return 0;
  return file_set_error(err, errlen,
                        "%s: tensor '%s': checksum mismatch in bytes [%" PRIu64 ", %" PRIu64 ") (CRC-32C %08x, "
                        "written %08x): the file is damaged",
                        path, t->name, lo, lo + len, got, want);
}

/* The blocks of t covering its bytes [lo, hi), checked in the mapped data. */
static int st_verify_range(const SafeTensors *st, const SafeTensor *t, uint64_t lo, uint64_t hi, char *err,
                           size_t errlen) {
  for (uint64_t b = lo / ST_CRC_BLOCK; t->crc && b * ST_CRC_BLOCK < hi; b++)
    if (safetensors_check_block(st->path, t, (int64_t)b, st->data + t->begin + b * ST_CRC_BLOCK, err, errlen) != 0)
      return -1;
  return 0;
}

int safetensors_verify(const SafeTensors *st, const SafeTensor *t, char *err, size_t errlen) {
  return st_verify_range(st, t, 0, t->end - t->begin, err, errlen);
}

const char *safetensors_metadata(const SafeTensors *st, const char *key) {
  for (int i = 0; i < st->nmeta; i++)
    if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
  return NULL;
}

int safetensors_metadata_count(const SafeTensors *st) { return st->nmeta; }

void safetensors_metadata_at(const SafeTensors *st, int i, const char **key, const char **value) {
  *key = i >= 0 && i < st->nmeta ? st->meta[2 * i] : NULL;
  *value = i >= 0 && i < st->nmeta ? st->meta[2 * i + 1] : NULL;
}

/* ---- conversion to f32 ---------------------------------------------------------- */

static float st_bits_f32(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* IEEE half to float, exact (subnormals, infinities and NaN payloads included). */
static float st_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return st_bits_f32(sign | 0x7f800000u | man << 13);
  if (exp != 0) return st_bits_f32(sign | (exp + 112) << 23 | man << 13);
  float mag = (float)man * 0x1p-24f; /* zero or subnormal: man * 2^-24, exact */
  return sign ? -mag : mag;
}

static void st_convert(StDtype dt, const unsigned char *p, int64_t n, float *dst) {
  for (int64_t i = 0; i < n; i++) {
    if (dt == ST_DTYPE_F32) {
      const unsigned char *q = p + 4 * i;
      dst[i] = st_bits_f32((uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24);
    } else {
      uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
      dst[i] = dt == ST_DTYPE_BF16 ? st_bits_f32((uint32_t)h << 16) : st_f16_to_f32(h);
    }
  }
}

int safetensors_read_f32_range(const SafeTensors *st, const SafeTensor *t, int64_t first, int64_t n, float *dst,
                               char *err, size_t errlen) {
  if (t->dtype != ST_DTYPE_F32 && t->dtype != ST_DTYPE_BF16 && t->dtype != ST_DTYPE_F16)
    return file_set_error(err, errlen,
                          "%s: tensor '%s': cannot convert dtype %s to f32 (only F32, "
                          "BF16 and F16 are supported)",
                          st->path, t->name, safetensors_dtype_name(t->dtype));
  if (first < 0 || n < 0 || first > t->numel || n > t->numel - first)
    return file_set_error(err, errlen,
                          "%s: tensor '%s': elements [%lld, %lld+%lld) out of range for "
                          "%lld elements",
                          st->path, t->name, (long long)first, (long long)first, (long long)n, (long long)t->numel);
  int size = safetensors_dtype_size(t->dtype);
  if (n > 0 && st_verify_range(st, t, (uint64_t)first * size, (uint64_t)(first + n) * size, err, errlen) != 0)
    return -1;
  st_convert(t->dtype, st->data + t->begin + (uint64_t)first * size, n, dst);
  return 0;
}

int safetensors_read_f32(const SafeTensors *st, const SafeTensor *t, float *dst, int64_t n, char *err, size_t errlen) {
  if (n != t->numel)
    return file_set_error(err, errlen, "%s: tensor '%s': has %lld elements but the buffer holds %lld", st->path,
                          t->name, (long long)t->numel, (long long)n);
  return safetensors_read_f32_range(st, t, 0, n, dst, err, errlen);
}

/* ---- writing ------------------------------------------------------------------ */

/* "[a,b,...]" as raw JSON text; NULL when out of memory. */
static cJSON *st_json_ints(const int64_t *v, int n) {
  char buf[ST_MAX_DIMS * 24 + 4];
  safetensors_shape_text(buf, sizeof buf, n, v);
  return cJSON_CreateRaw(buf);
}

/* Checks one tensor to be written; sets *bytes to its data size. */
static int st_check_out(const char *path, const SafeTensorOut *t, uint64_t *bytes, char *err, size_t errlen) {
  if (!t->name || strcmp(t->name, "__metadata__") == 0)
    return file_set_error(err, errlen, "%s: invalid tensor name '%s'", path, t->name ? t->name : "(null)");
  if (t->ndim < 0 || t->ndim > ST_MAX_DIMS || (t->ndim > 0 && !t->shape))
    return file_set_error(err, errlen, "%s: tensor '%s': %d dimensions (0 to %d allowed)", path, t->name, t->ndim,
                          ST_MAX_DIMS);
  uint64_t numel = 1;
  for (int i = 0; i < t->ndim; i++) {
    uint64_t d = (uint64_t)t->shape[i];
    if (t->shape[i] < 0 || (d && numel > (UINT64_MAX / 8) / d))
      return file_set_error(err, errlen, "%s: tensor '%s': bad shape[%d] = %" PRId64, path, t->name, i, t->shape[i]);
    numel *= d;
  }
  if (numel && !t->data) return file_set_error(err, errlen, "%s: tensor '%s': no data", path, t->name);
  *bytes = numel * 4;
  return 0;
}

static cJSON *st_entry_new(const SafeTensorOut *t, uint64_t begin, uint64_t end) {
  cJSON *e = cJSON_CreateObject();
  int64_t offs[2] = {(int64_t)begin, (int64_t)end};
  if (e && cJSON_AddStringToObject(e, "dtype", "F32") &&
      cJSON_AddItemToObject(e, "shape", st_json_ints(t->shape, t->ndim)) &&
      cJSON_AddItemToObject(e, "data_offsets", st_json_ints(offs, 2)))
    return e;
  cJSON_Delete(e);
  return NULL;
}

static int st_add_metadata(cJSON *root, const char *const keys[], const char *const vals[], int nmeta) {
  if (nmeta <= 0) return 0;
  cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
  for (int i = 0; m && i < nmeta; i++)
    if (!keys[i] || !vals[i] || !cJSON_AddStringToObject(m, keys[i], vals[i])) return -1;
  return m ? 0 : -1;
}

/* Builds the header JSON text (unpadded) of the tensors and metadata. */
static char *st_header_build(const char *path, const SafeTensorOut *ts, int n, const char *const keys[],
                             const char *const vals[], int nmeta, uint64_t *bytes, char *err, size_t errlen) {
  cJSON *root = cJSON_CreateObject();
  char *text = NULL;
  int ok = root && st_add_metadata(root, keys, vals, nmeta) == 0;
  if (!ok) file_set_error(err, errlen, "%s: invalid or unrepresentable metadata", path);
  uint64_t off = 0;
  for (int i = 0; ok && i < n; i++) {
    ok = st_check_out(path, &ts[i], &bytes[i], err, errlen) == 0;
    cJSON *e = ok ? st_entry_new(&ts[i], off, off + bytes[i]) : NULL;
    if (ok &&
        (!e || cJSON_GetObjectItemCaseSensitive(root, ts[i].name) || !cJSON_AddItemToObject(root, ts[i].name, e))) {
      cJSON_Delete(e);
      file_set_error(err, errlen, "%s: tensor '%s': duplicate name or out of memory", path, ts[i].name);
      ok = 0;
    }
    off += ok ? bytes[i] : 0;
  }
  if (ok && !(text = cJSON_PrintUnformatted(root)))
    file_set_error(err, errlen, "%s: out of memory printing the header", path);
  cJSON_Delete(root);
  return text;
}

/* The header as written: the length, the JSON padded with spaces to a multiple of 8. */
static unsigned char *st_header_bytes(const char *hdr, size_t *len) {
  size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7;
  unsigned char *h = malloc(padded + 8);
  if (!h) return NULL;
  for (int b = 0; b < 8; b++) h[b] = (unsigned char)((uint64_t)padded >> (8 * b));
  memcpy(h + 8, hdr, hlen);
  memset(h + 8 + hlen, ' ', padded - hlen);
  *len = padded + 8;
  return h;
}

/* The metadata: the caller's pairs, then "crc32c:NAME" of every tensor with data,
 * its text from crcs (8 hex digits a block; zeros before the data is known). */
typedef struct StMeta {
  const char **keys, **vals;
  char **owned; /* [2 * ntensors] */
  int n;
} StMeta;

static void st_meta_free(StMeta *m, int ntensors) {
  for (int i = 0; m->owned && i < 2 * ntensors; i++) free(m->owned[i]);
  free(m->keys), free(m->vals), free(m->owned);
}

static int st_meta_build(StMeta *m, const SafeTensorOut *ts, int n, const uint64_t *bytes, const char *const keys[],
                         const char *const vals[], int nmeta) {
  memset(m, 0, sizeof *m);
  m->keys = calloc((size_t)(nmeta + n) + 1, sizeof *m->keys);
  m->vals = calloc((size_t)(nmeta + n) + 1, sizeof *m->vals);
  m->owned = calloc(2 * (size_t)n + 1, sizeof *m->owned);
  if (!m->keys || !m->vals || !m->owned) return -1;
  for (int i = 0; i < nmeta; i++) m->keys[m->n] = keys[i], m->vals[m->n++] = vals[i];
  for (int i = 0; i < n; i++) {
    uint64_t blocks = (bytes[i] + ST_CRC_BLOCK - 1) / ST_CRC_BLOCK;
    if (!blocks) continue;
    if (asprintf(&m->owned[2 * i], "%s%s", ST_CRC_KEY, ts[i].name) < 0 ||
        !(m->owned[2 * i + 1] = malloc(blocks * 8 + 1)))
      return m->owned[2 * i] = NULL, -1;
    memset(m->owned[2 * i + 1], '0', blocks * 8);
    m->owned[2 * i + 1][blocks * 8] = 0;
    m->keys[m->n] = m->owned[2 * i], m->vals[m->n++] = m->owned[2 * i + 1];
  }
  return 0;
}

/* Copies elements [first, first + n) of tensor i from its data. */
static int st_fill_data(void *arg, int i, int64_t first, int64_t n, float *dst, char *err, size_t errlen) {
  (void)err, (void)errlen;
  memcpy(dst, ((const SafeTensorOut *)arg)[i].data + first, (size_t)n * sizeof *dst);
  return 0;
}

/* Tensor i's bytes at off, from fill through buf (or straight from its data), CRC per block. */
static int st_write_tensor(FileTemp *f, const SafeTensorOut *t, int i, uint64_t bytes, uint64_t off, char *crc_text,
                           SafeTensorFill fill, void *arg, float *buf, size_t buf_bytes, char *err, size_t errlen) {
  for (uint64_t at = 0; at < bytes; at += buf_bytes) {
    size_t len = (size_t)(bytes - at < buf_bytes ? bytes - at : buf_bytes);
    const float *src = t->data ? t->data + at / 4 : buf;
    if (!t->data && fill(arg, i, (int64_t)(at / 4), (int64_t)(len / 4), buf, err, errlen) != 0) return -1;
    for (size_t b = 0; b < len; b += ST_CRC_BLOCK) {
      size_t blen = len - b < ST_CRC_BLOCK ? len - b : ST_CRC_BLOCK;
      char hex[9];
      snprintf(hex, sizeof hex, "%08x", crc32c(0, (const char *)src + b, blen));
      memcpy(crc_text + (at + b) / ST_CRC_BLOCK * 8, hex, 8);
    }
    if (file_pwrite_full(f->fd, src, len, off + at) != 0)
      return file_set_error(err, errlen, "%s: write failed: %s", f->path, strerror(errno));
  }
  return 0;
}

int safetensors_write_stream(const char *path, const SafeTensorOut *ts, int n, const char *const meta_keys[],
                             const char *const meta_values[], int nmeta, SafeTensorFill fill, void *arg,
                             size_t buf_bytes, char *err, size_t errlen) {
  if (n < 0 || (n > 0 && !ts) || nmeta < 0 || (nmeta > 0 && (!meta_keys || !meta_values)))
    return file_set_error(err, errlen, "%s: safetensors_write: invalid arguments", path);
  buf_bytes = buf_bytes < ST_CRC_BLOCK ? ST_CRC_BLOCK : buf_bytes / ST_CRC_BLOCK * ST_CRC_BLOCK;
  uint64_t *bytes = calloc((size_t)n + 1, sizeof *bytes);
  SafeTensorOut *outs = calloc((size_t)n + 1, sizeof *outs);
  StMeta m = {0};
  FileTemp f = {.fd = -1};
  char *hdr = NULL;
  unsigned char *head = NULL;
  float *buf = NULL;
  size_t hlen = 0, hlen2 = 0;
  int rc = -1;
  if (!bytes || !outs) goto oom;
  for (int i = 0; i < n; i++) /* the header's checks want data: a stand-in when filled */
    outs[i] = ts[i], outs[i].data = ts[i].data || !fill ? ts[i].data : (const float *)outs;
  for (int i = 0; i < n; i++) /* sizes, then the header with placeholder checksums: the real ones are as long */
    if (st_check_out(path, &outs[i], &bytes[i], err, errlen) != 0) goto out;
  if (st_meta_build(&m, ts, n, bytes, meta_keys, meta_values, nmeta) != 0) goto oom;
  if (!(hdr = st_header_build(path, outs, n, m.keys, m.vals, m.n, bytes, err, errlen))) goto out;
  if (!(head = st_header_bytes(hdr, &hlen))) goto oom;
  if (fill && !(buf = malloc(buf_bytes))) goto oom; /* only filled tensors pass through it */
  if (file_temp_open(&f, path, err, errlen) != 0) goto out;
  uint64_t off = hlen;
  for (int i = 0; i < n; i++) {
    if (st_write_tensor(&f, &ts[i], i, bytes[i], off, m.owned[2 * i + 1], fill ? fill : st_fill_data,
                        fill ? arg : (void *)ts, buf, buf_bytes, err, errlen) != 0)
      goto out;
    off += bytes[i];
  }
  free(hdr), free(head);
  head = NULL;
  if (!(hdr = st_header_build(path, outs, n, m.keys, m.vals, m.n, bytes, err, errlen))) goto out;
  if (!(head = st_header_bytes(hdr, &hlen2))) goto oom;
  if (hlen2 != hlen) { /* cannot happen: fixed-width checksums */
    file_set_error(err, errlen, "%s: the header changed size", path);
    goto out;
  }
  if (file_pwrite_full(f.fd, head, hlen, 0) != 0) {
    file_set_error(err, errlen, "%s: write failed: %s", f.tmp, strerror(errno));
    goto out;
  }
  rc = file_temp_commit(&f, err, errlen);
  goto out;
oom:
  file_set_error(err, errlen, "%s: out of memory", path);
out:
  if (f.fd >= 0) file_temp_abandon(&f);
  st_meta_free(&m, n);
  free(hdr), free(head), free(buf), free(bytes), free(outs);
  return rc;
}

int safetensors_write(const char *path, const SafeTensorOut *tensors, int n, const char *const meta_keys[],
                      const char *const meta_values[], int nmeta, char *err, size_t errlen) {
  return safetensors_write_stream(path, tensors, n, meta_keys, meta_values, nmeta, NULL, NULL, ST_WRITE_BUFFER, err,
                                  errlen);
}
