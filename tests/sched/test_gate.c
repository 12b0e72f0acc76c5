/* sched/gate.h: mutual exclusion, round-robin turns between waiting classes, the gated
 * executor decorator around an inline executor, the one runner thread that takes every gated
 * executor's turns in one EDF order, and the per-turn timing. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
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


/* ---- late binding: claims granted in one EDF order over both classes ---- */

static int grants[16], n_grants;

static void on_grant(void *user) { grants[n_grants++] = (int)(intptr_t)user; }

typedef struct claimants {
    wf_gate *g;
    wf_gated_executor *x[2]; /* class 0 (text), class 1 (images) */
} claimants;

static void claimants_new(claimants *c, double share) {
    c->g = wf_gate_new(2);
    wf_gate_set_share(c->g, 0, share);
    wf_gate_set_share(c->g, 1, share);
    wf_executor inner = {.ops = &inline_ops};
    for (int k = 0; k < 2; k++) ck_assert_int_eq(wf_gated_executor_new(inner, c->g, k, &c->x[k]), WF_OK);
    n_grants = 0;
}

static void claimants_free(claimants *c) {
    for (int k = 0; k < 2; k++) wf_gated_executor_free(c->x[k]);
    wf_gate_free(c->g);
}

static void claim(claimants *c, int k, uint64_t deadline, double pred_ms) {
    ck_assert_int_eq(wf_gated_executor_claim(c->x[k], deadline, pred_ms, on_grant, (void *)(intptr_t)k), WF_OK);
}

/* The granted class's scheduler composes its batch and runs it (the turn is used). */
static void run_granted(claimants *c, int k) {
    ck_assert(wf_gated_executor_granted(c->x[k]));
    wf_task t = {.kind = WF_TASK_DENOISE};
    wf_task_batch b = {.tasks = &t, .n_tasks = 1};
    char msg[64];
    ck_assert_int_eq(wf_executor_run(wf_gated_executor_get(c->x[k]), &b, msg, sizeof msg), WF_OK);
    ck_assert(!wf_gated_executor_granted(c->x[k]));
}

START_TEST(claims_take_one_edf_order) {
    claimants c;
    claimants_new(&c, 0);
    uint64_t now = wf_clock_now_ns(), ms = 1000000;
    /* A free gate grants a claim at once, inside the call (no callback: the caller sees it). */
    claim(&c, 1, now + 500 * ms, 5);
    ck_assert(wf_gated_executor_granted(c.x[1]));
    ck_assert_int_eq(n_grants, 0);
    /* While images run: a text iteration due later, then an image step due earlier. */
    claim(&c, 0, now + 300 * ms, 5);
    run_granted(&c, 1); /* ends its turn: the only waiter, text, is granted */
    ck_assert_int_eq(n_grants, 1);
    ck_assert_int_eq(grants[0], 0);
    /* Text holds the turn; image due earlier than the next text iteration: image first. */
    claim(&c, 1, now + 200 * ms, 5);
    run_granted(&c, 0);
    ck_assert_int_eq(grants[1], 1);
    claim(&c, 0, now + 400 * ms, 5); /* and vice versa: text due earlier than the next image */
    run_granted(&c, 1);
    ck_assert_int_eq(grants[2], 0);
    claim(&c, 1, now + 900 * ms, 5);
    run_granted(&c, 0);
    ck_assert_int_eq(grants[3], 1);
    run_granted(&c, 1);
    ck_assert_int_eq(n_grants, 4);
    ck_assert_uint_eq(wf_gate_turns(c.g, 0), 2);
    ck_assert_uint_eq(wf_gate_turns(c.g, 1), 3);
    claimants_free(&c);
}
END_TEST

