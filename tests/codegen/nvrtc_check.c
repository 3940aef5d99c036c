/* Compiles a CUDA C file written by `colossalc --emit-cuda` with NVRTC for one GPU
 * architecture and fails unless it compiles with an empty log and the binary holds
 * every kernel the file declares. On failure it prints NVRTC's log. With MAXREGS it
 * compiles again with ptxas's report and fails when a kernel uses local memory or more
 * than MAXREGS registers (check_resources).
 * Usage: nvrtc_check FILE.cu ARCH [MAXREGS]   (ARCH: sm_80, sm_90, ...) */
#include <ctype.h>
#include <nvrtc.h>
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
static int check_resources(const char *src, const char *name, const char *arch, int maxregs) {
  char *log;
  size_t cubin;
  if (compile(src, name, arch, "--ptxas-options=-v", &log, &cubin) != NVRTC_SUCCESS || !cubin) {
    fprintf(stderr, "%s for %s with ptxas -v: failed\n%s\n", name, arch, log ? log : "");
    free(log);
    return 1;
  }
  int bad = 0, nfn = 0, nframe = 0, nregs = 0, most = -1;
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
      if (regs > maxregs) {
        fprintf(stderr, "%s: %ld registers, more than %d\n", fn, regs, maxregs);
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
  printf("%s for %s: %d kernels, none with local memory: %s; at most %d registers (%s)\n", name, arch, nfn,
         bad ? "NO" : "yes", most, worst);
  free(log);
  return bad != 0;
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: nvrtc_check FILE.cu ARCH [MAXREGS]\n");
    return 2;
  }
  char *src = read_file(argv[1]), *log;
  size_t cubin;
  nvrtcResult r = compile(src, argv[1], argv[2], NULL, &log, &cubin);
  int ok = r == NVRTC_SUCCESS && log && !log[0] && cubin > 0;
  if (!ok) fprintf(stderr, "%s for %s: %s\n%s\n", argv[1], argv[2], nvrtcGetErrorString(r), log ? log : "");
  printf("%s: %d kernels for %s, %zu bytes of CUBIN: %d passed, %d failed\n", argv[1], count_kernels(src), argv[2],
         cubin, ok, !ok);
  if (ok && argc == 4) ok = !check_resources(src, argv[1], argv[2], atoi(argv[3]));
  free(log);
  free(src);
  return !ok;
}
