/* colossalc-calibrate: this machine measured as a cluster file (docs/plan.md,
 * "Calibration"), which `colossalc --calibrate -o FILE` runs.
 *
 *   colossalc-calibrate -o FILE [--mpirun "CMD"] [--dir DIR] [--ranks N]
 *   colossalc-calibrate --comm OUT        (a rank of the collectives' measurement)
 *
 * It measures what the cost model reads, through the runtime `train` uses (the CPU
 * device, its OpenBLAS GEMMs and thread pool, the MPI backend):
 *   - the GEMM rate over shapes, fitted to the cost model's curve
 *     rate = peak x gemm_efficiency x g(m) g(n) g(k), g(x) = x / (x + gemm_half_dim);
 *   - the memory bandwidth of a streaming kernel on every thread, the launch overhead
 *     of a kernel on the device's thread pool, and the rate of fresh pages (memory
 *     committed behind reserved address space, written once and decommitted);
 *   - the GEMMs, the streaming kernel and the launch in rounds, each figure its fastest
 *     round's: the machine as it runs uncontended (a shared host's neighbours only slow
 *     it, for seconds at a time);
 *   - the collectives programs issue among ranks of this machine (mpirun, started here),
 *     each kind's time by size as measured, and the all-reduce's fitted to the ring (the
 *     latency of a step, the bandwidth of a rank) for the links' own figures;
 *   - host-to-device copies (a memcpy on this device) and a file's write and read
 *     bandwidth in DIR (the NVMe of offload's --nvme-dir);
 *   - the threads and the memory.
 * The file describes the whole machine as the device with "shares_host": ranks that
 * share it split its figures (plan/cluster.h), as train splits its threads.
 *
 * With --device cuda (the default where a GPU is visible) it measures the GPU the same
 * way through the CUDA device train runs (runtime/device/cuda.h), on a program of its
 * own (a streaming kernel, an empty one and the GEMMs' shapes, which the device plans
 * at start-up as it does a compiled program's): the GEMM curve in f32, bf16 and fp16,
 * the streaming kernel, a queued launch, pinned host-to-device copies, pages mapped
 * and unmapped, and the collectives over NCCL among this machine's GPUs (when it has two
 * or more). The file starts from the built-in profile of the GPU ("base") for what is not
 * measured (the network, fp8, attention's efficiency), one GPU a rank.
 * --quick measures the same things on small buffers and shapes, in one round: a check of
 * the mechanism (the tests, the emulated GPU), not figures to plan with. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "plan/cluster.h"
#include "program/program.h"
#include "runtime/comm/comm.h"
#include "runtime/executor.h"
#ifdef COLOSSALC_HAVE_CUDA
#include "runtime/device/cuda.h"
#include "runtime/device/cuda_api.h"
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "colossalc-calibrate: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

/* ---- the device: GEMMs, a streaming kernel, a kernel's launch ---------------------------- */

/* buf[0] = buf[1] + buf[2] over [lo, hi) of floats: a memory-bound kernel. */
static void stream_kernel(char *const *bufs, int64_t lo, int64_t hi, const float *scalars) {
  (void)scalars;
  float *a = (float *)bufs[0];
  const float *b = (const float *)bufs[1], *c = (const float *)bufs[2];
  for (int64_t i = lo; i < hi; i++) a[i] = b[i] + c[i];
}

static void empty_kernel(char *const *bufs, int64_t lo, int64_t hi, const float *scalars) {
  (void)bufs, (void)lo, (void)hi, (void)scalars;
}

static const ProgKernelFn kernels[] = {stream_kernel, empty_kernel};

/* The same two kernels for the CUDA device, as colossalc emits its kernels: a prelude,
 * then one unit a kernel after a form feed, each over [0, n) in a grid-stride loop
 * (cuda_kernels.h). */
static const char cuda_source[] =
    "struct cc_bufs { char *p[16]; };\n"
    "\fextern \"C\" __global__ void calibrate_stream(const cc_bufs bufs, long long n, const float *scalars) {\n"
    "  float *a = (float *)bufs.p[0];\n"
    "  const float *b = (const float *)bufs.p[1], *c = (const float *)bufs.p[2];\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x)\n"
    "    a[i] = b[i] + c[i];\n"
    "}\n"
    "\fextern \"C\" __global__ void calibrate_empty(const cc_bufs bufs, long long n, const float *scalars) {}\n";

/* The median of t[0..n), which it leaves sorted. */
static double median(double *t, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: a few values */
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
      double x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  return t[n / 2];
}

/* The least and the greatest of t[0..n). */
static double least(const double *t, int n) {
  double m = t[0];
  for (int i = 1; i < n; i++) m = fmin(m, t[i]);
  return m;
}

static double greatest(const double *t, int n) {
  double m = t[0];
  for (int i = 1; i < n; i++) m = fmax(m, t[i]);
  return m;
}

/* Seconds of one call of fn, run until at least `least` seconds have passed (3 calls at
 * least, after one to warm up): the median of the calls. */
typedef void (*Work)(void *arg);
static double timed(Work fn, void *arg, double least) {
  double t[64];
  int n = 0;
  fn(arg);
  for (double start = now(); n < 64 && (n < 3 || now() - start < least); n++) {
    double t0 = now();
    fn(arg);
    t[n] = now() - t0;
  }
  return median(t, n);
}

