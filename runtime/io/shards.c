/* shards: pieces of tensors in shard files and the index that makes a set (see the
 * header). Every byte goes through pread/pwrite and one bounded buffer: neither a
 * writer nor a reader ever holds a whole tensor it does not own, nor maps a shard's
 * data (a mapped file's touched pages would count as the process's memory).
 */
#include "runtime/io/shards.h"

#include "runtime/io/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHAPE_KEY "shape:"

int64_t shards_numel(const ShardPiece *p) {
  int64_t n = 1;
  for (int d = 0; d < p->ndim; d++) n *= p->count[d];
  return n;
}

size_t shards_buffer_bytes(void) {
  const char *e = getenv("COLOSSALC_IO_BUFFER_MB");
  long mb = e ? strtol(e, NULL, 10) : 64;
  return (size_t)(mb >= 1 && mb <= 65536 ? mb : 64) << 20;
}

/* ---- boxes --------------------------------------------------------------------- */

/* Row-major strides of shape (elements). */
static void strides_of(int nd, const int64_t *shape, int64_t *st) {
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; d--) st[d] = s, s *= shape[d];
}

/* Line j of a box of shape count (its innermost dimension is the line) as the index of
 * each outer dimension. */
static void line_index(int nd, const int64_t *count, int64_t j, int64_t *idx) {
  for (int d = nd - 2; d >= 0; d--) idx[d] = j % count[d], j /= count[d];
  if (nd > 0) idx[nd - 1] = 0;
}

/* The array offset of element idx of p's box. */
static int64_t array_at(const ShardPiece *p, const int64_t *idx) {
  int64_t st[ST_MAX_DIMS], off = 0;
  strides_of(p->ndim, p->ashape ? p->ashape : p->count, st);
  for (int d = 0; d < p->ndim; d++) off += (p->astart[d] + idx[d]) * st[d];
  return off;
}

void shards_lines(const ShardPiece *p, void (*fn)(void *arg, float *dst, int64_t gindex, int64_t len), void *arg) {
  int64_t len = p->ndim ? p->count[p->ndim - 1] : 1, n = shards_numel(p), idx[ST_MAX_DIMS], gst[ST_MAX_DIMS];
  strides_of(p->ndim, p->gshape, gst);
  for (int64_t j = 0; len && j < n / len; j++) {
    int64_t g = 0;
    line_index(p->ndim, p->count, j, idx);
    for (int d = 0; d < p->ndim; d++) g += (p->gstart[d] + idx[d]) * gst[d];
    fn(arg, p->data + array_at(p, idx), g, len);
  }
}

/* Elements [first, first + n) of piece i's box, row-major, out of its array. */
static int fill_piece(void *arg, int i, int64_t first, int64_t n, float *dst, char *err, size_t errlen) {
  (void)err, (void)errlen;
  const ShardPiece *p = &((const ShardPiece *)arg)[i];
  int64_t len = p->ndim ? p->count[p->ndim - 1] : 1, idx[ST_MAX_DIMS];
  while (n > 0) {
    int64_t j = first / len, off = first % len, k = len - off < n ? len - off : n;
    line_index(p->ndim, p->count, j, idx);
    if (p->ndim) idx[p->ndim - 1] = off;
    memcpy(dst, p->data + array_at(p, idx), (size_t)k * sizeof *dst);
    dst += k, first += k, n -= k;
  }
  return 0;
}

/* "KEY" for a whole tensor, "KEY@s0,s1" otherwise (malloc'd). */
static char *piece_name(const ShardPiece *p) {
  int whole = 1;
  for (int d = 0; d < p->ndim; d++) whole &= p->gstart[d] == 0 && p->count[d] == p->gshape[d];
  size_t len = strlen(p->key) + 2 + (size_t)p->ndim * 21;
  char *s = malloc(len);
  if (!s) return NULL;
  size_t at = (size_t)snprintf(s, len, "%s", p->key);
  for (int d = 0; !whole && d < p->ndim; d++)
    at += (size_t)snprintf(s + at, len - at, "%c%" PRId64, d ? ',' : '@', p->gstart[d]);
  return s;
}

