/* libFuzzer target for the front end. Any bytes, read as a model file and as IR
 * text, must give a graph or one reported error: never a crash, a hang, a leak or
 * undefined behaviour (the build adds ASan and UBSan). A model that compiles must
 * also survive --summary, and its IR text must read back (ir_parse) to a graph that
 * verifies and prints the same text again (fuzz_checks.c).
 *
 *   scripts/fuzz.sh 300     build with clang and fuzz for five minutes
 */
#include <stdint.h>
#include "frontend/frontend.h"
#include "tests/fuzz/fuzz_checks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  diag_stream = NULL;
  const char *text = (const char *)data;

  Arena *a = arena_new();
  Graph *g = frontend_compile(a, "fuzz.model", text, size, NULL, 0);
  if (g) fuzz_check_graph(g);
  arena_free(a);

  a = arena_new();
  fuzz_parse_ir(a, text, size);
  arena_free(a);
  return 0;
}