START_TEST(claims_start_by_predicted_time) {
    claimants c;
    claimants_new(&c, 0);
    uint64_t now = wf_clock_now_ns(), ms = 1000000;
    wf_gate_acquire(c.g, 0); /* the cores are busy while both claim */
    /* Text due at +100 ms, predicted 10 ms (start by +90); an image step due at +120 ms but
     * predicted 50 ms (start by +70): the image must start first to make its deadline. */
    claim(&c, 0, now + 100 * ms, 10);
    claim(&c, 1, now + 120 * ms, 50);
    ck_assert_int_eq(n_grants, 0);
    wf_gate_release(c.g, 0);
    ck_assert_int_eq(n_grants, 1);
    ck_assert_int_eq(grants[0], 1);
    run_granted(&c, 1);
    ck_assert_int_eq(grants[1], 0);
    run_granted(&c, 0);
    claimants_free(&c);
}
END_TEST

START_TEST(claims_move_with_new_work) {
    claimants c;
    claimants_new(&c, 0);
    uint64_t now = wf_clock_now_ns(), ms = 1000000;
    wf_gate_acquire(c.g, 1);
    claim(&c, 0, now + 500 * ms, 0);
    claim(&c, 1, now + 300 * ms, 0);
    /* A text request due sooner arrives while the claims wait: text's claim moves ahead. */
    claim(&c, 0, now + 100 * ms, 0);
    wf_gate_release(c.g, 1);
    ck_assert_int_eq(grants[0], 0);
    /* Granted, but its work was cancelled meanwhile: the turn passes on, unused. */
    wf_gated_executor_unclaim(c.x[0]);
    ck_assert(!wf_gated_executor_granted(c.x[0]));
    ck_assert_int_eq(n_grants, 2);
    ck_assert_int_eq(grants[1], 1);
    /* A withdrawn claim is never granted. */
    claim(&c, 0, now + 50 * ms, 0);
    wf_gated_executor_unclaim(c.x[0]);
    run_granted(&c, 1);
    ck_assert_int_eq(n_grants, 2);
    /* A claim and a composed batch waiting at the gate take the same order. */
    wf_gate_acquire(c.g, 1);
    claim(&c, 0, now + 200 * ms, 0);
    timed early = {c.g, 1, now + 100 * ms};
    n_seq = 0;
    pthread_t th;
    pthread_create(&th, NULL, run_timed, &early);
    while (wf_gate_waiting(c.g) != 2) usleep(1000);
    wf_gate_release(c.g, 1);
    pthread_join(th, NULL); /* the batch due earlier ran, then released to the claim */
    ck_assert_int_eq(n_seq, 1);
    ck_assert_int_eq(n_grants, 3);
    ck_assert_int_eq(grants[2], 0);
    run_granted(&c, 0);
    claimants_free(&c);
}
END_TEST

