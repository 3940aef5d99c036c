/* threadpool: a persistent pool of pthreads that runs one parallel range at a time.
 *
 * pool_run(pool, n, fn, ctx) splits [0, n) into `threads` contiguous chunks, fixed
 * by n and the thread count alone (chunk i is [i*q + min(i, r), ...) with
 * q = n / threads, r = n % threads), calls fn(ctx, lo, hi) once per non-empty
 * chunk, and returns when all are done. The calling thread runs chunk 0, so a
 * pool of 1 thread starts no threads at all. Because the split is static, a
 * kernel that computes each index on its own gives the same bits on every run.
 *
 * Workers spin briefly on the job counter after finishing (a step issues many
 * short kernels back to back), then sleep on a condition variable, so a pool
 * left idle (say during an OpenBLAS GEMM, which runs on its own threads) costs
 * nothing. pool_run is not reentrant: one caller thread drives the pool.
 */
#ifndef COLOSSALC_RUNTIME_THREADPOOL_H
#define COLOSSALC_RUNTIME_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct ThreadPool ThreadPool;
typedef void (*PoolFn)(void *ctx, int64_t lo, int64_t hi);

/* A pool of `threads` (>= 1) threads, the caller included. NULL with a message. */
ThreadPool *pool_new(int threads, char *err, size_t errlen);
void pool_free(ThreadPool *pool);

int pool_threads(const ThreadPool *pool);

/* Chunk i of n items over t threads: [*lo, *hi). */
void pool_chunk(int64_t n, int t, int i, int64_t *lo, int64_t *hi);

/* Runs fn over [0, n) as described above; n <= 0 does nothing. */
void pool_run(ThreadPool *pool, int64_t n, PoolFn fn, void *ctx);

#endif
