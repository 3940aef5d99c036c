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
      cc_barrier_wait(&cc_block_barrier, blockDim.x); // the block is done
      if (t == 0) cc_poison_shared();
      cc_barrier_wait(&cc_block_barrier, blockDim.x); // the next starts on fresh shared memory
    }
    cc_fib[t].done = true;
    cc_yield();
  }
}

// Runs fiber i until it yields (not inlined: the caller's variables stay out of the
// _setjmp frame).
__attribute__((noinline)) static void cc_switch_to(unsigned i) {
  cc_fiber *f = &cc_fib[i];
  cc_cur = i;
  threadIdx = cc_uint3{i, 0, 0};
  blockIdx = cc_uint3{f->block, 0, 0};
#if CC_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, CC_STACK);
#endif
  if (!_setjmp(cc_sched)) {
    if (f->started) _longjmp(f->jb, 1);
    f->started = true;
    swapcontext(&cc_sched_uc, &f->uc); // never returns here: the fiber comes back by _longjmp
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
  cc_launch_id++, cc_raced = false, cc_nwords_used = 0; // the words of earlier launches are stale
  memcpy(cc_job.bufs.p, bufs, sizeof cc_job.bufs.p);
  cc_job.n = n;
  cc_job.scalars = scalars;
  cc_block_barrier = cc_barrier{0, 0};
  for (unsigned w = 0; w < 32; w++) cc_warp_barrier[w] = cc_barrier{0, 0};
  for (unsigned i = 0; i < block; i++) cc_fib[i].done = false, cc_fib[i].block = 0;
  cc_poison_shared();
  for (bool running = true; running;) { // round robin until every fiber is done
    running = false;
    for (unsigned i = 0; i < block; i++)
      if (!cc_fib[i].done) cc_switch_to(i), running = true;
  }
  return cc_raced ? -1 : 0;
}
