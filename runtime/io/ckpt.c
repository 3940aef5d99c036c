/* io/ckpt: parameter files and checkpoints (see the header). A "set" is the list
 * of tensors a file must hold, each with its host buffer; loading checks the file
 * against the set as a whole before reading anything, so a mismatch is reported
 * in one message and leaves memory untouched.
 */
#include "runtime/io/ckpt.h"

#include "runtime/io/fileio.h"
#include "runtime/io/hf.h"
#include "runtime/philox.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/shards.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_LIST_MAX 8 /* names shown per kind of mismatch */

/* One tensor a file offers, under the model's name for it. */
typedef struct CkptSrc {
  char *name;            /* the model's name (owned) */
  const char *file_name; /* as the file names it */
  const SafeTensor *t;
  const SafeTensors *st;
  int used;
} CkptSrc;

/* What a file (or the shards of an index) offers: its tensors by the model's names. */
typedef struct CkptFile {
  const char *path;
  CkptSrc *src; /* [n] sorted by name */
  int n;
  const HfFamily *fam; /* the model's Hugging Face family (--init-from), or NULL */
  const CkptSrc *tied; /* the file's output head, which the model ties (fam) */
} CkptFile;

typedef struct CkptEntry {
  char *name;             /* "param/wte.weight", or the plain name */
  const ProgParam *param; /* shape */
  float *data;            /* [param->numel], host */
  int skip;               /* checked in the file but not read */
  const CkptSrc *src;     /* where it is read from (set_bind), or NULL: missing */
} CkptEntry;

typedef struct CkptSet {
  CkptEntry *e; /* [n] */
  int n;
} CkptSet;

/* ---- init ---------------------------------------------------------------------- */

static void init_fill(float *dst, int64_t n, float v) {
  for (int64_t i = 0; i < n; i++) dst[i] = v;
}

void ckpt_init_params(const Prog *p, char *params, uint64_t seed, const unsigned char *held) {
  for (int i = 0; i < p->s->nparams; i++) {
    const ProgParam *q = &p->params[i];
    if (held && !held[i]) continue;
    ShardPiece w = {.key = prog_str(p, q->name),
                    .ndim = (int)q->ndim,
                    .gshape = q->shape,
                    .ashape = q->shape,
                    .data = (float *)(params + q->offset)};
    for (int d = 0; d < w.ndim; d++) w.count[d] = q->shape[d];
    ckpt_init_piece(q, w.key, &w, seed);
  }
}

/* What the model's ops say (ProgStage arch) as hf_save takes it; NULL when the program
 * does not say. */
static const HfArch *arch_of(const Prog *p, HfArch *a) {
  const ProgStage *s = p->s;
  if (!s->arch) return NULL;
  *a = (HfArch){.heads = s->heads,
                .kv_heads = s->kv_heads,
                .window = s->window,
                .causal = s->causal == 1,
                .scaled = (int)s->attention_scale,
                .norm_eps = s->norm_eps,
                .rope_theta = s->rope_theta,
                .rope_scaling = {s->rope_scaling[0], s->rope_scaling[1], s->rope_scaling[2], s->rope_scaling[3]}};
  if (s->norm != PROG_ARCH_NONE) snprintf(a->norm, sizeof a->norm, "%s", prog_archkind_names[s->norm]);
  if (s->activation != PROG_ARCH_NONE)
    snprintf(a->activation, sizeof a->activation, "%s", prog_archkind_names[s->activation]);
  return a;
}

/* The same as the JSON text files carry in their metadata (colossalc-export reads it
 * back), into buf; NULL when the program does not say. */
static const char *arch_text(const Prog *p, char *buf, size_t len) {
  HfArch a;
  if (!arch_of(p, &a)) return NULL;
  size_t at = (size_t)snprintf(buf, len, "{");
  if (a.heads != 0)
    at += (size_t)snprintf(buf + at, len - at, "\"heads\":%" PRId64 ",\"causal\":%" PRId64 ",\"attention_scale\":%s,",
                           a.heads, p->s->causal, a.scaled ? "true" : "false");
  if (a.heads != 0 && a.kv_heads != a.heads && at < len)
    at += (size_t)snprintf(buf + at, len - at, "\"kv_heads\":%" PRId64 ",", a.kv_heads);
  if (a.window != 0 && at < len) at += (size_t)snprintf(buf + at, len - at, "\"window\":%" PRId64 ",", a.window);
  if (a.norm[0] && at < len)
    at += (size_t)snprintf(buf + at, len - at, "\"norm\":\"%s\",\"norm_eps\":%.17g,", a.norm, a.norm_eps);
  if (a.activation[0] && at < len) at += (size_t)snprintf(buf + at, len - at, "\"activation\":\"%s\",", a.activation);
  if (a.rope_theta != 0 && at < len) at += (size_t)snprintf(buf + at, len - at, "\"rope_theta\":%.17g,", a.rope_theta);
  if (a.rope_theta != 0 && a.rope_scaling[0] != 1 && at < len)
    at += (size_t)snprintf(buf + at, len - at, "\"rope_scaling\":[%.17g,%.17g,%.17g,%.17g],", a.rope_scaling[0],
                           a.rope_scaling[1], a.rope_scaling[2], a.rope_scaling[3]);
  if (at < len) snprintf(buf + at - (at > 1), len - at + (at > 1), "}");
  return buf;
}

