/* Diagnostics: user errors with the source line and a caret, unwound with longjmp to
 * the innermost handler; internal errors that abort with the file and line. */
#include "ir/diag.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

FILE *diag_stream;
DiagJump *diag_top;
char diag_last[2048];
SrcLoc diag_last_loc;

void diag_push(DiagJump *j) {
  j->prev = diag_top;
  diag_top = j;
}
void diag_pop(DiagJump *j) {
  if (diag_top == j) diag_top = j->prev;
}

/* Print the source line of loc (control bytes shown as '?') and a caret under col. */
static void print_line(FILE *f, SrcLoc loc) {
  const SrcFile *sf = loc.file;
  if (!sf || !sf->text || loc.line <= 0) return;
  const char *p = sf->text, *end = sf->text + sf->len;
  for (int l = 1; l < loc.line && p < end; p++)
    if (*p == '\n') l++;
  const char *q = p;
  while (q < end && *q != '\n') q++;
  int width = (int)(q - p), col = loc.col > 0 ? loc.col : 1, start = 0;
  if (width > 160 && col > 80) start = col - 80;
  if (width - start > 160) width = start + 160;
  fputc(' ', f);
  for (int i = start; i < width; i++) {
    unsigned char c = (unsigned char)p[i];
    fputc(c == '\t' || (c >= 32 && c != 127) ? c : '?', f);
  }
  fputs("\n ", f);
  for (int i = start; i < col - 1 && i < width; i++) fputc(p[i] == '\t' ? '\t' : ' ', f);
  fputs("^\n", f);
}

static _Noreturn void diag_unwind(void) {
  if (!diag_top) exit(1);
  longjmp(diag_top->jb, 1);
}

void error_at(SrcLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(diag_last, sizeof diag_last, fmt, ap);
  va_end(ap);
  diag_last_loc = loc;
  if (diag_stream) {
    if (loc.file && loc.line > 0)
      fprintf(diag_stream, "%s:%d:%d: error: %s\n", loc.file->name, loc.line, loc.col, diag_last);
    else if (loc.file) fprintf(diag_stream, "%s: error: %s\n", loc.file->name, diag_last); /* a binary file: no line */
    else fprintf(diag_stream, "error: %s\n", diag_last);
    print_line(diag_stream, loc);
  }
  diag_unwind();
}

void error_plain(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(diag_last, sizeof diag_last, fmt, ap);
  va_end(ap);
  diag_last_loc = (SrcLoc){0};
  if (diag_stream) fprintf(diag_stream, "colossalc: error: %s\n", diag_last);
  diag_unwind();
}

void warn_at(SrcLoc loc, const char *fmt, ...) {
  if (!diag_stream) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (loc.line > 0)
    fprintf(diag_stream, "%s:%d:%d: warning: %s\n", loc.file ? loc.file->name : "?", loc.line, loc.col, msg);
  else fprintf(diag_stream, "%s: warning: %s\n", loc.file ? loc.file->name : "?", msg);
  print_line(diag_stream, loc);
}

void diag_internal(const char *file, int line, const char *msg) {
  fprintf(stderr, "colossalc: internal error at %s:%d: %s\n", file, line, msg);
  abort();
}
