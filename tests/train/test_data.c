/* test_data: train's data path (runtime/io/data.h) against programs written here (a
 * stage's view, program/program.h, over structs of this file): a record
 * file fills each input from its field, each dp rank its rows of the step (in order and
 * shuffled, the ranks' rows making up the one-rank batch); a token file fills tokens and
 * targets, as tokens_read_batch reads them; i32 values outside an input's range are
 * refused with the file, input, batch, row and position; a file that does not fit the
 * program (a missing field, another shape or dtype, too few records, a token file for
 * data inputs, an unknown magic) is refused when opened.
 */
#include "runtime/io/data.h"
#include "runtime/philox.h"
#include "runtime/io/records.h"
#include "runtime/io/tokens.h"

#include "rt_test.h"

static char err[1024];

enum { NREC = 50, B = 4 };

/* A stage's view of its own: its record, inputs and strings (the names below). */
typedef struct TestProg {
  Prog p;
  ProgStage s;
  ProgInput in[PROG_MAX_INPUTS];
} TestProg;
static const char names[] = "\0x\0y\0z\0tokens\0targets";
enum { N_X = 1, N_Y = 3, N_Z = 5, N_TOKENS = 7, N_TARGETS = 14 };

static Prog *test_prog(TestProg *t, int64_t seq, int64_t vocab, int64_t tokens, int64_t targets) {
  memset(t, 0, sizeof *t);
  t->s = (ProgStage){.batch = B, .microbatches = 1, .seq = seq, .vocab = vocab, .tokens = tokens, .targets = targets};
  t->p = (Prog){.s = &t->s, .inputs = t->in, .strings = names};
  return &t->p;
}

/* Input i of t: name (an offset into names), role, f32 or i32, shape [B, dims...]. */
static void set_input(TestProg *t, int i, int64_t name, ProgRole role, int is_f32, int ndim, const int64_t *dims) {
  ProgInput *in = &t->in[i];
  *in = (ProgInput){.name = name, .role = role, .is_f32 = is_f32, .ndim = ndim + 1, .row_elems = 1};
  in->shape[0] = B;
  for (int d = 0; d < ndim; d++) in->shape[d + 1] = dims[d], in->row_elems *= dims[d];
  t->s.ninputs = i + 1;
}

/* x f32 [2, 3] = r + k / 10 and y i32 [] = 7 r - 100 for record r. */
static void write_records(void) {
  static float x[NREC * 6];
  static int32_t y[NREC];
  for (int r = 0; r < NREC; r++) {
    for (int k = 0; k < 6; k++) x[6 * r + k] = (float)r + (float)k / 10;
    y[r] = 7 * r - 100;
  }
  RecField f[2] = {{"y", REC_I32, 0, {0}, 1}, {"x", REC_F32, 2, {2, 3}, 6}};
  const void *data[2] = {y, x};
  CHECK(records_write_file(rt_path("rec.bin"), f, 2, data, NREC, err, sizeof err) == 0);
}

/* The record program: x, then y with values in [-100, 244). */
static Prog *record_program(TestProg *t) {
  static const int64_t xd[2] = {2, 3};
  Prog *p = test_prog(t, 1, 10, -1, -1);
  set_input(t, 0, N_X, PROG_ROLE_DATA, 1, 2, xd);
  set_input(t, 1, N_Y, PROG_ROLE_DATA, 0, 0, NULL);
  t->in[1].ranged = 1, t->in[1].lo = -100, t->in[1].hi = 244;
  return p;
}

/* Step k over `world` ranks, each rank's rows against the records they name. */
static void check_record_step(const DataFile *df, int64_t k, int world, const uint32_t *key) {
  float x[B * 6];
  int32_t y[B];
  char *rows[2] = {(char *)x, (char *)y};
  int rows_each = B / world, bad = 0;
  RecordFile *rf = records_open(rt_path("rec.bin"), err, sizeof err);
  for (int r = 0; r < world; r++) {
    CHECK(data_read(df, k, r, key, rows, err, sizeof err) == 0);
    for (int b = 0; b < rows_each; b++) {
      int64_t rec = records_row(rf, k, B, r * rows_each + b, key);
      bad += y[b] != 7 * rec - 100 || x[6 * b + 5] != (float)rec + 0.5f;
    }
  }
  CHECK(bad == 0);
  records_close(rf);
}

