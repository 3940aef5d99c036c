/* The elaborator: gives the syntax tree its meaning and builds the IR.
 *
 * Config constants are evaluated in source order (a `--set` override replaces the
 * constant's expression); block calls are expanded inline with their parameters
 * named by scope path (`h.3.attn.c_attn.weight`); each iteration of a `repeat`
 * becomes one Layer of the graph; built-in ops come from the op table and their
 * shapes are inferred as they are built, so a shape error points at the call. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "frontend/frontend.h"
#include "ir/strmap.h"

enum { MAX_REPEAT = 1 << 16, MAX_CALL_DEPTH = 64, MAX_DIM = (int64_t)1 << 40 };
/* Bounds that turn a runaway model into an error instead of a crash or a hang: a
 * file of a few bytes can ask for 65536 x 65536 repeats, 2^63 block calls, or
 * expressions nested 200 deep in each of 64 nested blocks. No real model comes
 * near them. */
enum { MAX_NEST = 1000, MAX_STEPS = 1 << 24, MAX_LAYERS = 1 << 16, MAX_PATH = 1024 };
#define MAX_ELAB_BYTES ((size_t)1 << 28)

typedef enum { V_INT, V_FLOAT, V_STR, V_LIST, V_TENSOR } VKind;

typedef struct Value Value;
struct Value {
  VKind k;
  int64_t i;
  double f;
  const char *s;
  Value *items; /* V_LIST [n] */
  int n;
  Node *t;
};

typedef struct Block {
  Stmt *def;
  bool active;
} Block;

/* A block call or repeat iteration being expanded, and whether an earlier one
 * used the same parameter scope (so its parameters would be declared twice). */
typedef struct Frame {
  SrcLoc loc;
  const char *block, *scope;
  bool reused;
} Frame; /* block NULL: repeat */

typedef struct Elab {
  Arena *arena;
  Graph *g;
  StrMap config; /* name -> Value* */
  StrMap blocks; /* name -> Block* */
  ConfigOverride *ov;
  int nov;
  const char *scope; /* parameter path prefix, "" at top level */
  int layer;         /* current layer, -1 outside repeats */
  int groups;        /* repeat statements expanded so far */
  int depth;         /* block call depth */
  Stmt *block;       /* the innermost block being expanded, NULL at top level */
  StrMap names;      /* input and parameter name -> Node* (checkpoint keys) */
  StrMap scopes;     /* parameter scopes used so far */
  Frame *frames;     /* [nframes] block calls and repeat iterations, outermost first */
  int nframes;
  int nest;       /* expressions and statements being evaluated, < MAX_NEST */
  int64_t steps;  /* expressions and statements evaluated, < MAX_STEPS */
  int64_t params; /* parameter elements declared, <= MAX_NUMEL */
  size_t mem0;    /* arena size when elaboration began */
} Elab;

typedef struct Env {
  StrMap vars;
  Value ret;
  bool returned;
} Env;

static Value eval(Elab *E, Env *env, Expr *e);
static void exec_body(Elab *E, Env *env, Stmt *s);

/* ---- bounds ------------------------------------------------------------------ */

/* One unit of work at loc: counted, and the arena's growth checked. */
static void step(Elab *E, SrcLoc loc) {
  if (++E->steps > MAX_STEPS)
    error_at(loc, "model too large: elaboration takes more than %d steps (a runaway repeat or block expansion?)",
             MAX_STEPS);
  if (E->arena->total - E->mem0 > MAX_ELAB_BYTES)
    error_at(loc, "model too large: elaboration needs more than %d MiB (a runaway repeat or block expansion?)",
             (int)(MAX_ELAB_BYTES >> 20));
}

/* Enter one level of evaluation (left with E->nest--); bounds the C stack. */
static void enter(Elab *E, SrcLoc loc) {
  if (++E->nest > MAX_NEST)
    error_at(loc, "model nested too deeply: more than %d levels of expressions, repeats and block calls", MAX_NEST);
  step(E, loc);
}

/* ---- values ---------------------------------------------------------------- */

static const char *kind_name(VKind k) {
  static const char *names[] = {"an integer", "a number", "a string", "a list", "a tensor"};
  return names[k];
}

static Value vint(int64_t i) { return (Value){.k = V_INT, .i = i}; }
static Value vfloat(double f) { return (Value){.k = V_FLOAT, .f = f}; }
static Value vtensor(Node *t) { return (Value){.k = V_TENSOR, .t = t}; }
static bool is_num(Value v) { return v.k == V_INT || v.k == V_FLOAT; }
static double num(Value v) { return v.k == V_INT ? (double)v.i : v.f; }

/* An integer, or a float with an integral value (so d / heads is a dimension). */
static int64_t want_int(Value v, SrcLoc loc, const char *what) {
  if (v.k == V_INT) return v.i;
  if (v.k == V_FLOAT && v.f == floor(v.f) && fabs(v.f) < 9.0e18) return (int64_t)v.f;
  if (v.k == V_FLOAT) error_at(loc, "%s must be an integer, got %g", what, v.f);
  error_at(loc, "%s must be an integer, got %s", what, kind_name(v.k));
}

