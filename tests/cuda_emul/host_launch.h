// The launcher of host_shim.h (included after the generated kernels, whose prelude
// defines cc_bufs): cc_host_launch runs a kernel over a grid of blocks of threads,
// each GPU thread a fiber of host_shim.h. Fibers are made once and kept: after a
// launch each waits, done, for the next one.
typedef void (*cc_kernel_fn)(const cc_bufs, long long, const float *);

static struct {
  cc_kernel_fn fn;
  cc_bufs bufs;
  long long n;
  const float *scalars;
} cc_job;

// The running access, for the race checker of host_shim.h.
static cc_acc cc_now() {
  unsigned t = cc_cur;
  return cc_acc{cc_fib[t].block, t, (unsigned)cc_block_barrier.gen, (unsigned)cc_warp_barrier[t >> 5].gen};
}

// The kernel running, by its symbol's name.
static void cc_report_kernel(FILE *f) {
  Dl_info info;
  if (dladdr(cc_cur_kernel, &info) && info.dli_sname) fputs(info.dli_sname, f);
  else fprintf(f, "kernel %p", cc_cur_kernel);
}

// A fiber's life: every block of each launch in turn, the block barrier between them.
static void cc_fiber_main() {
  unsigned t = cc_cur;
#if CC_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &cc_sched_bottom, &cc_sched_size);
#endif
  for (;;) {
    for (unsigned b = 0; b < gridDim.x; b++) {
      blockIdx.x = cc_fib[t].block = b;
      cc_job.fn(cc_job.bufs, cc_job.n, cc_job.scalars);
      // the block is done; the last of its threads to arrive poisons shared memory, so
      // that the next starts on fresh (one barrier, not two: a switch per thread saved)
      if (cc_block_barrier.arrived + 1 == blockDim.x) cc_poison_shared();
      cc_barrier_wait(&cc_block_barrier, blockDim.x);
    }
    cc_fib[t].done = true;
    cc_yield();
  }
}

// Runs fiber i until it yields (not inlined: the caller's variables stay out of the
// setjmp's frame).
__attribute__((noinline)) static void cc_switch_to(unsigned i) {
  cc_fiber *f = &cc_fib[i];
  cc_cur = i;
  threadIdx = cc_uint3{i, 0, 0};
  blockIdx = cc_uint3{f->block, 0, 0};
#if CC_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, CC_STACK);
#endif
  if (!__builtin_setjmp(cc_sched)) {
    if (f->started) cc_jump(f->jb);
    f->started = true;
    swapcontext(&cc_sched_uc, &f->uc); // never returns here: the fiber comes back by cc_jump
  }
#if CC_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// The fibers' stacks and the race checker's words go when the object is unloaded (or
// the process ends): every fiber is parked then, between launches.
static struct cc_fiber_reaper {
  ~cc_fiber_reaper() {
    for (unsigned i = 0; i < CC_MAX_THREADS; i++) free(cc_fib[i].stack), cc_fib[i].stack = nullptr;
    free(cc_words), cc_words = nullptr, cc_nwords_cap = 0;
  }
} cc_reaper;

// A new fiber, to start at cc_fiber_main (getcontext returns twice: kept out of loops).
__attribute__((noinline)) static void cc_make_fiber(cc_fiber *f) {
  f->stack = (char *)malloc(CC_STACK);
  int rc = getcontext(&f->uc);
  if (!f->stack || rc) {
    perror("cuda shim: a fiber");
    abort();
  }
  f->uc.uc_stack.ss_sp = f->stack;
  f->uc.uc_stack.ss_size = CC_STACK;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, cc_fiber_main, 0);
}

