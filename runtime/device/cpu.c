/* device/cpu: the CPU Device (executor.h). Kernels run on a thread pool
 * (threadpool.h) in static chunks; GEMMs go to OpenBLAS's cblas_sgemm, row-major,
 * once per batch pair (i, j), split over the pool too (pool_gemm: each worker the
 * product's rows, or its columns, of its chunk, with OpenBLAS on one thread). OpenBLAS's
 * own threads would spin (sched_yield) for a while after each GEMM on the cores the
 * pool's kernels run on next: a small model's step was 1.26x slower with them on two
 * cores. Large memsets are split over the pool too. Memory is host memory:
 * aligned_alloc(64), zeroed once.
 * Reserved tiers (ZeRO shards) are anonymous mappings: reserved PROT_NONE (no memory,
 * no commit charge), committed by mprotect to read-write (pages appear zeroed when
 * first touched), decommitted by MADV_DONTNEED and PROT_NONE again, so a stray
 * access to a shard this rank does not hold faults instead of reading stale data.
 */
#include "runtime/executor.h"
#include "runtime/device/threadpool.h"

#include "runtime/comm/comm.h"
#include "runtime/io/fileio.h"
#include "program/cpu.h"

#include <cblas.h>
#include <limits.h>
#include <strings.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void openblas_set_num_threads(int num_threads); /* also in OpenBLAS's cblas.h */
char *openblas_get_corename(void);

/* ---- OpenBLAS's kernels for this CPU ------------------------------------------------ */

/* OpenBLAS's x86-64 core types by the vector ISA their sgemm kernels use (1: SSE,
 * 2: AVX, 3: AVX2 and FMA, 4: AVX-512), and the core type to ask for at each level. */
static const struct {
  const char *core;
  int level;
} blas_cores[] = {
    {"Prescott", 1}, {"Core2", 1},       {"Penryn", 1},         {"Dunnington", 1},
    {"Nehalem", 1},  {"Atom", 1},        {"Opteron", 1},        {"Barcelona", 1},
    {"Bobcat", 1},   {"Sandybridge", 2}, {"Bulldozer", 2},      {"Piledriver", 2},
    {"Haswell", 3},  {"Zen", 3},         {"Steamroller", 3},    {"Excavator", 3},
    {"SkylakeX", 4}, {"Cooperlake", 4},  {"SapphireRapids", 4},
};
static const char *const blas_level_core[5] = {NULL, NULL, "Sandybridge", "Haswell", "SkylakeX"};

static int blas_level(const char *core) {
  for (size_t i = 0; core && i < sizeof blas_cores / sizeof blas_cores[0]; i++)
    if (!strcasecmp(blas_cores[i].core, core)) return blas_cores[i].level;
  return 0; /* a core this table does not know: left as the library chose */
}

/* The level this CPU's features allow (program/cpu.h). */
static int cpu_level(void) {
  if (cpu_runs("avx512f,avx512bw,avx512cd,avx512dq,avx512vl", NULL, 0)) return 4;
  if (cpu_runs("avx2,fma", NULL, 0)) return 3;
  if (cpu_runs("avx", NULL, 0)) return 2;
  return 1;
}

int cpu_blas_pick(char **argv) {
  if (!cpu_table_known() || getenv("OPENBLAS_CORETYPE")) return 0; /* the user's choice stands */
  const char *core = openblas_get_corename();
  int have = blas_level(core), can = cpu_level();
  if (!have || have >= can || !blas_level_core[can]) return 0;
  /* the library reads OPENBLAS_CORETYPE when it loads, before main: start again with it,
   * by the program's own path so that the process keeps its name (ps; the fault tests
   * find the ranks by it), where /proc/self/exe would name it "exe" */
  if (setenv("OPENBLAS_CORETYPE", blas_level_core[can], 1) != 0) return 0;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) self[n] = 0;
  execv(n > 0 ? self : "/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE"); /* no exec: go on with the library's choice */
  return -1;
}

const char *cpu_blas_core(void) { return openblas_get_corename(); }

/* A reserved range pinned through a GPU (device_cpu_pin_through): its resident pages
 * are pinned, the committed ones and, up to the budget, pages decommitted since, kept
 * pinned for their next commit (the offload plan brings a part back to the same place
 * every step) instead of being freed and pinned again. */
typedef struct CpuPinned {
  char *base;
  int64_t bytes;
  uint64_t *used; /* a bit per page: committed */
  uint64_t *res;  /* a bit per page: resident and pinned (committed or kept) */
} CpuPinned;