static double want_num(Value v, SrcLoc loc, const char *what) {
  if (!is_num(v)) error_at(loc, "%s must be a number, got %s", what, kind_name(v.k));
  return num(v);
}

static Node *want_tensor(Value v, SrcLoc loc, const char *what) {
  if (v.k != V_TENSOR) error_at(loc, "%s must be a tensor, got %s", what, kind_name(v.k));
  return v.t;
}

static Value *box(Elab *E, Value v) {
  Value *p = arena_alloc(E->arena, sizeof *p);
  *p = v;
  return p;
}

/* ---- graph nodes ------------------------------------------------------------- */

static Node *add_node(Elab *E, OpKind op, Node **in, int nin, SrcLoc loc) {
  Node *n = graph_add(E->g, op, in, nin, loc);
  n->layer = E->layer;
  return n;
}

static Node *finish(Node *n) {
  node_infer(n);
  return n;
}

static Node *const_like(Elab *E, double v, Node *like, SrcLoc loc) {
  if (!dtype_is_float(like->dtype) && (v != floor(v) || fabs(v) >= 2147483648.0))
    error_at(loc, "%g cannot be combined with an %s tensor: it is not a 32-bit integer", v, dtype_name(like->dtype));
  Node *c = add_node(E, OP_CONST, NULL, 0, loc);
  c->attr[0] = (AttrVal){.set = true, .f = v};
  c->dtype = like->dtype;
  return finish(c);
}

/* ---- arithmetic on numbers --------------------------------------------------- */

static Value checked_float(double f, SrcLoc loc) {
  if (!isfinite(f)) error_at(loc, "arithmetic result is not finite");
  return vfloat(f);
}

static Value int_pow(int64_t b, int64_t e, SrcLoc loc) {
  if (e < 0) return checked_float(pow((double)b, (double)e), loc);
  int64_t r = 1;
  for (; e > 0; e--) {
    if (__builtin_mul_overflow(r, b, &r)) error_at(loc, "integer overflow in **");
    if (r == 0 || r == 1) break;
  }
  return vint(r);
}

static Value int_arith(BinOp op, int64_t a, int64_t b, SrcLoc loc) {
  int64_t r = 0;
  bool ovf = false;
  switch (op) {
  case BO_ADD: ovf = __builtin_add_overflow(a, b, &r); break;
  case BO_SUB: ovf = __builtin_sub_overflow(a, b, &r); break;
  case BO_MUL: ovf = __builtin_mul_overflow(a, b, &r); break;
  case BO_DIV:
    if (!b) error_at(loc, "division by zero");
    return vfloat((double)a / (double)b);
  case BO_FLOORDIV:
  case BO_MOD:
    if (!b) error_at(loc, "division by zero");
    if (a == INT64_MIN && b == -1) error_at(loc, "integer overflow");
    r = op == BO_MOD ? a % b : a / b;
    if (op == BO_MOD && r && (r < 0) != (b < 0)) r += b;
    if (op == BO_FLOORDIV && (a % b) && ((a < 0) != (b < 0))) r--;
    break;
  case BO_POW: return int_pow(a, b, loc);
  case BO_NEG: unreachable();
  }
  if (ovf) error_at(loc, "integer overflow");
  return vint(r);
}

static Value float_arith(BinOp op, double a, double b, SrcLoc loc) {
  switch (op) {
  case BO_ADD: return checked_float(a + b, loc);
  case BO_SUB: return checked_float(a - b, loc);
  case BO_MUL: return checked_float(a * b, loc);
  case BO_DIV:
    if (b == 0) error_at(loc, "division by zero");
    return checked_float(a / b, loc);
  case BO_FLOORDIV:
    if (b == 0) error_at(loc, "division by zero");
    return checked_float(floor(a / b), loc);
  case BO_MOD:
    if (b == 0) error_at(loc, "division by zero");
    return checked_float(a - b * floor(a / b), loc);
  case BO_POW: return checked_float(pow(a, b), loc);
  case BO_NEG: unreachable();
  }
  unreachable();
}

/* ---- arithmetic on tensors ---------------------------------------------------- */

static Value tensor_arith(Elab *E, BinOp op, Value a, Value b, SrcLoc loc) {
  static const OpKind ops[] = {[BO_ADD] = OP_ADD, [BO_SUB] = OP_SUB, [BO_MUL] = OP_MUL, [BO_DIV] = OP_DIV};
  if (op != BO_ADD && op != BO_SUB && op != BO_MUL && op != BO_DIV)
    error_at(loc, "operator %s applies to config numbers, not tensors",
             op == BO_POW   ? "**"
             : op == BO_MOD ? "%"
                            : "//");
  if (a.k != V_TENSOR && !is_num(a)) error_at(loc, "cannot combine %s with a tensor", kind_name(a.k));
  if (b.k != V_TENSOR && !is_num(b)) error_at(loc, "cannot combine a tensor with %s", kind_name(b.k));
  Node *x = a.k == V_TENSOR ? a.t : const_like(E, num(a), b.t, loc);
  Node *y = b.k == V_TENSOR ? b.t : const_like(E, num(b), a.t, loc);
  Node *in[2] = {x, y};
  return vtensor(finish(add_node(E, ops[op], in, 2, loc)));
}

