// The CUDA built-ins on the host, to run the generated kernels without a GPU (tests
// only): the test of the CUDA emitter (tests/codegen/test_cuda.c) and the emulated
// NVRTC (tests/cuda_emul/nvrtc.c) compile a unit of
//     #include "host_shim.h"       this file
//     #include "kernels.cu"        generated CUDA C
//     #include "host_launch.h"     cc_host_launch
// as C++ into a shared object.
// Each GPU thread is a fiber: all of them run on the launching thread, switching with
// the compiler's __builtin_setjmp/__builtin_longjmp (no system call, no signal mask,
// no unwinding), so __syncthreads() and a warp's shuffle cost a
// few switches rather than a futex round through the OS scheduler. Blocks run one
// after another, __syncthreads() is a barrier of the block's fibers,
// __shfl_xor_sync() and __shfl_sync() exchange through memory between two barriers of
// the warp, shared memory is a static (blocks do not overlap), NaN before each block.
// Every access the kernels make through CC_RD and CC_WR (the generated code's every
// read and write of a buffer and of shared memory) is checked: its index against the
// buffer's size (out of bounds: the kernel, the index and the size, then abort, as a
// GPU's trap ends the context), and for races within the launch (cc_race below): two
// threads of a block touching a word with no barrier of the block (or of their warp)
// between, one writing; two blocks touching a word, one writing. A race fails the
// launch after printing both accesses. A training launches each kernel with the same
// grid, size and buffers step after step: races are watched in the first launch of
// each such shape (the kernel, grid, block, n, and which of its buffers are one
// another), bounds in every launch (host_launch.h, cc_first_of_shape).
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
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
#define __launch_bounds__(...)

// ---- fibers: one per GPU thread, and the scheduler that runs them in turn ----
// A fiber's or the scheduler's place: __builtin_setjmp's five words. The builtin's
// longjmp may not be in the function of its setjmp: cc_jump is its own.
typedef void *cc_jmp[5];
__attribute__((noinline)) static void cc_jump(cc_jmp j) { __builtin_longjmp(j, 1); }
struct cc_fiber {
  cc_jmp jb;     // where it waits
  ucontext_t uc; // its first start
  char *stack;
  bool started, done;
  unsigned block;      // the block it is in
  unsigned shfl_round; // its shuffles so far (which slot set is next)
};
static cc_fiber cc_fib[CC_MAX_THREADS];
static cc_jmp cc_sched;
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
  if (!__builtin_setjmp(f->jb)) cc_jump(cc_sched);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  if (!__builtin_setjmp(f->jb)) cc_jump(cc_sched);
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

