/* device/cuda: the CUDA device (cuda.h). */
#include "runtime/device/cuda.h"

#include "runtime/comm/nccl.h"
#include "runtime/device/cuda_api.h"
#include "runtime/device/cuda_kernels.h"
#include "runtime/io/fileio.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { CUDA_MAX_BUFS = 16, SCALARS_MAX = 32, WORKSPACE = 32 << 20 };

/* One GEMM shape of the program with its cuBLASLt descriptors and algorithm. */
/* Timing of one window from a fork to its join: the comm stream's first fork and its
 * join, the compute stream before and after its wait at the join. A ring of
 * OVERLAP_SETS, so that a fork reuses the events of a join that many windows old
 * (complete by then) rather than waiting for the last one: ZeRO-3's per-layer
 * windows would otherwise keep the host one layer ahead of the GPU. */
enum { OVERLAP_SETS = 8 };
typedef struct OverlapTimes {
  CUevent comm0, comm1, wait0, wait1;
  int pending; /* joined, times not yet read */
} OverlapTimes;

typedef struct GemmPlan {
  IsaGemm key; /* the shape: tiers zeroed, each offset its operand's alignment (gemm_align) */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc; /* of the column-major call: A' = B, B' = A */
  cublasLtMatmulAlgo_t algo;
  int fused; /* its GELU, DGELU and BGRAD epilogues run in cuBLASLt (0: cuBLASLt had no
                algorithm for them, so the GEMM leaves them to its epilogue kernels) */
} GemmPlan;

/* A reserved range of address space (Device.reserve). The executor commits it in
 * pages (Device.granule, the host's page: what the compiler's plans count); physical
 * memory is mapped per granule of the GPU's (phys, 2 MiB on current GPUs), one
 * allocation each, while any page of it is committed. */
typedef struct CudaReserved {
  CUdeviceptr base;
  int64_t bytes;                        /* a multiple of phys */
  CUmemGenericAllocationHandle *handle; /* [bytes / phys] */
  uint32_t *pages;                      /* [bytes / phys] committed pages in each */
} CudaReserved;

typedef struct CudaDevice {
  Device dev;
  CudaApi api;
  CUdevice cu;
  CUcontext ctx;
  CUstream stream;
  CUmodule *mods; /* [nmods] one per kernel unit */
  int nmods;
  CUfunction *fn;        /* [nkernels] */
  const ProgCode *codes; /* [nkernels] the program's: each code's threads per block, blocks */
  int nkernels;
  CUdeviceptr scalars; /* SCALARS_MAX floats, a copy of `last` */
  float last[SCALARS_MAX];
  int have_scalars;
  cublasLtHandle_t lt;
  CUdeviceptr workspace;
  int tf32;
  GemmPlan *gemm;
  int ngemm, gemm_cap;
  int64_t work_slot;        /* bytes from one slot of the work tier to the next (several slots), else 0 */
  int64_t work_shared;      /* bytes of the region before the slots */
  CUmemAllocationProp prop; /* reserved address space: device memory of this GPU */
  CUmemAccessDesc access;
  CudaReserved *res; /* [nres] */
  int nres;
  int64_t phys;                /* the GPU's granule of physical memory */
  CUstream copy;               /* the copy stream: offload's moves, commits' zeroing */
  CUevent marks[DEVICE_MARKS]; /* mark k is marks[k % DEVICE_MARKS] on the compute stream */
  uint64_t nmarks;
  CUstream comm;                    /* the communication stream: "overlap" collectives */
  CUevent forked, joined;           /* ordering: compute -> comm at a fork, comm -> compute at a join */
  OverlapTimes times[OVERLAP_SETS]; /* the last windows from a fork to its join, a ring */
  int tset;                         /* the set the open (or next) window records into */
  int timing;                       /* a fork since the last join: times[tset].comm0 is recorded */
  double comm_ms, waited_ms;        /* summed over the joins since overlap_ms last read them */
} CudaDevice;

/* ---- errors --------------------------------------------------------------------- */

static _Noreturn void cuda_die(const char *what, const char *why, const char *file, int line) {
  fflush(stdout);
  fprintf(stderr, "train: CUDA error: %s failed: %s (%s:%d)\n", what, why, file, line);
  comm_fatal(1);
}

static const char *cu_string(const CudaApi *api, CUresult r) {
  const char *s = NULL;
  if (!api->GetErrorString || api->GetErrorString(r, &s) != CUDA_SUCCESS || !s) return "unknown CUDA error";
  return s;
}