/* ---- tensor sets --------------------------------------------------------------- */

static void set_free(CkptSet *s) {
  for (int i = 0; i < s->n; i++) free(s->e[i].name);
  free(s->e);
  s->e = NULL, s->n = 0;
}

/* groups bases[g] with name prefixes[g]: one entry per parameter per group. */
static int set_build(const Prog *p, int ngroups, const char *const prefixes[], char *const bases[], CkptSet *s,
                     char *err, size_t errlen) {
  s->n = 0;
  if (!(s->e = calloc((size_t)ngroups * p->s->nparams, sizeof *s->e)))
    return file_set_error(err, errlen, "out of memory");
  for (int g = 0; g < ngroups; g++)
    for (int i = 0; i < p->s->nparams; i++) {
      CkptEntry *e = &s->e[s->n++];
      const ProgParam *q = &p->params[i];
      e->param = q;
      e->data = (float *)(bases[g] + q->offset);
      if (asprintf(&e->name, "%s%s", prefixes[g], prog_str(p, q->name)) < 0) {
        e->name = NULL;
        set_free(s);
        return file_set_error(err, errlen, "out of memory");
      }
    }
  return 0;
}

static int set_params(const Prog *p, char *params, CkptSet *s, char *err, size_t errlen) {
  const char *const prefixes[1] = {""};
  char *const bases[1] = {params};
  return set_build(p, 1, prefixes, bases, s, err, errlen);
}

static const CkptEntry *set_find(const CkptSet *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->e[i].name, name) == 0) return &s->e[i];
  return NULL;
}

/* ---- mismatch report ----------------------------------------------------------- */

typedef struct NameList {
  char text[1024];
  size_t len;
  int count;
} NameList;

