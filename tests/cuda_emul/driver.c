/* A host emulation of the CUDA driver (libcuda.so.1), for tests only: the entry points
 * runtime/device/cuda_api.c opens, so that the real `train` runs its CUDA device on a machine
 * without a GPU (README in tests/cuda_emul/run_equal.sh).
 *
 * Emulated GPUs (8, or $COLOSSALC_EMUL_GPUS) with an H100's attributes (an A100's with
 * COLOSSALC_EMUL_GPU=a100). Device memory is host memory (a
 * CUdeviceptr is the address). A module is a shared object that the emulated NVRTC
 * (nvrtc.c) built from the generated CUDA C behind the thread-per-GPU-thread shim
 * (host_shim.h); its image is EMUL_MAGIC followed by the object's bytes, which
 * cuModuleLoadData writes to a scratch file and opens. cuLaunchKernel checks the launch
 * against a real GPU's limits (the attributes of an H100 or an A100, below) and runs the
 * kernel through the module's cc_host_launch at its real grid and block shape, every
 * block in turn, each GPU thread a fiber. Streams are threads (below). */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "tests/cuda_emul/emul.h"

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

static int ctx_dummy;

CUresult cuInit(unsigned flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == CUDA_SUCCESS ? "no error" : r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "emulated CUDA error";
  return CUDA_SUCCESS;
}

/* The GPUs of the node: 8 (the meshes the tests run, one process a rank), or
 * $COLOSSALC_EMUL_GPUS. */