typedef struct GemmRun {
  Device *dev;
  char *tiers[3];
  IsaGemm g;
} GemmRun;

static void run_gemm(void *arg) {
  GemmRun *r = arg;
  r->dev->gemm(r->dev, &r->g, r->tiers);
  r->dev->sync(r->dev);
}

typedef struct KernelRun {
  Device *dev;
  int id, launches; /* launches queued before the one sync */
  int64_t extent;
  char *bufs[PROG_MAX_ARGS];
} KernelRun;

static void run_kernel(void *arg) {
  KernelRun *r = arg;
  float sc[SC_COUNT] = {0};
  for (int i = 0; i < r->launches; i++) r->dev->kernel(r->dev, r->id, r->extent, r->bufs, sc);
  r->dev->sync(r->dev);
}

typedef struct CopyRun {
  Device *dev;
  char *dst;
  const char *src;
  int64_t bytes;
} CopyRun;

static void run_upload(void *arg) {
  CopyRun *r = arg;
  r->dev->upload(r->dev, r->dst, 0, r->src, r->bytes);
  r->dev->sync(r->dev);
}

/* Memory put behind reserved address space, written once by a kernel and taken back:
 * what ZeRO-3's gathers and the offload's moves do to their pages each step. */
typedef struct CommitRun {
  Device *dev;
  char *base, *src;
  int64_t bytes;
  int commit; /* 0: the same kernel on memory already committed */
} CommitRun;

static void run_commit(void *arg) {
  CommitRun *r = arg;
  if (r->commit && r->dev->commit(r->dev, r->base, 0, r->bytes) != 0) die("out of memory for the commits");
  char *bufs[PROG_MAX_ARGS] = {r->base, r->src, r->src};
  float sc[SC_COUNT] = {0};
  r->dev->kernel(r->dev, 0, r->bytes / 4, bufs, sc); /* the streaming kernel: each page written first */
  r->dev->sync(r->dev);
  if (r->commit) r->dev->decommit(r->dev, r->base, 0, r->bytes);
}

enum { NSHAPES = 14, ROUNDS = 7, NDTYPES = 3 };
static const int64_t shapes[NSHAPES][3] = {{2048, 2048, 2048}, {1024, 1024, 1024}, {512, 512, 512},  {256, 256, 256},
                                           {128, 128, 128},    {64, 64, 64},       {4096, 768, 768}, {4096, 3072, 768},
                                           {4096, 768, 3072},  {768, 768, 4096},   {2048, 64, 2048}, {2048, 2048, 64},
                                           {32, 2048, 2048},   {8192, 128, 512}};
/* The GEMMs' precisions: f32 on every device (without TF32: the profiles' peak_fp32),
 * bf16 and fp16 (16-bit in and out, f32 sums, as the programs' GEMMs) on a GPU. */
static const IsaDtype gemm_dtypes[NDTYPES] = {ISA_F32, ISA_BF16, ISA_F16};
static const char *const dtype_names[NDTYPES] = {"f32", "bf16", "fp16"};

typedef struct Fit {
  double peak, half; /* rate = peak g(m) g(n) g(k) */
  double err;        /* rms of log(model / measured) */
} Fit;

static double g_of(double x, double h) { return x / (x + h); }

/* The shapes the measurement takes: the list above, or with --quick an eighth on each
 * side (at least 8). */
static int64_t dim(int quick, int64_t d) { return quick ? (d / 8 > 8 ? d / 8 : 8) : d; }

/* Shape i in precision d: C[m, n] = A[m, k] B[k, n] on tiers 0, 1 and 2 at offset 0. */
static IsaGemm gemm_of(int quick, int d, int i) {
  int64_t m = dim(quick, shapes[i][0]), n = dim(quick, shapes[i][1]), k = dim(quick, shapes[i][2]);
  return (IsaGemm){.m = m,
                   .n = n,
                   .k = k,
                   .lda = k,
                   .ldb = n,
                   .ldc = n,
                   .alpha = 1,
                   .tier = {0, 1, 2},
                   .batch = {1, 1},
                   .dt = {gemm_dtypes[d], gemm_dtypes[d], gemm_dtypes[d]}};
}

/* The half-dimension h of g and the peak (in log space, its best for each h) closest to
 * the rates measured. */
static Fit fit_gemm(const double *rate, int quick) {
  Fit best = {0, 0, INFINITY};
  for (double h = 1; h <= 1024; h *= 1.05) {
    double s = 0, e = 0, g[NSHAPES];
    for (int i = 0; i < NSHAPES; i++) {
      g[i] = g_of(dim(quick, shapes[i][0]), h) * g_of(dim(quick, shapes[i][1]), h) * g_of(dim(quick, shapes[i][2]), h);
      s += log(rate[i] / g[i]);
    }
    double lp = s / NSHAPES;
    for (int i = 0; i < NSHAPES; i++) {
      double d = lp + log(g[i]) - log(rate[i]);
      e += d * d;
    }
    e = sqrt(e / NSHAPES);
    if (e < best.err) best = (Fit){exp(lp), h, e};
  }
  return best;
}

