/* train_device_cpu: the CPU Device (executor.h). Kernels run on a thread pool
 * (threadpool.h) in static chunks; GEMMs go to OpenBLAS's cblas_sgemm, row-major,
 * once per batch pair (i, j), on the calling thread, with OpenBLAS's own threads
 * set to the same count (never inside the pool's workers); large memsets are
 * split over the pool too. Memory is host memory: aligned_alloc(64), zeroed once.
 * Reserved tiers (ZeRO shards) are anonymous mappings: reserved PROT_NONE (no memory,
 * no commit charge), committed by mprotect to read-write (pages appear zeroed when
 * first touched), decommitted by MADV_DONTNEED and PROT_NONE again, so a stray
 * access to a shard this rank does not hold faults instead of reading stale data.
 */
#include "executor.h"
#include "threadpool.h"

#include "runtime/fileio.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void openblas_set_num_threads(int num_threads); /* also in OpenBLAS's cblas.h */

typedef struct CpuDevice {
    Device dev;
    ThreadPool *pool;
    const RtKernelFn *kernels; /* [nkernels] */
    int nkernels;
} CpuDevice;

typedef struct CpuKernelJob {
    RtKernelFn fn;
    char *const *bufs; /* the kernel's buffers (program.h, "args") */
    const float *scalars;
} CpuKernelJob;

static char *cpu_alloc(Device *dev, int64_t bytes)
{
    size_t n = ((size_t)bytes + 63) & ~(size_t)63;
    char *p = aligned_alloc(64, n);
    if (p)
        memset(p, 0, n);
    return p;
}

static void cpu_free(Device *dev, char *buf)
{
    free(buf);
}

static void cpu_kernel_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const CpuKernelJob *job = ctx;
    job->fn(job->bufs, lo, hi, job->scalars);
}

static void cpu_kernel(Device *dev, int id, int64_t extent, char *const *bufs,
                       const float *scalars)
{
    CpuDevice *cpu = (CpuDevice *)dev;
    CpuKernelJob job = {cpu->kernels[id], bufs, scalars};
    pool_run(cpu->pool, extent, cpu_kernel_chunk, &job);
}

typedef struct CpuZeroJob {
    char *start;
    int64_t bytes;
} CpuZeroJob;

enum { CPU_ZERO_BLOCK = 1 << 20 }; /* bytes per parallel item of a large memset */

static void cpu_zero_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const CpuZeroJob *job = ctx;
    int64_t begin = lo * CPU_ZERO_BLOCK, end = hi * CPU_ZERO_BLOCK;
    memset(job->start + begin, 0, (size_t)((end < job->bytes ? end : job->bytes) - begin));
}

/* Small ranges inline; large ones (the gradient tier each step) on the pool. */
static void cpu_zero(Device *dev, char *base, int64_t offset, int64_t bytes)
{
    CpuDevice *cpu = (CpuDevice *)dev;
    CpuZeroJob job = {base + offset, bytes};
    if (bytes < 4 * (int64_t)CPU_ZERO_BLOCK)
        memset(job.start, 0, (size_t)bytes);
    else
        pool_run(cpu->pool, (bytes + CPU_ZERO_BLOCK - 1) / CPU_ZERO_BLOCK, cpu_zero_chunk, &job);
}

static float *gemm_operand(const RtGemm *g, char *const *tiers, int w, int64_t i, int64_t j)
{
    float *base = (float *)(tiers[g->tier[w]] + g->offset[w]);
    return base + i * g->stride[w][0] + j * g->stride[w][1];
}