typedef struct CpuDevice {
  Device dev;
  ThreadPool *pool;
  const ProgKernelFn *kernels; /* [nkernels] */
  int nkernels;
  Device *pin;            /* pins reserved memory, or NULL */
  int64_t pin_budget;     /* bytes of resident pages beyond which kept ones go */
  int64_t resident;       /* bytes of resident pages, all ranges */
  pthread_mutex_t pin_mu; /* commits come from the main and the offload copy thread */
  CpuPinned *pinned;
  int npinned;
  float *scratch; /* 16-bit GEMMs' operands widened to f32 (grown as needed) */
  int64_t scratch_floats;
} CpuDevice;

typedef struct CpuKernelJob {
  ProgKernelFn fn;
  char *const *bufs; /* the kernel's buffers (ProgArg) */
  const float *scalars;
} CpuKernelJob;

static char *cpu_alloc(Device *dev, int64_t bytes) {
  size_t n = ((size_t)bytes + 63) & ~(size_t)63;
  char *p = aligned_alloc(64, n);
  if (p) memset(p, 0, n);
  return p;
}

static void cpu_free(Device *dev, char *buf) { free(buf); }

static void cpu_kernel_chunk(void *ctx, int64_t lo, int64_t hi) {
  const CpuKernelJob *job = ctx;
  job->fn(job->bufs, lo, hi, job->scalars);
}

static void cpu_kernel(Device *dev, int id, int64_t extent, char *const *bufs, const float *scalars) {
  CpuDevice *cpu = (CpuDevice *)dev;
  CpuKernelJob job = {cpu->kernels[id], bufs, scalars};
  pool_run(cpu->pool, extent, cpu_kernel_chunk, &job);
}

typedef struct CpuZeroJob {
  char *start;
  int64_t bytes;
} CpuZeroJob;

enum { CPU_ZERO_BLOCK = 1 << 20 }; /* bytes per parallel item of a large memset */

static void cpu_zero_chunk(void *ctx, int64_t lo, int64_t hi) {
  const CpuZeroJob *job = ctx;
  int64_t begin = lo * CPU_ZERO_BLOCK, end = hi * CPU_ZERO_BLOCK;
  memset(job->start + begin, 0, (size_t)((end < job->bytes ? end : job->bytes) - begin));
}

/* Small ranges inline; large ones (the gradient tier each step) on the pool. */
static void cpu_zero(Device *dev, char *base, int64_t offset, int64_t bytes) {
  CpuDevice *cpu = (CpuDevice *)dev;
  CpuZeroJob job = {base + offset, bytes};
  if (bytes < 4 * (int64_t)CPU_ZERO_BLOCK) memset(job.start, 0, (size_t)bytes);
  else pool_run(cpu->pool, (bytes + CPU_ZERO_BLOCK - 1) / CPU_ZERO_BLOCK, cpu_zero_chunk, &job);
}

static float *gemm_operand(const IsaGemm *g, char *const *tiers, int w, int64_t i, int64_t j) {
  float *base = (float *)(tiers[g->tier[w]] + g->off[w]);
  return base + i * g->stride[w][0] + j * g->stride[w][1];
}

/* C = alpha op(A) op(B) + beta C (row-major, f32) over the pool: each worker its chunk
 * of C's rows (of its columns where C has fewer rows than threads), one OpenBLAS call on
 * one thread. The split is fixed by the shape and the thread count. */
typedef struct CpuGemm {
  enum CBLAS_TRANSPOSE ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  const float *a, *b, *bias;
  float *c;
  int rows; /* split C's rows, else its columns */
} CpuGemm;

static void cpu_gemm_chunk(void *ctx, int64_t lo, int64_t hi) {
  const CpuGemm *g = ctx;
  const float *a = g->a, *b = g->b;
  float *c = g->c;
  int64_t m = g->m, n = g->n;
  if (g->rows) a += g->ta == CblasTrans ? lo : lo * g->lda, c += lo * g->ldc, m = hi - lo;
  else b += g->tb == CblasTrans ? lo * g->ldb : lo, c += lo, n = hi - lo;
  for (int64_t r = 0; g->bias && r < m; r++) memcpy(c + r * g->ldc, g->bias + (g->rows ? 0 : lo), (size_t)n * 4);
  cblas_sgemm(CblasRowMajor, g->ta, g->tb, (int)m, (int)n, (int)g->k, g->alpha, a, (int)g->lda, b, (int)g->ldb,
              g->bias ? 1.0f : g->beta, c, (int)g->ldc);
}