/* The sizes in floats: a library changes its algorithm with the size (Open MPI's reduce,
 * reduce-scatter and all-reduce slow down several times past a few MiB), so each kind is
 * kept as its curve (plan/cluster.h, CollCurve). */
enum { NSIZES = 11 };
static const int64_t comm_sizes[NSIZES] = {1 << 8,  1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18,
                                           1 << 20, 1 << 22, 1 << 23, 1 << 24, 1 << 25};
/* The floats a rank cycles its collectives through (two windows of the largest size's two
 * buffers), so that each finds its data in memory rather than in the caches, as a
 * program's do (a gradient or parameter the step has left behind it); --quick: the first
 * QUICK_SIZES sizes on a small pool. */
enum { POOL = 1 << 27, QUICK_POOL = 1 << 20, QUICK_SIZES = 6 };

typedef struct Figures {
  int threads, quick, gpu; /* gpu: the CUDA device measured */
  double ram;
  Fit gemm[NDTYPES]; /* by gemm_dtypes; a CPU's f32 alone */
  double stream_bw, launch, upload_bw, commit_bw;
  double nvme_write, nvme_read, nvme_free;
  double ar_bw, ar_lat;              /* the link's figures: the all-reduce's, in the ring's terms */
  double coll_s[COLL_COUNT][NSIZES]; /* each measured kind's seconds at comm_sizes */
  int nsizes;
  int ranks;
  char cpu[96];
  /* the GPU's */
  char gpu_name[128];
  double gpu_memory;
  int gpus, cc_major;
} Figures;

#ifdef COLOSSALC_HAVE_CUDA
/* The calibration's program for the CUDA device: its two kernels (cuda_source; grid
 * blocks of 256 threads) and, with gemms, every GEMM it times, in f32, bf16 and fp16, on
 * tiers 0 to 2 at offset 0 (the device plans each shape at start-up, as a compiled
 * program's). One record, the model's: a program of no stage. The blob is malloc'd. */
static void *calibration_program(int quick, int gemms, int64_t grid, Prog *p) {
  ProgBuild *b = prog_build_new();
  if (!b) die("out of memory");
  const char *names[2] = {"calibrate_stream", "calibrate_empty"};
  for (int i = 0; i < 2; i++) {
    ProgCode c = {prog_build_str(b, names[i]), 256, grid};
    ProgKernel k = {i, prog_build_count(b, PROG_SEC_ARGS), 0};
    prog_build_add(b, PROG_SEC_CODES, &c, 1);
    prog_build_add(b, PROG_SEC_KERNELS, &k, 1);
  }
  for (int d = 0; d < (gemms ? NDTYPES : 0); d++)
    for (int i = 0; i < NSHAPES; i++) {
      IsaInstr in = {.op = ISA_GEMM, .dp_rank = -1, .tp_rank = -1, .node = -1, .gemm = gemm_of(quick, d, i)};
      prog_build_add(b, PROG_SEC_INSTRS, &in, 1);
    }
  ProgStage s = {.model = prog_build_str(b, "calibration"), .stage = -1, .slots = 1, .tokens = -1, .targets = -1};
  for (int k = 0; k < PROG_NLISTS; k++) s.list[k] = -1;
  s.no_sample = -1;
  prog_build_add(b, PROG_SEC_STAGES, &s, 1);
  int64_t bytes;
  void *blob = prog_build_finish(b, &bytes);
  char err[256];
  if (!blob || prog_open(blob, bytes, p, err, sizeof err) != 0)
    die("the calibration's program: %s", blob ? err : "out of memory");
  return blob;
}

/* The GPU of ordinal (the local rank), NCCL loaded where ranks > 1. */
static Device *open_cuda(const Prog *p, int ordinal, int ranks, int threads) {
  char err[512];
  CudaOptions o = {.ordinal = ordinal, .local_ranks = ranks, .threads = threads, .quiet = 1, .nccl = ranks > 1};
  Device *dev = device_cuda_new(p, cuda_source, &o, err, sizeof err);
  if (!dev) die("%s", err);
  return dev;
}
#endif

/* The streaming kernel's buffers (3 x 128 MiB, or 256 on a GPU: beyond the caches). */
static int64_t stream_elems(const Figures *f) { return f->quick ? 1 << 20 : f->gpu ? 64 << 20 : 32 << 20; }

/* Rounds of every GEMM shape (in each precision), of the streaming kernel on kr's
 * buffers and of an empty kernel's launch, each figure its fastest round's: a shared
 * host's neighbours slow it for seconds at a time (one step of the same program took
 * 364 to 708 ms within a minute here), never speed it up, so the fastest round is the
 * machine's own speed and a median would be the neighbours' share of it. On the CPU
 * device a kernel runs to its end on the thread pool, so a launch is timed with its
 * sync; a GPU queues launches, so 64 are timed behind one sync. */