// ---- the race checker: the last write and a few reads of each word since, per launch ----
// An access is ordered before a later one in the same launch when both are of one
// block and made by one thread, or with a barrier of the block between (its
// generation grew), or both of one warp with a barrier of the warp between; accesses
// of two blocks are never ordered (blocks run in any order, and at once, on a GPU).
struct cc_acc {
  unsigned block, tid, bgen, wgen;
};
struct cc_word {
  const void *addr;
  unsigned launch, nreads;
  cc_acc w, r[4]; // w.tid == ~0u: no write yet
};
static cc_word *cc_words;
static size_t cc_nwords_cap, cc_nwords_used;
static unsigned cc_launch_id;
static bool cc_raced;
static void *cc_cur_kernel;
static void cc_report_kernel(FILE *f);
static cc_acc cc_now();
static bool cc_ordered(const cc_acc &a, const cc_acc &b) {
  return a.block == b.block &&
         (a.tid == b.tid || a.bgen != b.bgen || ((a.tid >> 5) == (b.tid >> 5) && a.wgen != b.wgen));
}
static cc_word *cc_word_of(const void *addr) {
  if (2 * (cc_nwords_used + 1) > cc_nwords_cap) { // grow: rehash this launch's words
    size_t cap = cc_nwords_cap ? 2 * cc_nwords_cap : 1 << 16;
    cc_word *old = cc_words, *nw = (cc_word *)calloc(cap, sizeof *nw);
    if (!nw) abort();
    size_t oldcap = cc_nwords_cap;
    cc_words = nw, cc_nwords_cap = cap, cc_nwords_used = 0;
    for (size_t i = 0; i < oldcap; i++)
      if (old[i].addr && old[i].launch == cc_launch_id) *cc_word_of(old[i].addr) = old[i];
    free(old);
  }
  size_t h = ((size_t)(uintptr_t)addr * 0x9E3779B97F4A7C15ull) >> 20;
  for (size_t i = h & (cc_nwords_cap - 1);; i = (i + 1) & (cc_nwords_cap - 1)) {
    cc_word *w = &cc_words[i];
    if (w->addr == addr && w->launch == cc_launch_id) return w;
    if (!w->addr || w->launch != cc_launch_id) { // free, or a word of an earlier launch
      *w = cc_word{addr, cc_launch_id, 0, cc_acc{0, ~0u, 0, 0}, {}};
      cc_nwords_used++;
      return w;
    }
  }
}
static void cc_race(const void *addr, const cc_acc &a, bool aw, const cc_acc &b, bool bw) {
  if (cc_raced) return; // the first race of a launch
  cc_raced = true;
  fprintf(stderr, "cuda emulation: race in ");
  cc_report_kernel(stderr);
  fprintf(stderr, ": block %u thread %u %s %p and block %u thread %u %s it, with no barrier between\n", a.block, a.tid,
          aw ? "writes" : "reads", addr, b.block, b.tid, bw ? "writes" : "reads");
}
// Shared memory is each block's own (the shim's is one static the blocks take in turn):
// its words are told apart by block.
static const void *cc_word_key(const void *addr, unsigned block) {
  for (int i = 0; i < cc_nshared; i++)
    if ((const char *)addr >= (const char *)cc_shared_ptr[i] &&
        (const char *)addr < (const char *)cc_shared_ptr[i] + cc_shared_size[i])
      return (const void *)((uintptr_t)addr ^ ((uintptr_t)(block + 1) << 47));
  return addr;
}
static bool cc_checking; // this launch's accesses are watched (cc_host_launch says which)
static void cc_watch(const void *addr, bool write) {
  if (!cc_checking) return;
  cc_acc now = cc_now();
  cc_word *w = cc_word_of(cc_word_key(addr, now.block));
  if (w->w.tid != ~0u && !cc_ordered(w->w, now)) cc_race(addr, w->w, true, now, write);
  if (write) {
    for (unsigned i = 0; i < w->nreads && i < 4; i++)
      if (!cc_ordered(w->r[i], now)) cc_race(addr, w->r[i], false, now, true);
    w->w = now, w->nreads = 0;
  } else if (w->nreads < 4) { // more readers than that: the first four are kept
    w->r[w->nreads++] = now;
  }
}
static void cc_out_of_bounds(long long a, long long n, bool write) {
  fprintf(stderr, "cuda emulation: out of bounds in ");
  cc_report_kernel(stderr);
  fprintf(stderr, ": block %u thread %u %s element %lld of a buffer of %lld\n", blockIdx.x, threadIdx.x,
          write ? "writes" : "reads", a, n);
  abort();
}
template <class T> static inline long long cc_rd(const T *b, long long a, long long n) {
  if (a < 0 || a >= n) cc_out_of_bounds(a, n, false);
  cc_watch(b + a, false);
  return a;
}
template <class T> static inline long long cc_wr(const T *b, long long a, long long n) {
  if (a < 0 || a >= n) cc_out_of_bounds(a, n, true);
  cc_watch(b + a, true);
  return a;
}
// a buffer the kernel never writes cannot race within the launch: bounds only
template <class T> static inline long long cc_ro(const T *, long long a, long long n) {
  if (a < 0 || a >= n) cc_out_of_bounds(a, n, false);
  return a;
}
#define CC_RD(b, a, n) cc_rd((b), (a), (n))
#define CC_WR(b, a, n) cc_wr((b), (a), (n))
#define CC_RO(b, a, n) cc_ro((b), (a), (n))
// four neighbours a to a + 3 in one access (a vector load or store): each checked
template <class T> static inline long long cc_ro4(const T *b, long long a, long long n) {
  for (int i = 0; i < 4; i++) cc_ro(b, a + i, n);
  return a;
}
template <class T> static inline long long cc_rd4(const T *b, long long a, long long n) {
  for (int i = 0; i < 4; i++) cc_rd(b, a + i, n);
  return a;
}
template <class T> static inline long long cc_wr4(const T *b, long long a, long long n) {
  for (int i = 0; i < 4; i++) cc_wr(b, a + i, n);
  return a;
}
#define CC_RO4(b, a, n) cc_ro4((b), (a), (n))
#define CC_RD4(b, a, n) cc_rd4((b), (a), (n))
#define CC_WR4(b, a, n) cc_wr4((b), (a), (n))

