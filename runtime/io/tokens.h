/* tokens: llm.c token files, the language-model data format of `train`.
 *
 * Format (all little-endian): a header of 256 int32, header[0] the magic, header[1]
 * the version, header[2] the token count N; then N tokens and nothing else. llm.c
 * writes two kinds (its dev/data/data_common.py), both read here:
 *     magic 20240520, version 1: uint16 tokens (GPT-2's vocabulary, up to 65,536)
 *     magic 20240801, version 7: uint32 tokens (LLaMA-3's; any vocabulary)
 * A token above 2^31 - 1 does not fit train's i32 ids and is refused when read.
 *
 * Batches: B is the GLOBAL batch (rows of T tokens over all data-parallel ranks).
 * Row g = k*B + b of the run (step k from 0, row b of its batch) holds T+1 tokens:
 * its inputs are the first T and its targets the same shifted by one.
 *   In order (no shuffle key): row g starts at token g*T, wrapping around the end of
 *   the stream (positions modulo N); so step k covers the B*T+1 tokens from k*B*T.
 *   Shuffled (a key, train --shuffle): the stream is cut into S = (N-1)/T sequences
 *   of T+1 tokens, sequence j starting at token j*T, and row g reads sequence
 *   perm_{g/S}(g mod S) (philox_shuffle_pick: every sequence once per epoch of S
 *   rows, in a new order each epoch).
 * Rank r of `world` ranks gets rows [r*B/world, (r+1)*B/world) of each step, i.e.
 * B/world rows (B must divide by world); a 1-rank run gets all B rows. Thus every
 * data-parallel layout of a step sees exactly the same global batch, shuffled or not.
 */
#ifndef COLOSSALC_RUNTIME_TOKENS_H
#define COLOSSALC_RUNTIME_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#define TOKENS_MAGIC 20240520 /* uint16 tokens */
#define TOKENS_VERSION 1
#define TOKENS_MAGIC_U32 20240801 /* uint32 tokens */
#define TOKENS_VERSION_U32 7
#define TOKENS_HEADER_INTS 256

typedef struct TokenFile TokenFile;

/* Opens and validates a token file (magic, version, size matches the count);
 * the tokens are mapped, not copied. NULL with a message on error. */
TokenFile *tokens_open(const char *path, char *err, size_t errlen);
void tokens_close(TokenFile *tf);

int64_t tokens_count(const TokenFile *tf);
/* Bytes per token: 2 (version 1) or 4 (the uint32 kind). */
int tokens_width(const TokenFile *tf);
/* Token at position pos modulo the count (0 for a file with no tokens). */
uint32_t tokens_at(const TokenFile *tf, int64_t pos);

/* Checks that a step of global batch B, sequence T, split over world ranks, can be
 * read: B, T, world > 0, B % world == 0, count >= B*T+1. 0 or -1 with a message. */
int tokens_check_batch(const TokenFile *tf, int B, int T, int world, char *err, size_t errlen);

/* Reads this rank's rows of step `step` (see above; shuffle: NULL in order, else the
 * Philox key of the permutation): inputs and targets each hold (B/world)*T values.
 * 0 or -1 with a message (bad arguments, file too small, a token above 2^31 - 1). */
int tokens_read_batch(const TokenFile *tf, int64_t step, int B, int T, int rank, int world, const uint32_t *shuffle,
                      int32_t *inputs, int32_t *targets, char *err, size_t errlen);

/* Writes n tokens as a token file at path, atomically (see fileio.h): uint16 tokens
 * (version 1), or with tokens_write_file32 uint32 tokens (magic 20240801, version 7). */
int tokens_write_file(const char *path, const uint16_t *tokens, size_t n, char *err, size_t errlen);
int tokens_write_file32(const char *path, const uint32_t *tokens, size_t n, char *err, size_t errlen);

#endif
