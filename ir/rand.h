/* The random numbers of dropout masks: a counter-based hash (splitmix64's finaliser)
 * of the dropout's seed, the training step and the element's flat index, so a mask is
 * the same wherever and however often it is computed (forward, its gradient, any
 * kernel split, any backend). Both code generators emit this exact function; the
 * reference interpreter and the kernel evaluator call it. */
#ifndef COLOSSALC_RAND_H
#define COLOSSALC_RAND_H
#include <stdint.h>

/* A uniform number in [0, 1) with 24 random bits. */
static inline float dropout_uniform(int64_t seed, int64_t step, int64_t index) {
  uint64_t z = (uint64_t)index + (uint64_t)seed * 0x9E3779B97F4A7C15ull + (uint64_t)step * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)(z >> 40) * 0x1.0p-24f;
}

#endif
