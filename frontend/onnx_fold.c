/* Constants of the ONNX importer: initialisers that are not parameters, Constant nodes,
 * and every node whose inputs are all constant, computed while the file is read. That
 * is how the shape arithmetic exporters emit (Shape, Gather, Unsqueeze, Concat, Range,
 * Cast, Expand, ...), masks (Trilu, Where, Equal, Not) and tables (Cos, Sin of
 * positions) disappear before anything reaches the IR. Floats are doubles rounded to
 * their ONNX type after each op, integers int64 (bool 0 or 1). The shape rules here
 * (reshape, unsqueeze, slice, split, ...) serve the run-time ops too (onnx_ops.c). */
#include <math.h>
#include <string.h>
#include "frontend/onnx_imp.h"
#include "ir/interp.h"

/* Bounds on what a file may make the importer compute: one constant, and all of them. */
enum { MAX_CONST_ELEMS = 1 << 24 };
#define MAX_FOLDED ((int64_t)1 << 27)

/* ---- tensors ----------------------------------------------------------------------- */

bool ot_is_float(int t) { return t == OT_FLOAT || t == OT_DOUBLE || t == OT_FLOAT16 || t == OT_BFLOAT16; }

static bool ot_is_int(int t) {
  return t == OT_INT8 || t == OT_INT16 || t == OT_INT32 || t == OT_INT64 || t == OT_UINT8 || t == OT_UINT16 ||
         t == OT_UINT32 || t == OT_UINT64 || t == OT_BOOL;
}

OTensor *ot_new(Imp *m, const ONode *at, int type, const Shape *s) {
  if (!ot_is_float(type) && !ot_is_int(type))
    imp_error(at, "constants of ONNX element type %d are not supported", type);
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) {
    if (s->d[i] < 0) imp_error(at, "a constant with a negative dimension");
    if (s->d[i] && n > MAX_CONST_ELEMS / s->d[i]) imp_error(at, "a constant of more than 2^24 elements");
    n *= s->d[i];
  }
  if ((m->folded += n) > MAX_FOLDED) imp_error(at, "constants of more than 2^27 elements in all");
  OTensor *t = arena_alloc(m->a, sizeof *t);
  t->type = type, t->shape = *s, t->n = n;
  if (ot_is_float(type)) t->f = arena_array(m->a, n ? n : 1, sizeof *t->f);
  else t->i = arena_array(m->a, n ? n : 1, sizeof *t->i);
  return t;
}

static double round_to(int type, double v) {
  return type == OT_FLOAT      ? interp_round(v, DT_F32)
         : type == OT_FLOAT16  ? interp_round(v, DT_F16)
         : type == OT_BFLOAT16 ? interp_round(v, DT_BF16)
                               : v;
}

static int64_t to_int64(double v) {
  return v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
}

static int64_t wrap_int(int type, int64_t v) {
  switch (type) {
  case OT_BOOL: return v != 0;
  case OT_INT8: return (int8_t)v;
  case OT_INT16: return (int16_t)v;
  case OT_INT32: return (int32_t)v;
  case OT_UINT8: return (uint8_t)v;
  case OT_UINT16: return (uint16_t)v;
  case OT_UINT32: return (uint32_t)v;
  default: return v;
  }
}

double ot_get(const OTensor *t, int64_t k) { return t->f ? t->f[k] : (double)t->i[k]; }
static int64_t ot_geti(const OTensor *t, int64_t k) { return t->f ? to_int64(t->f[k]) : t->i[k]; }
static void ot_set(OTensor *t, int64_t k, double v) {
  if (t->f) t->f[k] = round_to(t->type, v);
  else t->i[k] = wrap_int(t->type, t->type == OT_BOOL ? v != 0 : to_int64(v));
}
static void ot_seti(OTensor *t, int64_t k, int64_t v) {
  if (t->f) t->f[k] = round_to(t->type, (double)v);
  else t->i[k] = wrap_int(t->type, v);
}

bool ot_uniform(const OTensor *t, double *v) {
  if (!t->n) return false;
  for (int64_t k = 1; k < t->n; k++)
    if (ot_get(t, k) != ot_get(t, 0)) return false;
  *v = ot_get(t, 0);
  return true;
}

int64_t ot_ints(const ONode *n, const OTensor *t, int64_t *v, int max, const char *what) {
  if (ot_is_float(t->type) || t->shape.ndim > 1) imp_error(n, "%s must be a list of integers", what);
  if (t->n > max) imp_error(n, "%s has %lld entries; at most %d are supported", what, (long long)t->n, max);
  for (int64_t k = 0; k < t->n; k++) v[k] = t->i[k];
  return t->n;
}

const OTensor *need_const(const ONode *n, int i, const char *what) {
  if (i >= n->nin || !n->in[i]) imp_error(n, "%s (input %d) is missing", what, i + 1);
  if (n->in[i]->kind != OV_CONST)
    imp_error(n, "%s (input %d) must be a constant: here it is computed from the data at run time", what, i + 1);
  return n->in[i]->c;
}