static void measure_rounds(Figures *f, Device *dev, int ndt, KernelRun *kr) {
  GemmRun gr = {.dev = dev};
  int64_t most = dim(f->quick, 4096) * dim(f->quick, 3072);
  for (int i = 0; i < 3; i++) {
    if (!(gr.tiers[i] = dev->alloc(dev, most * 4))) die("out of memory for the GEMMs");
    dev->zero(dev, gr.tiers[i], 0, most * 4); /* no NaN or denormal operands */
  }
  int rounds = f->quick ? 1 : ROUNDS;
  static double t[NDTYPES][NSHAPES][ROUNDS], bw[ROUNDS], launch[ROUNDS];
  KernelRun er = {.dev = dev, .id = 1, .launches = f->gpu ? 64 : 1, .extent = 1 << 16};
  memcpy(er.bufs, kr->bufs, sizeof er.bufs);
  for (int r = 0; r < rounds; r++) {
    bw[r] = 3.0 * 4 * (double)kr->extent / timed(run_kernel, kr, f->quick ? 0 : 0.1);
    launch[r] = timed(run_kernel, &er, f->quick ? 0 : 0.02) / er.launches;
    for (int d = 0; d < ndt; d++)
      for (int i = 0; i < NSHAPES; i++) {
        gr.g = gemm_of(f->quick, d, i);
        t[d][i][r] = 2.0 * (double)gr.g.m * (double)gr.g.n * (double)gr.g.k / timed(run_gemm, &gr, f->quick ? 0 : 0.05);
      }
  }
  f->stream_bw = greatest(bw, rounds), f->launch = least(launch, rounds);
  for (int d = 0; d < ndt; d++) {
    double rate[NSHAPES];
    for (int i = 0; i < NSHAPES; i++) {
      rate[i] = greatest(t[d][i], rounds);
      fprintf(stderr, "  gemm %-4s %5lld x %5lld x %5lld %10.1f GFLOP/s (rounds %.1f to %.1f)\n", dtype_names[d],
              (long long)dim(f->quick, shapes[i][0]), (long long)dim(f->quick, shapes[i][1]),
              (long long)dim(f->quick, shapes[i][2]), rate[i] / 1e9, least(t[d][i], rounds) / 1e9, rate[i] / 1e9);
    }
    f->gemm[d] = fit_gemm(rate, f->quick);
    fprintf(stderr, "  GEMM fit %s: %.1f GFLOP/s x g(m) g(n) g(k), g(x) = x / (x + %.0f) (rms error %.0f%%)\n",
            dtype_names[d], f->gemm[d].peak / 1e9, f->gemm[d].half, 100 * (exp(f->gemm[d].err) - 1));
  }
  for (int i = 0; i < 3; i++) dev->free(dev, gr.tiers[i]);
}

/* Host-to-device copies and fresh pages (kr: the streaming kernel on its buffers, which
 * it frees). */
static void measure_memory(Figures *f, Device *dev, KernelRun *kr) {
  int64_t elems = kr->extent;
  char *host = exec_host_alloc(dev, elems * 4); /* pinned where the device pins */
  if (!host) die("out of memory for the copies");
  memset(host, 1, (size_t)elems * 4);
  CopyRun cr = {dev, kr->bufs[0], host, elems * 4};
  f->upload_bw = (double)cr.bytes / timed(run_upload, &cr, f->quick ? 0 : 0.2);
  exec_host_free(dev, host);
  for (int i = 0; i < 3; i++) dev->free(dev, kr->bufs[i]);
  /* a commit's cost: the kernel on fresh pages, committed and decommitted around it, less
   * the same kernel on pages kept (64 MiB: ZeRO-3 gathers a layer's weights at a time) */
  CommitRun cm = {.dev = dev, .bytes = f->quick ? 4 << 20 : 64 << 20, .commit = 1};
  if (!(cm.base = dev->reserve(dev, cm.bytes))) die("cannot reserve address space for the commits");
  if (!(cm.src = dev->alloc(dev, cm.bytes))) die("out of memory for the commits");
  dev->zero(dev, cm.src, 0, cm.bytes);
  double fresh = timed(run_commit, &cm, f->quick ? 0 : 0.3);
  cm.commit = 0;
  if (dev->commit(dev, cm.base, 0, cm.bytes) != 0) die("out of memory for the commits");
  double kept = timed(run_commit, &cm, f->quick ? 0 : 0.3);
  dev->decommit(dev, cm.base, 0, cm.bytes);
  dev->unreserve(dev, cm.base, cm.bytes);
  dev->free(dev, cm.src);
  f->commit_bw = (double)cm.bytes / fmax(fresh - kept, 1e-9);
  fprintf(stderr,
          "  streaming kernel %.1f GB/s, kernel launch %.1f us, host to device %.1f GB/s, pages committed and "
          "released %.2f GB/s\n",
          f->stream_bw / 1e9, f->launch * 1e6, f->upload_bw / 1e9, f->commit_bw / 1e9);
}