static void list_add(NameList *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void list_add(NameList *l, const char *fmt, ...) {
  if (l->count++ >= CKPT_LIST_MAX || l->len >= sizeof l->text - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(l->text + l->len, sizeof l->text - l->len, fmt, ap);
  va_end(ap);
  l->len += w > 0 ? (size_t)w : 0;
  if (l->len > sizeof l->text - 1) l->len = sizeof l->text - 1;
}

static int shape_equal(const SafeTensor *t, const ProgParam *q) {
  if (t->ndim != q->ndim) return 0;
  for (int d = 0; d < q->ndim; d++)
    if (t->shape[d] != q->shape[d]) return 0;
  return 1;
}

/* A 2-D tensor stored the other way round ([in, out] for [out, in]). */
static int shape_transposed(const SafeTensor *t, const ProgParam *q) {
  return t->ndim == 2 && q->ndim == 2 && t->shape[0] == q->shape[1] && t->shape[1] == q->shape[0];
}

static int dtype_loads(StDtype dt) { return dt == ST_DTYPE_F32 || dt == ST_DTYPE_F16 || dt == ST_DTYPE_BF16; }

static void list_shape(NameList *l, const char *name, const SafeTensor *t, const ProgParam *q) {
  char fs[128], ms[128];
  safetensors_shape_text(fs, sizeof fs, t->ndim, t->shape);
  safetensors_shape_text(ms, sizeof ms, q->ndim, q->shape);
  list_add(l, "%s%s (file %s, model %s%s)", l->count ? ", " : "", name, fs, ms,
           shape_transposed(t, q) ? ": transposed" : "");
}

static void list_flush(char *err, size_t errlen, size_t *at, const char *what, const NameList *l) {
  if (!l->count || *at >= errlen) return;
  int w = snprintf(err + *at, errlen - *at, "; %s (%d): %s%s", what, l->count, l->text,
                   l->count > CKPT_LIST_MAX ? ", ..." : "");
  *at += w > 0 ? (size_t)w : 0;
}

/* ---- what a file offers -------------------------------------------------------- */

static void file_free(CkptFile *f) {
  for (int i = 0; i < f->n; i++) free(f->src[i].name);
  free(f->src);
  f->src = NULL, f->n = 0;
}

static int src_cmp(const void *a, const void *b) {
  return strcmp(((const CkptSrc *)a)->name, ((const CkptSrc *)b)->name);
}

static CkptSrc *file_find(const CkptFile *f, const char *name) {
  CkptSrc key = {.name = (char *)name};
  return f->n ? bsearch(&key, f->src, (size_t)f->n, sizeof *f->src, src_cmp) : NULL;
}

/* Sorted by name; two tensors under one name (GPT-2's "transformer.wte.weight" beside
 * "wte.weight") are an error. */
static int file_sort(CkptFile *f, char *err, size_t errlen) {
  qsort(f->src, (size_t)f->n, sizeof *f->src, src_cmp);
  for (int i = 1; i < f->n; i++)
    if (strcmp(f->src[i - 1].name, f->src[i].name) == 0)
      return file_set_error(err, errlen, "%s: '%s' and '%s' are both the model's %s", f->path, f->src[i - 1].file_name,
                            f->src[i].file_name, f->src[i].name);
  return 0;
}

static int file_add(CkptFile *f, const char *name, const SafeTensor *t, const SafeTensors *st) {
  CkptSrc *c = &f->src[f->n];
  if (!(c->name = strdup(name))) return -1;
  c->file_name = t->name, c->t = t, c->st = st;
  f->n++;
  return 0;
}

/* --init-from's tensors under the model's names (its family's, hf.h); the buffers
 * that are not parameters go to skipped. */
static int file_of_source(CkptFile *f, const HfSource *s, const HfFamily *fam, NameList *skipped, char *err,
                          size_t errlen) {
  int n = hf_source_count(s);
  char name[512];
  *f = (CkptFile){.path = hf_source_path(s), .fam = fam};
  if (!(f->src = calloc((size_t)n + 1, sizeof *f->src)))
    return file_set_error(err, errlen, "%s: out of memory", f->path);
  for (int i = 0; i < n; i++) {
    const SafeTensors *st;
    const SafeTensor *t = hf_source_get(s, i, &st);
    if (hf_model_name(fam, t->name, name, sizeof name) == HF_BUFFER)
      list_add(skipped, "%s%s", skipped->count ? ", " : "", t->name);
    else if (file_add(f, name, t, st) != 0) return file_set_error(err, errlen, "%s: out of memory", f->path);
  }
  return file_sort(f, err, errlen);
}

/* Each entry's tensor. With a family: an output head the file does not hold is read
 * from the embedding (the file ties them), and a head the model does not have (it
 * ties them) is checked against the embedding (set_read). */
static void set_bind(CkptSet *s, CkptFile *f, NameList *tied) {
  const char *head = f->fam ? hf_family_head(f->fam) : NULL;
  const char *embed = f->fam ? hf_family_embed(f->fam) : NULL;
  for (int i = 0; i < s->n; i++) {
    CkptSrc *c = file_find(f, s->e[i].name);
    if (!c && head && strcmp(s->e[i].name, head) == 0 && (c = file_find(f, embed)))
      list_add(tied, "%s from %s (tied in the file)", head, c->file_name);
    if (c) c->used = 1;
    s->e[i].src = c;
  }
  CkptSrc *c = head && !set_find(s, head) && set_find(s, embed) ? file_find(f, head) : NULL;
  if (c) c->used = 1, f->tied = c;
}

/* The bound entries hold the model's shapes in loadable dtypes, and the file nothing
 * else. */
static int set_check(const CkptSet *s, const CkptFile *f, char *err, size_t errlen) {
  static NameList miss, extra, shape, dtype; /* large: kept off the stack, single-threaded use */
  memset(&miss, 0, sizeof miss), memset(&extra, 0, sizeof extra);
  memset(&shape, 0, sizeof shape), memset(&dtype, 0, sizeof dtype);
  for (int i = 0; i < s->n; i++) {
    const CkptEntry *e = &s->e[i];
    const SafeTensor *t = e->src ? e->src->t : NULL;
    if (!t) list_add(&miss, "%s%s", miss.count ? ", " : "", e->name);
    else if (!shape_equal(t, e->param)) list_shape(&shape, e->src->file_name, t, e->param);
    else if (!dtype_loads(t->dtype))
      list_add(&dtype, "%s%s (%s)", dtype.count ? ", " : "", e->src->file_name, safetensors_dtype_name(t->dtype));
  }
  if (f->tied && !shape_equal(f->tied->t, set_find(s, hf_family_embed(f->fam))->param))
    list_shape(&shape, f->tied->file_name, f->tied->t, set_find(s, hf_family_embed(f->fam))->param);
  for (int i = 0; i < f->n; i++)
    if (!f->src[i].used) list_add(&extra, "%s%s", extra.count ? ", " : "", f->src[i].file_name);
  if (!miss.count && !extra.count && !shape.count && !dtype.count) return 0;
  int w = snprintf(err, errlen, "%s does not match the model", f->path);
  size_t at = w > 0 ? (size_t)w : 0;
  list_flush(err, errlen, &at, "missing tensors", &miss);
  list_flush(err, errlen, &at, "unexpected tensors", &extra);
  list_flush(err, errlen, &at, "wrong shapes", &shape);
  list_flush(err, errlen, &at, "unsupported dtypes", &dtype);
  if (dtype.count && at < errlen) snprintf(err + at, errlen - at, "; F32, F16 and BF16 load");
  return -1;
}

/* The file's output head equals the embedding the model ties it to. */
static int tied_check(const CkptSet *s, const CkptFile *f, char *err, size_t errlen) {
  const CkptEntry *e = set_find(s, hf_family_embed(f->fam));
  int64_t n = e->param->numel;
  float *head = malloc((size_t)n * sizeof *head + 1);
  if (!head) return file_set_error(err, errlen, "%s: out of memory", f->path);
  int rc = safetensors_read_f32(f->tied->st, f->tied->t, head, n, err, errlen);
  int same = rc == 0 && memcmp(head, e->data, (size_t)n * sizeof *head) == 0;
  free(head);
  if (rc == 0 && !same)
    rc = file_set_error(err, errlen,
                        "%s: %s differs from %s, but the model ties its output head to the "
                        "embedding: it cannot hold both",
                        f->path, f->tied->file_name, e->src->file_name);
  return rc;
}

static int set_read(const CkptSet *s, const CkptFile *f, char *err, size_t errlen) {
  if (set_check(s, f, err, errlen) != 0) return -1;
  for (int i = 0; i < s->n; i++) {
    const CkptEntry *e = &s->e[i];
    if (!e->skip && safetensors_read_f32(e->src->st, e->src->t, e->data, e->param->numel, err, errlen) != 0) return -1;
  }
  return f->tied ? tied_check(s, f, err, errlen) : 0;
}

/* ---- parameter files ----------------------------------------------------------- */

/* The Hugging Face family of the program's parameter names (and window), or NULL. */
static const HfFamily *program_family(const Prog *p) {
  const char **names = calloc((size_t)p->s->nparams + 1, sizeof *names);
  for (int i = 0; names && i < p->s->nparams; i++) names[i] = prog_str(p, p->params[i].name);
  HfArch a;
  const HfFamily *f = names ? hf_family_of(names, (int)p->s->nparams, arch_of(p, &a)) : NULL;
  free(names);
  return f;
}

static void note_text(char *note, size_t len, const char *path, const HfFamily *fam, const NameList *skipped,
                      const NameList *tied) {
  int w = fam && (skipped->count || tied->count) ? snprintf(note, len, "%s: %s checkpoint", path, hf_family_name(fam))
                                                 : snprintf(note, len, "%s", "");
  size_t at = w > 0 ? (size_t)w : 0;
  if (skipped->count && at < len)
    at += (size_t)snprintf(note + at, len - at,
                           "; skipped %d buffer%s that %s not "
                           "parameters: %s%s",
                           skipped->count, skipped->count == 1 ? "" : "s", skipped->count == 1 ? "is" : "are",
                           skipped->text, skipped->count > CKPT_LIST_MAX ? ", ..." : "");
  if (tied->count && at < len) snprintf(note + at, len - at, "; %s", tied->text);
}

int ckpt_load_params(const Prog *p, const char *path, char *params, char *note, size_t notelen, char *err,
                     size_t errlen) {
  static NameList skipped, tied; /* large: kept off the stack, single-threaded use */
  memset(&skipped, 0, sizeof skipped), memset(&tied, 0, sizeof tied);
  CkptSet s = {0};
  CkptFile f = {0};
  HfSource *src = hf_source_open(path, err, errlen);
  if (!src) return -1;
  const HfFamily *fam = program_family(p);
  int rc = set_params(p, params, &s, err, errlen);
  if (rc == 0) rc = file_of_source(&f, src, fam, &skipped, err, errlen);
  if (rc == 0) {
    HfArch a;
    const char *head = fam ? hf_family_head(fam) : NULL;
    rc = hf_check_config(src, fam, arch_of(p, &a), head && !set_find(&s, head), err, errlen);
  }
  if (rc == 0) {
    set_bind(&s, &f, &tied);
    rc = set_read(&s, &f, err, errlen);
  }
  if (rc == 0 && note) note_text(note, notelen, path, fam, &skipped, &tied);
  file_free(&f);
  set_free(&s);
  hf_source_close(src);
  return rc;
}

/* The model's parameter names, as keys of a set of them. */
static const char **param_keys(const Prog *p) {
  const char **k = calloc((size_t)p->s->nparams + 1, sizeof *k);
  for (int i = 0; k && i < p->s->nparams; i++) k[i] = prog_str(p, p->params[i].name);
  return k;
}

int ckpt_save_params_set(const Prog *p, const char *path, ShardSet *s, char *err, size_t errlen) {
  static const char *const keys[4] = {"format", "model", "arch", "seq"};
  char seq[32], arch[512];
  snprintf(seq, sizeof seq, "%" PRId64, p->s->seq);
  const char *const vals[4] = {"pt", prog_str(p, p->s->model), arch_text(p, arch, sizeof arch), seq};
  const char **names = param_keys(p);
  SafeTensorOut *out = calloc((size_t)p->s->nparams + 1, sizeof *out);
  int rc = names && out ? 0 : file_set_error(err, errlen, "out of memory");
  for (int i = 0; rc == 0 && i < p->s->nparams; i++)
    out[i] = (SafeTensorOut){names[i], (int)p->params[i].ndim, p->params[i].shape, NULL};
  ShardFill f = {.set = s, .keys = names, .tensor = -1};
  if (rc == 0)
    rc = safetensors_write_stream(path, out, (int)p->s->nparams, keys, vals, vals[2] ? 4 : 2, shards_fill, &f,
                                  shards_buffer_bytes(), err, errlen);
  shards_fill_free(&f);
  free(names), free(out);
  return rc;
}

/* The parameters as hf.h takes them, written with the data from fill (arg), or (fill
 * NULL) only checked; errors start "--save-hf DIR: ". */
static int ckpt_hf(const Prog *p, const char *dir, SafeTensorFill fill, void *arg, char *err, size_t errlen) {
  char why[1024];
  HfArch arch;
  HfParam *ps = calloc((size_t)p->s->nparams + 1, sizeof *ps);
  if (!ps) return file_set_error(err, errlen, "out of memory");
  for (int i = 0; i < p->s->nparams; i++)
    ps[i] = (HfParam){prog_str(p, p->params[i].name), (int)p->params[i].ndim, p->params[i].shape, NULL};
  int rc = hf_save(dir, ps, (int)p->s->nparams, arch_of(p, &arch), p->s->seq, fill, arg, why, sizeof why);
  free(ps);
  return rc ? file_set_error(err, errlen, "--save-hf %s: %s", dir, why) : 0;
}

int ckpt_save_hf_set(const Prog *p, const char *dir, ShardSet *s, char *err, size_t errlen) {
  const char **names = param_keys(p);
  if (!names) return file_set_error(err, errlen, "out of memory");
  ShardFill f = {.set = s, .keys = names, .tensor = -1};
  int rc = ckpt_hf(p, dir, shards_fill, &f, err, errlen);
  shards_fill_free(&f);
  free(names);
  return rc;
}

/* ---- checkpoints --------------------------------------------------------------- */

/* A file can be created in dir: creates and removes DIR/.write-test.PID. */
static int probe_dir(const char *dir) {
  char probe[4096];
  snprintf(probe, sizeof probe, "%s/.write-test.%ld", dir, (long)getpid());
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return -1;
  close(fd);
  unlink(probe);
  return 0;
}

/* Creates dir if missing and checks that a file can be created in it (flag: for
 * messages). */
static int prepare_dir(const char *flag, const char *dir, char *err, size_t errlen) {
  char why[1024];
  if (file_make_dirs(dir, why, sizeof why) != 0) return file_set_error(err, errlen, "%s %s: %s", flag, dir, why);
  if (probe_dir(dir) != 0)
    return file_set_error(err, errlen, "%s %s: cannot write there: %s", flag, dir, strerror(errno));
  return 0;
}

int ckpt_prepare_dir(const char *dir, char *err, size_t errlen) { return prepare_dir("--ckpt-dir", dir, err, errlen); }

int ckpt_check_save_hf(const Prog *p, const char *dir, char *err, size_t errlen) {
  return ckpt_hf(p, dir, NULL, NULL, err, errlen) || prepare_dir("--save-hf", dir, err, errlen) ? -1 : 0;
}

int ckpt_check_save_path(const char *path, char *err, size_t errlen) {
  char *copy = strdup(path);
  if (!copy) return file_set_error(err, errlen, "out of memory");
  const char *dir = dirname(copy);
  int rc = probe_dir(dir);
  if (rc != 0) file_set_error(err, errlen, "--save %s: cannot write in %s: %s", path, dir, strerror(errno));
  free(copy);
  return rc;
}

static int ckpt_write_latest(const char *dir, const char *name, char *err, size_t errlen) {
  char path[4096], line[512];
  snprintf(path, sizeof path, "%s/latest", dir);
  int n = snprintf(line, sizeof line, "%s\n", name);
  const void *chunks[1] = {line};
  size_t lens[1] = {(size_t)n};
  return file_write_atomic(path, chunks, lens, 1, err, errlen);
}

typedef struct InitLine {
  const ProgParam *g;
  const char *name;
  uint64_t seed;
} InitLine;

/* One line of a piece by its parameter's init rule, Philox at the elements' global index. */
static void init_line(void *arg, float *dst, int64_t gindex, int64_t len) {
  const InitLine *l = arg;
  const ProgParam *g = l->g;
  switch ((ProgInit)g->init) {
  case PROG_INIT_NORMAL:
    philox_fill_normal(dst, (size_t)len, (uint64_t)gindex, l->seed, l->name, (float)g->b, (float)g->a);
    break;
  case PROG_INIT_UNIFORM:
    philox_fill_uniform(dst, (size_t)len, (uint64_t)gindex, l->seed, l->name, (float)g->a, (float)g->b);
    break;
  case PROG_INIT_ZEROS: init_fill(dst, len, 0.0f); break;
  case PROG_INIT_ONES: init_fill(dst, len, 1.0f); break;
  case PROG_INIT_CONSTANT: init_fill(dst, len, (float)g->a); break;
  }
}

void ckpt_init_piece(const ProgParam *g, const char *name, const ShardPiece *w, uint64_t seed) {
  InitLine l = {g, name, seed};
  shards_lines(w, init_line, &l);
}

/* The metadata of a checkpoint of model p: keys and values into k and v (their texts in
 * buf). Returns the count. */
static int ckpt_meta_pairs(const Prog *p, const CkptMeta *m, const char **k, const char **v, char buf[][48], char *arch,
                           size_t archlen) {
  int n = 0;
#define META(key, fmt, val) (k[n] = key, snprintf(buf[n], 48, fmt, val), v[n] = buf[n], n++)
  k[n] = "version", v[n++] = "2";
  k[n] = "model", v[n++] = prog_str(p, p->s->model);
  k[n] = "optimizer", v[n++] = prog_opt_names[p->s->optimizer];
  META("step", "%" PRId64, m->step);
  META("data_step", "%" PRId64, m->data_step);
  META("seed", "%" PRIu64, m->seed);
  META("threads", "%" PRId64, m->threads);
  META("global_batch", "%" PRId64, m->global_batch);
  META("bad_steps", "%" PRId64, m->bad_steps);
  if (p->s->loss_scaling) META("loss_scale", "%.17g", m->loss_scale);
  META("skipped_steps", "%" PRId64, m->skipped); /* updates skipped: Adam counts the others */
  META("ranks", "%d", m->ranks);
  META("seq", "%" PRId64, p->s->seq);
#undef META
  if (arch_text(p, arch, archlen)) k[n] = "arch", v[n++] = arch; /* for colossalc-export */
  return n;
}

void ckpt_name(char *buf, size_t len, int64_t step) { snprintf(buf, len, "ckpt-%" PRId64, step); }

int ckpt_write_shard(const char *folder, int rank, int ranks, const ShardPiece *ps, int n, int verify, char *err,
                     size_t errlen) {
  char path[4200];
  snprintf(path, sizeof path, "%s/" CKPT_SHARD_FMT, folder, rank, ranks);
  static const char *const keys[1] = {"format"}, *const vals[1] = {CKPT_FORMAT "-shard"};
  if (shards_write(path, ps, n, keys, vals, 1, shards_buffer_bytes(), err, errlen) != 0) return -1;
  if (!verify) return 0;
  ShardSet *s = shards_open(path, err, errlen); /* read back what was written */
  int rc = s ? shards_verify(s, err, errlen) : -1;
  shards_close(s);
  return rc;
}

int ckpt_write_index(const char *folder, int ranks, const char *fmt, const char *const keys[], const char *const vals[],
                     int nmeta, char *err, size_t errlen) {
  char **shards = calloc((size_t)ranks + 1, sizeof *shards);
  int rc = shards ? 0 : file_set_error(err, errlen, "out of memory");
  for (int r = 0; r < ranks && rc == 0; r++)
    if (asprintf(&shards[r], CKPT_SHARD_FMT, r, ranks) < 0)
      shards[r] = NULL, rc = file_set_error(err, errlen, "out of memory");
  if (rc == 0) rc = shards_write_index(folder, (const char *const *)shards, ranks, fmt, keys, vals, nmeta, err, errlen);
  for (int r = 0; shards && r < ranks; r++) free(shards[r]);
  free(shards);
  return rc;
}

int ckpt_save_shard(const char *dir, int64_t step, int rank, int ranks, const ShardPiece *ps, int n, int verify,
                    char *err, size_t errlen) {
  char name[64], sub[4096];
  ckpt_name(name, sizeof name, step);
  snprintf(sub, sizeof sub, "%s/%s", dir, name);
  if (mkdir(sub, 0777) != 0 && errno != EEXIST)
    return file_set_error(err, errlen, "cannot create %s: %s", sub, strerror(errno));
  return ckpt_write_shard(sub, rank, ranks, ps, n, verify, err, errlen);
}

/* The checkpoints in dir by step, newest first: names (ckpt-N, or ckpt-N.safetensors of
 * older runs) into out; returns the count (at most max). */
static int ckpt_list(const char *dir, char out[][64], int64_t *steps, int max) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    char *end;
    if (strncmp(e->d_name, "ckpt-", 5) != 0) continue;
    errno = 0;
    long long st = strtoll(e->d_name + 5, &end, 10);
    if (end == e->d_name + 5 || errno || st < 0 || (*end && strcmp(end, ".safetensors") != 0) ||
        strlen(e->d_name) >= 64)
      continue;
    int at = n < max ? n++ : max - 1; /* insertion by step, newest first */
    if (at == max - 1 && n == max && steps[at] >= st) continue;
    while (at > 0 && steps[at - 1] < st) steps[at] = steps[at - 1], memcpy(out[at], out[at - 1], 64), at--;
    steps[at] = st;
    memcpy(out[at], e->d_name, strlen(e->d_name) + 1); /* shorter than 64: checked above */
  }
  if (d) closedir(d);
  return n;
}

