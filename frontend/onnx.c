/* The ONNX front end (docs/onnx.md): decode the file with protobuf-c, walk the graph's
 * nodes in file order (ONNX's topological order), folding what is constant
 * (onnx_fold.c), importing the ops on run-time values (onnx_ops.c) and recognising
 * the patterns exporters spell out op by op (onnx_match.c); then prune the IR nodes
 * that no longer reach the loss (the parts of a pattern that became one op) and verify.
 *
 * Every allocation, protobuf-c's included, is in the compilation's arena, so an error
 * anywhere unwinds (longjmp) without a leak. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "frontend/onnx_imp.h"

/* Bounds that turn a hostile file into an error rather than a crash: sub-messages
 * nested deeper than any ONNX file nests them (protobuf-c's decoder recurses), values
 * materialised inside each other (the importer recurses), and opsets newer than the
 * op semantics written here. */
enum { MAX_PB_DEPTH = 32, MAX_MATERIALISE_DEPTH = 200, MAX_OPSET = 21, MAX_SHOWN = 120 };

/* ---- errors and locations ------------------------------------------------------ */

void imp_error(const ONode *n, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  error_at(n->loc, "%s", msg);
}

/* A location that names what it is about, "FILE: node '/h.0/attn/MatMul' (MatMul,
 * opset 14)"; errors there print no line (the file is binary). */
static SrcLoc loc_named(Imp *m, const char *what) {
  SrcFile *f = arena_alloc(m->a, sizeof *f);
  f->name = what ? arena_printf(m->a, "%s: %s", m->path, what) : m->path;
  return (SrcLoc){f, 0, 0};
}

