/* libFuzzer target for the files `train` reads from users (runtime/: safetensors.c,
 * hf.c, tokens.c, records.c): a safetensors file (--init-from, checkpoints), a
 * transformers index (model.safetensors.index.json naming the shards), an llm.c token
 * file and a record file (--data). The first byte picks the reader, the rest is the
 * file. Any bytes must open or give an error message: never a crash, a hang, a leak or
 * undefined behaviour (the build adds ASan and UBSan). What opens is read through:
 * every tensor converted to f32, a token file's first and last tokens and a batch, a
 * record file's fields of its first and last records.
 *
 *   scripts/fuzz.sh 300 files     build with clang and fuzz for five minutes
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/io/hf.h"
#include "runtime/io/records.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_READ = 1 << 20 }; /* elements converted per tensor or record, at most */

static char dir[64];

/* The input's file, DIR/name (a directory of this process's own, made once). */
static const char *write_input(const char *name, const uint8_t *data, size_t size) {
  static char path[128];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "%s", "/tmp/fuzz_files.XXXXXX");
    if (!mkdtemp(dir)) abort();
  }
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) abort();
  return path;
}

static void read_safetensors(const char *path) {
  char err[512];
  SafeTensors *st = safetensors_open(path, err, sizeof err);
  if (!st) return;
  for (int i = 0; i < safetensors_count(st); i++) {
    const SafeTensor *t = safetensors_get(st, i);
    if (t->numel > MAX_READ) continue;
    float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    safetensors_read_f32(st, t, v, t->numel, err, sizeof err);
    free(v);
  }
  for (int i = 0; i < safetensors_metadata_count(st); i++) {
    const char *k, *v;
    safetensors_metadata_at(st, i, &k, &v);
  }
  safetensors_close(st);
}

static void read_index(const uint8_t *data, size_t size) {
  char err[512], index[128];
  snprintf(index, sizeof index, "%s", write_input("model.safetensors.index.json", data, size));
  HfSource *s = hf_source_open(dir, err, sizeof err);
  if (s) {
    for (int i = 0; i < hf_source_count(s); i++) {
      const SafeTensors *file;
      hf_source_get(s, i, &file);
    }
    hf_source_close(s);
  }
  unlink(index); /* the other readers' inputs are not an index's shards */
}

static void read_tokens(const char *path) {
  char err[512];
  TokenFile *tf = tokens_open(path, err, sizeof err);
  if (!tf) return;
  int64_t n = tokens_count(tf);
  if (n > 0) tokens_at(tf, 0), tokens_at(tf, n - 1);
  if (tokens_check_batch(tf, 1, 2, 1, err, sizeof err) == 0) {
    int32_t x[2], y[2];
    tokens_read_batch(tf, 0, 1, 2, 0, 1, NULL, x, y, err, sizeof err);
  }
  tokens_close(tf);
}

static void read_records(const char *path) {
  char err[512];
  RecordFile *rf = records_open(path, err, sizeof err);
  if (!rf) return;
  int64_t n = records_count(rf);
  for (int f = 0; n > 0 && f < records_nfields(rf); f++) {
    const RecField *fd = records_field(rf, f);
    if (fd->elems > MAX_READ) continue;
    void *v = malloc((size_t)fd->elems * 4);
    records_get(rf, f, records_row(rf, 0, 1, 0, NULL), v);
    records_get(rf, f, n - 1, v);
    free(v);
  }
  records_close(rf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  const uint8_t *file = data + 1;
  size_t n = size - 1;
  switch (data[0] % 4) {
  case 0: read_safetensors(write_input("fuzz.safetensors", file, n)); break;
  case 1: read_index(file, n); break;
  case 2: read_tokens(write_input("fuzz.bin", file, n)); break;
  case 3: read_records(write_input("fuzz.rec", file, n)); break;
  }
  return 0;
}