/* A bias epilogue (beta 0): C starts as the bias in every row, and the product adds to it. */
static void cpu_gemm(Device *dev, const RtGemm *g, char *const *tiers)
{
    enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
    const float *bias = g->bias ? (const float *)(tiers[g->bias_tier] + g->bias_offset) : NULL;
    for (int64_t i = 0; i < g->batch[0]; i++)
        for (int64_t j = 0; j < g->batch[1]; j++) {
            float *c = gemm_operand(g, tiers, 2, i, j);
            for (int64_t r = 0; bias && r < g->m; r++)
                memcpy(c + r * g->ldc, bias, (size_t)g->n * sizeof *bias);
            cblas_sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha,
                        gemm_operand(g, tiers, 0, i, j), (int)g->lda,
                        gemm_operand(g, tiers, 1, i, j), (int)g->ldb, bias ? 1.0f : g->beta, c,
                        (int)g->ldc);
        }
}

static void cpu_upload(Device *dev, char *base, int64_t offset, const void *src, int64_t bytes)
{
    memcpy(base + offset, src, (size_t)bytes);
}

static void cpu_copy(Device *dev, char *dst, const char *src, int64_t bytes)
{
    memcpy(dst, src, (size_t)bytes);
}

static void cpu_download(Device *dev, const char *base, int64_t offset, void *dst,
                         int64_t bytes)
{
    memcpy(dst, base + offset, (size_t)bytes);
}

static void cpu_sync(Device *dev)
{
}

static char *cpu_host_view(Device *dev, char *base)
{
    return base;
}

/* The copy stream: kernels and GEMMs have finished when their call returns, so a mark
 * is already reached, and a copy is a memcpy on the calling thread (the offload copy
 * thread's). */
static uint64_t cpu_mark(Device *dev)
{
    return 0;
}

static void cpu_await(Device *dev, uint64_t mark)
{
}

static void cpu_xfer(Device *dev, int kind, char *dst, const char *src, int64_t bytes)
{
    if (kind == XFER_ZERO)
        memset(dst, 0, (size_t)bytes);
    else
        memcpy(dst, src, (size_t)bytes);
}

static char *cpu_reserve(Device *dev, int64_t bytes)
{
    void *p = mmap(NULL, (size_t)bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static int cpu_commit(Device *dev, char *base, int64_t offset, int64_t bytes)
{
    return mprotect(base + offset, (size_t)bytes, PROT_READ | PROT_WRITE);
}

static void cpu_decommit(Device *dev, char *base, int64_t offset, int64_t bytes)
{
    madvise(base + offset, (size_t)bytes, MADV_DONTNEED);
    mprotect(base + offset, (size_t)bytes, PROT_NONE);
}

static void cpu_unreserve(Device *dev, char *base, int64_t bytes)
{
    munmap(base, (size_t)bytes);
}

static void cpu_destroy(Device *dev)
{
    CpuDevice *cpu = (CpuDevice *)dev;
    pool_free(cpu->pool);
    free(cpu);
}

Device *device_cpu_new(const RtKernelFn *kernels, int nkernels, int threads, char *err,
                       size_t errlen)
{
    CpuDevice *cpu = calloc(1, sizeof *cpu);
    if (!cpu) {
        file_set_error(err, errlen, "out of memory");
        return NULL;
    }
    if (!(cpu->pool = pool_new(threads, err, errlen))) {
        free(cpu);
        return NULL;
    }
    openblas_set_num_threads(threads);
    cpu->kernels = kernels;
    cpu->nkernels = nkernels;
    cpu->dev = (Device){.name = "cpu", .impl = cpu, .alloc = cpu_alloc, .free = cpu_free,
                        .kernel = cpu_kernel, .zero = cpu_zero, .gemm = cpu_gemm,
                        .upload = cpu_upload, .copy = cpu_copy, .download = cpu_download, .sync = cpu_sync,
                        .host_view = cpu_host_view, .destroy = cpu_destroy,
                        .mark = cpu_mark, .await = cpu_await, .xfer = cpu_xfer,
                        .granule = sysconf(_SC_PAGESIZE), .reserve = cpu_reserve,
                        .commit = cpu_commit, .decommit = cpu_decommit,
                        .unreserve = cpu_unreserve};
    return &cpu->dev;
}