/* ---- writing ------------------------------------------------------------------- */

int shards_write(const char *path, const ShardPiece *ps, int n, const char *const keys[], const char *const vals[],
                 int nmeta, size_t buf_bytes, char *err, size_t errlen) {
  SafeTensorOut *out = calloc((size_t)n + 1, sizeof *out);
  char **names = calloc((size_t)n + 1, sizeof *names);
  const char **mk = calloc((size_t)(n + nmeta) + 1, sizeof *mk), **mv = calloc((size_t)(n + nmeta) + 1, sizeof *mv);
  char **owned = calloc(2 * (size_t)n + 1, sizeof *owned);
  int rc = out && names && mk && mv && owned ? 0 : file_set_error(err, errlen, "%s: out of memory", path), m = 0;
  for (int i = 0; rc == 0 && i < nmeta; i++) mk[m] = keys[i], mv[m++] = vals[i];
  for (int i = 0; rc == 0 && i < n; i++) {
    int seen = 0; /* one "shape:KEY" per tensor */
    for (int j = 0; j < i; j++) seen |= strcmp(ps[j].key, ps[i].key) == 0;
    char shape[ST_MAX_DIMS * 24 + 4];
    safetensors_shape_text(shape, sizeof shape, ps[i].ndim, ps[i].gshape);
    if (!(names[i] = piece_name(&ps[i])) ||
        (!seen && (asprintf(&owned[2 * i], "%s%s", SHAPE_KEY, ps[i].key) < 0 || !(owned[2 * i + 1] = strdup(shape))))) {
      rc = file_set_error(err, errlen, "%s: out of memory", path);
      break;
    }
    if (!seen) mk[m] = owned[2 * i], mv[m++] = owned[2 * i + 1];
    out[i] = (SafeTensorOut){names[i], ps[i].ndim, ps[i].count, NULL};
  }
  if (rc == 0) rc = safetensors_write_stream(path, out, n, mk, mv, m, fill_piece, (void *)ps, buf_bytes, err, errlen);
  for (int i = 0; names && i < n; i++) free(names[i]);
  for (int i = 0; owned && i < 2 * n; i++) free(owned[i]);
  free(out), free(names), free(mk), free(mv), free(owned);
  return rc;
}

/* "[a,b]" into shape (ndim set); 0 or -1. */
static int parse_shape_text(const char *text, int *ndim, int64_t *shape) {
  cJSON *a = cJSON_Parse(text);
  int rc = cJSON_IsArray(a) && cJSON_GetArraySize(a) <= ST_MAX_DIMS ? 0 : -1;
  *ndim = 0;
  for (const cJSON *v = a ? a->child : NULL; rc == 0 && v; v = v->next) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
      rc = -1;
    else shape[(*ndim)++] = (int64_t)v->valuedouble;
  }
  cJSON_Delete(a);
  return rc;
}

/* A stored tensor's name as key (malloc'd) and its box's start; -1 when malformed. */
static int parse_piece_name(const char *name, int ndim, char **key, int64_t *start) {
  const char *at = strrchr(name, '@');
  for (int d = 0; d < ndim; d++) start[d] = 0;
  if (!at) return (*key = strdup(name)) ? 0 : -1;
  const char *p = at + 1;
  for (int d = 0; d < ndim; d++) {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || errno || (*end != (d + 1 < ndim ? ',' : 0))) return -1;
    start[d] = v, p = end + (d + 1 < ndim);
  }
  return (*key = strndup(name, (size_t)(at - name))) ? 0 : -1;
}

static cJSON *json_ints(const int64_t *v, int n) {
  char buf[ST_MAX_DIMS * 24 + 4];
  safetensors_shape_text(buf, sizeof buf, n, v);
  return cJSON_CreateRaw(buf);
}

