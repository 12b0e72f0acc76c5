/* sched/gate.h: mutual exclusion, round-robin turns between waiting classes, and the gated
 * executor decorator around an inline executor. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/base/clock.h"
#include "sched/gate.h"

#define TURNS 6

typedef struct worker {
    wf_gate *g;
    int cls;
} worker;

static pthread_mutex_t seq_lock = PTHREAD_MUTEX_INITIALIZER;
static int seq[4 * TURNS], n_seq;
static atomic_int inside;

static void *run_worker(void *arg) {
    worker *w = arg;
    for (int i = 0; i < TURNS; i++) {
        wf_gate_acquire(w->g, w->cls);
        ck_assert_int_eq(atomic_fetch_add(&inside, 1), 0); /* alone on the cores */
        pthread_mutex_lock(&seq_lock);
        seq[n_seq++] = w->cls;
        pthread_mutex_unlock(&seq_lock);
        usleep(1000);
        atomic_fetch_sub(&inside, 1);
        wf_gate_release(w->g, w->cls);
    }
    return NULL;
}

START_TEST(round_robin_and_exclusion) {
    wf_gate *g = wf_gate_new(2);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_null(wf_gate_new(0));
    n_seq = 0;
    /* Hold the cores while both classes line up, then let them go: turns alternate. */
    wf_gate_acquire(g, 1);
    worker a = {g, 0}, b = {g, 1};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run_worker, &a);
    pthread_create(&tb, NULL, run_worker, &b);
    while (wf_gate_waiting(g) != 2) usleep(1000);
    wf_gate_release(g, 1);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ck_assert_int_eq(n_seq, 2 * TURNS);
    for (int i = 1; i < n_seq; i++) ck_assert_msg(seq[i] != seq[i - 1], "turn %d went to class %d twice", i, seq[i]);
    ck_assert_uint_eq(wf_gate_turns(g, 0), TURNS);
    ck_assert_uint_eq(wf_gate_turns(g, 1), TURNS + 1);
    /* One class alone runs back to back. */
    n_seq = 0;
    pthread_create(&ta, NULL, run_worker, &a);
    pthread_join(ta, NULL);
    ck_assert_int_eq(n_seq, TURNS);
    wf_gate_free(g);
}
END_TEST

typedef struct timed {
    wf_gate *g;
    int cls;
    uint64_t deadline;
} timed;

static void *run_timed(void *arg) {
    timed *t = arg;
    wf_gate_acquire_by(t->g, t->cls, t->deadline);
    pthread_mutex_lock(&seq_lock);
    seq[n_seq++] = t->cls;
    pthread_mutex_unlock(&seq_lock);
    wf_gate_release(t->g, t->cls);
    return NULL;
}

/* Starts one waiter per entry while the gate is held, then releases: returns the order. */
static void order_of(wf_gate *g, timed *ts, int n) {
    n_seq = 0;
    wf_gate_acquire(g, 0);
    pthread_t th[4];
    for (int i = 0; i < n; i++) {
        pthread_create(&th[i], NULL, run_timed, &ts[i]);
        /* arrival order = index: the next one starts once this one waits */
        while (wf_gate_waiting(g) != i + 1) usleep(1000);
        usleep(2000); /* distinct arrival times for the slack cases */
    }
    wf_gate_release(g, 0);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    ck_assert_int_eq(n_seq, n);
}

START_TEST(earliest_deadline_first) {
    wf_gate *g = wf_gate_new(2);
    uint64_t now = wf_clock_now_ns();
    /* explicit deadlines: the earlier goes first, whatever the arrival */
    timed a[2] = {{g, 0, now + 5000000000ull}, {g, 1, now + 1000000000ull}};
    order_of(g, a, 2);
    ck_assert_int_eq(seq[0], 1);
    ck_assert_int_eq(seq[1], 0);
    /* no deadline and no slack: after any batch with one */
    timed b[2] = {{g, 0, 0}, {g, 1, now + 60000000000ull}};
    order_of(g, b, 2);
    ck_assert_int_eq(seq[0], 1);
    /* with a slack, a batch without a deadline is due arrival + slack: before a lax one */
    wf_gate_set_slack(g, 0, 5);
    timed c[2] = {{g, 0, 0}, {g, 1, wf_clock_now_ns() + 60000000000ull}};
    order_of(g, c, 2);
    ck_assert_int_eq(seq[0], 0);
    /* equal slack on both classes: arrival order */
    wf_gate_set_slack(g, 1, 5);
    timed d[3] = {{g, 1, 0}, {g, 0, 0}, {g, 1, 0}};
    order_of(g, d, 3);
    ck_assert_int_eq(seq[0], 1);
    ck_assert_int_eq(seq[1], 0);
    ck_assert_int_eq(seq[2], 1);
    wf_gate_free(g);
}
END_TEST

static int inline_batches;

static wf_status inline_dispatch(void *ctx, wf_task_batch *b, wf_executor_done_fn done, void *user) {
    (void)ctx;
    ck_assert_int_eq(atomic_load(&inside), 0);
    inline_batches++;
    for (int i = 0; i < b->n_tasks; i++) b->tasks[i].status = WF_OK;
    done(user, b, WF_OK, NULL);
    return WF_OK;
}

static bool inline_supports(void *ctx, wf_task_kind kind) {
    (void)ctx;
    return kind == WF_TASK_DENOISE;
}

static const wf_executor_ops inline_ops = {.name = "inline", .supports = inline_supports,
                                           .dispatch = inline_dispatch};

START_TEST(gated_executor) {
    wf_gate *g = wf_gate_new(2);
    wf_gated_executor *x;
    wf_executor inner = {.ops = &inline_ops};
    ck_assert_int_eq(wf_gated_executor_new(inner, g, 2, &x), WF_EINVAL);
    ck_assert_int_eq(wf_gated_executor_new(inner, g, 1, &x), WF_OK);
    wf_executor ex = wf_gated_executor_get(x);
    ck_assert_str_eq(ex.ops->name, "inline");
    ck_assert(wf_executor_supports(ex, WF_TASK_DENOISE));
    ck_assert(!wf_executor_supports(ex, WF_TASK_DECODE));
    wf_task t = {.kind = WF_TASK_DENOISE, .status = WF_EINTERNAL};
    wf_task_batch b = {.tasks = &t, .n_tasks = 1};
    char msg[64];
    inline_batches = 0;
    ck_assert_int_eq(wf_executor_run(ex, &b, msg, sizeof msg), WF_OK);
    ck_assert_int_eq(t.status, WF_OK);
    ck_assert_int_eq(inline_batches, 1);
    ck_assert_uint_eq(wf_gate_turns(g, 1), 1);
    wf_gated_executor_free(x);
    wf_gate_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sched/gate");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, round_robin_and_exclusion);
    tcase_add_test(tc, gated_executor);
    tcase_add_test(tc, earliest_deadline_first);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