START_TEST(lookahead_grants_the_next_claim_while_a_batch_runs) {
    claimants c;
    claimants_new(&c, 0);
    wf_gate_set_lookahead(c.g, true);
    uint64_t now = wf_clock_now_ns(), ms = 1000000;
    claim(&c, 1, now + 500 * ms, 5); /* a free gate: granted at once, the turn taken */
    ck_assert(wf_gated_executor_granted(c.x[1]));
    ck_assert_int_eq(n_grants, 0);
    /* While the image turn is held, text's claim is granted ahead, inside its call (the caller
     * sees it: no callback): its scheduler composes now. */
    claim(&c, 0, now + 300 * ms, 5);
    ck_assert_int_eq(n_grants, 0);
    ck_assert(wf_gated_executor_granted(c.x[0]));
    /* A composed batch due earlier than anything arrives: the reserved turn still goes first. */
    timed early = {c.g, 1, now + 1 * ms};
    n_seq = 0;
    pthread_t th;
    pthread_create(&th, NULL, run_timed, &early);
    while (wf_gate_waiting(c.g) != 1) usleep(1000);
    run_granted(&c, 1); /* the image batch ends: the turn is text's reserved one */
    usleep(20000);      /* room for the early batch to run, were the turn not reserved */
    ck_assert_int_eq(n_seq, 0);
    ck_assert_uint_eq(wf_gate_turns(c.g, 0), 0);
    run_granted(&c, 0);
    ck_assert_uint_eq(wf_gate_turns(c.g, 0), 1);
    pthread_join(th, NULL);
    ck_assert_int_eq(n_seq, 1);
    /* A reservation given up (nothing to run after all) passes to the next claim. */
    wf_gate_acquire(c.g, 1);
    claim(&c, 0, now + 100 * ms, 0);
    ck_assert(wf_gated_executor_granted(c.x[0]));
    claim(&c, 1, now + 200 * ms, 0); /* waits: the next turn is reserved */
    ck_assert(!wf_gated_executor_granted(c.x[1]));
    wf_gated_executor_unclaim(c.x[0]);
    ck_assert(!wf_gated_executor_granted(c.x[0]));
    ck_assert_int_eq(n_grants, 1); /* granted ahead in its place, by callback */
    ck_assert_int_eq(grants[0], 1);
    ck_assert(wf_gated_executor_granted(c.x[1]));
    wf_gate_release(c.g, 1);
    run_granted(&c, 1);
    /* image turns: the first claim, the early batch, the held gate, the reserved claim */
    ck_assert_uint_eq(wf_gate_turns(c.g, 1), 4);
    claimants_free(&c);
}
END_TEST

START_TEST(shares_keep_a_class_from_starving) {
    for (int with_share = 0; with_share < 2; with_share++) {
        claimants c;
        claimants_new(&c, with_share ? 0.25 : 0);
        uint64_t ms = 1000000;
        /* Images have had the cores for 40 ms, text not at all (no sleep in a turn of its
         * own: on a loaded host a short turn can last anything, and the rule is a ratio). */
        wf_gate_acquire(c.g, 1);
        usleep(40000);
        wf_gate_release(c.g, 1);
        /* An image step due sooner and a text iteration due later. */
        wf_gate_acquire(c.g, 1);
        uint64_t now = wf_clock_now_ns();
        claim(&c, 0, now + 10000 * ms, 0);
        claim(&c, 1, now + 1000 * ms, 0);
        wf_gate_release(c.g, 1);
        /* Pure EDF: the image. With a 25 % minimum share: text is owed its share first. */
        ck_assert_int_eq(grants[0], (with_share ? 0 : 1));
        ck_assert_uint_eq(wf_gate_share_turns(c.g, 0), (with_share ? 1 : 0));
        run_granted(&c, grants[0]);
        ck_assert_int_eq(grants[1], (with_share ? 1 : 0));
        run_granted(&c, grants[1]);
        claimants_free(&c);
    }
}
END_TEST

/* An inner executor with a run op: the gated executor runs its batches on the gate's own
 * thread (the one holding the turn), never through dispatch; its tasks are stamped 2 ms
 * apart so that the turn's compute is known. */
static pthread_t ran_on;
static int runs_here;

static wf_status here_dispatch(void *ctx, wf_task_batch *b, wf_executor_done_fn done, void *user) {
    (void)ctx;
    (void)b;
    (void)done;
    (void)user;
    ck_abort_msg("a gated executor dispatched to an inner executor that runs batches on the caller's thread");
    return WF_EINTERNAL;
}

static wf_status here_run(void *ctx, wf_task_batch *b, char *msg, size_t cap) {
    (void)ctx;
    (void)msg;
    (void)cap;
    ran_on = pthread_self();
    runs_here++;
    for (int i = 0; i < b->n_tasks; i++) {
        b->tasks[i].t_begin_ns = wf_clock_now_ns();
        usleep(2000);
        b->tasks[i].t_end_ns = wf_clock_now_ns();
        b->tasks[i].status = WF_OK;
    }
    return WF_OK;
}

typedef struct run_job_arg {
    wf_executor ex;
    wf_task_batch *b;
} run_job_arg;

