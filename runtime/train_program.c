/* train_program: program JSON (runtime/program.h) → RtProgram, with every field
 * type-checked and every memory access bounds-checked once, here.
 *
 * Field accessors take the JSON path of the enclosing object ("params[2]") and
 * the key, so a failure reads "program: params[2].shape[1]: expected an integer
 * >= 1". Integers must be exact (no fraction) and at most 2^53 in magnitude.
 */
#include "train_program.h"

#include "runtime/fileio.h"
#include "runtime/hf.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PJ_MAX_INT 9007199254740992.0 /* 2^53 */

typedef struct Pj {
  char *err;
  size_t errlen;
  const char *prefix; /* "[s]" for stage s of an array, else "" */
  int io_ok;          /* the list being parsed may hold "input" and "loss" */
  int off_ok;         /* ... "move", "drop" and "wait" (an offload program's step,
                         gradnorm and update) */
  int host_ok;        /* ... kernels "on": "host" (its gradnorm and update) */
  int zero_ok;        /* ... the ZeRO instructions (`step` of a zero_scheduled program) */
  int last_ok;        /* ... "last_microbatch" (`step` of an unscheduled program) */
} Pj;

const char *const rt_loc_names[RT_LOCS] = {"device", "host", "nvme", "zero", "none"};
const char *const rt_part_names[RT_PARTS] = {"params", "grads", "opt"};

/* ---- field accessors ----------------------------------------------------------- */

static int pj_fail(Pj *pj, const char *path, const char *key, const char *what) {
  return file_set_error(pj->err, pj->errlen, "program: %s%s%s%s%s: %s", pj->prefix,
                        pj->prefix[0] && (path[0] || key[0]) ? "." : "", path, path[0] && key[0] ? "." : "", key, what);
}

static const cJSON *pj_get(const cJSON *obj, const char *key) {
  return key[0] ? cJSON_GetObjectItemCaseSensitive(obj, key) : obj;
}

/* An integer in [lo, hi]; key "" means obj itself. */
static int pj_int(Pj *pj, const cJSON *obj, const char *path, const char *key, int64_t lo, int64_t hi, int64_t *out) {
  const cJSON *it = pj_get(obj, key);
  char what[96];
  snprintf(what, sizeof what, "%s (an integer in [%lld, %lld])", it ? "out of range" : "missing", (long long)lo,
           (long long)hi);
  if (it && !cJSON_IsNumber(it)) return pj_fail(pj, path, key, "expected an integer");
  double v = it ? it->valuedouble : 0;
  if (!it || v != floor(v) || fabs(v) > PJ_MAX_INT || v < (double)lo || v > (double)hi)
    return pj_fail(pj, path, key, what);
  *out = (int64_t)v;
  return 0;
}

static int pj_num(Pj *pj, const cJSON *obj, const char *path, const char *key, double *out) {
  const cJSON *it = pj_get(obj, key);
  if (!it) return pj_fail(pj, path, key, "missing (a number)");
  if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) return pj_fail(pj, path, key, "expected a finite number");
  *out = it->valuedouble;
  return 0;
}

static int pj_str(Pj *pj, const cJSON *obj, const char *path, const char *key, const char **out) {
  const cJSON *it = pj_get(obj, key);
  if (!it) return pj_fail(pj, path, key, "missing (a string)");
  if (!cJSON_IsString(it) || !it->valuestring) return pj_fail(pj, path, key, "expected a string");
  *out = it->valuestring;
  return 0;
}

static int pj_bool(Pj *pj, const cJSON *obj, const char *path, const char *key, int *out) {
  const cJSON *it = pj_get(obj, key);
  if (!it) return pj_fail(pj, path, key, "missing (true or false)");
  if (!cJSON_IsBool(it)) return pj_fail(pj, path, key, "expected true or false");
  *out = cJSON_IsTrue(it);
  return 0;
}

/* One of names[0..n) (NULL-terminated list); *out is its index. */
static int pj_enum(Pj *pj, const cJSON *obj, const char *path, const char *key, const char *const *names, int *out) {
  const char *s;
  if (pj_str(pj, obj, path, key, &s) != 0) return -1;
  for (int i = 0; names[i]; i++)
    if (strcmp(s, names[i]) == 0) return *out = i, 0;
  char what[160];
  snprintf(what, sizeof what, "unknown value \"%.60s\"", s);
  return pj_fail(pj, path, key, what);
}

static const cJSON *pj_array(Pj *pj, const cJSON *obj, const char *path, const char *key, int minlen, int maxlen) {
  const cJSON *it = pj_get(obj, key);
  int n = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : -1;
  char what[96];
  snprintf(what, sizeof what, "%s (an array of %d to %d elements)",
           !it     ? "missing"
           : n < 0 ? "not an array"
                   : "wrong length",
           minlen, maxlen);
  if (n < minlen || n > maxlen) {
    pj_fail(pj, path, key, what);
    return NULL;
  }
  return it;
}

/* An array of n integers, each in [lo, hi]. */
static int pj_ints(Pj *pj, const cJSON *obj, const char *path, const char *key, int n, int64_t lo, int64_t hi,
                   int64_t *out) {
  const cJSON *arr = pj_array(pj, obj, path, key, n, n);
  if (!arr) return -1;
  char sub[160];
  for (int i = 0; i < n; i++) {
    snprintf(sub, sizeof sub, "%s%s%s[%d]", path, path[0] ? "." : "", key, i);
    if (pj_int(pj, cJSON_GetArrayItem(arr, i), sub, "", lo, hi, &out[i]) != 0) return -1;
  }
  return 0;
}

static void pj_path(char *buf, size_t len, const char *list, int i) { snprintf(buf, len, "%s[%d]", list, i); }

/* ---- bounds -------------------------------------------------------------------- */

/* [off, off+bytes) inside a tier of size bytes. */
static int pj_range(Pj *pj, const RtProgram *p, int tier, int64_t off, int64_t bytes, const char *path,
                    const char *key) {
  static const char *const tier_names[RT_TIERS] = {"params", "grads", "opt", "work"};
  int64_t size = p->tiers[tier];
  if (off >= 0 && bytes >= 0 && off <= size && bytes <= size - off) return 0;
  char what[200];
  snprintf(what, sizeof what, "bytes [%lld, %lld+%lld) outside the %s tier (%lld bytes)", (long long)off,
           (long long)off, (long long)bytes, tier_names[tier], (long long)size);
  return pj_fail(pj, path, key, what);
}

/* Bytes spanned by one GEMM operand of rows x cols (leading dimension ld) over the
 * batch; -1 on overflow. */
static int64_t gemm_span(int64_t rows, int64_t cols, int64_t ld, const int64_t batch[2], const int64_t s[2],
                         int64_t esize) {
  int64_t a, b, c, elems;
  if (__builtin_mul_overflow(rows - 1, ld, &a) || __builtin_mul_overflow(batch[0] - 1, s[0], &b) ||
      __builtin_mul_overflow(batch[1] - 1, s[1], &c) || __builtin_add_overflow(a, cols, &elems) ||
      __builtin_add_overflow(elems, b, &elems) || __builtin_add_overflow(elems, c, &elems) ||
      __builtin_mul_overflow(elems, esize, &elems))
    return -1;
  return elems;
}

/* ---- instructions -------------------------------------------------------------- */

static int parse_kernel(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  int64_t id;
  in->op = ISA_KERNEL;
  if (pj_int(pj, o, path, "kernel", 0, p->nkernels - 1, &id) != 0 ||
      pj_int(pj, o, path, "extent", 0, INT64_MAX, &in->extent) != 0)
    return -1;
  in->kernel = (int)id;
  in->on_host = 0;
  in->epilogue = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "epilogue"));
  const cJSON *args = pj_array(pj, o, path, "args", 0, RT_MAX_ARGS);
  if (!args) return -1;
  in->nargs = cJSON_GetArraySize(args);
  char sub[160];
  for (int i = 0; i < in->nargs; i++) {
    int64_t a[4] = {0};
    const cJSON *arg = cJSON_GetArrayItem(args, i);
    int n = cJSON_IsArray(arg) && cJSON_GetArraySize(arg) == 4 ? 4 : 3;
    snprintf(sub, sizeof sub, "%s.args[%d]", path, i);
    if (pj_ints(pj, arg, sub, "", n, 0, INT64_MAX, a) != 0 ||
        (a[0] >= RT_TIERS && pj_fail(pj, sub, "", "tier out of range")) ||
        (n == 4 && (a[0] != RT_TIER_WORK || a[3] != 1) &&
         pj_fail(pj, sub, "", "a fourth element (1: slot 0's bytes) only on the work tier")) ||
        pj_range(pj, p, (int)a[0], a[1], a[2], sub, ""))
      return -1;
    in->args[i] = (RtArg){(int)a[0], a[1], a[2], (int)a[3]};
  }
  if (!cJSON_GetObjectItemCaseSensitive(o, "on")) return 0;
  static const char *const ons[] = {"device", "host", NULL};
  int on;
  if (pj_enum(pj, o, path, "on", ons, &on) != 0) return -1;
  if (on == 1 && !pj->host_ok)
    return pj_fail(pj, path, "on",
                   "\"host\" only on kernels of `gradnorm` and `update` of "
                   "an offload program");
  in->on_host = on;
  return 0;
}

static int parse_zero(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  int64_t tier;
  in->op = ISA_ZERO;
  if (pj_int(pj, o, path, "tier", 0, RT_TIERS - 1, &tier) != 0 ||
      pj_int(pj, o, path, "offset", 0, INT64_MAX, &in->offset) != 0 ||
      pj_int(pj, o, path, "bytes", 0, INT64_MAX, &in->bytes) != 0)
    return -1;
  in->tier = (int)tier;
  return pj_range(pj, p, in->tier, in->offset, in->bytes, path, "offset");
}

