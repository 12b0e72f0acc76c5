/* Fork-join worker pool for the CPU kernels. A run publishes (fn, ctx) and bumps a generation
 * counter; workers spin on it for a short while (the next matmul of a decode step usually
 * follows within microseconds), then sleep on a futex. Completion is counted the same way in
 * the other direction. Nothing is allocated after wf_threadpool_new.
 *
 * A run never waits for a worker that has not started: each worker's share (its ith) is
 * claimed, by the worker when it wakes or by the caller once its own share is done, whichever
 * comes first; the caller runs the shares nobody claimed and then waits only for the workers
 * that did claim theirs. On a host where other processes hold the cores, a descheduled worker
 * used to stall every one of a decode step's ~200 fork-joins until the kernel scheduled it
 * again (a 2-thread step took 4-10x a 1-thread one); now it costs at most the share it is
 * running. Every ith still runs exactly once with the same nth, so results do not change. */
#define _GNU_SOURCE
#include "engine/cpu/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* ~5-50 us of pause instructions (10-140 cycles each, by CPU) before sleeping: enough to
 * bridge the gap between two kernels of one decode step, short enough not to burn a shared
 * core when idle. */
#define SPIN_ITERS 1024

typedef struct worker {
    /* Who runs this worker's share of the current run: 2r (even) while run r's share is open,
     * 2r + 1 once the worker or the caller took it. Its own line: the caller and one worker
     * touch it. */
    alignas(64) _Atomic uint64_t claim;
    wf_threadpool *pool;
    pthread_t thread;
    int ith;
} worker;

struct wf_threadpool {
    /* written by the caller, read by the workers: one line, rarely written */
    alignas(64) _Atomic uint32_t generation;
    _Atomic int n_sleeping;            /* workers inside futex_wait on generation */
    void (*fn)(void *ctx, int ith, int nth);
    void *ctx;
    /* atomic: a worker may look at it while the caller, not waiting for that worker (it ran the
     * worker's share itself), goes on to free the pool */
    _Atomic bool stop;
    /* written by every worker at the end of a run: its own line */
    alignas(64) _Atomic uint32_t n_done;
    _Atomic int caller_sleeping;
    alignas(64) int n_threads;
    int n_started;
    uint64_t run;                      /* runs so far (the caller's only) */
    worker *workers;                   /* n_threads - 1 */
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
#if defined(__linux__)
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#else
    (void)addr; (void)expected;
    sched_yield();
#endif
}

static void futex_wake_all(_Atomic uint32_t *addr) {
#if defined(__linux__)
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

/* Waits until *word != old; returns the new value (acquire). */
static uint32_t wait_change(_Atomic uint32_t *word, uint32_t old, _Atomic int *sleeping) {
    uint32_t v;
    for (int i = 0; i < SPIN_ITERS; i++) {
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != old) return v;
        CPU_RELAX();
    }
    for (;;) {
        /* seq_cst pairs with the publisher's seq_cst store then load of *sleeping: either it
         * sees us sleeping and wakes us, or the kernel's value check sees its new value. */
        atomic_fetch_add(sleeping, 1);
        v = atomic_load(word);
        if (v == old) futex_wait(word, old);
        atomic_fetch_sub(sleeping, 1);
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != old) return v;
    }
}

static void *worker_main(void *arg) {
    worker *w = arg;
    wf_threadpool *p = w->pool;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_change(&p->generation, seen, &p->n_sleeping);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        /* Woken late, the open share may already be a later run's: taking it is right (fn and
         * ctx were written before it was opened); a share already taken is left alone. */
        uint64_t v = atomic_load_explicit(&w->claim, memory_order_acquire);
        if ((v & 1) || !atomic_compare_exchange_strong(&w->claim, &v, v + 1)) continue;
        p->fn(p->ctx, w->ith, p->n_threads);
        atomic_fetch_add(&p->n_done, 1); /* seq_cst: pairs with caller_sleeping */
        if (atomic_load(&p->caller_sleeping)) futex_wake_all(&p->n_done);
    }
    return NULL;
}

wf_threadpool *wf_threadpool_new(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > WF_THREADPOOL_MAX_THREADS) n_threads = WF_THREADPOOL_MAX_THREADS;
    wf_threadpool *p = aligned_alloc(64, (sizeof(*p) + 63) / 64 * 64);
    if (!p) return NULL;
    atomic_init(&p->generation, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->n_done, 0);
    atomic_init(&p->caller_sleeping, 0);
    p->fn = NULL;
    p->ctx = NULL;
    atomic_init(&p->stop, false);
    p->n_threads = n_threads;
    p->n_started = 0;
    p->run = 0;
    p->workers = NULL;
    if (n_threads > 1) {
        /* aligned: each worker's claim word has its own cache line */
        p->workers = aligned_alloc(64, (size_t)(n_threads - 1) * sizeof(worker));
        if (!p->workers) goto fail_workers;
        memset(p->workers, 0, (size_t)(n_threads - 1) * sizeof(worker));
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].ith = i + 1;
            atomic_init(&p->workers[i].claim, 1); /* nothing open */
            if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0)
                goto fail_threads;
            p->n_started++;
        }
    }
    return p;

fail_threads:
    wf_threadpool_free(p);
    return NULL;
fail_workers:
    free(p);
    return NULL;
}

static void publish(wf_threadpool *p) {
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->n_sleeping) > 0) futex_wake_all(&p->generation);
}

void wf_threadpool_free(wf_threadpool *p) {
    if (!p) return;
    if (p->n_started > 0) {
        atomic_store_explicit(&p->stop, true, memory_order_release);
        publish(p);
        for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].thread, NULL);
    }
    free(p->workers);
    free(p);
}

int wf_threadpool_size(const wf_threadpool *p) { return p ? p->n_threads : 1; }

void wf_threadpool_run(wf_threadpool *p, void (*fn)(void *ctx, int ith, int nth), void *ctx) {
    if (!p || p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    /* Every share of the previous run was taken and the workers that took one have finished
     * it (we waited for them), so nobody reads these until a share of this run is claimed. */
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    const uint64_t open = 2 * ++p->run;
    for (int i = 0; i < p->n_started; i++)
        atomic_store_explicit(&p->workers[i].claim, open, memory_order_release);
    publish(p); /* seq_cst: orders the stores above before the new generation */
    fn(ctx, 0, p->n_threads);
    /* Shares still unclaimed: their workers are not running; do them here. */
    uint32_t target = 0;
    for (int i = 0; i < p->n_started; i++) {
        uint64_t v = open;
        if (atomic_compare_exchange_strong(&p->workers[i].claim, &v, open + 1))
            fn(ctx, p->workers[i].ith, p->n_threads);
        else
            target++; /* its worker took it */
    }
    uint32_t done = atomic_load_explicit(&p->n_done, memory_order_acquire);
    for (int i = 0; i < SPIN_ITERS && done != target; i++) {
        CPU_RELAX();
        done = atomic_load_explicit(&p->n_done, memory_order_acquire);
    }
    while (done != target) {
        atomic_store(&p->caller_sleeping, 1);
        done = atomic_load(&p->n_done);
        if (done != target) futex_wait(&p->n_done, done);
        atomic_store(&p->caller_sleeping, 0);
        done = atomic_load_explicit(&p->n_done, memory_order_acquire);
    }
}
