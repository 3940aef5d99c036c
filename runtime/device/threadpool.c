/* threadpool: static-chunk parallel ranges on persistent pthreads (see the header).
 *
 * Hand-off: the caller publishes the job (n, fn, ctx), sets `pending` to the
 * worker count and bumps `gen` under the mutex, broadcasting `start`. A worker
 * that sees a new `gen` (spinning, or woken) runs its chunk and decrements
 * `pending`; the one that brings it to 0 signals `done` under the mutex. The
 * caller runs chunk 0 meanwhile, then spins and finally sleeps until `pending`
 * is 0. Both sleeps re-check their condition under the mutex, so no wake-up is lost.
 */
#include "runtime/device/threadpool.h"

#include "runtime/io/fileio.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { POOL_SPIN = 1 << 10, POOL_MAX_THREADS = 1024 };

typedef struct PoolWorker {
  ThreadPool *pool;
  int index; /* 1.. threads-1; the caller is 0 */
} PoolWorker;

struct ThreadPool {
  int threads;
  int started;         /* workers running (for pool_free after a partial start) */
  pthread_t *tids;     /* [threads-1] */
  PoolWorker *workers; /* [threads-1] */
  pthread_mutex_t mu;
  pthread_cond_t start, done;
  atomic_ullong gen;  /* job number; bumped under mu */
  atomic_int pending; /* workers still on the current job */
  atomic_int stop;
  int64_t n; /* the current job */
  PoolFn fn;
  void *ctx;
};

static inline void pool_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void pool_chunk(int64_t n, int t, int i, int64_t *lo, int64_t *hi) {
  int64_t q = n / t, r = n % t;
  *lo = i * q + (i < r ? i : r);
  *hi = *lo + q + (i < r);
}

static void pool_run_chunk(ThreadPool *pool, int i) {
  int64_t lo, hi;
  pool_chunk(pool->n, pool->threads, i, &lo, &hi);
  if (lo < hi) pool->fn(pool->ctx, lo, hi);
}

/* Waits for a job after `seen`; returns its number, or seen when stopping. */
static unsigned long long pool_wait_job(ThreadPool *pool, unsigned long long seen) {
  for (int s = 0; s < POOL_SPIN; s++) {
    if (atomic_load(&pool->stop)) return seen;
    unsigned long long g = atomic_load(&pool->gen);
    if (g != seen) return g;
    pool_pause();
  }
  pthread_mutex_lock(&pool->mu);
  while (atomic_load(&pool->gen) == seen && !atomic_load(&pool->stop)) pthread_cond_wait(&pool->start, &pool->mu);
  unsigned long long g = atomic_load(&pool->stop) ? seen : atomic_load(&pool->gen);
  pthread_mutex_unlock(&pool->mu);
  return g;
}

static void *pool_worker_main(void *arg) {
  PoolWorker *w = arg;
  ThreadPool *pool = w->pool;
  unsigned long long seen = 0;
  for (;;) {
    unsigned long long g = pool_wait_job(pool, seen);
    if (g == seen) return NULL;
    seen = g;
    pool_run_chunk(pool, w->index);
    if (atomic_fetch_sub(&pool->pending, 1) == 1) {
      pthread_mutex_lock(&pool->mu);
      pthread_cond_signal(&pool->done);
      pthread_mutex_unlock(&pool->mu);
    }
  }
}

static int pool_start_workers(ThreadPool *pool, char *err, size_t errlen) {
  int nw = pool->threads - 1;
  pool->tids = calloc((size_t)nw + 1, sizeof *pool->tids);
  pool->workers = calloc((size_t)nw + 1, sizeof *pool->workers);
  if (!pool->tids || !pool->workers) return file_set_error(err, errlen, "thread pool: out of memory");
  for (int i = 0; i < nw; i++) {
    pool->workers[i] = (PoolWorker){pool, i + 1};
    int rc = pthread_create(&pool->tids[i], NULL, pool_worker_main, &pool->workers[i]);
    if (rc != 0)
      return file_set_error(err, errlen, "thread pool: cannot start thread %d of %d: %s", i + 2, pool->threads,
                            strerror(rc));
    pool->started = i + 1;
  }
  return 0;
}

ThreadPool *pool_new(int threads, char *err, size_t errlen) {
  if (threads < 1 || threads > POOL_MAX_THREADS) {
    file_set_error(err, errlen, "thread pool: %d threads (1 to %d allowed)", threads, POOL_MAX_THREADS);
    return NULL;
  }
  ThreadPool *pool = calloc(1, sizeof *pool);
  if (!pool) {
    file_set_error(err, errlen, "thread pool: out of memory");
    return NULL;
  }
  pool->threads = threads;
  pthread_mutex_init(&pool->mu, NULL);
  pthread_cond_init(&pool->start, NULL);
  pthread_cond_init(&pool->done, NULL);
  if (pool_start_workers(pool, err, errlen) != 0) {
    pool_free(pool);
    return NULL;
  }
  return pool;
}

void pool_free(ThreadPool *pool) {
  if (!pool) return;
  pthread_mutex_lock(&pool->mu);
  atomic_store(&pool->stop, 1);
  pthread_cond_broadcast(&pool->start);
  pthread_mutex_unlock(&pool->mu);
  for (int i = 0; i < pool->started; i++) pthread_join(pool->tids[i], NULL);
  pthread_cond_destroy(&pool->start);
  pthread_cond_destroy(&pool->done);
  pthread_mutex_destroy(&pool->mu);
  free(pool->tids);
  free(pool->workers);
  free(pool);
}

int pool_threads(const ThreadPool *pool) { return pool->threads; }

static void pool_wait_done(ThreadPool *pool) {
  for (int s = 0; s < POOL_SPIN && atomic_load(&pool->pending) > 0; s++) pool_pause();
  if (atomic_load(&pool->pending) == 0) return;
  pthread_mutex_lock(&pool->mu);
  while (atomic_load(&pool->pending) > 0) pthread_cond_wait(&pool->done, &pool->mu);
  pthread_mutex_unlock(&pool->mu);
}

void pool_run(ThreadPool *pool, int64_t n, PoolFn fn, void *ctx) {
  if (n <= 0) return;
  if (pool->threads == 1 || n == 1) { /* chunk 0 is all of [0, n) then */
    fn(ctx, 0, n);
    return;
  }
  pool->n = n, pool->fn = fn, pool->ctx = ctx;
  atomic_store(&pool->pending, pool->threads - 1);
  pthread_mutex_lock(&pool->mu);
  atomic_fetch_add(&pool->gen, 1);
  pthread_cond_broadcast(&pool->start);
  pthread_mutex_unlock(&pool->mu);
  pool_run_chunk(pool, 0);
  pool_wait_done(pool);
}
