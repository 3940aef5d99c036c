/* Scanner, parser and elaborator: config arithmetic and precedence, names and
 * scopes, layers, overrides, and the location of errors. Each case compiles a small
 * model and checks the graph it gives, or the error and where it points. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "frontend/frontend.h"

static int failures, checks;

/* Every case gets a loss and a training directive appended, so it is a whole model. */
static const char *TAIL = "\ninput zz: f32[2];\nzl = sum(zz);\ntrain zl with sgd(lr = 0.1);\n";

static Graph *compile(Arena *a, const char *src, ConfigOverride *ov, int nov) {
  char *text = arena_printf(a, "%s%s", src, TAIL);
  return frontend_compile(a, "t.model", text, strlen(text), ov, nov);
}

static Node *find(Graph *g, const char *name) {
  for (int i = 0; i < g->n; i++)
    if (g->nodes[i]->name && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
  return NULL;
}

#define CHECK(cond, ...)                  \
  do {                                    \
    checks++;                             \
    if (!(cond)) {                        \
      failures++;                         \
      printf("FAIL line %d: ", __LINE__); \
      printf(__VA_ARGS__);                \
      printf("\n");                       \
    }                                     \
  } while (0)

/* `input x: f32[EXPR];` must give dimension want. */
static void dim_is(const char *expr, int64_t want) {
  Arena *a = arena_new();
  Graph *g = compile(a, arena_printf(a, "config { k = 5; d = 768; heads = 12; }\ninput x: f32[%s];", expr), NULL, 0);
  Node *x = g ? find(g, "x") : NULL;
  CHECK(x && x->shape.d[0] == want, "%s: want %lld, got %s", expr, (long long)want,
        x ? arena_printf(a, "%lld", (long long)x->shape.d[0]) : diag_last);
  arena_free(a);
}

/* src must fail with msg at line:col. */
static void error_is(const char *src, int line, int col, const char *msg) {
  Arena *a = arena_new();
  Graph *g = compile(a, src, NULL, 0);
  CHECK(!g, "accepted, expected '%s':\n%s", msg, src);
  if (!g) {
    CHECK(strstr(diag_last, msg), "error '%s' lacks '%s'", diag_last, msg);
    CHECK(diag_last_loc.line == line && diag_last_loc.col == col, "'%s' at %d:%d, expected %d:%d", diag_last,
          diag_last_loc.line, diag_last_loc.col, line, col);
  }
  arena_free(a);
}

static void test_arithmetic(void) {
  dim_is("2 + 3 * 4 ** 2", 50);
  dim_is("2 ** 3 ** 2", 512); /* ** is right-associative */
  dim_is("10 - 2 ** 2", 6);
  dim_is("(-2) ** 2", 4);
  dim_is("20 - -2 ** 2", 24); /* unary minus binds looser than ** */
  dim_is("7 // 2", 3);
  dim_is("10 + -7 // 2", 6); /* floor division rounds down */
  dim_is("5 + 7 % -3", 3);   /* the remainder takes the divisor's sign */
  dim_is("d / heads", 64);   /* an integral float is a dimension */
  dim_is("k * (k + 1)", 30);
  dim_is("min(3, k) + max(2, k) + abs(-4)", 12);
  dim_is("sqrt(16) + 0.0", 4);
  dim_is("4 * d", 3072);
}

static void test_names_and_scopes(void) {
  Arena *a = arena_new();
  Graph *g = compile(
      a,
      "# a comment\n"
      "config { n = 2; }\n"
      "input t: f32[4, 3];\n"
      "block lin(x, m) { param w.weight: f32[3, m] = normal(0.5); param b: f32[m] = zeros; return matmul(x, w.weight) + b; }\n"
      "block two(x) { y = lin(x, 3) as first; return lin(y, 3); }\n"
      "param top.w: f32[3] = ones;\n"
      "u = two(t) as pair;\n"
      "repeat h in n { u = lin(u, 3) * 0.5; repeat r in 2 { u = lin(u, 3) as inner; } }\n",
      NULL, 0);
  CHECK(g, "compile failed: %s", diag_last);
  if (g) {
    const char *names[] = {
        "top.w",     "pair.first.w.weight",    "pair.first.b",   "pair.lin.w.weight", "h.0.lin.w.weight",
        "h.1.lin.b", "h.1.r.0.inner.w.weight", "h.0.r.1.inner.b"};
    for (int i = 0; i < 8; i++) CHECK(find(g, names[i]), "no parameter %s", names[i]);
    Node *w = find(g, "pair.first.w.weight");
    CHECK(w && w->init.kind == INIT_NORMAL && w->init.a == 0.5, "initialiser of pair.first.w.weight");
    CHECK(g->nlayers == 6, "want 6 layers (h.0, h.0.r.0, h.0.r.1, h.1, ...), got %d", g->nlayers);
    CHECK(g->nlayers == 6 && !strcmp(g->layers[2].name, "h.0.r.1") && g->layers[2].group == 1, "layer names");
    Node *inner = find(g, "h.1.r.0.inner.b");
    CHECK(inner && !strcmp(g->layers[inner->layer].name, "h.1.r.0"), "parameter layer");
    CHECK(find(g, "top.w")->layer == -1, "top-level parameter outside layers");
  }
  arena_free(a);
}

static void test_constants_and_overrides(void) {
  Arena *a = arena_new();
  ConfigOverride ov[] = {{"n", "7", false}, {"s", "2.5", false}};
  Graph *g = compile(a, "config { n = 3; m = n * 2; s = 1.0; }\ninput x: f32[m];\ny = x * s + 1;\n", ov, 2);
  CHECK(g, "compile failed: %s", diag_last);
  if (g) {
    CHECK(find(g, "x")->shape.d[0] == 14, "override flows into later constants");
    int consts = 0;
    for (int i = 0; i < g->n; i++)
      if (g->nodes[i]->op == OP_CONST) consts += g->nodes[i]->attr[0].f == 2.5 || g->nodes[i]->attr[0].f == 1;
    CHECK(consts == 2, "numbers combined with tensors become constants (%d)", consts);
    CHECK(ov[0].used && ov[1].used, "overrides marked used");
  }
  ConfigOverride bad[] = {{"nope", "1", false}};
  CHECK(!compile(a, "config { n = 3; }\n", bad, 1) && strstr(diag_last, "no config constant 'nope'"),
        "unknown override");
  ConfigOverride nan[] = {{"n", "abc", false}};
  CHECK(!compile(a, "config { n = 3; }\n", nan, 1) && strstr(diag_last, "must be a number"), "non-number override");
  arena_free(a);
}

static void test_errors(void) {
  error_is("input x: f32[3];\n  y = x $ 2;\n", 2, 9, "unexpected character '$'");
  error_is("config { a = \"open; }\n", 1, 14, "unterminated string");
  error_is("config { a = 99999999999999999999; }\n", 1, 14, "too large");
  error_is("config { a = 2 ** 70; }\n", 1, 16, "integer overflow");
  error_is("config { a = 1 / 0; }\n", 1, 16, "division by zero");
  error_is("input x: f32[3];\ny = foo(x);\n", 2, 5, "unknown function 'foo'");
  error_is("input x: f32[3];\ny = x + q;\n", 2, 9, "unknown name 'q'");
  error_is("input x: f32[3]\ny = x;\n", 1, 16, "expected ';'");
  error_is("config { d = 10; }\ninput x: f32[d / 4];\n", 2, 16, "must be an integer, got 2.5");
  error_is("input x: f32[0];\n", 1, 14, "dimension must be positive");
  error_is("input x: f32[65536, 65536, 65536, 65536];\n", 1, 35, "more than 2^48 elements");
  error_is("input x: f32[2, 3];\ny = matmul(x, x);\n", 2, 5, "inner dimensions differ");
  error_is("block f(x) { return f(x); }\ninput x: f32[2];\ny = f(x);\n", 1, 21, "calls itself");
  error_is("input x: f32[2];\ny = gelu(x) as g;\n", 2, 16, "'as' names the scope of a block call");
  error_is("input x: f32[2];\nrepeat h in 100000 { x = x + 1; }\n", 2, 13, "repeat count 100000");
  error_is("return 1;\n", 1, 1, "'return' outside a block");
  error_is("block f(x) { y = x; }\ninput x: f32[2];\ny = f(x);\n", 1, 7, "ends without 'return'");
  error_is("input x: f32[2];\nparam x: f32[2];\n", 2, 7, "already defined");
  error_is("input x: f32[2];\ny = slice(x, axis = 0, 0, 1);\n", 2, 24, "positional argument after a named one");
  error_is("input x: f32[2];\ny = dropout(x, q = 1);\n", 2, 16, "no argument 'q'");
}

static void test_empty_and_binary(void) {
  Arena *a = arena_new();
  CHECK(!frontend_compile(a, "e.model", "", 0, NULL, 0) && strstr(diag_last, "no 'train' directive") &&
            diag_last_loc.line == 1 && diag_last_loc.col == 1,
        "empty file: %s", diag_last);
  const char bin[] = {'c', 'o', 0, 'n', (char)0xff, '\n', 0x7f};
  CHECK(!frontend_compile(a, "b.model", bin, sizeof bin, NULL, 0) && diag_last_loc.line == 1, "binary: %s", diag_last);
  arena_free(a);
}

int main(void) {
  diag_stream = NULL;
  test_arithmetic();
  test_names_and_scopes();
  test_constants_and_overrides();
  test_errors();
  test_empty_and_binary();
  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures != 0;
}