static void measure_device(Figures *f) {
  char err[256];
  Device *dev = NULL;
  void *blob = NULL;
#ifdef COLOSSALC_HAVE_CUDA
  Prog p;
  if (f->gpu) {
    blob = calibration_program(f->quick, 1, f->quick ? 8 : 2048, &p);
    dev = open_cuda(&p, 0, 1, f->threads);
  }
#endif
  if (!dev && !(dev = device_cpu_new(kernels, 2, f->threads, err, sizeof err))) die("%s", err);
  KernelRun kr = {.dev = dev, .id = 0, .launches = 1, .extent = stream_elems(f)};
  for (int i = 0; i < 3; i++) {
    if (!(kr.bufs[i] = dev->alloc(dev, kr.extent * 4))) die("out of memory for the streaming kernel");
    dev->zero(dev, kr.bufs[i], 0, kr.extent * 4);
  }
  measure_rounds(f, dev, f->gpu ? NDTYPES : 1, &kr);
  measure_memory(f, dev, &kr);
  dev->destroy(dev);
  free(blob);
}

/* ---- a file's bandwidth ---------------------------------------------------------------- */

static void measure_file(Figures *f, const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/colossalc-calibrate.%d", dir, (int)getpid());
  int64_t bytes = f->quick ? 16 << 20 : 256 << 20, chunk = f->quick ? 1 << 20 : 8 << 20;
  char *buf = malloc((size_t)chunk);
  if (!buf) die("out of memory for the file");
  memset(buf, 7, (size_t)chunk);
  int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
  if (fd < 0) die("cannot write in %s (--dir)", dir);
  double t0 = now();
  for (int64_t done = 0; done < bytes; done += chunk)
    if (write(fd, buf, (size_t)chunk) != chunk) die("writing %s failed", path);
  if (fsync(fd) != 0) die("syncing %s failed", path);
  f->nvme_write = (double)bytes / (now() - t0);
  posix_fadvise(fd, 0, bytes, POSIX_FADV_DONTNEED); /* read from the drive, not the page cache */
  lseek(fd, 0, SEEK_SET);
  t0 = now();
  for (int64_t done = 0; done < bytes; done += chunk)
    if (read(fd, buf, (size_t)chunk) != chunk) die("reading %s failed", path);
  f->nvme_read = (double)bytes / (now() - t0);
  close(fd);
  unlink(path);
  free(buf);
  struct statvfs v;
  f->nvme_free = statvfs(dir, &v) == 0 ? (double)v.f_bavail * (double)v.f_frsize : 0;
  fprintf(stderr, "  file in %s: write %.2f GB/s, read %.2f GB/s, %.0f GiB free\n", dir, f->nvme_write / 1e9,
          f->nvme_read / 1e9, f->nvme_free / (1 << 30));
}

/* ---- collectives among the ranks of this machine ----------------------------------------- */

static const char *coll_name(int k) {
  static const char *const names[COLL_COUNT] = {
#define X(kind, name) name,
      COLL_KINDS(X)
#undef X
  };
  return names[k];
}

/* Whether kind k is measured: what programs issue (the comm instructions of program/isa.h,
 * send and receive between stages): all of them. */
static int measured(CollKind k) { return k < COLL_COUNT; }

/* One collective of kind k whose whole tensor (as plan/cost.h counts it) is n floats at
 * buf, a second n floats after it for an output apart; the r-th of its round (the roots
 * take turns, as the owners of a program's parameters do). Send/recv: from each even rank
 * to the next. */
static void run_kind(Comm *c, CollKind k, float *buf, int64_t n, int r) {
  int64_t part = n / c->size;
  switch (k) {
  case COLL_ALL_REDUCE: c->all_reduce(c, buf, buf, n, COMM_SUM); break;
  case COLL_REDUCE: c->reduce(c, buf, buf, n, COMM_SUM, r % c->size); break;
  case COLL_BROADCAST: c->broadcast(c, buf, n, r % c->size); break;
  case COLL_ALL_GATHER: c->all_gather(c, buf + n + c->rank * part, buf, part); break;
  case COLL_REDUCE_SCATTER: c->reduce_scatter(c, buf, buf + n, part, COMM_SUM); break;
  case COLL_SEND_RECV:
    if (c->rank % 2 == 0 && c->rank + 1 < c->size) c->send(c, buf, n, c->rank + 1);
    else if (c->rank % 2) c->recv(c, buf, n, c->rank - 1);
    break;
  case COLL_ALL_TO_ALL: c->all_to_all(c, buf, buf + n, part / c->size); break;
  case COLL_COUNT: break;
  }
}

/* A rank of `mpirun -np N colossalc-calibrate --comm OUT [--quick] [--device cuda]`: rank 0
 * writes each measured kind's seconds at each size (the ranks' slowest) to OUT, a line
 * "kind floats seconds" each. On GPUs the collectives are NCCL's on the device's stream
 * (device_cuda_comm), each rank on the GPU of its local rank. */
