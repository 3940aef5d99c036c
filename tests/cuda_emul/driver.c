/* A host emulation of the CUDA driver (libcuda.so.1), for tests only: the entry points
 * runtime/cuda_api.c opens, so that the real `train` runs its CUDA device on a machine
 * without a GPU (README in tests/cuda_emul/run_equal.sh).
 *
 * One emulated GPU, compute capability 9.0. Device memory is host memory (a
 * CUdeviceptr is the address). A module is a shared object that the emulated NVRTC
 * (nvrtc.c) built from the generated CUDA C behind the thread-per-GPU-thread shim
 * (host_shim.h); its image is EMUL_MAGIC followed by the object's bytes, which
 * cuModuleLoadData writes to a scratch file and opens. cuLaunchKernel runs the kernel
 * through the module's cc_host_launch with at most EMUL_BLOCKS blocks of 32 threads:
 * the generated kernels are grid-stride loops over their range and need blocks of a
 * power of two of at least 32, so the result is the GPU's at any launch size. Streams
 * run their work when it is enqueued, in order. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/cuda_emul/emul.h"

enum { EMUL_BLOCKS = 1 };

typedef int HostLaunch(void *kernel, unsigned grid, unsigned block, char *const *bufs, long long n,
                       const float *scalars);

struct CUfunc_st {
    void *fn;
    HostLaunch *launch;
    struct CUfunc_st *next; /* the module's functions, freed with it */
};
struct CUmod_st {
    void *so;
    char path[256];
    struct CUfunc_st *funcs;
};

static int ctx_dummy, stream_dummy;

CUresult cuInit(unsigned flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }

CUresult cuGetErrorString(CUresult r, const char **s)
{
    *s = r == CUDA_SUCCESS ? "no error" : r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "emulated CUDA error";
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = ordinal; return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }

CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)d;
    /* no SMs nor clock to speak of: the device's peak FLOP/s (and so the MFU) is unknown */
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    (void)d;
    snprintf(name, (size_t)len, "colossalc host emulation");
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) { (void)d; *bytes = (size_t)8 << 30; return CUDA_SUCCESS; }
CUresult cuMemGetInfo(size_t *free_bytes, size_t *total) { *free_bytes = *total = (size_t)8 << 30; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = (CUcontext)&ctx_dummy; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease(CUdevice d) { (void)d; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c) { return c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes)
{
    void *m = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(m, 0xa5, bytes);   /* not zero: the runtime must zero what it needs zeroed */
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr p) { free((void *)(uintptr_t)p); return CUDA_SUCCESS; }

static void *host(CUdeviceptr p) { return (void *)(uintptr_t)p; }

CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    (void)s;
    memcpy(host(dst), src, n);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    (void)s;
    memcpy(dst, host(src), n);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    (void)s;
    memmove(host(dst), host(src), n);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s)
{
    (void)s;
    memset(host(p), v, n);
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *s, unsigned flags) { (void)flags; *s = (CUstream)&stream_dummy; return CUDA_SUCCESS; }
CUresult cuStreamDestroy(CUstream s) { (void)s; return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }

/* Events: the work before them is done when they are recorded (streams run at once). */
static int event_dummy;
CUresult cuEventCreate(CUevent *e, unsigned flags) { (void)flags; *e = (CUevent)&event_dummy; return CUDA_SUCCESS; }
CUresult cuEventDestroy(CUevent e) { (void)e; return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent e, CUstream s) { (void)e, (void)s; return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent e) { (void)e; return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent e) { (void)e; return CUDA_SUCCESS; }
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) { (void)s, (void)e, (void)flags; return CUDA_SUCCESS; }

/* Virtual memory management: address space is an inaccessible mapping of the host's;
 * cuMemMap puts fresh host memory behind a granule, still inaccessible (and not zero)
 * until cuMemSetAccess, as on a GPU; cuMemUnmap makes it address space again. The
 * granule is a host page (a GPU's is 2 MiB), so that the tests' small tiers shard as
 * they do on the CPU device. */
