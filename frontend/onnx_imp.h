/* What the ONNX importer's files share (frontend/onnx.c, onnx_ops.c, onnx_fold.c,
 * onnx_match.c).
 *
 * Every ONNX value is an OVal of one of these kinds:
 *   OV_CONST   known while importing (initialisers that are not float, Constant nodes,
 *              and whatever is computed from them: shapes, positions, masks, tables);
 *   OV_PARAM   a float initialiser: a trainable parameter, an IR param node made at
 *              its first use (so that it lands in the layer that uses it);
 *   OV_NODE    an IR node;
 *   OV_DEFER   an elementwise expression with no IR op of its own (Erf, Tanh, Sqrt, a
 *              constant tensor operand, a causal mask, ...), kept as its ONNX node until
 *              a reader needs it as an IR node: then a pattern (GELU, layernorm, RMSNorm,
 *              SiLU, rotary embedding) turns it into IR ops, or it is refused;
 *   OV_UNSUPPORTED an output the importer does not give (LayerNormalization's mean, ...),
 *              refused if anything reads it.
 * Nodes are imported in file order (ONNX's topological order); IR nodes whose values
 * end up unread (the parts of a pattern that became one op) are pruned at the end. */
#ifndef COLOSSALC_ONNX_IMP_H
#define COLOSSALC_ONNX_IMP_H
#include "frontend/onnx.h"
#include "ir/strmap.h"
#include "third_party/onnx/onnx.pb-c.h"

/* ONNX TensorProto.DataType values */
enum {
  OT_FLOAT = 1,
  OT_UINT8 = 2,
  OT_INT8 = 3,
  OT_UINT16 = 4,
  OT_INT16 = 5,
  OT_INT32 = 6,
  OT_INT64 = 7,
  OT_STRING = 8,
  OT_BOOL = 9,
  OT_FLOAT16 = 10,
  OT_DOUBLE = 11,
  OT_UINT32 = 12,
  OT_UINT64 = 13,
  OT_BFLOAT16 = 16
};

/* A constant tensor: float types hold doubles (rounded to their type), the others
 * (integers, bool) int64s. */
typedef struct OTensor {
  int type; /* OT_* */
  Shape shape;
  int64_t n;  /* elements */
  double *f;  /* [n] float types */
  int64_t *i; /* [n] integer and bool types */
} OTensor;

typedef enum { OV_CONST, OV_PARAM, OV_NODE, OV_DEFER, OV_UNSUPPORTED } OValKind;

typedef struct ONode ONode;
typedef struct OVal {
  const char *name;
  OValKind kind;
  OTensor *c;  /* OV_CONST */
  Node *node;  /* OV_NODE; OV_PARAM and OV_DEFER once made */
  ONode *def;  /* the node that computed it; NULL for graph inputs and initialisers */
  int out;     /* which output of def */
  DType dtype; /* OV_PARAM, OV_NODE, OV_DEFER */
  Shape shape; /* OV_PARAM, OV_NODE, OV_DEFER */
  Init init;   /* OV_PARAM: like the exporter's values (constant, or their mean and spread) */
} OVal;

struct ONode {
  Arena *a;
  const Onnx__NodeProto *p;
  const char *op; /* op_type */
  int opset;      /* of the default domain */
  int nin, nout;
  OVal **in;  /* [nin]; NULL where an optional input is left out */
  OVal **out; /* [nout] */
  SrcLoc loc; /* names the file and the node: "m.onnx: node '/h.0/attn/MatMul' (MatMul, opset 14)" */
  int layer;  /* from the node's name (/h.0/...), or -1 */
};

typedef struct Imp {
  Arena *a;
  Graph *g;
  const char *path;
  int opset;
  StrMap vals;   /* value name -> OVal */
  StrMap layers; /* layer name -> index + 1 */
  StrMap groups; /* layer group name -> index + 1 */
  int ngroups;
  int64_t folded; /* constant elements made so far (bounded) */
  int depth;      /* nested materialisations (bounded) */
  ONode *cur;     /* the node being imported: parameters made for it take its layer */
  ConfigOverride *ov;
  int nov;
} Imp;