static int comm_rank(int argc, char **argv, const char *out, int gpu, int quick) {
  char err[256];
  Comm *c = comm_open(&argc, &argv, err, sizeof err);
  if (!c) die("%s", err);
  Comm *g = c;
  Device *dev = NULL;
  void *blob = NULL;
  int64_t pool = quick ? QUICK_POOL : POOL, nsizes = quick ? QUICK_SIZES : NSIZES;
  float *buf;
#ifdef COLOSSALC_HAVE_CUDA
  Prog p;
  if (gpu) {
    blob = calibration_program(1, 0, 8, &p);
    dev = open_cuda(&p, c->local_rank, c->local_size, 1);
    g = device_cuda_comm(dev, c, 0);
  }
#endif
  (void)gpu;
  buf = dev ? (float *)dev->alloc(dev, pool * 4) : calloc((size_t)pool, sizeof *buf);
  if (!buf) die("out of memory for the collectives");
  if (dev) dev->zero(dev, (char *)buf, 0, pool * 4);
  double t[COLL_COUNT][NSIZES];
  for (int k = 0; k < COLL_COUNT; k++)
    for (int i = 0; i < nsizes && measured(k); i++) { /* every rank makes the same calls: counts fixed by the size */
      int64_t n = comm_sizes[i], windows = pool / (2 * n);
      int reps = quick ? 3 : n >= 1 << 23 ? 3 : n >= 1 << 20 ? 10 : 100, rounds = quick ? 1 : 3, at = 0;
      double round[3];
      run_kind(g, k, buf, n, 0);
      for (int r = 0; r < rounds; r++) { /* the fastest round, as measure_rounds */
        if (dev) dev->sync(dev);
        c->barrier(c);
        double t0 = now();
        for (int q = 0; q < reps; q++, at = (at + 1) % windows) run_kind(g, k, buf + at * 2 * n, n, q);
        if (dev) dev->sync(dev);
        round[r] = (now() - t0) / reps;
      }
      t[k][i] = least(round, rounds);
    }
  for (int k = 0; k < COLL_COUNT; k++)
    if (measured(k)) c->host_all_reduce(c, t[k], (int)nsizes, COMM_MAX);
  if (c->rank == 0) {
    FILE *f = fopen(out, "w");
    if (!f) die("cannot write %s", out);
    for (int k = 0; k < COLL_COUNT; k++)
      for (int i = 0; i < nsizes && measured(k); i++)
        fprintf(f, "%d %lld %.9g\n", k, (long long)comm_sizes[i], t[k][i]);
    fclose(f);
  }
  if (dev) {
    dev->free(dev, (char *)buf);
    g->destroy(g);
    dev->destroy(dev);
  } else free(buf);
  free(blob);
  c->destroy(c);
  return 0;
}

/* Each measured kind's seconds by size, as the cost model reads them (plan/cluster.h,
 * CollCurve: the whole tensor's bytes), made non-decreasing (a larger collective is not
 * faster; a smaller size's round can be the slower one on a busy machine). The link's own
 * figures (the kinds not measured, and between nodes) are the all-reduce's fitted to the
 * ring's terms by least squares: 2(n-1) steps of latency and 2(n-1)/n of the bytes over a
 * rank's bandwidth. */
static void measure_comm(Figures *f, const char *self, const char *mpirun) {
  char out[512], cmd[16384];
  snprintf(out, sizeof out, "/tmp/colossalc-calibrate-comm.%d", (int)getpid());
  int n = f->ranks;
  f->nsizes = f->quick ? QUICK_SIZES : NSIZES;
  snprintf(cmd, sizeof cmd, "%s -np %d '%s' --comm '%s'%s%s > /dev/null", mpirun, n, self, out,
           f->gpu ? " --device cuda" : "", f->quick ? " --quick" : "");
  if (system(cmd) != 0) die("the collectives' ranks failed: %s", cmd);
  FILE *in = fopen(out, "r");
  if (!in) die("no collective times in %s", out);
  for (int k = 0; k < COLL_COUNT; k++) {
    if (!measured(k)) continue;
    fprintf(stderr, "  %-14s over %d %s:", coll_name(k), n, f->gpu ? "GPUs" : "ranks");
    for (int i = 0; i < f->nsizes; i++) {
      long long sz;
      int kind;
      double *y = &f->coll_s[k][i];
      if (fscanf(in, "%d %lld %lf", &kind, &sz, y) != 3 || kind != k || sz != comm_sizes[i])
        die("bad collective times in %s", out);
      if (i > 0 && *y < y[-1]) *y = y[-1];
      fprintf(stderr, "%s %lld %.0f us", i % 6 ? "," : "\n   ", sz, *y * 1e6);
    }
    fprintf(stderr, " (floats)\n");
  }
  fclose(in);
  unlink(out);
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < f->nsizes; i++) {
    double x = 4.0 * (double)comm_sizes[i] * 2 * (n - 1) / n, y = f->coll_s[COLL_ALL_REDUCE][i];
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  double b = (f->nsizes * sxy - sx * sy) / (f->nsizes * sxx - sx * sx), a = (sy - b * sx) / f->nsizes;
  f->ar_bw = b > 0 ? 1 / b : 1e12;
  f->ar_lat = a > 0 ? a / (2.0 * (n - 1)) : 1e-7;
  fprintf(stderr, "  all-reduce fitted: %.2f GB/s a rank, %.1f us a ring step\n", f->ar_bw / 1e9, f->ar_lat * 1e6);
}

/* ---- the file -------------------------------------------------------------------------------- */

static void cpu_name(char *dst, size_t len) {
  snprintf(dst, len, "this machine's CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
      char *v = strchr(line, ':') + 1;
      while (*v == ' ') v++;
      v[strcspn(v, "\n\"\\")] = 0;
      snprintf(dst, len, "%s", v);
      break;
    }
  if (f) fclose(f);
}