static _Noreturn void file_error(Imp *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void file_error(Imp *m, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  error_at(loc_named(m, NULL), "%s", msg);
}

static const char *str(const char *s) { return s ? s : ""; }

/* A name from the file as it is shown in messages: printable, and not too long. */
static const char *shown(Arena *a, const char *s) {
  size_t n = strlen(s);
  char *t = arena_strndup(a, s, n > MAX_SHOWN ? MAX_SHOWN : n);
  for (char *c = t; *c; c++)
    if (!isprint((unsigned char)*c)) *c = '?';
  return n > MAX_SHOWN ? arena_printf(a, "%s...", t) : t;
}

/* ---- attributes ---------------------------------------------------------------- */

const Onnx__AttributeProto *attr_find(const ONode *n, const char *name) {
  for (size_t i = 0; i < n->p->n_attribute; i++)
    if (!strcmp(str(n->p->attribute[i]->name), name)) return n->p->attribute[i];
  return NULL;
}

static const Onnx__AttributeProto *attr_typed(const ONode *n, const char *name, Onnx__AttributeProto__AttributeType t) {
  const Onnx__AttributeProto *a = attr_find(n, name);
  if (a && a->has_type && a->type != t) imp_error(n, "attribute '%s' has the wrong type", name);
  return a;
}

int64_t attr_i(const ONode *n, const char *name, int64_t def) {
  const Onnx__AttributeProto *a = attr_typed(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  return a ? a->i : def;
}

double attr_f(const ONode *n, const char *name, double def) {
  const Onnx__AttributeProto *a = attr_typed(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  return a ? a->f : def;
}

const char *attr_s(const ONode *n, const char *name, const char *def) {
  const Onnx__AttributeProto *a = attr_typed(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  if (!a) return def;
  return a->s.len ? arena_strndup(n->a, (const char *)a->s.data, a->s.len) : "";
}

int attr_ints(const ONode *n, const char *name, int64_t *v, int max) {
  const Onnx__AttributeProto *a = attr_typed(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  if (!a) return -1;
  if (a->n_ints > (size_t)max)
    imp_error(n, "attribute '%s' has %zu entries; at most %d are supported", name, a->n_ints, max);
  for (size_t i = 0; i < a->n_ints; i++) v[i] = a->ints[i];
  return (int)a->n_ints;
}

/* ---- values and IR nodes --------------------------------------------------------- */

OVal *ov_new(Imp *m, ONode *def, OValKind kind) {
  OVal *v = arena_alloc(m->a, sizeof *v);
  v->kind = kind;
  v->def = def;
  return v;
}

OVal *ov_const(Imp *m, ONode *def, OTensor *c) {
  OVal *v = ov_new(m, def, OV_CONST);
  v->c = c;
  return v;
}

OVal *ov_of_node(Imp *m, ONode *def, Node *node) {
  OVal *v = ov_new(m, def, OV_NODE);
  v->node = node;
  v->dtype = node->dtype;
  v->shape = node->shape;
  return v;
}

OVal *ov_defer(Imp *m, ONode *def, DType dtype, const Shape *shape) {
  OVal *v = ov_new(m, def, OV_DEFER);
  v->dtype = dtype;
  v->shape = *shape;
  return v;
}

const Shape *ov_shape(const OVal *v) { return v->kind == OV_CONST ? &v->c->shape : &v->shape; }

bool ov_is(const OVal *v, const char *op) { return v && v->def && !strcmp(v->def->op, op); }

Node *imp_node(Imp *m, const ONode *at, OpKind op, Node **in, int nin) {
  Node *n = graph_add(m->g, op, in, nin, at->loc);
  n->layer = at->layer;
  return n;
}

Node *imp_infer(Node *n) {
  node_infer(n);
  return n;
}

Node *imp_op1(Imp *m, const ONode *at, OpKind op, Node *x) { return imp_infer(imp_node(m, at, op, &x, 1)); }

Node *imp_op2(Imp *m, const ONode *at, OpKind op, Node *x, Node *y) {
  Node *in[2] = {x, y};
  return imp_infer(imp_node(m, at, op, in, 2));
}

double f32_short(double v) {
  if (!isfinite(v) || (double)(float)v != v) return v;
  char buf[32];
  for (int digits = 1; digits <= 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, v);
    double d = strtod(buf, NULL);
    if ((float)d == (float)v) return d;
  }
  return v;
}

Node *imp_const(Imp *m, const ONode *at, double v, DType t) {
  Node *c = imp_node(m, at, OP_CONST, NULL, 0);
  ir_set_float(c, "value", f32_short(v));
  c->dtype = t;
  return imp_infer(c);
}

Node *imp_reshape(Imp *m, const ONode *at, Node *x, const Shape *s) {
  if (shape_eq(&x->shape, s)) return x;
  Node *r = imp_node(m, at, OP_RESHAPE, &x, 1);
  ir_set_ints(r, "shape", s->d, s->ndim);
  return imp_infer(r);
}

static AttrVal *ir_attr(Node *n, const char *name) {
  int i = op_attr_index(n->op, name);
  ir_assert(i >= 0);
  n->attr[i].set = true;
  return &n->attr[i];
}

void ir_set_int(Node *n, const char *name, int64_t v) { ir_attr(n, name)->i = v; }
void ir_set_float(Node *n, const char *name, double v) { ir_attr(n, name)->f = v; }
void ir_set_ints(Node *n, const char *name, const int64_t *v, int k) {
  AttrVal *a = ir_attr(n, name);
  a->n = k;
  for (int i = 0; i < k; i++) a->v[i] = v[i];
}

DType imp_dtype(const ONode *n, int type, const char *what) {
  switch (type) {
  case OT_FLOAT: return DT_F32;
  case OT_FLOAT16: return DT_F16;
  case OT_BFLOAT16: return DT_BF16;
  case OT_INT8:
  case OT_INT16:
  case OT_INT32:
  case OT_INT64:
  case OT_UINT8:
  case OT_UINT16:
  case OT_UINT32: return DT_I32;
  default: break;
  }
  imp_error(n, "%s has ONNX element type %d: colossalc computes float32, float16, bfloat16 and integer tensors", what,
            type);
}

/* A float initialiser's IR param node, made where it is first read. */
static Node *make_param(Imp *m, OVal *v, const ONode *reader) {
  Node *n =
      graph_add(m->g, OP_PARAM, NULL, 0, loc_named(m, arena_printf(m->a, "initializer '%s'", shown(m->a, v->name))));
  n->name = v->name;
  n->dtype = DT_F32;
  n->shape = v->shape;
  n->init = v->init;
  n->layer = reader ? reader->layer : -1;
  return imp_infer(n);
}

/* A constant read as a tensor: positions 0..n-1 (optionally with leading axes of 1)
 * are the IR's arange; no other constant tensor exists in the IR. */
static Node *const_node(Imp *m, OVal *v, const ONode *reader) {
  const OTensor *c = v->c;
  bool positions = !ot_is_float(c->type) && c->type != OT_BOOL && c->shape.ndim >= 1 && c->n > 0;
  for (int d = 0; positions && d < c->shape.ndim - 1; d++) positions = c->shape.d[d] == 1;
  for (int64_t k = 0; positions && k < c->n; k++) positions = c->i[k] == k;
  if (!positions) {
    char s[96];
    shape_format(s, sizeof s, &c->shape);
    imp_error(reader ? reader : v->def,
              "reads a constant tensor%s%s%s of shape %s as data: the IR's constants are scalars (and positions "
              "0..n-1); a constant tensor must fold away or be part of a recognised pattern",
              v->name ? " '" : "", v->name ? shown(m->a, v->name) : "", v->name ? "'" : "", s);
  }
  Node *r = imp_node(m, reader ? reader : v->def, OP_ARANGE, NULL, 0);
  ir_set_int(r, "n", c->n);
  return imp_reshape(m, reader ? reader : v->def, imp_infer(r), &c->shape);
}

Node *ov_node(Imp *m, OVal *v) {
  if (v->node) return v->node;
  switch (v->kind) {
  case OV_NODE: return v->node;
  case OV_PARAM: return v->node = make_param(m, v, m->cur);
  case OV_CONST: return v->node = const_node(m, v, m->cur);
  case OV_DEFER: {
    if (++m->depth > MAX_MATERIALISE_DEPTH)
      imp_error(v->def, "expression nested more than %d deep", MAX_MATERIALISE_DEPTH);
    Node *n = match_defer(m, v);
    if (!n) n = lower_defer(m, v);
    m->depth--;
    return v->node = n;
  }
  case OV_UNSUPPORTED: break;
  }
  imp_error(v->def,
            "output %d%s%s%s is read, but colossalc does not compute it (only the first output of %s is supported)",
            v->out + 1, v->name ? " ('" : "", v->name ? shown(m->a, v->name) : "", v->name ? "')" : "", v->def->op);
}

/* ---- protobuf ---------------------------------------------------------------------- */

static void *pb_alloc(void *a, size_t n) { return arena_alloc(a, n ? n : 1); }
static void pb_free(void *a, void *p) {}

static bool pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

/* The wire format walked with the message descriptors: 0 well-formed, 1 malformed,
 * 2 sub-messages nested more than MAX_PB_DEPTH deep (checked before protobuf-c's
 * recursive decoder sees them). */
static int pb_check(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end, int depth) {
  if (depth > MAX_PB_DEPTH) return 2;
  while (p < end) {
    uint64_t key, v;
    if (!pb_varint(&p, end, &key)) return 1;
    switch (key & 7) {
    case 0:
      if (!pb_varint(&p, end, &v)) return 1;
      break;
    case 1:
      if (end - p < 8) return 1;
      p += 8;
      break;
    case 5:
      if (end - p < 4) return 1;
      p += 4;
      break;
    case 2: {
      if (!pb_varint(&p, end, &v) || v > (uint64_t)(end - p)) return 1;
      const ProtobufCFieldDescriptor *f =
          key >> 3 <= 0x1fffffff ? protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3)) : NULL;
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
        int rc = pb_check(f->descriptor, p, p + v, depth + 1);
        if (rc) return rc;
      }
      p += v;
      break;
    }
    default: return 1;
    }
  }
  return 0;
}

static Onnx__ModelProto *decode(Imp *m, const uint8_t *data, size_t len) {
  if (!len) file_error(m, "empty file: not an ONNX model");
  int rc = pb_check(&onnx__model_proto__descriptor, data, data + len, 0);
  if (rc == 2) file_error(m, "malformed ONNX file: protobuf messages nested more than %d deep", MAX_PB_DEPTH);
  if (rc) file_error(m, "malformed ONNX file: the protobuf encoding is broken (a truncated or corrupted file?)");
  ProtobufCAllocator al = {pb_alloc, pb_free, m->a};
  Onnx__ModelProto *mp = onnx__model_proto__unpack(&al, len, data);
  if (!mp) file_error(m, "malformed ONNX file: not a ModelProto (a truncated or corrupted file?)");
  if (!mp->graph) file_error(m, "the ONNX model has no graph");
  return mp;
}

/* The version of the default domain's opset the model imports. */
static int model_opset(Imp *m, const Onnx__ModelProto *mp) {
  for (size_t i = 0; i < mp->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
    if (*str(o->domain) && strcmp(o->domain, "ai.onnx")) continue;
    if (!o->has_version || o->version < 1) file_error(m, "the default ONNX domain's opset has no version");
    if (o->version > MAX_OPSET)
      file_error(m, "opset %lld is newer than colossalc knows (up to %d): export with an older opset_version",
                 (long long)o->version, MAX_OPSET);
    return (int)o->version;
  }
  file_error(m, "the model imports no opset of the default ONNX domain");
}

/* ---- names and layers ------------------------------------------------------------------- */

/* The characters of a name in the IR's text form (ir/irparse.c): parameter and input
 * names are checkpoint keys there, layer names too. */
static bool name_char(char c) { return isalnum((unsigned char)c) || strchr("_.+-/", c); }

static void check_name(const ONode *at, const char *name, const char *what) {
  for (const char *c = name; *c; c++)
    if (!name_char(*c))
      imp_error(at,
                "the %s name has a '%c': colossalc's names (checkpoint keys) are letters, digits "
                "and _ . + - /",
                what, isprint((unsigned char)*c) ? *c : '?');
}

static int layer_index(Imp *m, const char *name, const char *group) {
  intptr_t k = (intptr_t)strmap_get(&m->layers, name);
  if (k) return (int)k - 1;
  intptr_t gi = (intptr_t)strmap_get(&m->groups, group);
  if (!gi) strmap_put(&m->groups, arena_strdup(m->a, group), (void *)(gi = ++m->ngroups));
  int l = graph_add_layer(m->g, name, (int)gi - 1);
  strmap_put(&m->layers, m->g->layers[l].name, (void *)(intptr_t)(l + 1));
  return l;
}

/* The layer of a node from its name: exporters name nodes by module path
 * ("/h.0/attn/c_attn/MatMul", "/model/layers.3/mlp/Mul"); the path up to its first
 * numbered module is the layer ("h.0", "model.layers.3"), and the path without that
 * number its group (the layers of one `repeat`). -1 outside any numbered module. */
static int node_layer(Imp *m, const char *name) {
  const char *end = strrchr(name, '/');
  char path[256];
  size_t len = 0;
  for (const char *c = name; end && c < end;) {
    if (*c == '/') {
      c++;
      continue;
    }
    const char *e = c, *dot = NULL;
    while (e < end && *e != '/') {
      if (!name_char(*e)) return -1; /* not a module path */
      dot = *e == '.' ? e : dot, e++;
    }
    if (len + (size_t)(e - c) + 2 > sizeof path) return -1;
    if (len) path[len++] = '.';
    memcpy(path + len, c, e - c);
    len += e - c;
    path[len] = 0;
    bool numbered = dot && dot > c && dot + 1 < e;
    for (const char *d = dot ? dot + 1 : e; numbered && d < e; d++) numbered = isdigit((unsigned char)*d);
    if (numbered) {
      char group[256];
      memcpy(group, path, len - (e - dot));
      group[len - (e - dot)] = 0;
      return layer_index(m, path, group);
    }
    c = e;
  }
  return -1;
}

/* ---- initialisers and inputs -------------------------------------------------------- */

static void read_dims(Imp *m, const ONode *at, const Onnx__TensorProto *t, Shape *s, const char *what) {
  if (t->n_dims > MAX_DIMS) imp_error(at, "%s has %zu dimensions; at most %d are supported", what, t->n_dims, MAX_DIMS);
  s->ndim = (int)t->n_dims;
  int64_t numel = 1;
  for (int i = 0; i < s->ndim; i++) {
    s->d[i] = t->dims[i];
    if (s->d[i] < 0 || s->d[i] > MAX_NUMEL || (s->d[i] && numel > MAX_NUMEL / s->d[i]))
      imp_error(at, "%s has a bad or too large dimension %lld", what, (long long)s->d[i]);
    numel *= s->d[i];
  }
}

/* How a parameter starts without --init-from: like the exporter's values, a constant
 * where they are all equal, else a normal distribution of their mean and spread. */
static Init param_init(const ONode *at, const Onnx__TensorProto *t, int64_t n) {
  bool raw = t->has_raw_data;
  if (raw ? t->raw_data.len != (size_t)n * 4 : t->n_float_data != (size_t)n)
    imp_error(at, "holds %zu values for %lld elements", raw ? t->raw_data.len / 4 : t->n_float_data, (long long)n);
  double sum = 0, sq = 0, first = 0;
  bool same = true;
  for (int64_t k = 0; k < n; k++) {
    float f;
    if (raw) memcpy(&f, t->raw_data.data + 4 * k, 4);
    else f = t->float_data[k];
    double x = isfinite(f) ? f : 0;
    if (!k) first = x;
    same &= x == first;
    sum += x, sq += x * x;
  }
  if (same)
    return first == 0   ? (Init){INIT_ZEROS, 0, 0}
           : first == 1 ? (Init){INIT_ONES, 0, 0}
                        : (Init){INIT_CONSTANT, first, 0};
  double mean = sum / (double)n, var = sq / (double)n - mean * mean, std = sqrt(var > 0 ? var : 0);
  return isfinite(mean) && isfinite(std) ? (Init){INIT_NORMAL, std, mean} : (Init){INIT_NORMAL, 0.02, 0};
}

static void put_value(Imp *m, const ONode *at, const char *name, OVal *v) {
  if (strmap_get(&m->vals, name)) imp_error(at, "the value '%s' is defined twice", shown(m->a, name));
  if (!v->name) v->name = name;
  strmap_put(&m->vals, name, v);
}

static void read_initializer(Imp *m, const Onnx__TensorProto *t) {
  const char *name = str(t->name);
  ONode *at = arena_alloc(m->a, sizeof *at);
  at->a = m->a;
  at->layer = -1;
  at->loc = loc_named(m, arena_printf(m->a, "initializer '%s'", shown(m->a, name)));
  if (!*name) imp_error(at, "an initializer has no name");
  if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    imp_error(at, "the values are stored outside the file (external data): save the model with its weights inside");
  OVal *v;
  if (t->data_type == OT_FLOAT) {
    check_name(at, name, "parameter's");
    v = ov_new(m, NULL, OV_PARAM);
    v->dtype = DT_F32;
    read_dims(m, at, t, &v->shape, "the parameter");
    if (shape_numel(&v->shape) == 0) imp_error(at, "a parameter with no elements");
    v->init = param_init(at, t, shape_numel(&v->shape));
  } else if (ot_is_float(t->data_type)) {
    imp_error(at, "a parameter of ONNX element type %d: colossalc trains float32 parameters; export in float32",
              t->data_type);
  } else {
    v = ov_const(m, NULL, ot_from_proto(m, at, t));
  }
  put_value(m, at, name, v);
}

static int64_t symbolic_dim(Imp *m, const ONode *at, const char *param) {
  for (int i = 0; i < m->nov; i++) {
    if (strcmp(m->ov[i].name, param)) continue;
    char *end;
    long long v = strtoll(m->ov[i].value, &end, 10);
    if (*end || v <= 0 || v > MAX_NUMEL)
      imp_error(at, "--set %s=%s: a dimension must be a positive integer", param, m->ov[i].value);
    m->ov[i].used = true;
    return v;
  }
  imp_error(at, "has a symbolic dimension '%s': give its size with --set %s=N", shown(m->a, param), shown(m->a, param));
}

static void read_input(Imp *m, const Onnx__ValueInfoProto *vi) {
  const char *name = str(vi->name);
  if (strmap_get(&m->vals, name)) return; /* an initialiser listed as an input too */
  ONode *at = arena_alloc(m->a, sizeof *at);
  at->a = m->a;
  at->layer = -1;
  at->loc = loc_named(m, arena_printf(m->a, "input '%s'", shown(m->a, name)));
  if (!*name) imp_error(at, "a graph input has no name");
  check_name(at, name, "input's");
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type->has_elem_type)
    imp_error(at, "the input is not a tensor of a known element type");
  const Onnx__TensorShapeProto *sp = tp->tensor_type->shape;
  if (!sp) imp_error(at, "the input has no shape: export with the inputs' shapes");
  if (sp->n_dim > MAX_DIMS) imp_error(at, "%zu dimensions; at most %d are supported", sp->n_dim, MAX_DIMS);
  Node *n = graph_add(m->g, OP_INPUT, NULL, 0, at->loc);
  n->name = name;
  n->dtype = imp_dtype(at, tp->tensor_type->elem_type, "the input");
  n->shape.ndim = (int)sp->n_dim;
  for (int i = 0; i < n->shape.ndim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = sp->dim[i];
    int64_t v = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ? d->dim_value
                : d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                    ? symbolic_dim(m, at, str(d->dim_param))
                    : -1;
    if (v <= 0 || v > MAX_NUMEL)
      imp_error(at, "dimension %d has no size (or a bad one): export with fixed shapes, or name it", i);
    n->shape.d[i] = v;
  }
  if (shape_numel(&n->shape) > MAX_NUMEL) imp_error(at, "the input is too large");
  put_value(m, at, name, ov_of_node(m, NULL, imp_infer(n)));
}