static void *run_job_thread(void *arg) {
    run_job_arg *a = arg;
    char msg[32];
    ck_assert_int_eq(wf_executor_run(a->ex, a->b, msg, sizeof msg), WF_OK);
    return NULL;
}

static const wf_executor_ops here_ops = {.name = "here", .dispatch = here_dispatch, .run = here_run};

START_TEST(runs_the_inner_batch_on_the_turn_thread_and_times_the_turns) {
    wf_gate *g = wf_gate_new(2);
    wf_gated_executor *x;
    ck_assert_int_eq(wf_gated_executor_new((wf_executor){.ops = &here_ops}, g, 1, &x), WF_OK);
    wf_task t = {.kind = WF_TASK_DENOISE, .status = WF_EINTERNAL};
    wf_task_batch b = {.tasks = &t, .n_tasks = 1};
    runs_here = 0;
    /* Text holds the cores while the image batch waits for its turn: when text releases, the
     * image turn is a hand-over (its work waited), timed from text's compute end. */
    wf_gate_acquire(g, 0);
    usleep(1000);
    pthread_t waiter;
    run_job_arg arg = {wf_gated_executor_get(x), &b};
    ck_assert_int_eq(pthread_create(&waiter, NULL, run_job_thread, &arg), 0);
    while (wf_gate_waiting(g) != 1) usleep(500);
    wf_gate_release(g, 0);
    pthread_join(waiter, NULL);
    ck_assert_int_eq(runs_here, 1);
    ck_assert_int_eq(t.status, WF_OK);
    ck_assert(!pthread_equal(ran_on, pthread_self())); /* the gate's thread, not the caller's */
    wf_gate_turn_stats ts;
    wf_gate_get_turn_stats(g, &ts);
    ck_assert_uint_eq(ts.compute.n, 2);         /* every used turn */
    ck_assert_uint_eq(ts.end_to_release.n, 2);
    ck_assert_uint_eq(ts.handover.n, 1);        /* only the image turn's work waited */
    ck_assert_uint_eq(ts.to_grant.n, 1);
    ck_assert_uint_eq(ts.grant_to_run.n, 1);
    /* the image turn's compute is its task's stamps: at least the 2 ms it slept */
    ck_assert(ts.compute.sum_us >= 2000.0);
    /* A turn nobody waited for is no hand-over. */
    wf_gate_acquire(g, 0);
    wf_gate_release(g, 0);
    wf_gate_get_turn_stats(g, &ts);
    ck_assert_uint_eq(ts.compute.n, 3);
    ck_assert_uint_eq(ts.handover.n, 1);
    wf_gated_executor_free(x);
    wf_gate_free(g);
}
END_TEST

START_TEST(histogram_quantiles_are_bucket_bounds) {
    wf_gate_hist h = {0};
    ck_assert(wf_gate_hist_quantile(&h, 0.5) == 0);
    /* 0.5 us (bucket 0: < 1), 3 us ([2, 4)), 100 us ([64, 128)) */
    h.n = 3;
    h.bucket[0] = h.bucket[2] = h.bucket[7] = 1;
    ck_assert(wf_gate_hist_quantile(&h, 0.0) == 1);
    ck_assert(wf_gate_hist_quantile(&h, 0.5) == 4);
    ck_assert(wf_gate_hist_quantile(&h, 0.99) == 128);
}
END_TEST

/* Which batch runs next, and on which thread: an inner executor that records its class. */
static pthread_mutex_t ord_lock = PTHREAD_MUTEX_INITIALIZER;
static int ord[64], n_ord, n_done;
static pthread_t ord_thread[64];

static wf_status ord_run(void *ctx, wf_task_batch *b, char *msg, size_t cap) {
    (void)b;
    (void)msg;
    (void)cap;
    pthread_mutex_lock(&ord_lock);
    ord_thread[n_ord] = pthread_self();
    ord[n_ord++] = (int)(intptr_t)ctx;
    pthread_mutex_unlock(&ord_lock);
    return WF_OK;
}