/* One operand ("a", "b" or "c"): [tier, offset] and its strides, bounds-checked. */
static int parse_operand(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtGemm *g, int which,
                         int64_t rows, int64_t cols, int64_t ld) {
  static const char *const keys[3] = {"a", "b", "c"}, *const skeys[3] = {"sa", "sb", "sc"};
  int64_t loc[2];
  if (pj_ints(pj, o, path, keys[which], 2, 0, INT64_MAX, loc) != 0 ||
      pj_ints(pj, o, path, skeys[which], 2, 0, INT64_MAX, g->stride[which]) != 0)
    return -1;
  int64_t esize = isa_dtype_bytes(g->dt[which]);
  if (loc[0] >= RT_TIERS || loc[1] % esize != 0) return pj_fail(pj, path, keys[which], "bad tier or unaligned offset");
  if (ld < cols) return pj_fail(pj, path, keys[which], "leading dimension smaller than the row");
  g->tier[which] = (int)loc[0];
  g->offset[which] = loc[1];
  int64_t span = gemm_span(rows, cols, ld, g->batch, g->stride[which], esize);
  if (span < 0) return pj_fail(pj, path, keys[which], "size overflows");
  return pj_range(pj, p, g->tier[which], loc[1], span, path, keys[which]);
}

static int parse_at(Pj *pj, const cJSON *o, const char *path, const char *key, int *tier, int64_t *offset);

static int parse_gemm_dims(Pj *pj, const cJSON *o, const char *path, RtGemm *g) {
  int64_t ta, tb, big = 2147483647;
  double alpha, beta;
  if (pj_int(pj, o, path, "ta", 0, 1, &ta) || pj_int(pj, o, path, "tb", 0, 1, &tb) ||
      pj_int(pj, o, path, "m", 1, big, &g->m) || pj_int(pj, o, path, "n", 1, big, &g->n) ||
      pj_int(pj, o, path, "k", 1, big, &g->k) || pj_int(pj, o, path, "lda", 1, big, &g->lda) ||
      pj_int(pj, o, path, "ldb", 1, big, &g->ldb) || pj_int(pj, o, path, "ldc", 1, big, &g->ldc) ||
      pj_num(pj, o, path, "alpha", &alpha) || pj_num(pj, o, path, "beta", &beta) ||
      pj_ints(pj, o, path, "batch", 2, 1, big, g->batch))
    return -1;
  g->ta = (int)ta, g->tb = (int)tb;
  g->alpha = (float)alpha, g->beta = (float)beta;
  return 0;
}

/* "dtypes": [a, b, c] of "f32", "bf16", "f16", "e4m3", "e5m2" (f32 if absent): a and b
 * alike, or both 8-bit (fp8's backward GEMMs take e5m2 times e4m3); c not 8-bit. */
static int parse_gemm_dtypes(Pj *pj, const cJSON *o, const char *path, RtGemm *g) {
  static const char *const names[] = {"f32", "bf16", "f16", "e4m3", "e5m2"};
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dtypes");
  g->dt[0] = g->dt[1] = g->dt[2] = ISA_F32;
  if (!d) return 0;
  if (!cJSON_IsArray(d) || cJSON_GetArraySize(d) != 3)
    return pj_fail(pj, path, "dtypes", "not an array of 3 element types");
  for (int i = 0; i < 3; i++) {
    const char *v = cJSON_GetStringValue(cJSON_GetArrayItem(d, i));
    int k = 0;
    while (k < 5 && (!v || strcmp(v, names[k]))) k++;
    if (k == 5) return pj_fail(pj, path, "dtypes", "an element type other than f32, bf16, f16, e4m3 or e5m2");
    g->dt[i] = (IsaDtype)k;
  }
  if (g->dt[0] != g->dt[1] && (isa_dtype_bytes(g->dt[0]) != 1 || isa_dtype_bytes(g->dt[1]) != 1))
    return pj_fail(pj, path, "dtypes", "a and b of different types");
  return isa_dtype_bytes(g->dt[2]) == 1 ? pj_fail(pj, path, "dtypes", "an 8-bit result") : 0;
}

static int parse_gemm(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  RtGemm *g = &in->gemm;
  in->op = ISA_GEMM;
  if (parse_gemm_dims(pj, o, path, g) != 0 || parse_gemm_dtypes(pj, o, path, g) != 0) return -1;
  /* Stored shapes, row-major: A is m x k (k x m when ta), B is k x n (n x k when tb). */
  if (parse_operand(pj, o, path, p, g, 0, g->ta ? g->k : g->m, g->ta ? g->m : g->k, g->lda) ||
      parse_operand(pj, o, path, p, g, 1, g->tb ? g->n : g->k, g->tb ? g->k : g->n, g->ldb) ||
      parse_operand(pj, o, path, p, g, 2, g->m, g->n, g->ldc))
    return -1;
  g->bias = cJSON_GetObjectItemCaseSensitive(o, "bias") != NULL;
  if (!g->bias)
    return cJSON_GetObjectItemCaseSensitive(o, "gelu") || cJSON_GetObjectItemCaseSensitive(o, "aux")
               ? pj_fail(pj, path, "gelu", "a GELU epilogue comes with a bias")
               : 0;
  if (g->beta != 0) return pj_fail(pj, path, "bias", "a bias epilogue needs beta 0");
  if (parse_at(pj, o, path, "bias", &g->bias_tier, &g->bias_offset) ||
      pj_range(pj, p, g->bias_tier, g->bias_offset, g->n * 4, path, "bias"))
    return -1;
  g->gelu = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "gelu"));
  g->aux = cJSON_GetObjectItemCaseSensitive(o, "aux") != NULL;
  if (g->gelu && (g->batch[0] * g->batch[1] != 1 || g->ldc % 8))
    return pj_fail(pj, path, "gelu", "a GELU epilogue needs one batch and ldc a multiple of 8");
  if (g->aux && !g->gelu) return pj_fail(pj, path, "aux", "an aux output comes with the GELU epilogue only");
  if (!g->aux) return 0;
  if (parse_at(pj, o, path, "aux", &g->aux_tier, &g->aux_offset) ||
      pj_range(pj, p, g->aux_tier, g->aux_offset, ((g->m - 1) * g->ldc + g->n) * 4, path, "aux"))
    return -1;
  return g->aux_offset % 16 ? pj_fail(pj, path, "aux", "not 16-byte aligned") : 0;
}

/* A [tier, offset] pair: tier in range, offset a multiple of 4. */
static int parse_at(Pj *pj, const cJSON *o, const char *path, const char *key, int *tier, int64_t *offset) {
  int64_t loc[2];
  if (pj_ints(pj, o, path, key, 2, 0, INT64_MAX / 2, loc) != 0) return -1;
  if (loc[0] >= RT_TIERS || loc[1] % 4 != 0) return pj_fail(pj, path, key, "bad tier or unaligned offset");
  *tier = (int)loc[0], *offset = loc[1];
  return 0;
}

static int parse_slot(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  in->op = ISA_SLOT;
  return pj_int(pj, o, path, "index", 0, p->slots - 1, &in->index);
}

static int parse_input_instr(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  int64_t input;
  in->op = ISA_INPUT;
  if (!pj->io_ok) return pj_fail(pj, path, "op", "\"input\" only in `step` of a scheduled program");
  if (pj_int(pj, o, path, "input", 0, p->ninputs - 1, &input) ||
      pj_int(pj, o, path, "microbatch", 0, p->microbatches - 1, &in->index) ||
      pj_int(pj, o, path, "offset", 0, INT64_MAX / 2, &in->offset))
    return -1;
  in->input = (int)input;
  if (in->offset % 4 != 0) return pj_fail(pj, path, "offset", "not a multiple of 4");
  return pj_range(pj, p, RT_TIER_WORK, in->offset, p->batch * p->inputs[input].row_elems * 4, path, "offset");
}

static int parse_loss(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  in->op = ISA_LOSS;
  if (!pj->io_ok) return pj_fail(pj, path, "op", "\"loss\" only in `step` of a scheduled program");
  if (pj_int(pj, o, path, "offset", 0, INT64_MAX / 2, &in->offset) != 0) return -1;
  if (in->offset % 4 != 0) return pj_fail(pj, path, "offset", "not a multiple of 4");
  return pj_range(pj, p, RT_TIER_WORK, in->offset, 4, path, "offset");
}

/* send and recv: peer stage, tag, [tier, offset] and count floats in bounds. */
static int parse_p2p(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  int64_t peer, tag;
  if (pj_int(pj, o, path, "peer", 0, p->mesh.pp - 1, &peer) || pj_int(pj, o, path, "tag", 0, RT_TAG_LIMIT - 1, &tag) ||
      parse_at(pj, o, path, "at", &in->tier, &in->offset) || pj_int(pj, o, path, "count", 0, INT64_MAX / 8, &in->count))
    return -1;
  in->peer = (int)peer, in->tag = (int)tag;
  in->bytes = in->count * 4;
  return pj_range(pj, p, in->tier, in->offset, in->bytes, path, "at");
}

static int parse_send(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  in->op = ISA_SEND;
  return parse_p2p(pj, o, path, p, in);
}

static int parse_recv(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  in->op = ISA_RECV;
  return parse_p2p(pj, o, path, p, in);
}