/* --set NAME=VALUE that named no symbolic dimension: an error, except a batch that
 * equals the inputs' fixed one (what compiling a plan's micro-batch asks for). */
static void check_overrides(Imp *m) {
  for (int i = 0; i < m->nov; i++) {
    ConfigOverride *o = &m->ov[i];
    if (o->used) continue;
    bool same = !strcmp(o->name, "batch");
    for (int k = 0; same && k < m->g->n; k++) {
      const Node *n = m->g->nodes[k];
      if (n->op == OP_INPUT) same = n->shape.ndim && n->shape.d[0] == strtoll(o->value, NULL, 10);
    }
    if (!same && !strcmp(o->name, "batch"))
      file_error(m,
                 "--set batch=%s: the file's batch is fixed; export with dynamic_axes={0: 'batch'} on the inputs to "
                 "change it",
                 o->value);
    if (!same) file_error(m, "--set %s: the ONNX file has no symbolic dimension '%s'", o->name, o->name);
    o->used = true;
  }
}

/* ---- nodes ----------------------------------------------------------------------------- */

static ONode *node_new(Imp *m, const Onnx__NodeProto *p, size_t index) {
  ONode *n = arena_alloc(m->a, sizeof *n);
  n->a = m->a;
  n->p = p;
  n->op = str(p->op_type);
  n->opset = m->opset;
  const char *name = str(p->name);
  n->loc = loc_named(
      m, *name ? arena_printf(m->a, "node '%s' (%s, opset %d)", shown(m->a, name), shown(m->a, n->op), n->opset)
               : arena_printf(m->a, "node %zu (%s, opset %d)", index, shown(m->a, n->op), n->opset));
  n->layer = node_layer(m, name);
  if (*str(p->domain) && strcmp(p->domain, "ai.onnx"))
    imp_error(n, "the op's domain '%s' is not supported: colossalc imports the default ONNX domain",
              shown(m->a, p->domain));
  n->nin = (int)p->n_input;
  n->nout = (int)p->n_output;
  if (p->n_input > (1 << 16) || p->n_output > (1 << 16)) imp_error(n, "too many inputs or outputs");
  n->in = arena_array(m->a, n->nin ? n->nin : 1, sizeof *n->in);
  n->out = arena_array(m->a, n->nout ? n->nout : 1, sizeof *n->out);
  for (int i = 0; i < n->nin; i++) {
    if (!*p->input[i]) continue;
    n->in[i] = strmap_get(&m->vals, p->input[i]);
    if (!n->in[i])
      imp_error(n,
                "input %d, '%s', is not defined before the node (the graph is not in topological order, or the "
                "value does not exist)",
                i + 1, shown(m->a, p->input[i]));
  }
  return n;
}

