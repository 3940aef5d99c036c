/* The program format (program/program.h): a program written with prog_build opens and
 * reads as written (records, strings, sections, the stage views, lists, instructions
 * with their payloads), prints every field by name, and a program of another version,
 * of other struct layouts, of another size, with a byte changed, or with a section
 * beyond its end is refused in one line that says which. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "program/program.h"

static int failures;
#define CHECK(c, ...)               \
  do {                              \
    if (!(c)) {                     \
      printf("FAIL: " __VA_ARGS__); \
      printf("\n");                 \
      failures++;                   \
    }                               \
  } while (0)

/* A two-stage program: the model, two stages of one parameter each, a list each. */
static void *small_program(int64_t *bytes) {
  ProgBuild *b = prog_build_new();
  int64_t model = prog_build_str(b, "small");
  for (int s = -1; s < 2; s++) {
    ProgStage st = {.model = model, .stage = s, .batch = 2, .tp = 1, .pp = 2, .slots = 1};
    for (int k = 0; k < PROG_NLISTS; k++) st.list[k] = -1;
    st.param0 = prog_build_count(b, PROG_SEC_PARAMS), st.nparams = s < 0 ? 2 : 1;
    for (int i = 0; i < st.nparams; i++) {
      ProgParam q = {.name = prog_build_str(b, (s < 0 ? i : s) ? "w1" : "w0"), .ndim = 1, .shape = {4}, .numel = 4};
      q.global = s < 0 ? i : s, q.offset = 16 * (s < 0 ? i : 0), q.tp_dim = -1, q.owner = -1;
      prog_build_add(b, PROG_SEC_PARAMS, &q, 1);
    }
    if (s >= 0) {
      IsaInstr v[2] = {isa_instr(ISA_SEND), isa_instr(ISA_NORM)};
      v[0].p2p = (IsaP2P){.peer = 1 - s, .tag = 3, .tier = TIER_WORK, .count = 4};
      v[1].norm = (IsaNorm){.offset = 64, .count = 2, .microbatches = 1};
      ProgList l = {prog_build_str(b, "train"), prog_build_add(b, PROG_SEC_INSTRS, v, 2), 2, 1};
      st.list[PROG_LIST_TRAIN] = prog_build_add(b, PROG_SEC_LISTS, &l, 1);
    }
    prog_build_add(b, PROG_SEC_STAGES, &st, 1);
  }
  return prog_build_finish(b, bytes);
}

static void test_reads(const void *blob, int64_t bytes) {
  Prog all;
  char err[256];
  CHECK(prog_open(blob, bytes, &all, err, sizeof err) == 0, "open: %s", err);
  CHECK(all.nstages == 3 && all.s->stage == -1 && all.s->nparams == 2, "the model's record");
  CHECK(!strcmp(prog_str(&all, all.s->model), "small") && !strcmp(prog_str(&all, -1), ""), "strings");
  Prog s1 = prog_stage(&all, 1);
  CHECK(s1.s->stage == 1 && s1.s->nparams == 1 && !strcmp(prog_str(&s1, s1.params[0].name), "w1"), "stage 1");
  CHECK(s1.params[0].global == 1 && prog_find_param(&s1, "w1") == &s1.params[0] && !prog_find_param(&s1, "w0"),
        "stage 1's parameter");
  const ProgList *l = prog_list(&s1, PROG_LIST_TRAIN);
  CHECK(l && l->n == 2 && l->sends && !prog_list(&s1, PROG_LIST_EVAL), "stage 1's lists");
  const IsaInstr *in = l ? &s1.instrs[l->first] : NULL;
  CHECK(in && in[0].op == ISA_SEND && in[0].p2p.peer == 0 && in[0].p2p.tag == 3 && in[0].dp_rank == -1 &&
            in[1].op == ISA_NORM && in[1].norm.offset == 64,
        "stage 1's instructions");
  CHECK((uintptr_t)all.instrs % 8 == 0 && (uintptr_t)all.stages % 8 == 0, "aligned sections");
  FILE *f = tmpfile();
  char text[8192] = "";
  prog_print(f, &all);
  rewind(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  CHECK(strstr(text, "program \"small\": format version") && strstr(text, "send peer=0 tag=3 tier=work") &&
            strstr(text, "norm offset=64 count=2 microbatches=1") && strstr(text, "param 0: name=\"w1\""),
        "the printed program:\n%s", text);
}

/* blob with `edit` applied (at a byte offset) is refused with want in the message. */
static void refused(const void *blob, int64_t bytes, const char *name, int64_t at, int64_t value, int64_t size,
                    const char *want) {
  unsigned char *copy = malloc((size_t)bytes);
  memcpy(copy, blob, (size_t)bytes);
  if (at >= 0) memcpy(copy + at, &value, (size_t)size);
  Prog p;
  char err[256] = "";
  int64_t len = at == -2 ? bytes - 8 : bytes; /* -2: truncated */
  int rc = prog_open(copy, len, &p, err, sizeof err);
  CHECK(rc != 0 && strstr(err, want) && !strchr(err, '\n'), "%s: expected '%s', got '%s'", name, want,
        rc ? err : "opened");
  printf("%-22s %s\n", name, rc ? err : "opened");
  free(copy);
}

int main(void) {
  int64_t bytes;
  void *blob = small_program(&bytes);
  CHECK(blob && bytes > (int64_t)sizeof(ProgHeader), "prog_build_finish");
  if (!blob) return 1;
  test_reads(blob, bytes);
  const ProgHeader *h = blob;
  refused(blob, bytes, "magic", 0, 0x6c616d6f6c6f63, 8, "not a colossalc program");
  char newer[64];
  snprintf(newer, sizeof newer, "format version %d and this runtime reads version %d", PROG_VERSION + 1, PROG_VERSION);
  refused(blob, bytes, "version", offsetof(ProgHeader, version), PROG_VERSION + 1, 4, newer);
  refused(blob, bytes, "layout", offsetof(ProgHeader, layout), h->layout ^ 1, 4, "are not this runtime's");
  refused(blob, bytes, "truncated", -2, 0, 0, "its header says");
  refused(blob, bytes, "a byte changed", bytes - 3, ((const unsigned char *)blob)[bytes - 3] ^ 0x10, 1,
          "the program is damaged");
  /* the section table is hashed too: a changed count is damage */
  ProgHeader bad = *h;
  bad.sec[PROG_SEC_INSTRS].count = 1;
  unsigned char *copy = malloc((size_t)bytes);
  memcpy(copy, blob, (size_t)bytes);
  memcpy(copy, &bad, sizeof bad);
  refused(copy, bytes, "section table changed", -1, 0, 0, "the program is damaged");
  /* a section past the end, rehashed so that only the bounds fail */
  bad.sec[PROG_SEC_INSTRS].count = bytes;
  memcpy(copy, &bad, sizeof bad);
  bad.hash = prog_hash(copy, bytes);
  memcpy(copy, &bad, sizeof bad);
  refused(copy, bytes, "section out of bounds", -1, 0, 0, "section INSTRS");
  free(copy);
  free(blob);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures != 0;
}
