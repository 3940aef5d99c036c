/* What the emulated NVRTC (nvrtc.c) and the emulated driver (driver.c) agree on: a
 * "CUBIN" of the emulation is EMUL_MAGIC, the length of a shared object (uint64), and
 * the object, built from the generated CUDA C for the host. */
#ifndef COLOSSALC_CUDA_EMUL_H
#define COLOSSALC_CUDA_EMUL_H

#define EMUL_MAGIC "COLOSSALC-HOST-SO"
#define EMUL_MAGIC_LEN 17

#endif
