/* The model language's syntax tree. Every node keeps its source location, so the
 * elaborator can point at the source for any error. All nodes live in the parse's
 * arena. See docs/language.md for the grammar. */
#ifndef COLOSSALC_AST_H
#define COLOSSALC_AST_H
#include <stdbool.h>
#include <stdint.h>
#include "ir/arena.h"
#include "ir/diag.h"

typedef enum { EX_INT, EX_FLOAT, EX_STR, EX_BOOL, EX_NAME, EX_LIST, EX_TUPLE, EX_BINARY, EX_UNARY, EX_CALL } ExprKind;

/* Binary and unary operators, by their source spelling. */
typedef enum { BO_ADD, BO_SUB, BO_MUL, BO_DIV, BO_FLOORDIV, BO_MOD, BO_POW, BO_NEG } BinOp;

typedef struct Expr Expr;
typedef struct Arg {
  const char *key;
  Expr *val;
  SrcLoc loc;
} Arg; /* key NULL: positional */

struct Expr {
  ExprKind kind;
  SrcLoc loc;
  int64_t ival;     /* EX_INT, EX_BOOL */
  double fval;      /* EX_FLOAT */
  const char *name; /* EX_NAME, EX_CALL callee, EX_STR text */
  BinOp op;         /* EX_BINARY, EX_UNARY */
  Expr *lhs, *rhs;  /* EX_BINARY (lhs, rhs), EX_UNARY (lhs) */
  Arg *args;        /* EX_CALL [nargs]; EX_LIST and EX_TUPLE items (keys NULL) */
  int nargs;
  int depth;         /* height of this expression tree, bounded by the parser */
  const char *scope; /* EX_CALL: `as NAME`, the parameter scope of a block call */
  SrcLoc scope_loc;
};

typedef enum { ST_CONFIG, ST_INPUT, ST_PARAM, ST_BLOCK, ST_ASSIGN, ST_RETURN, ST_REPEAT, ST_TRAIN } StmtKind;

typedef struct TypeExpr {
  const char *dtype;
  SrcLoc loc;
  Arg *dims;
  int ndims;
} TypeExpr;

typedef struct Stmt Stmt;
struct Stmt {
  StmtKind kind;
  SrcLoc loc;
  const char *name; /* config/input/param/block/assign target, repeat scope, train loss */
  Expr *value;      /* config/assign/return value, param initialiser, repeat count */
  TypeExpr type;    /* input, param */
  Arg *args;        /* train: optimizer arguments; block: parameter names (in .key) */
  int nargs;
  const char *opt; /* train: optimizer name */
  Stmt *body;      /* block, repeat: statements */
  Stmt *next;
};

typedef struct Ast {
  Stmt *items;
  SrcFile *src;
  Arena *arena;
} Ast;

/* Constructors used by the parser. */
Expr *ast_expr(Arena *a, ExprKind k, SrcLoc loc);
Stmt *ast_stmt(Arena *a, StmtKind k, SrcLoc loc);
/* A growing argument list: returns the list with v appended. */
typedef struct ArgList {
  Arg *v;
  int n, cap;
} ArgList;
void arglist_push(Arena *a, ArgList *l, Arg arg);

#endif
