/* Tests sched/sched.c: the scheduler thread end to end with the fake executor (submit, events,
 * cancel, release, drain), admission control against the cost model's prediction, stats and
 * snapshots, calibration through the executor. */
#include "check_main.h"
#include "sched/cost_model.h"
#include "sched/fake_executor.h"
#include "sched/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct env {
    wf_kv_store store;
    wf_fake_executor fx;
    wf_sched *s;
    wf_handoff events;
} env;

static void env_init(env *e, wf_sched_options *o, int n_blocks) {
    memset(e, 0, sizeof *e);
    wf_kv_geometry g = {.n_layers = 1, .n_kv_heads = 1, .head_dim = 4, .block_size = 8,
                        .dtype = WF_KV_DTYPE_F32};
    ck_assert_int_eq(wf_kv_store_init(&e->store, &g, wf_kv_geometry_block_bytes(&g) *
                                                         (size_t)n_blocks),
                     WF_OK);
    wf_fake_executor_init(&e->fx, &e->store, 1000, -1);
    ck_assert_int_eq(wf_sched_new(o, &e->store, wf_fake_executor_get(&e->fx), &e->s), WF_OK);
    ck_assert_int_eq(wf_handoff_init(&e->events, 0, NULL, NULL), WF_OK);
}

static void env_free(env *e) {
    wf_sched_free(e->s);
    wf_handoff_free(&e->events);
    wf_kv_store_free(&e->store);
}

static void spec_for(wf_request_spec *spec, int32_t *prompt, int n, int max_tokens, int salt) {
    wf_request_spec_init(spec);
    for (int i = 0; i < n; i++) prompt[i] = 10 + (i * 13 + salt) % 900;
    spec->prompt = prompt;
    spec->n_prompt = n;
    spec->max_tokens = max_tokens;
    spec->sampling.temperature = 0;
    snprintf(spec->id, sizeof spec->id, "cmpl-%d", salt);
}

typedef struct tally {
    int tokens[64];
    int finished[64];
    wf_finish_reason reason[64];
    int total_finished;
} tally;

/* Reads events until `want` FINISHED events arrived (bounded wait). */
static void consume(env *e, tally *t, int want, wf_request **reqs) {
    for (int spins = 0; spins < 2000 && t->total_finished < want; spins++) {
        wf_handoff_wait(&e->events, 10);
        for (wf_handoff_item *it = wf_handoff_take_all(&e->events), *next; it; it = next) {
            next = it->next;
            wf_request_event *ev = (wf_request_event *)it;
            int idx = (int)(intptr_t)ev->user;
            ck_assert_ptr_eq(ev->request, reqs[idx]);
            if (ev->kind == WF_EVENT_TOKEN) {
                ck_assert_int_eq(t->finished[idx], 0); /* no token after FINISHED */
                t->tokens[idx]++;
            } else {
                t->finished[idx]++;
                t->reason[idx] = ev->finish;
                t->total_finished++;
                ck_assert_int_eq(ev->usage.completion_tokens, t->tokens[idx]);
                ck_assert_uint_gt(ev->times.queued_ns, 0);
                ck_assert_uint_ge(ev->times.finished_ns, ev->times.queued_ns);
            }
            wf_request_event_free(e->s, ev);
        }
    }
    ck_assert_int_eq(t->total_finished, want);
}

static void count_snap(const wf_request_snapshot *snap, void *user) {
    (void)snap;
    (*(int *)user)++;
}

