/* Compiles a CUDA C file written by `colossalc --emit-cuda` with NVRTC for one GPU
 * architecture and fails unless it compiles with an empty log and the binary holds
 * every kernel the file declares. On failure it prints NVRTC's log. With MAXREGS it
 * compiles again with ptxas's report and fails when a kernel uses local memory or more
 * than MAXREGS registers, or, for a kernel whose launch bounds ask for B resident blocks
 * of T threads, more registers or shared memory than B such blocks can have of an SM
 * (check_resources). With --mma it fails unless every fused attention kernel's PTX
 * holds tensor-core instructions (mma.sync m16n8k16).
 * Usage: nvrtc_check FILE.cu ARCH [MAXREGS [--mma]]   (ARCH: sm_80, sm_90, ...) */
#include <ctype.h>
#include <nvrtc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc(n + 1);
  if (!s || fread(s, 1, n, f) != (size_t)n) {
    fprintf(stderr, "%s: read failed\n", path);
    exit(1);
  }
  s[n] = 0;
  fclose(f);
  return s;
}

/* Lines that start `extern "C" __global__` declare the kernels; count them. */
static int count_kernels(const char *src) {
  int n = 0;
  for (const char *p = src; (p = strstr(p, "\nextern \"C\" __global__")); p++) n++;
  return n;
}

/* src compiled for arch with the options train uses, and `extra` when not NULL; the
 * log malloc'd in *log, the CUBIN's size in *cubin (0 on failure). */
static nvrtcResult compile(const char *src, const char *name, const char *arch, const char *extra, char **log,
                           size_t *cubin) {
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  const char *opts[] = {archopt, "-std=c++17", extra};
  nvrtcProgram prog;
  *log = NULL, *cubin = 0;
  nvrtcResult r = nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) return r;
  r = nvrtcCompileProgram(prog, extra ? 3 : 2, opts);
  size_t loglen = 0;
  nvrtcGetProgramLogSize(prog, &loglen);
  *log = calloc(1, loglen + 1);
  nvrtcGetProgramLog(prog, *log);
  if (r == NVRTC_SUCCESS && nvrtcGetCUBINSize(prog, cubin) != NVRTC_SUCCESS) *cubin = 0;
  nvrtcDestroyProgram(&prog);
  return r;
}

/* The resources ptxas reports per kernel (--ptxas-options=-v): fails when a kernel
 * uses local memory (a stack frame: arrays it indexes at run time, or spilled
 * registers, each access a trip to device memory) or more than maxregs registers
 * (fewer resident warps to hide memory latency), or when the report does not cover
 * every kernel. Prints the most registers any kernel uses. */
/* The launch bounds of kernel fn in src: threads per block and the minimum of resident
 * blocks (0 where the kernel names none). */
static void launch_bounds(const char *src, const char *fn, long *threads, long *blocks) {
  *threads = *blocks = 0;
  char want[300];
  snprintf(want, sizeof want, ") %s(", fn);
  const char *p = strstr(src, want);
  if (!p) return;
  const char *lb = p;
  while (lb > src && lb[-1] != '\n') lb--;
  if ((lb = strstr(lb, "__launch_bounds__(")) && lb < p &&
      sscanf(lb, "__launch_bounds__(%ld, %ld)", threads, blocks) < 2)
    *blocks = 0;
}

/* An SM's registers and shared memory (bytes) for ARCH, the most a block may have. */
enum { SM_REGS = 65536, SM_MAX_REGS_PER_THREAD = 255 };
static long sm_shared(const char *arch) { return strstr(arch, "90") ? 228L << 10 : 164L << 10; }

