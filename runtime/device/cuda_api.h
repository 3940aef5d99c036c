/* cuda_api: everything the CUDA device (device/cuda.c) and its communication
 * (comm/nccl.c) ask of the vendor libraries, as one table of functions: the driver
 * (libcuda.so.1), NVRTC, cuBLASLt and, for runs of several ranks, NCCL. `train`
 * links none of them: cuda_api_load opens them with dlopen when a GPU run is asked
 * for, so the same executable starts on machines without them and says in one line
 * what is missing.
 *
 * The table is also the seam the tests use: tests/cuda_emul builds host emulations of
 * the three libraries under their sonames (the generated CUDA C compiled for the host
 * behind a thread-per-GPU-thread shim, GEMMs on OpenBLAS) and puts them first on the
 * loader's path, so the real `train` runs its CUDA device on a machine without a GPU.
 * The emulation exists for tests only; nothing in `train` selects it.
 *
 * Types come from the toolkit's headers (cuda.h, nvrtc.h, cublasLt.h, nccl.h), needed at
 * build time only; member names drop the vendor prefix (the headers #define
 * cuMemAlloc and friends to versioned names). */
#ifndef COLOSSALC_RUNTIME_CUDA_API_H
#define COLOSSALC_RUNTIME_CUDA_API_H

#include <cublasLt.h>
#include <cuda.h>
#include <nccl.h>
#include <nvrtc.h>
#include <stddef.h>

typedef struct CudaApi {
  /* driver */
  CUresult (*Init)(unsigned flags);
  CUresult (*DriverGetVersion)(int *version);
  CUresult (*GetErrorString)(CUresult r, const char **s);
  CUresult (*DeviceGetCount)(int *n);
  CUresult (*DeviceGet)(CUdevice *d, int ordinal);
  CUresult (*DeviceGetAttribute)(int *v, CUdevice_attribute a, CUdevice d);
  CUresult (*DeviceGetName)(char *name, int len, CUdevice d);
  CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice d);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *c, CUdevice d);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice d);
  CUresult (*CtxSetCurrent)(CUcontext c);
  CUresult (*MemGetInfo)(size_t *free_bytes, size_t *total);
  CUresult (*MemAlloc)(CUdeviceptr *p, size_t bytes);
  CUresult (*MemHostAlloc)(void **p, size_t bytes, unsigned flags);
  CUresult (*MemFreeHost)(void *p);
  CUresult (*MemHostRegister)(void *p, size_t bytes, unsigned flags);
  CUresult (*MemHostUnregister)(void *p);
  CUresult (*MemFree)(CUdeviceptr p);
  CUresult (*MemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
  CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
  CUresult (*MemsetD8Async)(CUdeviceptr p, unsigned char v, size_t n, CUstream s);
  CUresult (*ModuleLoadData)(CUmodule *m, const void *image);
  CUresult (*ModuleUnload)(CUmodule m);
  CUresult (*ModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
  CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           unsigned shared, CUstream s, void **params, void **extra);
  CUresult (*StreamCreate)(CUstream *s, unsigned flags);
  CUresult (*StreamDestroy)(CUstream s);
  CUresult (*StreamSynchronize)(CUstream s);
  CUresult (*StreamWaitEvent)(CUstream s, CUevent e, unsigned flags);
  CUresult (*MemAddressReserve)(CUdeviceptr *p, size_t bytes, size_t align, CUdeviceptr addr, unsigned long long flags);
  CUresult (*MemAddressFree)(CUdeviceptr p, size_t bytes);
  CUresult (*MemCreate)(CUmemGenericAllocationHandle *h, size_t bytes, const CUmemAllocationProp *prop,
                        unsigned long long flags);
  CUresult (*MemRelease)(CUmemGenericAllocationHandle h);
  CUresult (*MemMap)(CUdeviceptr p, size_t bytes, size_t offset, CUmemGenericAllocationHandle h,
                     unsigned long long flags);
  CUresult (*MemUnmap)(CUdeviceptr p, size_t bytes);
  CUresult (*MemSetAccess)(CUdeviceptr p, size_t bytes, const CUmemAccessDesc *desc, size_t count);
  CUresult (*MemGetAllocationGranularity)(size_t *g, const CUmemAllocationProp *prop,
                                          CUmemAllocationGranularity_flags option);
  CUresult (*EventCreate)(CUevent *e, unsigned flags);
  CUresult (*EventDestroy)(CUevent e);
  CUresult (*EventRecord)(CUevent e, CUstream s);
  CUresult (*EventQuery)(CUevent e);
  CUresult (*EventSynchronize)(CUevent e);
  CUresult (*EventElapsedTime)(float *ms, CUevent start, CUevent end);
  /* NVRTC */
  nvrtcResult (*nvrtcVersion)(int *major, int *minor);
  const char *(*nvrtcGetErrorString)(nvrtcResult r);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *p, const char *src, const char *name, int nheaders,
                                    const char *const *headers, const char *const *include_names);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram p, int nopts, const char *const *opts);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram p, size_t *n);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram p, char *log);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram p, size_t *n);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram p, char *cubin);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *p);
  /* cuBLASLt */
  cublasStatus_t (*LtCreate)(cublasLtHandle_t *h);
  cublasStatus_t (*LtDestroy)(cublasLtHandle_t h);
  cublasStatus_t (*LtMatmulDescCreate)(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t scale);
  cublasStatus_t (*LtMatmulDescDestroy)(cublasLtMatmulDesc_t d);
  cublasStatus_t (*LtMatmulDescSetAttribute)(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                             size_t n);
  cublasStatus_t (*LtMatrixLayoutCreate)(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
                                         int64_t ld);
  cublasStatus_t (*LtMatrixLayoutDestroy)(cublasLtMatrixLayout_t l);
  cublasStatus_t (*LtMatrixLayoutSetAttribute)(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                               const void *buf, size_t n);
  cublasStatus_t (*LtMatmulPreferenceCreate)(cublasLtMatmulPreference_t *p);
  cublasStatus_t (*LtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t p);
  cublasStatus_t (*LtMatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                                                   const void *buf, size_t n);
  cublasStatus_t (*LtMatmulAlgoGetHeuristic)(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                             cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                             cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                             cublasLtMatmulHeuristicResult_t *results, int *returned);
  cublasStatus_t (*LtMatmul)(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *a,
                             cublasLtMatrixLayout_t la, const void *b, cublasLtMatrixLayout_t lb, const void *beta,
                             const void *c, cublasLtMatrixLayout_t lc, void *dst, cublasLtMatrixLayout_t ld,
                             const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes, CUstream s);
  /* NCCL */
  ncclResult_t (*ncclGetVersion)(int *version);
  const char *(*ncclGetErrorString)(ncclResult_t r);
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *id);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t *c, int nranks, ncclUniqueId id, int rank);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t c);
  ncclResult_t (*ncclAllReduce)(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                ncclComm_t c, cudaStream_t s);
  ncclResult_t (*ncclReduce)(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                             ncclComm_t c, cudaStream_t s);
  ncclResult_t (*ncclReduceScatter)(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                    ncclComm_t c, cudaStream_t s);
  ncclResult_t (*ncclAllGather)(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c,
                                cudaStream_t s);
  ncclResult_t (*ncclBroadcast)(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                                cudaStream_t s);
  ncclResult_t (*ncclSend)(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s);
  ncclResult_t (*ncclRecv)(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s);
  ncclResult_t (*ncclGroupStart)(void);
  ncclResult_t (*ncclGroupEnd)(void);
  void *lib[4];       /* the dlopen handles: driver, NVRTC, cuBLASLt, NCCL */
  char path[4][1024]; /* where each was found (the loader's choice: the file it opened) */
} CudaApi;