// A kernel's own waits: __syncthreads(), and a warp's exchanges (shuffles, mma). A
// launch of a shape whose first launch never waited runs without fibers, each thread
// to its end in turn (cc_direct, host_launch.h); a wait there cannot be kept, and ends
// the process saying so.
static bool cc_direct, cc_waited;
static void cc_kernel_wait(cc_barrier *b, unsigned count) {
  if (cc_direct) {
    fprintf(stderr, "cuda emulation: ");
    cc_report_kernel(stderr);
    fprintf(stderr, " waited at a barrier in a launch whose shape's first launch did not (run without fibers)\n");
    abort();
  }
  cc_waited = true;
  cc_barrier_wait(b, count);
}

static float cc_shfl_slot[2][CC_MAX_THREADS];
static inline void __syncthreads() { cc_kernel_wait(&cc_block_barrier, blockDim.x); }
// Every lane of the running fiber's warp puts its v in a slot; returns the warp's slots
// once all have.
// Two slot sets used in turn: one barrier per exchange is enough, since no lane can
// write a set again before every lane has passed the next exchange's barrier.
static inline const float *cc_shfl_exchange(unsigned mask, float v) {
  if (mask != 0xffffffffu) abort();
  unsigned t = threadIdx.x;
  float *slot = cc_shfl_slot[cc_fib[t].shfl_round++ & 1];
  slot[t] = v;
  cc_kernel_wait(&cc_warp_barrier[t >> 5], 32);
  return slot + (t & ~31u);
}
static inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  return cc_shfl_exchange(mask, v)[(threadIdx.x & 31u) ^ (unsigned)lane_mask];
}
static inline float __shfl_sync(unsigned mask, float v, int src_lane) {
  return cc_shfl_exchange(mask, v)[(unsigned)src_lane & 31u];
}
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.f32 as the PTX ISA lays out its
// fragments ("Matrix Fragments for mma.m16n8k16 with floating point type"): every lane
// of the warp gives its A registers (4, two 16-bit values each, the lower index in the low
// half) and B registers (2); lane l = 4 g + t4 holds A(g + 8 (i & 1), 2 t4 + 8 (i >> 1) + h)
// in half h of register i, B(2 t4 + 8 i + h, g) in half h of register i, and receives
// D(g + 8 (i >> 1), 2 t4 + (i & 1)) in d[i]. The exchange is a warp's, through the slots of
// the shuffles' rounds: a kernel that indexes its fragments otherwise gets other products.
// Products exact in f32 (16-bit operands), summed in k order onto the accumulator.
#define CC_MMA(name, ty)
static unsigned cc_mma_slot[2][CC_MAX_THREADS][6];
static inline float cc_mma_half(unsigned reg, int hi, bool bf16) {
  const unsigned v = hi ? reg >> 16 : reg & 0xffffu;
  float f;
  if (bf16) {
    const unsigned u = v << 16;
    memcpy(&f, &u, sizeof f);
    return f;
  }
  const unsigned e = v >> 10 & 31u, m = v & 1023u;
  f = e == 31u ? (m ? NAN : INFINITY) : e ? ldexpf((float)(m | 1024u), (int)e - 25) : ldexpf((float)m, -24);
  return v >> 15 ? -f : f;
}
static inline void cc_mma(float *d, const unsigned *a, const unsigned *b, bool bf16) {
  const unsigned t = threadIdx.x, lane = t & 31u, g = lane >> 2, t4 = lane & 3u;
  unsigned(*slot)[6] = cc_mma_slot[cc_fib[t].shfl_round++ & 1];
  for (int i = 0; i < 4; i++) slot[t][i] = a[i];
  slot[t][4] = b[0], slot[t][5] = b[1];
  cc_kernel_wait(&cc_warp_barrier[t >> 5], 32);
  const unsigned(*w)[6] = slot + (t & ~31u);
  for (int i = 0; i < 4; i++) {
    const unsigned row = g + 8 * (unsigned)(i >> 1), col = 2 * t4 + (unsigned)(i & 1);
    float s = d[i];
    for (unsigned k = 0; k < 16; k++) {
      const unsigned al = (row & 7u) * 4 + (k & 7u) / 2, ar = (row >> 3) + 2 * (k >> 3);
      const unsigned bl = col * 4 + (k & 7u) / 2, br = 4 + (k >> 3);
      s += cc_mma_half(w[al][ar], (int)(k & 1u), bf16) * cc_mma_half(w[bl][br], (int)(k & 1u), bf16);
    }
    d[i] = s;
  }
}
static inline void cc_mma_bf16(float *d, const unsigned *a, const unsigned *b) { cc_mma(d, a, b, true); }
static inline void cc_mma_f16(float *d, const unsigned *a, const unsigned *b) { cc_mma(d, a, b, false); }
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
