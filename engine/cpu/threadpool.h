/* weft's CPU worker pool: persistent threads that run one function on every thread at once
 * (fork-join), tuned for the hundreds of small parallel regions of a decode step.
 *
 *     wf_threadpool *pool = wf_threadpool_new(0);          // one thread per core
 *     if (!pool) return WF_ENOMEM;
 *     wf_threadpool_run(pool, my_fn, &ctx);                 // my_fn(&ctx, ith, nth), ith 0 = caller
 *     wf_threadpool_free(pool);
 *
 * A run hands work over with a generation counter the workers spin on briefly, then sleep on
 * (futex on Linux); it allocates nothing. A worker's share is run by whichever of it and the
 * caller claims it first, so a run never waits for a worker the OS has not scheduled yet
 * (fn must therefore not wait for another ith: shares may run one after another). One pool is driven by one thread at a time: run() is
 * not reentrant and must not be called concurrently on the same pool, nor from inside fn. */
#ifndef WF_ENGINE_CPU_THREADPOOL_H
#define WF_ENGINE_CPU_THREADPOOL_H

typedef struct wf_threadpool wf_threadpool;

#define WF_THREADPOOL_MAX_THREADS 256

/* Creates a pool of n_threads threads in total, counting the caller (so n_threads - 1 workers
 * are started). 0 = one per online core; values are capped at WF_THREADPOOL_MAX_THREADS. NULL
 * if an allocation or pthread_create failed (nothing is leaked). */
wf_threadpool *wf_threadpool_new(int n_threads);

/* Stops and joins the workers and frees the pool. NULL is a no-op. Not concurrently with run(). */
void wf_threadpool_free(wf_threadpool *p);

/* Total number of threads (nth passed to fn), >= 1. */
int wf_threadpool_size(const wf_threadpool *p);

/* Runs fn(ctx, ith, nth) once for every ith in [0, nth) — the caller runs ith 0 — and returns
 * when all have returned; every write fn made is then visible to the caller. No allocation.
 * A NULL pool runs fn(ctx, 0, 1) on the caller. */
void wf_threadpool_run(wf_threadpool *p, void (*fn)(void *ctx, int ith, int nth), void *ctx);

#endif
