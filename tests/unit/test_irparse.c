/* IR text round trip: read an IR dump, verify it (every node re-inferred through the
 * op table), print it again, and require the same text. Usage: test_irparse FILE.ir */
#include <stdlib.h>
#include <string.h>
#include "frontend/frontend.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_irparse FILE.ir\n");
    return 2;
  }
  diag_stream = stderr;
  Arena *a = arena_new();
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    printf("0 passed, 1 failed\n");
    return 1;
  }
  size_t len;
  char *text = frontend_read_file(a, argv[1], &len);
  SrcFile src = {argv[1], text, len};
  Graph *g = ir_parse(a, &src);
  ir_verify(g);
  diag_pop(&j);
  char *out = NULL;
  size_t outlen = 0;
  FILE *f = open_memstream(&out, &outlen);
  ir_print(f, g);
  fclose(f);
  int same = outlen == len && !memcmp(out, text, len);
  if (!same) {
    size_t i = 0;
    while (i < len && i < outlen && out[i] == text[i]) i++;
    int line = 1;
    for (size_t k = 0; k < i; k++) line += text[k] == '\n';
    printf("%s: the printed IR differs from the file at line %d\n", argv[1], line);
  }
  printf("%d nodes, %d layers: %d passed, %d failed\n", g->n, g->nlayers, same, !same);
  free(out);
  arena_free(a);
  return !same;
}