static void import_node(Imp *m, const Onnx__NodeProto *p, size_t index) {
  ONode *n = node_new(m, p, index);
  m->cur = n;
  if (!fold_node(m, n)) {
    ImportFn f = import_fn(n->op);
    if (!f)
      imp_error(n, "ONNX op %s is not supported (docs/onnx.md lists the ops colossalc imports)", shown(m->a, n->op));
    f(m, n);
  }
  for (int k = 0; k < n->nout; k++) {
    if (!n->out[k]) n->out[k] = ov_new(m, n, OV_UNSUPPORTED);
    if (n->out[k]->def == n) n->out[k]->out = k;
    if (*p->output[k]) put_value(m, n, p->output[k], n->out[k]);
  }
}

/* The loss: the graph's one scalar floating-point output. */
static void set_loss(Imp *m, const Onnx__GraphProto *gp) {
  OVal *loss = NULL;
  const char *name = NULL;
  int count = 0;
  for (size_t i = 0; i < gp->n_output; i++) {
    OVal *v = strmap_get(&m->vals, str(gp->output[i]->name));
    if (!v) file_error(m, "the graph output '%s' is computed by no node", shown(m->a, str(gp->output[i]->name)));
    if (v->kind == OV_CONST || v->kind == OV_UNSUPPORTED || ov_shape(v)->ndim || !dtype_is_float(v->dtype)) continue;
    count++;
    if (!loss) loss = v, name = gp->output[i]->name;
  }
  if (!count) file_error(m, "no output is a floating-point scalar: export the loss as the graph's output");
  if (count > 1) file_error(m, "%d outputs are floating-point scalars: export one, the loss", count);
  if (!loss->def) file_error(m, "the loss '%s' is a graph input", shown(m->a, name));
  m->cur = loss->def;
  Graph *g = m->g;
  g->loss = ov_node(m, loss);
  g->loss_name = name;
  g->has_train = true;
  frontend_train_defaults(&g->train, OPT_ADAMW);
  g->train.loc = loss->def->loc;
}