/* Bytes of src and dst of a comm of kind over A x N x I (N divisible by T). */
static void comm_bytes(const RtComm *c, int64_t tp, int64_t bytes[2]) {
  int64_t whole = c->outer * c->n * c->inner * 4, part = whole / tp;
  bytes[0] = c->kind == ISA_COMM_ALL_GATHER ? part : whole;
  bytes[1] = isa_comm_splits(c->kind) && c->kind != ISA_COMM_ALL_GATHER ? part : whole;
}

/* "group", "stage_group", "root": split kinds over tp only, a root within the group. */
static int parse_comm_group(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtComm *c) {
  int g = ISA_GROUP_TP;
  int64_t k = 0, root = 0, size;
  if (cJSON_GetObjectItemCaseSensitive(o, "group") && pj_enum(pj, o, path, "group", isa_group_names, &g) != 0)
    return -1;
  c->group = (IsaGroup)g;
  if (c->group == ISA_GROUP_STAGES && pj_int(pj, o, path, "stage_group", 0, p->nstage_groups - 1, &k) != 0) return -1;
  c->stage_group = (int)k;
  size = c->group == ISA_GROUP_TP       ? p->mesh.tp
         : c->group == ISA_GROUP_STAGES ? p->stage_groups[k][0]
         : p->mesh.dp                   ? p->mesh.dp
                                        : 1 << 30;
  if ((c->kind == ISA_COMM_BROADCAST || c->kind == ISA_COMM_REDUCE) &&
      pj_int(pj, o, path, "root", 0, size - 1, &root) != 0)
    return -1;
  c->root = (int)root;
  if (isa_comm_splits(c->kind) && c->group != ISA_GROUP_TP)
    return pj_fail(pj, path, "group", "a split collective is over the tp group");
  return 0;
}

static int parse_comm(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  RtComm *c = &in->comm;
  int kind;
  int64_t bytes[2], big = (int64_t)1 << 40, elems;
  in->op = ISA_COMM;
  if (pj_enum(pj, o, path, "kind", isa_comm_names, &kind) || parse_at(pj, o, path, "src", &c->tier[0], &c->offset[0]) ||
      parse_at(pj, o, path, "dst", &c->tier[1], &c->offset[1]) || pj_int(pj, o, path, "outer", 1, big, &c->outer) ||
      pj_int(pj, o, path, "n", 1, big, &c->n) || pj_int(pj, o, path, "inner", 1, big, &c->inner))
    return -1;
  c->kind = (IsaCommKind)kind;
  if (parse_comm_group(pj, o, path, p, c) != 0) return -1;
  int red = ISA_RED_SUM;
  if (cJSON_GetObjectItemCaseSensitive(o, "reduction") && pj_enum(pj, o, path, "reduction", isa_red_names, &red) != 0)
    return -1;
  c->red = (IsaRed)red;
  if (c->red != ISA_RED_SUM && c->kind != ISA_COMM_ALL_REDUCE)
    return pj_fail(pj, path, "reduction", "only an all_reduce takes one (the others sum)");
  if (isa_comm_splits(c->kind) && c->n % p->mesh.tp != 0)
    return pj_fail(pj, path, "n", "not divisible by the mesh's tp");
  if (__builtin_mul_overflow(c->outer, c->n, &elems) || __builtin_mul_overflow(elems, c->inner, &elems) ||
      elems > INT64_MAX / 8)
    return pj_fail(pj, path, "outer", "size overflows");
  comm_bytes(c, p->mesh.tp, bytes);
  if (pj_range(pj, p, c->tier[0], c->offset[0], bytes[0], path, "src") ||
      pj_range(pj, p, c->tier[1], c->offset[1], bytes[1], path, "dst"))
    return -1;
  int apart =
      c->tier[0] != c->tier[1] || c->offset[0] + bytes[0] <= c->offset[1] || c->offset[1] + bytes[1] <= c->offset[0];
  int same = c->tier[0] == c->tier[1] && c->offset[0] == c->offset[1];
  if (!apart && !(!isa_comm_splits(c->kind) && same))
    return pj_fail(pj, path, "dst",
                   "overlaps src (only a collective that splits nothing "
                   "may be in place)");
  return 0;
}

/* ---- offload instructions ------------------------------------------------------- */

/* "chunk" and "part" of move, drop and wait; only where the list may hold them. */
static int parse_chunk_part(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  static const char *const parts[] = {"params", "grads", "opt", NULL};
  int64_t c;
  if (!pj->off_ok)
    return pj_fail(pj, path, "op",
                   p->offload.on ? "offload instructions only in `step`, `sync`, "
                                   "`gradnorm` and `update`"
                                 : "offload instructions need \"offload\"");
  if (pj_int(pj, o, path, "chunk", 0, p->offload.nchunks - 1, &c) || pj_enum(pj, o, path, "part", parts, &in->part))
    return -1;
  in->chunk = (int)c;
  return 0;
}

/* A location of names[0..n): device, host, nvme (and zero for a move's source). */
static int parse_loc(Pj *pj, const cJSON *o, const char *path, const char *key, int with_zero, RtLoc *out) {
  static const char *const places[] = {"device", "host", "nvme", NULL};
  static const char *const sources[] = {"device", "host", "nvme", "zero", NULL};
  int v;
  if (pj_enum(pj, o, path, key, with_zero ? sources : places, &v) != 0) return -1;
  *out = (RtLoc)v;
  return 0;
}

static int parse_move(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  in->op = ISA_MOVE;
  in->keep = 0;
  if (parse_chunk_part(pj, o, path, p, in) || parse_loc(pj, o, path, "from", 1, &in->from) ||
      parse_loc(pj, o, path, "to", 0, &in->to) ||
      (cJSON_GetObjectItemCaseSensitive(o, "keep") && pj_bool(pj, o, path, "keep", &in->keep)))
    return -1;
  if (in->from == in->to) return pj_fail(pj, path, "to", "the same location as \"from\"");
  if (in->from == RT_LOC_ZERO && in->keep)
    return pj_fail(pj, path, "keep", "a move from \"zero\" has no source to keep");
  return 0;
}

static int parse_drop(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  in->op = ISA_DROP;
  return parse_chunk_part(pj, o, path, p, in) || parse_loc(pj, o, path, "at", 0, &in->from);
}

static int parse_wait(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  in->op = ISA_WAIT;
  return parse_chunk_part(pj, o, path, p, in);
}

/* zero_gather, zero_release (stage 3 only), zero_grad, zero_reduce: a parameter. */
static int parse_zero_param(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in, IsaOp op) {
  int64_t k;
  in->op = op;
  if (!pj->zero_ok)
    return pj_fail(pj, path, "op",
                   "ZeRO instructions only in `step` of a program with "
                   "\"zero_scheduled\": true");
  if ((op == ISA_ZERO_GATHER || op == ISA_ZERO_RELEASE) && p->zero_stage != 3)
    return pj_fail(pj, path, "op",
                   "\"zero_gather\" and \"zero_release\" only at "
                   "zero_stage 3 (below it every rank holds every parameter)");
  if (pj_int(pj, o, path, "param", 0, p->nparams - 1, &k) != 0) return -1;
  in->param = (int)k;
  return 0;
}

static int parse_zero_gather(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  return parse_zero_param(pj, o, path, p, in, ISA_ZERO_GATHER);
}

static int parse_zero_release(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  return parse_zero_param(pj, o, path, p, in, ISA_ZERO_RELEASE);
}

static int parse_zero_grad(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  return parse_zero_param(pj, o, path, p, in, ISA_ZERO_GRAD);
}

static int parse_zero_reduce(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  return parse_zero_param(pj, o, path, p, in, ISA_ZERO_REDUCE);
}

static int parse_join(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  in->op = ISA_JOIN;
  return 0;
}

typedef int (*ParseInstrFn)(Pj *, const cJSON *, const char *, const RtProgram *, RtInstr *);
static int pj_opt_int(Pj *pj, const cJSON *r, const char *path, const char *key, int64_t lo, int64_t hi, int64_t def,
                      int64_t *out);

static int parse_instr(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInstr *in) {
  static const ParseInstrFn parsers[ISA_NOPS] = {[ISA_KERNEL] = parse_kernel,
                                                 [ISA_ZERO] = parse_zero,
                                                 [ISA_GEMM] = parse_gemm,
                                                 [ISA_SLOT] = parse_slot,
                                                 [ISA_INPUT] = parse_input_instr,
                                                 [ISA_LOSS] = parse_loss,
                                                 [ISA_SEND] = parse_send,
                                                 [ISA_RECV] = parse_recv,
                                                 [ISA_COMM] = parse_comm,
                                                 [ISA_MOVE] = parse_move,
                                                 [ISA_DROP] = parse_drop,
                                                 [ISA_WAIT] = parse_wait,
                                                 [ISA_ZERO_GATHER] = parse_zero_gather,
                                                 [ISA_ZERO_RELEASE] = parse_zero_release,
                                                 [ISA_ZERO_GRAD] = parse_zero_grad,
                                                 [ISA_ZERO_REDUCE] = parse_zero_reduce,
                                                 [ISA_JOIN] = parse_join};
  int op;
  int64_t dp = -1, tp = -1, big = 1 << 30;
  if (!cJSON_IsObject(o)) return pj_fail(pj, path, "", "expected an object");
  if (pj_enum(pj, o, path, "op", isa_op_names, &op) != 0 || parsers[op](pj, o, path, p, in) ||
      pj_opt_int(pj, o, path, "dp_rank", 0, p->mesh.dp ? p->mesh.dp - 1 : big, -1, &dp) ||
      pj_opt_int(pj, o, path, "tp_rank", 0, p->mesh.tp - 1, -1, &tp))
    return -1;
  in->dp_rank = (int)dp, in->tp_rank = (int)tp;
  if ((dp >= 0 || tp >= 0) && op != ISA_KERNEL && op != ISA_GEMM && op != ISA_ZERO && op != ISA_MOVE &&
      op != ISA_DROP && op != ISA_WAIT)
    return pj_fail(pj, path, "dp_rank",
                   "a rank condition only on kernel, gemm, zero and "
                   "offload's move, drop and wait");
  if ((cJSON_GetObjectItemCaseSensitive(o, "last_microbatch") &&
       pj_bool(pj, o, path, "last_microbatch", &in->last_mb)) ||
      (cJSON_GetObjectItemCaseSensitive(o, "overlap") && pj_bool(pj, o, path, "overlap", &in->overlap)))
    return -1;
  if (in->last_mb && !pj->last_ok)
    return pj_fail(pj, path, "last_microbatch", "only in `step` of an unscheduled program");
  if (in->overlap && op != ISA_ZERO_GATHER &&
      (op != ISA_COMM || in->comm.group != ISA_GROUP_DP ||
       (in->comm.kind != ISA_COMM_ALL_REDUCE && in->comm.kind != ISA_COMM_REDUCE)))
    return pj_fail(pj, path, "overlap",
                   "only on an all_reduce or reduce over the dp group, or "
                   "a zero_gather");
  return 0;
}

