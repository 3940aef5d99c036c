/* Syntax tree constructors and list helpers for the parser. */
#include "frontend/ast.h"
#include <string.h>

Expr *ast_expr(Arena *a, ExprKind k, SrcLoc loc) {
  Expr *e = arena_alloc(a, sizeof *e);
  e->kind = k;
  e->loc = loc;
  return e;
}

Stmt *ast_stmt(Arena *a, StmtKind k, SrcLoc loc) {
  Stmt *s = arena_alloc(a, sizeof *s);
  s->kind = k;
  s->loc = loc;
  return s;
}

void arglist_push(Arena *a, ArgList *l, Arg arg) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 4;
    Arg *v = arena_array(a, cap, sizeof *v);
    if (l->n) memcpy(v, l->v, l->n * sizeof *v);
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = arg;
}