/* One shard's pieces into the index's "tensors". */
static int index_add_shard(cJSON *tensors, const char *dir, const char *file, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  SafeTensors *st = safetensors_open(path, err, errlen);
  if (!st) return -1;
  int rc = 0;
  for (int i = 0; rc == 0 && i < safetensors_count(st); i++) {
    const SafeTensor *t = safetensors_get(st, i);
    char *key = NULL, mkey[1024];
    int64_t start[ST_MAX_DIMS], gshape[ST_MAX_DIMS];
    int gnd = t->ndim;
    if (parse_piece_name(t->name, t->ndim, &key, start) != 0) {
      rc = file_set_error(err, errlen, "%s: tensor '%s': not a piece name", path, t->name);
      break;
    }
    snprintf(mkey, sizeof mkey, "%s%s", SHAPE_KEY, key);
    const char *gtext = safetensors_metadata(st, mkey);
    if (!gtext) memcpy(gshape, t->shape, sizeof gshape);
    if ((gtext && (parse_shape_text(gtext, &gnd, gshape) != 0 || gnd != t->ndim)) || t->dtype != ST_DTYPE_F32) {
      rc = file_set_error(err, errlen, "%s: tensor '%s': no F32 piece of a known shape", path, t->name);
    } else {
      cJSON *e = cJSON_GetObjectItemCaseSensitive(tensors, key);
      if (!e && (e = cJSON_AddObjectToObject(tensors, key)))
        cJSON_AddItemToObject(e, "shape", json_ints(gshape, gnd)), cJSON_AddArrayToObject(e, "pieces");
      cJSON *pieces = e ? cJSON_GetObjectItemCaseSensitive(e, "pieces") : NULL, *pc = cJSON_CreateObject();
      if (!pieces || !pc || !cJSON_AddStringToObject(pc, "file", file) ||
          !cJSON_AddItemToObject(pc, "start", json_ints(start, t->ndim)) ||
          !cJSON_AddItemToObject(pc, "shape", json_ints(t->shape, t->ndim)) || !cJSON_AddItemToArray(pieces, pc)) {
        cJSON_Delete(pc);
        rc = file_set_error(err, errlen, "%s: out of memory", path);
      }
    }
    free(key);
  }
  safetensors_close(st);
  return rc;
}

int shards_write_index(const char *dir, const char *const shards[], int nshards, const char *fmt,
                       const char *const keys[], const char *const vals[], int nmeta, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, SHARDS_INDEX);
  cJSON *root = cJSON_CreateObject(), *meta = NULL, *tensors = NULL;
  int rc = root && cJSON_AddStringToObject(root, "format", fmt) && (meta = cJSON_AddObjectToObject(root, "metadata")) &&
                   (tensors = cJSON_AddObjectToObject(root, "tensors"))
               ? 0
               : file_set_error(err, errlen, "%s: out of memory", path);
  for (int i = 0; rc == 0 && i < nmeta; i++)
    if (!cJSON_AddStringToObject(meta, keys[i], vals[i])) rc = file_set_error(err, errlen, "%s: out of memory", path);
  for (int i = 0; rc == 0 && i < nshards; i++) rc = index_add_shard(tensors, dir, shards[i], err, errlen);
  char *text = rc == 0 ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (rc == 0 && !text) rc = file_set_error(err, errlen, "%s: out of memory", path);
  if (rc == 0) {
    const void *chunks[2] = {text, "\n"};
    size_t lens[2] = {strlen(text), 1};
    rc = file_write_atomic(path, chunks, lens, 2, err, errlen);
  }
  free(text);
  return rc;
}

/* ---- reading ------------------------------------------------------------------- */

typedef struct StoredPiece {
  int file;   /* index in files */
  char *name; /* the tensor's name in that file */
  int64_t start[ST_MAX_DIMS], count[ST_MAX_DIMS];
} StoredPiece;

typedef struct StoredTensor {
  char *key;
  int ndim;
  int64_t shape[ST_MAX_DIMS];
  StoredPiece *pieces;
  int npieces;
} StoredTensor;

typedef struct ShardFile {
  char *path;
  SafeTensors *st; /* opened on first use */
  int fd;
} ShardFile;

struct ShardSet {
  char *path;
  StoredTensor *t;
  int n;
  ShardFile *files;
  int nfiles;
  char **meta; /* key, value, ... */
  int nmeta;
  char *buf; /* the read buffer, allocated on first use */
  size_t buf_bytes;
};

