/* Model statistics: parameter count, FLOPs per training step, and a per-layer table,
 * all computed from the IR and the op table's costs. */
#ifndef COLOSSALC_SUMMARY_H
#define COLOSSALC_SUMMARY_H
#include <stdio.h>
#include "ir/ir.h"

typedef struct GraphStats {
  int64_t params;        /* parameter elements */
  double param_bytes;    /* at their declared dtypes */
  double fwd_flops;      /* one forward pass */
  double train_flops;    /* forward + backward of one training step */
} GraphStats;

void graph_stats(const Graph *g, GraphStats *s);
void summary_print(FILE *f, const Graph *g);
/* The memory plan of one rank: bytes of the four tiers (runtime/program.h order:
 * parameters, gradients, optimizer state, work) and the work tier's planned peak. */
void summary_print_memory(FILE *f, const int64_t tiers[4], int64_t work_peak);

#endif
