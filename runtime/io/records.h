/* records: record files, the data format of `train` for models whose inputs are not
 * one token stream (BERT's masked tokens, token types and labels; ViT's images and
 * classes). Each record holds one row of every input; colossalc-mkdata writes the file
 * from numpy arrays (tools/mkdata.c).
 *
 * Format (all little-endian), a header of 256 int32 as llm.c's token files have:
 *   [0] magic 20250601, [1] version 1, [2] N: the records, [3] F: the fields (1 to 12);
 *   field f's descriptor at word 4 + 20 f, 20 words:
 *     12 words  its name, up to 47 bytes of [A-Za-z0-9_.] padded with NULs
 *      1 word   its dtype: 1 i32, 2 f32
 *      1 word   ndim, 0 to 6: the shape of one record's value
 *      6 words  the shape (each >= 1), then zeros
 *   the rest of the header zero. Then the fields, one after another in header order:
 *   field f is N records of prod(shape) 4-byte values, row-major. Nothing follows.
 * Thus a field is one numpy array of shape [N, ...] as written, and a record's value is
 * one contiguous copy.
 *
 * Rows: B is the GLOBAL batch; row g = k*B + b of the run (step k from 0, row b of its
 * batch) reads record g mod N in order, or with a shuffle key record perm_{g/N}(g mod N)
 * (philox_shuffle_pick: every record once per epoch of N rows, in a new order each
 * epoch). Rank r of `world` ranks gets rows [r*B/world, (r+1)*B/world) of each step, as
 * with token files (tokens.h).
 */
#ifndef COLOSSALC_RUNTIME_RECORDS_H
#define COLOSSALC_RUNTIME_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#define RECORDS_MAGIC 20250601
#define RECORDS_VERSION 1
#define RECORDS_MAX_FIELDS 12
#define RECORDS_MAX_DIMS 6
#define RECORDS_NAME_BYTES 48

typedef enum RecDtype { REC_I32 = 1, REC_F32 = 2 } RecDtype;

typedef struct RecField {
  char name[RECORDS_NAME_BYTES];
  RecDtype dtype;
  int ndim;
  int64_t shape[RECORDS_MAX_DIMS]; /* [ndim] one record's value */
  int64_t elems;                   /* values per record: the product of shape */
} RecField;

typedef struct RecordFile RecordFile;

/* Opens and validates a record file (magic, version, descriptors, size); the data is
 * mapped, not copied. NULL with a message on error. */
RecordFile *records_open(const char *path, char *err, size_t errlen);
void records_close(RecordFile *rf);

int64_t records_count(const RecordFile *rf);
int records_nfields(const RecordFile *rf);
const RecField *records_field(const RecordFile *rf, int f);
/* The field called name, or -1. */
int records_find(const RecordFile *rf, const char *name);

/* The record row `row` of step `step` reads, B rows a step (above); shuffle: NULL in
 * order, else the Philox key. */
int64_t records_row(const RecordFile *rf, int64_t step, int64_t B, int64_t row, const uint32_t *shuffle);
/* Field f of record r: elems 4-byte values (i32 or f32 as the field says) into out. */
void records_get(const RecordFile *rf, int f, int64_t r, void *out);

/* Writes a record file of n records at path, atomically (fileio.h): fields[f] describes
 * field f, data[f] holds its n * elems values (host order). 0 or -1 with a message. */
int records_write_file(const char *path, const RecField *fields, int nfields, const void *const *data, int64_t n,
                       char *err, size_t errlen);

#endif