static Value eval_binary(Elab *E, Env *env, Expr *e) {
  Value a = eval(E, env, e->lhs), b = eval(E, env, e->rhs);
  if (a.k == V_TENSOR || b.k == V_TENSOR) return tensor_arith(E, e->op, a, b, e->loc);
  if (!is_num(a) || !is_num(b))
    error_at(e->loc, "arithmetic needs numbers, got %s and %s", kind_name(a.k), kind_name(b.k));
  if (a.k == V_INT && b.k == V_INT) return int_arith(e->op, a.i, b.i, e->loc);
  return float_arith(e->op, num(a), num(b), e->loc);
}

static Value eval_unary(Elab *E, Env *env, Expr *e) {
  Value a = eval(E, env, e->lhs);
  if (a.k == V_TENSOR) return vtensor(finish(add_node(E, OP_NEG, &a.t, 1, e->loc)));
  if (a.k == V_INT) {
    if (a.i == INT64_MIN) error_at(e->loc, "integer overflow");
    return vint(-a.i);
  }
  if (a.k == V_FLOAT) return vfloat(-a.f);
  error_at(e->loc, "cannot negate %s", kind_name(a.k));
}

/* ---- names ------------------------------------------------------------------- */

static Value eval_name(Elab *E, Env *env, Expr *e) {
  Value *v = env ? strmap_get(&env->vars, e->name) : NULL;
  if (!v) v = strmap_get(&E->config, e->name);
  if (v) return *v;
  if (strmap_get(&E->blocks, e->name) || op_lookup(e->name) >= 0)
    error_at(e->loc, "'%s' is a %s: call it with arguments", e->name,
             strmap_get(&E->blocks, e->name) ? "block" : "built-in op");
  error_at(e->loc, "unknown name '%s'", e->name);
}

static Value eval_list(Elab *E, Env *env, Expr *e) {
  Value v = {.k = V_LIST, .n = e->nargs};
  v.items = arena_array(E->arena, e->nargs ? e->nargs : 1, sizeof *v.items);
  for (int i = 0; i < e->nargs; i++) v.items[i] = eval(E, env, e->args[i].val);
  return v;
}

/* ---- built-in op calls ------------------------------------------------------- */

static void set_attr(Node *n, int i, Value v, SrcLoc loc) {
  const AttrSpec *s = op_attr(n->op, i);
  AttrVal *a = &n->attr[i];
  char what[96];
  snprintf(what, sizeof what, "%s attribute '%s'", op_info(n->op)->name, s->name);
  a->set = true;
  switch (s->kind) {
  case AK_INT: a->i = want_int(v, loc, what); break;
  case AK_FLOAT: a->f = want_num(v, loc, what); break;
  case AK_BOOL:
    a->i = want_int(v, loc, what);
    if (a->i != 0 && a->i != 1) error_at(loc, "%s must be true or false", what);
    break;
  case AK_INTS:
    if (v.k != V_LIST && v.k != V_INT) error_at(loc, "%s must be a list of integers, got %s", what, kind_name(v.k));
    if (v.k == V_INT) {
      a->n = 1;
      a->v[0] = v.i;
      break;
    }
    if (v.n > MAX_DIMS) error_at(loc, "%s has %d entries; at most %d are allowed", what, v.n, MAX_DIMS);
    a->n = v.n;
    for (int j = 0; j < v.n; j++) a->v[j] = want_int(v.items[j], loc, what);
    break;
  case AK_DTYPE: {
    if (v.k != V_STR) error_at(loc, "%s must be a dtype name in quotes, like \"bf16\"", what);
    int t = dtype_lookup(v.s);
    if (t < 0) error_at(loc, "unknown dtype \"%s\" (f32, bf16, f16, e4m3, e5m2, i32)", v.s);
    a->i = t;
    break;
  }
  case AK_STR:
    if (v.k != V_STR) error_at(loc, "%s must be a string", what);
    a->s = v.s;
    break;
  }
}

