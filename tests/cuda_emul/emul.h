/* What the emulated NVRTC (nvrtc.c) and the emulated driver (driver.c) agree on: a
 * "CUBIN" of the emulation is EMUL_MAGIC, the length of a shared object (uint64), and
 * the object, built from the generated CUDA C for the host. */
#ifndef COLOSSALC_CUDA_EMUL_H
#define COLOSSALC_CUDA_EMUL_H

#define EMUL_MAGIC "COLOSSALC-HOST-SO"
#define EMUL_MAGIC_LEN 17

/* The emulated driver's streams (driver.c) for the other emulated libraries, which find
 * these in the loaded libcuda.so.1 (dlopen with RTLD_NOLOAD): queue fn(arg) on a stream
 * (arg malloc'd, freed once fn ran), and wait for everything queued on it. 0, or -1. */
typedef int EmulEnqueueFn(void *stream, void (*fn)(void *), void *arg);
typedef int EmulSyncFn(void *stream);
int colossalc_emul_enqueue(void *stream, void (*fn)(void *), void *arg);
int colossalc_emul_sync(void *stream);

#endif
