/* The front end: model source text -> verified IR graph. */
#ifndef COLOSSALC_FRONTEND_H
#define COLOSSALC_FRONTEND_H
#include "frontend/ast.h"
#include "ir/ir.h"

/* A `--set name=value` override of a config constant. */
typedef struct ConfigOverride {
  const char *name;
  const char *value;
  bool used;
} ConfigOverride;

/* Parse text (len bytes, any content) named `path`; NULL after reporting the first
 * syntax error. */
Ast *frontend_parse(Arena *a, const char *path, const char *text, size_t len);

/* Give the AST meaning: evaluate config, expand blocks and repeats, build and
 * shape-check the graph. Reports user errors through error_at (unwinds). */
Graph *frontend_elaborate(Ast *ast, ConfigOverride *ov, int nov);

/* Parse, elaborate and verify; an ONNX file (frontend/onnx.h, by its name or first
 * bytes) is imported instead. Returns NULL after reporting the first error; never
 * exits, so it is safe to call from a fuzzer. */
Graph *frontend_compile(Arena *a, const char *path, const char *text, size_t len, ConfigOverride *ov, int nov);

/* Read a whole file into the arena (NUL-terminated); a failure is a user error. */
char *frontend_read_file(Arena *a, const char *path, size_t *len);

/* A model's name: its file's name without the directory and the extension. */
const char *frontend_model_name(Arena *a, const char *path);

/* The defaults of an optimizer (PyTorch's): what `train loss with adamw();` gives. */
void frontend_train_defaults(TrainSpec *t, OptKind opt);

/* Replace g's training directive with the one in a side file that holds nothing else
 * (`train loss with adamw(lr = 6e-4, ...);`, docs/onnx.md); its loss must be g's
 * (loss_name). Returns false after reporting the first error. */
bool frontend_train_file(Arena *a, const char *path, Graph *g);

#endif
