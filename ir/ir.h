/* The IR: a dataflow graph of tensor ops, the contract between every stage.
 *
 * One node type from the front end to the kernels (STYLE.md, tinygrad): a Node is an
 * op from ir/ops.def applied to input nodes, with attributes, an inferred shape and
 * dtype, the model-source location it came from, and the layer (iteration of a
 * `repeat`) it belongs to, which pipeline cuts and recompute decisions use.
 * Nodes are kept in topological (creation) order. */
#ifndef COLOSSALC_IR_H
#define COLOSSALC_IR_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "ir/arena.h"
#include "ir/diag.h"

typedef enum { DT_F32, DT_BF16, DT_F16, DT_E4M3, DT_E5M2, DT_I32, DT_COUNT } DType;

enum { MAX_DIMS = 8, MAX_ATTRS = 8 };
/* Largest element count of one tensor and of one dimension: beyond any real model,
 * small enough that byte counts and FLOP counts stay far from int64 overflow. */
#define MAX_NUMEL ((int64_t)1 << 48)

typedef struct Shape {
  int ndim;
  int64_t d[MAX_DIMS];
} Shape;

typedef enum {
#define OP(id, name, nin, cls, flags, attrs) OP_##id,
#include "ir/ops.def"
#undef OP
  OP_COUNT
} OpKind;

typedef enum {
  CLS_SOURCE,
  CLS_GATHER,
  CLS_CONTRACT,
  CLS_ELEMWISE,
  CLS_NORM,
  CLS_REDUCE,
  CLS_LOSS,
  CLS_ATTN,
  CLS_MOVE,
  CLS_COMM
} OpClass;
/* OPF_DSL: callable from the model language. Mixed precision (passes/autocast.c):
 * OPF_LOWP, the op's float inputs are cast to the low precision (its result is low:
 * GEMMs); OPF_F32, to f32 (normalisations, softmax, losses, sums); OPF_LOWOUT, its
 * result is an activation, rounded to the low precision (normalisations, softmax,
 * embeddings: only the statistics and losses stay f32). */
enum { OPF_DSL = 1, OPF_LOWP = 2, OPF_F32 = 4, OPF_LOWOUT = 8 };

typedef enum { AK_INT, AK_FLOAT, AK_BOOL, AK_INTS, AK_DTYPE, AK_STR } AttrKind;

typedef struct AttrSpec {
  const char *name;
  AttrKind kind;
  bool required, optional;
  double def;
} AttrSpec;

typedef struct AttrVal {
  bool set;            /* false: an optional attribute left out */
  int64_t i;           /* int, bool, dtype */
  double f;            /* float */
  int n;               /* ints: count */
  int64_t v[MAX_DIMS]; /* ints */
  const char *s;       /* str */
} AttrVal;

typedef enum { INIT_NONE, INIT_ZEROS, INIT_ONES, INIT_NORMAL, INIT_UNIFORM, INIT_CONSTANT } InitKind;
typedef struct Init {
  InitKind kind;
  double a, b;
} Init; /* normal(std=a, mean=b); uniform(a, b) */

typedef struct Node Node;
struct Node {
  int id; /* index in Graph.nodes */
  OpKind op;
  int nin;
  int split;               /* PARAM after tensor partitioning: 1 + the dimension split over the
                            * tensor-parallel ranks (0: replicated), in split_blocks blocks */
  Node **in;               /* [nin] */
  AttrVal attr[MAX_ATTRS]; /* in the order of the op's attribute spec */
  DType dtype;
  int32_t split_blocks; /* (placed in what would be padding) */
  Shape shape;
  const char *name; /* INPUT and PARAM: the tensor's name (checkpoint name) */
  Init init;        /* PARAM */
  int layer;        /* index into Graph.layers, or -1 outside any repeat */
  SrcLoc loc;
};

/* One iteration of a `repeat`: where pipeline stages may cut. */
typedef struct Layer {
  const char *name;
  int group;
} Layer;

/* The optimizers, in the order of program/program.h's PROG_OPTIMIZERS: AdamW; SGD (with
 * momentum when given); LAMB (You et al. 2020, as ColossalAI's Lamb: Adam's moments with
 * bias correction, u = m^/(sqrt(v^) + eps) + wd w, each parameter's step scaled by the
 * trust ratio |w| / |u|, 1 where either is 0). */
#define OPT_KINDS(X) X(ADAMW, "adamw") X(SGD, "sgd") X(LAMB, "lamb")
#define OPT_ENUM(name, text) OPT_##name,
typedef enum { OPT_KINDS(OPT_ENUM) OPT_COUNT } OptKind;
#undef OPT_ENUM
extern const char *const opt_names[OPT_COUNT];
typedef enum { SCHED_COSINE, SCHED_CONSTANT } SchedKind;

/* The training directive: `train loss with adamw(...)`. */
typedef struct TrainSpec {
  OptKind opt;
  double lr, beta1, beta2, eps, weight_decay, momentum, clip, min_lr;
  int64_t warmup;
  SchedKind schedule;
  SrcLoc loc;
  bool loss_scaling; /* fp16: the backward pass starts from the run's loss scale (OP_LOSS_SCALE) */
} TrainSpec;

