/* The checks the fuzz targets share (fuzz_checks.h). */
#include "tests/fuzz/fuzz_checks.h"
#include <stdlib.h>
#include <string.h>
#include "passes/summary.h"

/* A finding: a front end accepted the input but broke a promise. */
static _Noreturn void broken(const char *what, const char *text) {
  fprintf(stderr, "fuzz: %s\n--- IR text ---\n%s\n", what, text ? text : "");
  abort();
}

/* The IR text of g, malloc'ed. */
static char *print_ir(const Graph *g, size_t *len) {
  char *text = NULL;
  FILE *f = open_memstream(&text, len);
  if (!f) abort();
  ir_print(f, g);
  fclose(f);
  return text;
}

Graph *fuzz_parse_ir(Arena *a, const char *text, size_t len) {
  SrcFile *src = arena_alloc(a, sizeof *src);
  *src = (SrcFile){"fuzz.ir", text, len};
  Graph *g = NULL;
  DiagJump j;
  diag_push(&j);
  if (!setjmp(j.jb)) {
    g = ir_parse(a, src);
    ir_verify(g);
  } else {
    g = NULL;
  }
  diag_pop(&j);
  return g;
}

/* The graph's IR must read back and print the same. */
static void check_round_trip(const Graph *g) {
  size_t len, len2;
  char *text = print_ir(g, &len);
  Arena *a = arena_new();
  Graph *back = fuzz_parse_ir(a, text, len);
  if (!back) broken(diag_last, text);
  char *again = print_ir(back, &len2);
  if (len != len2 || memcmp(text, again, len)) broken("IR text differs after a round trip", again);
  free(again);
  free(text);
  arena_free(a);
}

static void check_summary(const Graph *g) {
  FILE *sink = fopen("/dev/null", "w");
  if (!sink) abort();
  summary_print(sink, g);
  fclose(sink);
}

void fuzz_check_graph(const Graph *g) {
  check_summary(g);
  check_round_trip(g);
}
