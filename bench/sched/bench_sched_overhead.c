/* Scheduler overhead per iteration at 64 running requests, with the fake executor.
 *  1. core: wf_core_plan + wf_core_complete timed directly (the planning function the thread
 *     and the simulator share), steady state with 64 sequences decoding;
 *  2. thread: the full wf_sched (handoff intake, events through a free list to a consumer
 *     thread) and its own stats (sched_overhead_ms_avg, overhead_fraction).
 * Build and run: bench/sched/run.sh [build-dir] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/core.h"
#include "sched/fake_executor.h"
#include "sched/sched.h"

enum { NREQ = 64, PROMPT = 128, ITERS = 3000 };

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nop_token(void *u, wf_request *r, int c, const wf_generated_token *t, uint64_t n) {
    (void)u, (void)r, (void)c, (void)t, (void)n;
}
static void nop_finished(void *u, wf_request *r, int c, wf_finish_reason f, wf_status s,
                         const char *m, uint64_t n) {
    (void)u, (void)r, (void)c, (void)f, (void)s, (void)m, (void)n;
}
static void free_retired(void *u, wf_request *r) {
    (void)u;
    wf__request_free(r);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void bench_core(wf_kv_store *store) {
    wf_kv_pool *pool;
    wf_kv_pool_new(store->n_blocks, store->geometry.block_size, true, &pool);
    wf_fake_executor fx;
    wf_fake_executor_init(&fx, store, 32000, -1);
    fx.verify_kv = false;
    wf_executor ex = wf_fake_executor_get(&fx);
    wf_core core;
    wf_core_config cfg = {.policy = wf_sched_policy_find("slo"), .max_batch_tokens = 512,
                          .max_running = 64, .n_ctx = 8192, .pool = pool, .store = store,
                          .group = {.n_ranks = 1},
                          .cb = {nop_token, nop_finished, free_retired, NULL, NULL}};
    wf_core_init(&core, &cfg);
    int32_t prompt[PROMPT];
    for (int i = 0; i < NREQ; i++) {
        for (int k = 0; k < PROMPT; k++) prompt[k] = 1 + (i * 131 + k) % 30000;
        wf_request_spec spec;
        wf_request_spec_init(&spec);
        spec.prompt = prompt;
        spec.n_prompt = PROMPT;
        spec.max_tokens = ITERS + 100;
        spec.ignore_eos = true;
        wf_request *r;
        wf__request_new(&spec, 8192, store->geometry.block_size, (uint64_t)i, &r);
        r->ttft_ms = 1000;
        r->tpot_ms = 100;
        wf_core_add(&core, r, mono_ns());
    }
    /* Warm up until all 64 decode. */
    for (int i = 0; i < 40; i++) {
        wf_task_batch *b = wf_core_plan(&core, mono_ns());
        wf_executor_run(ex, b, NULL, 0);
        wf_core_complete(&core, WF_OK, NULL, mono_ns());
    }
    uint64_t *cost = malloc(ITERS * sizeof *cost);
    uint64_t sum_plan = 0, sum_complete = 0, sum_exec = 0;
    int min_tasks = 1 << 30;
    for (int i = 0; i < ITERS; i++) {
        uint64_t t0 = mono_ns();
        wf_task_batch *b = wf_core_plan(&core, t0);
        uint64_t t1 = mono_ns();
        if (b->n_tasks < min_tasks) min_tasks = b->n_tasks;
        wf_executor_run(ex, b, NULL, 0);
        uint64_t t2 = mono_ns();
        wf_core_complete(&core, WF_OK, NULL, t2);
        uint64_t t3 = mono_ns();
        sum_plan += t1 - t0;
        sum_complete += t3 - t2;
        sum_exec += t2 - t1;
        cost[i] = (t1 - t0) + (t3 - t2);
    }
    qsort(cost, ITERS, sizeof *cost, cmp_u64);
    printf("core: %d iterations, %d sequences decoding in each (min tasks %d)\n", ITERS, NREQ,
           min_tasks);
    printf("core: plan %.2f us + complete %.2f us = %.2f us per iteration (p50 %.2f, p99 %.2f);"
           " fake executor %.2f us\n",
           sum_plan / 1e3 / ITERS, sum_complete / 1e3 / ITERS,
           (sum_plan + sum_complete) / 1e3 / ITERS, cost[ITERS / 2] / 1e3,
           cost[ITERS * 99 / 100] / 1e3, sum_exec / 1e3 / ITERS);
    free(cost);
    wf_core_free(&core, mono_ns());
    wf_kv_pool_free(pool);
}