START_TEST(thread_end_to_end_with_calibration) {
    wf_sched_options o;
    wf_sched_options_init(&o);
    o.max_batch_tokens = 64;
    o.max_running = 16;
    o.n_ctx = 512;
    env e;
    env_init(&e, &o, 256);
    ck_assert_int_eq(wf_sched_start(e.s), WF_OK); /* calibrates through the fake executor */
    wf_sched_stats st;
    wf_sched_get_stats(e.s, &st);
    ck_assert(st.cost_model[0] >= 0 && st.cost_model[1] >= 0);
    enum { N = 12 };
    wf_request *reqs[N];
    int32_t prompts[N][40];
    for (int i = 0; i < N; i++) {
        wf_request_spec spec;
        spec_for(&spec, prompts[i], 20 + i, 10 + i, i);
        wf_sched_reject why;
        ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, (void *)(intptr_t)i, &reqs[i],
                                         &why),
                         WF_OK);
    }
    int live = 0;
    wf_sched_foreach_request(e.s, count_snap, &live);
    ck_assert_int_eq(live, N);
    tally t = {0};
    consume(&e, &t, N, reqs);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(t.tokens[i], 10 + i);
        ck_assert_int_eq(t.reason[i], WF_FINISH_LENGTH);
        wf_sched_release(e.s, reqs[i]);
    }
    wf_sched_drain(e.s, 1000); /* the thread has published its last iteration */
    wf_sched_get_stats(e.s, &st);
    ck_assert_uint_ge(st.finished_total, N);
    ck_assert_uint_gt(st.iterations, 0);
    ck_assert(st.sched_overhead_ms_avg > 0);
    ck_assert_int_eq(st.kv_blocks_used, 0);
    live = 0;
    wf_sched_foreach_request(e.s, count_snap, &live);
    ck_assert_int_eq(live, 0);
    wf_request_spec spec;
    int32_t p[8];
    spec_for(&spec, p, 8, 4, 0);
    wf_request *r;
    wf_sched_reject why;
    ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, NULL, &r, &why), WF_EBUSY);
    env_free(&e);
}
END_TEST

START_TEST(cancel_through_the_thread) {
    wf_sched_options o;
    wf_sched_options_init(&o);
    o.cost_given = true;
    o.cost[0] = 1;
    o.n_ctx = 4096;
    env e;
    env_init(&e, &o, 1024);
    ck_assert_int_eq(wf_sched_start(e.s), WF_OK);
    wf_request *reqs[2];
    int32_t p[2][16];
    for (int i = 0; i < 2; i++) {
        wf_request_spec spec;
        spec_for(&spec, p[i], 16, 4000, i);
        spec.ignore_eos = true;
        wf_sched_reject why;
        ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, (void *)(intptr_t)i, &reqs[i],
                                         &why),
                         WF_OK);
    }
    wf_sched_cancel(e.s, reqs[0]);
    wf_sched_cancel(e.s, reqs[0]); /* idempotent */
    wf_sched_cancel(e.s, reqs[1]);
    tally t = {0};
    consume(&e, &t, 2, reqs);
    ck_assert_int_eq(t.reason[0], WF_FINISH_CANCELLED);
    ck_assert_int_eq(t.reason[1], WF_FINISH_CANCELLED);
    for (int i = 0; i < 2; i++) wf_sched_release(e.s, reqs[i]);
    wf_sched_drain(e.s, 100);
    wf_sched_stats st;
    wf_sched_get_stats(e.s, &st);
    ck_assert_int_eq(st.kv_blocks_used, 0);
    ck_assert_uint_eq(st.cancelled_total, 2);
    env_free(&e);
}
END_TEST