static const wf_executor_ops ord_ops = {.name = "ord", .dispatch = here_dispatch, .run = ord_run};

static void ord_done(void *user, wf_task_batch *b, wf_status st, const char *msg) {
    (void)user;
    (void)b;
    (void)msg;
    ck_assert_int_eq(st, WF_OK);
    pthread_mutex_lock(&ord_lock);
    n_done++;
    pthread_mutex_unlock(&ord_lock);
}

static int done_count(void) {
    pthread_mutex_lock(&ord_lock);
    int n = n_done;
    pthread_mutex_unlock(&ord_lock);
    return n;
}

static void ord_grant(void *user) { *(atomic_int *)user += 1; }

START_TEST(one_thread_runs_the_turns_in_one_edf_order) {
    /* Classes 0 (text) and 1 (images) through gated executors; class 2 holds the cores while
     * the work lines up. */
    wf_gate *g = wf_gate_new(3);
    wf_gated_executor *x[2];
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(wf_gated_executor_new((wf_executor){.ops = &ord_ops, .ctx = (void *)(intptr_t)k}, g, k, &x[k]),
                         WF_OK);
    uint64_t now = wf_clock_now_ns(), ms = 1000000;
    wf_task t[4] = {{.kind = WF_TASK_DECODE, .deadline_ns = now + 300 * ms},
                    {.kind = WF_TASK_DENOISE, .deadline_ns = now + 100 * ms},
                    {.kind = WF_TASK_DECODE, .deadline_ns = now + 200 * ms},
                    {.kind = WF_TASK_DENOISE, .deadline_ns = now + 400 * ms}};
    wf_task_batch b[4];
    for (int i = 0; i < 4; i++) b[i] = (wf_task_batch){.tasks = &t[i], .n_tasks = 1};
    n_ord = n_done = 0;
    wf_gate_acquire(g, 2);
    /* Composed batches: text due +300 ms, an image step due +100 ms. */
    ck_assert_int_eq(wf_executor_dispatch(wf_gated_executor_get(x[0]), &b[0], ord_done, NULL), WF_OK);
    ck_assert_int_eq(wf_executor_dispatch(wf_gated_executor_get(x[1]), &b[1], ord_done, NULL), WF_OK);
    ck_assert_int_eq(wf_gate_waiting(g), 2);
    wf_gate_release(g, 2);
    while (done_count() < 2) usleep(500);
    /* The image step first (earlier deadline), then text, both on the gate's one runner
     * thread: the thread that ended the image turn took the text batch itself. */
    ck_assert_int_eq(ord[0], 1);
    ck_assert_int_eq(ord[1], 0);
    ck_assert(pthread_equal(ord_thread[0], ord_thread[1]));
    ck_assert(!pthread_equal(ord_thread[0], pthread_self()));
    /* A late-bound claim and a composed batch in one order: the image claim (due +150 ms,
     * predicted 10 ms: start by +140) goes before the composed text batch (due +200 ms); the
     * text batch waits while the claimant composes, and runs after the image batch. */
    atomic_int granted = 0;
    wf_gate_acquire(g, 2);
    ck_assert_int_eq(wf_executor_dispatch(wf_gated_executor_get(x[0]), &b[2], ord_done, NULL), WF_OK);
    ck_assert_int_eq(wf_gated_executor_claim(x[1], now + 150 * ms, 10, ord_grant, &granted), WF_OK);
    wf_gate_release(g, 2);
    while (!atomic_load(&granted)) usleep(500);
    ck_assert(wf_gated_executor_granted(x[1]));
    usleep(20000); /* room for the text batch to run, were the turn not the claimant's */
    ck_assert_int_eq(done_count(), 2);
    ck_assert_int_eq(wf_executor_dispatch(wf_gated_executor_get(x[1]), &b[3], ord_done, NULL), WF_OK);
    while (done_count() < 4) usleep(500);
    ck_assert_int_eq(ord[2], 1);
    ck_assert_int_eq(ord[3], 0);
    ck_assert_uint_eq(wf_gate_turns(g, 0), 2);
    ck_assert_uint_eq(wf_gate_turns(g, 1), 2);
    for (int k = 0; k < 2; k++) wf_gated_executor_free(x[k]);
    wf_gate_free(g);
}
END_TEST