void shards_close(ShardSet *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    for (int j = 0; j < s->t[i].npieces; j++) free(s->t[i].pieces[j].name);
    free(s->t[i].pieces), free(s->t[i].key);
  }
  for (int i = 0; i < s->nfiles; i++) {
    safetensors_close(s->files[i].st);
    if (s->files[i].fd >= 0) close(s->files[i].fd);
    free(s->files[i].path);
  }
  for (int i = 0; i < 2 * s->nmeta; i++) free(s->meta[i]);
  free(s->t), free(s->files), free(s->meta), free(s->buf), free(s->path);
  free(s);
}

static int set_add_meta(ShardSet *s, const char *k, const char *v) {
  char **m = realloc(s->meta, (size_t)(s->nmeta + 1) * 2 * sizeof *m);
  if (!m) return -1;
  s->meta = m;
  if (!(m[2 * s->nmeta] = strdup(k)) || !(m[2 * s->nmeta + 1] = strdup(v))) return -1;
  s->nmeta++;
  return 0;
}

static int set_add_file(ShardSet *s, const char *path) {
  for (int i = 0; i < s->nfiles; i++)
    if (strcmp(s->files[i].path, path) == 0) return i;
  ShardFile *f = realloc(s->files, (size_t)(s->nfiles + 1) * sizeof *f);
  if (!f) return -1;
  s->files = f;
  f[s->nfiles] = (ShardFile){strdup(path), NULL, -1};
  return f[s->nfiles].path ? s->nfiles++ : -1;
}

/* Tensor key, added when new (shape then set by the caller). */
static StoredTensor *set_tensor(ShardSet *s, const char *key) {
  int i = shards_find(s, key);
  if (i >= 0) return &s->t[i];
  StoredTensor *t = realloc(s->t, (size_t)(s->n + 1) * sizeof *t);
  if (!t) return NULL;
  s->t = t;
  memset(&t[s->n], 0, sizeof *t);
  if (!(t[s->n].key = strdup(key))) return NULL;
  return &t[s->n++];
}

static int tensor_add_piece(StoredTensor *t, int file, const char *name, const int64_t *start, const int64_t *count) {
  StoredPiece *p = realloc(t->pieces, (size_t)(t->npieces + 1) * sizeof *p);
  if (!p) return -1;
  t->pieces = p;
  StoredPiece *q = &p[t->npieces];
  memset(q, 0, sizeof *q);
  q->file = file;
  memcpy(q->start, start, sizeof q->start), memcpy(q->count, count, sizeof q->count);
  if (!(q->name = strdup(name))) return -1;
  t->npieces++;
  return 0;
}

/* A plain name beside the index (no directories). */
static int plain_name(const char *s) { return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, ".."); }

static int open_index_piece(ShardSet *s, StoredTensor *t, const cJSON *pc, const char *dir, char *err, size_t errlen) {
  const cJSON *file = cJSON_GetObjectItemCaseSensitive(pc, "file");
  const cJSON *start = cJSON_GetObjectItemCaseSensitive(pc, "start");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(pc, "shape");
  int64_t st[ST_MAX_DIMS] = {0}, ct[ST_MAX_DIMS] = {0};
  int n1 = -1, n2 = -1;
  char *t1 = start ? cJSON_PrintUnformatted(start) : NULL, *t2 = shape ? cJSON_PrintUnformatted(shape) : NULL;
  int bad = !cJSON_IsString(file) || !plain_name(file->valuestring) || !t1 || !t2 ||
            parse_shape_text(t1, &n1, st) != 0 || parse_shape_text(t2, &n2, ct) != 0 || n1 != t->ndim || n2 != t->ndim;
  free(t1), free(t2);
  for (int d = 0; !bad && d < t->ndim; d++) bad = st[d] + ct[d] > t->shape[d];
  if (bad) return file_set_error(err, errlen, "%s: bad index: a piece of '%s' is malformed", s->path, t->key);
  char path[4096], name[1024];
  snprintf(path, sizeof path, "%s/%s", dir, file->valuestring);
  ShardPiece tmp = {.key = t->key, .ndim = t->ndim, .gshape = t->shape};
  memcpy(tmp.gstart, st, sizeof st), memcpy(tmp.count, ct, sizeof ct);
  char *pn = piece_name(&tmp);
  snprintf(name, sizeof name, "%s", pn ? pn : "");
  free(pn);
  int f = set_add_file(s, path);
  if (f < 0 || tensor_add_piece(t, f, name, st, ct) != 0) return file_set_error(err, errlen, "out of memory");
  return 0;
}