/* GEMM g's product on f32 operands a, b and c (leading dimensions lda, ldb, ldc) over
 * the pool, C starting as the bias in every row where given. */
static void pool_gemm(CpuDevice *cpu, const IsaGemm *g, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float *c, int64_t ldc, const float *bias) {
  CpuGemm cg = {.ta = g->ta ? CblasTrans : CblasNoTrans,
                .tb = g->tb ? CblasTrans : CblasNoTrans,
                .m = g->m,
                .n = g->n,
                .k = g->k,
                .lda = lda,
                .ldb = ldb,
                .ldc = ldc,
                .alpha = g->alpha,
                .beta = g->beta,
                .a = a,
                .b = b,
                .bias = bias,
                .c = c,
                .rows = g->m >= pool_threads(cpu->pool) || g->m >= g->n};
  pool_run(cpu->pool, cg.rows ? cg.m : cg.n, cpu_gemm_chunk, &cg);
}

/* A rows x cols matrix of 16- or 8-bit elements (leading dimension ld) widened into
 * f32 at f (leading dimension cols), or (narrow, 16-bit) f32 rounded back into it; rows
 * split over the pool. */
typedef struct CpuConvert {
  IsaDtype t;
  char *h;
  float *f;
  int64_t cols, ld;
  int narrow;
} CpuConvert;

/* One loop per case, the type a constant in it, so that the conversion inlines to a few
 * branch-free integer operations (bf16's are a shift, and a rounding add) instead of a
 * choice of type per element. */
static void cpu_convert_rows(void *ctx, int64_t lo, int64_t hi) {
  const CpuConvert *c = ctx;
  int64_t n = c->cols;
  for (int64_t r = lo; r < hi; r++) {
    float *f = c->f + r * n;
    unsigned short *h = (unsigned short *)c->h + r * c->ld;
    const unsigned char *q = (const unsigned char *)c->h + r * c->ld;
    if (isa_dtype_bytes(c->t) == 1)
      for (int64_t j = 0; j < n; j++) f[j] = isa_fp8_to_f32(c->t, q[j]);
    else if (c->narrow && c->t == ISA_BF16)
      for (int64_t j = 0; j < n; j++) h[j] = isa_from_f32(ISA_BF16, f[j]);
    else if (c->narrow)
      for (int64_t j = 0; j < n; j++) h[j] = isa_from_f32(ISA_F16, f[j]);
    else if (c->t == ISA_BF16)
      for (int64_t j = 0; j < n; j++) f[j] = isa_to_f32(ISA_BF16, h[j]);
    else
      for (int64_t j = 0; j < n; j++) f[j] = isa_to_f32(ISA_F16, h[j]);
  }
}

static void convert(CpuDevice *cpu, IsaDtype t, char *h, int64_t rows, int64_t cols, int64_t ld, float *f, int narrow) {
  CpuConvert c = {t, h, f, cols, ld, narrow};
  pool_run(cpu->pool, rows, cpu_convert_rows, &c);
}

/* A GEMM of 16- or 8-bit operands: each batch's A and B widened to f32 (exact), the
 * product summed in f32 (into C if it is f32, else into scratch and rounded once into C). */
static void cpu_gemm_half(CpuDevice *cpu, const IsaGemm *g, char *const *tiers) {
  int64_t ra = g->ta ? g->k : g->m, ca = g->ta ? g->m : g->k, rb = g->tb ? g->n : g->k, cb = g->tb ? g->k : g->n;
  int64_t need = ra * ca + rb * cb + g->m * g->n;
  if (need > cpu->scratch_floats) {
    float *v = realloc(cpu->scratch, (size_t)need * sizeof *v);
    if (!v) {
      fprintf(stderr, "train: out of memory for a 16-bit GEMM's f32 operands (%lld floats)\n", (long long)need);
      comm_fatal(1);
    }
    cpu->scratch = v, cpu->scratch_floats = need;
  }
  float *a = cpu->scratch, *b = a + ra * ca, *c32 = b + rb * cb;
  const float *bias = g->bias ? (const float *)(tiers[g->bias_tier] + g->bias_off) : NULL;
  for (int64_t i = 0; i < g->batch[0]; i++)
    for (int64_t j = 0; j < g->batch[1]; j++) {
      char *ops[3];
      for (int w = 0; w < 3; w++)
        ops[w] =
            tiers[g->tier[w]] + g->off[w] + (i * g->stride[w][0] + j * g->stride[w][1]) * isa_dtype_bytes(g->dt[w]);
      convert(cpu, g->dt[0], ops[0], ra, ca, g->lda, a, 0);
      convert(cpu, g->dt[1], ops[1], rb, cb, g->ldb, b, 0);
      int f32 = g->dt[2] == ISA_F32;
      float *c = f32 ? (float *)ops[2] : c32;
      int64_t ldc = f32 ? g->ldc : g->n;
      if (!f32 && g->beta != 0) convert(cpu, g->dt[2], ops[2], g->m, g->n, g->ldc, c32, 0);
      pool_gemm(cpu, g, a, ca, b, cb, c, ldc, bias);
      if (!f32) convert(cpu, g->dt[2], ops[2], g->m, g->n, g->ldc, c32, 1);
    }
}

