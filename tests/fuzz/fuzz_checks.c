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

/* Whether the text read back prints as a: line by line the same, except that a line
 * without a source location (a node from an ONNX file has none) may come back with
 * " @LINE:COL" added, its place in the IR text, which the parser gives such a node. */
static bool same_text(const char *a, const char *b) {
  while (*a || *b) {
    size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
    bool same = la == lb && !memcmp(a, b, la);
    if (!same && lb > la && !memcmp(a, b, la) && !memchr(a, '@', la) && b[la] == ' ' && b[la + 1] == '@') {
      const char *p = b + la + 2;
      p += strspn(p, "0123456789");
      same = *p == ':' && (p += 1 + strspn(p + 1, "0123456789")) == b + lb;
    }
    if (!same) return false;
    a += la + (a[la] == '\n'), b += lb + (b[lb] == '\n');
  }
  return true;
}

/* The graph's IR must read back and print the same. */
static void check_round_trip(const Graph *g) {
  size_t len, len2;
  char *text = print_ir(g, &len);
  Arena *a = arena_new();
  Graph *back = fuzz_parse_ir(a, text, len);
  if (!back) broken(diag_last, text);
  char *again = print_ir(back, &len2);
  if (!same_text(text, again)) broken("IR text differs after a round trip", again);
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
