/* A host emulation of NVRTC (libnvrtc.so.13), for tests only: nvrtcCompileProgram
 * compiles the generated CUDA C as C++ for the host, behind the shim of the CUDA
 * built-ins (host_shim.h, host_launch.h), into a shared object; its "CUBIN" is that
 * object behind EMUL_MAGIC (emul.h), which the emulated driver loads. The version is
 * 0.0, so that kernel-cache entries of the emulation never pass for real NVRTC's. The
 * architecture option is accepted and ignored; a compile error gives the host
 * compiler's output as the log. */
#include <nvrtc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/cuda_emul/emul.h"

struct _nvrtcProgram {
  char *src;
  char *log;
  char *image;
  size_t image_len;
};

nvrtcResult nvrtcVersion(int *major, int *minor) {
  *major = 0, *minor = 0;
  return NVRTC_SUCCESS;
}

const char *nvrtcGetErrorString(nvrtcResult r) {
  return r == NVRTC_SUCCESS             ? "NVRTC_SUCCESS"
         : r == NVRTC_ERROR_COMPILATION ? "NVRTC_ERROR_COMPILATION"
                                        : "NVRTC emulation error";
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name, int nheaders,
                               const char *const *headers, const char *const *include_names) {
  (void)name, (void)headers, (void)include_names;
  if (nheaders) return NVRTC_ERROR_INVALID_INPUT;
  nvrtcProgram prog = calloc(1, sizeof *prog);
  if (!prog || !(prog->src = strdup(src))) {
    free(prog);
    return NVRTC_ERROR_OUT_OF_MEMORY;
  }
  *p = prog;
  return NVRTC_SUCCESS;
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (b && fread(b, 1, (size_t)len, f) != (size_t)len) free(b), b = NULL;
  fclose(f);
  if (b) b[len] = 0, *n = (size_t)len;
  return b;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  int ok = f && fputs(text, f) >= 0;
  if (f && fclose(f)) ok = 0;
  return ok;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int nopts, const char *const *opts) {
  (void)nopts, (void)opts;
  char dir[] = "/tmp/colossalc-nvrtc-XXXXXX", path[256], cmd[2048];
  if (!mkdtemp(dir)) return NVRTC_ERROR_INTERNAL_ERROR;
  snprintf(path, sizeof path, "%s/kernels.cu", dir);
  int ok = write_text(path, p->src);
  snprintf(path, sizeof path, "%s/unit.cpp", dir);
  ok = ok && write_text(path, "#include \"" COLOSSALC_SOURCE_DIR "/tests/cuda_emul/host_shim.h\"\n"
                              "#include \"kernels.cu\"\n"
                              "#include \"" COLOSSALC_SOURCE_DIR "/tests/cuda_emul/host_launch.h\"\n");
  snprintf(cmd, sizeof cmd, "%s -std=c++17 -O1 -fPIC -shared -pthread -w %s -o %s/unit.so %s/unit.cpp > %s/log 2>&1",
           COLOSSALC_HOST_CXX, COLOSSALC_HOST_CXX_FLAGS, dir, dir, dir);
  ok = ok && system(cmd) == 0;
  size_t n = 0, so_len = 0;
  snprintf(path, sizeof path, "%s/log", dir);
  free(p->log);
  p->log = slurp(path, &n);
  snprintf(path, sizeof path, "%s/unit.so", dir);
  char *so = ok ? slurp(path, &so_len) : NULL;
  if (so && (p->image = malloc(EMUL_MAGIC_LEN + sizeof(uint64_t) + so_len))) {
    uint64_t len = so_len;
    memcpy(p->image, EMUL_MAGIC, EMUL_MAGIC_LEN);
    memcpy(p->image + EMUL_MAGIC_LEN, &len, sizeof len);
    memcpy(p->image + EMUL_MAGIC_LEN + sizeof len, so, so_len);
    p->image_len = EMUL_MAGIC_LEN + sizeof len + so_len;
  }
  free(so);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "nvrtc emulation: could not remove %s\n", dir);
  return p->image ? NVRTC_SUCCESS : NVRTC_ERROR_COMPILATION;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n) {
  *n = (p->log ? strlen(p->log) : 0) + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char *log) {
  strcpy(log, p->log ? p->log : "");
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *n) {
  *n = p->image_len;
  return p->image ? NVRTC_SUCCESS : NVRTC_ERROR_INVALID_PROGRAM;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *cubin) {
  if (!p->image) return NVRTC_ERROR_INVALID_PROGRAM;
  memcpy(cubin, p->image, p->image_len);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *p) {
  free((*p)->src);
  free((*p)->log);
  free((*p)->image);
  free(*p);
  *p = NULL;
  return NVRTC_SUCCESS;
}
