/* Graph construction: nodes in topological order, attribute defaults from the op
 * table, shape inference through the op table, and the layer list. */
#include "ir/ir.h"
#include <string.h>

/* A bound on graph size that no real model reaches; it turns a runaway `repeat` or
 * block expansion into an error instead of a hang. */
enum { MAX_NODES = 1 << 20 };

#define OPT_NAME(name, text) text,
const char *const opt_names[OPT_COUNT] = {OPT_KINDS(OPT_NAME)};
#undef OPT_NAME

Graph *graph_new(Arena *a, const char *name) {
  op_table_init();
  Graph *g = arena_alloc(a, sizeof *g);
  g->arena = a;
  g->name = arena_strdup(a, name);
  return g;
}

static void graph_grow(Graph *g) {
  int cap = g->cap ? g->cap * 2 : 256;
  Node **nodes = arena_array(g->arena, cap, sizeof *nodes);
  if (g->n) memcpy(nodes, g->nodes, g->n * sizeof *nodes);
  g->nodes = nodes;
  g->cap = cap;
}

Node *graph_add(Graph *g, OpKind op, Node **in, int nin, SrcLoc loc) {
  if (g->n >= MAX_NODES)
    error_at(loc, "model too large: more than %d ops (a runaway repeat or block expansion?)", MAX_NODES);
  if (g->n == g->cap) graph_grow(g);
  Node *n = arena_alloc(g->arena, sizeof *n);
  n->id = g->n;
  n->op = op;
  n->nin = nin;
  n->in = arena_array(g->arena, nin ? nin : 1, sizeof *n->in);
  for (int i = 0; i < nin; i++) n->in[i] = in[i];
  n->layer = -1;
  n->loc = loc;
  for (int i = 0; i < op_nattrs(op); i++) {
    const AttrSpec *s = op_attr(op, i);
    if (s->required || s->optional) continue;
    n->attr[i].set = true;
    n->attr[i].i = (int64_t)s->def;
    n->attr[i].f = s->def;
  }
  g->nodes[g->n++] = n;
  return n;
}

int graph_add_layer(Graph *g, const char *name, int group) {
  if (g->nlayers == g->layers_cap) {
    int cap = g->layers_cap ? g->layers_cap * 2 : 64;
    Layer *l = arena_array(g->arena, cap, sizeof *l);
    if (g->nlayers) memcpy(l, g->layers, g->nlayers * sizeof *l);
    g->layers = l;
    g->layers_cap = cap;
  }
  g->layers[g->nlayers] = (Layer){arena_strdup(g->arena, name), group};
  return g->nlayers++;
}

void node_infer(Node *n) {
  const OpInfo *oi = op_info(n->op);
  if (oi->nin >= 0 && n->nin != oi->nin)
    error_at(n->loc, "%s takes %d tensor input%s, got %d", oi->name, oi->nin, oi->nin == 1 ? "" : "s", n->nin);
  if (oi->nin < 0 && n->nin < 1) error_at(n->loc, "%s takes at least one tensor input", oi->name);
  for (int i = 0; i < op_nattrs(n->op); i++)
    if (op_attr(n->op, i)->required && !n->attr[i].set)
      error_at(n->loc, "%s: missing attribute '%s'", oi->name, op_attr(n->op, i)->name);
  oi->infer(n);
  if (n->shape.ndim < 0 || n->shape.ndim > MAX_DIMS) error_at(n->loc, "%s: result has too many dimensions", oi->name);
  int64_t numel = 1;
  for (int i = 0; i < n->shape.ndim; i++) {
    if (n->shape.d[i] < 0) error_at(n->loc, "%s: negative dimension %lld", oi->name, (long long)n->shape.d[i]);
    if (n->shape.d[i] > MAX_NUMEL) /* even in a tensor of no elements */
      error_at(n->loc, "%s: dimension %lld of the result is larger than 2^48", oi->name, (long long)n->shape.d[i]);
    if (n->shape.d[i] > 0 && numel > MAX_NUMEL / n->shape.d[i])
      error_at(n->loc, "%s: result has more than 2^48 elements", oi->name);
    numel *= n->shape.d[i];
  }
}

const AttrVal *attr_get(const Node *n, const char *name) {
  int i = op_attr_index(n->op, name);
  if (i < 0) diag_internal(__FILE__, __LINE__, name);
  return &n->attr[i];
}

int64_t attr_int(const Node *n, const char *name) { return attr_get(n, name)->i; }
double attr_float(const Node *n, const char *name) { return attr_get(n, name)->f; }

void node_cost(const Node *n, Cost *c) {
  *c = (Cost){0, 0, 0};
  op_info(n->op)->cost(n, c);
}

Node *graph_clone_node(Graph *g, const Node *src, Node **in) {
  Node *n = graph_add(g, src->op, in, src->nin, src->loc);
  memcpy(n->attr, src->attr, sizeof n->attr);
  n->dtype = src->dtype;
  n->shape = src->shape;
  n->name = src->name;
  n->init = src->init;
  n->layer = src->layer;
  n->split = src->split;
  n->split_blocks = src->split_blocks;
  return n;
}

Graph *graph_new_like(const Graph *g) {
  Graph *h = graph_new(g->arena, g->name);
  h->source = g->source;
  for (int i = 0; i < g->nlayers; i++) graph_add_layer(h, g->layers[i].name, g->layers[i].group);
  h->has_train = g->has_train;
  h->train = g->train;
  h->loss_name = g->loss_name;
  return h;
}
