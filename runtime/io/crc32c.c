/* crc32c: the table version is slicing by 8 (eight 256-entry tables, eight bytes a
 * round); the SSE4.2 version feeds the crc32 instruction eight bytes at a time. */
#include "runtime/io/crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[8][256];
static int crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
    crc_table[0][i] = c;
  }
  for (int t = 1; t < 8; t++)
    for (int i = 0; i < 256; i++)
      crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
  __builtin_cpu_init();
  crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t len) {
  while (len >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    w ^= c; /* little-endian: the low byte first */
    c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^ crc_table[5][(w >> 16) & 0xff] ^
        crc_table[4][(w >> 24) & 0xff] ^ crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
        crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
    p += 8, len -= 8;
  }
  while (len--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *p, size_t len) {
  uint64_t c64 = c;
  while (len >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
    p += 8, len -= 8;
  }
  c = (uint32_t)c64;
  while (len--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t len) {
  pthread_once(&crc_once, crc_init);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (crc_hw) return ~crc_sse42(c, buf, len);
#endif
  return ~crc_sw(c, buf, len);
}