/* onnx.c: errors, values, IR nodes */
_Noreturn void imp_error(const ONode *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
OVal *ov_new(Imp *m, ONode *def, OValKind kind);
OVal *ov_const(Imp *m, ONode *def, OTensor *c);
OVal *ov_of_node(Imp *m, ONode *def, Node *node);
OVal *ov_defer(Imp *m, ONode *def, DType dtype, const Shape *shape);
Node *ov_node(Imp *m, OVal *v); /* the IR node of a value, made if need be; refuses what it cannot make */
const Shape *ov_shape(const OVal *v);
bool ov_is(const OVal *v, const char *op);                              /* v computed by an ONNX op of that type */
Node *imp_node(Imp *m, const ONode *at, OpKind op, Node **in, int nin); /* not yet inferred */
Node *imp_op1(Imp *m, const ONode *at, OpKind op, Node *x);
Node *imp_op2(Imp *m, const ONode *at, OpKind op, Node *x, Node *y);
Node *imp_infer(Node *n);
Node *imp_const(Imp *m, const ONode *at, double v, DType t);
/* A float32 value (ONNX's constants and attributes are) in the fewest decimal digits that
 * round back to it, so that 1e-5 reads 1e-5 rather than 9.99999974737875e-06; other
 * values as they are. */
double f32_short(double v);
Node *imp_reshape(Imp *m, const ONode *at, Node *x, const Shape *s);
void ir_set_int(Node *n, const char *name, int64_t v);
void ir_set_float(Node *n, const char *name, double v);
void ir_set_ints(Node *n, const char *name, const int64_t *v, int k);
DType imp_dtype(const ONode *n, int type, const char *what); /* an ONNX element type as an IR dtype */

/* attributes of a node */
const Onnx__AttributeProto *attr_find(const ONode *n, const char *name);
int64_t attr_i(const ONode *n, const char *name, int64_t def);
double attr_f(const ONode *n, const char *name, double def);
const char *attr_s(const ONode *n, const char *name, const char *def);
int attr_ints(const ONode *n, const char *name, int64_t *v, int max); /* count, -1 if absent */

/* onnx_fold.c: constants */
OTensor *ot_new(Imp *m, const ONode *at, int type, const Shape *s);
OTensor *ot_from_proto(Imp *m, const ONode *at, const Onnx__TensorProto *t);
bool ot_is_float(int type);
double ot_get(const OTensor *t, int64_t k);
bool ot_uniform(const OTensor *t, double *v); /* every element equal (and at least one) */
int64_t ot_ints(const ONode *n, const OTensor *t, int64_t *v, int max,
                const char *what); /* a 1-D (or scalar) int list */
const OTensor *need_const(const ONode *n, int i, const char *what);
bool fold_node(Imp *m, ONode *n);                    /* computed n's outputs from its constant inputs */
int ew_arity(const char *op);                        /* an elementwise op's inputs (1 or 2), 0 for another op */
double ew_apply(const char *op, double a, double b); /* an elementwise op on doubles (b unused by unary ones) */
int norm_axis(const ONode *n, int64_t axis, int ndim);
/* shape rules shared by constants and run-time values */
enum { MAX_SPLIT = 1024 };
typedef struct SliceAx {
  int64_t start, step, count;
} SliceAx;
void shape_reshape(const ONode *n, const Shape *in, const int64_t *spec, int k, bool allowzero, Shape *out);
int node_axes(const ONode *n, int input, int since, int64_t *axes); /* -1: none given */
void shape_unsqueeze(const ONode *n, const Shape *in, const int64_t *axes, int k, Shape *out);
void shape_squeeze(const ONode *n, const Shape *in, const int64_t *axes, int k,
                   Shape *out); /* k < 0: every axis of 1 */
void shape_flatten(const ONode *n, const Shape *in, Shape *out);
void slice_ranges(const ONode *n, const Shape *in, SliceAx *r);             /* [in->ndim] */
int split_sizes(const ONode *n, const Shape *in, int axis, int64_t *sizes); /* [MAX_SPLIT] */
void transpose_perm(const ONode *n, int ndim, int64_t *perm);

/* onnx_ops.c: the ops on values computed at run time */
typedef void (*ImportFn)(Imp *m, ONode *n);
ImportFn import_fn(const char *op);
Node *lower_defer(Imp *m, OVal *v); /* an OV_DEFER op by op, or refused */

/* onnx_match.c: patterns */
Node *match_defer(Imp *m, OVal *v); /* an OV_DEFER that is one IR op (GELU, norms, SiLU, rotary), or NULL */
bool match_causal(Imp *m, OVal *v, OVal **scores); /* v = scores with a causal mask (added, or by Where) */
Node *
match_attention(Imp *m, ONode *n,
                const Shape *out); /* n, a Reshape to out, ends an attention block: the IR attention op, or NULL */

#endif