static wf_status cancelled_status;

static void cancel_done(void *user, wf_task_batch *b, wf_status st, const char *msg) {
    (void)user;
    (void)b;
    (void)msg;
    cancelled_status = st;
}

/* An inner executor whose batch runs until the test lets it end. */
static atomic_int slow_started, slow_release, slow_runs;

static wf_status slow_run(void *ctx, wf_task_batch *b, char *msg, size_t cap) {
    (void)ctx;
    (void)b;
    (void)msg;
    (void)cap;
    atomic_fetch_add(&slow_started, 1);
    while (!atomic_load(&slow_release)) usleep(500);
    atomic_fetch_add(&slow_runs, 1);
    return WF_OK;
}

static const wf_executor_ops slow_ops = {.name = "slow", .dispatch = here_dispatch, .run = slow_run};

START_TEST(a_batch_queued_behind_a_running_one_of_its_executor) {
    wf_gate *g = wf_gate_new(2);
    wf_gated_executor *x;
    ck_assert_int_eq(wf_gated_executor_new((wf_executor){.ops = &slow_ops}, g, 1, &x), WF_OK);
    wf_executor ex = wf_gated_executor_get(x);
    wf_task t[3] = {{.kind = WF_TASK_DENOISE}, {.kind = WF_TASK_DENOISE}, {.kind = WF_TASK_DENOISE}};
    wf_task_batch b[3] = {{.tasks = &t[0], .n_tasks = 1}, {.tasks = &t[1], .n_tasks = 1}, {.tasks = &t[2], .n_tasks = 1}};
    atomic_store(&slow_started, 0);
    atomic_store(&slow_release, 0);
    atomic_store(&slow_runs, 0);
    n_done = 0;
    ck_assert_int_eq(wf_executor_dispatch(ex, &b[0], ord_done, NULL), WF_OK);
    while (!atomic_load(&slow_started)) usleep(500);
    /* While the first runs, a second is dispatched and cancelled: reported at once, and it
     * leaves nothing behind in the order (the first is not waiting either). */
    cancelled_status = WF_OK;
    ck_assert_int_eq(wf_executor_dispatch(ex, &b[1], cancel_done, NULL), WF_OK);
    ex.ops->cancel(ex.ctx, &b[1]);
    ck_assert_int_eq(cancelled_status, WF_ECANCELLED);
    ck_assert_int_eq(wf_gate_waiting(g), 0);
    /* A third, dispatched while the first runs, runs after it. */
    ck_assert_int_eq(wf_executor_dispatch(ex, &b[2], ord_done, NULL), WF_OK);
    atomic_store(&slow_release, 1);
    ex.ops->synchronize(ex.ctx);
    ck_assert_int_eq(atomic_load(&slow_runs), 2);
    ck_assert_int_eq(done_count(), 2);
    ck_assert_int_eq(wf_gate_waiting(g), 0);
    wf_gated_executor_free(x);
    wf_gate_free(g);
}
END_TEST