/* Removes DIR/NAME: a checkpoint directory and its files, or a file. */
static void ckpt_remove(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  file_remove_dir(path);
}

void ckpt_discard(const char *dir, int64_t step) {
  char name[64];
  ckpt_name(name, sizeof name, step);
  ckpt_remove(dir, name);
}

int ckpt_commit(const Prog *p, const char *dir, const CkptMeta *m, int keep, char *err, size_t errlen) {
  char name[64], sub[4096], buf[16][48], arch[512];
  const char *k[16], *v[16];
  ckpt_name(name, sizeof name, m->step);
  snprintf(sub, sizeof sub, "%s/%s", dir, name);
  int nmeta = ckpt_meta_pairs(p, m, k, v, buf, arch, sizeof arch);
  int rc = ckpt_write_index(sub, m->ranks, CKPT_FORMAT, k, v, nmeta, err, errlen);
  if (rc == 0) rc = ckpt_write_latest(dir, name, err, errlen);
  if (rc != 0 || keep <= 0) return rc;
  char names[256][64]; /* the newest `keep` stay; older ones go, the one just written never */
  int64_t steps[256];
  int n = ckpt_list(dir, names, steps, 256);
  for (int i = keep; i < n; i++)
    if (steps[i] < m->step) ckpt_remove(dir, names[i]);
  return 0;
}

