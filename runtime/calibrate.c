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
 *   - the GEMMs and the streaming kernel in rounds, each figure their median;
 *   - all-reduce among ranks of this machine (mpirun, started here) by size: the
 *     latency of a ring step and the bandwidth of a rank;
 *   - host-to-device copies (a memcpy on this device) and a file's write and read
 *     bandwidth in DIR (the NVMe of offload's --nvme-dir);
 *   - the threads and the memory.
 * The file describes the whole machine as the device with "shares_host": ranks that
 * share it split its figures (plan/cluster.h), as train splits its threads. */
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
#include "runtime/comm/comm.h"
#include "runtime/executor.h"

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

/* The median of t[0..n), which it leaves sorted. */
static double median(double *t, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: a few values */
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
      double x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  return t[n / 2];
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
  int id;
  int64_t extent;
  char *bufs[3];
} KernelRun;

static void run_kernel(void *arg) {
  KernelRun *r = arg;
  float sc[SC_COUNT] = {0};
  r->dev->kernel(r->dev, r->id, r->extent, r->bufs, sc);
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
  char *bufs[3] = {r->base, r->src, r->src};
  float sc[SC_COUNT] = {0};
  r->dev->kernel(r->dev, 0, r->bytes / 4, bufs, sc); /* the streaming kernel: each page written first */
  r->dev->sync(r->dev);
  if (r->commit) r->dev->decommit(r->dev, r->base, 0, r->bytes);
}

enum { NSHAPES = 14, ROUNDS = 7 };
static const int64_t shapes[NSHAPES][3] = {{2048, 2048, 2048}, {1024, 1024, 1024}, {512, 512, 512},  {256, 256, 256},
                                           {128, 128, 128},    {64, 64, 64},       {4096, 768, 768}, {4096, 3072, 768},
                                           {4096, 768, 3072},  {768, 768, 4096},   {2048, 64, 2048}, {2048, 2048, 64},
                                           {32, 2048, 2048},   {8192, 128, 512}};

typedef struct Fit {
  double peak, half; /* rate = peak g(m) g(n) g(k) */
  double err;        /* rms of log(model / measured) */
} Fit;

static double g_of(double x, double h) { return x / (x + h); }

/* The half-dimension h of g and the peak (in log space, its best for each h) closest to
 * the rates measured. */
static Fit fit_gemm(const double *rate) {
  Fit best = {0, 0, INFINITY};
  for (double h = 1; h <= 1024; h *= 1.05) {
    double s = 0, e = 0;
    for (int i = 0; i < NSHAPES; i++)
      s += log(rate[i] / (g_of(shapes[i][0], h) * g_of(shapes[i][1], h) * g_of(shapes[i][2], h)));
    double lp = s / NSHAPES;
    for (int i = 0; i < NSHAPES; i++) {
      double d = lp + log(g_of(shapes[i][0], h) * g_of(shapes[i][1], h) * g_of(shapes[i][2], h)) - log(rate[i]);
      e += d * d;
    }
    e = sqrt(e / NSHAPES);
    if (e < best.err) best = (Fit){exp(lp), h, e};
  }
  return best;
}

typedef struct Figures {
  int threads;
  double ram;
  Fit gemm;
  double stream_bw, launch, upload_bw, commit_bw;
  double nvme_write, nvme_read, nvme_free;
  double ar_bw, ar_lat;
  int ranks;
  char cpu[96];
} Figures;

static void measure_device(Figures *f) {
  char err[256];
  Device *dev = device_cpu_new(kernels, 2, f->threads, err, sizeof err);
  if (!dev) die("%s", err);
  GemmRun gr = {.dev = dev};
  int64_t most = 4096 * 3072;
  for (int i = 0; i < 3; i++)
    if (!(gr.tiers[i] = dev->alloc(dev, most * 4))) die("out of memory for the GEMMs");
  int64_t elems = 32 << 20; /* 3 x 128 MiB: beyond the caches */
  KernelRun kr = {.dev = dev, .id = 0, .extent = elems};
  for (int i = 0; i < 3; i++)
    if (!(kr.bufs[i] = dev->alloc(dev, elems * 4))) die("out of memory for the streaming kernel");
  /* ROUNDS rounds of every GEMM shape and the streaming kernel, each figure the median of
   * its rounds: a machine whose speed drifts (a shared host, its neighbours' load) is
   * measured at its usual speed, not at one moment's */
  double rounds[NSHAPES + 1][ROUNDS];
  for (int k = 0; k < ROUNDS; k++) {
    for (int i = 0; i < NSHAPES; i++) {
      int64_t m = shapes[i][0], n = shapes[i][1], kk = shapes[i][2];
      gr.g = (IsaGemm){.m = m,
                       .n = n,
                       .k = kk,
                       .lda = kk,
                       .ldb = n,
                       .ldc = n,
                       .alpha = 1,
                       .tier = {0, 1, 2},
                       .batch = {1, 1},
                       .dt = {ISA_F32, ISA_F32, ISA_F32}};
      rounds[i][k] = 2.0 * (double)m * (double)n * (double)kk / timed(run_gemm, &gr, 0.05);
    }
    rounds[NSHAPES][k] = 3.0 * 4 * (double)elems / timed(run_kernel, &kr, 0.1);
  }
  double rate[NSHAPES];
  for (int i = 0; i < NSHAPES; i++) {
    rate[i] = median(rounds[i], ROUNDS);
    fprintf(stderr, "  gemm %5lld x %5lld x %5lld   %8.1f GFLOP/s (rounds %.1f to %.1f)\n", (long long)shapes[i][0],
            (long long)shapes[i][1], (long long)shapes[i][2], rate[i] / 1e9, rounds[i][0] / 1e9,
            rounds[i][ROUNDS - 1] / 1e9);
  }
  f->gemm = fit_gemm(rate);
  for (int i = 0; i < 3; i++) dev->free(dev, gr.tiers[i]);
  f->stream_bw = median(rounds[NSHAPES], ROUNDS);
  KernelRun er = {.dev = dev, .id = 1, .extent = 1 << 16, .bufs = {kr.bufs[0], kr.bufs[1], kr.bufs[2]}};
  f->launch = timed(run_kernel, &er, 0.1);
  char *host = malloc((size_t)elems * 4);
  if (!host) die("out of memory for the copies");
  memset(host, 1, (size_t)elems * 4);
  CopyRun cr = {dev, kr.bufs[0], host, elems * 4};
  f->upload_bw = (double)cr.bytes / timed(run_upload, &cr, 0.2);
  free(host);
  for (int i = 0; i < 3; i++) dev->free(dev, kr.bufs[i]);
  /* a commit's cost: the kernel on fresh pages, committed and decommitted around it, less
   * the same kernel on pages kept (64 MiB: ZeRO-3 gathers a layer's weights at a time) */
  CommitRun cm = {.dev = dev, .bytes = 64 << 20, .commit = 1};
  if (!(cm.base = dev->reserve(dev, cm.bytes))) die("cannot reserve address space for the commits");
  if (!(cm.src = dev->alloc(dev, cm.bytes))) die("out of memory for the commits");
  double fresh = timed(run_commit, &cm, 0.3);
  cm.commit = 0;
  if (dev->commit(dev, cm.base, 0, cm.bytes) != 0) die("out of memory for the commits");
  double kept = timed(run_commit, &cm, 0.3);
  dev->decommit(dev, cm.base, 0, cm.bytes);
  dev->unreserve(dev, cm.base, cm.bytes);
  dev->free(dev, cm.src);
  f->commit_bw = (double)cm.bytes / fmax(fresh - kept, 1e-9);
  dev->destroy(dev);
  fprintf(stderr,
          "  streaming kernel %.1f GB/s, kernel launch %.1f us, host to device %.1f GB/s, pages committed and "
          "released %.2f GB/s\n",
          f->stream_bw / 1e9, f->launch * 1e6, f->upload_bw / 1e9, f->commit_bw / 1e9);
}

/* ---- a file's bandwidth ---------------------------------------------------------------- */

static void measure_file(Figures *f, const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/colossalc-calibrate.%d", dir, (int)getpid());
  int64_t bytes = 256 << 20, chunk = 8 << 20;
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

/* ---- all-reduce among the ranks of this machine ----------------------------------------- */

enum { NSIZES = 8 };
static const int64_t ar_sizes[NSIZES] = {1 << 8, 1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22};

/* A rank of `mpirun -np N colossalc-calibrate --comm OUT`: rank 0 writes each size's
 * seconds (the ranks' slowest) to OUT. */
static int comm_rank(int argc, char **argv, const char *out) {
  char err[256];
  Comm *c = comm_open(&argc, &argv, err, sizeof err);
  if (!c) die("%s", err);
  float *buf = calloc((size_t)ar_sizes[NSIZES - 1], sizeof *buf);
  if (!buf) die("out of memory for the all-reduce");
  double t[NSIZES];
  for (int i = 0; i < NSIZES; i++) { /* every rank makes the same calls: a count fixed by the size */
    int reps = ar_sizes[i] >= 1 << 20 ? 10 : 100;
    c->all_reduce(c, buf, buf, ar_sizes[i], COMM_SUM);
    c->barrier(c);
    double t0 = now();
    for (int k = 0; k < reps; k++) c->all_reduce(c, buf, buf, ar_sizes[i], COMM_SUM);
    t[i] = (now() - t0) / reps;
  }
  c->host_all_reduce(c, t, NSIZES, COMM_MAX);
  if (c->rank == 0) {
    FILE *f = fopen(out, "w");
    if (!f) die("cannot write %s", out);
    for (int i = 0; i < NSIZES; i++) fprintf(f, "%lld %.9g\n", (long long)ar_sizes[i], t[i]);
    fclose(f);
  }
  free(buf);
  c->destroy(c);
  return 0;
}

/* The ring all-reduce the cost model prices (plan/cost.c): 2(n-1) steps of latency and
 * 2(n-1)/n of the bytes over a rank's bandwidth, fitted to the times by least squares
 * (t = a + b x bytes). */
static void measure_comm(Figures *f, const char *self, const char *mpirun) {
  char out[512], cmd[16384];
  snprintf(out, sizeof out, "/tmp/colossalc-calibrate-ar.%d", (int)getpid());
  int n = f->ranks;
  snprintf(cmd, sizeof cmd, "%s -np %d '%s' --comm '%s' > /dev/null", mpirun, n, self, out);
  if (system(cmd) != 0) die("the all-reduce ranks failed: %s", cmd);
  FILE *in = fopen(out, "r");
  if (!in) die("no all-reduce times in %s", out);
  double x[NSIZES], y[NSIZES], sx = 0, sy = 0, sxx = 0, sxy = 0;
  long long sz;
  for (int i = 0; i < NSIZES; i++) {
    if (fscanf(in, "%lld %lf", &sz, &y[i]) != 2) die("bad all-reduce times in %s", out);
    x[i] = 4.0 * (double)sz * 2 * (n - 1) / n;
    sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
    fprintf(stderr, "  all-reduce over %d ranks %9lld floats %9.1f us\n", n, sz, y[i] * 1e6);
  }
  fclose(in);
  unlink(out);
  double b = (NSIZES * sxy - sx * sy) / (NSIZES * sxx - sx * sx), a = (sy - b * sx) / NSIZES;
  f->ar_bw = b > 0 ? 1 / b : 1e12;
  f->ar_lat = a > 0 ? a / (2.0 * (n - 1)) : 1e-7;
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

static void write_file(const Figures *f, const char *path) {
  FILE *o = fopen(path, "w");
  if (!o) die("cannot write %s", path);
  double peak = f->gemm.peak / 1e12, host_gib = f->ram / (1 << 30);
  fprintf(o, "{\n  \"name\": \"%s, %d threads (calibrated)\",\n  \"base\": \"cpu\",\n", f->cpu, f->threads);
  fprintf(
      o,
      "  \"device\": {\n    \"part\": \"%s\", \"shares_host\": true, \"fp32_only\": true,\n"
      "    \"peak_fp32_tflops\": %.6g, \"peak_bf16_tflops\": %.6g, \"peak_fp16_tflops\": %.6g,\n"
      "    \"gemm_efficiency\": 1, \"gemm_half_dim\": %.4g,\n"
      "    \"memory_gib\": %.4g, \"reserved_gib\": %.4g, \"memory_bandwidth_gbs\": %.4g, \"memory_efficiency\": 1,\n"
      "    \"kernel_overhead_us\": %.4g, \"commit_bandwidth_gbs\": %.4g\n  },\n",
      f->cpu, peak, peak, peak, f->gemm.half, host_gib, host_gib * 0.1, f->stream_bw / 1e9, f->launch * 1e6,
      f->commit_bw / 1e9);
  for (int i = 0; i < 2; i++)
    fprintf(o,
            "  \"%s\": {\"name\": \"shared memory (MPI, measured)\", \"bandwidth_gbs\": %.4g, \"latency_us\": %.4g, "
            "\"efficiency\": 1},\n",
            i ? "inter_node" : "intra_node", f->ar_bw / 1e9, f->ar_lat * 1e6);
  double nvme = f->nvme_write < f->nvme_read ? f->nvme_write : f->nvme_read;
  fprintf(o,
          "  \"host\": {\"memory_gib\": %.4g, \"link_bandwidth_gbs\": %.4g, \"memory_bandwidth_gbs\": %.4g,\n"
          "           \"nvme_bandwidth_gbs\": %.4g, \"nvme_gib\": %.4g}\n}\n",
          host_gib, f->upload_bw / 1e9, f->stream_bw / 1e9, nvme / 1e9, f->nvme_free / (1 << 30));
  if (fclose(o) != 0) die("writing %s failed", path);
}

int main(int argc, char **argv) {
  const char *out = NULL, *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", *mpirun = "mpirun";
  int ranks = 0;
  cpu_blas_pick(argv); /* the GEMMs measured are the ones train runs */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--comm") && i + 1 < argc) return comm_rank(argc, argv, argv[i + 1]);
    if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--mpirun") && i + 1 < argc) mpirun = argv[++i];
    else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) ranks = atoi(argv[++i]);
    else die("usage: colossalc-calibrate -o FILE [--dir DIR] [--mpirun \"CMD\"] [--ranks N] (got '%s')", argv[i]);
  }
  if (!out) die("-o FILE is needed");
  Figures f = {.threads = (int)sysconf(_SC_NPROCESSORS_ONLN)};
  f.ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  f.ranks = ranks > 1 ? ranks : f.threads > 1 ? (f.threads < 8 ? f.threads : 8) : 2;
  cpu_name(f.cpu, sizeof f.cpu);
  double t0 = now();
  fprintf(stderr, "calibrating %s, %d threads, %.1f GiB\n", f.cpu, f.threads, f.ram / (1 << 30));
  measure_device(&f);
  fprintf(stderr, "  GEMM fit: %.1f GFLOP/s x g(m) g(n) g(k), g(x) = x / (x + %.0f) (rms error %.0f%%)\n",
          f.gemm.peak / 1e9, f.gemm.half, 100 * (exp(f.gemm.err) - 1));
  measure_file(&f, dir);
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) die("cannot find this executable");
  self[len] = 0;
  measure_comm(&f, self, mpirun);
  fprintf(stderr, "  all-reduce: %.2f GB/s a rank, %.1f us a ring step\n", f.ar_bw / 1e9, f.ar_lat * 1e6);
  write_file(&f, out);
  fprintf(stderr, "wrote %s in %.0f s\n", out, now() - t0);
  return 0;
}
