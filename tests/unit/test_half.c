/* The kernel form's 16-bit storage conversions (kx_to_f32, kx_from_f32 of
 * codegen/kernel.h, which both emitters reproduce bit for bit: tests/codegen) against
 * references written another way: f16 against the compiler's _Float16 (IEEE binary16,
 * round to nearest even), both ways; bf16's rounding against the nearer of the two
 * bf16 neighbours computed in double, ties to the even one; every 16-bit pattern
 * widened, and f32 patterns: every exponent with tie, near-tie and random mantissas. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codegen/kernel.h"

static int failures;

static float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t f_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static uint16_t f16_ref(float f) {
  _Float16 h = (_Float16)f;
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}

/* The bf16 nearest f: of the two neighbours (f's bits with the low 16 cut, and the next
 * one up in magnitude), the one nearer in exact arithmetic, the even one on a tie. */
static uint16_t bf16_ref(float f) {
  uint32_t u = f_bits(f);
  if (isnan(f)) return (uint16_t)(u >> 16 | 0x40);
  if (isinf(f)) return (uint16_t)(u >> 16);
  uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  double dl = fabs((double)f - (double)bits_f(lo));
  double dh = (hi & 0x7f800000u) == 0x7f800000u ? ldexp(1.0, 128) - fabs((double)f) /* to infinity: 2^128 */
                                                : fabs((double)bits_f(hi) - (double)f);
  if (dl < dh || (dl == dh && !(lo >> 16 & 1))) return (uint16_t)(lo >> 16);
  return (uint16_t)(hi >> 16);
}

static void check_from(uint32_t u) {
  float f = bits_f(u);
  uint16_t h = kx_from_f32(DT_F16, f), hr = f16_ref(f), b = kx_from_f32(DT_BF16, f), br = bf16_ref(f);
  int nan_h = (h & 0x7c00) == 0x7c00 && (h & 0x3ff), nan_b = (b & 0x7f80) == 0x7f80 && (b & 0x7f);
  int ok_h = isnan(f) ? nan_h : h == hr, ok_b = isnan(f) ? nan_b : b == br;
  if ((!ok_h || !ok_b) && failures++ < 10)
    fprintf(stderr, "f32 %08x (%a): f16 %04x want %04x, bf16 %04x want %04x\n", u, (double)f, h, hr, b, br);
}

int main(void) {
  for (uint32_t h = 0; h < 65536; h++) { /* widening: exact */
    _Float16 x;
    uint16_t b = (uint16_t)h;
    memcpy(&x, &b, 2);
    float want = (float)x, got = kx_to_f32(DT_F16, b), bw = bits_f(h << 16), bg = kx_to_f32(DT_BF16, b);
    int ok =
        (isnan(want) ? isnan(got) : f_bits(want) == f_bits(got)) && (isnan(bw) ? isnan(bg) : f_bits(bw) == f_bits(bg));
    if (!ok && failures++ < 10)
      fprintf(stderr, "16-bit %04x: f16 %a want %a, bf16 %a want %a\n", h, (double)got, (double)want, (double)bg,
              (double)bw);
  }
  uint64_t rng = 88172645463325252ull;
  for (uint32_t e = 0; e < 256; e++)
    for (uint32_t s = 0; s < 2; s++) {
      uint32_t base = s << 31 | e << 23;
      /* ties and their neighbours at bf16's cut (bit 15) and at each f16 cut (13 .. 23) */
      for (int cut = 12; cut <= 23; cut++)
        for (uint32_t m = 0; m < 4; m++) {
          uint32_t tie = (m << (cut + 1) | 1u << cut) & 0x7fffffu;
          for (int d = -1; d <= 1; d++) check_from(base | ((tie + (uint32_t)d) & 0x7fffffu));
        }
      for (uint32_t m = 0; m < 4; m++)
        for (int d = -1; d <= 1; d++) check_from(base | ((m << 16 | 0x8000u) + (uint32_t)d));
      for (int i = 0; i < 4096; i++) { /* random mantissas */
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        check_from(base | (uint32_t)(rng & 0x7fffffu));
      }
    }
  printf("%s\n", failures ? "FAIL" : "16-bit conversions: all match");
  return failures != 0;
}
