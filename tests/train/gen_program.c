/* gen_program: writes a test program (tp_program, test_program.h) as C source that
 * defines colossalc_program and colossalc_program_bytes, checked to open (prog_open).
 * Usage: gen_program OUT.c */
#include "test_program.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: gen_program OUT.c\n"), 2;
  ProgBuild *b = prog_build_new();
  if (!b) return fprintf(stderr, "gen_program: out of memory\n"), 1;
  tp_program(b);
  int64_t bytes;
  void *blob = prog_build_finish(b, &bytes);
  Prog p;
  char err[256];
  if (!blob || prog_open(blob, bytes, &p, err, sizeof err) != 0)
    return fprintf(stderr, "gen_program: %s\n", blob ? err : "out of memory"), 1;
  FILE *f = fopen(argv[1], "w");
  int rc = !f || prog_write_c(f, blob, bytes) != 0;
  if (f && fclose(f) != 0) rc = 1;
  free(blob);
  if (rc) return fprintf(stderr, "gen_program: cannot write %s\n", argv[1]), 1;
  return 0;
}
