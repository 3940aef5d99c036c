/* Writing a program (program/program.h, prog_build_*): sections grown record by record,
 * then laid out after the header, 8-byte aligned, and hashed (prog_hash). */
#include "program/program.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const size_t section_size[PROG_NSECTIONS] = {
#define SIZE(name, type) sizeof(type),
    PROG_SECTIONS(SIZE)
#undef SIZE
};

struct ProgBuild {
  struct {
    char *v;
    int64_t n, cap; /* records */
  } sec[PROG_NSECTIONS];
  int failed; /* out of memory */
};

ProgBuild *prog_build_new(void) {
  ProgBuild *b = calloc(1, sizeof *b);
  if (b) prog_build_str(b, ""); /* offset 0: the empty string; the strings are never empty */
  return b;
}

void prog_build_free(ProgBuild *b) {
  if (!b) return;
  for (int s = 0; s < PROG_NSECTIONS; s++) free(b->sec[s].v);
  free(b);
}

int64_t prog_build_add(ProgBuild *b, ProgSectionKind s, const void *records, int64_t n) {
  size_t size = section_size[s];
  int64_t first = b->sec[s].n;
  if (first + n > b->sec[s].cap) {
    int64_t cap = b->sec[s].cap ? b->sec[s].cap : 64;
    while (cap < first + n) cap *= 2;
    char *v = realloc(b->sec[s].v, (size_t)cap * size);
    if (!v) {
      b->failed = 1;
      return first;
    }
    b->sec[s].v = v, b->sec[s].cap = cap;
  }
  if (n > 0) memcpy(b->sec[s].v + (size_t)first * size, records, (size_t)n * size);
  b->sec[s].n += n;
  return first;
}

int64_t prog_build_str(ProgBuild *b, const char *s) {
  return s ? prog_build_add(b, PROG_SEC_STRINGS, s, (int64_t)strlen(s) + 1) : -1;
}

void *prog_build_at(ProgBuild *b, ProgSectionKind s, int64_t index) {
  return b->sec[s].v + (size_t)index * section_size[s];
}

int64_t prog_build_count(const ProgBuild *b, ProgSectionKind s) { return b->sec[s].n; }

void *prog_build_finish(ProgBuild *b, int64_t *bytes) {
  ProgHeader h = {.magic = {'c', 'o', 'l', 'o', 's', 's', 'a', 'l'}, .version = PROG_VERSION};
  h.layout = prog_layout();
  int64_t at = (sizeof h + 7) / 8 * 8;
  for (int s = 0; s < PROG_NSECTIONS; s++) {
    h.sec[s] = (ProgSection){at, b->sec[s].n};
    at = (at + b->sec[s].n * (int64_t)section_size[s] + 7) / 8 * 8;
  }
  char *blob = b->failed ? NULL : calloc((size_t)at, 1);
  for (int s = 0; blob && s < PROG_NSECTIONS; s++)
    if (b->sec[s].n) memcpy(blob + h.sec[s].offset, b->sec[s].v, (size_t)b->sec[s].n * section_size[s]);
  h.bytes = at;
  if (blob) memcpy(blob, &h, sizeof h), h.hash = prog_hash(blob, at), memcpy(blob, &h, sizeof h);
  prog_build_free(b);
  *bytes = blob ? at : 0;
  return blob;
}

int prog_write_c(FILE *f, const void *blob, int64_t bytes) {
  const unsigned char *p = blob;
  fprintf(f, "/* A colossalc program (program/program.h), written by prog_write_c. */\n#include <stdint.h>\n");
  fprintf(f, "const int64_t colossalc_program_bytes = %" PRId64 ";\n", bytes);
  fprintf(f, "const unsigned char colossalc_program[] __attribute__((aligned(64))) = {");
  for (int64_t i = 0; i < bytes; i++) fprintf(f, "%s%u,", i % 24 ? "" : "\n", p[i]);
  fprintf(f, "\n};\n");
  return ferror(f) ? -1 : 0;
}
