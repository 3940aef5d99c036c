// The CUDA built-ins on the host, to run the generated kernels without a GPU (tests
// only): the test of the CUDA emitter (tests/codegen/test_cuda.c) and the emulated
// NVRTC (tests/cuda_emul/nvrtc.c) compile a unit of
//     #include "host_shim.h"       this file
//     #include "kernels.cu"        generated CUDA C
//     #include "host_launch.h"     cc_host_launch
// as C++ into a shared object.
// Each GPU thread is a fiber: all of them run on the launching thread, switching with
// _setjmp/_longjmp (no system call), so __syncthreads() and a warp's shuffle cost a
// few switches rather than a futex round through the OS scheduler. Blocks run one
// after another, __syncthreads() is a barrier of the block's fibers,
// __shfl_xor_sync() and __shfl_sync() exchange through memory between two barriers of
// the warp, shared memory is a static (blocks do not overlap), NaN before each block.
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define CC_ASAN 1
#else
#define CC_ASAN 0
#endif
struct cc_uint3 {
  unsigned x, y, z;
};
static cc_uint3 threadIdx, blockIdx; // of the running fiber (the scheduler sets them)
static cc_uint3 blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
enum { CC_MAX_SHARED = 4096, CC_MAX_THREADS = 1024, CC_STACK = 256 << 10 };
static void *cc_shared_ptr[CC_MAX_SHARED];
static size_t cc_shared_size[CC_MAX_SHARED];
static int cc_nshared;
static void cc_poison_shared() {
  for (int i = 0; i < cc_nshared; i++) memset(cc_shared_ptr[i], 0xff, cc_shared_size[i]);
}
struct cc_shared_reg {
  cc_shared_reg(void *p, size_t n) {
    if (cc_nshared == CC_MAX_SHARED) {
      fprintf(stderr, "cuda shim: too many shared arrays\n");
      abort();
    }
    memset(p, 0xff, n);
    cc_shared_ptr[cc_nshared] = p;
    cc_shared_size[cc_nshared++] = n;
  }
};
#define CC_SHARED(type, name, n) \
  static type name[n];           \
  static cc_shared_reg name##_reg(name, sizeof name)
#define __launch_bounds__(n)

// ---- fibers: one per GPU thread, and the scheduler that runs them in turn ----
struct cc_fiber {
  jmp_buf jb;    // where it waits
  ucontext_t uc; // its first start
  char *stack;
  bool started, done;
  unsigned block;      // the block it is in
  unsigned shfl_round; // its shuffles so far (which slot set is next)
};
static cc_fiber cc_fib[CC_MAX_THREADS];
static jmp_buf cc_sched;
static ucontext_t cc_sched_uc;
static unsigned cc_cur; // the running fiber
#if CC_ASAN
static const void *cc_sched_bottom; // the scheduler's stack
static size_t cc_sched_size;
#endif

// Back to the scheduler; returns when the scheduler runs this fiber again.
static void cc_yield() {
  cc_fiber *f = &cc_fib[cc_cur];
#if CC_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, cc_sched_bottom, cc_sched_size);
  if (!_setjmp(f->jb)) _longjmp(cc_sched, 1);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  if (!_setjmp(f->jb)) _longjmp(cc_sched, 1);
#endif
}

struct cc_barrier {
  unsigned arrived;
  unsigned long gen;
};
static cc_barrier cc_block_barrier, cc_warp_barrier[32];
static void cc_barrier_wait(cc_barrier *b, unsigned count) {
  if (++b->arrived == count) {
    b->arrived = 0;
    b->gen++;
    return;
  }
  unsigned long gen = b->gen;
  while (b->gen == gen) cc_yield();
}

static float cc_shfl_slot[2][CC_MAX_THREADS];
static inline void __syncthreads() { cc_barrier_wait(&cc_block_barrier, blockDim.x); }
// Every lane of the running fiber's warp puts its v in a slot; returns the warp's slots
// once all have.
// Two slot sets used in turn: one barrier per exchange is enough, since no lane can
// write a set again before every lane has passed the next exchange's barrier.
static inline const float *cc_shfl_exchange(unsigned mask, float v) {
  if (mask != 0xffffffffu) abort();
  unsigned t = threadIdx.x;
  float *slot = cc_shfl_slot[cc_fib[t].shfl_round++ & 1];
  slot[t] = v;
  cc_barrier_wait(&cc_warp_barrier[t >> 5], 32);
  return slot + (t & ~31u);
}
static inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  return cc_shfl_exchange(mask, v)[(threadIdx.x & 31u) ^ (unsigned)lane_mask];
}
static inline float __shfl_sync(unsigned mask, float v, int src_lane) {
  return cc_shfl_exchange(mask, v)[(unsigned)src_lane & 31u];
}
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, sizeof f);
  return f;
}
static inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline void __trap() {
  fprintf(stderr, "cuda shim: __trap(): an address out of bounds\n");
  abort();
}