static int open_index(ShardSet *s, const char *dir, char *err, size_t errlen) {
  char path[4096];
  size_t len = 0;
  snprintf(path, sizeof path, "%s/%s", dir, SHARDS_INDEX);
  char *text = file_read_all(path, &len, err, errlen);
  if (!text) return -1;
  cJSON *root = cJSON_ParseWithLength(text, len);
  free(text);
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "metadata");
  const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
  int rc = cJSON_IsObject(meta) && cJSON_IsObject(tensors) && cJSON_IsString(fmt)
               ? 0
               : file_set_error(err, errlen, "%s: not a checkpoint index (damaged or of another tool)", path);
  if (rc == 0 && set_add_meta(s, "format", fmt->valuestring) != 0) rc = file_set_error(err, errlen, "out of memory");
  for (const cJSON *kv = rc == 0 ? meta->child : NULL; kv && rc == 0; kv = kv->next)
    if (!cJSON_IsString(kv) || set_add_meta(s, kv->string, kv->valuestring) != 0)
      rc = file_set_error(err, errlen, "%s: bad index: metadata '%s' is not a string", path, kv->string);
  for (const cJSON *e = rc == 0 ? tensors->child : NULL; e && rc == 0; e = e->next) {
    StoredTensor *t = set_tensor(s, e->string);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *pieces = cJSON_GetObjectItemCaseSensitive(e, "pieces");
    char *st = shape ? cJSON_PrintUnformatted(shape) : NULL;
    if (!t || !st || parse_shape_text(st, &t->ndim, t->shape) != 0 || !cJSON_IsArray(pieces))
      rc = file_set_error(err, errlen, "%s: bad index: tensor '%s' is malformed", path, e->string);
    free(st);
    for (const cJSON *pc = rc == 0 ? pieces->child : NULL; pc && rc == 0; pc = pc->next)
      rc = open_index_piece(s, t, pc, dir, err, errlen);
  }
  cJSON_Delete(root);
  return rc;
}

/* One safetensors file as a set: its tensors are pieces (whole ones, or named KEY@...). */
static int open_file(ShardSet *s, const char *path, char *err, size_t errlen) {
  int f = set_add_file(s, path);
  if (f < 0) return file_set_error(err, errlen, "out of memory");
  SafeTensors *st = s->files[f].st = safetensors_open(path, err, errlen);
  if (!st) return -1;
  for (int i = 0; i < safetensors_metadata_count(st); i++) {
    const char *k, *v;
    safetensors_metadata_at(st, i, &k, &v);
    if (strncmp(k, ST_CRC_KEY, strlen(ST_CRC_KEY)) && strncmp(k, SHAPE_KEY, strlen(SHAPE_KEY)) &&
        set_add_meta(s, k, v) != 0)
      return file_set_error(err, errlen, "out of memory");
  }
  for (int i = 0; i < safetensors_count(st); i++) {
    const SafeTensor *t = safetensors_get(st, i);
    char *key = NULL, mkey[1024];
    int64_t start[ST_MAX_DIMS];
    if (parse_piece_name(t->name, t->ndim, &key, start) != 0)
      return file_set_error(err, errlen, "%s: tensor '%s': not a piece name", path, t->name);
    snprintf(mkey, sizeof mkey, "%s%s", SHAPE_KEY, key);
    StoredTensor *T = set_tensor(s, key);
    free(key);
    if (!T) return file_set_error(err, errlen, "out of memory");
    const char *g = safetensors_metadata(st, mkey);
    int nd = t->ndim;
    if (T->npieces == 0 && !g) T->ndim = t->ndim, memcpy(T->shape, t->shape, sizeof T->shape);
    else if (T->npieces == 0 && (parse_shape_text(g, &T->ndim, T->shape) != 0 || T->ndim != nd))
      return file_set_error(err, errlen, "%s: metadata '%s' is not a shape of %d dimensions", path, mkey, nd);
    if (tensor_add_piece(T, f, t->name, start, t->shape) != 0) return file_set_error(err, errlen, "out of memory");
  }
  return 0;
}

