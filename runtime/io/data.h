/* data: what `train` reads its program's inputs from (ProgInput): an llm.c
 * token file (tokens.h) or a record file (records.h), told apart by the magic.
 *
 * A token file fills the inputs whose role is tokens and targets (a language model's);
 * a program with any other input needs a record file. A record file fills every input
 * from the field of its name, which must have the input's dtype and the shape of one
 * row (the input's shape without its first dimension, the batch); fields no input
 * reads are left alone.
 *
 * Rows: B is the global batch (every data-parallel rank's rows of a step, with their
 * micro-batches). Step k reads rows k*B .. k*B+B-1 of the run, in the file's order or
 * shuffled by a Philox key (train --shuffle), and dp rank r takes rows [r*B/world,
 * (r+1)*B/world) of them: each rank's micro-batches one after another. The tensor- and
 * pipeline-parallel ranks of a dp rank read the same rows, each stage only the inputs
 * its program has. So every plan of a model trains on the same batches.
 *
 * Values: every value of an i32 input is checked as it is read: within the input's
 * "range" (without one, a tokens or targets input's below the vocabulary) or equal to
 * its "ignore" value; a value outside names the file, the input, the batch, the row
 * and the element.
 */
#ifndef COLOSSALC_RUNTIME_DATA_H
#define COLOSSALC_RUNTIME_DATA_H

#include "program/program.h"

#include <stddef.h>
#include <stdint.h>

typedef struct DataFile DataFile;

/* Opens path for program p (this rank's stage): a global batch of B rows over world
 * data-parallel ranks. Checks that the file holds every input of p and a whole step.
 * NULL with a message. */
DataFile *data_open(const char *path, const Prog *p, int64_t B, int world, char *err, size_t errlen);
void data_close(DataFile *df);

/* Rank `rank`'s rows of step `step` (shuffle: NULL in order, else the key) into rows[i]
 * for each input i of the program, B/world rows of row_elems 4-byte values each, checked
 * as above. 0 or -1 with a message. */
int data_read(const DataFile *df, int64_t step, int rank, const uint32_t *shuffle, char *const *rows, char *err,
              size_t errlen);

/* The first token of a token file (where sampling starts), 0 for a record file. */
int32_t data_first_token(const DataFile *df);

#endif
