/* State shared by the flex scanner and the bison parser of one model file. */
#ifndef COLOSSALC_PARSE_CTX_H
#define COLOSSALC_PARSE_CTX_H
#include "frontend/ast.h"

typedef struct StmtList { Stmt *head, *tail; } StmtList;

typedef struct ParseCtx {
  Arena *arena;
  SrcFile *src;
  Stmt *items;        /* the parsed file */
  bool failed;        /* the first error has been reported */
  int depth;          /* nesting of brackets, for a bound on recursion */
} ParseCtx;

/* Report a syntax error once (later ones are consequences) without unwinding: the
 * scanner and parser return normally so their buffers are freed. */
void parse_error(ParseCtx *ctx, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