ShardSet *shards_open(const char *path, char *err, size_t errlen) {
  ShardSet *s = calloc(1, sizeof *s);
  char index[4096];
  if (!s || !(s->path = strdup(path))) {
    free(s);
    file_set_error(err, errlen, "out of memory");
    return NULL;
  }
  snprintf(index, sizeof index, "%s/%s", path, SHARDS_INDEX);
  int dir = access(index, F_OK) == 0;
  if (!dir && strlen(path) > 5 && !strcmp(path + strlen(path) - 5, ".json")) { /* the index itself */
    char *d = strdup(path), *slash = d ? strrchr(d, '/') : NULL;
    if (slash) *slash = 0;
    int rc = d ? open_index(s, slash ? d : ".", err, errlen) : -1;
    free(d);
    if (rc == 0) return s;
    shards_close(s);
    return NULL;
  }
  if ((dir ? open_index(s, path, err, errlen) : open_file(s, path, err, errlen)) != 0) {
    shards_close(s);
    return NULL;
  }
  return s;
}

const char *shards_meta(const ShardSet *s, const char *key) {
  for (int i = 0; i < s->nmeta; i++)
    if (!strcmp(s->meta[2 * i], key)) return s->meta[2 * i + 1];
  return NULL;
}

int shards_count(const ShardSet *s) { return s->n; }

const char *shards_key(const ShardSet *s, int i, int *ndim, const int64_t **shape) {
  if (ndim) *ndim = s->t[i].ndim;
  if (shape) *shape = s->t[i].shape;
  return s->t[i].key;
}

int shards_find(const ShardSet *s, const char *key) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->t[i].key, key)) return i;
  return -1;
}

/* The stored piece's tensor in its (opened) file. */
static const SafeTensor *stored_tensor(ShardSet *s, const StoredPiece *p, ShardFile **fp, char *err, size_t errlen) {
  ShardFile *f = *fp = &s->files[p->file];
  if (!f->st && !(f->st = safetensors_open(f->path, err, errlen))) return NULL;
  if (f->fd < 0 && (f->fd = open(f->path, O_RDONLY | O_CLOEXEC)) < 0) {
    file_set_error(err, errlen, "%s: cannot open: %s", f->path, strerror(errno));
    return NULL;
  }
  const SafeTensor *t = safetensors_find(f->st, p->name);
  int ok = t && t->dtype == ST_DTYPE_F32;
  for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == p->count[d];
  if (!ok) file_set_error(err, errlen, "%s: does not hold the piece %s the index names (F32)", f->path, p->name);
  return ok ? t : NULL;
}

static int set_buffer(ShardSet *s, char *err, size_t errlen) {
  if (s->buf) return 0;
  s->buf_bytes = shards_buffer_bytes() / ST_CRC_BLOCK * ST_CRC_BLOCK;
  if (!(s->buf = malloc(s->buf_bytes))) return file_set_error(err, errlen, "out of memory for the read buffer");
  return 0;
}

/* Reads bytes [lo, hi) of t (block-aligned lo) a window at a time, checking each whole
 * block, and hands each window to copy. */
typedef struct Lines {
  int nd;
  int64_t lo[ST_MAX_DIMS], cnt[ST_MAX_DIMS]; /* the intersection, global coordinates */
  int64_t nlines, len, next;                 /* lines, their length, the first not done */
  int64_t done_in_line;                      /* elements of line `next` already copied */
  const StoredPiece *p;
  const ShardPiece *w;
  int64_t pst[ST_MAX_DIMS], copied;
} Lines;

