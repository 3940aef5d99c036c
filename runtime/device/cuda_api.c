/* cuda_api: the vendor libraries opened with dlopen (cuda_api.h). */
#include "runtime/device/cuda_api.h"

#include "runtime/io/fileio.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef struct Sym {
  void **slot;
  const char *name, *older; /* older: the entry point of drivers before name's (or NULL) */
} Sym;

/* The first of names that opens, or NULL. */
static void *open_first(const char *const *names) {
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

static int bind(void *lib, const char *libname, const Sym *syms, int n, char *err, size_t errlen) {
  for (int i = 0; i < n; i++)
    if (!(*syms[i].slot = dlsym(lib, syms[i].name)) && !(syms[i].older && (*syms[i].slot = dlsym(lib, syms[i].older))))
      return file_set_error(err, errlen, "--device cuda: %s has no %s (too old a version?)", libname, syms[i].name);
  return 0;
}

#define S(field, name) \
  { (void **)&api->field, name, NULL }
#define S_OR(field, name, older) \
  { (void **)&api->field, name, older }

static int load_driver(CudaApi *api, char *err, size_t errlen) {
  static const char *const names[] = {"libcuda.so.1", NULL};
  if (!(api->lib[0] = open_first(names)))
    return file_set_error(err, errlen,
                          "--device cuda: libcuda.so.1 not found: this machine has no "
                          "NVIDIA driver (run with --device cpu)");
  const Sym syms[] = {
      S(Init, "cuInit"),
      S(DriverGetVersion, "cuDriverGetVersion"),
      S(GetErrorString, "cuGetErrorString"),
      S(DeviceGetCount, "cuDeviceGetCount"),
      S(DeviceGet, "cuDeviceGet"),
      S(DeviceGetAttribute, "cuDeviceGetAttribute"),
      S(DeviceGetName, "cuDeviceGetName"),
      S(DeviceTotalMem, "cuDeviceTotalMem_v2"),
      S(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
      S(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
      S(CtxSetCurrent, "cuCtxSetCurrent"),
      S(MemGetInfo, "cuMemGetInfo_v2"),
      S(MemAlloc, "cuMemAlloc_v2"),
      S(MemFree, "cuMemFree_v2"),
      S(MemHostAlloc, "cuMemHostAlloc"),
      S(MemFreeHost, "cuMemFreeHost"),
      S(MemHostRegister, "cuMemHostRegister_v2"),
      S(MemHostUnregister, "cuMemHostUnregister"),
      S(MemcpyDtoH, "cuMemcpyDtoH_v2"),
      S(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
      S(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
      S(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
      S(MemsetD8Async, "cuMemsetD8Async"),
      S(ModuleLoadData, "cuModuleLoadData"),
      S(ModuleUnload, "cuModuleUnload"),
      S(ModuleGetFunction, "cuModuleGetFunction"),
      S(LaunchKernel, "cuLaunchKernel"),
      S(StreamCreate, "cuStreamCreate"),
      S(StreamDestroy, "cuStreamDestroy_v2"),
      S(StreamSynchronize, "cuStreamSynchronize"),
      S(StreamWaitEvent, "cuStreamWaitEvent"),
      S(EventCreate, "cuEventCreate"),
      S(EventDestroy, "cuEventDestroy_v2"),
      S(EventRecord, "cuEventRecord"),
      S(EventQuery, "cuEventQuery"),
      S(EventSynchronize, "cuEventSynchronize"),
      S_OR(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"), /* _v2: CUDA 12.8 drivers on */
      S(MemAddressReserve, "cuMemAddressReserve"),
      S(MemAddressFree, "cuMemAddressFree"),
      S(MemCreate, "cuMemCreate"),
      S(MemRelease, "cuMemRelease"),
      S(MemMap, "cuMemMap"),
      S(MemUnmap, "cuMemUnmap"),
      S(MemSetAccess, "cuMemSetAccess"),
      S(MemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
  };
  return bind(api->lib[0], "libcuda.so.1", syms, (int)(sizeof syms / sizeof *syms), err, errlen);
}

/* The CUDA major version of the driver loaded (12 for 12.x), 0 when unknown. A toolkit
 * library of a later major version than the driver's does not run on it (CUBINs of
 * NVRTC 13 need a CUDA 13 driver), so a CUDA 12 driver gets the .12 libraries only. */
static int driver_major(const CudaApi *api) {
  int v = 0;
  return api->DriverGetVersion && api->DriverGetVersion(&v) == CUDA_SUCCESS ? v / 1000 : 0;
}

/* The toolkit library `stem` (libnvrtc.so, ...) for the driver: .13 then .12, or .12
 * alone under a CUDA 12 driver, then the unversioned name. */
static void *open_toolkit(const CudaApi *api, const char *stem) {
  char v13[64], v12[64];
  snprintf(v13, sizeof v13, "%s.13", stem), snprintf(v12, sizeof v12, "%s.12", stem);
  const char *const any[] = {v13, v12, stem, NULL}, *const cuda12[] = {v12, stem, NULL};
  return open_first(driver_major(api) == 12 ? cuda12 : any);
}

static int load_nvrtc(CudaApi *api, char *err, size_t errlen) {
  if (!(api->lib[1] = open_toolkit(api, "libnvrtc.so")))
    return file_set_error(err, errlen,
                          "--device cuda: NVRTC (libnvrtc.so.13 or .12; .12 for a CUDA 12 driver) not found: "
                          "install the CUDA toolkit's NVRTC or put its lib64 on LD_LIBRARY_PATH");
  const Sym syms[] = {
      S(nvrtcVersion, "nvrtcVersion"),
      S(nvrtcGetErrorString, "nvrtcGetErrorString"),
      S(nvrtcCreateProgram, "nvrtcCreateProgram"),
      S(nvrtcCompileProgram, "nvrtcCompileProgram"),
      S(nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"),
      S(nvrtcGetProgramLog, "nvrtcGetProgramLog"),
      S(nvrtcGetCUBINSize, "nvrtcGetCUBINSize"),
      S(nvrtcGetCUBIN, "nvrtcGetCUBIN"),
      S(nvrtcDestroyProgram, "nvrtcDestroyProgram"),
  };
  return bind(api->lib[1], "NVRTC", syms, (int)(sizeof syms / sizeof *syms), err, errlen);
}

static int load_cublaslt(CudaApi *api, char *err, size_t errlen) {
  if (!(api->lib[2] = open_toolkit(api, "libcublasLt.so")))
    return file_set_error(err, errlen,
                          "--device cuda: cuBLASLt (libcublasLt.so.13 or .12; .12 for a CUDA 12 driver) not "
                          "found: install the CUDA toolkit's cuBLAS or put its lib64 on LD_LIBRARY_PATH");
  const Sym syms[] = {
      S(LtCreate, "cublasLtCreate"),
      S(LtDestroy, "cublasLtDestroy"),
      S(LtMatmulDescCreate, "cublasLtMatmulDescCreate"),
      S(LtMatmulDescDestroy, "cublasLtMatmulDescDestroy"),
      S(LtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute"),
      S(LtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate"),
      S(LtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy"),
      S(LtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute"),
      S(LtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate"),
      S(LtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy"),
      S(LtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute"),
      S(LtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic"),
      S(LtMatmul, "cublasLtMatmul"),
  };
  return bind(api->lib[2], "cuBLASLt", syms, (int)(sizeof syms / sizeof *syms), err, errlen);
}

static int load_nccl(CudaApi *api, char *err, size_t errlen) {
  static const char *const names[] = {"libnccl.so.2", "libnccl.so", NULL};
  if (!(api->lib[3] = open_first(names)))
    return file_set_error(err, errlen,
                          "--device cuda: NCCL (libnccl.so.2) not found: several ranks on "
                          "GPUs communicate through it; install NCCL or put its lib on LD_LIBRARY_PATH");
  const Sym syms[] = {
      S(ncclGetVersion, "ncclGetVersion"),
      S(ncclGetErrorString, "ncclGetErrorString"),
      S(ncclGetUniqueId, "ncclGetUniqueId"),
      S(ncclCommInitRank, "ncclCommInitRank"),
      S(ncclCommDestroy, "ncclCommDestroy"),
      S(ncclAllReduce, "ncclAllReduce"),
      S(ncclReduce, "ncclReduce"),
      S(ncclReduceScatter, "ncclReduceScatter"),
      S(ncclAllGather, "ncclAllGather"),
      S(ncclBroadcast, "ncclBroadcast"),
      S(ncclSend, "ncclSend"),
      S(ncclRecv, "ncclRecv"),
  };
  return bind(api->lib[3], "NCCL", syms, (int)(sizeof syms / sizeof *syms), err, errlen);
}

#undef S

int cuda_api_load(CudaApi *api, unsigned which, char *err, size_t errlen) {
  memset(api, 0, sizeof *api);
  if (((which & CUDA_LIB_DRIVER) && load_driver(api, err, errlen) != 0) ||
      ((which & CUDA_LIB_NVRTC) && load_nvrtc(api, err, errlen) != 0) ||
      ((which & CUDA_LIB_CUBLASLT) && load_cublaslt(api, err, errlen) != 0) ||
      ((which & CUDA_LIB_NCCL) && load_nccl(api, err, errlen) != 0)) {
    cuda_api_close(api);
    return -1;
  }
  return 0;
}

/* The libraries stay loaded: the driver is not meant to be unloaded while the
 * process runs, and what they keep (NVRTC's caches) stays theirs. */
void cuda_api_close(CudaApi *api) { memset(api, 0, sizeof *api); }