static int check_resources(const char *src, const char *name, const char *arch, int maxregs) {
  char *log;
  size_t cubin;
  if (compile(src, name, arch, "--ptxas-options=-v", &log, &cubin) != NVRTC_SUCCESS || !cubin) {
    fprintf(stderr, "%s for %s with ptxas -v: failed\n%s\n", name, arch, log ? log : "");
    free(log);
    return 1;
  }
  int bad = 0, nfn = 0, nframe = 0, nregs = 0, nbounded = 0, most = -1;
  char fn[256] = "", worst[256] = "";
  for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
    char *p;
    long frame, spill_st, spill_ld, regs;
    if ((p = strstr(line, "Compiling entry function '"))) {
      snprintf(fn, sizeof fn, "%s", p + strlen("Compiling entry function '"));
      if ((p = strchr(fn, '\''))) *p = 0;
      nfn++;
    } else if ((p = strstr(line, " bytes stack frame"))) {
      while (p > line && isdigit((unsigned char)p[-1])) p--; /* the frame's size */
      if (sscanf(p, "%ld bytes stack frame, %ld bytes spill stores, %ld", &frame, &spill_st, &spill_ld) != 3) continue;
      nframe++;
      if (frame || spill_st || spill_ld) {
        fprintf(stderr, "%s: %ld bytes of stack frame, %ld of spill stores, %ld of spill loads\n", fn, frame, spill_st,
                spill_ld);
        bad++;
      }
    } else if ((p = strstr(line, "Used ")) && sscanf(p, "Used %ld registers", &regs) == 1) {
      nregs++;
      long threads, blocks, smem = 0, most_regs = maxregs;
      char *sm = strstr(p, " bytes smem");
      if (sm) {
        while (sm > p && isdigit((unsigned char)sm[-1])) sm--;
        smem = atol(sm);
      }
      launch_bounds(src, fn, &threads, &blocks);
      if (blocks > 0) { /* the kernel's own occupancy: B blocks of T threads an SM */
        most_regs = SM_REGS / (threads * blocks);
        if (most_regs > SM_MAX_REGS_PER_THREAD) most_regs = SM_MAX_REGS_PER_THREAD;
        if (smem * blocks > sm_shared(arch)) {
          fprintf(stderr, "%s: %ld bytes of shared memory, more than %ld blocks an SM can hold\n", fn, smem, blocks);
          bad++;
        }
        nbounded++;
      }
      if (regs > most_regs) {
        fprintf(stderr, "%s: %ld registers, more than %ld\n", fn, regs, most_regs);
        bad++;
      }
      if (regs > most) most = (int)regs, snprintf(worst, sizeof worst, "%s", fn);
    }
  }
  if (nfn != count_kernels(src) || nframe != nfn || nregs != nfn) {
    fprintf(stderr, "%s: ptxas reported %d kernels of %d, the frames of %d, the registers of %d\n", name, nfn,
            count_kernels(src), nframe, nregs);
    bad++;
  }
  printf("%s for %s: %d kernels, none with local memory: %s; at most %d registers (%s); %d kernels with their own "
         "occupancy bound\n",
         name, arch, nfn, bad ? "NO" : "yes", most, worst, nbounded);
  free(log);
  return bad != 0;
}

/* Every fused attention kernel (its name holds "attention") has mma.sync.aligned.m16n8k16
 * in its PTX for compute_XX of arch sm_XX; there is at least one. */
static int check_mma(const char *src, const char *name, const char *arch) {
  char archopt[64], *log = NULL;
  snprintf(archopt, sizeof archopt, "--gpu-architecture=compute_%s", arch + 3);
  const char *opts[] = {archopt, "-std=c++17"};
  nvrtcProgram prog;
  size_t size = 0;
  char *ptx = NULL;
  if (nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL) != NVRTC_SUCCESS) return 1;
  if (nvrtcCompileProgram(prog, 2, opts) == NVRTC_SUCCESS && nvrtcGetPTXSize(prog, &size) == NVRTC_SUCCESS &&
      (ptx = malloc(size)) && nvrtcGetPTX(prog, ptx) != NVRTC_SUCCESS)
    ptx[0] = 0;
  nvrtcDestroyProgram(&prog);
  (void)log;
  if (!ptx) {
    fprintf(stderr, "%s: no PTX for %s\n", name, archopt);
    return 1;
  }
  int bad = 0, n = 0;
  for (char *e = strstr(ptx, ".entry "); e; e = strstr(e + 1, ".entry ")) {
    char fn[256];
    if (sscanf(e, ".entry %255[A-Za-z0-9_]", fn) != 1 || !strstr(fn, "attention")) continue;
    char *next = strstr(e + 1, ".entry "), save = 0;
    if (next) save = *next, *next = 0;
    bool has = strstr(e, "mma.sync.aligned.m16n8k16") != NULL;
    if (next) *next = save;
    n++;
    if (!has) fprintf(stderr, "%s: no tensor-core instruction (mma.sync.aligned.m16n8k16) in its PTX\n", fn);
    bad += !has;
  }
  printf("%s for compute_%s: %d fused attention kernels, %d on tensor cores\n", name, arch + 3, n, n - bad);
  free(ptx);
  return bad || !n;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 5 || (argc == 5 && strcmp(argv[4], "--mma"))) {
    fprintf(stderr, "usage: nvrtc_check FILE.cu ARCH [MAXREGS [--mma]]\n");
    return 2;
  }
  char *src = read_file(argv[1]), *log;
  size_t cubin;
  nvrtcResult r = compile(src, argv[1], argv[2], NULL, &log, &cubin);
  int ok = r == NVRTC_SUCCESS && log && !log[0] && cubin > 0;
  if (!ok) fprintf(stderr, "%s for %s: %s\n%s\n", argv[1], argv[2], nvrtcGetErrorString(r), log ? log : "");
  printf("%s: %d kernels for %s, %zu bytes of CUBIN: %d passed, %d failed\n", argv[1], count_kernels(src), argv[2],
         cubin, ok, !ok);
  if (ok && argc >= 4) ok = !check_resources(src, argv[1], argv[2], atoi(argv[3]));
  if (ok && argc == 5) ok = !check_mma(src, argv[1], argv[2]);
  free(log);
  free(src);
  return !ok;
}
