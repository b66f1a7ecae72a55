/*
 * threadpool.h — a fixed pool of worker threads running one parallel-for at a time.
 *
 * pool_for(pool, n, fn, ctx) calls fn(ctx, begin, end) on disjoint contiguous ranges covering 0..n-1,
 * one range per thread, split the same way for a given (n, n_threads). Results are bitwise identical
 * for any thread count as long as each output element is computed entirely inside one call (the
 * kernels are written that way: no cross-thread reductions).
 * The calling thread takes part. Not reentrant: one pool_for at a time per pool.
 * pool_for_any hands the ranges out dynamically instead, for work whose result cannot depend on the
 * split (the matmul kernels): on a machine where a thread can be put off the CPU for milliseconds, a
 * static half per thread makes every parallel-for wait for the slowest thread.
 */
#ifndef SL_THREADPOOL_H
#define SL_THREADPOOL_H

#include <stddef.h>

typedef struct pool_t pool_t;
typedef void (*pool_fn)(void *ctx, size_t begin, size_t end);

/* n_threads <= 0: number of online cores. Returns NULL on allocation failure. */
pool_t *pool_new(int n_threads);
void pool_free(pool_t *pool);
int pool_size(const pool_t *pool);
/* pool may be NULL (runs inline). Ranges are at least `grain` items (except the last). */
void pool_for(pool_t *pool, size_t n, size_t grain, pool_fn fn, void *ctx);
/* Like pool_for, but fn is called any number of times, by any of the pool's threads, on disjoint ranges
 * covering 0..n-1, each a multiple of `grain` long but the last (starting at multiples of grain), claimed one
 * at a time from a shared counter, shorter towards the job's end: a thread the system delays holds up at most the range it holds, and a
 * worker that wakes after the work is done is not waited for. Only for fn without per-call state whose
 * outputs do not depend on how the items are split (each output computed whole inside one call). */
void pool_for_any(pool_t *pool, size_t n, size_t grain, pool_fn fn, void *ctx);
/* Inside fn of a job of pool: which of its threads runs the call, 0 (the caller) .. pool_size - 1, for
 * per-thread scratch when fn is called several times per thread (pool_for_any). Outside a pool's worker
 * (the caller, or pool NULL) 0. Cannot fail. */
int pool_thread(const pool_t *pool);

/* A hint: the next parallel-for reads these n byte ranges (at most SL_POOL_HINT_MAX, in that order) first.
 * Workers waiting for it prefetch them into the caches meanwhile, while the caller does its serial work
 * alone, and drop the rest when it starts; a later hint replaces an earlier one. Only prefetch instructions
 * touch the ranges (they never fault and change no byte), so no result depends on it. pool NULL or of one
 * thread: nothing. Cannot fail. */
#define SL_POOL_HINT_MAX 4
void pool_hint(pool_t *pool, const void *const *p, const size_t *bytes, int n);

#endif