static int parse_list(Pj *pj, const cJSON *root, const char *key, const RtProgram *p, RtList *list) {
  const cJSON *arr = pj_array(pj, root, "", key, 0, 1 << 24);
  if (!arr) return -1;
  list->n = cJSON_GetArraySize(arr);
  list->name = key;
  list->instr = calloc((size_t)list->n + 1, sizeof *list->instr);
  if (!list->instr) return file_set_error(pj->err, pj->errlen, "program: out of memory");
  char path[64];
  for (int i = 0; i < list->n; i++) {
    pj_path(path, sizeof path, key, i);
    if (parse_instr(pj, cJSON_GetArrayItem(arr, i), path, p, &list->instr[i]) != 0) return -1;
    list->sends |= list->instr[i].op == ISA_SEND;
  }
  return 0;
}

/* ---- header, train, params, inputs --------------------------------------------- */

/* An optional field: 0 and *out = def when absent. */
static int pj_opt_int(Pj *pj, const cJSON *r, const char *path, const char *key, int64_t lo, int64_t hi, int64_t def,
                      int64_t *out) {
  *out = def;
  return cJSON_GetObjectItemCaseSensitive(r, key) ? pj_int(pj, r, path, key, lo, hi, out) : 0;
}

/* "stage_groups" (optional): each an ascending list of stages of the mesh. */
static int parse_stage_groups(Pj *pj, const cJSON *r, RtProgram *p) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(r, "stage_groups");
  if (!a) return 0;
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > 1 << 16)
    return pj_fail(pj, "", "stage_groups", "expected an array of at most 65536 groups");
  p->nstage_groups = cJSON_GetArraySize(a);
  if (!(p->stage_groups = calloc((size_t)p->nstage_groups + 1, sizeof *p->stage_groups)))
    return file_set_error(pj->err, pj->errlen, "program: out of memory");
  char path[64];
  for (int k = 0; k < p->nstage_groups; k++) {
    const cJSON *g = cJSON_GetArrayItem(a, k);
    int n = cJSON_IsArray(g) ? cJSON_GetArraySize(g) : 0;
    pj_path(path, sizeof path, "stage_groups", k);
    if (n < 1 || n > p->mesh.pp) return pj_fail(pj, path, "", "expected an array of 1 to pp stages");
    if (!(p->stage_groups[k] = calloc((size_t)n + 1, sizeof **p->stage_groups)))
      return file_set_error(pj->err, pj->errlen, "program: out of memory");
    p->stage_groups[k][0] = n;
    for (int i = 0; i < n; i++) {
      const cJSON *v = cJSON_GetArrayItem(g, i);
      int s = cJSON_IsNumber(v) ? v->valueint : -1;
      if (s < 0 || s >= p->mesh.pp || (i > 0 && s <= p->stage_groups[k][i]))
        return pj_fail(pj, path, "", "stages of the mesh, ascending");
      p->stage_groups[k][i + 1] = s;
    }
  }
  return 0;
}

/* "mesh" (absent: dp from "dp", tp 1, pp 1), "stage", "scheduled", "slots". */
static int parse_parallel(Pj *pj, const cJSON *r, RtProgram *p) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "mesh");
  int64_t stage, big = 1 << 20;
  p->mesh = (RtMesh){p->dp, 1, 1};
  if (m && !cJSON_IsObject(m)) return pj_fail(pj, "", "mesh", "expected an object");
  if (m && (pj_int(pj, m, "mesh", "dp", 0, big, &p->mesh.dp) || pj_int(pj, m, "mesh", "tp", 1, big, &p->mesh.tp) ||
            pj_int(pj, m, "mesh", "pp", 1, big, &p->mesh.pp)))
    return -1;
  if (m && p->dp && p->mesh.dp != p->dp) return pj_fail(pj, "", "dp", "differs from mesh.dp");
  p->dp = p->mesh.dp;
  p->scheduled = 0;
  if (cJSON_GetObjectItemCaseSensitive(r, "scheduled") && pj_bool(pj, r, "", "scheduled", &p->scheduled) != 0)
    return -1;
  if (pj_opt_int(pj, r, "", "stage", 0, p->mesh.pp - 1, 0, &stage) ||
      pj_opt_int(pj, r, "", "slots", 1, 1 << 16, 1, &p->slots))
    return -1;
  p->stage = (int)stage;
  if (parse_stage_groups(pj, r, p) != 0) return -1;
  if (p->tiers[RT_TIER_WORK] > INT64_MAX / 4 / p->slots)
    return pj_fail(pj, "", "slots", "slots x the work tier overflows");
  return 0;
}

/* "arch" (optional), kept as text for runtime/hf.h, which checks it. */
static int parse_arch(Pj *pj, const cJSON *r, RtProgram *p) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(r, "arch");
  char why[256];
  if (!a) return 0;
  if (!(p->arch = cJSON_PrintUnformatted(a))) return file_set_error(pj->err, pj->errlen, "program: out of memory");
  return hf_arch_check(p->arch, why, sizeof why) ? pj_fail(pj, "", "arch", why) : 0;
}

static int parse_header(Pj *pj, const cJSON *r, RtProgram *p) {
  int64_t v;
  const char *model;
  if (pj_int(pj, r, "", "version", 1, 1, &v) || pj_str(pj, r, "", "model", &model) ||
      pj_int(pj, r, "", "batch", 1, 1 << 30, &p->batch) || pj_int(pj, r, "", "seq", 1, 1 << 30, &p->seq) ||
      pj_int(pj, r, "", "vocab", 1, INT32_MAX, &p->vocab) ||
      pj_ints(pj, r, "", "tiers", RT_TIERS, 0, INT64_MAX / 2, p->tiers) ||
      pj_int(pj, r, "", "opt_v_offset", 0, INT64_MAX / 2, &p->opt_v_offset) ||
      pj_num(pj, r, "", "flops_per_step", &p->flops_per_step))
    return -1;
  p->version = (int)v;
  p->microbatches = 1;
  if (cJSON_GetObjectItemCaseSensitive(r, "microbatches") &&
      pj_int(pj, r, "", "microbatches", 1, 1 << 20, &p->microbatches) != 0)
    return -1;
  if (cJSON_GetObjectItemCaseSensitive(r, "dp") && pj_int(pj, r, "", "dp", 1, 1 << 20, &p->dp) != 0) return -1;
  if (cJSON_GetObjectItemCaseSensitive(r, "zero_stage") && pj_int(pj, r, "", "zero_stage", 0, 3, &p->zero_stage) != 0)
    return -1;
  p->nscalars = RT_SCALARS;
  if (cJSON_GetObjectItemCaseSensitive(r, "scalars")) { /* optional, see the header */
    if (pj_int(pj, r, "", "scalars", RT_SCALARS, TRAIN_SCALARS, &v) != 0) return -1;
    if (v != RT_SCALARS && v != TRAIN_SCALARS) return pj_fail(pj, "", "scalars", "must be 5 or 12");
    p->nscalars = (int)v;
  }
  if (!(p->model = strdup(model))) return file_set_error(pj->err, pj->errlen, "program: out of memory");
  return parse_arch(pj, r, p) ? -1 : parse_parallel(pj, r, p);
}

