/* State shared by the flex scanner and the bison parser of one model file. */
#ifndef COLOSSALC_PARSE_CTX_H
#define COLOSSALC_PARSE_CTX_H
#include "frontend/ast.h"

typedef struct StmtList {
  Stmt *head, *tail;
} StmtList;

typedef struct ParseCtx {
  Arena *arena;
  SrcFile *src;
  Stmt *items;              /* the parsed file */
  bool failed;              /* the first error has been reported */
  int depth;                /* brackets open: '(', '[', '{' not yet closed */
  SrcLoc open[64];          /* [min(depth, 64)] where they opened, for syntax errors */
  char open_ch[64];         /* [min(depth, 64)] which bracket each is */
  bool stray;               /* the last token is a closing bracket that closes nothing */
  SrcLoc tok_end, prev_end; /* just after the last token and the one before it */
} ParseCtx;

/* Report a syntax error once (later ones are consequences) without unwinding: the
 * scanner and parser return normally so their buffers are freed. */
void parse_error(ParseCtx *ctx, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
