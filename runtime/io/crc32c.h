/* crc32c: CRC-32C (Castagnoli, the polynomial 0x1EDC6F41 reflected: 0x82F63B78), the
 * checksum of every tensor block train writes (safetensors.h). The SSE4.2 instruction
 * computes it where the CPU has it (checked at run time), a table otherwise; both give
 * the same value: crc32c("123456789") = 0xE3069283.
 */
#ifndef COLOSSALC_RUNTIME_CRC32C_H
#define COLOSSALC_RUNTIME_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of buf[0..len) continuing from crc (0 to start). */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

#endif
