/* What the fuzz targets check of a graph a front end accepted (tests/fuzz/fuzz_*.c):
 * --summary runs on it, and its IR text reads back (ir_parse) to a graph that verifies
 * and prints the same text again (nodes without a source location, from an ONNX file,
 * come back located in the IR text). A broken promise aborts with the IR text. */
#ifndef COLOSSALC_FUZZ_CHECKS_H
#define COLOSSALC_FUZZ_CHECKS_H
#include "ir/ir.h"

/* Parse and verify IR text; NULL after a reported (silenced) error. */
Graph *fuzz_parse_ir(Arena *a, const char *text, size_t len);

/* The summary and the IR text's round trip of an accepted graph. */
void fuzz_check_graph(const Graph *g);

#endif