static Value call_op(Elab *E, Env *env, Expr *e, OpKind op) {
  const OpInfo *oi = op_info(op);
  if (e->scope) error_at(e->scope_loc, "'as' names the scope of a block call; '%s' is a built-in op", e->name);
  int npos = 0;
  for (int i = 0; i < e->nargs; i++) {
    if (!e->args[i].key && i > npos) error_at(e->args[i].loc, "positional argument after a named one");
    npos += !e->args[i].key;
  }
  int nin = oi->nin >= 0 ? (npos < oi->nin ? npos : oi->nin) : npos;
  if (oi->nin >= 0 && npos < oi->nin)
    error_at(e->loc, "%s takes %d tensor argument%s, got %d", oi->name, oi->nin, oi->nin == 1 ? "" : "s", npos);
  int most = nin + op_nattrs(op);
  if (npos > most)
    error_at(e->loc, "%s takes at most %d positional argument%s, got %d", oi->name, most, most == 1 ? "" : "s", npos);
  if (nin > 64) error_at(e->loc, "%s: too many inputs", oi->name);
  /* in the arena, not on the stack: calls nest deeply */
  Node **in = arena_array(E->arena, nin ? nin : 1, sizeof *in);
  Value *vals = arena_array(E->arena, npos ? npos : 1, sizeof *vals);
  for (int i = 0, p = 0; i < e->nargs; i++)
    if (!e->args[i].key) vals[p++] = eval(E, env, e->args[i].val);
  for (int i = 0; i < nin; i++) {
    char what[64];
    snprintf(what, sizeof what, "argument %d of %s", i + 1, oi->name);
    if (oi->nin < 0 && vals[i].k != V_TENSOR && op_nattrs(op))
      error_at(e->args[i].loc, "%s must be a tensor, got %s (attributes of %s are named, like %s = ...)", what,
               kind_name(vals[i].k), oi->name, op_attr(op, 0)->name);
    in[i] = want_tensor(vals[i], e->args[i].loc, what);
  }
  Node *n = add_node(E, op, in, nin, e->loc);
  for (int i = nin, p = nin; i < e->nargs; i++) {
    if (e->args[i].key) continue;
    set_attr(n, p - nin, vals[p], e->args[i].loc);
    p++;
  }
  for (int i = 0; i < e->nargs; i++) {
    const Arg *a = &e->args[i];
    if (!a->key) continue;
    int k = op_attr_index(op, a->key);
    if (k < 0) error_at(a->loc, "%s has no argument '%s'", oi->name, a->key);
    if (k < npos - nin) error_at(a->loc, "%s: '%s' given twice", oi->name, a->key);
    set_attr(n, k, eval(E, env, a->val), a->loc);
  }
  /* each dropout draws its own mask unless the model fixes a seed */
  if (op == OP_DROPOUT && !attr_int(n, "seed")) n->attr[op_attr_index(op, "seed")].i = n->id;
  return vtensor(finish(n));
}

/* ---- math on config numbers --------------------------------------------------- */

static Value call_math(Elab *E, Env *env, Expr *e) {
  static const char *names[] = {"sqrt", "exp", "log", "min", "max", "abs"};
  int f = -1;
  for (int i = 0; i < 6; i++)
    if (!strcmp(e->name, names[i])) f = i;
  if (f < 0) return (Value){.k = V_LIST, .n = -1};
  int want = f >= 3 && f <= 4 ? 2 : 1;
  if (e->nargs != want || e->args[0].key) error_at(e->loc, "%s takes %d number%s", e->name, want, want == 1 ? "" : "s");
  Value a = eval(E, env, e->args[0].val), b = want == 2 ? eval(E, env, e->args[1].val) : a;
  double x = want_num(a, e->args[0].loc, e->name), y = want_num(b, e->args[want - 1].loc, e->name);
  switch (f) {
  case 0:
    if (x < 0) error_at(e->loc, "sqrt of a negative number");
    return vfloat(sqrt(x));
  case 1: return checked_float(exp(x), e->loc);
  case 2:
    if (x <= 0) error_at(e->loc, "log of a non-positive number");
    return vfloat(log(x));
  case 3:
  case 4: {
    bool pick_a = f == 3 ? x <= y : x >= y;
    return pick_a ? a : b;
  }
  default:
    if (a.k == V_INT) return a.i == INT64_MIN ? checked_float(fabs(x), e->loc) : vint(a.i < 0 ? -a.i : a.i);
    return vfloat(fabs(x));
  }
}

/* ---- block calls ------------------------------------------------------------- */

/* The path of name in the current scope, "scope.name", with ".index" for a repeat
 * iteration (index >= 0): a parameter's checkpoint name, or a nested scope. */
static const char *join_scope(Elab *E, const char *name, int64_t index, SrcLoc loc) {
  const char *sep = *E->scope ? "." : "";
  if (strlen(E->scope) + strlen(name) + 24 > MAX_PATH) {
    char head[48];
    snprintf(head, sizeof head, "%s%s%s", E->scope, sep, name);
    error_at(loc, "the parameter path '%s...' is longer than %d characters", head, MAX_PATH);
  }
  if (index >= 0) return arena_printf(E->arena, "%s%s%s.%lld", E->scope, sep, name, (long long)index);
  return arena_printf(E->arena, "%s%s%s", E->scope, sep, name);
}

/* Enter a parameter scope: a call of block at loc, or a repeat iteration (block NULL). */
static void push_frame(Elab *E, SrcLoc loc, const char *block, const char *scope) {
  ir_assert(E->nframes < MAX_NEST);
  bool reused = strmap_get(&E->scopes, scope) != NULL;
  if (!reused) strmap_put(&E->scopes, scope, (void *)scope);
  E->frames[E->nframes++] = (Frame){loc, block, scope, reused};
  E->scope = scope;
}

