/* Reads the IR text form written by ir/print.c back into a Graph, for golden tests
 * and for bug reports that are files. Every node is re-inferred through the op table
 * and must match its declared dtype and shape.
 *
 *   graph NAME [source=FILE]
 *   layer INDEX NAME group=G
 *   %ID = OP [NAME] [%IN {, %IN}] {ATTR=VALUE} [init=INIT] : DTYPE[DIMS] [layer=L] [@LINE:COL]
 *   train %LOSS OPT {KEY=VALUE}
 */
#include "ir/ir.h"
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct Cur {
  const SrcFile *src;
  const char *p, *end, *line_start;
  int line;
  Graph *g;
  SrcFile *model_src; /* the model file named on the graph line, for @LINE:COL */
} Cur;

static SrcLoc here(Cur *c) { return (SrcLoc){c->src, c->line, (int)(c->p - c->line_start) + 1}; }

static void skip_blank(Cur *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r')) c->p++;
}

static bool at_eol(Cur *c) {
  skip_blank(c);
  return c->p >= c->end || *c->p == '\n' || *c->p == '#';
}

static bool word_char(char ch) { return isalnum((unsigned char)ch) || strchr("_.+-/", ch); }

/* A word: name, number, dtype. Returned in the arena. */
static char *word(Cur *c, const char *what) {
  skip_blank(c);
  const char *s = c->p;
  while (c->p < c->end && word_char(*c->p)) c->p++;
  if (c->p == s) error_at(here(c), "expected %s", what);
  return arena_strndup(c->g->arena, s, c->p - s);
}

static bool accept(Cur *c, char ch) {
  skip_blank(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return true;
  }
  return false;
}

static void expect(Cur *c, char ch) {
  if (!accept(c, ch)) error_at(here(c), "expected '%c'", ch);
}

static int64_t integer(Cur *c, const char *what) {
  SrcLoc at = here(c);
  char *w = word(c, what), *e;
  errno = 0;
  long long v = strtoll(w, &e, 10);
  if (*e || errno) error_at(at, "expected %s, got '%s'", what, w);
  return v;
}

static double number(Cur *c, const char *what) {
  SrcLoc at = here(c);
  char *w = word(c, what), *e;
  double v = strtod(w, &e);
  if (*e) error_at(at, "expected %s, got '%s'", what, w);
  return v;
}

static void next_line(Cur *c) {
  if (!at_eol(c)) error_at(here(c), "unexpected text at the end of the line");
  while (c->p < c->end && *c->p != '\n') c->p++;
  if (c->p < c->end) c->p++;
  c->line++;
  c->line_start = c->p;
}

static Node *node_ref(Cur *c) {
  SrcLoc at = here(c);
  expect(c, '%');
  int64_t id = integer(c, "a node number");
  if (id < 0 || id >= c->g->n) error_at(at, "%%%lld is not an earlier node", (long long)id);
  return c->g->nodes[id];
}

static void parse_ints(Cur *c, AttrVal *v) {
  expect(c, '[');
  v->n = 0;
  if (accept(c, ']')) return;
  do {
    if (v->n == MAX_DIMS) error_at(here(c), "more than %d values", MAX_DIMS);
    v->v[v->n++] = integer(c, "an integer");
  } while (accept(c, ','));
  expect(c, ']');
}

static void parse_attr(Cur *c, Node *n, const char *key, SrcLoc at) {
  int i = op_attr_index(n->op, key);
  if (i < 0) error_at(at, "%s has no attribute '%s'", op_info(n->op)->name, key);
  AttrVal *v = &n->attr[i];
  v->set = true;
  switch (op_attr(n->op, i)->kind) {
  case AK_INT:
  case AK_BOOL: v->i = integer(c, "an integer"); break;
  case AK_FLOAT: v->f = number(c, "a number"); break;
  case AK_INTS: parse_ints(c, v); break;
  case AK_DTYPE: {
    char *w = word(c, "a dtype");
    int t = dtype_lookup(w);
    if (t < 0) error_at(at, "unknown dtype '%s'", w);
    v->i = t;
    break;
  }
  case AK_STR: v->s = word(c, "a string"); break;
  }
}

static void parse_init(Cur *c, Node *n, SrcLoc at) {
  char *kind = word(c, "an initialiser");
  static const char *names[] = {"none", "zeros", "ones", "normal", "uniform", "constant"};
  int k = -1;
  for (int i = 0; i < 6; i++)
    if (!strcmp(kind, names[i])) k = i;
  if (k < 0) error_at(at, "unknown initialiser '%s'", kind);
  n->init.kind = (InitKind)k;
  if (k < INIT_NORMAL) return;
  expect(c, '(');
  n->init.a = number(c, "a number");
  if (k != INIT_CONSTANT) {
    expect(c, ',');
    n->init.b = number(c, "a number");
  }
  expect(c, ')');
}

static void parse_type(Cur *c, Node *n) {
  SrcLoc at = here(c);
  skip_blank(c);
  const char *s = c->p;
  while (c->p < c->end && isalnum((unsigned char)*c->p)) c->p++;
  char *t = arena_strndup(c->g->arena, s, c->p - s);
  int dt = dtype_lookup(t);
  if (dt < 0) error_at(at, "unknown dtype '%s'", t);
  n->dtype = (DType)dt;
  AttrVal dims = {0};
  parse_ints(c, &dims);
  n->shape.ndim = dims.n;
  for (int i = 0; i < dims.n; i++) {
    if (dims.v[i] < 0) error_at(at, "negative dimension");
    n->shape.d[i] = dims.v[i];
  }
}