/* Which libraries cuda_api_load opens. The NVRTC-only table compiles kernels without a
 * driver or a GPU (train --compile-kernels); ALL is what one rank needs, NCCL is added
 * for several. */
enum { CUDA_LIB_DRIVER = 1, CUDA_LIB_NVRTC = 2, CUDA_LIB_CUBLASLT = 4, CUDA_LIB_ALL = 7, CUDA_LIB_NCCL = 8 };

/* Opens the libraries of `which` and fills the table. 0, or -1 with one line in err
 * naming the library that is missing (and what that means, and every place looked in)
 * or the symbol it lacks. A toolkit library (NVRTC, cuBLASLt, NCCL) is looked for in
 * LD_LIBRARY_PATH's folders, CUDA_HOME and CUDA_PATH (lib64, lib, targets/ARCH/lib), the
 * active Python environment's NVIDIA wheels (VIRTUAL_ENV, CONDA_PREFIX:
 * lib/python3.X/site-packages/nvidia/PKG/lib; CONDA_PREFIX/lib), the loader's own path,
 * /usr/local/cuda and /usr/local/cuda-* (the newest first), then the wheels of ~/.local,
 * /usr/local and /usr; the driver in LD_LIBRARY_PATH, the loader's path and where
 * drivers put it (WSL, /usr/lib64/nvidia, Debian's nvidia/current, CUDA's compat). */
int cuda_api_load(CudaApi *api, unsigned which, char *err, size_t errlen);
/* The same into a table already (partly) loaded, which a failure leaves as it was but
 * for the library that failed (train --device-info: each library on its own). */
int cuda_api_add(CudaApi *api, unsigned which, char *err, size_t errlen);
/* Forgets the table; the libraries stay loaded until the process ends. */
void cuda_api_close(CudaApi *api);

#endif