static void pop_frame(Elab *E) {
  E->nframes--;
  E->scope = E->nframes ? E->frames[E->nframes - 1].scope : "";
}

static Value call_block(Elab *E, Env *env, Expr *e, Block *b) {
  Stmt *def = b->def;
  if (b->active && E->block != def)
    error_at(e->loc, "block '%s' calls itself through block '%s' (recursion is not allowed)", def->name,
             E->block->name);
  if (b->active) error_at(e->loc, "block '%s' calls itself (recursion is not allowed)", def->name);
  if (E->depth >= MAX_CALL_DEPTH) error_at(e->loc, "block calls nested more than %d deep", MAX_CALL_DEPTH);
  if (e->nargs != def->nargs)
    error_at(e->loc, "block '%s' takes %d argument%s, got %d", def->name, def->nargs, def->nargs == 1 ? "" : "s",
             e->nargs);
  Env inner = {0};
  strmap_init(&inner.vars, E->arena);
  for (int i = 0; i < e->nargs; i++) {
    if (e->args[i].key) error_at(e->args[i].loc, "block arguments are positional");
    strmap_put(&inner.vars, def->args[i].key, box(E, eval(E, env, e->args[i].val)));
  }
  Stmt *caller = E->block;
  push_frame(E, e->loc, def->name, join_scope(E, e->scope ? e->scope : def->name, -1, e->loc));
  b->active = true;
  E->block = def;
  E->depth++;
  exec_body(E, &inner, def->body);
  E->depth--;
  E->block = caller;
  b->active = false;
  pop_frame(E);
  if (!inner.returned) error_at(def->loc, "block '%s' ends without 'return'", def->name);
  return inner.ret;
}

static Value eval_call(Elab *E, Env *env, Expr *e) {
  Block *b = strmap_get(&E->blocks, e->name);
  if (b) return call_block(E, env, e, b);
  int op = op_lookup(e->name);
  if (op >= 0 && (op_info(op)->flags & OPF_DSL)) return call_op(E, env, e, (OpKind)op);
  Value v = call_math(E, env, e);
  if (v.n == -1) {
    if (!strcmp(e->name, "normal") || !strcmp(e->name, "uniform") || !strcmp(e->name, "constant"))
      error_at(e->loc, "'%s' initialises a parameter: use it after '=' in a param declaration", e->name);
    error_at(e->loc, "unknown function '%s'", e->name);
  }
  if (e->scope) error_at(e->scope_loc, "'as' names the scope of a block call; '%s' is a function", e->name);
  return v;
}

static Value eval_expr(Elab *E, Env *env, Expr *e) {
  switch (e->kind) {
  case EX_INT:
  case EX_BOOL: return vint(e->ival);
  case EX_FLOAT: return vfloat(e->fval);
  case EX_STR: return (Value){.k = V_STR, .s = e->name};
  case EX_NAME: return eval_name(E, env, e);
  case EX_LIST:
  case EX_TUPLE: return eval_list(E, env, e);
  case EX_BINARY: return eval_binary(E, env, e);
  case EX_UNARY: return eval_unary(E, env, e);
  case EX_CALL: return eval_call(E, env, e);
  }
  unreachable();
}

static Value eval(Elab *E, Env *env, Expr *e) {
  enter(E, e->loc);
  Value v = eval_expr(E, env, e);
  E->nest--;
  return v;
}

/* ---- declarations -------------------------------------------------------------- */

static void eval_type(Elab *E, Env *env, TypeExpr *t, Node *n) {
  int dt = dtype_lookup(t->dtype);
  if (dt < 0) error_at(t->loc, "unknown dtype '%s' (f32, bf16, f16, e4m3, e5m2, i32)", t->dtype);
  if (t->ndims > MAX_DIMS) error_at(t->loc, "%d dimensions; at most %d are allowed", t->ndims, MAX_DIMS);
  n->dtype = (DType)dt;
  n->shape.ndim = t->ndims;
  int64_t numel = 1;
  for (int i = 0; i < t->ndims; i++) {
    int64_t d = want_int(eval(E, env, t->dims[i].val), t->dims[i].loc, "a dimension");
    if (d <= 0) error_at(t->dims[i].loc, "dimension must be positive, got %lld", (long long)d);
    if (d > MAX_DIM) error_at(t->dims[i].loc, "dimension %lld is larger than 2^40", (long long)d);
    if (numel > MAX_NUMEL / d) error_at(t->dims[i].loc, "tensor too large: more than 2^48 elements");
    numel *= d;
    n->shape.d[i] = d;
  }
}

