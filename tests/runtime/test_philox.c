/* test_philox: checks runtime/philox against the Random123 known-answer vectors,
 * against values of the documented (seed, name, index) mapping computed by the
 * independent Python reference tests/runtime/philox_ref.py, that a slice filled
 * on its own equals the same slice of a whole fill, and the moments of the
 * uniform and normal samplers over 10^6 draws.
 */
#include "runtime/philox.h"

#include "rt_test.h"

#include <math.h>
#include <stdint.h>

static void test_known_answers(void) {
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
    uint32_t ctr[4], out[4];
    memcpy(ctr, kat[i].ctr, sizeof ctr);
    philox4x32(ctr, kat[i].key, out);
    CHECK(memcmp(out, kat[i].out, sizeof out) == 0);
    CHECK(memcmp(ctr, kat[i].ctr, sizeof ctr) == 0); /* counter left alone */
  }
}

static uint32_t f32_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

/* Values printed by philox_ref.py (pure Python, written from philox.h's comment). */
static void test_documented_mapping(void) {
  static const struct {
    uint64_t seed;
    const char *name;
    uint64_t index;
    uint32_t key0, key1, uniform_bits, normal_bits;
  } ref[] = {
      {0ull, "wte", 0ull, 0xb4606c1d, 0x94f685a0, 0x3ebf3a5au, 0x3f0d81eau},
      {1234ull, "h.0.attn.c_attn.weight", 7ull, 0xc26c8ab0, 0xc179e6d1, 0x3f1d0d7bu, 0xbf36feb5u},
      {42ull, "", 8589934592ull, 0x6e983482, 0xe400267a, 0x3f2edf7fu, 0xbe040e2du},
      {18446744073709551615ull, "lm_head", 4294967295ull, 0xa2320a41, 0xf60aada1, 0x3d8ea5f8u, 0xbecff03eu},
  };
  CHECK(philox_hash_name("") == 0xcbf29ce484222325ull);
  CHECK(philox_hash_name("a") == 0xaf63dc4c8601ec8cull);
  CHECK(philox_splitmix64(0) == 0xe220a8397b1dcdafull);
  for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
    uint32_t key[2];
    philox_key_derive(ref[i].seed, ref[i].name, key);
    CHECK(key[0] == ref[i].key0 && key[1] == ref[i].key1);
    CHECK(f32_bits(philox_uniform(key, ref[i].index)) == ref[i].uniform_bits);
    CHECK(f32_bits(philox_normal(key, ref[i].index)) == ref[i].normal_bits);
  }
}

static void test_keys_differ(void) {
  uint32_t a[2], b[2], c[2], d[2];
  philox_key_derive(1, "wte", a);
  philox_key_derive(1, "wpe", b);
  philox_key_derive(2, "wte", c);
  philox_key_derive(1, "wte", d);
  CHECK(memcmp(a, b, sizeof a) != 0);
  CHECK(memcmp(a, c, sizeof a) != 0);
  CHECK(memcmp(a, d, sizeof a) == 0);
}

/* Filling [0,n) at once equals filling [0,k) and [k,n) separately, also across
 * the 2^32 boundary of the element index. */
static void test_slices(uint64_t base) {
  enum { N = 1000, K = 377 };
  static float whole[N], part[N];
  philox_fill_normal(whole, N, base, 7, "h.3.mlp.c_fc.weight", 0.0f, 0.02f);
  philox_fill_normal(part, K, base, 7, "h.3.mlp.c_fc.weight", 0.0f, 0.02f);
  philox_fill_normal(part + K, N - K, base + K, 7, "h.3.mlp.c_fc.weight", 0.0f, 0.02f);
  CHECK(memcmp(whole, part, sizeof whole) == 0);
  philox_fill_uniform(whole, N, base, 7, "wpe", -0.5f, 0.5f);
  for (int r = 0; r < 4; r++) /* four "ranks" of 250 */
    philox_fill_uniform(part + r * (N / 4), N / 4, base + r * (N / 4), 7, "wpe", -0.5f, 0.5f);
  CHECK(memcmp(whole, part, sizeof whole) == 0);
  uint32_t key[2];
  philox_key_derive(7, "wpe", key);
  CHECK(whole[123] == -0.5f + 1.0f * philox_uniform(key, base + 123));
}

static void test_uniform_moments(void) {
  uint32_t key[2];
  philox_key_derive(2024, "uniform", key);
  const int n = 1000000;
  double s = 0, s2 = 0;
  int inside = 1;
  for (int i = 0; i < n; i++) {
    double u = philox_uniform(key, (uint64_t)i);
    inside &= u > 0.0 && u < 1.0;
    s += u, s2 += u * u;
  }
  double mean = s / n, var = s2 / n - mean * mean;
  printf("uniform: mean %.5f (0.5), var %.5f (%.5f)\n", mean, var, 1.0 / 12);
  CHECK(inside);
  CHECK(fabs(mean - 0.5) < 0.002);
  CHECK(fabs(var - 1.0 / 12) < 0.001);
}

static void test_normal_moments(void) {
  const int n = 1000000;
  float *x = malloc(n * sizeof *x);
  philox_fill_normal(x, n, 0, 2024, "normal", 1.5f, 2.0f);
  double s = 0, s2 = 0, s4 = 0;
  int finite = 1;
  for (int i = 0; i < n; i++) {
    double z = (x[i] - 1.5) / 2.0;
    finite &= isfinite(x[i]) != 0;
    s += z, s2 += z * z, s4 += z * z * z * z;
  }
  double mean = s / n, sd = sqrt(s2 / n - mean * mean), kurt = s4 / n;
  printf("normal: mean %.5f (0), std %.5f (1), 4th moment %.4f (3)\n", mean, sd, kurt);
  CHECK(finite);
  CHECK(fabs(mean) < 0.005); /* standard error 0.001 */
  CHECK(fabs(sd - 1.0) < 0.005);
  CHECK(fabs(kurt - 3.0) < 0.05);
  free(x);
}

int main(void) {
  test_known_answers();
  test_documented_mapping();
  test_keys_differ();
  test_slices(0);
  test_slices((1ull << 32) - 300);
  test_uniform_moments();
  test_normal_moments();
  return rt_finish("test_philox");
}