/* A bias epilogue (beta 0): C starts as the bias in every row, and the product adds to it.
 * A "gelu" GEMM leaves GELU's input, in aux if given, for the "epilogue" kernel after it
 * (a compiled kernel, vectorized, the unfused GELU's code); a "dgelu" one leaves the
 * product in C for its epilogue kernels (the GELU gradient, the bias gradient). */
static int cpu_gemm(Device *dev, const IsaGemm *g, char *const *tiers) {
  const float *bias = g->bias ? (const float *)(tiers[g->bias_tier] + g->bias_off) : NULL;
  if (g->dt[0] != ISA_F32 || g->dt[2] != ISA_F32) {
    cpu_gemm_half((CpuDevice *)dev, g, tiers);
    return 0;
  }
  for (int64_t i = 0; i < g->batch[0]; i++)
    for (int64_t j = 0; j < g->batch[1]; j++) {
      float *c = g->aux ? (float *)(tiers[g->aux_tier] + g->aux_off) : gemm_operand(g, tiers, 2, i, j);
      pool_gemm((CpuDevice *)dev, g, gemm_operand(g, tiers, 0, i, j), g->lda, gemm_operand(g, tiers, 1, i, j), g->ldb,
                c, g->ldc, bias);
    }
  return 0;
}

static void cpu_upload(Device *dev, char *base, int64_t offset, const void *src, int64_t bytes) {
  memcpy(base + offset, src, (size_t)bytes);
}

static void cpu_copy(Device *dev, char *dst, const char *src, int64_t bytes) { memcpy(dst, src, (size_t)bytes); }

static void cpu_download(Device *dev, const char *base, int64_t offset, void *dst, int64_t bytes) {
  memcpy(dst, base + offset, (size_t)bytes);
}

static void cpu_sync(Device *dev) {}

static char *cpu_host_view(Device *dev, char *base) { return base; }

/* The copy stream: kernels and GEMMs have finished when their call returns, so a mark
 * is already reached, and a copy is a memcpy on the calling thread (the offload copy
 * thread's). */
static uint64_t cpu_mark(Device *dev) { return 0; }

static void cpu_await(Device *dev, uint64_t mark) {}

static void cpu_xfer(Device *dev, int kind, char *dst, const char *src, int64_t bytes) {
  if (kind == XFER_ZERO) memset(dst, 0, (size_t)bytes);
  else memcpy(dst, src, (size_t)bytes);
}

/* ---- reserved memory, pinned when asked ----------------------------------------------- */

static CpuPinned *find_pinned(CpuDevice *cpu, const char *base) {
  for (int i = 0; i < cpu->npinned; i++)
    if (cpu->pinned[i].base == base) return &cpu->pinned[i];
  return NULL;
}

static int bit(const uint64_t *b, int64_t i) { return (int)(b[i / 64] >> (i % 64) & 1); }

static void set_bit(uint64_t *b, int64_t i, int on) {
  b[i / 64] = on ? b[i / 64] | (uint64_t)1 << (i % 64) : b[i / 64] & ~((uint64_t)1 << (i % 64));
}

/* Unpins (pin 0) or pins (pin 1) each resident run of block blk: every registration
 * lies within one block. */
static int pin_block(CpuDevice *cpu, CpuPinned *r, int64_t blk, int pin) {
  int64_t page = cpu->dev.granule, lo = blk * CPU_PIN_BLOCK / page;
  int64_t hi = ((blk + 1) * CPU_PIN_BLOCK < r->bytes ? (blk + 1) * CPU_PIN_BLOCK : r->bytes) / page;
  for (int64_t i = lo, j; i < hi; i = j) {
    for (j = i; j < hi && bit(r->res, j) == bit(r->res, i); j++)
      ;
    if (!bit(r->res, i)) continue;
    if (!pin) cpu->pin->host_unpin(cpu->pin, r->base + i * page);
    else if (cpu->pin->host_pin(cpu->pin, r->base + i * page, (j - i) * page) != 0) return -1;
  }
  return 0;
}