/* The graph again with only what the loss reads, in the same order; layers that lost
 * every node are dropped, and layers and groups numbered again. */
static Graph *prune(Imp *m) {
  Graph *g = m->g, *h = graph_new(m->a, g->name);
  h->source = g->source;
  h->has_train = g->has_train, h->train = g->train, h->loss_name = g->loss_name;
  bool *live = arena_array(m->a, g->n, sizeof *live);
  live[g->loss->id] = true;
  for (int i = g->n - 1; i >= 0; i--)
    for (int k = 0; live[i] && k < g->nodes[i]->nin; k++) live[g->nodes[i]->in[k]->id] = true;
  int *lmap = arena_array(m->a, g->nlayers + 1, sizeof *lmap), *gmap = arena_array(m->a, m->ngroups + 1, sizeof *gmap);
  int ngroups = 0;
  Node **map = arena_array(m->a, g->n, sizeof *map);
  for (int i = 0; i < g->n; i++) {
    Node *n = g->nodes[i];
    if (!live[i]) continue;
    if (n->layer >= 0 && !lmap[n->layer]) {
      int grp = g->layers[n->layer].group;
      if (!gmap[grp]) gmap[grp] = ++ngroups;
      lmap[n->layer] = 1 + graph_add_layer(h, g->layers[n->layer].name, gmap[grp] - 1);
    }
    Node **in = arena_array(m->a, n->nin ? n->nin : 1, sizeof *in);
    for (int k = 0; k < n->nin; k++) in[k] = map[n->in[k]->id];
    map[i] = graph_clone_node(h, n, in);
    map[i]->layer = n->layer >= 0 ? lmap[n->layer] - 1 : -1;
  }
  h->loss = map[g->loss->id];
  return h;
}

