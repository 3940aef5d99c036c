/* cuda_kernels: the program's CUDA C compiled by NVRTC for one GPU architecture, in
 * parallel, through an on-disk cache.
 *
 * The source (colossalc_cuda_source, codegen/cuda.h cuda_emit_units) is the prelude
 * and one unit per kernel, separated by form feeds. Kernels are compiled in
 * translation units of CUDA_UNIT_KERNELS consecutive kernels, each with the prelude, on
 * several threads; the grouping depends on the program only, so every machine makes
 * the same units. Each unit's binary (CUBIN) is cached in DIR/<key>.cubin, the key a
 * hash of what determines it: the unit's source, the architecture, NVRTC's version and
 * the options. An entry holds its key text and a checksum of the binary: an entry
 * that does not match (damaged, truncated, another key that hashed alike) is compiled
 * again and rewritten, atomically. A failed compile reports NVRTC's log and the unit's
 * source with line numbers.
 *
 * The cache directory: --kernel-cache DIR, else $XDG_CACHE_HOME/colossalc, else
 * $HOME/.cache/colossalc; one that cannot be created means compiling every time. */
#ifndef COLOSSALC_RUNTIME_CUDA_KERNELS_H
#define COLOSSALC_RUNTIME_CUDA_KERNELS_H

#include "runtime/device/cuda_api.h"

#include <stddef.h>

enum { CUDA_UNIT_KERNELS = 8 };

typedef struct CudaImage {
  char *data; /* CUBIN */
  size_t size;
} CudaImage;

typedef struct CudaBuild {
  CudaImage *unit; /* [nunits] */
  int nunits;
  int cached;           /* units found in the cache */
  int rebuilt;          /* of the compiled ones, entries that were there but damaged */
  double compile_s;     /* wall time of the compiles (0 when all were cached) */
  char cache_dir[1024]; /* "" when not caching */
} CudaBuild;

/* The cache directory for dir (NULL: the default above) into out; 0, or -1 when none
 * can be used (out is then ""). */
int cuda_cache_dir(const char *dir, char *out, size_t outlen);

/* Compiles (or finds cached) every unit of source for arch ("sm_90"); kernel k is in
 * unit k / CUDA_UNIT_KERNELS. nkernels must be the number of kernel units of source.
 * 0, or -1 with the message in err (NVRTC's log and the numbered source on a compile
 * error, on stderr). */
int cuda_kernels_build(const CudaApi *api, const char *source, int nkernels, const char *arch, const char *cache_dir,
                       int threads, CudaBuild *b, char *err, size_t errlen);
void cuda_build_free(CudaBuild *b);

#endif
