/* The op table, built from ir/ops.def: names, arities, attribute specs, and the
 * per-op functions. Also dtype and shape helpers every stage uses. */
#include "ir/ir.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ir/opfuncs.h"

static const OpInfo op_table[OP_COUNT] = {
#define OP(id, name, nin, cls, flags, attrs) [OP_##id] = {#name, nin, cls, flags, attrs, infer_##name, cost_##name},
#include "ir/ops.def"
#undef OP
};

static AttrSpec attr_specs[OP_COUNT][MAX_ATTRS];
static int attr_count[OP_COUNT];

static const char *attr_kind_names[] = {"int", "float", "bool", "ints", "dtype", "str"};

/* Parse one "name:kind[=default]" item of an op's attribute text. */
static void parse_attr_spec(AttrSpec *s, const char *item, size_t len) {
  char buf[64];
  if (len >= sizeof buf) diag_internal(__FILE__, __LINE__, "attribute spec too long");
  memcpy(buf, item, len);
  buf[len] = 0;
  char *colon = strchr(buf, ':'), *eq = strchr(buf, '=');
  if (!colon) diag_internal(__FILE__, __LINE__, "attribute spec without kind");
  *colon = 0;
  if (eq) *eq = 0;
  s->name = strdup(buf);
  s->kind = (AttrKind)-1;
  for (int k = 0; k < 6; k++)
    if (!strcmp(colon + 1, attr_kind_names[k])) s->kind = (AttrKind)k;
  if ((int)s->kind < 0) diag_internal(__FILE__, __LINE__, "bad attribute kind in ops.def");
  s->required = !eq;
  s->optional = eq && !strcmp(eq + 1, "?");
  s->def = eq && !s->optional ? strtod(eq + 1, NULL) : 0;
}

void op_table_init(void) {
  static bool done;
  if (done) return;
  done = true;
  for (int op = 0; op < OP_COUNT; op++) {
    const char *p = op_table[op].attr_text;
    while (*p) {
      while (*p == ' ') p++;
      if (!*p) break;
      size_t len = strcspn(p, " ");
      if (attr_count[op] == MAX_ATTRS) diag_internal(__FILE__, __LINE__, "too many attributes");
      parse_attr_spec(&attr_specs[op][attr_count[op]++], p, len);
      p += len;
    }
  }
}

const OpInfo *op_info(OpKind op) {
  ir_assert(op >= 0 && op < OP_COUNT);
  return &op_table[op];
}
int op_nattrs(OpKind op) {
  op_table_init();
  return attr_count[op];
}
const AttrSpec *op_attr(OpKind op, int i) {
  op_table_init();
  return &attr_specs[op][i];
}

int op_attr_index(OpKind op, const char *name) {
  op_table_init();
  for (int i = 0; i < attr_count[op]; i++)
    if (!strcmp(attr_specs[op][i].name, name)) return i;
  return -1;
}

int op_lookup(const char *name) {
  for (int op = 0; op < OP_COUNT; op++)
    if (!strcmp(op_table[op].name, name)) return op;
  return -1;
}

/* ---- dtypes ---------------------------------------------------------------- */

static const struct {
  const char *name;
  int bits;
  bool is_float;
} dtypes[DT_COUNT] = {
    [DT_F32] = {"f32", 32, true},  [DT_BF16] = {"bf16", 16, true}, [DT_F16] = {"f16", 16, true},
    [DT_E4M3] = {"e4m3", 8, true}, [DT_E5M2] = {"e5m2", 8, true},  [DT_I32] = {"i32", 32, false},
};

const char *dtype_name(DType t) { return t >= 0 && t < DT_COUNT ? dtypes[t].name : "?"; }
int dtype_size_bits(DType t) { return dtypes[t].bits; }
bool dtype_is_float(DType t) { return dtypes[t].is_float; }

int dtype_lookup(const char *name) {
  for (int t = 0; t < DT_COUNT; t++)
    if (!strcmp(dtypes[t].name, name)) return t;
  return -1;
}

/* ---- shapes ---------------------------------------------------------------- */

int64_t shape_numel(const Shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->d[i]; /* bounded by MAX_NUMEL at creation */
  return n;
}

bool shape_eq(const Shape *a, const Shape *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->d[i] != b->d[i]) return false;
  return true;
}

int shape_format(char *buf, size_t len, const Shape *s) {
  int k = snprintf(buf, len, "[");
  for (int i = 0; i < s->ndim && k < (int)len; i++)
    k += snprintf(buf + k, len - k, "%s%" PRId64, i ? ", " : "", s->d[i]);
  if (k < (int)len) k += snprintf(buf + k, len - k, "]");
  return k;
}