static Init eval_init(Elab *E, Env *env, Expr *e) {
  if (!e) return (Init){INIT_NORMAL, 0.02, 0};
  if (e->kind == EX_NAME && !strcmp(e->name, "zeros")) return (Init){INIT_ZEROS, 0, 0};
  if (e->kind == EX_NAME && !strcmp(e->name, "ones")) return (Init){INIT_ONES, 0, 0};
  if (e->kind != EX_CALL)
    error_at(e->loc, "expected an initialiser: zeros, ones, normal(std[, mean]), uniform(lo, hi) or constant(v)");
  struct {
    const char *name;
    InitKind k;
    int min, max;
  } inits[] = {{"normal", INIT_NORMAL, 1, 2}, {"uniform", INIT_UNIFORM, 2, 2}, {"constant", INIT_CONSTANT, 1, 1}};
  for (int i = 0; i < 3; i++) {
    if (strcmp(e->name, inits[i].name)) continue;
    if (e->nargs < inits[i].min || e->nargs > inits[i].max)
      error_at(e->loc, "%s takes %d to %d numbers", e->name, inits[i].min, inits[i].max);
    double v[2] = {0, 0};
    for (int j = 0; j < e->nargs; j++) {
      if (e->args[j].key) error_at(e->args[j].loc, "initialiser arguments are positional");
      v[j] = want_num(eval(E, env, e->args[j].val), e->args[j].loc, "an initialiser argument");
    }
    if (inits[i].k == INIT_NORMAL && v[0] < 0) error_at(e->loc, "normal: std must not be negative");
    if (inits[i].k == INIT_UNIFORM && v[1] < v[0]) error_at(e->loc, "uniform: hi must not be below lo");
    return (Init){inits[i].k, v[0], v[1]};
  }
  error_at(e->loc, "unknown initialiser '%s'", e->name);
}

static void define_var(Elab *E, Env *env, const char *name, Value v, SrcLoc loc) {
  if (strmap_get(&E->config, name)) error_at(loc, "'%s' is a config constant and cannot be assigned", name);
  strmap_put(&env->vars, name, box(E, v));
}

/* Input and parameter names are checkpoint keys: unique. A parameter declared twice
 * comes from a scope used twice; blame the outermost call or repeat that reused it. */
static void declare_name(Elab *E, Node *n) {
  Node *old = strmap_get(&E->names, n->name);
  if (!old) {
    strmap_put(&E->names, n->name, n);
    return;
  }
  for (int i = 0; i < E->nframes; i++) {
    Frame *f = &E->frames[i];
    if (!f->reused) continue;
    if (f->block)
      error_at(f->loc,
               "this call of block '%s' uses the scope '%s' again, so '%s' is declared twice "
               "(give each call its own scope with 'as NAME')",
               f->block, f->scope, n->name);
    error_at(f->loc, "this repeat uses the scope '%s' again, so '%s' is declared twice (give it another name)",
             f->scope, n->name);
  }
  error_at(n->loc, "'%s' is already declared at line %d", n->name, old->loc.line);
}

static void exec_param(Elab *E, Env *env, Stmt *s) {
  Node *n = add_node(E, OP_PARAM, NULL, 0, s->loc);
  n->name = join_scope(E, s->name, -1, s->loc);
  eval_type(E, env, &s->type, n);
  n->init = eval_init(E, env, s->value);
  finish(n);
  /* a repeat body shares its variables across iterations: rebinding a name of an
   * earlier iteration is no redefinition */
  Value *old = strmap_get(&env->vars, s->name);
  if (old && !(old->k == V_TENSOR && old->t->layer != E->layer))
    error_at(s->loc, "'%s' is already defined in this scope", s->name);
  declare_name(E, n);
  E->params += shape_numel(&n->shape);
  if (E->params > MAX_NUMEL) error_at(s->loc, "the model has more than 2^48 parameters");
  define_var(E, env, s->name, vtensor(n), s->loc);
}

static void exec_repeat(Elab *E, Env *env, Stmt *s) {
  int64_t count = want_int(eval(E, env, s->value), s->value->loc, "a repeat count");
  if (count < 0 || count > MAX_REPEAT)
    error_at(s->value->loc, "repeat count %lld is outside 0..%d", (long long)count, MAX_REPEAT);
  int saved_layer = E->layer, group = E->groups++;
  for (int64_t i = 0; i < count; i++) {
    step(E, s->loc);
    if (E->g->nlayers >= MAX_LAYERS)
      error_at(s->loc, "the model has more than %d layers (repeat iterations)", MAX_LAYERS);
    push_frame(E, s->loc, NULL, join_scope(E, s->name, i, s->loc));
    E->layer = graph_add_layer(E->g, E->scope, group);
    exec_body(E, env, s->body);
    if (env->returned) error_at(s->loc, "'return' inside a repeat body");
    pop_frame(E);
  }
  E->layer = saved_layer;
}

static void exec_stmt(Elab *E, Env *env, Stmt *s) {
  enter(E, s->loc);
  switch (s->kind) {
  case ST_ASSIGN: define_var(E, env, s->name, eval(E, env, s->value), s->loc); break;
  case ST_PARAM: exec_param(E, env, s); break;
  case ST_REPEAT: exec_repeat(E, env, s); break;
  case ST_RETURN:
    env->ret = eval(E, env, s->value);
    env->returned = true;
    break;
  case ST_CONFIG:
  case ST_INPUT:
  case ST_BLOCK:
  case ST_TRAIN: unreachable();
  }
  E->nest--;
}