struct EmulHandle { size_t bytes; };

CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags o)
{
    (void)prop, (void)o;
    *g = (size_t)sysconf(_SC_PAGESIZE);
    return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *p, size_t bytes, size_t align, CUdeviceptr addr, unsigned long long flags)
{
    (void)align, (void)addr, (void)flags;
    void *m = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr p, size_t bytes) { return munmap(host(p), bytes) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t bytes, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    (void)prop, (void)flags;
    struct EmulHandle *e = malloc(sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->bytes = bytes;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)e;
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h) { free((void *)(uintptr_t)h); return CUDA_SUCCESS; }

CUresult cuMemMap(CUdeviceptr p, size_t bytes, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags)
{
    const struct EmulHandle *e = (const void *)(uintptr_t)h;
    if (offset || flags || bytes != e->bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (mmap(host(p), bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(host(p), 0xa5, bytes);   /* not zero: the runtime must zero what it needs zeroed */
    return mprotect(host(p), bytes, PROT_NONE) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr p, size_t bytes, const CUmemAccessDesc *desc, size_t count)
{
    if (count != 1 || desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    return mprotect(host(p), bytes, PROT_READ | PROT_WRITE) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr p, size_t bytes)
{
    void *m = mmap(host(p), bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return m == MAP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    const char *img = image;
    uint64_t n;
    if (memcmp(img, EMUL_MAGIC, EMUL_MAGIC_LEN))
        return CUDA_ERROR_INVALID_IMAGE;   /* a real CUBIN: this emulation runs host code only */
    memcpy(&n, img + EMUL_MAGIC_LEN, sizeof n);
    CUmodule mod = calloc(1, sizeof *mod);
    if (!mod)
        return CUDA_ERROR_OUT_OF_MEMORY;
    snprintf(mod->path, sizeof mod->path, "/tmp/colossalc-emul-XXXXXX");
    int fd = mkstemp(mod->path);
    int ok = fd >= 0 && write(fd, img + EMUL_MAGIC_LEN + sizeof n, n) == (ssize_t)n;
    if (fd >= 0)
        close(fd);
    mod->so = ok ? dlopen(mod->path, RTLD_NOW | RTLD_LOCAL) : NULL;
    unlink(mod->path);
    if (!mod->so) {
        fprintf(stderr, "cuda emulation: cannot load a module: %s\n", ok ? dlerror() : "cannot write it");
        free(mod);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *m = mod;
    return CUDA_SUCCESS;
}

/* The object stays loaded: its pool of GPU threads (host_launch.h) waits inside it
 * until the process ends. */
CUresult cuModuleUnload(CUmodule m)
{
    while (m->funcs) {
        CUfunction f = m->funcs;
        m->funcs = f->next;
        free(f);
    }
    free(m);
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    CUfunction fn = calloc(1, sizeof *fn);
    if (!fn)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fn->fn = dlsym(m->so, name);
    *(void **)&fn->launch = dlsym(m->so, "cc_host_launch");
    if (!fn->fn || !fn->launch) {
        free(fn);
        return CUDA_ERROR_NOT_FOUND;
    }
    fn->next = m->funcs, m->funcs = fn;   /* valid until the module is unloaded */
    *f = fn;
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra)
{
    (void)s;
    if (!f || !params || extra || gy != 1 || gz != 1 || by != 1 || bz != 1 || shared || bx % 32 || bx > 1024 || !gx)
        return CUDA_ERROR_INVALID_VALUE;
    const uint64_t *bufs = params[0];   /* cc_bufs: the buffers' addresses, by value */
    long long n = *(const long long *)params[1];
    const float *scalars = host(*(const CUdeviceptr *)params[2]);
    char *b[16];
    for (int i = 0; i < 16; i++)
        b[i] = (char *)(uintptr_t)bufs[i];
    unsigned grid = gx < EMUL_BLOCKS ? gx : EMUL_BLOCKS;
    return f->launch(f->fn, grid, 32, b, n, scalars) ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
}
