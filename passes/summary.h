/* Model statistics: parameter count, FLOPs per training step (graph_stats,
 * ir/analysis.h), and a per-layer table, all computed from the IR and the op table's
 * costs. */
#ifndef COLOSSALC_SUMMARY_H
#define COLOSSALC_SUMMARY_H
#include <stdio.h>
#include "ir/analysis.h" /* graph_stats, GraphStats */

void summary_print(FILE *f, const Graph *g);
/* The memory plan of one rank: bytes of the four tiers (program/program.h order:
 * parameters, gradients, optimizer state, work) and the work tier's planned peak. */
void summary_print_memory(FILE *f, const int64_t tiers[4], int64_t work_peak);

#endif