/* Trailing "layer=L" and "@LINE:COL". */
static void parse_suffix(Cur *c, Node *n) {
  n->loc.line = 0;
  while (!at_eol(c)) {
    SrcLoc at = here(c);
    if (accept(c, '@')) {
      n->loc = (SrcLoc){c->model_src, (int)integer(c, "a line"), 0};
      expect(c, ':');
      n->loc.col = (int)integer(c, "a column");
      continue;
    }
    char *k = word(c, "layer=");
    expect(c, '=');
    if (strcmp(k, "layer")) error_at(at, "unexpected '%s'", k);
    n->layer = (int)integer(c, "a layer index");
    if (n->layer < 0 || n->layer >= c->g->nlayers) error_at(at, "layer %d is not declared", n->layer);
  }
}

static void parse_node(Cur *c) {
  SrcLoc at = here(c);
  expect(c, '%');
  int64_t id = integer(c, "a node number");
  if (id != c->g->n) error_at(at, "expected node %%%d here, got %%%lld", c->g->n, (long long)id);
  expect(c, '=');
  SrcLoc opat = here(c);
  char *opname = word(c, "an op");
  int op = op_lookup(opname);
  if (op < 0) error_at(opat, "unknown op '%s'", opname);
  Node *in[64];
  int nin = 0;
  char *name = NULL;
  if (op == OP_INPUT || op == OP_PARAM) name = word(c, "a name");
  skip_blank(c);
  if (c->p < c->end && *c->p == '%') do {
      if (nin == 64) error_at(here(c), "too many inputs");
      in[nin++] = node_ref(c);
    } while (accept(c, ','));
  Node *n = graph_add(c->g, (OpKind)op, in, nin, at);
  n->name = name;
  while (!accept(c, ':')) {
    SrcLoc kat = here(c);
    char *k = word(c, "an attribute or ':'");
    expect(c, '=');
    if (!strcmp(k, "init")) parse_init(c, n, kat);
    else parse_attr(c, n, k, kat);
  }
  parse_type(c, n);
  parse_suffix(c, n);
  Node declared = *n;
  SrcLoc loc = n->loc;
  n->loc = at;
  node_infer(n);
  if (n->dtype != declared.dtype || !shape_eq(&n->shape, &declared.shape))
    error_at(at, "%%%d: declared type differs from what %s infers", n->id, opname);
  n->loc = loc.line ? loc : at;
}

static void parse_train(Cur *c) {
  Graph *g = c->g;
  g->loss = node_ref(c);
  g->has_train = true;
  TrainSpec *t = &g->train;
  t->loc = here(c);
  char *opt = word(c, "an optimizer");
  t->opt = OPT_COUNT;
  for (int k = 0; k < OPT_COUNT; k++)
    if (!strcmp(opt, opt_names[k])) t->opt = (OptKind)k;
  if (t->opt == OPT_COUNT) error_at(t->loc, "unknown optimizer '%s'", opt);
  struct {
    const char *k;
    double *v;
  } keys[] = {{"lr", &t->lr},
              {"beta1", &t->beta1},
              {"beta2", &t->beta2},
              {"eps", &t->eps},
              {"weight_decay", &t->weight_decay},
              {"momentum", &t->momentum},
              {"clip", &t->clip},
              {"min_lr", &t->min_lr}};
  while (!at_eol(c)) {
    SrcLoc at = here(c);
    char *k = word(c, "a key");
    expect(c, '=');
    bool found = false;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
      if (!strcmp(k, keys[i].k)) {
        *keys[i].v = number(c, "a number");
        found = true;
      }
    if (!strcmp(k, "warmup")) {
      t->warmup = integer(c, "an integer");
      found = true;
    }
    if (!strcmp(k, "schedule")) {
      t->schedule = strcmp(word(c, "a schedule"), "cosine") ? SCHED_CONSTANT : SCHED_COSINE;
      found = true;
    }
    if (!found) error_at(at, "unknown training key '%s'", k);
  }
}

static void parse_header(Cur *c) {
  SrcLoc at = here(c);
  char *kw = word(c, "'graph'");
  if (strcmp(kw, "graph")) error_at(at, "expected 'graph'");
  c->g = graph_new(c->g->arena, word(c, "a graph name"));
  if (!at_eol(c)) {
    char *k = word(c, "source=");
    if (strcmp(k, "source")) error_at(at, "expected source=FILE");
    expect(c, '=');
    c->model_src = arena_alloc(c->g->arena, sizeof *c->model_src);
    c->model_src->name = c->g->source = word(c, "a file name");
  }
  next_line(c);
}

Graph *ir_parse(Arena *a, const SrcFile *src) {
  Graph tmp = {.arena = a};
  Cur c = {src, src->text, src->text + src->len, src->text, 1, &tmp, NULL};
  while (at_eol(&c) && c.p < c.end) next_line(&c);
  parse_header(&c);
  while (c.p < c.end) {
    SrcLoc at = here(&c);
    if (at_eol(&c)) {
      next_line(&c);
      continue;
    }
    if (*c.p == '%') parse_node(&c);
    else {
      char *kw = word(&c, "a node, 'layer' or 'train'");
      if (!strcmp(kw, "layer")) {
        int64_t i = integer(&c, "a layer index");
        if (i != c.g->nlayers) error_at(at, "expected layer %d", c.g->nlayers);
        char *name = word(&c, "a layer name");
        char *grp = word(&c, "group=G");
        if (strncmp(grp, "group", 5)) error_at(at, "expected group=G");
        expect(&c, '=');
        graph_add_layer(c.g, name, (int)integer(&c, "a group"));
      } else if (!strcmp(kw, "train")) parse_train(&c);
      else error_at(at, "unexpected '%s'", kw);
    }
    next_line(&c);
  }
  return c.g;
}
