/* The front end: model source text -> verified IR graph. */
#ifndef COLOSSALC_FRONTEND_H
#define COLOSSALC_FRONTEND_H
#include "frontend/ast.h"
#include "ir/ir.h"

/* A `--set name=value` override of a config constant. */
typedef struct ConfigOverride { const char *name; const char *value; bool used; } ConfigOverride;

/* Parse text (len bytes, any content) named `path`; NULL after reporting the first
 * syntax error. */
Ast *frontend_parse(Arena *a, const char *path, const char *text, size_t len);

/* Give the AST meaning: evaluate config, expand blocks and repeats, build and
 * shape-check the graph. Reports user errors through error_at (unwinds). */
Graph *frontend_elaborate(Ast *ast, ConfigOverride *ov, int nov);

/* Parse, elaborate and verify. Returns NULL after reporting the first error;
 * never exits, so it is safe to call from a fuzzer. */
Graph *frontend_compile(Arena *a, const char *path, const char *text, size_t len, ConfigOverride *ov, int nov);

/* Read a whole file into the arena (NUL-terminated); a failure is a user error. */
char *frontend_read_file(Arena *a, const char *path, size_t *len);

#endif