static int emul_gpus(void) {
  const char *s = getenv("COLOSSALC_EMUL_GPUS");
  int n = s ? atoi(s) : 8;
  return n > 0 ? n : 8;
}
CUresult cuDeviceGetCount(int *n) {
  *n = emul_gpus();
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  *d = ordinal;
  return ordinal >= 0 && ordinal < emul_gpus() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* The emulated GPU's attributes: an H100 SXM5 80GB's (the default) or, with
 * COLOSSALC_EMUL_GPU=a100, an A100 SXM4 80GB's, as cuDeviceGetAttribute reports them
 * on those GPUs; attributes not listed are 0. The launch limits below are these. */
typedef struct Gpu {
  const char *name;
  int cc_major, cc_minor, sms, clock_khz, mem_clock_khz, bus_bits, l2_bytes, shared_block, shared_optin, shared_sm;
  size_t memory;
} Gpu;
static const Gpu gpus[] = {
    {"NVIDIA H100 80GB HBM3 (colossalc host emulation)", 9, 0, 132, 1980000, 2619000, 5120, 52428800, 49152, 232448,
     233472, (size_t)81559 << 20},
    {"NVIDIA A100-SXM4-80GB (colossalc host emulation)", 8, 0, 108, 1410000, 1593000, 5120, 41943040, 49152, 166912,
     167936, (size_t)81920 << 20},
};
static const Gpu *gpu(void) {
  const char *s = getenv("COLOSSALC_EMUL_GPU");
  return &gpus[s && !strcmp(s, "a100")];
}
enum { MAX_BLOCK = 1024, MAX_GRID_X = 2147483647, MAX_GRID_YZ = 65535 };

CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  const Gpu *g = gpu();
  if (d < 0 || d >= emul_gpus()) return CUDA_ERROR_INVALID_DEVICE;
  const struct {
    CUdevice_attribute a;
    int v;
  } attrs[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->cc_major},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->cc_minor},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->sms},
      {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, g->clock_khz},
      {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, g->mem_clock_khz},
      {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, g->bus_bits},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, g->l2_bytes},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, MAX_BLOCK},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, MAX_BLOCK},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, MAX_BLOCK},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, MAX_GRID_X},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, MAX_GRID_YZ},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, MAX_GRID_YZ},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, g->shared_block},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, g->shared_optin},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, g->shared_sm},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
      {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
      {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
      {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
      {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1},
      {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, g->cc_major >= 9 ? 3 : 2},
  };
  *v = 0;
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++)
    if (attrs[i].a == a) *v = attrs[i].v;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  (void)d;
  snprintf(name, (size_t)len, "%s", gpu()->name);
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) {
  (void)d;
  *bytes = gpu()->memory;
  return CUDA_SUCCESS;
}
CUresult cuMemGetInfo(size_t *free_bytes, size_t *total) {
  *free_bytes = *total = gpu()->memory; /* what is allocated is the host's: not counted */
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  (void)d;
  *c = (CUcontext)&ctx_dummy;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
  (void)d;
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext c) { return c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

/* ---- cuMemAlloc: each allocation ends at an inaccessible guard page -----------------
 * (its size rounded up to 256 bytes, the alignment a GPU's allocations have), with one
 * before it too, so that an access past either end faults; the fault is reported as an
 * access out of the allocation it is nearest to, and the process ends, as a GPU's
 * context does on an illegal address. */
typedef struct Alloc {
  char *map, *data;
  size_t map_len, bytes;
} Alloc;
static Alloc *allocs;
static int nallocs, cap_allocs;
static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_fault(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  const char *a = si->si_addr;
  char msg[256];
  int n = snprintf(msg, sizeof msg, "cuda emulation: an illegal address %p", (const void *)a);
  for (int i = 0; i < nallocs; i++) /* no lock: the process is ending */
    if (a >= allocs[i].map && a < allocs[i].map + allocs[i].map_len) {
      const char *end = allocs[i].data + allocs[i].bytes;
      n += snprintf(msg + n, sizeof msg - (size_t)n, a >= end ? ", %zu bytes past the end of" : ", %zu bytes before",
                    a >= end ? (size_t)(a - end) : (size_t)(allocs[i].data - a));
      n += snprintf(msg + n, sizeof msg - (size_t)n, " the allocation of %zu bytes at %p", allocs[i].bytes,
                    (void *)allocs[i].data);
      break;
    }
  snprintf(msg + n, sizeof msg - (size_t)n, "\n");
  if (write(2, msg, strlen(msg)) < 0) { /* nothing more to say */
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  static int handler;
  size_t page = (size_t)sysconf(_SC_PAGESIZE), r = (bytes + 255) / 256 * 256, body = (r + page - 1) / page * page;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  char *map = mmap(NULL, body + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  if (mprotect(map + page, body, PROT_READ | PROT_WRITE) != 0) {
    munmap(map, body + 2 * page);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  char *m = map + page + (body - r); /* the 256-byte-rounded end meets the guard page */
  memset(m, 0xa5, r);                /* not zero: the runtime must zero what it needs zeroed */
  pthread_mutex_lock(&alloc_mu);
  if (!handler) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    handler = 1;
  }
  if (nallocs == cap_allocs) {
    Alloc *v = realloc(allocs, (size_t)(cap_allocs ? 2 * cap_allocs : 64) * sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&alloc_mu);
      munmap(map, body + 2 * page);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    allocs = v, cap_allocs = cap_allocs ? 2 * cap_allocs : 64;
  }
  allocs[nallocs++] = (Alloc){map, m, body + 2 * page, bytes};
  pthread_mutex_unlock(&alloc_mu);
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr p) {
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&alloc_mu);
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].data == (char *)(uintptr_t)p) {
      munmap(allocs[i].map, allocs[i].map_len);
      allocs[i] = allocs[--nallocs];
      r = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&alloc_mu);
  return r;
}

/* ---- pinned host memory ------------------------------------------------------------
 * cuMemHostAlloc's and cuMemHostRegister's ranges are pinned, kept here by page as the
 * driver keeps them: registering a page already pinned fails with
 * CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, and cuMemHostUnregister takes the start
 * of a registration. An asynchronous copy with pinned host memory is DMA: it reads or
 * writes the host bytes when the stream runs it. COLOSSALC_EMUL_PINNED_ONLY=N refuses
 * asynchronous copies of N or more bytes of pageable memory (CUDA_ERROR_INVALID_VALUE),
 * so that a test sees the runtime's large copies on a stream go by DMA. */
typedef struct Pinned {
  uintptr_t lo, hi;
  int alloc;
} Pinned;
static Pinned *pinned;
static int npinned, pinned_cap;
static pthread_mutex_t pinned_mu = PTHREAD_MUTEX_INITIALIZER;

static uintptr_t page_down(uintptr_t a) { return a / 4096 * 4096; }
static uintptr_t page_up(uintptr_t a) { return (a + 4095) / 4096 * 4096; }