/* An f16 or bf16 bit pattern as a double. */
static double half_bits(int type, uint16_t h) {
  if (type == OT_BFLOAT16) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  int e = h >> 10 & 31, f = h & 1023;
  double v = e == 0 ? ldexp(f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexp(f + 1024, e - 25);
  return h >> 15 ? -v : v;
}

static int elem_bytes(int type) {
  switch (type) {
  case OT_INT8:
  case OT_UINT8:
  case OT_BOOL: return 1;
  case OT_INT16:
  case OT_UINT16:
  case OT_FLOAT16:
  case OT_BFLOAT16: return 2;
  case OT_INT32:
  case OT_UINT32:
  case OT_FLOAT: return 4;
  default: return 8;
  }
}

/* Element k of little-endian raw bytes. */
static double raw_at(int type, const uint8_t *p) {
  uint64_t u = 0;
  memcpy(&u, p, elem_bytes(type));
  switch (type) {
  case OT_FLOAT: {
    float f;
    uint32_t w = (uint32_t)u;
    memcpy(&f, &w, 4);
    return f;
  }
  case OT_DOUBLE: {
    double d;
    memcpy(&d, &u, 8);
    return d;
  }
  case OT_FLOAT16:
  case OT_BFLOAT16: return half_bits(type, (uint16_t)u);
  case OT_INT8: return (int8_t)u;
  case OT_INT16: return (int16_t)u;
  case OT_INT32: return (int32_t)u;
  default: return 0; /* (integers wider than 32 bits go through raw_int) */
  }
}

static int64_t raw_int(int type, const uint8_t *p) {
  uint64_t u = 0;
  memcpy(&u, p, elem_bytes(type));
  if (type == OT_INT64 || type == OT_UINT64) return (int64_t)u;
  if (type == OT_UINT8 || type == OT_UINT16 || type == OT_UINT32 || type == OT_BOOL) return (int64_t)u;
  return (int64_t)raw_at(type, p);
}

/* The values of a TensorProto (raw_data, or the typed field its type is kept in). */
OTensor *ot_from_proto(Imp *m, const ONode *at, const Onnx__TensorProto *p) {
  if (!p->has_data_type || p->data_type == OT_STRING) imp_error(at, "a tensor without a numeric element type");
  if (p->has_data_location && p->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    imp_error(at, "a tensor stored outside the file (external data)");
  if (p->n_dims > MAX_DIMS)
    imp_error(at, "a constant of %zu dimensions; at most %d are supported", p->n_dims, MAX_DIMS);
  Shape s = {(int)p->n_dims, {0}};
  for (int i = 0; i < s.ndim; i++) s.d[i] = p->dims[i];
  OTensor *t = ot_new(m, at, p->data_type, &s);
  int type = t->type;
  size_t have = p->has_raw_data                          ? p->raw_data.len / elem_bytes(type)
                : type == OT_FLOAT                       ? p->n_float_data
                : type == OT_DOUBLE                      ? p->n_double_data
                : type == OT_INT64                       ? p->n_int64_data
                : type == OT_UINT32 || type == OT_UINT64 ? p->n_uint64_data
                                                         : p->n_int32_data;
  if (have != (size_t)t->n || (p->has_raw_data && p->raw_data.len != (size_t)t->n * elem_bytes(type)))
    imp_error(at, "a constant holds %zu values for %lld elements", have, (long long)t->n);
  for (int64_t k = 0; k < t->n; k++) {
    if (p->has_raw_data) {
      const uint8_t *b = p->raw_data.data + k * elem_bytes(type);
      if (t->f) t->f[k] = raw_at(type, b);
      else t->i[k] = wrap_int(type, raw_int(type, b));
    } else if (type == OT_FLOAT) t->f[k] = p->float_data[k];
    else if (type == OT_DOUBLE) t->f[k] = p->double_data[k];
    else if (type == OT_FLOAT16 || type == OT_BFLOAT16) t->f[k] = half_bits(type, (uint16_t)p->int32_data[k]);
    else if (type == OT_INT64) t->i[k] = p->int64_data[k];
    else if (type == OT_UINT32 || type == OT_UINT64) t->i[k] = wrap_int(type, (int64_t)p->uint64_data[k]);
    else t->i[k] = wrap_int(type, p->int32_data[k]);
  }
  return t;
}

/* ---- shape rules (for constants and run-time values alike) ---------------------------- */

int norm_axis(const ONode *n, int64_t axis, int ndim) {
  if (axis < -ndim || axis >= ndim)
    imp_error(n, "axis %lld is out of range for a tensor of %d dimensions", (long long)axis, ndim);
  return (int)(axis < 0 ? axis + ndim : axis);
}

static int64_t numel_of(const ONode *n, const Shape *s) {
  int64_t k = 1;
  for (int i = 0; i < s->ndim; i++) {
    if (s->d[i] && k > MAX_NUMEL / s->d[i]) imp_error(n, "a tensor of more than 2^48 elements");
    k *= s->d[i];
  }
  return k;
}

/* Reshape's target: 0 copies the input's dimension (unless allowzero), -1 is inferred. */
void shape_reshape(const ONode *n, const Shape *in, const int64_t *spec, int k, bool allowzero, Shape *out) {
  int64_t known = 1, total = numel_of(n, in);
  int infer = -1;
  out->ndim = k;
  for (int i = 0; i < k; i++) {
    int64_t v = spec[i] == 0 && !allowzero ? (i < in->ndim ? in->d[i] : -2) : spec[i];
    if (v == -1 && infer < 0) {
      infer = i;
      continue;
    }
    if (v < 0 || v > MAX_NUMEL) imp_error(n, "bad dimension %lld in the new shape", (long long)spec[i]);
    if (v && known > MAX_NUMEL / v) imp_error(n, "the new shape is too large");
    known *= v;
    out->d[i] = v;
  }
  if (infer >= 0) {
    if (!known || total % known)
      imp_error(n, "cannot infer the -1 dimension: %lld elements do not divide by %lld", (long long)total,
                (long long)known);
    out->d[infer] = total / known;
    known = total;
  }
  if (known != total) imp_error(n, "%lld elements cannot be reshaped into %lld", (long long)total, (long long)known);
}

/* The axes of Unsqueeze, Squeeze and the reductions: an attribute before opset 13 (18
 * for the reductions but ReduceSum), an input after. -1 when none are given. */
int node_axes(const ONode *n, int input, int since, int64_t *axes) {
  if (n->opset < since) return attr_ints(n, "axes", axes, MAX_DIMS);
  if (input >= n->nin || !n->in[input]) return -1;
  return (int)ot_ints(n, need_const(n, input, "axes"), axes, MAX_DIMS, "axes");
}

void shape_unsqueeze(const ONode *n, const Shape *in, const int64_t *axes, int k, Shape *out) {
  int nd = in->ndim + k;
  if (k < 0 || nd > MAX_DIMS) imp_error(n, "the result would have %d dimensions", nd);
  bool add[MAX_DIMS] = {0};
  for (int i = 0; i < k; i++) {
    int a = norm_axis(n, axes[i], nd);
    if (add[a]) imp_error(n, "axis %d given twice", a);
    add[a] = true;
  }
  out->ndim = nd;
  for (int i = 0, j = 0; i < nd; i++) out->d[i] = add[i] ? 1 : in->d[j++];
}

void shape_squeeze(const ONode *n, const Shape *in, const int64_t *axes, int k, Shape *out) {
  bool drop[MAX_DIMS] = {0};
  for (int i = 0; i < k; i++) {
    int a = norm_axis(n, axes[i], in->ndim);
    if (in->d[a] != 1) imp_error(n, "axis %d has size %lld, not 1", a, (long long)in->d[a]);
    drop[a] = true;
  }
  out->ndim = 0;
  for (int i = 0; i < in->ndim; i++)
    if (!(k < 0 ? in->d[i] == 1 : drop[i])) out->d[out->ndim++] = in->d[i];
}

void shape_flatten(const ONode *n, const Shape *in, Shape *out) {
  int64_t a = attr_i(n, "axis", 1);
  int axis = a == in->ndim ? in->ndim : norm_axis(n, a, in->ndim);
  Shape lo = {axis, {0}}, hi = {in->ndim - axis, {0}};
  memcpy(lo.d, in->d, axis * sizeof *in->d);
  memcpy(hi.d, in->d + axis, (in->ndim - axis) * sizeof *in->d);
  *out = (Shape){2, {numel_of(n, &lo), numel_of(n, &hi)}};
}

/* Slice's ranges on each axis (start, step, count), from the inputs (opset 10) or the
 * attributes (before), with ONNX's clamping of out-of-range starts and ends. */
void slice_ranges(const ONode *n, const Shape *in, SliceAx *r) {
  int64_t st[MAX_DIMS], en[MAX_DIMS], ax[MAX_DIMS], sp[MAX_DIMS];
  int k, ka = -1, ks = -1;
  if (n->opset < 10) {
    k = attr_ints(n, "starts", st, MAX_DIMS);
    if (k < 0 || attr_ints(n, "ends", en, MAX_DIMS) != k)
      imp_error(n, "starts and ends must be given, as many of each");
    ka = attr_ints(n, "axes", ax, MAX_DIMS);
  } else {
    k = (int)ot_ints(n, need_const(n, 1, "starts"), st, MAX_DIMS, "starts");
    if (ot_ints(n, need_const(n, 2, "ends"), en, MAX_DIMS, "ends") != k)
      imp_error(n, "starts and ends differ in length");
    if (n->nin > 3 && n->in[3]) ka = (int)ot_ints(n, need_const(n, 3, "axes"), ax, MAX_DIMS, "axes");
    if (n->nin > 4 && n->in[4]) ks = (int)ot_ints(n, need_const(n, 4, "steps"), sp, MAX_DIMS, "steps");
  }
  if ((ka >= 0 && ka != k) || (ks >= 0 && ks != k)) imp_error(n, "axes and steps must be as long as starts");
  for (int d = 0; d < in->ndim; d++) r[d] = (SliceAx){0, 1, in->d[d]};
  bool seen[MAX_DIMS] = {0};
  for (int i = 0; i < k; i++) {
    int a = norm_axis(n, ka >= 0 ? ax[i] : i, in->ndim);
    int64_t step = ks >= 0 ? sp[i] : 1, dim = in->d[a], s = st[i], e = en[i];
    if (seen[a]) imp_error(n, "axis %d is sliced twice", a);
    seen[a] = true;
    if (!step) imp_error(n, "a slice step of 0");
    int64_t most = dim > 0 ? dim : 1; /* a longer step takes one element at most */
    step = step > most ? most : step < -most ? -most : step;
    if (s < 0) s = s < -dim ? 0 : s + dim;
    if (e < 0) e = e < -dim ? -1 : e + dim;
    if (step > 0) s = s > dim ? dim : s, e = e > dim ? dim : e;
    else s = s > dim - 1 ? dim - 1 : s, e = e > dim - 1 ? dim - 1 : e;
    int64_t count = step > 0 ? (e > s ? (e - s + step - 1) / step : 0) : (s > e ? (s - e - step - 1) / -step : 0);
    r[a] = (SliceAx){s, step, count};
  }
}

/* Split's part sizes along axis: the split input (opset 13) or attribute, else equal
 * parts (the last one smaller, opset 18). Returns the number of parts. */
int split_sizes(const ONode *n, const Shape *in, int axis, int64_t *sizes) {
  int k = -1;
  if (n->opset >= 13 && n->nin > 1 && n->in[1])
    k = (int)ot_ints(n, need_const(n, 1, "split"), sizes, MAX_SPLIT, "split");
  else if (n->opset < 13) k = attr_ints(n, "split", sizes, MAX_SPLIT);
  int64_t dim = in->d[axis], sum = 0;
  if (k < 0) {
    int parts = n->nout;
    if (parts < 1 || parts > MAX_SPLIT) imp_error(n, "splits into %d parts", parts);
    int64_t each = (dim + parts - 1) / parts;
    for (int i = 0; i < parts; i++) sizes[i] = i < parts - 1 ? each : dim - each * (parts - 1);
    k = parts;
  }
  if (k != n->nout) imp_error(n, "%d split sizes for %d outputs", k, n->nout);
  for (int i = 0; i < k; i++) {
    if (sizes[i] < 0) imp_error(n, "a negative split size");
    if (sizes[i] > dim - sum) imp_error(n, "split sizes add up to more than the axis's %lld", (long long)dim);
    sum += sizes[i];
  }
  if (sum != dim) imp_error(n, "split sizes add up to %lld, not the axis's %lld", (long long)sum, (long long)dim);
  return k;
}

void transpose_perm(const ONode *n, int ndim, int64_t *perm) {
  int k = attr_ints(n, "perm", perm, MAX_DIMS);
  if (k < 0)
    for (int i = 0; i < ndim; i++) perm[i] = ndim - 1 - i;
  else if (k != ndim) imp_error(n, "a permutation of %d axes for a tensor of %d", k, ndim);
  bool seen[MAX_DIMS] = {0};
  for (int i = 0; i < ndim; i++) {
    if (perm[i] < 0 || perm[i] >= ndim || seen[perm[i]]) imp_error(n, "perm is not a permutation");
    seen[perm[i]] = true;
  }
}

typedef enum {
  EW_ADD,
  EW_SUB,
  EW_MUL,
  EW_DIV,
  EW_POW,
  EW_MIN,
  EW_MAX,
  EW_EQ,
  EW_LT,
  EW_GT,
  EW_LE,
  EW_GE,
  EW_AND,
  EW_OR,
  EW_XOR,
  EW_NEG,
  EW_SQRT,
  EW_RECIP,
  EW_EXP,
  EW_LOG,
  EW_COS,
  EW_SIN,
  EW_ABS,
  EW_FLOOR,
  EW_CEIL,
  EW_NOT,
  EW_ERF,
  EW_TANH,
  EW_SIGMOID,
  EW_RELU,
  EW_COUNT
} EwOp;
static int64_t ew_int(const ONode *n, EwOp op, int64_t a, int64_t b);

/* ---- folding ----------------------------------------------------------------------------- */

static void set_const(Imp *m, ONode *n, int k, OTensor *t) {
  if (k < n->nout) n->out[k] = ov_const(m, n, t);
}

static const OTensor *cin(const ONode *n, int i) {
  if (i >= n->nin || !n->in[i]) imp_error(n, "input %d is missing", i + 1);
  return n->in[i]->c;
}

/* The flat index in a tensor of shape `in` that broadcasts to element k of `out`. */
static int64_t bcast_at(const Shape *out, const Shape *in, int64_t k) {
  int64_t idx = 0, stride = 1;
  for (int d = out->ndim - 1, e = in->ndim - 1; d >= 0; d--, e--) {
    int64_t c = k % out->d[d];
    k /= out->d[d];
    if (e >= 0) {
      if (in->d[e] != 1) idx += c * stride;
      stride *= in->d[e];
    }
  }
  return idx;
}

static void fold_constant(Imp *m, ONode *n) {
  const Onnx__AttributeProto *a;
  OTensor *t = NULL;
  Shape s = {0, {0}};
  if ((a = attr_find(n, "value")) && a->t) t = ot_from_proto(m, n, a->t);
  else if ((a = attr_find(n, "value_float"))) (t = ot_new(m, n, OT_FLOAT, &s))->f[0] = a->f;
  else if ((a = attr_find(n, "value_int"))) (t = ot_new(m, n, OT_INT64, &s))->i[0] = a->i;
  else if ((a = attr_find(n, "value_floats"))) {
    s = (Shape){1, {(int64_t)a->n_floats}};
    t = ot_new(m, n, OT_FLOAT, &s);
    for (size_t i = 0; i < a->n_floats; i++) t->f[i] = a->floats[i];
  } else if ((a = attr_find(n, "value_ints"))) {
    s = (Shape){1, {(int64_t)a->n_ints}};
    t = ot_new(m, n, OT_INT64, &s);
    for (size_t i = 0; i < a->n_ints; i++) t->i[i] = a->ints[i];
  } else {
    imp_error(n, "a Constant without a numeric value (string and sparse values are not supported)");
  }
  set_const(m, n, 0, t);
}

static void fold_constant_of_shape(Imp *m, ONode *n) {
  int64_t dims[MAX_DIMS];
  Shape s = {(int)ot_ints(n, cin(n, 0), dims, MAX_DIMS, "the shape"), {0}};
  memcpy(s.d, dims, sizeof dims);
  const Onnx__AttributeProto *a = attr_find(n, "value");
  OTensor *v = a && a->t ? ot_from_proto(m, n, a->t) : NULL;
  if (v && v->n != 1) imp_error(n, "the value must have one element");
  OTensor *t = ot_new(m, n, v ? v->type : OT_FLOAT, &s);
  for (int64_t k = 0; k < t->n; k++) ot_set(t, k, v ? ot_get(v, 0) : 0);
  set_const(m, n, 0, t);
}

/* Shape (of any value: its shape is known when the file is read) and Size. */
static void fold_shape(Imp *m, ONode *n) {
  if (!n->nin || !n->in[0] || n->in[0]->kind == OV_UNSUPPORTED) imp_error(n, "the input's shape is not known");
  const Shape *in = ov_shape(n->in[0]);
  if (!strcmp(n->op, "Size")) {
    Shape s = {0, {0}};
    OTensor *t = ot_new(m, n, OT_INT64, &s);
    t->i[0] = numel_of(n, in);
    set_const(m, n, 0, t);
    return;
  }
  int64_t start = attr_i(n, "start", 0), end = attr_i(n, "end", in->ndim);
  start = start < 0 ? start + in->ndim : start, end = end < 0 ? end + in->ndim : end;
  start = start < 0          ? 0
          : start > in->ndim ? in->ndim
                             : start,
  end = end < start      ? start
        : end > in->ndim ? in->ndim
                         : end;
  Shape s = {1, {end - start}};
  OTensor *t = ot_new(m, n, OT_INT64, &s);
  for (int64_t k = start; k < end; k++) t->i[k - start] = in->d[k];
  set_const(m, n, 0, t);
}

static void fold_identity(Imp *m, ONode *n) {
  if (n->nout) n->out[0] = n->in[0];
}

/* x's values (as many as s holds) in a tensor of another type: floats round to it or
 * truncate toward zero, integers convert exactly. */
static OTensor *copy_as(Imp *m, const ONode *n, const OTensor *x, int type, const Shape *s) {
  OTensor *t = ot_new(m, n, type, s);
  for (int64_t k = 0; k < t->n; k++) {
    if (x->f) ot_set(t, k, x->f[k]);
    else ot_seti(t, k, x->i[k]);
  }
  return t;
}

/* Element src of x into element dst of t, of the same type. */
static void copy_elem(OTensor *t, int64_t dst, const OTensor *x, int64_t src) {
  if (t->f) t->f[dst] = x->f[src];
  else t->i[dst] = x->i[src];
}

static void fold_cast(Imp *m, ONode *n) {
  const OTensor *x = cin(n, 0);
  int to = (int)attr_i(n, "to", 0);
  set_const(m, n, 0, copy_as(m, n, x, to, &x->shape));
}

/* Reshape, Unsqueeze, Squeeze, Flatten: the same values in a new shape. */
static void fold_reshape(Imp *m, ONode *n) {
  const OTensor *x = cin(n, 0);
  Shape s;
  int64_t v[MAX_DIMS];
  if (!strcmp(n->op, "Reshape")) {
    int k = (int)ot_ints(n, need_const(n, 1, "shape"), v, MAX_DIMS, "the shape");
    shape_reshape(n, &x->shape, v, k, attr_i(n, "allowzero", 0), &s);
  } else if (!strcmp(n->op, "Unsqueeze")) {
    shape_unsqueeze(n, &x->shape, v, node_axes(n, 1, 13, v), &s);
  } else if (!strcmp(n->op, "Squeeze")) {
    shape_squeeze(n, &x->shape, v, node_axes(n, 1, 13, v), &s);
  } else {
    shape_flatten(n, &x->shape, &s);
  }
  set_const(m, n, 0, copy_as(m, n, x, x->type, &s));
}

static void fold_concat(Imp *m, ONode *n) {
  const OTensor *x = cin(n, 0);
  int axis = norm_axis(n, attr_i(n, "axis", 0), x->shape.ndim);
  Shape s = x->shape;
  s.d[axis] = 0;
  for (int i = 0; i < n->nin; i++) {
    const OTensor *y = cin(n, i);
    bool ok = y->type == x->type && y->shape.ndim == s.ndim;
    for (int d = 0; ok && d < s.ndim; d++) ok = d == axis || y->shape.d[d] == s.d[d];
    if (!ok) imp_error(n, "inputs 1 and %d differ in type or outside the axis", i + 1);
    s.d[axis] += y->shape.d[axis];
  }
  OTensor *t = ot_new(m, n, x->type, &s);
  int64_t outer = 1, off = 0;
  for (int d = 0; d < axis; d++) outer *= s.d[d];
  for (int i = 0; i < n->nin; i++) {
    const OTensor *y = cin(n, i);
    int64_t inner = outer ? y->n / outer : 0, row = outer ? t->n / outer : 0;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t k = 0; k < inner; k++) copy_elem(t, o * row + off + k, y, o * inner + k);
    off += inner;
  }
  set_const(m, n, 0, t);
}

static void fold_gather(Imp *m, ONode *n) {
  const OTensor *x = cin(n, 0), *ix = cin(n, 1);
  if (ot_is_float(ix->type)) imp_error(n, "the indices must be integers");
  int axis = norm_axis(n, attr_i(n, "axis", 0), x->shape.ndim);
  Shape s = {0, {0}};
  for (int d = 0; d < axis; d++) s.d[s.ndim++] = x->shape.d[d];
  if (s.ndim + ix->shape.ndim + x->shape.ndim - axis - 1 > MAX_DIMS) imp_error(n, "the result has too many dimensions");
  for (int d = 0; d < ix->shape.ndim; d++) s.d[s.ndim++] = ix->shape.d[d];
  for (int d = axis + 1; d < x->shape.ndim; d++) s.d[s.ndim++] = x->shape.d[d];
  OTensor *t = ot_new(m, n, x->type, &s);
  int64_t dim = x->shape.d[axis], inner = 1;
  for (int d = axis + 1; d < x->shape.ndim; d++) inner *= x->shape.d[d];
  for (int64_t k = 0; k < t->n; k++) {
    int64_t in = k % inner, j = (k / inner) % (ix->n ? ix->n : 1), o = k / inner / (ix->n ? ix->n : 1);
    int64_t at = ix->i[j] < 0 ? ix->i[j] + dim : ix->i[j];
    if (at < 0 || at >= dim)
      imp_error(n, "index %lld is out of range for an axis of %lld", (long long)ix->i[j], (long long)dim);
    int64_t src = (o * dim + at) * inner + in;
    copy_elem(t, k, x, src);
  }
  set_const(m, n, 0, t);
}

static void fold_slice(Imp *m, ONode *n) {
  const OTensor *x = cin(n, 0);
  SliceAx r[MAX_DIMS];
  slice_ranges(n, &x->shape, r);
  Shape s = x->shape;
  for (int d = 0; d < s.ndim; d++) s.d[d] = r[d].count;
  OTensor *t = ot_new(m, n, x->type, &s);
  for (int64_t k = 0; k < t->n; k++) {
    int64_t src = 0, rest = k, stride = 1;
    for (int d = s.ndim - 1; d >= 0; d--) {
      int64_t c = rest % s.d[d];
      rest /= s.d[d];
      src += (r[d].start + c * r[d].step) * stride;
      stride *= x->shape.d[d];
    }
    copy_elem(t, k, x, src);
  }
  set_const(m, n, 0, t);
}

static void fold_transpose(Imp *m, ONode *n) {
  const OTensor *x = cin(n, 0);
  int64_t perm[MAX_DIMS], st[MAX_DIMS];
  transpose_perm(n, x->shape.ndim, perm);
  Shape s = {x->shape.ndim, {0}};
  int64_t acc = 1;
  for (int d = 0; d < s.ndim; d++) s.d[d] = x->shape.d[perm[d]];
  for (int d = s.ndim - 1; d >= 0; d--) st[d] = acc, acc *= x->shape.d[d];
  OTensor *t = ot_new(m, n, x->type, &s);
  for (int64_t k = 0; k < t->n; k++) {
    int64_t src = 0, rest = k;
    for (int d = s.ndim - 1; d >= 0; d--) src += (rest % s.d[d]) * st[perm[d]], rest /= s.d[d];
    copy_elem(t, k, x, src);
  }
  set_const(m, n, 0, t);
}

static void fold_expand(Imp *m, ONode *n) {
  const OTensor *x = cin(n, 0);
  int64_t v[MAX_DIMS];
  Shape want = {(int)ot_ints(n, need_const(n, 1, "shape"), v, MAX_DIMS, "the shape"), {0}}, s;
  memcpy(want.d, v, sizeof v);
  if (!shape_broadcast(&x->shape, &want, &s)) imp_error(n, "the input does not broadcast to the shape");
  OTensor *t = ot_new(m, n, x->type, &s);
  for (int64_t k = 0; k < t->n; k++) {
    int64_t src = bcast_at(&s, &x->shape, k);
    copy_elem(t, k, x, src);
  }
  set_const(m, n, 0, t);
}

static void fold_range(Imp *m, ONode *n) {
  const OTensor *a = cin(n, 0), *b = cin(n, 1), *c = cin(n, 2);
  if (a->n != 1 || b->n != 1 || c->n != 1) imp_error(n, "start, limit and delta must be scalars");
  if (a->type != b->type || a->type != c->type) imp_error(n, "start, limit and delta must be of one type");
  double start = ot_get(a, 0), limit = ot_get(b, 0), delta = ot_get(c, 0);
  if (delta == 0 || !isfinite(start) || !isfinite(limit) || !isfinite(delta)) imp_error(n, "a bad range");
  double count = ceil((limit - start) / delta);
  if (count > MAX_CONST_ELEMS) imp_error(n, "a range of more than 2^24 elements");
  Shape s = {1, {count > 0 ? (int64_t)count : 0}};
  OTensor *t = ot_new(m, n, a->type, &s);
  for (int64_t k = 0; k < t->n; k++) {
    if (t->f) t->f[k] = round_to(t->type, start + (double)k * delta);
    else t->i[k] = wrap_int(t->type, ew_int(n, EW_ADD, a->i[0], ew_int(n, EW_MUL, k, c->i[0])));
  }
  set_const(m, n, 0, t);
}

static void fold_trilu(Imp *m, ONode *n) {
  const OTensor *x = cin(n, 0);
  if (x->shape.ndim < 2) imp_error(n, "the input must have at least 2 dimensions");
  int64_t k = n->nin > 1 && n->in[1] ? ot_geti(cin(n, 1), 0) : 0, upper = attr_i(n, "upper", 1);
  int64_t rows = x->shape.d[x->shape.ndim - 2], cols = x->shape.d[x->shape.ndim - 1];
  OTensor *t = ot_new(m, n, x->type, &x->shape);
  for (int64_t e = 0; e < t->n; e++) {
    int64_t j = e % cols, i = (e / cols) % rows;
    bool keep = upper ? j - i >= k : j - i <= k;
    if (t->f) t->f[e] = keep ? x->f[e] : 0;
    else t->i[e] = keep ? x->i[e] : 0;
  }
  set_const(m, n, 0, t);
}

static void fold_split(Imp *m, ONode *n) {
  const OTensor *x = cin(n, 0);
  int axis = norm_axis(n, attr_i(n, "axis", 0), x->shape.ndim);
  int64_t sizes[MAX_SPLIT], inner = 1, off = 0;
  int parts = split_sizes(n, &x->shape, axis, sizes);
  for (int d = axis + 1; d < x->shape.ndim; d++) inner *= x->shape.d[d];
  for (int p = 0; p < parts; p++) {
    Shape s = x->shape;
    s.d[axis] = sizes[p];
    OTensor *t = ot_new(m, n, x->type, &s);
    for (int64_t k = 0; k < t->n; k++) {
      int64_t in = k % inner, a = (k / inner) % (sizes[p] ? sizes[p] : 1), o = k / inner / (sizes[p] ? sizes[p] : 1);
      int64_t src = (o * x->shape.d[axis] + off + a) * inner + in;
      copy_elem(t, k, x, src);
    }
    off += sizes[p];
    set_const(m, n, p, t);
  }
}

/* ---- elementwise ------------------------------------------------------------------ */

static const char *const ew_names[EW_COUNT] = {"Add",  "Sub",   "Mul",  "Div",     "Pow",         "Min",
                                               "Max",  "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                                               "And",  "Or",    "Xor",  "Neg",     "Sqrt",        "Reciprocal",
                                               "Exp",  "Log",   "Cos",  "Sin",     "Abs",         "Floor",
                                               "Ceil", "Not",   "Erf",  "Tanh",    "Sigmoid",     "Relu"};

static int ew_of(const char *op) {
  for (int i = 0; i < EW_COUNT; i++)
    if (!strcmp(ew_names[i], op)) return i;
  return -1;
}

static double ew_unary(EwOp op, double x) {
  switch ((int)op) { /* (the others are not this kind of op) */
  case EW_NEG: return -x;
  case EW_SQRT: return sqrt(x);
  case EW_RECIP: return 1 / x;
  case EW_EXP: return exp(x);
  case EW_LOG: return log(x);
  case EW_COS: return cos(x);
  case EW_SIN: return sin(x);
  case EW_ABS: return fabs(x);
  case EW_FLOOR: return floor(x);
  case EW_CEIL: return ceil(x);
  case EW_NOT: return !x;
  case EW_ERF: return erf(x);
  case EW_TANH: return tanh(x);
  case EW_SIGMOID: return 1 / (1 + exp(-x));
  case EW_RELU: return x > 0 ? x : 0;
  default: unreachable();
  }
}

/* Integer arithmetic stays exact (division truncates, as ONNX's does); floats in double. */
static int64_t ew_int(const ONode *n, EwOp op, int64_t a, int64_t b) {
  int64_t r;
  switch ((int)op) { /* (the others are not this kind of op) */
  case EW_ADD:
    if (__builtin_add_overflow(a, b, &r)) imp_error(n, "integer overflow");
    return r;
  case EW_SUB:
    if (__builtin_sub_overflow(a, b, &r)) imp_error(n, "integer overflow");
    return r;
  case EW_MUL:
    if (__builtin_mul_overflow(a, b, &r)) imp_error(n, "integer overflow");
    return r;
  case EW_DIV:
    if (!b || (a == INT64_MIN && b == -1)) imp_error(n, "integer division by zero (or overflow)");
    return a / b;
  default: unreachable();
  }
}

static double ew_binary(EwOp op, double a, double b) {
  switch ((int)op) { /* (the others are not this kind of op) */
  case EW_ADD: return a + b;
  case EW_SUB: return a - b;
  case EW_MUL: return a * b;
  case EW_DIV: return a / b;
  case EW_POW: return pow(a, b);
  case EW_MIN: return a < b ? a : b;
  case EW_MAX: return a > b ? a : b;
  case EW_EQ: return a == b;
  case EW_LT: return a < b;
  case EW_GT: return a > b;
  case EW_LE: return a <= b;
  case EW_GE: return a >= b;
  case EW_AND: return a && b;
  case EW_OR: return a || b;
  case EW_XOR: return !a != !b;
  default: unreachable();
  }
}

int ew_arity(const char *op) {
  int k = ew_of(op);
  return k < 0 ? 0 : k >= EW_NEG ? 1 : 2;
}

double ew_apply(const char *op, double a, double b) {
  int k = ew_of(op);
  return k >= EW_NEG ? ew_unary((EwOp)k, a) : ew_binary((EwOp)k, a, b);
}

static void fold_elementwise(Imp *m, ONode *n) {
  EwOp op = ew_of(n->op);
  if (op >= EW_NEG) {
    const OTensor *x = cin(n, 0);
    OTensor *t = ot_new(m, n, x->type, &x->shape);
    for (int64_t k = 0; k < t->n; k++) ot_set(t, k, ew_unary(op, ot_get(x, k)));
    set_const(m, n, 0, t);
    return;
  }
  if (n->nin != 2) imp_error(n, "%s of %d inputs is not supported", n->op, n->nin);
  const OTensor *a = cin(n, 0), *b = cin(n, 1);
  Shape s;
  if (!shape_broadcast(&a->shape, &b->shape, &s)) imp_error(n, "the inputs' shapes do not broadcast");
  bool cmp = op >= EW_EQ;
  OTensor *t = ot_new(m, n, cmp ? OT_BOOL : a->type, &s);
  bool ints = !ot_is_float(a->type) && !ot_is_float(b->type) && op <= EW_DIV;
  for (int64_t k = 0; k < t->n; k++) {
    int64_t ia = bcast_at(&s, &a->shape, k), ib = bcast_at(&s, &b->shape, k);
    if (ints) ot_seti(t, k, ew_int(n, op, a->i[ia], b->i[ib]));
    else ot_set(t, k, ew_binary(op, ot_get(a, ia), ot_get(b, ib)));
  }
  set_const(m, n, 0, t);
}

static void fold_where(Imp *m, ONode *n) {
  const OTensor *c = cin(n, 0), *x = cin(n, 1), *y = cin(n, 2);
  Shape s1, s;
  if (!shape_broadcast(&c->shape, &x->shape, &s1) || !shape_broadcast(&s1, &y->shape, &s))
    imp_error(n, "the inputs' shapes do not broadcast");
  if (x->type != y->type) imp_error(n, "the two value inputs must be of one type");
  OTensor *t = ot_new(m, n, x->type, &s);
  for (int64_t k = 0; k < t->n; k++) {
    bool take = ot_get(c, bcast_at(&s, &c->shape, k)) != 0;
    const OTensor *src = take ? x : y;
    int64_t at = bcast_at(&s, &src->shape, k);
    if (t->f) t->f[k] = ot_get(src, at);
    else t->i[k] = src->i[at];
  }
  set_const(m, n, 0, t);
}

/* Folders by op type. any_input: computed from the input's shape, whatever its kind. */
static const struct {
  const char *op;
  void (*fn)(Imp *, ONode *);
  bool any_input;
} folds[] = {
    {"Constant", fold_constant, true},  {"Shape", fold_shape, true},
    {"Size", fold_shape, true},         {"ConstantOfShape", fold_constant_of_shape, false},
    {"Identity", fold_identity, false}, {"Cast", fold_cast, false},
    {"Reshape", fold_reshape, false},   {"Unsqueeze", fold_reshape, false},
    {"Squeeze", fold_reshape, false},   {"Flatten", fold_reshape, false},
    {"Concat", fold_concat, false},     {"Gather", fold_gather, false},
    {"Slice", fold_slice, false},       {"Transpose", fold_transpose, false},
    {"Expand", fold_expand, false},     {"Range", fold_range, false},
    {"Trilu", fold_trilu, false},       {"Split", fold_split, false},
    {"Where", fold_where, false},
};

bool fold_node(Imp *m, ONode *n) {
  void (*fn)(Imp *, ONode *) = ew_of(n->op) >= 0 ? fold_elementwise : NULL;
  bool any = false;
  for (size_t i = 0; !fn && i < sizeof folds / sizeof *folds; i++)
    if (!strcmp(folds[i].op, n->op)) fn = folds[i].fn, any = folds[i].any_input;
  if (!fn || (!n->nin && !any)) return false;
  for (int i = 0; !any && i < n->nin; i++)
    if (n->in[i] && n->in[i]->kind != OV_CONST) return false;
  fn(m, n);
  return true;
}