static int parse_train(Pj *pj, const cJSON *r, RtTrain *t) {
  static const char *const opts[] = {"adamw", "sgd", NULL};
  static const char *const scheds[] = {"cosine", "constant", NULL};
  const cJSON *o = pj_get(r, "train");
  int opt, sched;
  if (!cJSON_IsObject(o)) return pj_fail(pj, "", "train", o ? "expected an object" : "missing (an object)");
  if (pj_enum(pj, o, "train", "optimizer", opts, &opt) || pj_num(pj, o, "train", "lr", &t->lr) ||
      pj_num(pj, o, "train", "beta1", &t->beta1) || pj_num(pj, o, "train", "beta2", &t->beta2) ||
      pj_num(pj, o, "train", "eps", &t->eps) || pj_num(pj, o, "train", "weight_decay", &t->weight_decay) ||
      pj_num(pj, o, "train", "momentum", &t->momentum) || pj_num(pj, o, "train", "clip", &t->clip) ||
      pj_int(pj, o, "train", "warmup", 0, INT64_MAX / 2, &t->warmup) || pj_num(pj, o, "train", "min_lr", &t->min_lr) ||
      pj_enum(pj, o, "train", "schedule", scheds, &sched))
    return -1;
  t->optimizer = (RtOptimizer)opt;
  t->schedule = (RtSchedule)sched;
  const cJSON *ls = pj_get(o, "loss_scale");
  t->loss_scaling = ls != NULL;
  if (!ls) return 0;
  if (!cJSON_IsObject(ls)) return pj_fail(pj, "train", "loss_scale", "expected an object");
  if (pj_num(pj, ls, "train.loss_scale", "init", &t->scale_init) ||
      pj_num(pj, ls, "train.loss_scale", "growth", &t->scale_growth) ||
      pj_num(pj, ls, "train.loss_scale", "backoff", &t->scale_backoff) ||
      pj_int(pj, ls, "train.loss_scale", "interval", 1, INT64_MAX / 2, &t->scale_interval))
    return -1;
  if (!(t->scale_init > 0) || !(t->scale_growth >= 1) || !(t->scale_backoff > 0 && t->scale_backoff < 1))
    return pj_fail(pj, "train", "loss_scale", "init > 0, growth >= 1 and 0 < backoff < 1 are needed");
  return 0;
}

/* init kind and its a/b (only the ones it uses are required). */
static int parse_init(Pj *pj, const cJSON *o, const char *path, RtParam *q) {
  static const char *const inits[] = {"normal", "uniform", "zeros", "ones", "constant", NULL};
  int init;
  if (pj_enum(pj, o, path, "init", inits, &init) != 0) return -1;
  q->init = (RtInit)init;
  q->a = q->b = 0;
  int need_a = q->init == RT_INIT_NORMAL || q->init == RT_INIT_UNIFORM || q->init == RT_INIT_CONSTANT;
  int need_b = q->init == RT_INIT_NORMAL || q->init == RT_INIT_UNIFORM;
  if ((need_a && pj_num(pj, o, path, "a", &q->a)) || (need_b && pj_num(pj, o, path, "b", &q->b))) return -1;
  return 0;
}

static int parse_shape(Pj *pj, const cJSON *o, const char *path, RtParam *q) {
  const cJSON *arr = pj_array(pj, o, path, "shape", 0, RT_MAX_DIMS);
  if (!arr) return -1;
  q->ndim = cJSON_GetArraySize(arr);
  if (pj_ints(pj, o, path, "shape", q->ndim, 1, INT64_MAX / 2, q->shape) != 0) return -1;
  q->numel = 1;
  for (int d = 0; d < q->ndim; d++)
    if (__builtin_mul_overflow(q->numel, q->shape[d], &q->numel) || q->numel > INT64_MAX / 8)
      return pj_fail(pj, path, "shape", "element count overflows");
  return 0;
}

/* The parameter's bytes in PARAMS, GRADS and OPT (m, and v for AdamW). */
static int check_param_ranges(Pj *pj, const RtProgram *p, const RtParam *q, const char *path) {
  int64_t bytes = q->numel * 4;
  if (q->offset % 4 != 0) return pj_fail(pj, path, "offset", "not a multiple of 4");
  int sgd_none = p->train.optimizer != RT_OPT_ADAMW && p->tiers[RT_TIER_OPT] == 0; /* no momentum: no state */
  if (pj_range(pj, p, RT_TIER_PARAMS, q->offset, bytes, path, "offset") ||
      pj_range(pj, p, RT_TIER_GRADS, q->offset, bytes, path, "offset") ||
      (!sgd_none && pj_range(pj, p, RT_TIER_OPT, q->offset, bytes, path, "offset")))
    return -1;
  if (p->train.optimizer == RT_OPT_ADAMW)
    return pj_range(pj, p, RT_TIER_OPT, p->opt_v_offset + q->offset, bytes, path,
                    "offset (AdamW v at opt_v_offset + offset)");
  return 0;
}

/* Optional "tp": {"dim": d, "blocks": b}: shape[d] is b blocks of equal parts, and
 * the global shape (shape[d] x tp) stays countable. */
static int parse_param_tp(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtParam *q) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tp");
  char sub[96];
  int64_t dim, global;
  q->tp_dim = -1, q->tp_blocks = 1;
  if (!t) return 0;
  snprintf(sub, sizeof sub, "%s.tp", path);
  if (!cJSON_IsObject(t)) return pj_fail(pj, path, "tp", "expected an object");
  if (q->ndim == 0) return pj_fail(pj, path, "tp", "a scalar cannot be split");
  if (pj_int(pj, t, sub, "dim", 0, q->ndim - 1, &dim) || pj_int(pj, t, sub, "blocks", 1, q->shape[dim], &q->tp_blocks))
    return -1;
  q->tp_dim = (int)dim;
  if (q->shape[dim] % q->tp_blocks != 0) return pj_fail(pj, sub, "blocks", "does not divide the split dimension");
  if (__builtin_mul_overflow(q->numel, p->mesh.tp, &global) || global > INT64_MAX / 8)
    return pj_fail(pj, path, "shape", "global element count overflows");
  return 0;
}

static int parse_param(Pj *pj, const cJSON *o, const char *path, RtProgram *p, RtParam *q) {
  const char *name;
  if (!cJSON_IsObject(o)) return pj_fail(pj, path, "", "expected an object");
  int64_t owner = -1;
  if (pj_str(pj, o, path, "name", &name) || parse_shape(pj, o, path, q) ||
      pj_int(pj, o, path, "offset", 0, INT64_MAX / 2, &q->offset) || pj_bool(pj, o, path, "decay", &q->decay) ||
      parse_init(pj, o, path, q) || parse_param_tp(pj, o, path, p, q) ||
      (cJSON_GetObjectItemCaseSensitive(o, "owner") && pj_int(pj, o, path, "owner", 0, 1 << 20, &owner)))
    return -1;
  q->owner = (int)owner;
  if (!name[0] || program_find_param(p, name))
    return pj_fail(pj, path, "name", name[0] ? "duplicate parameter name" : "empty");
  if (!(q->name = strdup(name))) return file_set_error(pj->err, pj->errlen, "program: out of memory");
  return check_param_ranges(pj, p, q, path);
}

static int parse_params(Pj *pj, const cJSON *r, RtProgram *p) {
  const cJSON *arr = pj_array(pj, r, "", "params", 1, 1 << 24);
  if (!arr) return -1;
  int n = cJSON_GetArraySize(arr);
  if (!(p->params = calloc((size_t)n, sizeof *p->params)))
    return file_set_error(pj->err, pj->errlen, "program: out of memory");
  p->nparams = n; /* names not parsed yet stay NULL: freed and skipped as such */
  char path[64];
  for (int i = 0; i < n; i++) {
    pj_path(path, sizeof path, "params", i);
    if (parse_param(pj, cJSON_GetArrayItem(arr, i), path, p, &p->params[i]) != 0) return -1;
    p->param_elems += p->params[i].numel;
  }
  return 0;
}

/* "range" [lo, hi) and "ignore" of an i32 input (optional). */
static int parse_input_values(Pj *pj, const cJSON *o, const char *path, RtInput *in) {
  int64_t range[2];
  in->ranged = cJSON_GetObjectItemCaseSensitive(o, "range") != NULL;
  in->has_ignore = cJSON_GetObjectItemCaseSensitive(o, "ignore") != NULL;
  if ((in->ranged || in->has_ignore) && in->dtype != RT_I32)
    return pj_fail(pj, path, in->ranged ? "range" : "ignore", "only for an i32 input");
  if (in->ranged && pj_ints(pj, o, path, "range", 2, INT32_MIN, (int64_t)INT32_MAX + 1, range)) return -1;
  if (in->ranged && range[0] >= range[1]) return pj_fail(pj, path, "range", "empty");
  if (in->ranged) in->lo = range[0], in->hi = range[1];
  return in->has_ignore ? pj_int(pj, o, path, "ignore", INT32_MIN, INT32_MAX, &in->ignore) : 0;
}

/* Name, role, dtype and the shape [batch, ...] (tokens and targets: [batch, seq]). */
static int parse_input_shape(Pj *pj, const cJSON *o, const char *path, const RtProgram *p, RtInput *in) {
  static const char *const roles[] = {"tokens", "targets", "data", NULL};
  static const char *const dtypes[] = {"i32", "f32", NULL};
  const char *name;
  int role, dtype = RT_I32;
  const cJSON *shape = pj_array(pj, o, path, "shape", 1, RT_MAX_DIMS);
  if (!shape || pj_str(pj, o, path, "name", &name) || pj_enum(pj, o, path, "role", roles, &role) ||
      (cJSON_GetObjectItemCaseSensitive(o, "dtype") && pj_enum(pj, o, path, "dtype", dtypes, &dtype)))
    return -1;
  in->role = (RtRole)role, in->dtype = (RtDtype)dtype, in->ndim = cJSON_GetArraySize(shape);
  if (pj_ints(pj, o, path, "shape", in->ndim, 1, 1 << 30, in->shape) != 0) return -1;
  in->row_elems = 1;
  for (int d = 1; d < in->ndim; d++)
    if (__builtin_mul_overflow(in->row_elems, in->shape[d], &in->row_elems) || in->row_elems > 1ll << 40)
      return pj_fail(pj, path, "shape", "too large");
  if (in->shape[0] != p->batch) return pj_fail(pj, path, "shape", "must start with batch");
  if (in->role != RT_ROLE_DATA && (in->ndim != 2 || in->shape[1] != p->seq || in->dtype != RT_I32))
    return pj_fail(pj, path, "shape", "tokens and targets must be i32 [batch, seq]");
  if (!(in->name = strdup(name))) return file_set_error(pj->err, pj->errlen, "program: out of memory");
  return 0;
}