START_TEST(admission_follows_the_prediction) {
    /* Not started: nothing runs, so the queue only grows. Cost model a=10 ms, b=1 ms/token;
     * budget 64 tokens, SLO TTFT 100 ms, factor 2 -> reject above 200 ms.
     *   1st 50-token prompt: W=50:  ceil(50/64)*10 + 50  =  60 ms -> accept
     *   2nd:                 W=100: ceil(100/64)*10 + 100 = 120 ms -> accept
     *   3rd:                 W=150: 3*10 + 150           = 180 ms -> accept
     *   4th:                 W=200: 4*10 + 200           = 240 ms -> WF_EOVERLOAD,
     *        retry after the drain of the 150 queued tokens: 3*10 + 150 = 180 ms. */
    wf_sched_options o;
    wf_sched_options_init(&o);
    o.cost_given = true;
    o.cost[0] = 10;
    o.cost[1] = 1;
    o.cost[2] = 0;
    o.cost[3] = 0;
    o.max_batch_tokens = 64;
    o.default_ttft_ms = 100;
    o.queue_size = 100;
    env e;
    env_init(&e, &o, 200);
    double expect[5] = {60, 120, 180, 240, 240};
    wf_status want[5] = {WF_OK, WF_OK, WF_OK, WF_EOVERLOAD, WF_EOVERLOAD};
    wf_request *reqs[5] = {0};
    int32_t p[5][50];
    for (int i = 0; i < 5; i++) {
        double drain;
        double pred = wf_sched_predict_ttft_ms(e.s, 50, &drain);
        ck_assert_double_eq_tol(pred, expect[i], 1e-9);
        wf_request_spec spec;
        spec_for(&spec, p[i], 50, 4, i);
        wf_sched_reject why;
        wf_status st = wf_sched_submit(e.s, &spec, &e.events, (void *)(intptr_t)i, &reqs[i], &why);
        ck_assert_int_eq(st, want[i]);
        ck_assert_int_eq(st == WF_EOVERLOAD, pred > 2.0 * 100);
        if (st == WF_EOVERLOAD) {
            ck_assert_double_eq_tol(why.retry_after_s, 0.180, 1e-9);
            ck_assert_ptr_null(reqs[i]);
            ck_assert_ptr_nonnull(strstr(why.message, "240"));
        }
    }
    /* A looser SLO on the request itself gets in. */
    wf_request_spec spec;
    int32_t q[50];
    spec_for(&spec, q, 50, 4, 9);
    spec.slo.ttft_ms = 500;
    wf_request *extra;
    wf_sched_reject why;
    ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, (void *)(intptr_t)3, &extra, &why),
                     WF_OK);
    reqs[3] = extra;
    /* Too long for the context: both numbers in the message. */
    int32_t *big = calloc(3000, sizeof *big);
    spec_for(&spec, big, 3000, 4, 1);
    wf_request *r;
    ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, NULL, &r, &why), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(why.message, "3000"));
    ck_assert_ptr_nonnull(strstr(why.message, "2048"));
    /* Fits the context but not the whole KV cache (200 blocks of 8 = 1600 tokens). */
    spec_for(&spec, big, 2000, 4, 1);
    ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, NULL, &r, &why), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(why.message, "1600"));
    free(big);
    wf_sched_stats st;
    wf_sched_get_stats(e.s, &st);
    ck_assert_uint_eq(st.rejected_total, 4);
    ck_assert_int_eq(st.waiting, 4);
    /* Drain with no time left: the accepted requests end cancelled, nothing is lost. */
    wf_sched_drain(e.s, 0);
    tally t = {0};
    consume(&e, &t, 4, reqs);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(t.reason[i], WF_FINISH_CANCELLED);
        wf_sched_release(e.s, reqs[i]);
    }
    env_free(&e);
}
END_TEST

START_TEST(queue_bound_gives_efull) {
    wf_sched_options o;
    wf_sched_options_init(&o);
    o.cost_given = true;
    o.queue_size = 2;
    env e;
    env_init(&e, &o, 64);
    wf_request *reqs[3] = {0};
    int32_t p[3][8];
    for (int i = 0; i < 3; i++) {
        wf_request_spec spec;
        spec_for(&spec, p[i], 8, 4, i);
        wf_sched_reject why;
        ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, (void *)(intptr_t)i, &reqs[i], &why),
                         i < 2 ? WF_OK : WF_EFULL);
    }
    wf_sched_drain(e.s, 10000); /* runs the two to completion inline */
    tally t = {0};
    consume(&e, &t, 2, reqs);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(t.reason[i], WF_FINISH_LENGTH);
        ck_assert_int_eq(t.tokens[i], 4);
        wf_sched_release(e.s, reqs[i]);
    }
    env_free(&e);
}
END_TEST

