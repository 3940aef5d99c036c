/* device_cuda: the CUDA device (the Device seam of executor.h) on NVIDIA GPUs, through
 * the vendor table of cuda_api.h.
 *
 * At start-up it loads the driver, NVRTC and cuBLASLt (dlopen; NCCL too for several
 * ranks, whose collectives device_cuda_comm puts on the device's stream), takes the GPU of its
 * ordinal (the local rank modulo the visible GPUs, CUDA_VISIBLE_DEVICES applying), has
 * the program's CUDA C compiled for the GPU's architecture (cuda_kernels.h: in
 * parallel, cached on disk), loads the modules, and chooses a cuBLASLt algorithm once
 * for every GEMM shape of the program. Then: tiers are cuMemAlloc'd device memory;
 * kernels are launched with the compiler's launch sizes, the address of each buffer
 * passed by value (cc_bufs) and the step's scalars in a small device buffer; GEMMs
 * are cuBLASLt matmuls (f32, or TF32 with tf32 set), the row-major GEMMs of the program
 * as the column-major transposes; zeroing, uploads, downloads and copies are
 * asynchronous on the one stream, which `sync` waits for. The host does not see the
 * tiers (no host_view). Reserved tiers (ZeRO's shards, offload's parts, executor.h)
 * are CUDA virtual address space (cuMemAddressReserve), committed in host pages as the
 * compiler counts them, with one physical allocation mapped per granule of the GPU's
 * (cuMemCreate, cuMemMap; 2 MiB on current GPUs) while any of its pages is committed;
 * what is decommitted is no longer used by queued work (executor.h: exec_decommit waits
 * for the device, offload's copy thread for its job's mark).
 *
 * Every vendor failure stops the run with a message naming the call, its file and
 * line and the error string (CUDA_CHECK), as a failed kernel would leave nothing to
 * continue from. */
#ifndef COLOSSALC_RUNTIME_DEVICE_CUDA_H
#define COLOSSALC_RUNTIME_DEVICE_CUDA_H

#include "runtime/executor.h"

#include <stddef.h>

typedef struct CudaOptions {
  int ordinal;              /* which visible GPU: the local rank */
  int local_ranks;          /* ranks on this node: NCCL needs a GPU for each */
  const char *kernel_cache; /* NULL: cuda_kernels.h's default directory */
  int threads;              /* NVRTC compiles in parallel */
  int tf32;                 /* GEMMs on TF32 tensor cores (f32 in and out) */
  int quiet;                /* no line about the GPU and the kernels on stdout */
  int nccl;                 /* load NCCL too: the run has several ranks */
} CudaOptions;

/* The CUDA device for program p, whose kernels' CUDA C is source (units separated by
 * form feeds, colossalc_cuda_source in program/program.h). NULL with one line in err: a library or GPU missing, no CUDA
 * kernels in the program, a kernel that does not compile. */
Device *device_cuda_new(const Prog *p, const char *source, const CudaOptions *o, char *err, size_t errlen);

/* The collectives of host's ranks on this device (comm/nccl.h: NCCL on the device's
 * stream), for a device made with nccl set. Every rank of host calls it; own_host:
 * the Comm frees host. */
Comm *device_cuda_comm(Device *dev, Comm *host, int own_host);

/* A NCCL Comm over the ranks of c (one device_cuda_comm made) whose collectives run on
 * the device's communication stream (Device.fork/join order them with the compute
 * stream): the "overlap" collectives of a program. Every rank of c calls it. */
Comm *device_cuda_overlap_comm(Device *dev, Comm *c);

/* Whether a CUDA GPU is usable here: the driver loads and sees one. */
int device_cuda_available(void);

/* train --device-info: the driver, NVRTC, cuBLASLt and NCCL (each: where it was found
 * and its version, or "not found" and every place looked in) and the GPUs, to f; on a
 * machine with no GPU and no driver too. */
void device_cuda_info(FILE *f);

/* Compiles the program's kernels for arch ("sm_90") into the kernel cache, with no
 * GPU and no driver (NVRTC only): train --compile-kernels. Prints what it did. 0, or
 * -1 with a message. */
int device_cuda_precompile(const Prog *p, const char *source, const char *arch, const CudaOptions *o, char *err,
                           size_t errlen);

#endif
