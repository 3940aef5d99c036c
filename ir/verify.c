/* The IR verifier: structural invariants every pass may rely on, and shapes and
 * dtypes that agree with the op table's rules. Run after the front end and, in
 * debug builds, between passes. */
#include "ir/ir.h"
#include "ir/strmap.h"

static void verify_node(Graph *g, Node *n, int index) {
  if (n->id != index) error_at(n->loc, "verifier: node %%%d stored at position %d", n->id, index);
  if (n->op < 0 || n->op >= OP_COUNT) error_at(n->loc, "verifier: bad op %d", (int)n->op);
  for (int i = 0; i < n->nin; i++)
    if (!n->in[i] || n->in[i]->id >= n->id || g->nodes[n->in[i]->id] != n->in[i])
      error_at(n->loc, "verifier: %%%d input %d is not an earlier node of the graph", n->id, i + 1);
  if ((n->op == OP_INPUT || n->op == OP_PARAM) != (n->name != NULL))
    error_at(n->loc, "verifier: %%%d: only inputs and parameters carry names", n->id);
  if (n->layer < -1 || n->layer >= g->nlayers) error_at(n->loc, "verifier: %%%d: bad layer %d", n->id, n->layer);
  Node copy = *n;
  node_infer(&copy);
  if (copy.dtype != n->dtype || !shape_eq(&copy.shape, &n->shape)) {
    char want[96], got[96];
    shape_format(want, sizeof want, &copy.shape);
    shape_format(got, sizeof got, &n->shape);
    error_at(n->loc, "verifier: %%%d is %s%s but %s gives %s%s", n->id, dtype_name(n->dtype), got, op_info(n->op)->name,
             dtype_name(copy.dtype), want);
  }
}

/* Names of inputs and parameters are unique (they are checkpoint keys). */
static void verify_names(Graph *g) {
  StrMap seen;
  strmap_init(&seen, g->arena);
  for (int i = 0; i < g->n; i++) {
    Node *a = g->nodes[i];
    if (!a->name) continue;
    if (strmap_get(&seen, a->name)) error_at(a->loc, "verifier: '%s' is declared twice", a->name);
    strmap_put(&seen, a->name, a);
  }
}

void ir_verify(Graph *g) {
  for (int i = 0; i < g->n; i++) verify_node(g, g->nodes[i], i);
  verify_names(g);
  if (g->has_train) {
    if (!g->loss && !g->nouts) error_plain("verifier: training directive without a loss");
    if (g->loss && (g->loss->shape.ndim != 0 || !dtype_is_float(g->loss->dtype))) {
      char s[96];
      shape_format(s, sizeof s, &g->loss->shape);
      error_at(g->loss->loc, "the loss must be a floating-point scalar, got %s%s", dtype_name(g->loss->dtype), s);
    }
  }
}