static Graph *import_model(Imp *m, const uint8_t *data, size_t len) {
  Onnx__ModelProto *mp = decode(m, data, len);
  const Onnx__GraphProto *gp = mp->graph;
  m->opset = model_opset(m, mp);
  m->g = graph_new(m->a, frontend_model_name(m->a, m->path));
  m->g->source = m->path;
  if (gp->n_sparse_initializer) file_error(m, "sparse initializers are not supported");
  for (size_t i = 0; i < gp->n_initializer; i++) read_initializer(m, gp->initializer[i]);
  for (size_t i = 0; i < gp->n_input; i++) read_input(m, gp->input[i]);
  for (size_t i = 0; i < gp->n_node; i++) import_node(m, gp->node[i], i);
  set_loss(m, gp);
  check_overrides(m);
  return prune(m);
}

/* ---- entry points ------------------------------------------------------------------------ */

bool onnx_is_model(const char *path, const char *data, size_t len) {
  size_t n = strlen(path);
  if (n >= 5 && !strcasecmp(path + n - 5, ".onnx")) return true;
  /* a ModelProto starts with ir_version (field 1, a varint): 0x08, then a small number */
  return len >= 2 && (unsigned char)data[0] == 0x08 && (unsigned char)data[1] < 0x80;
}

Graph *onnx_compile(Arena *a, const char *path, const char *data, size_t len, ConfigOverride *ov, int nov) {
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    diag_pop(&j);
    return NULL;
  }
  Imp *m = arena_alloc(a, sizeof *m);
  m->a = a;
  m->path = arena_strdup(a, path);
  m->ov = ov, m->nov = nov;
  strmap_init(&m->vals, a);
  strmap_init(&m->layers, a);
  strmap_init(&m->groups, a);
  Graph *g = import_model(m, (const uint8_t *)data, len);
  ir_verify(g);
  diag_pop(&j);
  return g;
}