static int parse_input(Pj *pj, const cJSON *o, const char *path, RtProgram *p, int i) {
  RtInput *in = &p->inputs[i];
  in->offset = -1;
  if (!cJSON_IsObject(o)) return pj_fail(pj, path, "", "expected an object");
  if (parse_input_shape(pj, o, path, p, in) || parse_input_values(pj, o, path, in)) return -1;
  for (int j = 0; j < i; j++)
    if (!strcmp(p->inputs[j].name, in->name)) return pj_fail(pj, path, "name", "a second input of this name");
  int *slot = in->role == RT_ROLE_TOKENS ? &p->tokens : in->role == RT_ROLE_TARGETS ? &p->targets : NULL;
  if (slot && *slot >= 0) return pj_fail(pj, path, "role", "a second input with this role");
  if (slot) *slot = i;
  if (p->scheduled && !cJSON_GetObjectItemCaseSensitive(o, "offset")) return 0; /* its "input" instructions place it */
  if (pj_int(pj, o, path, "offset", 0, INT64_MAX / 2, &in->offset) != 0) return -1;
  if (in->offset % 4 != 0) return pj_fail(pj, path, "offset", "not a multiple of 4");
  return pj_range(pj, p, RT_TIER_WORK, in->offset, p->batch * in->row_elems * 4, path, "offset");
}

static int parse_inputs(Pj *pj, const cJSON *r, RtProgram *p) {
  const cJSON *arr = pj_array(pj, r, "", "inputs", 0, RT_MAX_INPUTS);
  char path[64];
  p->tokens = p->targets = -1;
  if (!arr) return -1;
  p->ninputs = cJSON_GetArraySize(arr);
  if (!(p->inputs = calloc((size_t)p->ninputs + 1, sizeof *p->inputs)))
    return file_set_error(pj->err, pj->errlen, "program: out of memory");
  for (int i = 0; i < p->ninputs; i++) {
    pj_path(path, sizeof path, "inputs", i);
    if (parse_input(pj, cJSON_GetArrayItem(arr, i), path, p, i) != 0) return -1;
  }
  return 0;
}

/* "fp8" "total" and "runs" (a pipeline stage's place among the model's states):
 * runs cover this stage's rows once each, inside the model's; without them, the
 * stage's rows are the model's. */
static int parse_fp8_runs(Pj *pj, const cJSON *f8, RtProgram *p) {
  p->fp8.total = p->fp8.rows;
  if (!cJSON_GetObjectItemCaseSensitive(f8, "runs")) {
    p->fp8.nruns = 1;
    if (!(p->fp8.runs = malloc(sizeof *p->fp8.runs))) return pj_fail(pj, "fp8", "runs", "out of memory");
    p->fp8.runs[0][0] = p->fp8.runs[0][1] = 0, p->fp8.runs[0][2] = p->fp8.rows;
    return 0;
  }
  const cJSON *runs = pj_array(pj, f8, "fp8", "runs", 1, 1 << 20);
  if (!runs || pj_int(pj, f8, "fp8", "total", p->fp8.rows, 1 << 30, &p->fp8.total) != 0) return -1;
  p->fp8.nruns = cJSON_GetArraySize(runs);
  if (!(p->fp8.runs = calloc((size_t)p->fp8.nruns, sizeof *p->fp8.runs)))
    return pj_fail(pj, "fp8", "runs", "out of memory");
  int64_t covered = 0;
  char sub[64];
  for (int i = 0; i < p->fp8.nruns; i++) {
    int64_t *r = p->fp8.runs[i];
    snprintf(sub, sizeof sub, "fp8.runs[%d]", i);
    if (pj_ints(pj, cJSON_GetArrayItem(runs, i), sub, "", 3, 0, 1 << 30, r) != 0) return -1;
    if (r[2] < 1 || r[0] + r[2] > p->fp8.total || r[1] != covered)
      return pj_fail(pj, sub, "", "not the next rows of this stage inside the model's");
    covered += r[2];
  }
  return covered == p->fp8.rows ? 0 : pj_fail(pj, "fp8", "runs", "do not cover the stage's rows");
}

static int parse_slots(Pj *pj, const cJSON *r, RtProgram *p) {
  static const char *const logits_types[] = {"f32", "bf16", "f16", NULL};
  int dt = 0;
  if (cJSON_HasObjectItem(r, "logits_dtype") && pj_enum(pj, r, "", "logits_dtype", logits_types, &dt)) return -1;
  p->logits_dtype = (IsaDtype)dt; /* ISA_F32, ISA_BF16, ISA_F16 in that order */
  int64_t logits_bytes = p->scheduled ? 0 : p->batch * p->seq * p->vocab * isa_dtype_bytes(p->logits_dtype);
  if (pj_int(pj, r, "", "loss_offset", 0, INT64_MAX / 2, &p->loss_offset) ||
      pj_int(pj, r, "", "logits_offset", -1, INT64_MAX / 2, &p->logits_offset) ||
      pj_int(pj, r, "", "gradnorm_offset", 0, INT64_MAX / 2, &p->gradnorm_offset) ||
      pj_int(pj, r, "", "gradnorm_parts", 1, 1 << 30, &p->gradnorm_parts))
    return -1;
  const cJSON *f8 = cJSON_GetObjectItemCaseSensitive(r, "fp8");
  if (f8 && (pj_int(pj, f8, "fp8", "offset", 0, INT64_MAX / 2, &p->fp8.offset) ||
             pj_int(pj, f8, "fp8", "rows", 1, 1 << 24, &p->fp8.rows) ||
             pj_int(pj, f8, "fp8", "width", 3, (1 << 20) + 2, &p->fp8.width) ||
             pj_range(pj, p, RT_TIER_WORK, p->fp8.offset, p->fp8.rows * p->fp8.width * 4, "fp8", "offset") ||
             parse_fp8_runs(pj, f8, p)))
    return -1;
  return pj_range(pj, p, RT_TIER_WORK, p->loss_offset, 4, "", "loss_offset") ||
         (p->logits_offset >= 0 &&
          pj_range(pj, p, RT_TIER_WORK, p->logits_offset, logits_bytes, "", "logits_offset")) ||
         pj_range(pj, p, RT_TIER_WORK, p->gradnorm_offset, p->gradnorm_parts * 4, "", "gradnorm_offset");
}

/* The kernels' names and, when the program carries CUDA C, their launch sizes
 * ("cuda_launch": [[threads per block, blocks], ...]). */
static int parse_kernel_names(Pj *pj, const cJSON *r, RtProgram *p) {
  int n = p->nkernels;
  const cJSON *arr = pj_array(pj, r, "", "kernels", n, n);
  const char *name;
  char path[64];
  if (!arr || !(p->kernel_names = calloc((size_t)n + 1, sizeof *p->kernel_names)))
    return arr ? file_set_error(pj->err, pj->errlen, "out of memory") : -1;
  for (int i = 0; i < n; i++) {
    pj_path(path, sizeof path, "kernels", i);
    if (pj_str(pj, cJSON_GetArrayItem(arr, i), path, "", &name) != 0 || !(p->kernel_names[i] = strdup(name))) return -1;
  }
  if (!cJSON_GetObjectItemCaseSensitive(r, "cuda_launch")) return 0;
  const cJSON *launch = pj_array(pj, r, "", "cuda_launch", n, n);
  if (!launch || !(p->cuda_launch = calloc((size_t)n + 1, sizeof *p->cuda_launch)))
    return launch ? file_set_error(pj->err, pj->errlen, "out of memory") : -1;
  for (int i = 0; i < n; i++) {
    int64_t bg[2];
    pj_path(path, sizeof path, "cuda_launch", i);
    if (pj_ints(pj, cJSON_GetArrayItem(launch, i), path, "", 2, 1, INT32_MAX, bg) != 0) return -1;
    if (bg[0] > 1024 || bg[0] % 32) return pj_fail(pj, path, "", "threads per block: a multiple of 32 up to 1024");
    p->cuda_launch[i][0] = (int)bg[0], p->cuda_launch[i][1] = (int)bg[1];
  }
  return 0;
}

/* ---- offload ------------------------------------------------------------------- */

/* A chunk's "home": params and opt at device, host or nvme; grads "none". */
static int parse_home(Pj *pj, const cJSON *o, const char *path, RtChunk *ch) {
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "home");
  char sub[96];
  const char *grads;
  snprintf(sub, sizeof sub, "%s.home", path);
  if (!cJSON_IsObject(h)) return pj_fail(pj, path, "home", h ? "expected an object" : "missing (an object)");
  if (parse_loc(pj, h, sub, "params", 0, &ch->home[RT_TIER_PARAMS]) ||
      parse_loc(pj, h, sub, "opt", 0, &ch->home[RT_TIER_OPT]) || pj_str(pj, h, sub, "grads", &grads))
    return -1;
  if (strcmp(grads, "none") != 0)
    return pj_fail(pj, sub, "grads", "must be \"none\" (gradients live only inside a step)");
  ch->home[RT_TIER_GRADS] = RT_LOC_NONE;
  return 0;
}

/* Chunk c: parameters [lo, hi) right after the previous chunk's, in increasing offsets,
 * its range starting where the previous one ended (the first at 0). */
