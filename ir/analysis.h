/* Graph analyses that both the passes (passes/) and the planner (plan/) use, computed
 * from the IR and the op table alone: a model's parameter and FLOP counts, and the
 * attention core that selective recompute runs again. */
#ifndef COLOSSALC_IR_ANALYSIS_H
#define COLOSSALC_IR_ANALYSIS_H
#include "ir/ir.h"

typedef struct GraphStats {
  int64_t params;        /* parameter elements */
  double param_bytes;    /* at their declared dtypes */
  double fwd_flops;      /* one forward pass */
  double train_flops;    /* forward + backward of one training step */
} GraphStats;

/* Sums over every node of g, with the op table's costs (node_cost). */
void graph_stats(const Graph *g, GraphStats *s);

/* The nodes of the attention core that ends in softmax node sm: the softmax, the
 * chain of scalings (mul, div, add, sub by a constant) between it and the matmul
 * that makes the scores, and that matmul. Writes up to 8 nodes, the matmul first;
 * returns the count, 0 when sm's input is not such a chain. The recompute pass
 * (passes/recompute.c) and the plan's cost model (plan/shard.c) both use this
 * definition. */
int ir_attn_core(const Node *sm, const Node **core);

#endif
