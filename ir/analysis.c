/* Graph analyses shared by passes and the planner (ir/analysis.h). */
#include "ir/analysis.h"

void graph_stats(const Graph *g, GraphStats *s) {
  *s = (GraphStats){0};
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    Cost c;
    node_cost(n, &c);
    s->fwd_flops += c.fwd_flops;
    s->train_flops += c.fwd_flops + c.bwd_flops;
    if (n->op != OP_PARAM) continue;
    s->params += shape_numel(&n->shape);
    s->param_bytes += (double)shape_numel(&n->shape) * dtype_size_bits(n->dtype) / 8;
  }
}

static bool is_const(const Node *n) { return n->op == OP_CONST; }

int ir_attn_core(const Node *sm, const Node **core) {
  if (sm->op != OP_SOFTMAX) return 0;
  const Node *chain[8];
  int n = 0;
  chain[n++] = sm;
  const Node *x = sm->in[0];
  while (n < 7 && (x->op == OP_MUL || x->op == OP_DIV || x->op == OP_ADD || x->op == OP_SUB)) {
    if (is_const(x->in[1])) chain[n++] = x, x = x->in[0];
    else if (is_const(x->in[0]) && x->op != OP_DIV && x->op != OP_SUB) chain[n++] = x, x = x->in[1];
    else return 0;
  }
  if (x->op != OP_MATMUL) return 0;
  core[0] = x;
  for (int i = 0; i < n; i++) core[i + 1] = chain[n - 1 - i];
  return n + 1;
}
