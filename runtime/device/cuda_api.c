/* cuda_api: the vendor libraries opened with dlopen (cuda_api.h). */
#include "runtime/device/cuda_api.h"

#include "runtime/io/fileio.h"

#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__aarch64__)
#define COLOSSALC_CUDA_TARGET "sbsa-linux"
#define COLOSSALC_MULTIARCH "aarch64-linux-gnu"
#else
#define COLOSSALC_CUDA_TARGET "x86_64-linux"
#define COLOSSALC_MULTIARCH "x86_64-linux-gnu"
#endif

typedef struct Sym {
  void **slot;
  const char *name, *older; /* older: the entry point of drivers before name's (or NULL) */
} Sym;

/* ---- where the libraries are looked for ------------------------------------------------ */

/* One place looked in, for the message when nothing was found: "" holds the places so far. */
static void looked_add(char *looked, size_t len, const char *place) {
  size_t n = strlen(looked);
  if (n + 1 < len && snprintf(looked + n, len - n, "%s%s", n ? ", " : "", place) < 0) looked[n] = 0; /* cut */
}

/* The first of names in dir that is there and opens (its path in path), or NULL. */
static void *open_in(const char *dir, const char *const *names, char *path, size_t pathlen) {
  for (int i = 0; names[i]; i++) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, names[i]) >= (int)sizeof p || access(p, F_OK) != 0) continue;
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (h) {
      if (snprintf(path, pathlen, "%s", p) < 0) path[0] = 0; /* a path too long is cut */
      return h;
    }
  }
  return NULL;
}

typedef void *OpenIn(const char *dir, const char *const *names, char *path, size_t pathlen);

/* open_dir on every directory a glob pattern matches, in reverse order (the newest
 * CUDA first). */
static void *open_glob(const char *pattern, OpenIn *open_dir, const char *const *names, char *path, size_t pathlen) {
  glob_t g;
  void *h = NULL;
  if (glob(pattern, GLOB_ONLYDIR, NULL, &g) != 0) return NULL;
  for (size_t i = g.gl_pathc; !h && i-- > 0;) h = open_dir(g.gl_pathv[i], names, path, pathlen);
  globfree(&g);
  return h;
}

/* The lib folders of a CUDA installation at root. */
static void *open_cuda_root(const char *root, const char *const *names, char *path, size_t pathlen) {
  static const char *const subs[] = {"lib64", "lib", "targets/" COLOSSALC_CUDA_TARGET "/lib", NULL};
  void *h = NULL;
  for (int i = 0; !h && subs[i]; i++) {
    char d[PATH_MAX];
    if (snprintf(d, sizeof d, "%s/%s", root, subs[i]) < (int)sizeof d) h = open_in(d, names, path, pathlen);
  }
  return h;
}

/* NVIDIA's Python wheels under prefix: PREFIX/lib/python3.*\/site-packages/nvidia/PKG/lib. */
static void *open_wheels(const char *prefix, const char *const *names, char *path, size_t pathlen) {
  char pat[PATH_MAX];
  static const char *const kinds[] = {"site-packages", "dist-packages", NULL};
  void *h = NULL;
  for (int i = 0; !h && kinds[i]; i++)
    if (snprintf(pat, sizeof pat, "%s/lib/python3*/%s/nvidia/*/lib", prefix, kinds[i]) < (int)sizeof pat)
      h = open_glob(pat, open_in, names, path, pathlen);
  if (!h && snprintf(pat, sizeof pat, "%s/lib/python3/dist-packages/nvidia/*/lib", prefix) < (int)sizeof pat)
    h = open_glob(pat, open_in, names, path, pathlen); /* Debian's python3 packages */
  return h;
}

/* The first of names found, in this order (cuda_api.h): LD_LIBRARY_PATH's folders,
 * CUDA_HOME and CUDA_PATH, the active Python environment's NVIDIA wheels (VIRTUAL_ENV,
 * CONDA_PREFIX and its lib), the loader's own search (ld.so.cache, the system's
 * folders), /usr/local/cuda and /usr/local/cuda-*, and the user's and the system's
 * Python wheels (~/.local, /usr/local, /usr); toolkit false (the driver): LD_LIBRARY_PATH,
 * the loader and the driver's own places. path: where it was found; looked: every
 * place, for the message when none has it. */