START_TEST(a_queued_batch_cancelled_is_reported_at_once) {
    wf_gate *g = wf_gate_new(2);
    wf_gated_executor *x;
    ck_assert_int_eq(wf_gated_executor_new((wf_executor){.ops = &ord_ops, .ctx = (void *)(intptr_t)1}, g, 1, &x), WF_OK);
    wf_task t = {.kind = WF_TASK_DENOISE};
    wf_task_batch b = {.tasks = &t, .n_tasks = 1};
    n_ord = n_done = 0;
    wf_gate_acquire(g, 0);
    ck_assert_int_eq(wf_executor_dispatch(wf_gated_executor_get(x), &b, cancel_done, NULL), WF_OK);
    ck_assert_int_eq(wf_gate_waiting(g), 1);
    wf_executor ex = wf_gated_executor_get(x);
    ex.ops->cancel(ex.ctx, &b);
    ck_assert_int_eq(cancelled_status, WF_ECANCELLED); /* from this thread, now */
    ck_assert_int_eq(wf_gate_waiting(g), 0);
    wf_gate_release(g, 0);
    ex.ops->synchronize(ex.ctx);
    ck_assert_int_eq(n_ord, 0); /* it never ran */
    wf_gated_executor_free(x);
    wf_gate_free(g);
}
END_TEST

/* A done that holds the runner (it calls dones outside the gate's lock) until the test lets
 * it go: a batch dispatched meanwhile stays queued. */
static atomic_int hold_done, in_done;

static void holding_done(void *user, wf_task_batch *b, wf_status st, const char *msg) {
    (void)user;
    (void)b;
    (void)msg;
    ck_assert_int_eq(st, WF_OK);
    atomic_store(&in_done, 1);
    while (atomic_load(&hold_done)) usleep(500);
}

/* A batch dispatched on a granted claim and cancelled before it ran gives the turn back, as
 * an unclaim would: before, the gate stayed busy (granted) or reserved (granted ahead) for a
 * batch that would never run, and every other class waited until its owner unclaimed. */
START_TEST(a_cancelled_batch_on_a_granted_claim_gives_the_turn_back) {
    for (int ahead = 0; ahead < 2; ahead++) {
        wf_gate *g = wf_gate_new(2);
        wf_gate_set_lookahead(g, ahead);
        wf_gated_executor *x[2];
        wf_executor inner0 = ahead ? (wf_executor){.ops = &slow_ops}
                                   : (wf_executor){.ops = &ord_ops, .ctx = (void *)(intptr_t)0};
        ck_assert_int_eq(wf_gated_executor_new(inner0, g, 0, &x[0]), WF_OK);
        ck_assert_int_eq(wf_gated_executor_new((wf_executor){.ops = &ord_ops, .ctx = (void *)(intptr_t)1}, g, 1, &x[1]),
                         WF_OK);
        wf_task t[2] = {{.kind = WF_TASK_DENOISE}, {.kind = WF_TASK_DENOISE}};
        wf_task_batch b[2] = {{.tasks = &t[0], .n_tasks = 1}, {.tasks = &t[1], .n_tasks = 1}};
        atomic_store(&hold_done, 1);
        atomic_store(&in_done, 0);
        atomic_store(&slow_started, 0);
        atomic_store(&slow_release, 0);
        atomic_store(&slow_runs, 0);
        n_ord = n_done = 0;
        ck_assert_int_eq(wf_executor_dispatch(wf_gated_executor_get(x[0]), &b[0], holding_done, NULL), WF_OK);
        /* The runner is busy: in the first batch's run (granted ahead) or its done (granted). */
        if (ahead)
            while (!atomic_load(&slow_started)) usleep(500);
        else
            while (!atomic_load(&in_done)) usleep(500);
        atomic_int granted = 0;
        ck_assert_int_eq(wf_gated_executor_claim(x[1], 0, 0, ord_grant, &granted), WF_OK);
        ck_assert(wf_gated_executor_granted(x[1]));
        wf_executor ex = wf_gated_executor_get(x[1]);
        ck_assert_int_eq(wf_executor_dispatch(ex, &b[1], cancel_done, NULL), WF_OK);
        cancelled_status = WF_OK;
        ex.ops->cancel(ex.ctx, &b[1]);
        ck_assert_int_eq(cancelled_status, WF_ECANCELLED);
        ck_assert(!wf_gated_executor_granted(x[1]));
        atomic_store(&slow_release, 1);
        atomic_store(&hold_done, 0);
        wf_executor e0 = wf_gated_executor_get(x[0]);
        e0.ops->synchronize(e0.ctx);
        /* The turn passed on: another class gets it (before: waited forever). */
        wf_gate_acquire(g, 0);
        wf_gate_release(g, 0);
        ck_assert_uint_eq(wf_gate_turns(g, 0), 2);
        ck_assert_int_eq(n_ord, ahead ? 0 : 1); /* the cancelled batch never ran */
        for (int k = 0; k < 2; k++) wf_gated_executor_free(x[k]);
        wf_gate_free(g);
    }
}
END_TEST

