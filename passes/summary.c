/* `--summary`: what a model is before anything is planned. Parameters and FLOPs are
 * summed over the IR with the op table's costs; the per-layer table groups ops by
 * the layer (repeat iteration) they belong to, with ops outside layers counted as
 * "before" or "after" by where they stand in the graph. */
#include "passes/summary.h"
#include <inttypes.h>
#include <string.h>

typedef struct Row {
  int64_t params;
  double fwd, train;
  int ops;
} Row;

static void add_node(Row *r, const Node *n) {
  Cost c;
  node_cost(n, &c);
  if (n->op == OP_PARAM) r->params += shape_numel(&n->shape);
  else if (op_info(n->op)->cls != CLS_SOURCE) r->ops++;
  r->fwd += c.fwd_flops;
  r->train += c.fwd_flops + c.bwd_flops;
}

static void human(char *buf, size_t len, double v, const char *unit) {
  const char *pre[] = {"", "K", "M", "G", "T", "P", "E"};
  int k = 0;
  while (v >= 1000 && k < 6) {
    v /= 1000;
    k++;
  }
  snprintf(buf, len, "%.3g %s%s", v, pre[k], unit);
}

static void print_row(FILE *f, const char *name, const Row *r) {
  char fw[32], tr[32];
  human(fw, sizeof fw, r->fwd, "FLOP");
  human(tr, sizeof tr, r->train, "FLOP");
  fprintf(f, "  %-22s %5d %15" PRId64 " %14s %14s\n", name, r->ops, r->params, fw, tr);
}

/* Rows: "(before layers)", one per layer, "(after layers)". */
static void print_layers(FILE *f, const Graph *g) {
  Row *rows = arena_array(g->arena, g->nlayers + 2, sizeof *rows);
  bool seen_layer = false;
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    if (n->layer >= 0) seen_layer = true;
    add_node(&rows[n->layer >= 0 ? n->layer + 1 : seen_layer ? g->nlayers + 1 : 0], n);
  }
  fprintf(f, "  %-22s %5s %15s %14s %14s\n", "layer", "ops", "parameters", "forward", "train step");
  print_row(f, "(before layers)", &rows[0]);
  for (int l = 0; l < g->nlayers; l++) print_row(f, g->layers[l].name, &rows[l + 1]);
  print_row(f, "(after layers)", &rows[g->nlayers + 1]);
}

void summary_print(FILE *f, const Graph *g) {
  GraphStats s;
  graph_stats(g, &s);
  char pb[32], fw[32], tr[32], st[32];
  human(pb, sizeof pb, s.param_bytes, "B");
  human(fw, sizeof fw, s.fwd_flops, "FLOP");
  human(tr, sizeof tr, s.train_flops, "FLOP");
  /* f32 weights and gradients, plus the optimizer's state per parameter */
  human(st, sizeof st, (double)s.params * (8 + 4 * train_moments(&g->train)), "B");
  int ops = 0;
  for (int i = 0; i < g->n; i++) ops += op_info(g->nodes[i]->op)->cls != CLS_SOURCE;
  fprintf(f, "model: %s (%s)\n", g->name, g->source ? g->source : "?");
  fprintf(f, "ops: %d in %d layers\n", ops, g->nlayers);
  fprintf(f, "parameters: %" PRId64 "\n", s.params);
  fprintf(f, "parameter bytes: %s\n", pb);
  const char *moments[3] = {"", ", momentum", g->train.opt == OPT_LAMB ? ", LAMB moments" : ", AdamW moments"};
  fprintf(f, "training state (f32 weights, gradients%s): %s\n", moments[train_moments(&g->train)], st);
  fprintf(f, "forward FLOPs: %.6e (%s)\n", s.fwd_flops, fw);
  fprintf(f, "FLOPs per training step: %.6e (%s)\n", s.train_flops, tr);
  print_layers(f, g);
}

void summary_print_memory(FILE *f, const int64_t tiers[4], int64_t work_peak) {
  const char *names[4] = {"parameters", "gradients", "optimizer state", "activations and workspace (planned peak)"};
  char b[32];
  double total = 0;
  fprintf(f, "memory plan (one rank):\n");
  for (int t = 0; t < 4; t++) {
    human(b, sizeof b, (double)(t == 3 ? work_peak : tiers[t]), "B");
    fprintf(f, "  %-42s %s\n", names[t], b);
    total += (double)(t == 3 ? work_peak : tiers[t]);
  }
  human(b, sizeof b, total, "B");
  fprintf(f, "  %-42s %s\n", "planned peak", b);
}
