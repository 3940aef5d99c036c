/* colossalc-export: a transformers model (model.safetensors and config.json, what
 * `train --save-hf` writes) from parameters `train` saved before: a `--save` file, or
 * a `--ckpt-dir` checkpoint (its param/ tensors: the checkpoint's folder, its
 * index.json, or a one-file checkpoint). The architecture comes from the metadata
 * ("arch" and "seq", which `train` writes from its program), the sizes from the
 * tensors' shapes (runtime/io/hf.h). Tensors stream through, a slab of rows at a time
 * (runtime/io/shards.h): the model never sits in memory whole.
 *
 *     colossalc-export final.safetensors gpt2-hf/
 *     colossalc-export ckpt/ckpt-1000 gpt2-hf/
 *     colossalc-export --merge ckpt/ckpt-1000 ckpt-1000.safetensors
 *
 * --merge writes a sharded checkpoint as one safetensors file of whole tensors (sorted
 * by name, the checkpoint's metadata), which `train --resume` reads as well.
 */
#include "runtime/io/fileio.h"
#include "runtime/io/hf.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/shards.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT_PARAM_PREFIX "param/" /* a checkpoint's parameters */

static int export_usage(FILE *f, int rc) {
  fprintf(f, "usage: colossalc-export CHECKPOINT OUTDIR\n"
             "       colossalc-export --merge CHECKPOINT OUT.safetensors\n"
             "  CHECKPOINT: parameters `train --save` wrote, or a `train --ckpt-dir` checkpoint\n"
             "  (DIR/ckpt-STEP, its index.json, or a one-file checkpoint)\n"
             "  writes OUTDIR/model.safetensors and OUTDIR/config.json for transformers;\n"
             "  --merge: the checkpoint as one safetensors file of whole tensors\n");
  return rc;
}

/* The parameters of s: every tensor, or a checkpoint's param/ ones, prefix cut (names
 * point into s; shapes too). Returns the count. */
static int export_collect(const ShardSet *s, HfParam *ps, const char **keys) {
  const char *fmt = shards_meta(s, "format");
  int ckpt = fmt && strcmp(fmt, "colossalc-checkpoint") == 0, n = 0;
  size_t np = strlen(EXPORT_PARAM_PREFIX);
  for (int i = 0; i < shards_count(s); i++) {
    int nd;
    const int64_t *shape;
    const char *key = shards_key(s, i, &nd, &shape);
    if (ckpt && strncmp(key, EXPORT_PARAM_PREFIX, np) != 0) continue;
    keys[n] = key;
    ps[n++] = (HfParam){key + (ckpt ? np : 0), nd, shape, NULL};
  }
  return n;
}

static int export_seq(const ShardSet *st, const char *path, int64_t *seq, char *err, size_t errlen) {
  const char *s = shards_meta(st, "seq");
  char *end;
  long long v = s ? strtoll(s, &end, 10) : 0;
  if (!s || !s[0] || *end || v < 1)
    return file_set_error(err, errlen, "%s: metadata \"seq\" missing or not a count", path);
  *seq = v;
  return 0;
}

/* ---- the file's "arch" metadata (what train's checkpoints carry, runtime/io/ckpt.c) */

static int arch_num(const cJSON *o, const char *key, double *out, const char *text, char *err, size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (v && !cJSON_IsNumber(v)) return file_set_error(err, errlen, "arch %s: \"%s\" is not a number", text, key);
  *out = v ? v->valuedouble : 0;
  return 0;
}

static int arch_str(const cJSON *o, const char *key, char *out, size_t len, const char *text, char *err,
                    size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (v && (!cJSON_IsString(v) || strlen(v->valuestring) >= len))
    return file_set_error(err, errlen, "arch %s: \"%s\" is not a short string", text, key);
  snprintf(out, len, "%s", v ? v->valuestring : "");
  return 0;
}

static int arch_fields(const cJSON *o, HfArch *a, const char *text, char *err, size_t errlen) {
  double heads = 0, causal = 0, kv = 0, window = 0;
  const cJSON *sc = cJSON_GetObjectItemCaseSensitive(o, "attention_scale");
  if (arch_num(o, "heads", &heads, text, err, errlen) || arch_num(o, "causal", &causal, text, err, errlen) ||
      arch_num(o, "norm_eps", &a->norm_eps, text, err, errlen) ||
      arch_num(o, "rope_theta", &a->rope_theta, text, err, errlen) || arch_num(o, "kv_heads", &kv, text, err, errlen) ||
      arch_num(o, "window", &window, text, err, errlen) ||
      arch_str(o, "norm", a->norm, sizeof a->norm, text, err, errlen) ||
      arch_str(o, "activation", a->activation, sizeof a->activation, text, err, errlen))
    return -1;
  if (sc && !cJSON_IsBool(sc))
    return file_set_error(err, errlen, "arch %s: \"attention_scale\" is not a boolean", text);
  if (heads < -1 || heads > (1 << 20) || heads != (int64_t)heads)
    return file_set_error(err, errlen, "arch %s: \"heads\" is not a count", text);
  if (kv < -1 || kv > (1 << 20) || kv != (int64_t)kv || window < -1 || window != (int64_t)window)
    return file_set_error(err, errlen, "arch %s: \"kv_heads\" or \"window\" is not a count", text);
  a->heads = (int64_t)heads, a->causal = causal == 1, a->scaled = cJSON_IsTrue(sc);
  a->kv_heads = kv ? (int64_t)kv : a->heads, a->window = (int64_t)window; /* left out: no grouping, no window */
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(o, "rope_scaling");  /* left out: none */
  if (rs && (!cJSON_IsArray(rs) || cJSON_GetArraySize(rs) != 4))
    return file_set_error(err, errlen, "arch %s: \"rope_scaling\" is not 4 numbers", text);
  for (int k = 0; k < 4; k++) {
    const cJSON *v = rs ? cJSON_GetArrayItem(rs, k) : NULL;
    if (rs && !cJSON_IsNumber(v))
      return file_set_error(err, errlen, "arch %s: \"rope_scaling\" is not 4 numbers", text);
    a->rope_scaling[k] = v ? v->valuedouble : k == 0;
  }
  return 0;
}