static CUresult pin_add(void *p, size_t bytes, int alloc) {
  uintptr_t lo = page_down((uintptr_t)p), hi = page_up((uintptr_t)p + bytes);
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&pinned_mu);
  for (int i = 0; i < npinned && r == CUDA_SUCCESS; i++)
    if (pinned[i].lo < hi && lo < pinned[i].hi) r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (r == CUDA_SUCCESS && npinned == pinned_cap) {
    Pinned *v = realloc(pinned, (size_t)(pinned_cap ? 2 * pinned_cap : 64) * sizeof *v);
    if (v) pinned = v, pinned_cap = pinned_cap ? 2 * pinned_cap : 64;
    else r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (r == CUDA_SUCCESS) pinned[npinned++] = (Pinned){lo, hi, alloc};
  pthread_mutex_unlock(&pinned_mu);
  return r;
}

static CUresult pin_remove(void *p, int alloc) {
  CUresult r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  pthread_mutex_lock(&pinned_mu);
  for (int i = 0; i < npinned; i++)
    if (pinned[i].lo == page_down((uintptr_t)p) && pinned[i].alloc == alloc) {
      pinned[i] = pinned[--npinned];
      r = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&pinned_mu);
  return r;
}

/* [p, p + bytes) lies in pinned memory. */
static int is_pinned(const void *p, size_t bytes) {
  uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
  int in = 0;
  pthread_mutex_lock(&pinned_mu);
  for (int i = 0; i < npinned && !in; i++) in = pinned[i].lo <= lo && hi <= pinned[i].hi;
  pthread_mutex_unlock(&pinned_mu);
  return in;
}

static int pinned_only(size_t bytes) {
  const char *v = getenv("COLOSSALC_EMUL_PINNED_ONLY");
  return v && bytes >= (size_t)strtoull(v, NULL, 10);
}

CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
  (void)flags;
  size_t n = page_up(bytes ? bytes : 1);
  if (!(*p = aligned_alloc(4096, n))) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = pin_add(*p, n, 1);
  if (r != CUDA_SUCCESS) free(*p);
  return r;
}

CUresult cuMemFreeHost(void *p) {
  CUresult r = pin_remove(p, 1);
  if (r == CUDA_SUCCESS) free(p);
  return r;
}