static void *find_lib(const char *const *names, bool toolkit, char *path, size_t pathlen, char *looked,
                      size_t lookedlen) {
  void *h = NULL;
  char one[PATH_MAX + 64];
  looked[0] = path[0] = 0;
  const char *ld = getenv("LD_LIBRARY_PATH");
  if (ld && *ld) {
    char *copy = strdup(ld), *save = NULL;
    for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; !h && d; d = strtok_r(NULL, ":", &save))
      h = open_in(d, names, path, pathlen);
    free(copy);
  }
  snprintf(one, sizeof one, "LD_LIBRARY_PATH (%s)", ld && *ld ? ld : "unset");
  looked_add(looked, lookedlen, one);
  if (toolkit) {
    static const char *const roots[] = {"CUDA_HOME", "CUDA_PATH", NULL};
    for (int i = 0; roots[i]; i++) {
      const char *r = getenv(roots[i]);
      if (!h && r && *r) h = open_cuda_root(r, names, path, pathlen);
      snprintf(one, sizeof one, "%s%s%s%s", roots[i], r && *r ? " (" : " (unset", r && *r ? r : "", ")");
      looked_add(looked, lookedlen, one);
    }
    static const char *const envs[] = {"VIRTUAL_ENV", "CONDA_PREFIX", NULL};
    for (int i = 0; envs[i]; i++) {
      const char *r = getenv(envs[i]);
      if (!h && r && *r) h = open_wheels(r, names, path, pathlen);
      if (!h && r && *r && i == 1) {
        char d[PATH_MAX];
        if (snprintf(d, sizeof d, "%s/lib", r) < (int)sizeof d) h = open_in(d, names, path, pathlen);
      }
      snprintf(one, sizeof one, "%s's wheels (%s)", envs[i], r && *r ? r : "unset");
      looked_add(looked, lookedlen, one);
    }
  }
  for (int i = 0; !h && names[i]; i++)
    if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) && snprintf(path, pathlen, "%s", names[i]) < 0) path[0] = 0;
  looked_add(looked, lookedlen, "the loader's path");
  if (toolkit) {
    if (!h) h = open_cuda_root("/usr/local/cuda", names, path, pathlen);
    if (!h) h = open_glob("/usr/local/cuda-*", open_cuda_root, names, path, pathlen);
    looked_add(looked, lookedlen, "/usr/local/cuda and /usr/local/cuda-*");
    const char *home = getenv("HOME");
    char local[PATH_MAX];
    if (!h && home && snprintf(local, sizeof local, "%s/.local", home) < (int)sizeof local)
      h = open_wheels(local, names, path, pathlen);
    if (!h) h = open_wheels("/usr/local", names, path, pathlen);
    if (!h) h = open_wheels("/usr", names, path, pathlen);
    looked_add(looked, lookedlen, "the wheels in ~/.local, /usr/local and /usr (lib/python3*/*-packages/nvidia/*/lib)");
  } else {
    static const char *const dirs[] = {"/usr/lib/wsl/lib", "/usr/lib64/nvidia",
                                       "/usr/lib/" COLOSSALC_MULTIARCH "/nvidia/current", "/usr/local/cuda/compat",
                                       NULL};
    for (int i = 0; !h && dirs[i]; i++) h = open_in(dirs[i], names, path, pathlen);
    for (int i = 0; dirs[i]; i++) looked_add(looked, lookedlen, dirs[i]);
  }
  if (h) { /* the file the loader chose, where it searched itself */
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0] &&
        snprintf(path, pathlen, "%s", lm->l_name) < 0)
      path[0] = 0;
  }
  return h;
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
  char looked[2048];
  if (!(api->lib[0] = find_lib(names, false, api->path[0], sizeof api->path[0], looked, sizeof looked)))
    return file_set_error(err, errlen,
                          "--device cuda: libcuda.so.1 not found: this machine has no "
                          "NVIDIA driver (run with --device cpu); looked in %s",
                          looked);
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
 * alone under a CUDA 12 driver, then the unversioned name; found as find_lib looks. */
static void *open_toolkit(CudaApi *api, int which, const char *stem, char *looked, size_t lookedlen) {
  char v13[64], v12[64];
  snprintf(v13, sizeof v13, "%s.13", stem), snprintf(v12, sizeof v12, "%s.12", stem);
  const char *const any[] = {v13, v12, stem, NULL}, *const cuda12[] = {v12, stem, NULL};
  return find_lib(driver_major(api) == 12 ? cuda12 : any, true, api->path[which], sizeof api->path[which], looked,
                  lookedlen);
}

static int load_nvrtc(CudaApi *api, char *err, size_t errlen) {
  char looked[2048];
  if (!(api->lib[1] = open_toolkit(api, 1, "libnvrtc.so", looked, sizeof looked)))
    return file_set_error(err, errlen,
                          "--device cuda: NVRTC (libnvrtc.so.13 or .12; .12 for a CUDA 12 driver) not found: "
                          "install the CUDA toolkit's NVRTC (or pip's nvidia-cuda-nvrtc); looked in %s",
                          looked);
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
  char looked[2048];
  if (!(api->lib[2] = open_toolkit(api, 2, "libcublasLt.so", looked, sizeof looked)))
    return file_set_error(err, errlen,
                          "--device cuda: cuBLASLt (libcublasLt.so.13 or .12; .12 for a CUDA 12 driver) not "
                          "found: install the CUDA toolkit's cuBLAS (or pip's nvidia-cublas); looked in %s",
                          looked);
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
  char looked[2048];
  if (!(api->lib[3] = find_lib(names, true, api->path[3], sizeof api->path[3], looked, sizeof looked)))
    return file_set_error(err, errlen,
                          "--device cuda: NCCL (libnccl.so.2) not found: several ranks on "
                          "GPUs communicate through it; install NCCL (or pip's nvidia-nccl); looked in %s",
                          looked);
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
      S(ncclGroupStart, "ncclGroupStart"),
      S(ncclGroupEnd, "ncclGroupEnd"),
  };
  return bind(api->lib[3], "NCCL", syms, (int)(sizeof syms / sizeof *syms), err, errlen);
}

#undef S

int cuda_api_add(CudaApi *api, unsigned which, char *err, size_t errlen) {
  return ((which & CUDA_LIB_DRIVER) && load_driver(api, err, errlen) != 0) ||
                 ((which & CUDA_LIB_NVRTC) && load_nvrtc(api, err, errlen) != 0) ||
                 ((which & CUDA_LIB_CUBLASLT) && load_cublaslt(api, err, errlen) != 0) ||
                 ((which & CUDA_LIB_NCCL) && load_nccl(api, err, errlen) != 0)
             ? -1
             : 0;
}

int cuda_api_load(CudaApi *api, unsigned which, char *err, size_t errlen) {
  memset(api, 0, sizeof *api);
  if (cuda_api_add(api, which, err, errlen) != 0) {
    cuda_api_close(api);
    return -1;
  }
  return 0;
}

/* The libraries stay loaded: the driver is not meant to be unloaded while the
 * process runs, and what they keep (NVRTC's caches) stays theirs. */
void cuda_api_close(CudaApi *api) { memset(api, 0, sizeof *api); }