// A launch's shape: the kernel, grid, block, n, and the pattern of its buffers that
// are the same buffer (an in-place update's input and output). A kernel's accesses and
// waits follow from those, so races are watched in the first launch of each shape only
// (later ones are checked for bounds: host_shim.h), and a shape whose first launch never
// waited at a barrier runs without fibers after it. Shapes past the table's room are
// launched as first ones.
struct cc_shape {
  void *kernel;
  unsigned grid, block;
  long long n;
  uint64_t alias;
  bool waits; // its first launch waited at a barrier
};
// The table's entry of a launch's shape, *first when it was not there; NULL when full.
static cc_shape *cc_shape_of(void *kernel, unsigned grid, unsigned block, long long n, char *const *bufs, bool *first) {
  enum { CAP = 1 << 12 };
  static cc_shape seen[CAP];
  static unsigned used;
  uint64_t alias = 0; // for each buffer, the first buffer with its address (4 bits each)
  for (unsigned i = 0; i < 16; i++) {
    unsigned j = 0;
    while (bufs[j] != bufs[i]) j++;
    alias |= (uint64_t)j << (4 * i);
  }
  uint64_t h = ((uint64_t)(uintptr_t)kernel ^ grid * 0x9E3779B1ull ^ (uint64_t)block << 40 ^ (uint64_t)n * 31 ^ alias) *
               0x9E3779B97F4A7C15ull;
  *first = true;
  for (unsigned i = (unsigned)(h >> 52) & (CAP - 1);; i = (i + 1) & (CAP - 1)) {
    cc_shape *s = &seen[i];
    if (!s->kernel) {
      if (2 * used >= CAP) return nullptr; // half full: remember no more
      *s = cc_shape{kernel, grid, block, n, alias, true}, used++;
      return s;
    }
    if (s->kernel == kernel && s->grid == grid && s->block == block && s->n == n && s->alias == alias) {
      *first = false;
      return s;
    }
  }
}

// bufs: the address of each of the kernel's buffers, passed by value as on a GPU.
extern "C" int cc_host_launch(void *kernel, unsigned grid, unsigned block, char *const *bufs, long long n,
                              const float *scalars) {
  if (!grid || !block || block % 32 || block > CC_MAX_THREADS) return -1;
  for (unsigned i = 0; i < block; i++)
    if (!cc_fib[i].stack) cc_make_fiber(&cc_fib[i]);
  gridDim = cc_uint3{grid, 1, 1};
  blockDim = cc_uint3{block, 1, 1};
  cc_job.fn = (cc_kernel_fn)kernel;
  cc_cur_kernel = kernel;
  bool first;
  cc_shape *shape = cc_shape_of(kernel, grid, block, n, bufs, &first);
  cc_checking = first;
  cc_launch_id++, cc_raced = false, cc_nwords_used = 0; // the words of earlier launches are stale
  memcpy(cc_job.bufs.p, bufs, sizeof cc_job.bufs.p);
  cc_job.n = n;
  cc_job.scalars = scalars;
  if (!first && !shape->waits) { // each thread to its end in turn, on this stack
    cc_direct = true;
    for (unsigned b = 0; b < grid; b++) {
      blockIdx.x = b;
      for (unsigned t = 0; t < block; t++) {
        cc_cur = t, threadIdx.x = t, cc_fib[t].block = b;
        cc_job.fn(cc_job.bufs, n, scalars);
      }
      cc_poison_shared();
    }
    cc_direct = false;
    return 0;
  }
  cc_waited = false;
  cc_block_barrier = cc_barrier{0, 0};
  for (unsigned w = 0; w < 32; w++) cc_warp_barrier[w] = cc_barrier{0, 0};
  for (unsigned i = 0; i < block; i++) cc_fib[i].done = false, cc_fib[i].block = 0;
  cc_poison_shared();
  for (bool running = true; running;) { // round robin until every fiber is done
    running = false;
    for (unsigned i = 0; i < block; i++)
      if (!cc_fib[i].done) cc_switch_to(i), running = true;
  }
  if (shape && first) shape->waits = cc_waited;
  return cc_raced ? -1 : 0;
}
