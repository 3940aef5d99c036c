/* Compiles a CUDA C file written by `colossalc --emit-cuda` with NVRTC for one GPU
 * architecture and fails unless it compiles with an empty log and the binary holds
 * every kernel the file declares. On failure it prints NVRTC's log.
 * Usage: nvrtc_check FILE.cu ARCH   (ARCH: sm_80, sm_90, ...) */
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

/* Occurrences of `extern "C" __global__` declare the kernels; count them. */
static int count_kernels(const char *src) {
  int n = 0;
  for (const char *p = src; (p = strstr(p, "__global__")); p++) n++;
  return n;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: nvrtc_check FILE.cu ARCH\n");
    return 2;
  }
  char *src = read_file(argv[1]), arch[64];
  snprintf(arch, sizeof arch, "--gpu-architecture=%s", argv[2]);
  const char *opts[] = {arch, "-std=c++17"};
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src, argv[1], 0, NULL, NULL) != NVRTC_SUCCESS) return 1;
  nvrtcResult r = nvrtcCompileProgram(prog, 2, opts);
  size_t loglen = 0, cubin = 0;
  nvrtcGetProgramLogSize(prog, &loglen);
  char *log = malloc(loglen + 1);
  nvrtcGetProgramLog(prog, log);
  int ok = r == NVRTC_SUCCESS && loglen <= 1 && nvrtcGetCUBINSize(prog, &cubin) == NVRTC_SUCCESS && cubin > 0;
  if (!ok) fprintf(stderr, "%s for %s: %s\n%s\n", argv[1], argv[2], nvrtcGetErrorString(r), log);
  printf("%s: %d kernels for %s, %zu bytes of CUBIN: %d passed, %d failed\n", argv[1], count_kernels(src), argv[2],
         cubin, ok, !ok);
  nvrtcDestroyProgram(&prog);
  free(log);
  free(src);
  return !ok;
}
