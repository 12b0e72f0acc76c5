/* engine/cpu/threadpool.c: every ith runs exactly once per run, writes are visible after
 * run() returns, pools of sizes 1..4 (also nested: a pool driven from another pool's
 * workers), runs after the workers went to sleep, shares run by the caller when their worker
 * is late (and by the worker otherwise) without ever running twice, and clean shutdown. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "check_main.h"
#include "engine/cpu/threadpool.h"

#define MAX_N 8

typedef struct run_ctx {
    _Atomic int calls[MAX_N];
    int seen_nth;
    _Atomic int bad_nth;
    long plain[MAX_N]; /* plain writes, checked by the caller after run() */
    long round;
} run_ctx;

static void count_fn(void *arg, int ith, int nth) {
    run_ctx *c = arg;
    if (nth != c->seen_nth || ith < 0 || ith >= nth) atomic_fetch_add(&c->bad_nth, 1);
    else {
        atomic_fetch_add(&c->calls[ith], 1);
        c->plain[ith] = c->round;
    }
}

static void check_runs(wf_threadpool *p, int runs, long sleep_ns) {
    run_ctx c = {.seen_nth = wf_threadpool_size(p)};
    int nth = c.seen_nth;
    for (int r = 1; r <= runs; r++) {
        c.round = r;
        wf_threadpool_run(p, count_fn, &c);
        for (int i = 0; i < nth; i++) {
            ck_assert_int_eq(atomic_load(&c.calls[i]), r);
            ck_assert_int_eq(c.plain[i], r);
        }
        if (sleep_ns) {
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
        }
    }
    ck_assert_int_eq(atomic_load(&c.bad_nth), 0);
}

START_TEST(test_sizes_and_runs) {
    for (int n = 1; n <= 4; n++) {
        wf_threadpool *p = wf_threadpool_new(n);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(wf_threadpool_size(p), n);
        check_runs(p, 3000, 0);
        wf_threadpool_free(p);
    }
}
END_TEST

START_TEST(test_after_sleep) {
    /* long gaps make workers leave the spin loop and sleep on the futex */
    wf_threadpool *p = wf_threadpool_new(3);
    ck_assert_ptr_nonnull(p);
    check_runs(p, 40, 3 * 1000 * 1000);
    check_runs(p, 500, 0);
    wf_threadpool_free(p);
}
END_TEST

typedef struct race_ctx {
    _Atomic int calls[MAX_N];
    long plain[MAX_N];
    long round;
    pthread_t caller;
    _Atomic int by_caller; /* a worker's share (ith > 0) run on the caller's thread */
    _Atomic int by_worker;
} race_ctx;

static void race_fn(void *arg, int ith, int nth) {
    (void)nth;
    race_ctx *c = arg;
    atomic_fetch_add(&c->calls[ith], 1);
    c->plain[ith] = c->round;
    if (ith > 0) atomic_fetch_add(pthread_equal(pthread_self(), c->caller) ? &c->by_caller : &c->by_worker, 1);
    /* the caller's own share is sometimes long (workers, spinning, claim theirs first) and
     * sometimes empty (a worker asleep on the futex is beaten to its share) */
    if (ith == 0 && c->round % 3 == 0) {
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
}

START_TEST(test_caller_takes_late_shares) {
    for (int n = 2; n <= 4; n++) {
        wf_threadpool *p = wf_threadpool_new(n);
        ck_assert_ptr_nonnull(p);
        race_ctx c = {.caller = pthread_self()};
        for (int r = 1; r <= 600; r++) {
            c.round = r;
            wf_threadpool_run(p, race_fn, &c);
            for (int i = 0; i < n; i++) {
                ck_assert_int_eq(atomic_load(&c.calls[i]), r); /* exactly once per run */
                ck_assert_int_eq(c.plain[i], r);               /* its writes visible */
            }
            if (r % 5 == 0) { /* long enough for the workers to fall asleep */
                struct timespec ts = {0, 2 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        ck_assert_int_eq(atomic_load(&c.by_caller) + atomic_load(&c.by_worker), 600 * (n - 1));
        fprintf(stderr, "pool of %d: workers' shares run by the caller %d, by the workers %d\n", n,
                atomic_load(&c.by_caller), atomic_load(&c.by_worker));
        wf_threadpool_free(p);
    }
}
END_TEST

typedef struct nest_ctx {
    wf_threadpool *inner[4];
    _Atomic int failures;
} nest_ctx;

static void outer_fn(void *arg, int ith, int nth) {
    (void)nth;
    nest_ctx *c = arg;
    run_ctx rc = {.seen_nth = wf_threadpool_size(c->inner[ith])};
    for (int r = 1; r <= 200; r++) {
        rc.round = r;
        wf_threadpool_run(c->inner[ith], count_fn, &rc);
        for (int i = 0; i < rc.seen_nth; i++)
            if (atomic_load(&rc.calls[i]) != r || rc.plain[i] != r) atomic_fetch_add(&c->failures, 1);
    }
    if (atomic_load(&rc.bad_nth)) atomic_fetch_add(&c->failures, 1);
}

START_TEST(test_nested) {
    for (int outer_n = 1; outer_n <= 4; outer_n++) {
        nest_ctx c;
        atomic_init(&c.failures, 0);
        wf_threadpool *outer = wf_threadpool_new(outer_n);
        ck_assert_ptr_nonnull(outer);
        for (int i = 0; i < outer_n; i++) {
            c.inner[i] = wf_threadpool_new(1 + (i + outer_n) % 4);
            ck_assert_ptr_nonnull(c.inner[i]);
        }
        for (int r = 0; r < 5; r++) wf_threadpool_run(outer, outer_fn, &c);
        ck_assert_int_eq(atomic_load(&c.failures), 0);
        for (int i = 0; i < outer_n; i++) wf_threadpool_free(c.inner[i]);
        wf_threadpool_free(outer);
    }
}
END_TEST

START_TEST(test_shutdown_and_defaults) {
    wf_threadpool_free(NULL);
    wf_threadpool *p = wf_threadpool_new(0);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_ge(wf_threadpool_size(p), 1);
    wf_threadpool_free(p); /* never ran */
    for (int i = 0; i < 20; i++) {
        p = wf_threadpool_new(4);
        ck_assert_ptr_nonnull(p);
        if (i & 1) check_runs(p, 3, 0);
        wf_threadpool_free(p);
    }
    run_ctx c = {.seen_nth = 1, .round = 1};
    wf_threadpool_run(NULL, count_fn, &c);
    ck_assert_int_eq(atomic_load(&c.calls[0]), 1);
    ck_assert_int_eq(wf_threadpool_size(NULL), 1);
}
END_TEST

static Suite *threadpool_suite(void) {
    Suite *s = suite_create("threadpool");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sizes_and_runs);
    tcase_add_test(tc, test_after_sleep);
    tcase_add_test(tc, test_caller_takes_late_shares);
    tcase_add_test(tc, test_nested);
    tcase_add_test(tc, test_shutdown_and_defaults);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(threadpool_suite)
