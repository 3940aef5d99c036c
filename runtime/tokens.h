/* tokens: llm.c token files, the training data format of `train`.
 *
 * Format (all little-endian): a header of 256 int32, header[0] = 20240520 (magic),
 * header[1] = 1 (version), header[2] = token count N; then N uint16 tokens and
 * nothing else.
 *
 * Batches: B is the GLOBAL batch (rows of T tokens over all data-parallel ranks).
 * Step k (from 0) covers the B*T+1 tokens that start at token k*B*T, wrapping
 * around the end of the stream (positions are taken modulo N). Row b of the step
 * is tokens [b*T, b*T+T) of that window as inputs and the same shifted by one as
 * targets. Rank r of `world` ranks gets rows [r*B/world, (r+1)*B/world), i.e.
 * B/world rows (B must divide by world); a 1-rank run gets all B rows. Thus every
 * data-parallel layout of a step sees exactly the same global batch.
 */
#ifndef COLOSSALC_RUNTIME_TOKENS_H
#define COLOSSALC_RUNTIME_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1
#define TOKENS_HEADER_INTS 256

typedef struct TokenFile TokenFile;

/* Opens and validates a token file (magic, version, size matches the count);
 * the tokens are mapped, not copied. NULL with a message on error. */
TokenFile *tokens_open(const char *path, char *err, size_t errlen);
void tokens_close(TokenFile *tf);

int64_t tokens_count(const TokenFile *tf);
/* Token at position pos modulo the count (0 for a file with no tokens). */
uint16_t tokens_at(const TokenFile *tf, int64_t pos);

/* Checks that a step of global batch B, sequence T, split over world ranks, can be
 * read: B, T, world > 0, B % world == 0, count >= B*T+1. 0 or -1 with a message. */
int tokens_check_batch(const TokenFile *tf, int B, int T, int world, char *err, size_t errlen);

/* Reads this rank's rows of step `step` (see above): inputs and targets each hold
 * (B/world)*T values. 0 or -1 with a message (bad arguments, file too small). */
int tokens_read_batch(const TokenFile *tf, int64_t step, int B, int T, int rank, int world,
                      int32_t *inputs, int32_t *targets, char *err, size_t errlen);

/* Writes n tokens as a token file at path, atomically (see fileio.h). */
int tokens_write_file(const char *path, const uint16_t *tokens, size_t n, char *err,
                      size_t errlen);

#endif
