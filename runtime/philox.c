/* philox: Philox4x32-10 and the key/counter conventions documented in philox.h.
 * The core follows the Random123 reference (philox.h there): each round multiplies
 * counter words 0 and 2 by M0 and M1, mixes the high halves with the other words
 * and the key, and the key is bumped by the Weyl constants W0, W1 between rounds.
 */
#include "runtime/philox.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_ROUNDS 10

static void philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
  uint64_t p = (uint64_t)a * b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

static void philox_round(uint32_t x[4], const uint32_t k[2]) {
  uint32_t hi0, lo0, hi1, lo1;
  philox_mulhilo(PHILOX_M0, x[0], &hi0, &lo0);
  philox_mulhilo(PHILOX_M1, x[2], &hi1, &lo1);
  uint32_t y0 = hi1 ^ x[1] ^ k[0];
  uint32_t y2 = hi0 ^ x[3] ^ k[1];
  x[0] = y0;
  x[1] = lo1;
  x[2] = y2;
  x[3] = lo0;
}

void philox4x32(uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t x[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  uint32_t k[2] = {key[0], key[1]};
  for (int r = 0; r < PHILOX_ROUNDS; r++) {
    if (r > 0) {
      k[0] += PHILOX_W0;
      k[1] += PHILOX_W1;
    }
    philox_round(x, k);
  }
  for (int i = 0; i < 4; i++) out[i] = x[i];
}

uint64_t philox_hash_name(const char *name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t philox_splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void philox_key_derive(uint64_t seed, const char *name, uint32_t key[2]) {
  uint64_t k = philox_splitmix64(philox_hash_name(name) ^ philox_splitmix64(seed));
  key[0] = (uint32_t)k;
  key[1] = (uint32_t)(k >> 32);
}

static void philox_at(const uint32_t key[2], uint64_t index, uint32_t out[4]) {
  uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), 0, 0};
  philox4x32(ctr, key, out);
}

float philox_uniform(const uint32_t key[2], uint64_t index) {
  uint32_t out[4];
  philox_at(key, index, out);
  return ((float)(out[0] >> 9) + 0.5f) * 0x1p-23f;
}

float philox_normal(const uint32_t key[2], uint64_t index) {
  uint32_t out[4];
  philox_at(key, index, out);
  double u1 = ((double)out[0] + 0.5) * 0x1p-32;
  double u2 = ((double)out[1] + 0.5) * 0x1p-32;
  const double two_pi = 6.283185307179586476925286766559;
  return (float)(sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
}

void philox_fill_normal(float *dst, size_t n, uint64_t first_index, uint64_t seed, const char *name, float mean,
                        float std) {
  uint32_t key[2];
  philox_key_derive(seed, name, key);
  for (size_t j = 0; j < n; j++) dst[j] = mean + std * philox_normal(key, first_index + j);
}

void philox_fill_uniform(float *dst, size_t n, uint64_t first_index, uint64_t seed, const char *name, float lo,
                         float hi) {
  uint32_t key[2];
  philox_key_derive(seed, name, key);
  for (size_t j = 0; j < n; j++) dst[j] = lo + (hi - lo) * philox_uniform(key, first_index + j);
}

/* One pass of the 4-round Feistel network over 2h bits. */
static uint64_t philox_feistel(const uint32_t key[2], uint64_t epoch, int h, uint64_t x) {
  uint64_t mask = (h == 32 ? 0 : 1ull << h) - 1, l = x >> h, r = x & mask;
  for (uint32_t round = 0; round < 4; round++) {
    uint32_t ctr[4] = {(uint32_t)r, round, (uint32_t)epoch, (uint32_t)(epoch >> 32)}, out[4];
    philox4x32(ctr, key, out);
    uint64_t f = ((uint64_t)out[0] | (uint64_t)out[1] << 32) & mask, t = l ^ f;
    l = r, r = t;
  }
  return l << h | r;
}

uint64_t philox_permute(const uint32_t key[2], uint64_t epoch, uint64_t n, uint64_t i) {
  int h = 1;
  while (h < 32 && (1ull << 2 * h) < n) h++;
  uint64_t x = i;
  do /* cycle walking: the domain is under 4n, so fewer than 4 passes are expected */
    x = philox_feistel(key, epoch, h, x);
  while (x >= n);
  return x;
}

uint64_t philox_shuffle_pick(const uint32_t key[2], uint64_t n, int64_t step, int64_t per_step, int64_t row) {
  unsigned __int128 g = (unsigned __int128)step * (uint64_t)per_step + (uint64_t)row;
  return philox_permute(key, (uint64_t)(g / n), n, (uint64_t)(g % n));
}