/* Pages [lo, hi) of block blk resident (on) or freed (off), the block re-pinned. */
static int set_resident(CpuDevice *cpu, CpuPinned *r, int64_t blk, int64_t lo, int64_t hi, int on) {
  int64_t page = cpu->dev.granule;
  pin_block(cpu, r, blk, 0);
  for (int64_t i = lo; i < hi; i++) {
    cpu->resident += (bit(r->res, i) != on) * (on ? page : -page);
    set_bit(r->res, i, on);
  }
  char *p = r->base + lo * page;
  size_t n = (size_t)(hi - lo) * page;
  int rc = on ? mprotect(p, n, PROT_READ | PROT_WRITE) : madvise(p, n, MADV_DONTNEED) | mprotect(p, n, PROT_NONE);
  return pin_block(cpu, r, blk, 1) | rc;
}

/* Kept pages of [lo, hi) freed, whole blocks at a time, while the resident pages exceed
 * the budget (the range just decommitted first: the plan needs it again last). */
static void trim(CpuDevice *cpu, CpuPinned *r, int64_t lo, int64_t hi) {
  int64_t per = CPU_PIN_BLOCK / cpu->dev.granule;
  for (int64_t blk = lo / per; blk * per < hi && cpu->resident > cpu->pin_budget; blk++) {
    int64_t a = blk * per > lo ? blk * per : lo, b = (blk + 1) * per < hi ? (blk + 1) * per : hi;
    int kept = 0;
    for (int64_t i = a; i < b && !kept; i++) kept = bit(r->res, i) && !bit(r->used, i);
    if (!kept) continue;
    pin_block(cpu, r, blk, 0);
    for (int64_t i = a, j; i < b; i = j) { /* each run of kept pages freed */
      for (j = i; j < b && (bit(r->res, i) && !bit(r->used, i)) == (bit(r->res, j) && !bit(r->used, j)); j++)
        ;
      if (!bit(r->res, i) || bit(r->used, i)) continue;
      for (int64_t k = i; k < j; k++) set_bit(r->res, k, 0);
      cpu->resident -= (j - i) * cpu->dev.granule;
      madvise(r->base + i * cpu->dev.granule, (size_t)(j - i) * cpu->dev.granule, MADV_DONTNEED);
      mprotect(r->base + i * cpu->dev.granule, (size_t)(j - i) * cpu->dev.granule, PROT_NONE);
    }
    pin_block(cpu, r, blk, 1);
  }
}

/* [offset, offset + bytes) committed (on) or decommitted: pages made resident where they
 * are not (kept ones zeroed, as fresh ones are), or kept. */
static int pinned_commit(CpuDevice *cpu, char *base, int64_t offset, int64_t bytes, int on) {
  pthread_mutex_lock(&cpu->pin_mu);
  CpuPinned *r = find_pinned(cpu, base);
  int64_t page = cpu->dev.granule, per = CPU_PIN_BLOCK / page, lo = offset / page;
  int64_t hi = (offset + bytes + page - 1) / page;
  int rc = 0;
  for (int64_t blk = lo / per; r && blk * per < hi && rc == 0; blk++) {
    int64_t a = blk * per > lo ? blk * per : lo, b = (blk + 1) * per < hi ? (blk + 1) * per : hi;
    int fresh = 0;
    for (int64_t i = a; i < b; i++) {
      fresh |= !bit(r->res, i);
      if (on && bit(r->res, i)) memset(r->base + i * page, 0, (size_t)page);
      set_bit(r->used, i, on);
    }
    if (on && fresh) rc = set_resident(cpu, r, blk, a, b, 1);
  }
  if (r && !on) /* over the budget: kept pages go, those just decommitted first */
    trim(cpu, r, lo, hi);
  for (int i = 0; r && i < cpu->npinned && cpu->resident > cpu->pin_budget; i++)
    trim(cpu, &cpu->pinned[i], 0, cpu->pinned[i].bytes / page);
  pthread_mutex_unlock(&cpu->pin_mu);
  return rc;
}

