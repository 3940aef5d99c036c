/* Diagnostics. Three error paths (STYLE.md):
 *  - user errors: error_at() prints `file:line:col: error: msg`, the source line and a
 *    caret (`file: error: msg` for a location without a line: a node of a binary ONNX
 *    file, whose "file" names the node), then unwinds to the innermost DIAG_TRY (the driver exits with status 1);
 *  - internal bugs: unreachable()/ir_assert() name the file and line and abort;
 *  - library failures: the runtime's *_CHECK macros (not here). */
#ifndef COLOSSALC_DIAG_H
#define COLOSSALC_DIAG_H
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>

typedef struct SrcFile {
  const char *name;
  const char *text;
  size_t len;
} SrcFile;
typedef struct SrcLoc {
  const SrcFile *file;
  int line, col;
} SrcLoc;

typedef struct DiagJump {
  jmp_buf jb;
  struct DiagJump *prev;
} DiagJump;

extern FILE *diag_stream;    /* where errors go; NULL silences them (fuzzing) */
extern DiagJump *diag_top;   /* innermost handler */
extern char diag_last[2048]; /* text of the last error, for tests */
extern SrcLoc diag_last_loc; /* and where it was */

/* A handler: diag_push(&j); if (setjmp(j.jb)) { diag_pop(&j); ...failed... }
 * ...work...; diag_pop(&j);  Handlers nest. */
void diag_push(DiagJump *j);
void diag_pop(DiagJump *j);

_Noreturn void error_at(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void error_plain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void warn_at(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

_Noreturn void diag_internal(const char *file, int line, const char *msg);
#define unreachable() diag_internal(__FILE__, __LINE__, "unreachable")
#define ir_assert(c) ((c) ? (void)0 : diag_internal(__FILE__, __LINE__, "assertion failed: " #c))

#endif
