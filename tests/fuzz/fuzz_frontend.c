/* libFuzzer target for the front end. Any bytes, read as a model file and as IR
 * text, must give a graph or one reported error: never a crash, a hang, a leak or
 * undefined behaviour (the build adds ASan and UBSan). A model that compiles must
 * also survive --summary, and its IR text must read back (ir_parse) to a graph that
 * verifies and prints the same text again.
 *
 *   scripts/fuzz.sh 300     build with clang and fuzz for five minutes
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "frontend/frontend.h"
#include "passes/summary.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A finding: the front end accepted the input but broke a promise. */
static _Noreturn void broken(const char *what, const char *text) {
  fprintf(stderr, "fuzz_frontend: %s\n--- IR text ---\n%s\n", what, text ? text : "");
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

/* Parse and verify IR text; NULL after a reported (silenced) error. */
static Graph *parse_ir(Arena *a, const char *text, size_t len) {
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

/* The compiled model's IR must read back and print the same. */
static void check_round_trip(const Graph *g) {
  size_t len, len2;
  char *text = print_ir(g, &len);
  Arena *a = arena_new();
  Graph *back = parse_ir(a, text, len);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  diag_stream = NULL;
  const char *text = (const char *)data;

  Arena *a = arena_new();
  Graph *g = frontend_compile(a, "fuzz.model", text, size, NULL, 0);
  if (g) {
    check_summary(g);
    check_round_trip(g);
  }
  arena_free(a);

  a = arena_new();
  parse_ir(a, text, size);
  arena_free(a);
  return 0;
}