static void exec_body(Elab *E, Env *env, Stmt *s) {
  for (; s && !env->returned; s = s->next) exec_stmt(E, env, s);
}

/* ---- top level ---------------------------------------------------------------- */

static Value parse_override(ConfigOverride *o, SrcLoc loc) {
  char *end;
  errno = 0;
  long long i = strtoll(o->value, &end, 10);
  if (!*end && *o->value && !errno) return vint(i);
  double f = strtod(o->value, &end);
  if (!*end && *o->value && isfinite(f)) return vfloat(f);
  error_at(loc, "--set %s=%s: the value must be a number", o->name, o->value);
}

static void exec_config(Elab *E, Stmt *s) {
  if (strmap_get(&E->config, s->name)) error_at(s->loc, "config constant '%s' is defined twice", s->name);
  for (int i = 0; i < E->nov; i++)
    if (!strcmp(E->ov[i].name, s->name)) {
      E->ov[i].used = true;
      strmap_put(&E->config, s->name, box(E, parse_override(&E->ov[i], s->loc)));
      return;
    }
  Value v = eval(E, NULL, s->value);
  if (v.k == V_TENSOR) error_at(s->value->loc, "config constant '%s' must be a number, not a tensor", s->name);
  strmap_put(&E->config, s->name, box(E, v));
}

static void exec_input(Elab *E, Env *env, Stmt *s) {
  Node *n = add_node(E, OP_INPUT, NULL, 0, s->loc);
  n->name = arena_strdup(E->arena, s->name);
  eval_type(E, env, &s->type, n);
  finish(n);
  if (strmap_get(&env->vars, s->name)) error_at(s->loc, "'%s' is already defined", s->name);
  declare_name(E, n);
  define_var(E, env, s->name, vtensor(n), s->loc);
}

static double train_num(Elab *E, Arg *a) { return want_num(eval(E, NULL, a->val), a->loc, a->key); }

static void train_arg(Elab *E, TrainSpec *t, Arg *a) {
  if (!a->key) error_at(a->loc, "optimizer arguments are named, like lr = 3e-4");
  Value v;
  if (!strcmp(a->key, "betas")) {
    v = eval(E, NULL, a->val);
    if (v.k != V_LIST || v.n != 2) error_at(a->loc, "betas must be a pair, like (0.9, 0.95)");
    t->beta1 = want_num(v.items[0], a->loc, "beta1");
    t->beta2 = want_num(v.items[1], a->loc, "beta2");
  } else if (!strcmp(a->key, "schedule")) {
    v = eval(E, NULL, a->val);
    if (v.k != V_STR || (strcmp(v.s, "cosine") && strcmp(v.s, "constant")))
      error_at(a->loc, "schedule must be \"cosine\" or \"constant\"");
    t->schedule = strcmp(v.s, "cosine") ? SCHED_CONSTANT : SCHED_COSINE;
  } else if (!strcmp(a->key, "warmup")) {
    t->warmup = want_int(eval(E, NULL, a->val), a->loc, "warmup");
    if (t->warmup < 0) error_at(a->loc, "warmup must not be negative");
  } else {
    struct {
      const char *k;
      double *v;
    } keys[] = {{"lr", &t->lr},
                {"eps", &t->eps},
                {"weight_decay", &t->weight_decay},
                {"momentum", &t->momentum},
                {"clip", &t->clip},
                {"min_lr", &t->min_lr},
                {"beta1", &t->beta1},
                {"beta2", &t->beta2}};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
      if (!strcmp(a->key, keys[i].k)) {
        *keys[i].v = train_num(E, a);
        if (*keys[i].v < 0) error_at(a->loc, "%s must not be negative", a->key);
        return;
      }
    error_at(a->loc,
             "unknown optimizer argument '%s' (lr, betas, eps, weight_decay, momentum, clip, warmup, min_lr, schedule)",
             a->key);
  }
}

/* Each optimizer's defaults: PyTorch's AdamW and SGD, ColossalAI's Lamb. */
void frontend_train_defaults(TrainSpec *t, OptKind opt) {
  if (opt == OPT_ADAMW)
    *t = (TrainSpec){OPT_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0, 0, 0, 0, SCHED_CONSTANT, {0}, false};
  else if (opt == OPT_LAMB)
    *t = (TrainSpec){OPT_LAMB, 1e-3, 0.9, 0.999, 1e-6, 0, 0, 0, 0, 0, SCHED_CONSTANT, {0}, false};
  else *t = (TrainSpec){OPT_SGD, 1e-2, 0, 0, 0, 0, 0, 0, 0, 0, SCHED_CONSTANT, {0}, false};
}

/* The optimizer of a train directive: its arguments over its defaults. */
static void train_spec(Elab *E, Stmt *s, TrainSpec *t) {
  int opt = 0;
  while (opt < OPT_COUNT && strcmp(s->opt, opt_names[opt])) opt++;
  if (opt == OPT_COUNT) error_at(s->loc, "unknown optimizer '%s' (adamw, sgd or lamb)", s->opt);
  frontend_train_defaults(t, (OptKind)opt);
  t->loc = s->loc;
  for (int i = 0; i < s->nargs; i++) train_arg(E, t, &s->args[i]);
  if (!(t->lr > 0)) error_at(s->loc, "the learning rate must be positive");
  if (t->beta1 >= 1 || t->beta2 >= 1) error_at(s->loc, "betas must be below 1");
}