static int parse_chunk(Pj *pj, const cJSON *o, const char *path, RtProgram *p, int c) {
  RtChunk *ch = &p->offload.chunks[c];
  int64_t lh[2], prev_end = c ? p->offload.chunks[c - 1].end : 0;
  int prev_hi = c ? p->offload.chunks[c - 1].hi : 0;
  if (!cJSON_IsObject(o)) return pj_fail(pj, path, "", "expected an object");
  int64_t owner = -1;
  if (pj_ints(pj, o, path, "params", 2, 0, p->nparams, lh) || parse_home(pj, o, path, ch) ||
      pj_opt_int(pj, o, path, "owner", 0, p->mesh.dp > 0 ? p->mesh.dp - 1 : 0, -1, &owner))
    return -1;
  ch->owner = (int)owner;
  if (lh[0] != prev_hi || lh[1] <= lh[0])
    return pj_fail(pj, path, "params",
                   "chunks must hold the parameters in program order, "
                   "each chunk at least one, starting where the previous chunk ended");
  ch->lo = (int)lh[0], ch->hi = (int)lh[1];
  if ((owner >= 0) != (p->zero_stage == 3))
    return pj_fail(pj, path, "owner",
                   owner >= 0 ? "only at ZeRO stage 3" : "missing (ZeRO-3 deals each chunk to a rank)");
  for (int i = ch->lo; i < ch->hi; i++) {
    const RtParam *q = &p->params[i], *b = i ? &p->params[i - 1] : NULL;
    if (b && q->offset < b->offset + b->numel * 4)
      return pj_fail(pj, path, "params",
                     "the parameters of an offload program must lie "
                     "in program order in the tiers, without overlap");
    if (owner >= 0 && q->owner != owner)
      return pj_fail(pj, path, "owner", "a parameter of the chunk has another owner");
  }
  const RtParam *last = &p->params[ch->hi - 1];
  ch->start = p->params[ch->lo].offset;
  ch->end = (last->offset + last->numel * 4 + 63) / 64 * 64;
  if (ch->hi == p->nparams && ch->end >= p->tiers[RT_TIER_PARAMS])
    ch->end = p->tiers[RT_TIER_PARAMS]; /* the tier's end, inside the last 64 bytes */
  if (ch->start != prev_end)
    return pj_fail(pj, path, "params",
                   "its range does not start where the previous chunk's "
                   "ends (every byte of the tiers in exactly one chunk)");
  return 0;
}

/* The tiers the chunks cover: GRADS as PARAMS, OPT one (SGD) or two (AdamW, v at
 * opt_v_offset = the PARAMS size) times PARAMS, all of it in chunks. */
static int check_offload_tiers(Pj *pj, const RtProgram *p) {
  const RtOffload *f = &p->offload;
  int64_t pb = p->tiers[RT_TIER_PARAMS];
  int adamw = p->train.optimizer == RT_OPT_ADAMW;
  if (f->chunks[f->nchunks - 1].hi != p->nparams || f->chunks[f->nchunks - 1].end != pb)
    return pj_fail(pj, "offload", "chunks",
                   "do not cover every parameter and every byte of "
                   "the params tier");
  if (p->tiers[RT_TIER_GRADS] != pb)
    return pj_fail(pj, "", "tiers",
                   "an offload program's grads tier must be the size of its "
                   "params tier");
  int sgd_none = !adamw && p->tiers[RT_TIER_OPT] == 0; /* no momentum */
  if ((p->tiers[RT_TIER_OPT] != (adamw ? 2 * pb : pb) && !sgd_none) || (adamw && p->opt_v_offset != pb))
    return pj_fail(pj, "", "tiers",
                   adamw ? "an offload program with AdamW keeps m and v in "
                           "an opt tier of twice the params tier, v at opt_v_offset = the params "
                           "tier's size"
                         : "an offload program with SGD keeps an opt tier the size "
                           "of its params tier (or none without momentum)");
  return 0;
}

/* What offload runs on: one unsplit rank, one step list run per step. */
static int check_offload_plan(Pj *pj, const RtProgram *p) {
  if (p->zero_stage == 1 || p->zero_stage == 2)
    return pj_fail(pj, "", "offload", "an offload program runs at ZeRO stage 0 or 3");
  if (p->microbatches > 1 && !p->scheduled)
    return pj_fail(pj, "", "offload",
                   "an offload program with several micro-batches must be "
                   "scheduled (its `step` creates the gradients once)");
  int64_t need = p->tiers[RT_TIER_WORK] * p->slots;
  for (int c = 0; c < p->offload.nchunks; c++)
    for (int part = 0; part < RT_PARTS; part++)
      need += p->offload.chunks[c].home[part] == RT_LOC_DEVICE ? program_part_bytes(p, c, part) : 0;
  if (need > p->offload.device_capacity)
    return pj_fail(pj, "offload", "device_capacity",
                   "below what the work tier and the parts "
                   "whose home is the device need between steps");
  return 0;
}

static int parse_offload(Pj *pj, const cJSON *r, RtProgram *p) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "offload"), *arr;
  RtOffload *f = &p->offload;
  char path[64];
  if (!o) return 0;
  if (!cJSON_IsObject(o)) return pj_fail(pj, "", "offload", "expected an object");
  if (pj_int(pj, o, "offload", "device_capacity", 1, INT64_MAX / 4, &f->device_capacity) ||
      !(arr = pj_array(pj, o, "offload", "chunks", 1, 1 << 20)))
    return -1;
  f->nchunks = cJSON_GetArraySize(arr);
  if (!(f->chunks = calloc((size_t)f->nchunks, sizeof *f->chunks)))
    return file_set_error(pj->err, pj->errlen, "program: out of memory");
  for (int c = 0; c < f->nchunks; c++) {
    pj_path(path, sizeof path, "offload.chunks", c);
    if (parse_chunk(pj, cJSON_GetArrayItem(arr, c), path, p, c) != 0) return -1;
  }
  f->on = 1;
  return check_offload_tiers(pj, p) || check_offload_plan(pj, p);
}

/* Optional "predicted": the plan's peaks and transfer bytes, reported beside the run's. */
static int parse_predicted(Pj *pj, const cJSON *r, RtProgram *p) {
  static const char *const keys[4] = {"device_peak", "host_peak", "nvme_peak", "transfer_bytes"};
  const cJSON *mem = cJSON_GetObjectItemCaseSensitive(r, "predicted_memory");
  if (mem) { /* the device memory of a step, per dp rank (one value without ZeRO) */
    const cJSON *a = pj_array(pj, r, "", "predicted_memory", 1, 1 << 20);
    if (!a) return -1;
    p->npredicted_mem = cJSON_GetArraySize(a);
    if (!(p->predicted_mem = calloc((size_t)p->npredicted_mem, sizeof *p->predicted_mem)))
      return file_set_error(pj->err, pj->errlen, "program: out of memory");
    if (pj_ints(pj, a, "predicted_memory", "", p->npredicted_mem, 0, INT64_MAX / 2, p->predicted_mem) != 0) return -1;
  }
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "predicted");
  if (!o) return 0;
  if (!cJSON_IsObject(o)) return pj_fail(pj, "", "predicted", "expected an object");
  /* each figure one number, or (ZeRO-3) one per dp rank but the device's */
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "host_peak");
  RtOffload *f = &p->offload;
  f->npredicted = cJSON_IsArray(h) ? cJSON_GetArraySize(h) : 1;
  if (f->npredicted < 1 || (f->npredicted > 1 && f->npredicted != p->mesh.dp))
    return pj_fail(pj, "predicted", "host_peak", "expected a number or one per dp rank");
  if (!(f->predicted = calloc((size_t)f->npredicted, sizeof *f->predicted)))
    return file_set_error(pj->err, pj->errlen, "program: out of memory");
  int64_t *v = malloc((size_t)f->npredicted * sizeof *v);
  int rc = v ? 0 : file_set_error(pj->err, pj->errlen, "program: out of memory");
  for (int k = 0; k < 4 && rc == 0; k++) {
    if (k == 0 || f->npredicted == 1) {
      rc = pj_int(pj, o, "predicted", keys[k], 0, INT64_MAX / 2, &v[0]);
      for (int k2 = 1; k2 < f->npredicted; k2++) v[k2] = v[0];
    } else {
      rc = pj_ints(pj, o, "predicted", keys[k], f->npredicted, 0, INT64_MAX / 2, v);
    }
    for (int q = 0; q < f->npredicted && rc == 0; q++) f->predicted[q][k] = v[q];
  }
  free(v);
  f->has_predicted = rc == 0;
  return rc;
}

/* ZeRO's plan: from stage 1 a fixed dp and every parameter's owner among its ranks
 * (the compiler deals them, codegen/zero.h); stages 2 and 3 are compiled into the
 * step ("zero_scheduled"). */
static int check_zero_plan(Pj *pj, const RtProgram *p) {
  char path[64];
  if (p->zero_stage == 0) return 0;
  if (p->mesh.dp < 1) return pj_fail(pj, "", "zero_stage", "ZeRO needs the data-parallel ranks fixed (\"dp\")");
  for (int i = 0; i < p->nparams; i++) {
    pj_path(path, sizeof path, "params", i);
    if (p->params[i].owner < 0 || p->params[i].owner >= p->mesh.dp)
      return pj_fail(pj, path, "owner",
                     p->params[i].owner < 0 ? "missing (zero_stage is above 0)" : "not a rank of the dp group");
  }
  if (p->zero_stage >= 2 && !p->zero_scheduled)
    return pj_fail(pj, "", "zero_stage",
                   "ZeRO stages 2 and 3 are compiled into the step "
                   "(\"zero_scheduled\": true)");
  return 0;
}

/* Optional "zero_scheduled": ZeRO-2/3 placed in an unscheduled one-stage `step`
 * without offload (program.h, "ZeRO inside the step"). */