START_TEST(cost_model_fit_and_files) {
    /* Exact data from a=2, b=0.1, c=0.5, d=0.001: the fit recovers it. */
    wf_cost_sample s[12];
    int n = 0;
    for (int p = 0; p <= 256; p += 128)
        for (int dcount = 0; dcount <= 8; dcount += 4, n++) {
            double ctx = p + dcount * 100.0 + (n % 4) * 37;
            s[n] = (wf_cost_sample){p, dcount, ctx, 2 + 0.1 * p + 0.5 * dcount + 0.001 * ctx};
        }
    double c[4];
    ck_assert_int_eq(wf_cost_model_fit(s, n, NULL, c), WF_OK);
    ck_assert_double_eq_tol(c[0], 2, 1e-2);
    ck_assert_double_eq_tol(c[1], 0.1, 1e-5);
    ck_assert_double_eq_tol(c[2], 0.5, 1e-3);
    ck_assert_double_eq_tol(c[3], 0.001, 1e-5);
    /* Online: the model moves toward new behaviour (step times doubled). */
    wf_cost_model m;
    wf_cost_model_init(&m, c);
    for (int k = 0; k < 400; k++) {
        const wf_cost_sample *x = &s[k % n];
        wf_cost_model_observe(&m, x->prefill_tokens, x->decode_tokens, x->context, 2 * x->ms);
    }
    ck_assert_double_eq_tol(m.coef[1], 0.2, 1e-3);
    /* A decode-only window says nothing about prefill: b keeps its value, c is refitted. */
    wf_cost_model d;
    wf_cost_model_init(&d, c);
    for (int k = 0; k < 64; k++)
        wf_cost_model_observe(&d, 0, 1 + k % 8, 500.0 + 10 * k, 3 + 0.7 * (1 + k % 8) +
                                                                   0.001 * (500.0 + 10 * k));
    ck_assert_double_eq_tol(d.coef[1], c[1], 1e-9);
    ck_assert_double_eq_tol(d.coef[2], 0.7, 1e-2);
    char path[] = "/tmp/weft-cost-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(wf_cost_model_save(path, c), WF_OK);
    double back[4];
    char err[128];
    ck_assert_int_eq(wf_cost_model_load(path, back, err, sizeof err), WF_OK);
    for (int i = 0; i < 4; i++) ck_assert_double_eq_tol(back[i], c[i], 1e-8);
    FILE *f = fopen(path, "w");
    fputs("1.5 0.25  3 0.001\n", f);
    fclose(f);
    ck_assert_int_eq(wf_cost_model_load(path, back, err, sizeof err), WF_OK);
    ck_assert_double_eq(back[2], 3);
    f = fopen(path, "w");
    fputs("{\"a\": 1}", f);
    fclose(f);
    ck_assert_int_eq(wf_cost_model_load(path, back, err, sizeof err), WF_EFORMAT);
    unlink(path);
    ck_assert_int_eq(wf_cost_model_parse("1,2,3", back, err, sizeof err), WF_EINVAL);
    ck_assert_int_eq(wf_cost_model_parse("1,2,3,-4", back, err, sizeof err), WF_EINVAL);
}
END_TEST

START_TEST(unknown_policy_is_refused) {
    wf_sched_options o;
    wf_sched_options_init(&o);
    o.policy = "lottery";
    wf_kv_geometry g = {.n_layers = 1, .n_kv_heads = 1, .head_dim = 4, .block_size = 8,
                        .dtype = WF_KV_DTYPE_F32};
    wf_kv_store store;
    ck_assert_int_eq(wf_kv_store_init(&store, &g, 1 << 16), WF_OK);
    wf_fake_executor fx;
    wf_fake_executor_init(&fx, &store, 100, -1);
    wf_sched *s = NULL;
    ck_assert_int_eq(wf_sched_new(&o, &store, wf_fake_executor_get(&fx), &s), WF_EINVAL);
    ck_assert_ptr_null(s);
    wf_kv_store_free(&store);
}
END_TEST

static void snap_progress(const wf_request_snapshot *snap, void *user) {
    int *out = user;
    out[0] = snap->state;
    out[1] = (int)snap->decode_tasks;
    out[2] = snap->n_choices;
}