static void exec_train(Elab *E, Env *env, Stmt *s) {
  Graph *g = E->g;
  if (g->has_train) error_at(s->loc, "a second 'train' directive");
  Value *loss = strmap_get(&env->vars, s->name);
  if (!loss) error_at(s->value->loc, "unknown loss '%s'", s->name);
  g->loss = want_tensor(*loss, s->value->loc, "the loss");
  if (g->loss->shape.ndim != 0 || !dtype_is_float(g->loss->dtype)) {
    char shape[96];
    shape_format(shape, sizeof shape, &g->loss->shape);
    error_at(s->value->loc, "the loss must be a floating-point scalar; '%s' is %s%s", s->name,
             dtype_name(g->loss->dtype), shape);
  }
  g->has_train = true;
  g->loss_name = s->name;
  train_spec(E, s, &g->train);
}

static void collect_blocks(Elab *E, Stmt *s) {
  for (; s; s = s->next) {
    if (s->kind != ST_BLOCK) continue;
    if (strmap_get(&E->blocks, s->name)) error_at(s->loc, "block '%s' is defined twice", s->name);
    if (op_lookup(s->name) >= 0) error_at(s->loc, "block '%s' has the name of a built-in op", s->name);
    for (int i = 0; i < s->nargs; i++)
      for (int j = 0; j < i; j++)
        if (!strcmp(s->args[i].key, s->args[j].key)) error_at(s->args[i].loc, "argument '%s' repeated", s->args[i].key);
    Block *b = arena_alloc(E->arena, sizeof *b);
    b->def = s;
    strmap_put(&E->blocks, s->name, b);
  }
}

const char *frontend_model_name(Arena *a, const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  const char *dot = strrchr(base, '.');
  return arena_strndup(a, base, dot && dot != base ? (size_t)(dot - base) : strlen(base));
}

Graph *frontend_elaborate(Ast *ast, ConfigOverride *ov, int nov) {
  Elab E = {.arena = ast->arena, .ov = ov, .nov = nov, .scope = "", .layer = -1};
  E.g = graph_new(ast->arena, frontend_model_name(ast->arena, ast->src->name));
  E.g->source = ast->src->name;
  E.mem0 = E.arena->total;
  E.frames = arena_array(E.arena, MAX_NEST, sizeof *E.frames);
  strmap_init(&E.config, E.arena);
  strmap_init(&E.blocks, E.arena);
  strmap_init(&E.names, E.arena);
  strmap_init(&E.scopes, E.arena);
  collect_blocks(&E, ast->items);
  Env top = {0};
  strmap_init(&top.vars, E.arena);
  for (Stmt *s = ast->items; s; s = s->next) {
    switch (s->kind) {
    case ST_CONFIG: exec_config(&E, s); break;
    case ST_INPUT: exec_input(&E, &top, s); break;
    case ST_BLOCK: break;
    case ST_TRAIN: exec_train(&E, &top, s); break;
    case ST_RETURN: error_at(s->loc, "'return' outside a block");
    case ST_ASSIGN:
    case ST_PARAM:
    case ST_REPEAT: exec_stmt(&E, &top, s); break;
    }
  }
  for (int i = 0; i < nov; i++)
    if (!ov[i].used) error_plain("--set %s: the model has no config constant '%s'", ov[i].name, ov[i].name);
  if (!E.g->has_train)
    error_at((SrcLoc){ast->src, 1, 1}, "the model has no 'train' directive (train LOSS with adamw(...);)");
  return E.g;
}

/* ---- a training side file ------------------------------------------------------------ */

bool frontend_train_file(Arena *a, const char *path, Graph *g) {
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    diag_pop(&j);
    return false;
  }
  size_t len;
  char *text = frontend_read_file(a, path, &len);
  Ast *ast = frontend_parse(a, path, text, len);
  if (!ast) {
    diag_pop(&j);
    return false;
  }
  Stmt *s = ast->items;
  if (!s || s->kind != ST_TRAIN || s->next)
    error_at(s ? s->loc : (SrcLoc){ast->src, 1, 1},
             "a training file holds one train directive and nothing else, like: train loss with adamw(lr = 6e-4);");
  if (g->loss_name && strcmp(s->name, g->loss_name))
    error_at(s->value ? s->value->loc : s->loc, "the model's loss is '%s', not '%s'", g->loss_name, s->name);
  Elab E = {.arena = a, .scope = "", .layer = -1, .g = g};
  E.mem0 = a->total;
  strmap_init(&E.config, a);
  strmap_init(&E.blocks, a);
  train_spec(&E, s, &g->train);
  g->has_train = true;
  diag_pop(&j);
  return true;
}