static int parse_zero_scheduled(Pj *pj, const cJSON *r, RtProgram *p) {
  p->zero_scheduled = 0;
  if (!cJSON_GetObjectItemCaseSensitive(r, "zero_scheduled")) return 0;
  if (pj_bool(pj, r, "", "zero_scheduled", &p->zero_scheduled) != 0) return -1;
  if (!p->zero_scheduled) return 0;
  if (p->zero_stage < 2) return pj_fail(pj, "", "zero_scheduled", "needs zero_stage 2 or 3");
  if ((p->scheduled && !p->offload.on) || p->mesh.pp > 1)
    return pj_fail(pj, "", "zero_scheduled",
                   "needs an unscheduled one-stage program (ZeRO "
                   "inside a pipeline schedule is not supported)");
  return 0;
}

/* `step`, where a scheduled program reads its inputs and reports its losses and a
 * zero_scheduled one gathers and reduces. */
static int parse_step(Pj *pj, const cJSON *r, RtProgram *p) {
  pj->io_ok = p->scheduled;
  pj->off_ok = p->offload.on;
  pj->zero_ok = p->zero_scheduled;
  pj->last_ok = !p->scheduled;
  int rc = parse_list(pj, r, "step", p, &p->step);
  pj->io_ok = pj->zero_ok = pj->last_ok = 0;
  return rc;
}

/* sync: collectives (and offload instructions); gradnorm and update: offload
 * instructions and host kernels; forward: neither. */
static int parse_tail_lists(Pj *pj, const cJSON *r, RtProgram *p) {
  pj->off_ok = p->offload.on;
  if (parse_list(pj, r, "sync", p, &p->sync) != 0) return -1;
  pj->off_ok = pj->host_ok = p->offload.on;
  int rc = parse_list(pj, r, "gradnorm", p, &p->gradnorm) || parse_list(pj, r, "update", p, &p->update);
  pj->off_ok = pj->host_ok = 0;
  return rc || parse_list(pj, r, "forward", p, &p->forward);
}

static int parse_root(Pj *pj, const cJSON *r, RtProgram *p) {
  if (!cJSON_IsObject(r)) return file_set_error(pj->err, pj->errlen, "program: not a JSON object");
  return parse_header(pj, r, p) || parse_train(pj, r, &p->train) || parse_params(pj, r, p) || parse_inputs(pj, r, p) ||
         parse_slots(pj, r, p) || parse_kernel_names(pj, r, p) || parse_offload(pj, r, p) ||
         parse_predicted(pj, r, p) || parse_zero_scheduled(pj, r, p) || parse_step(pj, r, p) ||
         parse_tail_lists(pj, r, p) || check_zero_plan(pj, p);
}

int program_load(const char *json, int nkernels, RtProgram *p, char *err, size_t errlen) {
  Pj pj = {err, errlen, "", 0, 0, 0, 0, 0};
  memset(p, 0, sizeof *p);
  p->nkernels = nkernels;
  cJSON *root = json ? cJSON_Parse(json) : NULL;
  int rc = root ? parse_root(&pj, root, p)
                : file_set_error(err, errlen, "program: not valid JSON (near byte %ld)",
                                 json ? (long)(cJSON_GetErrorPtr() - json) : 0L);
  cJSON_Delete(root);
  if (rc != 0) program_free(p);
  return rc ? -1 : 0;
}

/* ---- pipelines ------------------------------------------------------------------ */

static int same_param(const RtParam *a, const RtParam *b) {
  if (a->ndim != b->ndim || a->tp_dim != b->tp_dim || a->tp_blocks != b->tp_blocks || a->init != b->init ||
      a->a != b->a || a->b != b->b || a->decay != b->decay)
    return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

/* Stage s against stage 0, and its tied parameters against the earlier stages'. */
static int check_stage(Pj *pj, const RtProgram *st, int s) {
  const RtProgram *a = &st[0], *b = &st[s];
  if (b->stage != s) return pj_fail(pj, "", "stage", "must equal the element's index in the array");
  if (strcmp(a->model, b->model) != 0 || a->batch != b->batch || a->seq != b->seq || a->vocab != b->vocab ||
      a->microbatches != b->microbatches || a->scheduled != b->scheduled || a->mesh.dp != b->mesh.dp ||
      a->mesh.tp != b->mesh.tp || a->mesh.pp != b->mesh.pp || memcmp(&a->train, &b->train, sizeof a->train) != 0 ||
      a->nscalars != b->nscalars || a->zero_stage != b->zero_stage)
    return pj_fail(pj, "", "",
                   "model, mesh, batch, seq, vocab, microbatches, scheduled, "
                   "scalars, zero_stage or train differ from stage 0's");
  int same = a->nstage_groups == b->nstage_groups;
  for (int k = 0; same && k < a->nstage_groups; k++)
    same = a->stage_groups[k][0] == b->stage_groups[k][0] &&
           !memcmp(a->stage_groups[k], b->stage_groups[k], ((size_t)a->stage_groups[k][0] + 1) * sizeof(int));
  if (!same) return pj_fail(pj, "", "stage_groups", "differ from stage 0's");
  char path[64];
  for (int i = 0; i < b->nparams; i++)
    for (int e = 0; e < s; e++) {
      const RtParam *q = program_find_param(&st[e], b->params[i].name);
      pj_path(path, sizeof path, "params", i);
      if (q && !same_param(q, &b->params[i]))
        return pj_fail(pj, path, "",
                       "a tied parameter whose shape, tp, init or decay "
                       "differs from an earlier stage's");
    }
  return 0;
}

static int load_stage(Pj *pj, const cJSON *o, int nkernels, RtProgram *st, int s, int n) {
  static char prefix[32];
  snprintf(prefix, sizeof prefix, "[%d]", s);
  pj->prefix = n > 1 || cJSON_IsArray(o) ? prefix : "";
  memset(&st[s], 0, sizeof st[s]);
  st[s].nkernels = nkernels;
  if (parse_root(pj, o, &st[s]) != 0) return -1;
  if (st[s].mesh.pp != n)
    return pj_fail(pj, "mesh", "pp",
                   n > 1 ? "differs from the number of stages in the array"
                         : "above 1 needs an array of stage programs");
  return s > 0 ? check_stage(pj, st, s) : 0;
}

int program_load_stages(const char *json, int nkernels, RtProgram **stages, int *nstages, char *err, size_t errlen) {
  Pj pj = {err, errlen, "", 0, 0, 0, 0, 0};
  cJSON *root = json ? cJSON_Parse(json) : NULL;
  int arr = cJSON_IsArray(root), n = arr ? cJSON_GetArraySize(root) : 1, done = 0, rc = 0;
  RtProgram *st = NULL;
  if (!root)
    rc = file_set_error(err, errlen, "program: not valid JSON (near byte %ld)",
                        json ? (long)(cJSON_GetErrorPtr() - json) : 0L);
  else if (n < 1 || n > 1 << 16) rc = file_set_error(err, errlen, "program: an array of 1 to 65536 stage programs");
  else if (!(st = calloc((size_t)n, sizeof *st))) rc = file_set_error(err, errlen, "program: out of memory");
  for (; rc == 0 && done < n; done++)
    rc = load_stage(&pj, arr ? cJSON_GetArrayItem(root, done) : root, nkernels, st, done, n);
  cJSON_Delete(root);
  if (rc != 0) {
    program_free_stages(st, done);
    return -1;
  }
  *stages = st, *nstages = n;
  return 0;
}

void program_free_stages(RtProgram *stages, int nstages) {
  for (int s = 0; stages && s < nstages; s++) program_free(&stages[s]);
  free(stages);
}

void program_global_shape(const RtProgram *p, const RtParam *q, int64_t *shape) {
  for (int d = 0; d < q->ndim; d++) shape[d] = q->shape[d] * (d == q->tp_dim ? p->mesh.tp : 1);
}

void program_free(RtProgram *p) {
  free(p->predicted_mem);
  for (int i = 0; i < p->nparams; i++) free(p->params[i].name);
  free(p->params);
  free(p->model);
  for (int i = 0; p->inputs && i < p->ninputs; i++) free(p->inputs[i].name);
  free(p->inputs);
  free(p->arch);
  free(p->step.instr);
  free(p->sync.instr);
  free(p->gradnorm.instr);
  free(p->update.instr);
  free(p->forward.instr);
  free(p->offload.chunks);
  free(p->offload.predicted);
  free(p->fp8.runs);
  for (int i = 0; p->kernel_names && i < p->nkernels; i++) free(p->kernel_names[i]);
  free(p->kernel_names);
  free(p->cuda_launch);
  for (int k = 0; p->stage_groups && k < p->nstage_groups; k++) free(p->stage_groups[k]);
  free(p->stage_groups);
  memset(p, 0, sizeof *p);
}

int program_part_ranges(const RtProgram *p, int c, int part, int64_t off[2]) {
  off[0] = off[1] = p->offload.chunks[c].start;
  off[1] += p->opt_v_offset;
  if (part == RT_TIER_OPT && p->tiers[RT_TIER_OPT] == 0) return 0; /* SGD without momentum: no optimizer state */
  return part == RT_TIER_OPT && p->train.optimizer == RT_OPT_ADAMW ? 2 : 1;
}

int64_t program_part_bytes(const RtProgram *p, int c, int part) {
  int64_t off[2];
  const RtChunk *ch = &p->offload.chunks[c];
  return (ch->end - ch->start) * program_part_ranges(p, c, part, off);
}

const RtParam *program_find_param(const RtProgram *p, const char *name) {
  for (int i = 0; i < p->nparams; i++)
    if (p->params[i].name && strcmp(p->params[i].name, name) == 0) return &p->params[i];
  return NULL;
}
