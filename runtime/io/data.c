/* data: the program's inputs from a token file or a record file (see the header). The
 * files are mapped (tokens.c, records.c); what is allocated here, at open, is two rows'
 * scratch for a pipeline stage that holds the tokens but not the targets (or the other
 * way round), which a token file's read fills together.
 */
#include "runtime/io/data.h"

#include "runtime/io/fileio.h"
#include "runtime/io/records.h"
#include "runtime/io/tokens.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct DataFile {
  char *path;
  const Prog *prog;
  int64_t B; /* global batch */
  int world; /* data-parallel ranks */
  TokenFile *tokens;
  RecordFile *records;
  int field[PROG_MAX_INPUTS]; /* a record file: the field of each input */
  int32_t *scratch;           /* a token file: [B/world * seq] the stream a stage drops */
};

/* The magic in the first word: a token file's or a record file's, else -1 with a message. */
static int data_magic(const char *path, int32_t *magic, char *err, size_t errlen) {
  FileMap m;
  if (file_map(path, 1024, "a token or record file", &m, err, errlen) != 0) return -1;
  *magic = (int32_t)file_le32(m.data);
  file_unmap(&m);
  if (*magic == TOKENS_MAGIC || *magic == TOKENS_MAGIC_U32 || *magic == RECORDS_MAGIC) return 0;
  return file_set_error(err, errlen,
                        "%s: bad magic %d: neither an llm.c token file (%d, or %d "
                        "with uint32 tokens) nor a record file (%d)",
                        path, *magic, TOKENS_MAGIC, TOKENS_MAGIC_U32, RECORDS_MAGIC);
}

/* A token file holds a language model's tokens: every input must be the tokens or the targets. */
static int data_open_tokens(DataFile *df, char *err, size_t errlen) {
  const Prog *p = df->prog;
  for (int i = 0; i < p->s->ninputs; i++)
    if (p->inputs[i].role == PROG_ROLE_DATA)
      return file_set_error(err, errlen,
                            "%s: an llm.c token file holds a language model's "
                            "tokens, and input '%s' is not them nor their targets: give a "
                            "record file (colossalc-mkdata writes one from numpy arrays)",
                            df->path, prog_str(p, p->inputs[i].name));
  if (!(df->tokens = tokens_open(df->path, err, errlen)) ||
      tokens_check_batch(df->tokens, (int)df->B, (int)p->s->seq, df->world, err, errlen) != 0)
    return -1;
  size_t n = (size_t)(df->B / df->world * p->s->seq);
  if (!(df->scratch = malloc(n * sizeof *df->scratch)))
    return file_set_error(err, errlen, "%s: out of memory", df->path);
  return 0;
}

