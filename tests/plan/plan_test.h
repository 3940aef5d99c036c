/* Helpers shared by the plan tests: load a model with config overrides, compare
 * numbers with a tolerance and count failures. */
#ifndef COLOSSALC_TESTS_PLAN_TEST_H
#define COLOSSALC_TESTS_PLAN_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "frontend/frontend.h"

static int failures;

/* |got / want - 1| <= rel, reported either way. */
static inline void check_rel(const char *what, double got, double want, double rel) {
  double err = want != 0 ? got / want - 1 : got;
  bool ok = fabs(err) <= rel;
  printf("%-4s %-58s got %.6g want %.6g (%+.2f%%)\n", ok ? "ok" : "FAIL", what, got, want, 100 * err);
  failures += !ok;
}

/* Model file `path` with overrides "name=value" (NULL-terminated); exits on error. */
static Graph *load_model(Arena *a, const char *path, const char *const *set) {
  static ConfigOverride ov[16];
  volatile int n = 0;
  for (; set && set[n] && n < 16; n++) {
    const char *eq = strchr(set[n], '=');
    ov[n] = (ConfigOverride){arena_strndup(a, set[n], eq - set[n]), eq + 1, false};
  }
  size_t len;
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    fprintf(stderr, "cannot load %s\n", path);
    exit(1);
  }
  char *text = frontend_read_file(a, path, &len);
  diag_pop(&j);
  Graph *g = frontend_compile(a, path, text, len, ov, n);
  if (!g) exit(1);
  return g;
}

#endif