/* As many gated executors as the gate takes (the daemon: up to 16 DiT models and the LLM;
 * before, the gate took 16 and the daemon could not start with 16 DiTs and --share-cores), each
 * with a batch queued at once while another class holds the cores: every head finds its place
 * in the order and runs once the cores are free; one more executor is refused. */
START_TEST(the_gate_takes_every_model_of_the_daemon) {
    enum { N = WF_GATE_MAX_EXECUTORS };
    ck_assert_int_ge(N, 17);
    wf_gate *g = wf_gate_new(3);
    wf_gated_executor *x[N];
    wf_task t[N];
    wf_task_batch b[N];
    for (int k = 0; k < N; k++) {
        ck_assert_int_eq(wf_gated_executor_new((wf_executor){.ops = &ord_ops, .ctx = (void *)(intptr_t)(k > 0)}, g,
                                               k > 0, &x[k]),
                         WF_OK);
        t[k] = (wf_task){.kind = WF_TASK_DENOISE};
        b[k] = (wf_task_batch){.tasks = &t[k], .n_tasks = 1};
    }
    wf_gated_executor *extra;
    ck_assert_int_eq(wf_gated_executor_new((wf_executor){.ops = &ord_ops}, g, 0, &extra), WF_EFULL);
    ck_assert_ptr_null(extra);
    n_ord = n_done = 0;
    wf_gate_acquire(g, 2);
    for (int k = 0; k < N; k++)
        ck_assert_int_eq(wf_executor_dispatch(wf_gated_executor_get(x[k]), &b[k], ord_done, NULL), WF_OK);
    ck_assert_int_eq(wf_gate_waiting(g), N);
    wf_gate_release(g, 2);
    for (int k = 0; k < N; k++) {
        wf_executor e = wf_gated_executor_get(x[k]);
        e.ops->synchronize(e.ctx);
    }
    ck_assert_int_eq(done_count(), N);
    ck_assert_uint_eq(wf_gate_turns(g, 0) + wf_gate_turns(g, 1), N);
    for (int k = 0; k < N; k++) wf_gated_executor_free(x[k]);
    wf_gate_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sched/gate");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, round_robin_and_exclusion);
    tcase_add_test(tc, gated_executor);
    tcase_add_test(tc, earliest_deadline_first);
    tcase_add_test(tc, claims_take_one_edf_order);
    tcase_add_test(tc, claims_start_by_predicted_time);
    tcase_add_test(tc, claims_move_with_new_work);
    tcase_add_test(tc, lookahead_grants_the_next_claim_while_a_batch_runs);
    tcase_add_test(tc, shares_keep_a_class_from_starving);
    tcase_add_test(tc, runs_the_inner_batch_on_the_turn_thread_and_times_the_turns);
    tcase_add_test(tc, histogram_quantiles_are_bucket_bounds);
    tcase_add_test(tc, one_thread_runs_the_turns_in_one_edf_order);
    tcase_add_test(tc, a_queued_batch_cancelled_is_reported_at_once);
    tcase_add_test(tc, a_batch_queued_behind_a_running_one_of_its_executor);
    tcase_add_test(tc, a_cancelled_batch_on_a_granted_claim_gives_the_turn_back);
    tcase_add_test(tc, the_gate_takes_every_model_of_the_daemon);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