/* Line j's offset in the stored piece (elements) and its destination's index. */
static int64_t line_src(const Lines *L, int64_t j, int64_t *didx) {
  int64_t idx[ST_MAX_DIMS], off = 0;
  line_index(L->nd, L->cnt, j, idx);
  for (int d = 0; d < L->nd; d++) {
    int64_t g = L->lo[d] + idx[d];
    off += (g - L->p->start[d]) * L->pst[d];
    didx[d] = g - L->w->gstart[d];
  }
  return off;
}

/* Copies what of the lines lies in the window [w0, w1) (bytes of the stored piece). */
static void lines_copy(Lines *L, const char *win, uint64_t w0, uint64_t w1) {
  int64_t didx[ST_MAX_DIMS];
  while (L->next < L->nlines) {
    uint64_t a = (uint64_t)line_src(L, L->next, didx) * 4 + (uint64_t)L->done_in_line * 4;
    uint64_t e = a + (uint64_t)(L->len - L->done_in_line) * 4;
    if (a >= w1) return;
    uint64_t b = e < w1 ? e : w1;
    if (L->nd) didx[L->nd - 1] += L->done_in_line;
    memcpy(L->w->data + array_at(L->w, didx), win + (a - w0), (size_t)(b - a));
    L->copied += (int64_t)(b - a) / 4;
    if (b == e) L->next++, L->done_in_line = 0;
    else L->done_in_line += (int64_t)(b - a) / 4;
  }
}

/* The part of stored piece p inside w's box, into w's array. */
static int read_stored(ShardSet *s, const StoredPiece *p, const ShardPiece *w, int64_t *covered, char *err,
                       size_t errlen) {
  Lines L = {.nd = w->ndim, .p = p, .w = w};
  int64_t vol = 1;
  for (int d = 0; d < w->ndim; d++) {
    int64_t lo = p->start[d] > w->gstart[d] ? p->start[d] : w->gstart[d];
    int64_t hi =
        p->start[d] + p->count[d] < w->gstart[d] + w->count[d] ? p->start[d] + p->count[d] : w->gstart[d] + w->count[d];
    if (hi <= lo) return 0;
    L.lo[d] = lo, L.cnt[d] = hi - lo, vol *= hi - lo;
  }
  ShardFile *f;
  const SafeTensor *t = stored_tensor(s, p, &f, err, errlen);
  if (!t || set_buffer(s, err, errlen) != 0) return -1;
  strides_of(w->ndim, p->count, L.pst);
  L.len = w->ndim ? L.cnt[w->ndim - 1] : 1, L.nlines = vol / L.len;
  int64_t didx[ST_MAX_DIMS];
  uint64_t lo = (uint64_t)line_src(&L, 0, didx) * 4, hi = ((uint64_t)line_src(&L, L.nlines - 1, didx) + L.len) * 4;
  uint64_t size = t->end - t->begin, base = safetensors_data_offset(f->st) + t->begin;
  lo = lo / ST_CRC_BLOCK * ST_CRC_BLOCK;
  hi = (hi + ST_CRC_BLOCK - 1) / ST_CRC_BLOCK * ST_CRC_BLOCK;
  hi = hi < size ? hi : size;
  for (uint64_t w0 = lo; w0 < hi; w0 += s->buf_bytes) {
    uint64_t w1 = w0 + s->buf_bytes < hi ? w0 + s->buf_bytes : hi;
    if (file_pread_full(f->fd, s->buf, (size_t)(w1 - w0), base + w0) != 0)
      return file_set_error(err, errlen, "%s: tensor '%s': cannot read: %s", f->path, t->name,
                            errno == EIO ? "the file is truncated" : strerror(errno));
    for (uint64_t b = w0; b < w1; b += ST_CRC_BLOCK)
      if (safetensors_check_block(f->path, t, (int64_t)(b / ST_CRC_BLOCK), s->buf + (b - w0), err, errlen) != 0)
        return -1;
    lines_copy(&L, s->buf, w0, w1);
  }
  *covered += L.copied;
  return 0;
}

