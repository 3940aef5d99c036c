/* colossalc-export: a transformers model (model.safetensors and config.json, what
 * `train --save-hf` writes) from parameters `train` saved before: a `--save` file, or
 * a `--ckpt-dir` checkpoint (its param/ tensors). The architecture comes from the
 * file's metadata ("arch" and "seq", which `train` writes from its program), the
 * sizes from the tensors' shapes (runtime/io/hf.h).
 *
 *     colossalc-export final.safetensors gpt2-hf/
 */
#include "runtime/io/fileio.h"
#include "runtime/io/hf.h"
#include "runtime/io/safetensors.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT_PARAM_PREFIX "param/" /* a checkpoint's parameters */

static int export_usage(FILE *f, int rc) {
  fprintf(f, "usage: colossalc-export CHECKPOINT OUTDIR\n"
             "  CHECKPOINT: parameters `train --save` wrote, or a `train --ckpt-dir` checkpoint\n"
             "  writes OUTDIR/model.safetensors and OUTDIR/config.json for transformers\n");
  return rc;
}

/* The parameters of st: every tensor, or a checkpoint's param/ ones, prefix cut. */
static int export_collect(const SafeTensors *st, HfParam *ps, char *err, size_t errlen) {
  const char *fmt = safetensors_metadata(st, "format");
  int ckpt = fmt && strcmp(fmt, "colossalc-checkpoint") == 0, n = 0;
  size_t np = strlen(EXPORT_PARAM_PREFIX);
  for (int i = 0; i < safetensors_count(st); i++) {
    const SafeTensor *t = safetensors_get(st, i);
    if (ckpt && strncmp(t->name, EXPORT_PARAM_PREFIX, np) != 0) continue;
    float *data = malloc((size_t)t->numel * sizeof *data + 1);
    ps[n] = (HfParam){t->name + (ckpt ? np : 0), t->ndim, t->shape, data};
    if (!data) return file_set_error(err, errlen, "out of memory for %s", t->name);
    n++;
    if (safetensors_read_f32(st, t, data, t->numel, err, errlen) != 0) return -1;
  }
  return n;
}

static int export_seq(const SafeTensors *st, const char *path, int64_t *seq, char *err, size_t errlen) {
  const char *s = safetensors_metadata(st, "seq");
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
  double heads = 0, causal = 0;
  const cJSON *sc = cJSON_GetObjectItemCaseSensitive(o, "attention_scale");
  if (arch_num(o, "heads", &heads, text, err, errlen) || arch_num(o, "causal", &causal, text, err, errlen) ||
      arch_num(o, "norm_eps", &a->norm_eps, text, err, errlen) ||
      arch_num(o, "rope_theta", &a->rope_theta, text, err, errlen) ||
      arch_str(o, "norm", a->norm, sizeof a->norm, text, err, errlen) ||
      arch_str(o, "activation", a->activation, sizeof a->activation, text, err, errlen))
    return -1;
  if (sc && !cJSON_IsBool(sc))
    return file_set_error(err, errlen, "arch %s: \"attention_scale\" is not a boolean", text);
  if (heads < -1 || heads > (1 << 20) || heads != (int64_t)heads)
    return file_set_error(err, errlen, "arch %s: \"heads\" is not a count", text);
  a->heads = (int64_t)heads, a->causal = causal == 1, a->scaled = cJSON_IsTrue(sc);
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
  SafeTensors *st = safetensors_open(in, err, errlen);
  if (!st) return -1;
  const char *arch = safetensors_metadata(st, "arch");
  int64_t seq = 0;
  HfParam *ps = calloc((size_t)safetensors_count(st) + 1, sizeof *ps);
  int n = !ps     ? file_set_error(err, errlen, "out of memory")
          : !arch ? file_set_error(err, errlen,
                                   "%s: no \"arch\" in its metadata: written by a `train` "
                                   "older than --save-hf (run it with --init-from this file "
                                   "and --steps 0 --save-hf instead)",
                                   in)
                  : export_collect(st, ps, err, errlen);
  HfArch a;
  int rc = n < 0 ? -1 : export_seq(st, in, &seq, err, errlen);
  if (rc == 0) rc = arch_parse(arch, &a, err, errlen);
  if (rc == 0) rc = hf_save(out, ps, n, &a, seq, err, errlen);
  for (int i = 0; ps && ps[i].name; i++) free((float *)ps[i].data);
  free(ps);
  safetensors_close(st);
  return rc;
}

int main(int argc, char **argv) {
  char err[1024];
  if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) return export_usage(stdout, 0);
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