CUresult cuMemHostRegister(void *p, size_t bytes, unsigned flags) {
  (void)flags;
  return bytes ? pin_add(p, bytes, 0) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemHostUnregister(void *p) { return pin_remove(p, 0); }

static void *host(CUdeviceptr p) { return (void *)(uintptr_t)p; }

/* ---- streams and events ------------------------------------------------------------
 * Each stream is a worker thread that runs its work in order, concurrently with the
 * host and the other streams, as on a GPU: what the runtime orders with events and
 * stream synchronisation is ordered here, and what it does not is a race. An event
 * counts its records; an operation of the stream that records it marks the count
 * reached, and cuStreamWaitEvent queues a wait for the count at the time of the call.
 * The other emulated libraries queue their work with colossalc_emul_enqueue.
 * COLOSSALC_EMUL_DROP_WAITS=1 makes cuStreamWaitEvent and cuEventSynchronize do
 * nothing: a test takes the runtime's waits on other streams' work out and sees the
 * results go wrong. */
typedef struct EmulOp {
  void (*fn)(void *);
  void *arg; /* malloc'd, freed after fn */
  struct EmulOp *next;
} EmulOp;

struct CUstream_st {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  EmulOp *head, *tail;
  uint64_t queued, done;
  int stop;
  CUresult error; /* sticky: a kernel that failed */
};

struct CUevent_st {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t recorded, reached;
  double at_ms; /* when its stream last reached it (CLOCK_MONOTONIC) */
};

/* COLOSSALC_EMUL_STREAM_DELAY_US=N: every operation of a stream starts N us late, so
 * the streams lag behind the host as a busy GPU does (the hazard tests). */
static long stream_delay_us(void) {
  static long us = -1;
  if (us < 0) {
    const char *v = getenv("COLOSSALC_EMUL_STREAM_DELAY_US");
    us = v ? strtol(v, NULL, 10) : 0;
    us = us > 0 ? us : 0;
  }
  return us;
}

static void *stream_main(void *arg) {
  CUstream s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head) break;
    EmulOp *op = s->head;
    pthread_mutex_unlock(&s->mu);
    if (stream_delay_us() > 0) usleep((useconds_t)stream_delay_us());
    op->fn(op->arg);
    free(op->arg);
    pthread_mutex_lock(&s->mu);
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    free(op);
    s->done++;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int colossalc_emul_enqueue(void *stream, void (*fn)(void *), void *arg) {
  CUstream s = stream;
  EmulOp *op = malloc(sizeof *op);
  if (!op || !s) return -1;
  *op = (EmulOp){fn, arg, NULL};
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = op;
  else s->head = op;
  s->tail = op;
  s->queued++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

CUresult cuStreamCreate(CUstream *out, unsigned flags) {
  (void)flags;
  CUstream s = calloc(1, sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    free(s);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = s;
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s) {
  pthread_mutex_lock(&s->mu);
  while (s->done < s->queued) pthread_cond_wait(&s->cv, &s->mu);
  CUresult e = s->error;
  pthread_mutex_unlock(&s->mu);
  return e;
}

int colossalc_emul_sync(void *stream) { return cuStreamSynchronize(stream) == CUDA_SUCCESS ? 0 : -1; }

CUresult cuStreamDestroy(CUstream s) {
  cuStreamSynchronize(s);
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
  return CUDA_SUCCESS;
}

/* Queues fn with a copy of the n bytes at arg. */
static CUresult enqueue_copy(CUstream s, void (*fn)(void *), const void *arg, size_t n) {
  void *a = malloc(n);
  if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
  memcpy(a, arg, n);
  if (colossalc_emul_enqueue(s, fn, a) != 0) {
    free(a);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

typedef struct CopyOp {
  void *dst;
  const void *src;
  size_t n;
  int set; /* memset to val */
  unsigned char val;
  char data[]; /* a host source staged at the call (pageable memory) */
} CopyOp;

static void run_copy(void *arg) {
  CopyOp *c = arg;
  if (c->set) memset(c->dst, c->val, c->n);
  else memmove(c->dst, c->src ? c->src : c->data, c->n);
}

/* A synchronous copy: done when the call returns (the streams' work is the caller's to
 * order; the runtime synchronises its stream first). */
CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  memcpy(dst, host(src), n);
  return CUDA_SUCCESS;
}

/* From pageable host memory the source is staged when the call returns, as the
 * driver does: the caller may reuse it at once. From pinned memory, DMA when the
 * stream gets to it. */
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  if (is_pinned(src, n)) {
    CopyOp c = {host(dst), src, n, 0, 0};
    return enqueue_copy(s, run_copy, &c, sizeof c);
  }
  if (pinned_only(n)) return CUDA_ERROR_INVALID_VALUE;
  CopyOp *c = malloc(sizeof *c + n);
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  *c = (CopyOp){host(dst), NULL, n, 0, 0};
  memcpy(c->data, src, n);
  return colossalc_emul_enqueue(s, run_copy, c) ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

/* To pageable host memory the call returns when the copy is done, as the driver's; to
 * pinned memory at once. */
CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  int dma = is_pinned(dst, n);
  if (!dma && pinned_only(n)) return CUDA_ERROR_INVALID_VALUE;
  CopyOp c = {dst, host(src), n, 0, 0};
  CUresult r = enqueue_copy(s, run_copy, &c, sizeof c);
  return r != CUDA_SUCCESS || dma ? r : cuStreamSynchronize(s);
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  CopyOp c = {host(dst), host(src), n, 0, 0};
  return enqueue_copy(s, run_copy, &c, sizeof c);
}

CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  CopyOp c = {host(p), NULL, n, 1, v};
  return enqueue_copy(s, run_copy, &c, sizeof c);
}

CUresult cuEventCreate(CUevent *out, unsigned flags) {
  (void)flags;
  CUevent e = calloc(1, sizeof *e);
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  *out = e;
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent e) {
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
  return CUDA_SUCCESS;
}

typedef struct EventOp {
  CUevent e;
  uint64_t count;
} EventOp;

static void run_record(void *arg) {
  EventOp *o = arg;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  pthread_mutex_lock(&o->e->mu);
  o->e->at_ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
  if (o->count > o->e->reached) o->e->reached = o->count;
  pthread_cond_broadcast(&o->e->cv);
  pthread_mutex_unlock(&o->e->mu);
}

static void wait_reached(CUevent e, uint64_t count) {
  pthread_mutex_lock(&e->mu);
  while (e->reached < count) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

static void run_wait(void *arg) {
  EventOp *o = arg;
  wait_reached(o->e, o->count);
}

CUresult cuEventRecord(CUevent e, CUstream s) {
  pthread_mutex_lock(&e->mu);
  EventOp o = {e, ++e->recorded};
  pthread_mutex_unlock(&e->mu);
  return enqueue_copy(s, run_record, &o, sizeof o);
}

static uint64_t recorded(CUevent e) {
  pthread_mutex_lock(&e->mu);
  uint64_t n = e->recorded;
  pthread_mutex_unlock(&e->mu);
  return n;
}

CUresult cuEventQuery(CUevent e) {
  pthread_mutex_lock(&e->mu);
  int ready = e->reached >= e->recorded;
  pthread_mutex_unlock(&e->mu);
  return ready ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static int drop_waits(void) {
  static int drop = -1;
  if (drop < 0) drop = getenv("COLOSSALC_EMUL_DROP_WAITS") && !strcmp(getenv("COLOSSALC_EMUL_DROP_WAITS"), "1");
  return drop;
}

CUresult cuEventSynchronize(CUevent e) {
  if (!drop_waits()) wait_reached(e, recorded(e));
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
  if (cuEventQuery(start) != CUDA_SUCCESS || cuEventQuery(end) != CUDA_SUCCESS) return CUDA_ERROR_NOT_READY;
  pthread_mutex_lock(&start->mu);
  double a = start->at_ms;
  pthread_mutex_unlock(&start->mu);
  pthread_mutex_lock(&end->mu);
  double b = end->at_ms;
  pthread_mutex_unlock(&end->mu);
  *ms = (float)(b - a);
  return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  if (flags) return CUDA_ERROR_INVALID_VALUE;
  if (drop_waits()) return CUDA_SUCCESS;
  EventOp o = {e, recorded(e)};
  return enqueue_copy(s, run_wait, &o, sizeof o);
}

/* Virtual memory management: address space is an inaccessible mapping of the host's;
 * cuMemMap puts fresh host memory behind a granule, still inaccessible (and not zero)
 * until cuMemSetAccess, as on a GPU; cuMemUnmap makes it address space again. The
 * granule is 64 KiB (a GPU's is 2 MiB): larger than a page, so that the CUDA device's
 * pages within granules are exercised, small enough for the tests' tiers to shard. */
struct EmulHandle {
  size_t bytes;
};

CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags o) {
  (void)prop, (void)o;
  *g = (size_t)64 << 10;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *p, size_t bytes, size_t align, CUdeviceptr addr, unsigned long long flags) {
  (void)align, (void)addr, (void)flags;
  void *m = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr p, size_t bytes) {
  return munmap(host(p), bytes) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t bytes, const CUmemAllocationProp *prop,
                     unsigned long long flags) {
  (void)prop, (void)flags;
  struct EmulHandle *e = malloc(sizeof *e);
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  e->bytes = bytes;
  *h = (CUmemGenericAllocationHandle)(uintptr_t)e;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  free((void *)(uintptr_t)h);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr p, size_t bytes, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long flags) {
  const struct EmulHandle *e = (const void *)(uintptr_t)h;
  if (offset || flags || bytes != e->bytes) return CUDA_ERROR_INVALID_VALUE;
  if (mmap(host(p), bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  memset(host(p), 0xa5, bytes); /* not zero: the runtime must zero what it needs zeroed */
  return mprotect(host(p), bytes, PROT_NONE) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr p, size_t bytes, const CUmemAccessDesc *desc, size_t count) {
  if (count != 1 || desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_VALUE;
  return mprotect(host(p), bytes, PROT_READ | PROT_WRITE) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr p, size_t bytes) {
  void *m = mmap(host(p), bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return m == MAP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  const char *img = image;
  uint64_t n;
  if (memcmp(img, EMUL_MAGIC, EMUL_MAGIC_LEN))
    return CUDA_ERROR_INVALID_IMAGE; /* a real CUBIN: this emulation runs host code only */
  memcpy(&n, img + EMUL_MAGIC_LEN, sizeof n);
  CUmodule mod = calloc(1, sizeof *mod);
  if (!mod) return CUDA_ERROR_OUT_OF_MEMORY;
  snprintf(mod->path, sizeof mod->path, "/tmp/colossalc-emul-XXXXXX");
  int fd = mkstemp(mod->path);
  int ok = fd >= 0 && write(fd, img + EMUL_MAGIC_LEN + sizeof n, n) == (ssize_t)n;
  if (fd >= 0) close(fd);
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
CUresult cuModuleUnload(CUmodule m) {
  while (m->funcs) {
    CUfunction f = m->funcs;
    m->funcs = f->next;
    free(f);
  }
  free(m);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  CUfunction fn = calloc(1, sizeof *fn);
  if (!fn) return CUDA_ERROR_OUT_OF_MEMORY;
  fn->fn = dlsym(m->so, name);
  *(void **)&fn->launch = dlsym(m->so, "cc_host_launch");
  if (!fn->fn || !fn->launch) {
    free(fn);
    return CUDA_ERROR_NOT_FOUND;
  }
  fn->next = m->funcs, m->funcs = fn; /* valid until the module is unloaded */
  *f = fn;
  return CUDA_SUCCESS;
}

typedef struct LaunchOp {
  CUfunction f;
  unsigned grid, block;
  char *bufs[16];
  long long n;
  const float *scalars;
  CUstream s;
} LaunchOp;

static void run_launch(void *arg) {
  LaunchOp *l = arg;
  if (l->f->launch(l->f->fn, l->grid, l->block, l->bufs, l->n, l->scalars)) {
    pthread_mutex_lock(&l->s->mu);
    l->s->error = CUDA_ERROR_LAUNCH_FAILED;
    pthread_mutex_unlock(&l->s->mu);
  }
}

/* Queued on the stream with the parameters' values of the call, as a launch takes them. */
/* A failing GPU, for the tests of what a device error does to a mesh: with
 * COLOSSALC_EMUL_FAIL_LAUNCH=N, the N-th launch of MPI rank $COLOSSALC_EMUL_FAIL_RANK
 * (default 1; Open MPI's OMPI_COMM_WORLD_RANK, else 0) fails. */
static int launch_fails(void) {
  static long n;
  const char *at = getenv("COLOSSALC_EMUL_FAIL_LAUNCH"), *who = getenv("COLOSSALC_EMUL_FAIL_RANK");
  const char *me = getenv("OMPI_COMM_WORLD_RANK");
  if (!at || atoi(me ? me : "0") != (who ? atoi(who) : 1)) return 0;
  return __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED) == atol(at);
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra) {
  /* a real GPU's limits (its attributes above): a launch past them fails on a GPU */
  if (!gx || !bx || !gy || !by || !gz || !bz || bx > MAX_BLOCK || by > MAX_BLOCK || bz > 64 ||
      (unsigned long long)bx * by * bz > MAX_BLOCK || gx > MAX_GRID_X || gy > MAX_GRID_YZ || gz > MAX_GRID_YZ ||
      shared > (unsigned)gpu()->shared_block)
    return CUDA_ERROR_INVALID_VALUE;
  /* what the shim runs: one-dimensional launches of whole warps, no dynamic shared memory
   * (the generated kernels' own) */
  if (!f || !params || extra || gy != 1 || gz != 1 || by != 1 || bz != 1 || shared || bx % 32)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (launch_fails()) return CUDA_ERROR_LAUNCH_FAILED;
  const uint64_t *bufs = params[0]; /* cc_bufs: the buffers' addresses, by value */
  LaunchOp l = {f, gx, bx, {0}, *(const long long *)params[1], host(*(const CUdeviceptr *)params[2]), s};
  for (int i = 0; i < 16; i++) l.bufs[i] = (char *)(uintptr_t)bufs[i];
  return enqueue_copy(s, run_launch, &l, sizeof l);
}