int shards_read(ShardSet *s, const ShardPiece *w, char *err, size_t errlen) {
  int i = shards_find(s, w->key);
  if (i < 0)
    return file_set_error(err, errlen, "%s: holds no tensor '%s': a checkpoint of another model", s->path, w->key);
  const StoredTensor *T = &s->t[i];
  int same = T->ndim == w->ndim;
  for (int d = 0; same && d < w->ndim; d++) same = T->shape[d] == w->gshape[d];
  if (!same) {
    char a[256], b[256];
    safetensors_shape_text(a, sizeof a, T->ndim, T->shape);
    safetensors_shape_text(b, sizeof b, w->ndim, w->gshape);
    return file_set_error(err, errlen, "%s: tensor '%s' is %s, the model's %s: a checkpoint of another model", s->path,
                          w->key, a, b);
  }
  int64_t covered = 0;
  for (int j = 0; j < T->npieces; j++)
    if (read_stored(s, &T->pieces[j], w, &covered, err, errlen) != 0) return -1;
  if (covered != shards_numel(w))
    return file_set_error(err, errlen, "%s: tensor '%s': its pieces hold %" PRId64 " of the %" PRId64 " elements read",
                          s->path, w->key, covered, shards_numel(w));
  return 0;
}

int shards_verify(ShardSet *s, char *err, size_t errlen) {
  for (int i = 0; i < s->n; i++)
    for (int j = 0; j < s->t[i].npieces; j++) {
      const StoredPiece *p = &s->t[i].pieces[j];
      ShardFile *f;
      const SafeTensor *t = stored_tensor(s, p, &f, err, errlen);
      if (!t || set_buffer(s, err, errlen) != 0) return -1;
      uint64_t size = t->end - t->begin, base = safetensors_data_offset(f->st) + t->begin;
      for (uint64_t w0 = 0; w0 < size; w0 += s->buf_bytes) {
        uint64_t w1 = w0 + s->buf_bytes < size ? w0 + s->buf_bytes : size;
        if (file_pread_full(f->fd, s->buf, (size_t)(w1 - w0), base + w0) != 0)
          return file_set_error(err, errlen, "%s: cannot read: %s", f->path, strerror(errno));
        for (uint64_t b = w0; b < w1; b += ST_CRC_BLOCK)
          if (safetensors_check_block(f->path, t, (int64_t)(b / ST_CRC_BLOCK), s->buf + (b - w0), err, errlen) != 0)
            return -1;
      }
    }
  return 0;
}

/* ---- whole tensors out of a set ------------------------------------------------ */

int shards_fill(void *arg, int i, int64_t first, int64_t n, float *dst, char *err, size_t errlen) {
  ShardFill *f = arg;
  int k = shards_find(f->set, f->keys[i]), nd;
  const int64_t *shape;
  if (k < 0) return file_set_error(err, errlen, "%s: holds no tensor '%s'", f->set->path, f->keys[i]);
  shards_key(f->set, k, &nd, &shape);
  int64_t row = 1;
  for (int d = 1; d < nd; d++) row *= shape[d];
  int64_t lo = nd ? first / row : 0, hi = nd ? (first + n + row - 1) / row : 1;
  if (f->tensor != i || lo < f->lo || hi > f->hi || !f->rows) {
    int64_t need = (hi - lo) * row;
    if (need > f->cap) {
      float *r = realloc(f->rows, (size_t)need * sizeof *r);
      if (!r) return file_set_error(err, errlen, "out of memory reading '%s'", f->keys[i]);
      f->rows = r, f->cap = need;
    }
    ShardPiece w = {.key = f->keys[i], .ndim = nd, .gshape = shape, .data = f->rows};
    for (int d = 0; d < nd; d++) w.count[d] = shape[d];
    if (nd) w.gstart[0] = lo, w.count[0] = hi - lo;
    if (shards_read(f->set, &w, err, errlen) != 0) return -1;
    f->tensor = i, f->lo = lo, f->hi = hi;
  }
  memcpy(dst, f->rows + (first - f->lo * row), (size_t)n * sizeof *dst);
  return 0;
}

void shards_fill_free(ShardFill *f) {
  free(f->rows);
  f->rows = NULL, f->cap = 0;
}