static char *cpu_reserve(Device *dev, int64_t bytes) {
  CpuDevice *cpu = (CpuDevice *)dev;
  void *p = mmap(NULL, (size_t)bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  if (!cpu->pin) return p;
  int64_t words = (bytes + dev->granule - 1) / dev->granule / 64 + 1;
  CpuPinned *v = realloc(cpu->pinned, (size_t)(cpu->npinned + 1) * sizeof *v);
  uint64_t *used = calloc((size_t)words, sizeof *used), *res = calloc((size_t)words, sizeof *res);
  if (v) cpu->pinned = v;
  if (!v || !used || !res) {
    free(used), free(res);
    munmap(p, (size_t)bytes);
    return NULL;
  }
  pthread_mutex_lock(&cpu->pin_mu);
  cpu->pinned[cpu->npinned++] = (CpuPinned){p, bytes, used, res};
  pthread_mutex_unlock(&cpu->pin_mu);
  return p;
}

static int cpu_commit(Device *dev, char *base, int64_t offset, int64_t bytes) {
  CpuDevice *cpu = (CpuDevice *)dev;
  if (cpu->pin) return pinned_commit(cpu, base, offset, bytes, 1);
  return mprotect(base + offset, (size_t)bytes, PROT_READ | PROT_WRITE);
}

static void cpu_decommit(Device *dev, char *base, int64_t offset, int64_t bytes) {
  CpuDevice *cpu = (CpuDevice *)dev;
  if (cpu->pin) {
    pinned_commit(cpu, base, offset, bytes, 0);
    return;
  }
  madvise(base + offset, (size_t)bytes, MADV_DONTNEED);
  mprotect(base + offset, (size_t)bytes, PROT_NONE);
}

static void cpu_unreserve(Device *dev, char *base, int64_t bytes) {
  CpuDevice *cpu = (CpuDevice *)dev;
  pthread_mutex_lock(&cpu->pin_mu);
  CpuPinned *r = cpu->pin ? find_pinned(cpu, base) : NULL;
  for (int64_t blk = 0; r && blk * CPU_PIN_BLOCK < r->bytes; blk++) pin_block(cpu, r, blk, 0);
  for (int64_t i = 0; r && i < r->bytes / dev->granule; i++) cpu->resident -= bit(r->res, i) * dev->granule;
  if (r) {
    free(r->used), free(r->res);
    *r = cpu->pinned[--cpu->npinned];
  }
  pthread_mutex_unlock(&cpu->pin_mu);
  munmap(base, (size_t)bytes);
}

void device_cpu_pin_through(Device *dev, Device *gpu, int64_t budget) {
  CpuDevice *cpu = (CpuDevice *)dev;
  cpu->pin = gpu && gpu->host_pin && gpu->host_unpin ? gpu : NULL;
  cpu->pin_budget = budget;
}

static void cpu_destroy(Device *dev) {
  CpuDevice *cpu = (CpuDevice *)dev;
  pool_free(cpu->pool);
  pthread_mutex_destroy(&cpu->pin_mu);
  free(cpu->pinned);
  free(cpu->scratch);
  free(cpu);
}

Device *device_cpu_new(const ProgKernelFn *kernels, int nkernels, int threads, char *err, size_t errlen) {
  CpuDevice *cpu = calloc(1, sizeof *cpu);
  if (!cpu) {
    file_set_error(err, errlen, "out of memory");
    return NULL;
  }
  if (!(cpu->pool = pool_new(threads, err, errlen))) {
    free(cpu);
    return NULL;
  }
  openblas_set_num_threads(1); /* the pool splits each GEMM (pool_gemm) */
  pthread_mutex_init(&cpu->pin_mu, NULL);
  cpu->kernels = kernels;
  cpu->nkernels = nkernels;
  cpu->dev = (Device){.name = "cpu",
                      .impl = cpu,
                      .alloc = cpu_alloc,
                      .free = cpu_free,
                      .kernel = cpu_kernel,
                      .zero = cpu_zero,
                      .gemm = cpu_gemm,
                      .upload = cpu_upload,
                      .copy = cpu_copy,
                      .download = cpu_download,
                      .sync = cpu_sync,
                      .host_view = cpu_host_view,
                      .destroy = cpu_destroy,
                      .mark = cpu_mark,
                      .await = cpu_await,
                      .xfer = cpu_xfer,
                      .granule = sysconf(_SC_PAGESIZE),
                      .reserve = cpu_reserve,
                      .commit = cpu_commit,
                      .decommit = cpu_decommit,
                      .unreserve = cpu_unreserve};
  return &cpu->dev;
}