#define CUDA_CHECK(c, call)                                                                \
  do {                                                                                     \
    CUresult r_ = (call);                                                                  \
    if (r_ != CUDA_SUCCESS) cuda_die(#call, cu_string(&(c)->api, r_), __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(c, call)                                   \
  do {                                                          \
    cublasStatus_t s_ = (call);                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                          \
      char why_[32];                                            \
      snprintf(why_, sizeof why_, "cuBLAS status %d", (int)s_); \
      cuda_die(#call, why_, __FILE__, __LINE__);                \
    }                                                           \
  } while (0)

/* The same for start-up, where a failure is a message rather than the end. */
#define CUDA_TRY(c, call, err, errlen)                                                                         \
  do {                                                                                                         \
    CUresult r_ = (call);                                                                                      \
    if (r_ != CUDA_SUCCESS)                                                                                    \
      return file_set_error((err), (errlen), "--device cuda: %s failed: %s", #call, cu_string(&(c)->api, r_)); \
  } while (0)

static CUdeviceptr dptr(const char *p) { return (CUdeviceptr)(uintptr_t)p; }

/* ---- the Device functions ---------------------------------------------------------- */

static char *cuda_alloc(Device *dev, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  CUdeviceptr p = 0;
  if (c->api.MemAlloc(&p, (size_t)bytes) != CUDA_SUCCESS) return NULL;
  CUDA_CHECK(c, c->api.MemsetD8Async(p, 0, (size_t)bytes, c->stream));
  CUDA_CHECK(c, c->api.StreamSynchronize(c->stream));
  return (char *)(uintptr_t)p;
}

static void cuda_free(Device *dev, char *buf) {
  CudaDevice *c = (CudaDevice *)dev;
  if (buf) CUDA_CHECK(c, c->api.MemFree(dptr(buf)));
}

/* The scalars, uploaded when they changed (from `last`, which outlives the copy). */
static void put_scalars(CudaDevice *c, const float *scalars) {
  size_t n = SC_COUNT * sizeof(float);
  if (c->have_scalars && !memcmp(c->last, scalars, n)) return;
  memcpy(c->last, scalars, n);
  CUDA_CHECK(c, c->api.MemcpyHtoDAsync(c->scalars, c->last, n, c->stream));
  c->have_scalars = 1;
}

static void cuda_kernel(Device *dev, int id, int64_t extent, char *const *bufs, const float *scalars) {
  CudaDevice *c = (CudaDevice *)dev;
  struct {
    CUdeviceptr p[CUDA_MAX_BUFS];
  } args; /* cc_bufs of the generated code, by value */
  for (int i = 0; i < CUDA_MAX_BUFS; i++) args.p[i] = dptr(bufs[i]);
  long long n = extent;
  if (extent == 0) return;
  put_scalars(c, scalars);
  void *params[] = {&args, &n, &c->scalars};
  CUDA_CHECK(c, c->api.LaunchKernel(c->fn[id], (unsigned)c->codes[id].grid, 1, 1, (unsigned)c->codes[id].block, 1, 1, 0,
                                    c->stream, params, NULL));
}

static void cuda_zero(Device *dev, char *base, int64_t offset, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  if (bytes > 0) CUDA_CHECK(c, c->api.MemsetD8Async(dptr(base) + (CUdeviceptr)offset, 0, (size_t)bytes, c->stream));
}

/* Uploads from pageable memory (parameters at start-up): staged by the driver when the
 * call returns, in order on the compute stream. */
static void cuda_upload(Device *dev, char *base, int64_t offset, const void *src, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  CUDA_CHECK(c, c->api.MemcpyHtoDAsync(dptr(base) + (CUdeviceptr)offset, src, (size_t)bytes, c->stream));
  CUDA_CHECK(c, c->api.StreamSynchronize(c->stream)); /* src may change once we return */
}

/* Downloads to pageable memory (checkpoints, the loss) after the compute stream's work:
 * a synchronous copy (the steps' large copies are asynchronous, to and from pinned
 * memory: tokens, offload). */
static void cuda_download(Device *dev, const char *base, int64_t offset, void *dst, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  CUDA_CHECK(c, c->api.StreamSynchronize(c->stream));
  CUDA_CHECK(c, c->api.MemcpyDtoH(dst, dptr(base) + (CUdeviceptr)offset, (size_t)bytes));
}

static void cuda_copy(Device *dev, char *dst, const char *src, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  CUDA_CHECK(c, c->api.MemcpyDtoDAsync(dptr(dst), dptr(src), (size_t)bytes, c->stream));
}

static void cuda_sync(Device *dev) {
  CudaDevice *c = (CudaDevice *)dev;
  CUDA_CHECK(c, c->api.StreamSynchronize(c->stream));
  CUDA_CHECK(c, c->api.StreamSynchronize(c->comm));
}

/* ---- the communication stream ------------------------------------------------------- */

/* 0 where either event is not reached (it is after a sync, unless a test took the
 * waits out). */
static double elapsed_ms(CudaDevice *c, CUevent a, CUevent b) {
  float ms = 0;
  CUresult r = c->api.EventElapsedTime(&ms, a, b);
  if (r == CUDA_ERROR_NOT_READY) return 0;
  CUDA_CHECK(c, r);
  return ms > 0 ? ms : 0;
}

/* The times of a joined window into the sums (waiting for its events, which a sync
 * or OVERLAP_SETS later windows have completed). */
static void collect_set(CudaDevice *c, OverlapTimes *t) {
  if (!t->pending) return;
  CUDA_CHECK(c, c->api.EventSynchronize(t->comm1));
  CUDA_CHECK(c, c->api.EventSynchronize(t->wait1));
  c->comm_ms += elapsed_ms(c, t->comm0, t->comm1);
  c->waited_ms += elapsed_ms(c, t->wait0, t->wait1);
  t->pending = 0;
}

static void collect_times(CudaDevice *c) {
  for (int i = 0; i < OVERLAP_SETS; i++) collect_set(c, &c->times[(c->tset + i) % OVERLAP_SETS]);
}

/* ---- pinned host memory --------------------------------------------------------------- */

static void *cuda_host_alloc(Device *dev, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  void *p = NULL;
  CUresult r = c->api.MemHostAlloc(&p, (size_t)(bytes > 0 ? bytes : 1), 0);
  return r == CUDA_SUCCESS ? p : NULL;
}

static void cuda_host_free(Device *dev, void *p) {
  CudaDevice *c = (CudaDevice *)dev;
  c->api.MemFreeHost(p);
}

/* Any thread (the offload copy thread commits host memory too). */
static int cuda_host_pin(Device *dev, void *p, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  return c->api.CtxSetCurrent(c->ctx) == CUDA_SUCCESS && c->api.MemHostRegister(p, (size_t)bytes, 0) == CUDA_SUCCESS
             ? 0
             : -1;
}

static void cuda_host_unpin(Device *dev, void *p) {
  CudaDevice *c = (CudaDevice *)dev;
  CUDA_CHECK(c, c->api.CtxSetCurrent(c->ctx));
  CUDA_CHECK(c, c->api.MemHostUnregister(p));
}

static void cuda_fork(Device *dev) {
  CudaDevice *c = (CudaDevice *)dev;
  CUDA_CHECK(c, c->api.EventRecord(c->forked, c->stream));
  CUDA_CHECK(c, c->api.StreamWaitEvent(c->comm, c->forked, 0));
  if (!c->timing) {
    OverlapTimes *t = &c->times[c->tset];
    collect_set(c, t); /* its events, OVERLAP_SETS windows old, are about to be reused */
    CUDA_CHECK(c, c->api.EventRecord(t->comm0, c->comm));
    c->timing = 1;
  }
}

static void cuda_join(Device *dev) {
  CudaDevice *c = (CudaDevice *)dev;
  OverlapTimes *t = &c->times[c->tset];
  CUDA_CHECK(c, c->api.EventRecord(t->comm1, c->comm));
  CUDA_CHECK(c, c->api.EventRecord(c->joined, c->comm));
  CUDA_CHECK(c, c->api.EventRecord(t->wait0, c->stream));
  CUDA_CHECK(c, c->api.StreamWaitEvent(c->stream, c->joined, 0));
  CUDA_CHECK(c, c->api.EventRecord(t->wait1, c->stream));
  t->pending = 1, c->timing = 0, c->tset = (c->tset + 1) % OVERLAP_SETS;
}

static void cuda_overlap_ms(Device *dev, double *comm, double *waited) {
  CudaDevice *c = (CudaDevice *)dev;
  collect_times(c);
  *comm = c->comm_ms, *waited = c->waited_ms;
  c->comm_ms = c->waited_ms = 0;
}

/* ---- the copy stream ---------------------------------------------------------------- */

static uint64_t cuda_mark(Device *dev) {
  CudaDevice *c = (CudaDevice *)dev;
  uint64_t k = c->nmarks++;
  CUDA_CHECK(c, c->api.EventRecord(c->marks[k % DEVICE_MARKS], c->stream));
  return k;
}

/* Any thread: the context is made current first. */
static void cuda_await(Device *dev, uint64_t mark) {
  CudaDevice *c = (CudaDevice *)dev;
  CUDA_CHECK(c, c->api.CtxSetCurrent(c->ctx));
  CUDA_CHECK(c, c->api.EventSynchronize(c->marks[mark % DEVICE_MARKS]));
}

static void cuda_xfer(Device *dev, int kind, char *dst, const char *src, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  if (bytes <= 0) return;
  CUDA_CHECK(c, c->api.CtxSetCurrent(c->ctx));
  if (kind == XFER_IN) CUDA_CHECK(c, c->api.MemcpyHtoDAsync(dptr(dst), src, (size_t)bytes, c->copy));
  else if (kind == XFER_OUT) CUDA_CHECK(c, c->api.MemcpyDtoHAsync(dst, dptr(src), (size_t)bytes, c->copy));
  else CUDA_CHECK(c, c->api.MemsetD8Async(dptr(dst), 0, (size_t)bytes, c->copy));
  CUDA_CHECK(c, c->api.StreamSynchronize(c->copy));
}

/* ---- reserved address space (CUDA's virtual memory management) -------------------- */

static CudaReserved *find_reserved(CudaDevice *c, const char *base) {
  for (int i = 0; i < c->nres; i++)
    if (c->res[i].base == dptr(base)) return &c->res[i];
  cuda_die("a reserved range", "not reserved by this device", __FILE__, __LINE__);
}

static char *cuda_reserve(Device *dev, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  int64_t size = (bytes + c->phys - 1) / c->phys * c->phys, n = size / c->phys;
  CudaReserved *v = realloc(c->res, (size_t)(c->nres + 1) * sizeof *v);
  if (!v) return NULL;
  c->res = v;
  CudaReserved *r = &c->res[c->nres];
  memset(r, 0, sizeof *r);
  r->bytes = size;
  r->handle = calloc((size_t)n + 1, sizeof *r->handle);
  r->pages = calloc((size_t)n + 1, sizeof *r->pages);
  if (!r->handle || !r->pages ||
      c->api.MemAddressReserve(&r->base, (size_t)size, (size_t)c->phys, 0, 0) != CUDA_SUCCESS) {
    free(r->handle), free(r->pages);
    return NULL;
  }
  c->nres++;
  return (char *)(uintptr_t)r->base;
}

/* Pages of [offset, offset+bytes) that lie in physical granule k. */
static uint32_t pages_in(const CudaDevice *c, int64_t k, int64_t offset, int64_t bytes) {
  int64_t lo = k * c->phys > offset ? k * c->phys : offset;
  int64_t hi = (k + 1) * c->phys < offset + bytes ? (k + 1) * c->phys : offset + bytes;
  return (uint32_t)((hi - lo) / c->dev.granule);
}

static void unmap_granule(CudaDevice *c, CudaReserved *r, int64_t k) {
  CUDA_CHECK(c, c->api.MemUnmap(r->base + (CUdeviceptr)(k * c->phys), (size_t)c->phys));
  CUDA_CHECK(c, c->api.MemRelease(r->handle[k]));
}

/* The pages of [offset, offset+bytes) given back: a granule none of whose pages is
 * committed any more is unmapped. */
static void release_pages(CudaDevice *c, CudaReserved *r, int64_t offset, int64_t bytes) {
  for (int64_t k = offset / c->phys; k * c->phys < offset + bytes; k++) {
    uint32_t n = pages_in(c, k, offset, bytes);
    if (n && (r->pages[k] -= n) == 0) unmap_granule(c, r, k);
  }
}

/* Zeroed memory behind the pages of the range (page-aligned), a granule mapped where
 * none of its pages was; none of it when the GPU is full. Any thread (offload's copy
 * thread commits). */
static int cuda_commit(Device *dev, char *base, int64_t offset, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  CudaReserved *r = find_reserved(c, base);
  CUDA_CHECK(c, c->api.CtxSetCurrent(c->ctx));
  for (int64_t k = offset / c->phys; k * c->phys < offset + bytes; k++) {
    uint32_t n = pages_in(c, k, offset, bytes);
    CUdeviceptr at = r->base + (CUdeviceptr)(k * c->phys);
    if (n && r->pages[k] == 0) {
      if (c->api.MemCreate(&r->handle[k], (size_t)c->phys, &c->prop, 0) != CUDA_SUCCESS) {
        release_pages(c, r, offset, k * c->phys - offset); /* what this call took */
        return -1;
      }
      CUDA_CHECK(c, c->api.MemMap(at, (size_t)c->phys, 0, r->handle[k], 0));
      CUDA_CHECK(c, c->api.MemSetAccess(at, (size_t)c->phys, &c->access, 1));
    }
    r->pages[k] += n;
  }
  cuda_xfer(dev, XFER_ZERO, base + offset, NULL, bytes); /* done before any later copy or kernel */
  return 0;
}

/* Any thread; no queued work uses the range any more (executor.h). */
static void cuda_decommit(Device *dev, char *base, int64_t offset, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  CudaReserved *r = find_reserved(c, base);
  CUDA_CHECK(c, c->api.CtxSetCurrent(c->ctx));
  release_pages(c, r, offset, bytes);
}

static void release_reserved(CudaDevice *c, CudaReserved *r) {
  for (int64_t k = 0; k < r->bytes / c->phys; k++)
    if (r->pages[k]) unmap_granule(c, r, k);
  c->api.MemAddressFree(r->base, (size_t)r->bytes);
  free(r->handle), free(r->pages);
}

static void cuda_unreserve(Device *dev, char *base, int64_t bytes) {
  CudaDevice *c = (CudaDevice *)dev;
  CudaReserved *r = find_reserved(c, base);
  (void)bytes;
  CUDA_CHECK(c, c->api.StreamSynchronize(c->stream));
  release_reserved(c, r);
  *r = c->res[--c->nres];
}

/* Reserved address space where the GPU supports it (the granule its allocations take). */
static void setup_reserve(CudaDevice *c) {
  size_t g = 0;
  memset(&c->prop, 0, sizeof c->prop);
  c->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  c->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  c->prop.location.id = (int)c->cu;
  c->access.location = c->prop.location;
  c->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  long page = sysconf(_SC_PAGESIZE);
  if (c->api.MemGetAllocationGranularity(&g, &c->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !g ||
      page <= 0 || g % (size_t)page)
    return;
  c->phys = (int64_t)g;
  c->dev.granule = page; /* the executor's unit, and the compiler's (codegen/offload.c) */
  c->dev.reserve = cuda_reserve, c->dev.commit = cuda_commit;
  c->dev.decommit = cuda_decommit, c->dev.unreserve = cuda_unreserve;
}

/* ---- GEMMs: cuBLASLt --------------------------------------------------------------- */

/* The shape of g: everything but where its operands lie, and alpha and beta. */
/* The alignment of every matrix of operand w (its offset, batch strides, and the work
 * tier's slot size, a slot's base being a multiple of it past the tier's; the tiers
 * themselves are at least 256-byte aligned): the largest power of two dividing them all,
 * at most 256, what cuBLASLt may assume of the pointers (MIN_ALIGNMENT_*_BYTES). */
static int64_t gemm_align(const CudaDevice *c, const IsaGemm *g, int w) {
  uint64_t e = (uint64_t)isa_dtype_bytes(g->dt[w]), x = (uint64_t)g->off[w] | 256;
  if (g->tier[w] == TIER_WORK) x |= (uint64_t)c->work_slot | (uint64_t)c->work_shared;
  for (int b = 0; b < 2; b++)
    if (g->batch[b] > 1) x |= (uint64_t)g->stride[w][b] * e;
  return (int64_t)(x & (~x + 1));
}

static IsaGemm gemm_key(const CudaDevice *c, const IsaGemm *g) {
  IsaGemm k;
  memset(&k, 0, sizeof k);
  for (int w = 0; w < 3; w++) k.off[w] = gemm_align(c, g, w);
  k.ta = g->ta, k.tb = g->tb, k.m = g->m, k.n = g->n, k.k = g->k, k.bias = g->bias;
  k.gelu = g->gelu, k.aux = g->aux, k.dgelu = g->dgelu, k.bgrad = g->bgrad;
  memcpy(k.dt, g->dt, sizeof k.dt);
  k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc;
  memcpy(k.batch, g->batch, sizeof k.batch);
  for (int w = 0; w < 3; w++) k.stride[w][1] = g->stride[w][1];
  return k;
}

static GemmPlan *find_gemm(CudaDevice *c, const IsaGemm *g) {
  IsaGemm k = gemm_key(c, g);
  for (int i = 0; i < c->ngemm; i++)
    if (!memcmp(&c->gemm[i].key, &k, sizeof k)) return &c->gemm[i];
  return NULL;
}

static cudaDataType_t cuda_type(IsaDtype t) {
  return t == ISA_BF16   ? CUDA_R_16BF
         : t == ISA_F16  ? CUDA_R_16F
         : t == ISA_E4M3 ? CUDA_R_8F_E4M3
         : t == ISA_E5M2 ? CUDA_R_8F_E5M2
                         : CUDA_R_32F;
}

static void layout(CudaDevice *c, cublasLtMatrixLayout_t *l, IsaDtype t, int64_t rows, int64_t cols, int64_t ld,
                   int64_t batch, int64_t stride) {
  int32_t count = (int32_t)batch;
  CUBLAS_CHECK(c, c->api.LtMatrixLayoutCreate(l, cuda_type(t), (uint64_t)rows, (uint64_t)cols, ld));
  CUBLAS_CHECK(c, c->api.LtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
  CUBLAS_CHECK(
      c, c->api.LtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
}

/* The epilogue cuBLASLt runs for g: all of g's (fused), or its bias alone (the GELU,
 * DGELU and BGRAD left to the epilogue kernels after it). A bias vector is per row of
 * the column-major C^T, as is the bias gradient's sum. */
static cublasLtEpilogue_t gemm_epilogue(const IsaGemm *g, int fused) {
  if (fused && g->dgelu) return g->bgrad ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
  if (fused && g->bgrad == ISA_BGRAD_B) return CUBLASLT_EPILOGUE_BGRADA; /* cuBLASLt's A is our B */
  if (!g->bias) return CUBLASLT_EPILOGUE_DEFAULT;
  if (!fused || !g->gelu) return CUBLASLT_EPILOGUE_BIAS;
  return g->aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
}

/* p's descriptor for g with gemm_epilogue(g, fused), and cuBLASLt's algorithm for it;
 * CUBLAS_STATUS_NOT_SUPPORTED where it has none or refuses the epilogue's settings (the
 * descriptor left for the caller to destroy). */
static cublasStatus_t plan_desc(CudaDevice *c, const IsaGemm *g, GemmPlan *p, int fused) {
  /* f32 sums; TF32 only for f32 operands when asked */
  cublasComputeType_t compute = c->tf32 && g->dt[0] == ISA_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(c, c->api.LtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  cublasOperation_t ta = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(c, c->api.LtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(c, c->api.LtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtEpilogue_t e = gemm_epilogue(g, fused);
  int32_t bt = CUDA_R_32F; /* the program's bias gradients are f32 */
  int64_t ld = g->ldc;     /* GELU's input, laid out as C^T (a multiple of 8) */
  if ((e != CUBLASLT_EPILOGUE_DEFAULT &&
       c->api.LtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e)) ||
      (fused && g->bgrad && g->dt[2] != ISA_F32 &&
       c->api.LtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt)) ||
      (fused && (g->aux || g->dgelu) &&
       c->api.LtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  cublasLtMatmulPreference_t pref;
  uint64_t ws = WORKSPACE;
  CUBLAS_CHECK(c, c->api.LtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(c,
               c->api.LtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  /* cuBLASLt's A is our operand 1, its B our 0, its C and D our 2 */
  uint32_t align[4] = {(uint32_t)p->key.off[1], (uint32_t)p->key.off[0], (uint32_t)p->key.off[2],
                       (uint32_t)p->key.off[2]};
  for (int i = 0; i < 4; i++)
    CUBLAS_CHECK(c, c->api.LtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i,
                                                          &align[i], sizeof align[i]));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  cublasStatus_t s = c->api.LtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found);
  c->api.LtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found < 1) return CUBLAS_STATUS_NOT_SUPPORTED;
  p->algo = res.algo;
  p->fused = fused;
  return CUBLAS_STATUS_SUCCESS;
}

/* A row-major C[m, n] = op(A) op(B) is the column-major C^T[n, m] = op(B)^T op(A)^T:
 * cuBLASLt's A is our B and its B our A; batch[1] is cuBLASLt's strided batch. Where
 * cuBLASLt has no algorithm for a GELU, DGELU or BGRAD epilogue (types or shapes its
 * kernels do not take), the GEMM runs without it and its epilogue kernels run after it,
 * as on the CPU. */
static int plan_gemm(CudaDevice *c, const IsaGemm *g, char *err, size_t errlen) {
  if (find_gemm(c, g)) return 0;
  if (c->ngemm == c->gemm_cap) {
    int cap = c->gemm_cap ? 2 * c->gemm_cap : 32;
    GemmPlan *v = realloc(c->gemm, (size_t)cap * sizeof *v);
    if (!v) return file_set_error(err, errlen, "out of memory");
    c->gemm = v, c->gemm_cap = cap;
  }
  GemmPlan *p = &c->gemm[c->ngemm++];
  memset(p, 0, sizeof *p);
  p->key = gemm_key(c, g);
  int64_t nb = g->batch[1];
  layout(c, &p->la, g->dt[1], g->tb ? g->k : g->n, g->tb ? g->n : g->k, g->ldb, nb, g->stride[1][1]);
  layout(c, &p->lb, g->dt[0], g->ta ? g->m : g->k, g->ta ? g->k : g->m, g->lda, nb, g->stride[0][1]);
  layout(c, &p->lc, g->dt[2], g->n, g->m, g->ldc, nb, g->stride[2][1]);
  if (plan_desc(c, g, p, 1) == CUBLAS_STATUS_SUCCESS) return 0;
  c->api.LtMatmulDescDestroy(p->desc);
  if ((g->gelu || g->dgelu || g->bgrad) && plan_desc(c, g, p, 0) == CUBLAS_STATUS_SUCCESS) return 0;
  if (g->gelu || g->dgelu || g->bgrad) c->api.LtMatmulDescDestroy(p->desc);
  p->desc = NULL;
  return file_set_error(err, errlen,
                        "--device cuda: cuBLASLt has no algorithm for the GEMM m %lld n %lld k "
                        "%lld (ta %d, tb %d, batch %lld x %lld)",
                        (long long)g->m, (long long)g->n, (long long)g->k, g->ta, g->tb, (long long)g->batch[0],
                        (long long)g->batch[1]);
}

/* Without its fused epilogue (GemmPlan.fused 0) a GEMM does what the CPU device's does:
 * a "gelu" one leaves GELU's input, in aux when it has one. */
static int cuda_gemm(Device *dev, const IsaGemm *g, char *const *tiers) {
  CudaDevice *c = (CudaDevice *)dev;
  const GemmPlan *p = find_gemm(c, g);
  if (!p) cuda_die("a GEMM", "its shape was not planned at start-up", __FILE__, __LINE__);
  for (int64_t i = 0; i < g->batch[0]; i++) {
    const char *a = tiers[g->tier[0]] + g->off[0] + i * g->stride[0][0] * isa_dtype_bytes(g->dt[0]);
    const char *b = tiers[g->tier[1]] + g->off[1] + i * g->stride[1][0] * isa_dtype_bytes(g->dt[1]);
    char *d = tiers[g->tier[2]] + g->off[2] + i * g->stride[2][0] * isa_dtype_bytes(g->dt[2]);
    /* read at the call: the same descriptor serves every GEMM of this shape */
    void *bias = g->bias || (g->bgrad && p->fused) ? tiers[g->bias_tier] + g->bias_off : NULL;
    if (bias)
      CUBLAS_CHECK(c, c->api.LtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    char *aux = g->aux || g->dgelu ? tiers[g->aux_tier] + g->aux_off : NULL;
    if (aux && p->fused)
      CUBLAS_CHECK(
          c, c->api.LtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    if (aux && !p->fused && g->gelu) d = aux; /* GELU's input, where its epilogue kernel reads it */
    CUBLAS_CHECK(c, c->api.LtMatmul(c->lt, p->desc, &g->alpha, b, p->la, a, p->lb, &g->beta, d, p->lc, d, p->lc,
                                    &p->algo, (void *)(uintptr_t)c->workspace, WORKSPACE, c->stream));
  }
  return p->fused;
}

/* ---- start-up and the end -------------------------------------------------------------- */

static void cuda_destroy(Device *dev) {
  CudaDevice *c = (CudaDevice *)dev;
  if (c->stream) c->api.StreamSynchronize(c->stream);
  for (int i = 0; i < c->ngemm; i++) {
    c->api.LtMatmulDescDestroy(c->gemm[i].desc);
    c->api.LtMatrixLayoutDestroy(c->gemm[i].la);
    c->api.LtMatrixLayoutDestroy(c->gemm[i].lb);
    c->api.LtMatrixLayoutDestroy(c->gemm[i].lc);
  }
  free(c->gemm);
  for (int i = 0; i < c->nres; i++) release_reserved(c, &c->res[i]);
  free(c->res);
  if (c->lt) c->api.LtDestroy(c->lt);
  if (c->workspace) c->api.MemFree(c->workspace);
  if (c->scalars) c->api.MemFree(c->scalars);
  for (int i = 0; i < c->nmods; i++)
    if (c->mods[i]) c->api.ModuleUnload(c->mods[i]);
  free(c->mods);
  free(c->fn);
  for (int i = 0; i < DEVICE_MARKS; i++)
    if (c->marks[i]) c->api.EventDestroy(c->marks[i]);
  CUevent evs[2] = {c->forked, c->joined};
  for (int i = 0; i < 2; i++)
    if (evs[i]) c->api.EventDestroy(evs[i]);
  for (int i = 0; i < OVERLAP_SETS; i++) {
    CUevent timed[4] = {c->times[i].comm0, c->times[i].comm1, c->times[i].wait0, c->times[i].wait1};
    for (int k = 0; k < 4; k++)
      if (timed[k]) c->api.EventDestroy(timed[k]);
  }
  if (c->comm) {
    c->api.StreamSynchronize(c->comm);
    c->api.StreamDestroy(c->comm);
  }
  if (c->copy) c->api.StreamDestroy(c->copy);
  if (c->stream) c->api.StreamDestroy(c->stream);
  if (c->ctx) c->api.DevicePrimaryCtxRelease(c->cu);
  cuda_api_close(&c->api);
  free(c);
}

/* The GPU of the ordinal, its context and stream; its architecture into arch. */
static int open_gpu(CudaDevice *c, const CudaOptions *o, char *arch, size_t archlen, char *name, size_t namelen,
                    char *err, size_t errlen) {
  int n = 0, major = 0, minor = 0;
  CUDA_TRY(c, c->api.Init(0), err, errlen);
  CUDA_TRY(c, c->api.DeviceGetCount(&n), err, errlen);
  if (n < 1) return file_set_error(err, errlen, "--device cuda: the driver sees no GPU (CUDA_VISIBLE_DEVICES?)");
  if (o->nccl && o->local_ranks > n) /* NCCL refuses two ranks of a communicator on one GPU */
    return file_set_error(err, errlen,
                          "--device cuda: %d ranks on this node and %d GPU%s visible: each rank needs a GPU "
                          "of its own (start at most %d rank%s a node, or check CUDA_VISIBLE_DEVICES)",
                          o->local_ranks, n, n == 1 ? "" : "s", n, n == 1 ? "" : "s");
  CUDA_TRY(c, c->api.DeviceGet(&c->cu, o->ordinal % n), err, errlen);
  CUDA_TRY(c, c->api.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->cu), err, errlen);
  CUDA_TRY(c, c->api.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->cu), err, errlen);
  CUDA_TRY(c, c->api.DeviceGetName(name, (int)namelen, c->cu), err, errlen);
  CUDA_TRY(c, c->api.DevicePrimaryCtxRetain(&c->ctx, c->cu), err, errlen);
  CUDA_TRY(c, c->api.CtxSetCurrent(c->ctx), err, errlen);
  CUDA_TRY(c, c->api.StreamCreate(&c->stream, CU_STREAM_NON_BLOCKING), err, errlen);
  CUDA_TRY(c, c->api.StreamCreate(&c->copy, CU_STREAM_NON_BLOCKING), err, errlen);
  CUDA_TRY(c, c->api.StreamCreate(&c->comm, CU_STREAM_NON_BLOCKING), err, errlen);
  for (int i = 0; i < DEVICE_MARKS; i++)
    CUDA_TRY(c, c->api.EventCreate(&c->marks[i], CU_EVENT_DISABLE_TIMING), err, errlen);
  CUevent *order[2] = {&c->forked, &c->joined};
  for (int i = 0; i < 2; i++) CUDA_TRY(c, c->api.EventCreate(order[i], CU_EVENT_DISABLE_TIMING), err, errlen);
  for (int i = 0; i < OVERLAP_SETS; i++) {
    OverlapTimes *t = &c->times[i];
    CUevent *timed[4] = {&t->comm0, &t->comm1, &t->wait0, &t->wait1};
    for (int k = 0; k < 4; k++) CUDA_TRY(c, c->api.EventCreate(timed[k], CU_EVENT_DEFAULT), err, errlen);
  }
  snprintf(arch, archlen, "sm_%d%d", major, minor);
  return 0;
}

static int load_kernels(CudaDevice *c, const Prog *p, const CudaBuild *b, char *err, size_t errlen) {
  c->nmods = b->nunits;
  c->nkernels = (int)p->count[PROG_SEC_CODES];
  c->codes = p->codes;
  if (!(c->mods = calloc((size_t)b->nunits + 1, sizeof *c->mods)) ||
      !(c->fn = calloc((size_t)c->nkernels + 1, sizeof *c->fn)))
    return file_set_error(err, errlen, "out of memory");
  for (int u = 0; u < b->nunits; u++) CUDA_TRY(c, c->api.ModuleLoadData(&c->mods[u], b->unit[u].data), err, errlen);
  for (int k = 0; k < c->nkernels; k++)
    CUDA_TRY(c, c->api.ModuleGetFunction(&c->fn[k], c->mods[k / CUDA_UNIT_KERNELS], prog_str(p, p->codes[k].name)), err,
             errlen);
  return 0;
}

/* Every GEMM of the program planned ahead (its instructions, whichever list runs them). */
static int plan_gemms(CudaDevice *c, const Prog *p, char *err, size_t errlen) {
  c->work_slot = p->s->slots > 1 ? p->s->tiers[TIER_WORK] : 0;
  c->work_shared = p->s->work_shared;
  for (int64_t i = 0; i < p->count[PROG_SEC_INSTRS]; i++)
    if (p->instrs[i].op == ISA_GEMM && plan_gemm(c, &p->instrs[i].gemm, err, errlen) != 0) return -1;
  int unfused = 0;
  for (int i = 0; i < c->ngemm; i++) {
    const IsaGemm *k = &c->gemm[i].key;
    unfused += (k->gelu || k->dgelu || k->bgrad) && !c->gemm[i].fused;
  }
  if (unfused)
    printf("cuda gemms: cuBLASLt has no algorithm with the GELU, DGELU or BGRAD epilogue for %d of %d shapes; "
           "their epilogue kernels run instead\n",
           unfused, c->ngemm);
  return 0;
}

static int program_has_cuda(const Prog *p, const char *source, char *err, size_t errlen) {
  if (!source)
    return file_set_error(err, errlen,
                          "--device cuda: this program carries no CUDA kernels (compile it again "
                          "with this colossalc, or run with --device cpu)");
  return 0;
}

static int build_kernels(const CudaApi *api, const Prog *p, const char *source, const char *arch, const CudaOptions *o,
                         CudaBuild *b, char *err, size_t errlen) {
  char dir[1024];
  cuda_cache_dir(o->kernel_cache, dir, sizeof dir);
  if (o->kernel_cache && !dir[0])
    return file_set_error(err, errlen, "--kernel-cache %s: cannot create the directory", o->kernel_cache);
  return cuda_kernels_build(api, source, (int)p->count[PROG_SEC_CODES], arch, dir, o->threads > 0 ? o->threads : 1, b,
                            err, errlen);
}

static void report_build(const CudaBuild *b, const char *arch) {
  printf("cuda kernels: %d unit%s for %s, %d from the cache", b->nunits, b->nunits == 1 ? "" : "s", arch, b->cached);
  if (b->nunits > b->cached) printf(", %d compiled in %.1f s", b->nunits - b->cached, b->compile_s);
  if (b->rebuilt) printf(" (%d damaged cache entr%s rebuilt)", b->rebuilt, b->rebuilt == 1 ? "y" : "ies");
  printf(b->cache_dir[0] ? " (cache %s)\n" : " (no cache)\n", b->cache_dir);
}

/* The GPU's peak FLOP/s at the precision of the program's GEMMs (their narrowest
 * input): f32 on the CUDA cores' FMAs, or with TF32 the tensor cores' dense rate; bf16
 * and fp16 on the tensor cores at twice TF32's; fp8 (Hopper) at twice that. Per SM and
 * clock by architecture (the vendors' data sheets: A100 19.5, 156 and 312 TFLOP/s, H100
 * SXM 67, 495 and 989 at its tensor clock), times SMs and the reported clock. 0 for an
 * architecture not listed. */
static double peak_flops(CudaDevice *c, const Prog *p) {
  int major = 0, minor = 0, sms = 0, khz = 0;
  if (c->api.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->cu) != CUDA_SUCCESS ||
      c->api.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->cu) != CUDA_SUCCESS ||
      c->api.DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->cu) != CUDA_SUCCESS ||
      c->api.DeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, c->cu) != CUDA_SUCCESS)
    return 0;
  int bits = 32;
  for (int64_t i = 0; i < p->count[PROG_SEC_INSTRS]; i++)
    if (p->instrs[i].op == ISA_GEMM)
      for (int k = 0; k < 2; k++) {
        int dt = p->instrs[i].gemm.dt[k], b = dt == ISA_E4M3 || dt == ISA_E5M2 ? 8 : dt == ISA_F32 ? 32 : 16;
        if (b < bits) bits = b;
      }
  double fma = major == 8 && minor == 0 ? 64 : major >= 8 ? 128 : major == 7 ? 64 : 0; /* f32 lanes */
  double tf32 = major == 8 && minor == 0 ? 1024 : major == 8 ? 512 : major >= 9 ? 2048 : 0;
  double per_clock = bits == 32 ? (c->tf32 ? tf32 : 2 * fma) : bits == 16 || major < 9 ? 2 * tf32 : 4 * tf32;
  return per_clock * sms * khz * 1e3;
}

static int cuda_setup(CudaDevice *c, const Prog *p, const char *source, const CudaOptions *o, char *err,
                      size_t errlen) {
  char arch[32], name[256];
  CudaBuild b;
  size_t total = 0;
  if (cuda_api_load(&c->api, CUDA_LIB_ALL | (o->nccl ? CUDA_LIB_NCCL : 0), err, errlen) != 0 ||
      open_gpu(c, o, arch, sizeof arch, name, sizeof name, err, errlen) != 0 ||
      build_kernels(&c->api, p, source, arch, o, &b, err, errlen) != 0)
    return -1;
  int rc = load_kernels(c, p, &b, err, errlen);
  if (!rc && !o->quiet) {
    c->api.DeviceTotalMem(&total, c->cu);
    printf("cuda: %s (%s), %.1f GiB | ", name, arch, (double)total / (1 << 30));
    report_build(&b, arch);
  }
  cuda_build_free(&b);
  if (rc) return -1;
  CUDA_TRY(c, c->api.MemAlloc(&c->scalars, SCALARS_MAX * sizeof(float)), err, errlen);
  CUDA_TRY(c, c->api.MemAlloc(&c->workspace, WORKSPACE), err, errlen);
  if (c->api.LtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS)
    return file_set_error(err, errlen, "--device cuda: cublasLtCreate failed");
  setup_reserve(c);
  c->dev.own_bytes = WORKSPACE + SCALARS_MAX * (int64_t)sizeof(float);
  c->dev.peak_flops = peak_flops(c, p);
  return plan_gemms(c, p, err, errlen);
}

Device *device_cuda_new(const Prog *p, const char *source, const CudaOptions *o, char *err, size_t errlen) {
  if (program_has_cuda(p, source, err, errlen) != 0) return NULL;
  CudaDevice *c = calloc(1, sizeof *c);
  if (!c) {
    file_set_error(err, errlen, "out of memory");
    return NULL;
  }
  c->tf32 = o->tf32;
  c->dev = (Device){.name = "cuda",
                    .impl = c,
                    .alloc = cuda_alloc,
                    .free = cuda_free,
                    .kernel = cuda_kernel,
                    .zero = cuda_zero,
                    .gemm = cuda_gemm,
                    .upload = cuda_upload,
                    .copy = cuda_copy,
                    .download = cuda_download,
                    .sync = cuda_sync,
                    .destroy = cuda_destroy,
                    .mark = cuda_mark,
                    .await = cuda_await,
                    .xfer = cuda_xfer,
                    .fork = cuda_fork,
                    .join = cuda_join,
                    .overlap_ms = cuda_overlap_ms,
                    .host_alloc = cuda_host_alloc,
                    .host_pin = cuda_host_pin,
                    .host_unpin = cuda_host_unpin,
                    .host_free = cuda_host_free};
  if (cuda_setup(c, p, source, o, err, errlen) != 0) {
    cuda_destroy(&c->dev);
    return NULL;
  }
  return &c->dev;
}

Comm *device_cuda_comm(Device *dev, Comm *host, int own_host) {
  CudaDevice *c = (CudaDevice *)dev;
  return comm_nccl_new(host, own_host, &c->api, c->stream);
}

Comm *device_cuda_overlap_comm(Device *dev, Comm *comm) {
  CudaDevice *c = (CudaDevice *)dev;
  return comm_nccl_dup_on(comm, c->comm);
}

int device_cuda_available(void) {
  CudaApi api;
  char err[256];
  int n = 0;
  if (cuda_api_load(&api, CUDA_LIB_DRIVER, err, sizeof err) != 0) return 0;
  int ok = api.Init(0) == CUDA_SUCCESS && api.DeviceGetCount(&n) == CUDA_SUCCESS && n > 0;
  cuda_api_close(&api);
  return ok;
}

void device_cuda_info(FILE *f) {
  CudaApi api;
  char err[4096];
  memset(&api, 0, sizeof api);
  static const struct {
    const char *name;
    unsigned which;
  } libs[] = {
      {"driver", CUDA_LIB_DRIVER}, {"NVRTC", CUDA_LIB_NVRTC}, {"cuBLASLt", CUDA_LIB_CUBLASLT}, {"NCCL", CUDA_LIB_NCCL}};
  for (int i = 0; i < 4; i++) {
    if (cuda_api_add(&api, libs[i].which, err, sizeof err) != 0) {
      static const char prefix[] = "--device cuda: ";
      const char *why = strstr(err, prefix);
      fprintf(f, "%-9s not found: %s\n", libs[i].name, why ? why + strlen(prefix) : err);
      continue;
    }
    int a = 0, b = 0;
    fprintf(f, "%-9s %s, ", libs[i].name, api.path[i]);
    if (i == 0 && api.DriverGetVersion(&a) == CUDA_SUCCESS) fprintf(f, "CUDA %d.%d\n", a / 1000, a % 1000 / 10);
    else if (i == 1 && api.nvrtcVersion(&a, &b) == NVRTC_SUCCESS) fprintf(f, "version %d.%d\n", a, b);
    else if (i == 2) {
      size_t (*version)(void) = (size_t(*)(void))dlsym(api.lib[2], "cublasLtGetVersion");
      size_t v = version ? version() : 0; /* major * 10000 + minor * 100 + patch */
      fprintf(f, "version %zu.%zu.%zu\n", v / 10000, v / 100 % 100, v % 100);
    } else if (i == 3 && api.ncclGetVersion(&a) == ncclSuccess)
      fprintf(f, "version %d.%d.%d\n", a / 10000, a / 100 % 100, a % 100);
    else fprintf(f, "version unknown\n");
  }
  int n = 0;
  if (!api.lib[0]) fprintf(f, "GPUs      none (no driver)\n");
  else if (api.Init(0) != CUDA_SUCCESS || api.DeviceGetCount(&n) != CUDA_SUCCESS || n == 0)
    fprintf(f, "GPUs      none (the driver sees no GPU)\n");
  for (int d = 0; d < n; d++) {
    CUdevice dev;
    char name[256] = "?";
    size_t mem = 0;
    int major = 0, minor = 0, sms = 0;
    if (api.DeviceGet(&dev, d) != CUDA_SUCCESS) continue;
    api.DeviceGetName(name, sizeof name, dev);
    api.DeviceTotalMem(&mem, dev);
    api.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    api.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    api.DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    fprintf(f, "GPU %-5d %s, %.1f GiB, compute capability %d.%d, %d SMs\n", d, name, mem / 1073741824.0, major, minor,
            sms);
  }
  cuda_api_close(&api);
}

int device_cuda_precompile(const Prog *p, const char *source, const char *arch, const CudaOptions *o, char *err,
                           size_t errlen) {
  CudaApi api;
  CudaBuild b;
  if (program_has_cuda(p, source, err, errlen) != 0 || cuda_api_load(&api, CUDA_LIB_NVRTC, err, errlen) != 0) return -1;
  int rc = build_kernels(&api, p, source, arch, o, &b, err, errlen);
  if (!rc) {
    report_build(&b, arch);
    cuda_build_free(&b);
  }
  cuda_api_close(&api);
  return rc;
}