/* The moments an optimizer keeps per parameter element in TIER_OPT: 2 (AdamW, LAMB: m,
 * then v at opt_v_offset), 1 (SGD with momentum), 0. */
static inline int train_moments(const TrainSpec *t) { return t->opt == OPT_SGD ? t->momentum > 0 : 2; }

typedef struct Graph {
  Arena *arena;
  const char *name;   /* model name (file stem) */
  const char *source; /* model file, as named on the command line */
  Node **nodes;       /* [n] topological order */
  int n, cap;
  Layer *layers; /* [nlayers] */
  int nlayers, layers_cap;
  Node *loss;
  const char *loss_name; /* the loss's name in the source: the train directive's, or the ONNX output's */
  bool has_train;
  TrainSpec train;
  /* after autodiff: nodes [0, n_forward) are the forward pass, the rest backward */
  int n_forward;
  int nparams;
  Node **params;      /* [nparams] in graph order */
  Node **param_grads; /* [nparams] the gradient of each, NULL if the loss does not depend on it */
  /* Set before autodiff: a parameter that only tp_copy reads (replicated over the
   * tensor-parallel ranks, read by ops whose work they divide) keeps its gradient as
   * the rank's partial sum, summed over the tp group once after the step's
   * micro-batches (codegen/compose.h) rather than in each one's backward; after it,
   * grad_tp_partial[k] (NULL: none) marks those parameters. */
  bool tp_sums_after_step;
  bool *grad_tp_partial;
  /* A pipeline chunk (passes/partition.c) is differentiated from outside as well as
   * from its loss (which it may lack): seed_grad[i], an input, is the gradient of
   * seed_out[i]; and the gradients of the activations it received, wrt[i], are
   * outputs (wrt_grads[i] after autodiff, NULL where none flows). */
  int nseeds;
  Node **seed_out, **seed_grad;
  int nwrt;
  Node **wrt, **wrt_grads;
  int nouts;
  Node **outs; /* values other chunks read (pipeline sends) */
} Graph;

/* Op table queries (ir/ops.c). */
typedef struct Cost {
  double fwd_flops, bwd_flops, bytes;
} Cost;
typedef struct OpInfo {
  const char *name;
  int nin;
  OpClass cls;
  int flags;
  const char *attr_text;
  void (*infer)(Node *n);               /* sets n->shape, n->dtype or error_at(n->loc) */
  void (*cost)(const Node *n, Cost *c); /* forward and backward FLOPs, bytes moved */
} OpInfo;

void op_table_init(void);
const OpInfo *op_info(OpKind op);
int op_nattrs(OpKind op);
const AttrSpec *op_attr(OpKind op, int i);
int op_attr_index(OpKind op, const char *name); /* -1 if none */
int op_lookup(const char *name);                /* OpKind or -1 */

/* dtypes and shapes */
const char *dtype_name(DType t);
int dtype_lookup(const char *name); /* -1 if none */
int dtype_size_bits(DType t);
bool dtype_is_float(DType t);
int64_t shape_numel(const Shape *s);
bool shape_eq(const Shape *a, const Shape *b);
int shape_format(char *buf, size_t len, const Shape *s);          /* "[8, 1024, 768]" */
bool shape_broadcast(const Shape *a, const Shape *b, Shape *out); /* numpy's; false if they do not broadcast */

/* graph building (ir/ir.c) */
Graph *graph_new(Arena *a, const char *name);
Node *graph_add(Graph *g, OpKind op, Node **in, int nin, SrcLoc loc);
/* A copy of src (op, attributes, type, name, layer, location) on new inputs. */
Node *graph_clone_node(Graph *g, const Node *src, Node **in);
/* A new graph with the same name, layers and training directive, and no nodes. */
Graph *graph_new_like(const Graph *g);
int graph_add_layer(Graph *g, const char *name, int group);
void node_infer(Node *n); /* run the op's shape rule */
int64_t attr_int(const Node *n, const char *name);
double attr_float(const Node *n, const char *name);
/* An attention op's (attention, flash_attention, its gradients) key/value heads: kv_heads,
 * or heads when it leaves them out. */
int64_t attn_kv_heads(const Node *n);
/* Its window (or a softmax's): the keys a query sees, 0 when it leaves it out (every key,
 * or every causal one). */
int64_t attn_window(const Node *n);
/* The query-key pairs an attention op scores for one batch row and head: S*T, or those
 * in its window. */
double attn_pairs(const Node *n);
/* A rotary op's frequency of pair i of a head of hd features: theta^(-2i/hd), scaled as
 * its `scaling` says (ops.def; LLaMA 3.1's rope_scaling of type llama3). */
double rotary_freq(const Node *n, int64_t i, int64_t hd);
const AttrVal *attr_get(const Node *n, const char *name);
void node_cost(const Node *n, Cost *c);

/* verifier, printer, text parser */
void ir_verify(Graph *g); /* error_at on the first violation */
void ir_print(FILE *f, const Graph *g);
Graph *ir_parse(Arena *a, const SrcFile *src); /* error_at on malformed text */

#endif