/* The file name DIR/latest holds, checked to be a plain name, into name. */
static int ckpt_read_latest(const char *dir, char *name, size_t len, char *err, size_t errlen) {
  char path[4096], why[1024];
  size_t n = 0;
  snprintf(path, sizeof path, "%s/latest", dir);
  char *text = file_read_all(path, &n, why, sizeof why);
  if (!text) return file_set_error(err, errlen, "--resume: no checkpoint to resume from (%s)", why);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ')) text[--n] = 0;
  int ok = n > 0 && n < len && !strchr(text, '/') && strlen(text) == n;
  if (ok) memcpy(name, text, n + 1);
  free(text);
  if (!ok) return file_set_error(err, errlen, "%s: does not hold a checkpoint file name", path);
  return 0;
}

int ckpt_candidates(const char *dir, char out[][64], int max, char *err, size_t errlen) {
  char latest[64] = "";
  int64_t steps[256];
  char found[256][64];
  int have_latest = ckpt_read_latest(dir, latest, sizeof latest, err, errlen) == 0;
  int n = ckpt_list(dir, found, steps, 256), k = 0;
  if (have_latest) snprintf(out[k++], 64, "%s", latest);
  for (int i = 0; i < n && k < max; i++)
    if (strcmp(found[i], latest) != 0) snprintf(out[k++], 64, "%s", found[i]);
  if (k == 0 && !have_latest) return -1; /* err says why: no latest */
  if (k == 0) return file_set_error(err, errlen, "--resume: %s holds no checkpoint", dir);
  return k;
}

