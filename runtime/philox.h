/* philox: the counter-based random numbers behind plan-independent initialisation.
 *
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11; the Random123 reference) maps a 128-bit counter and a 64-bit key to 128
 * random bits with no state. colossalc keys it by (seed, parameter name) and counts
 * by the element's global index, so element i of a parameter gets the same value
 * whichever rank, shard or slice initialises it: every parallel plan of a model
 * starts from the same weights.
 *
 * The mapping, fixed so other tools can reproduce it:
 *   key64   = splitmix64(fnv1a64(name) ^ splitmix64(seed))
 *   key     = { low 32 bits of key64, high 32 bits of key64 }
 *   ctr(i)  = { low 32 bits of i, high 32 bits of i, 0, 0 }, out = philox4x32(ctr(i), key)
 *   uniform(i) = ((out[0] >> 9) + 0.5) * 2^-23              (a float in (0,1), exact)
 *   normal(i)  = sqrt(-2 ln u1) * cos(2 pi u2), in double, rounded to float, where
 *                u1 = (out[0] + 0.5) * 2^-32 and u2 = (out[1] + 0.5) * 2^-32
 * fnv1a64: offset basis 0xcbf29ce484222325, prime 0x100000001b3, over the name's
 * bytes. splitmix64(x): z = x + 0x9e3779b97f4a7c15; z = (z ^ z>>30) * 0xbf58476d1ce4e5b9;
 * z = (z ^ z>>27) * 0x94d049bb133111eb; return z ^ z>>31.
 *
 * Shuffling (train --shuffle): a keyed permutation of [0, n), evaluated one index at a
 * time with no table, as a Feistel network over the h + h bits with 4^h >= n (h >= 1):
 * x = i split into l (high h bits) and r (low h bits); 4 rounds of
 *   f = (out[0] | out[1] << 32) & (2^h - 1), out = philox4x32({r, round, lo(epoch), hi(epoch)}, key)
 *   (l, r) = (r, l ^ f)
 * then x = l << h | r, repeated from that x while x >= n (cycle walking). Each epoch
 * is another permutation. The stream of rows g = 0, 1, ... of a run takes unit
 * perm_{g / n}(g mod n): every unit once per epoch, in a new order each epoch.
 */
#ifndef COLOSSALC_RUNTIME_PHILOX_H
#define COLOSSALC_RUNTIME_PHILOX_H

#include <stddef.h>
#include <stdint.h>

/* Philox4x32 with 10 rounds: out = philox(ctr, key). ctr is not modified. */
void philox4x32(uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

uint64_t philox_hash_name(const char *name); /* FNV-1a 64 of the bytes of name */
uint64_t philox_splitmix64(uint64_t x);

/* key = the key of parameter `name` under `seed`, as documented above. */
void philox_key_derive(uint64_t seed, const char *name, uint32_t key[2]);

float philox_uniform(const uint32_t key[2], uint64_t index); /* in (0,1) */
float philox_normal(const uint32_t key[2], uint64_t index);  /* N(0,1) */

/* dst[j] = mean + std * normal(first_index + j) for j in [0,n), keyed by (seed, name). */
void philox_fill_normal(float *dst, size_t n, uint64_t first_index, uint64_t seed, const char *name, float mean,
                        float std);
/* dst[j] = lo + (hi - lo) * uniform(first_index + j) for j in [0,n). */
void philox_fill_uniform(float *dst, size_t n, uint64_t first_index, uint64_t seed, const char *name, float lo,
                         float hi);

/* perm_epoch(i) as documented above: a bijection of [0, n) for each epoch; i < n. */
uint64_t philox_permute(const uint32_t key[2], uint64_t epoch, uint64_t n, uint64_t i);
/* The unit of row g = step * per_step + row of a shuffled stream over n units (above):
 * perm_{g / n}(g mod n), with g computed without overflow for any step >= 0. */
uint64_t philox_shuffle_pick(const uint32_t key[2], uint64_t n, int64_t step, int64_t per_step, int64_t row);

#endif
