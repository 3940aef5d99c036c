/* libFuzzer target for the ONNX front end (frontend/onnx.c). Any bytes, read as an
 * ONNX file, must give a graph or one reported error: never a crash, a hang, a leak
 * or undefined behaviour (the build adds ASan and UBSan), whatever protobuf-c decodes
 * and whatever graph the message holds. A graph that imports must survive --summary,
 * and its IR text must read back to the same graph (fuzz_checks.c). Symbolic batch
 * dimensions are given as 1, as the seeds (tests/fuzz/onnx) have it.
 *
 *   scripts/fuzz.sh 300 onnx     build with clang and fuzz for five minutes
 */
#include <stdint.h>
#include "frontend/onnx.h"
#include "tests/fuzz/fuzz_checks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  diag_stream = NULL;
  ConfigOverride ov = {"batch", "1", false};
  Arena *a = arena_new();
  Graph *g = onnx_compile(a, "fuzz.onnx", (const char *)data, size, &ov, 1);
  if (g) fuzz_check_graph(g);
  arena_free(a);
  return 0;
}