static int meta_u64(const ShardSet *st, const char *path, const char *key, uint64_t *out, char *err, size_t errlen) {
  const char *v = shards_meta(st, key);
  char *end;
  errno = 0;
  unsigned long long x = v ? strtoull(v, &end, 10) : 0;
  if (!v || !v[0] || *end || errno || v[0] == '-')
    return file_set_error(err, errlen, "%s: metadata \"%s\" missing or not a count", path, key);
  *out = x;
  return 0;
}

int ckpt_check_meta(const Prog *p, const ShardSet *st, const char *path, CkptMeta *m, char *err, size_t errlen) {
  const char *fmt = shards_meta(st, "format");
  const char *model = shards_meta(st, "model");
  uint64_t step = 0, data_step = 0, threads = 0;
  if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0)
    return file_set_error(err, errlen, "%s: not a colossalc checkpoint (metadata format)", path);
  if (!model || strcmp(model, prog_str(p, p->s->model)) != 0)
    return file_set_error(err, errlen, "%s: a checkpoint of model '%s', not '%s'", path, model ? model : "?",
                          prog_str(p, p->s->model));
  if (meta_u64(st, path, "step", &step, err, errlen) || meta_u64(st, path, "data_step", &data_step, err, errlen) ||
      meta_u64(st, path, "seed", &m->seed, err, errlen) || meta_u64(st, path, "threads", &threads, err, errlen))
    return -1;
  if (step > INT64_MAX / 2 || data_step > INT64_MAX / 2)
    return file_set_error(err, errlen, "%s: step out of range", path);
  m->step = (int64_t)step, m->data_step = (int64_t)data_step, m->threads = (int64_t)threads;
  m->global_batch = 0, m->bad_steps = 0;
  if (shards_meta(st, "global_batch")) {
    uint64_t gb = 0;
    if (meta_u64(st, path, "global_batch", &gb, err, errlen) != 0) return -1;
    m->global_batch = gb < INT64_MAX / 2 ? (int64_t)gb : 0;
  }
  if (shards_meta(st, "bad_steps")) {
    uint64_t b = 0;
    if (meta_u64(st, path, "bad_steps", &b, err, errlen) != 0) return -1;
    m->bad_steps = b < INT64_MAX / 2 ? (int64_t)b : 0;
  }
  m->loss_scale = 0, m->skipped = 0;
  const char *ls = shards_meta(st, "loss_scale");
  uint64_t sk = 0;
  char *end = NULL;
  if (ls) m->loss_scale = strtod(ls, &end);
  if ((ls && (*end || !(m->loss_scale > 0))) || ((ls || shards_meta(st, "skipped_steps")) &&
                                                 (meta_u64(st, path, "skipped_steps", &sk, err, errlen) || sk > step)))
    return file_set_error(err, errlen,
                          "%s: metadata \"loss_scale\" or \"skipped_steps\" is "
                          "not a positive scale and a count of steps",
                          path);
  m->skipped = (int64_t)sk;
  return 0;
}

ShardSet *ckpt_open(const Prog *p, const char *dir, const char *name, CkptMeta *m, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  ShardSet *s = shards_open(path, err, errlen);
  if (s && ckpt_check_meta(p, s, path, m, err, errlen) != 0) {
    shards_close(s);
    return NULL;
  }
  return s;
}

int ckpt_read_fp8(ShardSet *s, CkptMeta *m, char *err, size_t errlen) {
  int ndim = 0;
  const int64_t *shape = NULL;
  int i = shards_find(s, CKPT_FP8);
  m->fp8_restored = 0;
  if (i < 0 || !m->fp8) return 0;
  shards_key(s, i, &ndim, &shape);
  if (ndim != 2 || shape[0] != m->fp8_rows || shape[1] != m->fp8_width) return 0; /* another history */
  ShardPiece w = {.key = CKPT_FP8, .ndim = 2, .gshape = shape, .count = {shape[0], shape[1]}, .data = m->fp8};
  if (shards_read(s, &w, err, errlen) != 0) return -1;
  m->fp8_restored = 1;
  return 0;
}