static int arch_parse(const char *text, HfArch *a, char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  cJSON *o = cJSON_Parse(text);
  int rc = cJSON_IsObject(o) ? arch_fields(o, a, text, err, errlen)
                             : file_set_error(err, errlen, "arch %s: not a JSON object", text);
  cJSON_Delete(o);
  return rc;
}

static int export_run(const char *in, const char *out, char *err, size_t errlen) {
  ShardSet *st = shards_open(in, err, errlen);
  if (!st) return -1;
  const char *arch = shards_meta(st, "arch");
  int64_t seq = 0;
  HfParam *ps = calloc((size_t)shards_count(st) + 1, sizeof *ps);
  const char **keys = calloc((size_t)shards_count(st) + 1, sizeof *keys);
  int n = !ps || !keys ? file_set_error(err, errlen, "out of memory")
          : !arch      ? file_set_error(err, errlen,
                                        "%s: no \"arch\" in its metadata: written by a `train` "
                                             "older than --save-hf (run it with --init-from this file "
                                             "and --steps 0 --save-hf instead)",
                                        in)
                       : export_collect(st, ps, keys);
  HfArch a;
  int rc = n < 0 ? -1 : export_seq(st, in, &seq, err, errlen);
  if (rc == 0) rc = arch_parse(arch, &a, err, errlen);
  ShardFill f = {.set = st, .keys = keys, .tensor = -1};
  if (rc == 0) rc = hf_save(out, ps, n, &a, seq, shards_fill, &f, err, errlen);
  shards_fill_free(&f);
  free(ps), free(keys);
  shards_close(st);
  return rc;
}

static int key_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The whole set as one file: every tensor whole, sorted by name, the set's metadata. */
static int merge_run(const char *in, const char *out, char *err, size_t errlen) {
  ShardSet *st = shards_open(in, err, errlen);
  if (!st) return -1;
  int n = shards_count(st), nm = 0;
  const char **keys = calloc((size_t)n + 1, sizeof *keys);
  SafeTensorOut *t = calloc((size_t)n + 1, sizeof *t);
  const char *mk[32], *mv[32];
  static const char *const meta[] = {"format",     "version",       "model",   "optimizer",    "step",
                                     "data_step",  "seed",          "threads", "global_batch", "bad_steps",
                                     "loss_scale", "skipped_steps", "seq",     "arch"};
  int rc = keys && t ? 0 : file_set_error(err, errlen, "out of memory");
  for (int i = 0; rc == 0 && i < n; i++) keys[i] = shards_key(st, i, NULL, NULL);
  if (rc == 0) qsort(keys, (size_t)n, sizeof *keys, key_cmp);
  for (int i = 0; rc == 0 && i < n; i++) {
    int nd;
    const int64_t *shape;
    shards_key(st, shards_find(st, keys[i]), &nd, &shape);
    t[i] = (SafeTensorOut){keys[i], nd, shape, NULL};
  }
  for (size_t i = 0; i < sizeof meta / sizeof *meta; i++)
    if (shards_meta(st, meta[i])) mk[nm] = meta[i], mv[nm++] = shards_meta(st, meta[i]);
  ShardFill f = {.set = st, .keys = keys, .tensor = -1};
  if (rc == 0)
    rc = safetensors_write_stream(out, t, n, mk, mv, nm, shards_fill, &f, shards_buffer_bytes(), err, errlen);
  shards_fill_free(&f);
  free(keys), free(t);
  shards_close(st);
  return rc;
}

int main(int argc, char **argv) {
  char err[1024];
  if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) return export_usage(stdout, 0);
  if (argc == 4 && strcmp(argv[1], "--merge") == 0) {
    if (merge_run(argv[2], argv[3], err, sizeof err) != 0) {
      fprintf(stderr, "colossalc-export: %s\n", err);
      return 1;
    }
    printf("colossalc-export: wrote %s\n", argv[3]);
    return 0;
  }
  if (argc != 3) return export_usage(stderr, 2);
  if (export_run(argv[1], argv[2], err, sizeof err) != 0) {
    fprintf(stderr, "colossalc-export: %s\n", err);
    return 1;
  }
  size_t n = strlen(argv[2]);
  while (n > 1 && argv[2][n - 1] == '/') n--; /* DIR/ names the same folder */
  printf("colossalc-export: wrote %.*s/model.safetensors and %.*s/config.json\n", (int)n, argv[2], (int)n, argv[2]);
  return 0;
}