/* Input i's field: there, of its dtype and row shape. */
static int data_match_field(DataFile *df, int i, char *err, size_t errlen) {
  const ProgInput *in = &df->prog->inputs[i];
  const char *name = prog_str(df->prog, in->name);
  int f = records_find(df->records, name);
  if (f < 0)
    return file_set_error(err, errlen, "%s: no field '%s' for the program's input of that name", df->path, name);
  const RecField *fl = records_field(df->records, f);
  int same = fl->ndim == in->ndim - 1 && (fl->dtype == REC_I32) == !in->is_f32;
  for (int d = 0; same && d < fl->ndim; d++) same = fl->shape[d] == in->shape[d + 1];
  if (!same) {
    char want[160] = "";
    for (int d = 1; d < in->ndim; d++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%" PRId64, d > 1 ? ", " : "", in->shape[d]);
    return file_set_error(err, errlen, "%s: field '%s' is not what input %s reads a row of: %s [%s]", df->path, name,
                          name, in->is_f32 ? "f32" : "i32", want);
  }
  df->field[i] = f;
  return 0;
}

static int data_open_records(DataFile *df, char *err, size_t errlen) {
  if (!(df->records = records_open(df->path, err, errlen))) return -1;
  for (int i = 0; i < df->prog->s->ninputs; i++)
    if (data_match_field(df, i, err, errlen) != 0) return -1;
  if (df->B % df->world != 0)
    return file_set_error(err, errlen,
                          "%s: global batch %" PRId64 " does not divide over %d "
                          "data-parallel ranks",
                          df->path, df->B, df->world);
  if (records_count(df->records) < df->B)
    return file_set_error(err, errlen, "%s: %" PRId64 " records, but one step of batch %" PRId64 " needs %" PRId64,
                          df->path, records_count(df->records), df->B, df->B);
  return 0;
}

DataFile *data_open(const char *path, const Prog *p, int64_t B, int world, char *err, size_t errlen) {
  DataFile *df = calloc(1, sizeof *df);
  if (!df || !(df->path = strdup(path))) {
    free(df);
    file_set_error(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  df->prog = p, df->B = B, df->world = world;
  int32_t magic;
  int rc = data_magic(path, &magic, err, errlen);
  if (rc == 0) rc = magic == RECORDS_MAGIC ? data_open_records(df, err, errlen) : data_open_tokens(df, err, errlen);
  if (rc != 0) {
    data_close(df);
    return NULL;
  }
  return df;
}

void data_close(DataFile *df) {
  if (!df) return;
  tokens_close(df->tokens);
  records_close(df->records);
  free(df->scratch);
  free(df->path);
  free(df);
}

/* The values input i may hold: its range, or for tokens and targets the vocabulary; 0
 * when unchecked. */
static int data_bounds(const Prog *p, const ProgInput *in, int64_t *lo, int64_t *hi) {
  *lo = in->ranged ? in->lo : 0;
  *hi = in->ranged ? in->hi : p->s->vocab;
  return !in->is_f32 && (in->ranged || in->role != PROG_ROLE_DATA);
}

/* The rows of input i just read (row0: the first one's number in the global batch). */
static int data_check(const DataFile *df, int i, const int32_t *v, int64_t step, int64_t row0, char *err,
                      size_t errlen) {
  const Prog *p = df->prog;
  const ProgInput *in = &p->inputs[i];
  int64_t lo, hi, n = df->B / df->world * in->row_elems;
  if (!data_bounds(p, in, &lo, &hi)) return 0;
  for (int64_t e = 0; e < n; e++) {
    if ((v[e] >= lo && v[e] < hi) || (in->has_ignore && v[e] == in->ignore)) continue;
    char ignore[48] = "";
    if (in->has_ignore) snprintf(ignore, sizeof ignore, " (nor the ignored %" PRId64 ")", in->ignore);
    return file_set_error(err, errlen,
                          "%s: input %s: %d in batch %" PRId64 " (row %" PRId64 ", position %" PRId64
                          ") is outside [%" PRId64 ", %" PRId64 ")%s",
                          df->path, prog_str(p, in->name), v[e], step, row0 + e / in->row_elems, e % in->row_elems, lo,
                          hi, ignore);
  }
  return 0;
}

static int data_read_tokens(const DataFile *df, int64_t step, int rank, const uint32_t *shuffle, char *const *rows,
                            char *err, size_t errlen) {
  const Prog *p = df->prog;
  const ProgStage *s = p->s;
  if (s->tokens < 0 && s->targets < 0) return 0; /* a pipeline stage between the first and the last */
  int32_t *in = s->tokens >= 0 ? (int32_t *)rows[s->tokens] : df->scratch;
  int32_t *tg = s->targets >= 0 ? (int32_t *)rows[s->targets] : df->scratch;
  return tokens_read_batch(df->tokens, step, (int)df->B, (int)s->seq, rank, df->world, shuffle, in, tg, err, errlen);
}

static void data_read_records(const DataFile *df, int64_t step, int rank, const uint32_t *shuffle, char *const *rows) {
  const Prog *p = df->prog;
  int64_t local = df->B / df->world;
  for (int64_t b = 0; b < local; b++) {
    int64_t r = records_row(df->records, step, df->B, rank * local + b, shuffle);
    for (int i = 0; i < p->s->ninputs; i++)
      records_get(df->records, df->field[i], r, rows[i] + b * p->inputs[i].row_elems * 4);
  }
}

int data_read(const DataFile *df, int64_t step, int rank, const uint32_t *shuffle, char *const *rows, char *err,
              size_t errlen) {
  const Prog *p = df->prog;
  if (df->records) data_read_records(df, step, rank, shuffle, rows);
  else if (data_read_tokens(df, step, rank, shuffle, rows, err, errlen) != 0) return -1;
  for (int i = 0; i < p->s->ninputs; i++)
    if (data_check(df, i, (const int32_t *)rows[i], step, rank * (df->B / df->world), err, errlen) != 0) return -1;
  return 0;
}

int32_t data_first_token(const DataFile *df) {
  return df->tokens && tokens_count(df->tokens) > 0 ? (int32_t)tokens_at(df->tokens, 0) : 0;
}