/* The built-in profile a GPU's file starts from (plan/cluster.c): by its name, else by
 * its architecture. */
static const char *gpu_base(const Figures *f) {
  if (strstr(f->gpu_name, "H200")) return "h200";
  if (strstr(f->gpu_name, "H100") || strstr(f->gpu_name, "H800")) return "h100-sxm";
  if (strstr(f->gpu_name, "A100") || strstr(f->gpu_name, "A800"))
    return f->gpu_memory > 48.0 * (1 << 30) ? "a100-80g" : "a100-40g";
  if (strstr(f->gpu_name, "3090")) return "rtx3090";
  return f->cc_major >= 9 ? "h100-sxm" : "a100-80g";
}

/* The end of a link's object: inside a node (intra) each measured kind, as measured
 * (plan/cluster.h, Cluster.coll). */
static void write_coll(const Figures *f, int intra, FILE *o) {
  if (intra && f->ranks > 1) {
    fprintf(o, ",\n    \"collectives\": {\"ranks\": %d", f->ranks);
    for (int k = 0; k < COLL_COUNT; k++)
      for (int i = 0; i < f->nsizes && measured(k); i++) {
        if (i == 0) fprintf(o, ",\n      \"%s\": [", coll_name(k));
        fprintf(o, "[%lld, %.4g]%s", 4LL * comm_sizes[i], f->coll_s[k][i] * 1e6, i + 1 < f->nsizes ? ", " : "]");
      }
    fprintf(o, "}");
  }
  fprintf(o, "},\n");
}

static void write_cpu(const Figures *f, FILE *o) {
  double peak = f->gemm[0].peak / 1e12, host_gib = f->ram / (1 << 30);
  fprintf(o, "{\n  \"name\": \"%s, %d threads (calibrated)\",\n  \"base\": \"cpu\",\n", f->cpu, f->threads);
  fprintf(
      o,
      "  \"device\": {\n    \"part\": \"%s\", \"shares_host\": true, \"fp32_only\": true,\n"
      "    \"peak_fp32_tflops\": %.6g, \"peak_bf16_tflops\": %.6g, \"peak_fp16_tflops\": %.6g,\n"
      "    \"gemm_efficiency\": 1, \"gemm_half_dim\": %.4g,\n"
      "    \"memory_gib\": %.4g, \"reserved_gib\": %.4g, \"memory_bandwidth_gbs\": %.4g, \"memory_efficiency\": 1,\n"
      "    \"kernel_overhead_us\": %.4g, \"commit_bandwidth_gbs\": %.4g\n  },\n",
      f->cpu, peak, peak, peak, f->gemm[0].half, host_gib, host_gib * 0.1, f->stream_bw / 1e9, f->launch * 1e6,
      f->commit_bw / 1e9);
  for (int i = 0; i < 2; i++) {
    fprintf(o,
            "  \"%s\": {\"name\": \"shared memory (MPI, measured)\", \"bandwidth_gbs\": %.4g, \"latency_us\": %.4g, "
            "\"efficiency\": 1",
            i ? "inter_node" : "intra_node", f->ar_bw / 1e9, f->ar_lat * 1e6);
    write_coll(f, i == 0, o);
  }
  double nvme = f->nvme_write < f->nvme_read ? f->nvme_write : f->nvme_read;
  fprintf(o,
          "  \"host\": {\"memory_gib\": %.4g, \"link_bandwidth_gbs\": %.4g, \"memory_bandwidth_gbs\": %.4g,\n"
          "           \"nvme_bandwidth_gbs\": %.4g, \"nvme_gib\": %.4g}\n}\n",
          host_gib, f->upload_bw / 1e9, f->stream_bw / 1e9, nvme / 1e9, f->nvme_free / (1 << 30));
}

/* A GPU's file: its profile as the base, then what was measured. The bf16 curve's
 * half-dimension (plans train in bf16); the link between GPUs where two or more were
 * measured, else the profile's. */
static void write_gpu(const Figures *f, FILE *o) {
  fprintf(o, "{\n  \"name\": \"%s (calibrated)\",\n  \"base\": \"%s\",\n  \"gpus_per_node\": %d,\n", f->gpu_name,
          gpu_base(f), f->gpus);
  fprintf(o,
          "  \"device\": {\n    \"part\": \"%s\", \"shares_host\": false, \"fp32_only\": false,\n"
          "    \"peak_fp32_tflops\": %.6g, \"peak_bf16_tflops\": %.6g, \"peak_fp16_tflops\": %.6g,\n"
          "    \"gemm_efficiency\": 1, \"gemm_half_dim\": %.4g,\n"
          "    \"memory_gib\": %.4g, \"memory_bandwidth_gbs\": %.4g, \"memory_efficiency\": 1,\n"
          "    \"kernel_overhead_us\": %.4g, \"commit_bandwidth_gbs\": %.4g\n  },\n",
          f->gpu_name, f->gemm[0].peak / 1e12, f->gemm[1].peak / 1e12, f->gemm[2].peak / 1e12, f->gemm[1].half,
          f->gpu_memory / (1 << 30), f->stream_bw / 1e9, f->launch * 1e6, f->commit_bw / 1e9);
  if (f->ranks > 1) {
    fprintf(o,
            "  \"intra_node\": {\"name\": \"NCCL among %d GPUs (measured)\", \"bandwidth_gbs\": %.4g, \"latency_us\": "
            "%.4g, \"efficiency\": 1",
            f->ranks, f->ar_bw / 1e9, f->ar_lat * 1e6);
    write_coll(f, 1, o);
  }
  double nvme = f->nvme_write < f->nvme_read ? f->nvme_write : f->nvme_read;
  fprintf(o,
          "  \"host\": {\"memory_gib\": %.4g, \"link_bandwidth_gbs\": %.4g, \"nvme_bandwidth_gbs\": %.4g, "
          "\"nvme_gib\": %.4g}\n}\n",
          f->ram / (1 << 30), f->upload_bw / 1e9, nvme / 1e9, f->nvme_free / (1 << 30));
}

