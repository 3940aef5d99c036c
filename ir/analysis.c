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

const char *arch_kind_name(ArchKind k) {
  static const char *const names[] = {NULL, "mixed", "layernorm", "rmsnorm", "gelu_tanh", "silu", "relu"};
  return names[k];
}

/* One more op stating kind: the same as before, or mixed. */
static void arch_kind(ArchKind *k, ArchKind seen) { *k = *k == ARCH_NONE || *k == seen ? seen : ARCH_MIXED; }

/* One more op stating value v (> 0): the same as before, or -1. */
static void arch_value(double *x, double v) { *x = *x == 0 || *x == v ? v : -1; }

static void arch_attention(GraphArch *a, const Node *n) {
  int64_t h = attr_int(n, "heads");
  int causal = (int)attr_int(n, "causal");
  int64_t g = attn_kv_heads(n), w = attn_window(n);
  bool first = a->causal == 2;
  a->heads = a->heads == 0 || a->heads == h ? h : -1;
  a->kv_heads = a->kv_heads == 0 || a->kv_heads == g ? g : -1;
  a->window = first || a->window == w ? w : -1;
  a->causal = a->causal == 2 || a->causal == causal ? causal : -1;
  a->scaled |= attr_get(n, "scale")->set;
}

void graph_arch(const Graph *g, GraphArch *a) {
  static const ArchKind kind_of[OP_COUNT] = {[OP_LAYERNORM] = ARCH_LAYERNORM,
                                             [OP_RMSNORM] = ARCH_RMSNORM,
                                             [OP_GELU] = ARCH_GELU_TANH,
                                             [OP_SILU] = ARCH_SILU,
                                             [OP_RELU] = ARCH_RELU};
  *a = (GraphArch){.causal = 2}; /* 2: no attention seen yet */
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_ATTENTION) arch_attention(a, n);
    else if (n->op == OP_ROTARY) {
      static const char *const scaling[4] = {"scaling", "low_freq", "high_freq", "original_ctx"};
      arch_value(&a->rope_theta, attr_float(n, "theta"));
      for (int k = 0; k < 4; k++)
        arch_value(&a->rope_scaling[k], k < 3 ? attr_float(n, scaling[k]) : (double)attr_int(n, scaling[k]));
    } else if (n->op == OP_LAYERNORM || n->op == OP_RMSNORM)
      arch_kind(&a->norm, kind_of[n->op]), arch_value(&a->norm_eps, attr_float(n, "eps"));
    else if (kind_of[n->op] != ARCH_NONE) arch_kind(&a->act, kind_of[n->op]);
  }
  if (a->causal == 2) a->causal = 0;
}

static bool is_const(const Node *n) { return n->op == OP_CONST; }

int ir_attn_core(const Node *sm, const Node **core) {
  if (sm->op != OP_SOFTMAX) return 0;
  const Node *chain[8];
  int n = 0;
  chain[n++] = sm;
  const Node *x = sm->in[0];
  while (n < 7 && (x->op == OP_MUL || x->op == OP_DIV || x->op == OP_ADD || x->op == OP_SUB || x->op == OP_RESHAPE)) {
    if (x->op == OP_RESHAPE || is_const(x->in[1])) chain[n++] = x, x = x->in[0];
    else if (is_const(x->in[0]) && x->op != OP_DIV && x->op != OP_SUB) chain[n++] = x, x = x->in[1];
    else return 0;
  }
  if (x->op != OP_MATMUL) return 0;
  core[0] = x;
  for (int i = 0; i < n; i++) core[i + 1] = chain[n - 1 - i];
  return n + 1;
}