typedef struct consumer {
    wf_sched *s;
    wf_handoff *q;
    atomic_int finished;
    atomic_long tokens;
} consumer;

static void *consume(void *arg) {
    consumer *c = arg;
    /* Polls like an event loop woken by a coalescing uv_async: the producer's pushes never
     * have to wake a thread blocked on the queue's condition variable. */
    while (atomic_load(&c->finished) < NREQ) {
        nanosleep(&(struct timespec){0, 200000}, NULL);
        for (wf_handoff_item *it = wf_handoff_take_all(c->q), *next; it; it = next) {
            next = it->next;
            wf_request_event *ev = (wf_request_event *)it;
            if (ev->kind == WF_EVENT_FINISHED) atomic_fetch_add(&c->finished, 1);
            else atomic_fetch_add(&c->tokens, 1);
            wf_request_event_free(c->s, ev);
        }
    }
    return NULL;
}

/* async: the fake executor runs batches on its own thread (as the CPU engine does), so every
 * iteration crosses threads twice (dispatch, completion through the scheduler's inbox). */
static void bench_thread(wf_kv_store *store, bool async) {
    const char *tag = async ? "thread (async executor)" : "thread";
    wf_fake_executor fx;
    wf_fake_executor_init(&fx, store, 32000, -1);
    fx.verify_kv = false;
    if (async && wf_fake_executor_start_async(&fx, 0) != WF_OK) exit(1);
    wf_sched_options o;
    wf_sched_options_init(&o);
    o.cost_given = true;
    o.cost[0] = 1;
    o.n_ctx = 8192;
    o.max_running = 64;
    o.default_ttft_ms = 1e6;
    wf_sched *s;
    wf_sched_new(&o, store, wf_fake_executor_get(&fx), &s);
    wf_sched_start(s);
    wf_handoff q;
    wf_handoff_init(&q, 0, NULL, NULL);
    consumer c = {.s = s, .q = &q};
    pthread_t th;
    pthread_create(&th, NULL, consume, &c);
    wf_request *reqs[NREQ];
    int32_t prompt[PROMPT];
    uint64_t t0 = mono_ns();
    for (int i = 0; i < NREQ; i++) {
        for (int k = 0; k < PROMPT; k++) prompt[k] = 1 + (i * 131 + k) % 30000;
        wf_request_spec spec;
        wf_request_spec_init(&spec);
        spec.prompt = prompt;
        spec.n_prompt = PROMPT;
        spec.max_tokens = 2000;
        spec.ignore_eos = true;
        wf_sched_reject why;
        if (wf_sched_submit(s, &spec, &q, NULL, &reqs[i], &why) != WF_OK) {
            fprintf(stderr, "submit: %s\n", why.message);
            exit(1);
        }
    }
    pthread_join(th, NULL);
    uint64_t t1 = mono_ns();
    wf_sched_stats st;
    wf_sched_get_stats(s, &st);
    printf("%s: %d requests x 2000 tokens in %.2f s (%.0f tokens/s), %llu iterations\n", tag,
           NREQ, (t1 - t0) / 1e9, atomic_load(&c.tokens) / ((t1 - t0) / 1e9),
           (unsigned long long)st.iterations);
    printf("%s: sched_overhead_ms_avg %.4f ms (%.1f us), iteration_ms_avg %.4f ms, "
           "overhead fraction %.1f%%\n",
           tag, st.sched_overhead_ms_avg, st.sched_overhead_ms_avg * 1e3, st.iteration_ms_avg,
           100 * st.overhead_fraction);
    printf("%s: of which plan %.1f us, complete + events %.1f us\n", tag, st.plan_ms_avg * 1e3,
           st.complete_ms_avg * 1e3);
    for (int i = 0; i < NREQ; i++) wf_sched_release(s, reqs[i]);
    wf_sched_drain(s, 1000);
    wf_sched_free(s);
    wf_fake_executor_stop(&fx);
    wf_handoff_free(&q);
}

int main(void) {
    wf_kv_geometry g = {.n_layers = 1, .n_kv_heads = 1, .head_dim = 4, .block_size = 16,
                        .dtype = WF_KV_DTYPE_F32};
    wf_kv_store store;
    if (wf_kv_store_init(&store, &g, wf_kv_geometry_block_bytes(&g) * 16384) != WF_OK) return 1;
    bench_core(&store);
    bench_thread(&store, false);
    bench_thread(&store, true);
    wf_kv_store_free(&store);
    return 0;
}
