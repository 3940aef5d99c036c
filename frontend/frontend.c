/* Front-end entry points: read a model file, run the scanner and parser, elaborate,
 * and verify, with every user error reported once and unwound to here. */
#include "frontend/frontend.h"
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include "frontend/lexer.h"
#include "frontend/onnx.h"
#include "frontend/parser.h"

void parse_error(ParseCtx *ctx, SrcLoc loc, const char *fmt, ...) {
  if (ctx->failed) return;
  ctx->failed = true;
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* Report through the common path, but come straight back: the scanner and the
   * parser must unwind normally to free their buffers. */
  DiagJump j;
  diag_push(&j);
  if (!setjmp(j.jb)) error_at(loc, "%s", msg);
  diag_pop(&j);
}

Ast *frontend_parse(Arena *a, const char *path, const char *text, size_t len) {
  SrcFile *src = arena_alloc(a, sizeof *src);
  src->name = arena_strdup(a, path);
  src->text = text;
  src->len = len;
  ParseCtx ctx = {.arena = a, .src = src};
  yyscan_t scanner;
  if (yylex_init_extra(&ctx, &scanner)) return NULL;
  YY_BUFFER_STATE buf = yy_scan_bytes(text, (int)len, scanner);
  yyset_lineno(1, scanner);
  yyset_column(1, scanner);
  int rc = yyparse(scanner, &ctx);
  yy_delete_buffer(buf, scanner);
  yylex_destroy(scanner);
  if (rc || ctx.failed) {
    if (!ctx.failed) error_plain("%s: parse failed", path); /* unreachable in practice */
    return NULL;
  }
  Ast *ast = arena_alloc(a, sizeof *ast);
  *ast = (Ast){ctx.items, src, a};
  return ast;
}

Graph *frontend_compile(Arena *a, const char *path, const char *text, size_t len, ConfigOverride *ov, int nov) {
  if (len > (size_t)1 << 30) {
    DiagJump j;
    diag_push(&j);
    if (!setjmp(j.jb)) error_plain("%s: file too large (%zu bytes)", path, len);
    diag_pop(&j);
    return NULL;
  }
  if (onnx_is_model(path, text, len)) return onnx_compile(a, path, text, len, ov, nov);
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    diag_pop(&j);
    return NULL;
  }
  Ast *ast = frontend_parse(a, path, text, len);
  Graph *g = NULL;
  if (ast) {
    g = frontend_elaborate(ast, ov, nov);
    ir_verify(g);
  }
  diag_pop(&j);
  return g;
}

char *frontend_read_file(Arena *a, const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) { error_plain("cannot open %s: %s", path, strerror(errno)); }
  size_t cap = 1 << 16, n = 0;
  char *buf = NULL;
  for (;;) {
    char *nb = arena_alloc(a, cap + 1);
    if (n) memcpy(nb, buf, n);
    buf = nb;
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    if (cap >= (size_t)1 << 30) {
      fclose(f);
      error_plain("%s: file too large", path);
    }
    cap *= 2;
  }
  int err = ferror(f);
  fclose(f);
  if (err) error_plain("cannot read %s", path);
  buf[n] = 0;
  *len = n;
  return buf;
}
