/* Bugs seeded in test kernels, and the emulation catching each (run_seeded.sh runs
 * every case and checks its end): the kernels are the generated code's prelude
 * (codegen/cuda.c, so their reads and writes go through CC_RD and CC_WR as the
 * generated kernels' do) and a few hand-written kernels, compiled by the emulated
 * NVRTC and launched on the emulated driver through the runtime's table of the vendor
 * libraries (runtime/device/cuda_api.c).
 *
 *   seeded CASE    (LD_LIBRARY_PATH: the emulation first)
 *   ok             a block exchanging through shared memory with a barrier between, and
 *                  blocks writing their own elements: runs, the values as a GPU's
 *   shared_race    the same without the barrier: a race on shared memory
 *   global_race    the threads of a block writing one word of global memory: a race
 *   block_race     two blocks writing the same words: a race between blocks
 *   bounds         a write one element past the buffer: out of bounds, the process ends
 *   past_end       the same write not through CC_WR: the guard page after the allocation
 *                  faults, the access reported against the allocation, the process ends
 *   too_many_threads  a launch of 2048 threads a block: refused as a GPU refuses it
 *   no_blocks      a launch of an empty grid: refused
 * Prints "launch: OK" or the error of the launch (or of the stream), then the values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/cuda.h"
#include "runtime/device/cuda_api.h"

static const char kernels[] =
    "extern \"C\" __global__ void __launch_bounds__(64) seed_ok(const cc_bufs bufs, long long n, const float *s) {\n"
    "  CC_SHARED(float, sh, 64);\n"
    "  float *const out = (float *)bufs.p[0];\n"
    "  sh[CC_WR(sh, threadIdx.x, 64)] = (float)(blockIdx.x * 100 + threadIdx.x);\n"
    "  __syncthreads();\n"
    "  out[CC_WR(out, blockIdx.x * 64 + threadIdx.x, n)] = sh[CC_RD(sh, 63 - threadIdx.x, 64)];\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(64) seed_shared_race(const cc_bufs bufs, long long n,\n"
    "                                                                   const float *s) {\n"
    "  CC_SHARED(float, sh, 64);\n"
    "  float *const out = (float *)bufs.p[0];\n"
    "  sh[CC_WR(sh, threadIdx.x, 64)] = (float)(blockIdx.x * 100 + threadIdx.x);\n"
    "  out[CC_WR(out, blockIdx.x * 64 + threadIdx.x, n)] = sh[CC_RD(sh, 63 - threadIdx.x, 64)];\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(64) seed_global_race(const cc_bufs bufs, long long n,\n"
    "                                                                   const float *s) {\n"
    "  float *const out = (float *)bufs.p[0];\n"
    "  out[CC_WR(out, blockIdx.x * 64, n)] = (float)threadIdx.x;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(64) seed_block_race(const cc_bufs bufs, long long n,\n"
    "                                                                  const float *s) {\n"
    "  float *const out = (float *)bufs.p[0];\n"
    "  out[CC_WR(out, threadIdx.x, n)] = (float)blockIdx.x;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(64) seed_bounds(const cc_bufs bufs, long long n,\n"
    "                                                              const float *s) {\n"
    "  float *const out = (float *)bufs.p[0];\n"
    "  out[CC_WR(out, blockIdx.x * 64 + threadIdx.x + 1, n)] = 1.0f;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(64) seed_past_end(const cc_bufs bufs, long long n,\n"
    "                                                                const float *s) {\n"
    "  float *const out = (float *)bufs.p[0];\n"
    "  out[blockIdx.x * 64 + threadIdx.x + 1] = 1.0f;\n"
    "}\n";

enum { BLOCKS = 2, THREADS = 64, N = BLOCKS * THREADS };

static void die(const char *what) {
  fprintf(stderr, "seeded: %s\n", what);
  exit(2);
}

int main(int argc, char **argv) {
  if (argc != 2) die("usage: seeded CASE");
  const char *c = argv[1];
  const char *fn = !strcmp(c, "ok")                                            ? "seed_ok"
                   : !strcmp(c, "too_many_threads") || !strcmp(c, "no_blocks") ? "seed_ok"
                   : !strcmp(c, "shared_race")                                 ? "seed_shared_race"
                   : !strcmp(c, "global_race")                                 ? "seed_global_race"
                   : !strcmp(c, "block_race")                                  ? "seed_block_race"
                   : !strcmp(c, "bounds")                                      ? "seed_bounds"
                   : !strcmp(c, "past_end")                                    ? "seed_past_end"
                                                                               : NULL;
  if (!fn) die("unknown case");
  CudaApi api;
  char err[4096];
  if (cuda_api_load(&api, CUDA_LIB_DRIVER | CUDA_LIB_NVRTC, err, sizeof err) != 0) die(err);
  /* the source: the generated code's prelude, then the kernels */
  char *src = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&src, &len);
  if (!f) die("open_memstream");
  cuda_emit_prelude(f, 5);
  fputs(kernels, f);
  fclose(f);
  nvrtcProgram prog;
  size_t bin_len = 0;
  if (api.nvrtcCreateProgram(&prog, src, "seeded.cu", 0, NULL, NULL) != NVRTC_SUCCESS ||
      api.nvrtcCompileProgram(prog, 0, NULL) != NVRTC_SUCCESS || api.nvrtcGetCUBINSize(prog, &bin_len) != NVRTC_SUCCESS)
    die("the seeded kernels do not compile");
  char *bin = malloc(bin_len);
  if (!bin || api.nvrtcGetCUBIN(prog, bin) != NVRTC_SUCCESS) die("no CUBIN");
  api.nvrtcDestroyProgram(&prog);
  free(src);
  CUcontext ctx;
  CUdevice dev;
  CUmodule mod;
  CUfunction k;
  CUstream s;
  CUdeviceptr out, scalars;
  if (api.Init(0) != CUDA_SUCCESS || api.DeviceGet(&dev, 0) != CUDA_SUCCESS ||
      api.DevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || api.CtxSetCurrent(ctx) != CUDA_SUCCESS ||
      api.ModuleLoadData(&mod, bin) != CUDA_SUCCESS || api.ModuleGetFunction(&k, mod, fn) != CUDA_SUCCESS ||
      api.StreamCreate(&s, 0) != CUDA_SUCCESS || api.MemAlloc(&out, N * sizeof(float)) != CUDA_SUCCESS ||
      api.MemAlloc(&scalars, 16 * sizeof(float)) != CUDA_SUCCESS)
    die("the emulated GPU does not start");
  struct {
    CUdeviceptr p[16];
  } bufs = {{out}};
  long long n = N;
  void *params[] = {&bufs, &n, &scalars};
  unsigned grid = !strcmp(c, "no_blocks") ? 0 : BLOCKS, block = !strcmp(c, "too_many_threads") ? 2048 : THREADS;
  CUresult r = api.LaunchKernel(k, grid, 1, 1, block, 1, 1, 0, s, params, NULL);
  if (r == CUDA_SUCCESS) r = api.StreamSynchronize(s);
  const char *msg = "?";
  if (r != CUDA_SUCCESS) api.GetErrorString(r, &msg);
  if (r == CUDA_SUCCESS) printf("launch: OK\n");
  else printf("launch: error %d (%s)\n", (int)r, msg);
  int bad = r != CUDA_SUCCESS;
  float v[N];
  if (!bad && api.MemcpyDtoH(v, out, sizeof v) != CUDA_SUCCESS) die("no values back");
  for (int b = 0; !bad && b < BLOCKS; b++) /* seed_ok: each thread the value its block's mirror thread wrote */
    for (int t = 0; t < THREADS; t++) bad += v[b * THREADS + t] != (float)(b * 100 + THREADS - 1 - t);
  if (r == CUDA_SUCCESS) printf("values: %s\n", bad ? "WRONG" : "as on a GPU");
  api.MemFree(out), api.MemFree(scalars);
  api.StreamDestroy(s);
  api.ModuleUnload(mod);
  api.DevicePrimaryCtxRelease(dev);
  free(bin);
  return bad != 0;
}