START_TEST(full_event_queue_is_back_pressure_not_loss) {
    /* An events queue of 2: the scheduler must hold the rest and deliver all of them, in order,
     * FINISHED last, while the consumer is slow. Drain lets the request finish normally. */
    wf_sched_options o;
    wf_sched_options_init(&o);
    o.cost_given = true;
    env e;
    env_init(&e, &o, 64);
    wf_handoff_free(&e.events);
    ck_assert_int_eq(wf_handoff_init(&e.events, 2, NULL, NULL), WF_OK);
    ck_assert_int_eq(wf_sched_start(e.s), WF_OK);
    int32_t p[12];
    wf_request_spec spec;
    spec_for(&spec, p, 12, 40, 3);
    spec.n = 2;
    spec.sampling.temperature = 1.0f;
    wf_request *r;
    wf_sched_reject why;
    ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, NULL, &r, &why), WF_OK);
    int tokens[2] = {0, 0}, finished = 0;
    for (int spins = 0; spins < 5000 && finished < 2; spins++) {
        wf_handoff_wait(&e.events, 5);
        wf_handoff_item *it = wf_handoff_take_all(&e.events);
        int len = 0;
        for (wf_handoff_item *x = it; x; x = x->next) len++;
        ck_assert_int_le(len, 2); /* the queue's bound held */
        while (it) {
            wf_handoff_item *next = it->next;
            wf_request_event *ev = (wf_request_event *)it;
            if (ev->kind == WF_EVENT_TOKEN) {
                ck_assert_int_eq(finished & (1 << ev->choice), 0);
                tokens[ev->choice]++;
            } else {
                ck_assert_int_eq(ev->usage.completion_tokens, tokens[ev->choice]);
                ck_assert_int_eq(ev->finish, WF_FINISH_LENGTH);
                finished++;
            }
            wf_request_event_free(e.s, ev);
            it = next;
        }
        if (spins == 3) {
            int snap[3] = {-1, 0, 0};
            wf_sched_foreach_request(e.s, snap_progress, snap);
            ck_assert_int_eq(snap[2], 2);
        }
    }
    ck_assert_int_eq(finished, 2);
    ck_assert_int_eq(tokens[0], 40);
    ck_assert_int_eq(tokens[1], 40);
    wf_sched_release(e.s, r);
    wf_sched_drain(e.s, 5000);
    wf_sched_stats st;
    wf_sched_get_stats(e.s, &st);
    ck_assert_int_eq(st.kv_blocks_used, 0);
    ck_assert_uint_ge(st.cow_copies, 1);
    env_free(&e);
}
END_TEST

START_TEST(unreachable_slo_is_refused_even_when_idle) {
    /* a=10, b=1: a 50-token prompt alone is predicted at 60 ms, over 2 x a 10 ms SLO: refused
     * with nothing queued (retry after 0 s: the queue is not the problem). With a 50 ms SLO it
     * is admitted; the next 10 ms one, behind 50 queued tokens, gets retry after 60 ms. */
    wf_sched_options o;
    wf_sched_options_init(&o);
    o.cost_given = true;
    o.cost[0] = 10;
    o.cost[1] = 1;
    o.cost[2] = 0;
    o.cost[3] = 0;
    o.max_batch_tokens = 64;
    env e;
    env_init(&e, &o, 64);
    wf_request *reqs[3] = {0};
    int32_t p[3][50];
    double slo[3] = {10, 50, 10};
    wf_status want[3] = {WF_EOVERLOAD, WF_OK, WF_EOVERLOAD};
    double retry[3] = {0, 0, 0.060};
    for (int i = 0; i < 3; i++) {
        wf_request_spec spec;
        spec_for(&spec, p[i], 50, 2, i);
        spec.slo.ttft_ms = slo[i];
        wf_sched_reject why;
        ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, (void *)(intptr_t)i, &reqs[i],
                                         &why),
                         want[i]);
        if (want[i] != WF_OK) ck_assert_double_eq_tol(why.retry_after_s, retry[i], 1e-9);
    }
    wf_sched_drain(e.s, 10000);
    tally t = {0};
    consume(&e, &t, 1, reqs);
    ck_assert_int_eq(t.reason[1], WF_FINISH_LENGTH);
    wf_sched_release(e.s, reqs[1]);
    env_free(&e);
}
END_TEST

static Suite *sched_suite(void) {
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("sched");
    tcase_add_test(tc, thread_end_to_end_with_calibration);
    tcase_add_test(tc, cancel_through_the_thread);
    tcase_add_test(tc, admission_follows_the_prediction);
    tcase_add_test(tc, queue_bound_gives_efull);
    tcase_add_test(tc, unreachable_slo_is_refused_even_when_idle);
    tcase_add_test(tc, cost_model_fit_and_files);
    tcase_add_test(tc, unknown_policy_is_refused);
    tcase_add_test(tc, full_event_queue_is_back_pressure_not_loss);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(sched_suite)