static void test_records(void) {
  TestProg t;
  ProgInput *in = t.in;
  write_records();
  Prog *p = record_program(&t);
  uint32_t key[2];
  philox_key_derive(9, "shuffle", key);
  for (int world = 1; world <= 4; world *= 2) {
    DataFile *df = data_open(rt_path("rec.bin"), p, B, world, err, sizeof err);
    CHECK(df != NULL);
    for (int64_t k = 0; df && k < 30; k++) {
      check_record_step(df, k, world, NULL);
      check_record_step(df, k, world, key);
    }
    data_close(df);
  }
  in[1].lo = 0; /* records 0..14 hold negative values */
  DataFile *df = data_open(rt_path("rec.bin"), p, B, 2, err, sizeof err);
  float x[B * 6];
  int32_t y[B];
  char *rows[2] = {(char *)x, (char *)y};
  in[1].has_ignore = 1, in[1].ignore = -1;
  CHECK(df && data_read(df, 3, 1, NULL, rows, err, sizeof err) == -1);
  CHECK_ERR(err, "rec.bin: input y: -2 in batch 3 (row 2, position 0) is outside [0, 244) (nor the "
                 "ignored -1)");
  data_close(df);
}

static void expect_open_error(const Prog *p, const char *name, int64_t batch, const char *want) {
  DataFile *df = data_open(rt_path(name), p, batch, 1, err, sizeof err);
  CHECK(df == NULL);
  data_close(df);
  CHECK_ERR(err, want);
}

static void test_mismatch(void) {
  TestProg t;
  ProgInput *in = t.in;
  Prog *p = record_program(&t);
  in[1].name = N_Z;
  expect_open_error(p, "rec.bin", B, "rec.bin: no field 'z' for the program's input of that name");
  p = record_program(&t);
  in[0].shape[1] = 3, in[0].shape[2] = 2;
  expect_open_error(p, "rec.bin", B, "field 'x' is not what input x reads a row of: f32 [3, 2]");
  p = record_program(&t);
  in[1].is_f32 = 1;
  expect_open_error(p, "rec.bin", B, "field 'y' is not what input y reads a row of: f32 []");
  p = record_program(&t);
  expect_open_error(p, "rec.bin", 64, "50 records, but one step of batch 64 needs 64");
  uint16_t toks[200] = {0};
  CHECK(tokens_write_file(rt_path("tok.bin"), toks, 200, err, sizeof err) == 0);
  expect_open_error(p, "tok.bin", B, "input 'x' is not them nor their targets: give a record file");
  int32_t junk[256] = {77};
  rt_write_raw(rt_path("junk.bin"), junk, sizeof junk);
  expect_open_error(p, "junk.bin", B, "bad magic 77: neither an llm.c token file");
}

/* Tokens and targets from a token file, as tokens_read_batch reads them, with the
 * vocabulary as their range. */
static void test_tokens(void) {
  static const int64_t seq[1] = {8};
  static uint16_t toks[500];
  for (int i = 0; i < 500; i++) toks[i] = (uint16_t)(i * 37 % 100);
  CHECK(tokens_write_file(rt_path("lm.bin"), toks, 500, err, sizeof err) == 0);
  TestProg t;
  Prog *p = test_prog(&t, 8, 100, 0, 1);
  set_input(&t, 0, N_TOKENS, PROG_ROLE_TOKENS, 0, 1, seq);
  set_input(&t, 1, N_TARGETS, PROG_ROLE_TARGETS, 0, 1, seq);
  TokenFile *tf = tokens_open(rt_path("lm.bin"), err, sizeof err);
  DataFile *df = data_open(rt_path("lm.bin"), p, B, 2, err, sizeof err);
  CHECK(tf && df);
  int32_t a[16], b[16], c[16], d[16];
  char *rows[2] = {(char *)a, (char *)b};
  uint32_t key[2];
  philox_key_derive(3, "shuffle", key);
  for (int k = 0; tf && df && k < 20; k++) {
    CHECK(data_read(df, k, 1, k % 2 ? key : NULL, rows, err, sizeof err) == 0);
    CHECK(tokens_read_batch(tf, k, B, 8, 1, 2, k % 2 ? key : NULL, c, d, err, sizeof err) == 0);
    CHECK(memcmp(a, c, sizeof a) == 0 && memcmp(b, d, sizeof b) == 0);
  }
  data_close(df);
  t.s.vocab = 50;
  df = data_open(rt_path("lm.bin"), p, B, 1, err, sizeof err);
  int32_t e[32], f[32];
  char *rows1[2] = {(char *)e, (char *)f};
  CHECK(df && data_read(df, 0, 0, NULL, rows1, err, sizeof err) == -1);
  CHECK_ERR(err, "input tokens: 74 in batch 0 (row 0, position 2) is outside [0, 50)");
  data_close(df);
  tokens_close(tf);
}

int main(void) {
  rt_mkdir_scratch("data");
  test_records();
  test_mismatch();
  test_tokens();
  return rt_finish("test_data");
}