static void write_file(const Figures *f, const char *path) {
  FILE *o = fopen(path, "w");
  if (!o) die("cannot write %s", path);
  (f->gpu ? write_gpu : write_cpu)(f, o);
  if (fclose(o) != 0) die("writing %s failed", path);
}

#ifdef COLOSSALC_HAVE_CUDA
/* The GPU's name, memory, architecture and how many this machine has (the first GPU's;
 * a calibration assumes one kind). */
static void gpu_facts(Figures *f) {
  char err[512];
  CudaApi api;
  if (cuda_api_load(&api, CUDA_LIB_DRIVER, err, sizeof err) != 0) die("%s", err);
  CUdevice d;
  size_t total = 0;
  if (api.Init(0) != CUDA_SUCCESS || api.DeviceGetCount(&f->gpus) != CUDA_SUCCESS ||
      api.DeviceGet(&d, 0) != CUDA_SUCCESS ||
      api.DeviceGetName(f->gpu_name, (int)sizeof f->gpu_name, d) != CUDA_SUCCESS ||
      api.DeviceTotalMem(&total, d) != CUDA_SUCCESS ||
      api.DeviceGetAttribute(&f->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) != CUDA_SUCCESS)
    die("the driver does not describe its GPU");
  f->gpu_memory = (double)total;
  f->gpu_name[strcspn(f->gpu_name, "\"\\")] = 0; /* a JSON string */
  cuda_api_close(&api);
}
#endif

int main(int argc, char **argv) {
  const char *out = NULL, *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", *mpirun = "mpirun", *device = "auto";
  const char *comm_out = NULL;
  int ranks = 0, quick = 0;
  cpu_blas_pick(argv); /* the GEMMs measured are the ones train runs */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--comm") && i + 1 < argc) comm_out = argv[++i];
    else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--mpirun") && i + 1 < argc) mpirun = argv[++i];
    else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) ranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--quick")) quick = 1;
    else
      die("usage: colossalc-calibrate -o FILE [--device cpu|cuda|auto] [--dir DIR] [--mpirun \"CMD\"] [--ranks N] "
          "[--quick] (got '%s')",
          argv[i]);
  }
  if (strcmp(device, "cpu") && strcmp(device, "cuda") && strcmp(device, "auto"))
    die("--device %s: cpu, cuda or auto", device);
  int gpu = 0;
#ifdef COLOSSALC_HAVE_CUDA
  gpu = !strcmp(device, "cuda") || (!strcmp(device, "auto") && !comm_out && device_cuda_available());
#else
  if (!strcmp(device, "cuda")) die("--device cuda: this build has no CUDA device (no CUDA toolkit where it was built)");
#endif
  if (comm_out) return comm_rank(argc, argv, comm_out, gpu, quick);
  if (!out) die("-o FILE is needed");
  Figures f = {.threads = (int)sysconf(_SC_NPROCESSORS_ONLN), .quick = quick, .gpu = gpu};
  f.ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  cpu_name(f.cpu, sizeof f.cpu);
  double t0 = now();
#ifdef COLOSSALC_HAVE_CUDA
  if (gpu) gpu_facts(&f);
#endif
  if (gpu) { /* one rank a GPU: NCCL among them, none with one GPU */
    f.ranks = ranks > 0 ? ranks : f.gpus < 8 ? f.gpus : 8;
    fprintf(stderr, "calibrating %s (%d on this machine, %.1f GiB each)%s\n", f.gpu_name, f.gpus,
            f.gpu_memory / (1 << 30), quick ? ", quick" : "");
  } else {
    f.ranks = ranks > 1 ? ranks : f.threads > 1 ? (f.threads < 8 ? f.threads : 8) : 2;
    fprintf(stderr, "calibrating %s, %d threads, %.1f GiB%s\n", f.cpu, f.threads, f.ram / (1 << 30),
            quick ? ", quick" : "");
  }
  measure_device(&f);
  measure_file(&f, dir);
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) die("cannot find this executable");
  self[len] = 0;
  if (f.ranks > 1) {
    measure_comm(&f, self, mpirun);
  } else fprintf(stderr, "  one GPU: the link between GPUs is the %s profile's\n", gpu_base(&f));
  write_file(&f, out);
  fprintf(stderr, "wrote %s in %.0f s\n", out, now() - t0);
  return 0;
}
