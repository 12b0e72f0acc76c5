/* Tests several device groups: the pure lanes layer (routing, a group going down: unstarted
 * requests re-run elsewhere, started ones fail), and the scheduler thread over several
 * asynchronous fake executors (outputs equal to one group, planning while batches run, a group
 * whose executor "dies"), the events-allocation failure hook, and the executor thread. */
#include "check_main.h"
#include "proto/exec_thread.h"
#include "sched/fake_executor.h"
#include "sched/lanes.h"
#include "sched/sched.h"
#include "server/metrics.h"
#include "server/server.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAXG = 4, NREQ = 12, MAXTOK = 64 };

static wf_kv_geometry geo(int block_size) {
    return (wf_kv_geometry){.n_layers = 1, .n_kv_heads = 1, .head_dim = 4,
                            .block_size = block_size, .dtype = WF_KV_DTYPE_F32};
}

static void spec_for(wf_request_spec *spec, int32_t *prompt, int n, int max_tokens, int salt) {
    wf_request_spec_init(spec);
    for (int i = 0; i < n; i++) prompt[i] = 10 + (i * 13 + salt * 7) % 900;
    spec->prompt = prompt;
    spec->n_prompt = n;
    spec->max_tokens = max_tokens;
    spec->ignore_eos = true;
    snprintf(spec->id, sizeof spec->id, "req-%d", salt);
}

/* ---- the pure layer ------------------------------------------------------------------------- */

typedef struct log_cb {
    int tokens[NREQ];
    int finished[NREQ];
    wf_status status[NREQ];
    int retired;
} log_cb;

static int idx_of(const wf_request *r) { return atoi(r->spec.id + 4); }

static void l_token(void *u, wf_request *r, int c, const wf_generated_token *t, uint64_t now) {
    (void)c, (void)t, (void)now;
    ((log_cb *)u)->tokens[idx_of(r)]++;
}
static void l_finished(void *u, wf_request *r, int c, wf_finish_reason why, wf_status st,
                       const char *msg, uint64_t now) {
    (void)c, (void)why, (void)msg, (void)now;
    log_cb *l = u;
    l->finished[idx_of(r)]++;
    l->status[idx_of(r)] = st;
}
static void l_retired(void *u, wf_request *r) {
    ((log_cb *)u)->retired++;
    wf__request_free(r);
}

/* Plans lane g and completes the batch with a fixed token for every sample. */
static int run_lane(wf_lanes *l, int g, uint64_t now) {
    wf_task_batch *b = wf_core_plan(&l->lane[g]->core, now);
    for (int k = 0; k < b->n_tasks; k++)
        for (int j = 0; j < b->tasks[k].llm.n_samples; j++) {
            wf_task_sample *sm = &b->tasks[k].llm.samples[j];
            memset(&sm->out, 0, sizeof sm->out);
            sm->out.token = 5;
        }
    int n = b->n_tasks;
    wf_core_complete(&l->lane[g]->core, WF_OK, NULL, now + 1000);
    return n;
}

START_TEST(lanes_route_and_group_down) {
    log_cb lg = {0};
    wf_kv_pool *pools[2];
    wf_lanes l;
    wf_lanes_init(&l);
    for (int g = 0; g < 2; g++) {
        ck_assert_int_eq(wf_kv_pool_new(64, 8, true, &pools[g]), WF_OK);
        wf_core_config cfg = {.policy = wf_sched_policy_find("fcfs"), .max_batch_tokens = 64,
                              .max_running = 8, .n_ctx = 256, .pool = pools[g],
                              .group = {.n_ranks = 1, .ranks = {g}},
                              .cb = {l_token, l_finished, l_retired, NULL, &lg}};
        int id;
        ck_assert_int_eq(wf_lanes_add(&l, &cfg, &id), WF_OK);
        ck_assert_int_eq(id, g);
    }
    /* Least loaded: requests alternate between the two empty groups. */
    int32_t p[NREQ][32];
    wf_request *r[NREQ];
    for (int i = 0; i < 4; i++) {
        wf_request_spec spec;
        spec_for(&spec, p[i], 20, 100, i);
        ck_assert_int_eq(wf__request_new(&spec, 256, 8, (uint64_t)i, &r[i]), WF_OK);
        ck_assert_int_eq(wf_lanes_add_request(&l, r[i], 1), WF_OK);
    }
    ck_assert_int_eq(wf_core_n_requests(&l.lane[0]->core), 2);
    ck_assert_int_eq(wf_core_n_requests(&l.lane[1]->core), 2);
    /* Lane 1 runs its prompts (first tokens drawn); lane 0 has not run at all. */
    ck_assert_int_gt(run_lane(&l, 1, 10), 0);
    ck_assert_int_eq(lg.tokens[1] + lg.tokens[3], 2);
    /* Prefix affinity: a prompt sharing lane 1's cached blocks goes there although lane 1 is
     * as loaded as lane 0. */
    wf_request_spec spec;
    memcpy(p[4], p[1], sizeof p[1]);
    spec_for(&spec, p[4], 20, 100, 4);
    memcpy(p[4], p[1], 20 * sizeof(int32_t));
    ck_assert_int_eq(wf__request_new(&spec, 256, 8, 4, &r[4]), WF_OK);
    ck_assert_int_eq(wf_lanes_route(&l, r[4]), 1);
    ck_assert_int_eq(wf_lanes_add_request(&l, r[4], 20), WF_OK);
    /* Lane 1 goes down: 1 and 3 streamed a token and fail; 4 never ran and moves to lane 0. */
    wf_lanes_down(&l, 1, WF_ECLOSED, "worker 1 died", 30);
    ck_assert(!l.lane[1]->live);
    ck_assert_int_eq(lg.finished[1], 1);
    ck_assert_int_eq(lg.status[1], WF_ECLOSED);
    ck_assert_int_eq(lg.finished[3], 1);
    ck_assert_int_eq(lg.finished[4], 0);
    ck_assert_uint_eq(l.rerouted_total, 1);
    ck_assert_int_eq(wf_core_n_requests(&l.lane[1]->core), 0);
    ck_assert_int_eq(wf_core_n_requests(&l.lane[0]->core), 3);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(pools[1], &u);
    ck_assert_int_eq(u.used, 0);
    /* The moved request runs to completion on lane 0 with the others. */
    for (int it = 0; it < 500 && wf_lanes_n_requests(&l) > 0; it++) run_lane(&l, 0, 100 + it);
    ck_assert_int_eq(wf_lanes_n_requests(&l), 0);
    ck_assert_int_eq(lg.finished[0] + lg.finished[2] + lg.finished[4], 3);
    ck_assert_int_eq(lg.status[4], WF_OK);
    ck_assert_int_eq(lg.tokens[4], 100);
    /* No live lane can hold a new request. */
    wf_lanes_down(&l, 0, WF_ECLOSED, "worker 0 died", 1000);
    spec_for(&spec, p[5], 20, 10, 5);
    ck_assert_int_eq(wf__request_new(&spec, 256, 8, 5, &r[5]), WF_OK);
    ck_assert_int_eq(wf_lanes_add_request(&l, r[5], 1001), WF_ECLOSED);
    wf__request_free(r[5]);
    ck_assert_int_eq(lg.retired, 5);
    wf_lanes_free(&l, 2000);
    for (int g = 0; g < 2; g++) wf_kv_pool_free(pools[g]);
}
END_TEST

/* ---- the scheduler thread over async fake executors ---------------------------------------- */

typedef struct genv {
    int n;
    wf_kv_store store[MAXG];
    wf_fake_executor fx[MAXG];
    wf_sched *s;
    wf_handoff events;
} genv;

/* Group 0 comes with wf_sched_new, the others with wf_sched_add_group. delay_us < 0: inline. */
static void genv_init(genv *e, int n, const int *delay_us, int n_blocks) {
    memset(e, 0, sizeof *e);
    e->n = n;
    wf_sched_options o;
    wf_sched_options_init(&o);
    o.cost_given = true;
    o.cost[0] = 1;
    o.max_batch_tokens = 64;
    o.max_running = 8;
    o.n_ctx = 512;
    for (int g = 0; g < n; g++) {
        wf_kv_geometry kg = geo(8);
        ck_assert_int_eq(wf_kv_store_init(&e->store[g], &kg,
                                          wf_kv_geometry_block_bytes(&kg) * (size_t)n_blocks),
                         WF_OK);
        wf_fake_executor_init(&e->fx[g], &e->store[g], 1000, -1);
        if (delay_us[g] >= 0)
            ck_assert_int_eq(wf_fake_executor_start_async(&e->fx[g], delay_us[g]), WF_OK);
        if (g == 0) {
            ck_assert_int_eq(wf_sched_new(&o, &e->store[0], wf_fake_executor_get(&e->fx[0]), &e->s),
                             WF_OK);
        } else {
            int id;
            ck_assert_int_eq(wf_sched_add_group(e->s, &e->store[g], wf_fake_executor_get(&e->fx[g]),
                                                g, &id),
                             WF_OK);
            ck_assert_int_eq(id, g);
        }
    }
    ck_assert_int_eq(wf_handoff_init(&e->events, 0, NULL, NULL), WF_OK);
}

static void genv_free(genv *e) {
    wf_sched_free(e->s);
    for (int g = 0; g < e->n; g++) {
        wf_fake_executor_stop(&e->fx[g]);
        wf_kv_store_free(&e->store[g]);
    }
    wf_handoff_free(&e->events);
}

typedef struct streams {
    int32_t tok[NREQ][MAXTOK];
    int n[NREQ];
    int finished;
    int first_done; /* 1 + index of the first request to finish (0: none yet) */
    wf_finish_reason reason[NREQ];
    wf_status status[NREQ];
} streams;

static void collect(genv *e, streams *st, int want, wf_request **reqs) {
    for (int spins = 0; spins < 3000 && st->finished < want; spins++) {
        wf_handoff_wait(&e->events, 10);
        for (wf_handoff_item *it = wf_handoff_take_all(&e->events), *next; it; it = next) {
            next = it->next;
            wf_request_event *ev = (wf_request_event *)it;
            int i = (int)(intptr_t)ev->user;
            ck_assert_ptr_eq(ev->request, reqs[i]);
            if (ev->kind == WF_EVENT_TOKEN) {
                ck_assert_int_lt(st->n[i], MAXTOK);
                st->tok[i][st->n[i]++] = ev->token.token;
            } else {
                st->finished++;
                if (!st->first_done) st->first_done = i + 1;
                st->reason[i] = ev->finish;
                st->status[i] = ev->status;
            }
            wf_request_event_free(e->s, ev);
        }
    }
    ck_assert_int_eq(st->finished, want);
}

static void submit_all(genv *e, wf_request **reqs, int32_t (*p)[40], int n, int max_tokens) {
    for (int i = 0; i < n; i++) {
        wf_request_spec spec;
        spec_for(&spec, p[i], 12 + i, max_tokens, i);
        wf_sched_reject why;
        ck_assert_int_eq(wf_sched_submit(e->s, &spec, &e->events, (void *)(intptr_t)i, &reqs[i],
                                         &why),
                         WF_OK);
    }
}

static void run_streams(int n_groups, const int *delay, streams *out, wf_sched_stats *stats) {
    genv e;
    genv_init(&e, n_groups, delay, 128);
    ck_assert_int_eq(wf_sched_start(e.s), WF_OK);
    wf_request *reqs[NREQ];
    int32_t p[NREQ][40];
    submit_all(&e, reqs, p, NREQ, 20);
    memset(out, 0, sizeof *out);
    collect(&e, out, NREQ, reqs);
    for (int i = 0; i < NREQ; i++) wf_sched_release(e.s, reqs[i]);
    wf_sched_drain(e.s, 1000);
    wf_sched_get_stats(e.s, stats);
    genv_free(&e);
}

START_TEST(async_groups_give_the_outputs_of_one_group) {
    int inline_one[1] = {-1};
    int async_three[3] = {300, 500, 700};
    streams one, three;
    wf_sched_stats st1, st3;
    run_streams(1, inline_one, &one, &st1);
    run_streams(3, async_three, &three, &st3);
    for (int i = 0; i < NREQ; i++) {
        ck_assert_int_eq(one.n[i], 20);
        ck_assert_int_eq(three.n[i], 20);
        ck_assert_int_eq(three.reason[i], WF_FINISH_LENGTH);
        ck_assert_mem_eq(one.tok[i], three.tok[i], 20 * sizeof(int32_t));
    }
    ck_assert_int_eq(st3.n_groups, 3);
    ck_assert_int_eq(st3.groups_live, 3);
    ck_assert_int_eq(st3.kv_blocks_used, 0);
    for (int g = 0; g < 3; g++) {
        ck_assert(st3.groups[g].live);
        ck_assert_uint_gt(st3.groups[g].iterations, 0); /* routing spread the work */
        ck_assert_int_eq(st3.groups[g].batches_in_flight, 0);
        ck_assert_str_eq(st3.groups[g].executor, "fake");
        ck_assert_int_eq(st3.groups[g].rank, g);
    }
    ck_assert_uint_eq(st3.finished_total, NREQ);
}
END_TEST

START_TEST(first_finisher_is_the_fast_group) {
    /* Group 0's batches take 200 ms, group 1's none. Request 0 is bound to group 0, request 1
     * to group 1 (least loaded). The scheduler thread keeps planning group 1 while group 0's
     * batch runs, so request 1's 5 tokens all arrive before request 0 has its 5 (which takes
     * 5 slow batches, 1 s). A thread that ran batches itself would alternate the groups and
     * finish them together. */
    int delay[2] = {200000, 0};
    genv e;
    genv_init(&e, 2, delay, 128);
    ck_assert_int_eq(wf_sched_start(e.s), WF_OK);
    wf_request *reqs[2];
    int32_t p[2][40];
    submit_all(&e, reqs, p, 2, 5);
    streams st = {0};
    collect(&e, &st, 1, reqs);
    ck_assert_int_eq(st.first_done, 2); /* request 1 */
    ck_assert_int_eq(st.n[1], 5);
    ck_assert_int_lt(st.n[0], 5);
    collect(&e, &st, 2, reqs);
    ck_assert_int_eq(st.n[0], 5);
    for (int i = 0; i < 2; i++) wf_sched_release(e.s, reqs[i]);
    wf_sched_drain(e.s, 1000);
    genv_free(&e);
}
END_TEST

static void group_of(const wf_request_snapshot *snap, void *user) {
    int *g = user;
    g[atoi(snap->id + 4)] = snap->group;
}

enum { PHASE2_TOKENS = 400 }; /* prompt + tokens within n_ctx 512 and 64 blocks of 8 */

START_TEST(dead_group_requeues_unstarted_and_fails_started) {
    /* Two async groups. Phase 1: group 1 is dead from the start: every request routed there
     * fails its first batch with WF_ECLOSED before producing a token, so all are re-run on
     * group 0 and finish normally. */
    int delay[2] = {200, 200};
    genv e;
    genv_init(&e, 2, delay, 128);
    wf_fake_executor_die(&e.fx[1]);
    ck_assert_int_eq(wf_sched_start(e.s), WF_OK);
    wf_request *reqs[NREQ];
    int32_t p[NREQ][40];
    submit_all(&e, reqs, p, 6, 15);
    streams st = {0};
    collect(&e, &st, 6, reqs);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(st.reason[i], WF_FINISH_LENGTH);
        ck_assert_int_eq(st.n[i], 15);
        wf_sched_release(e.s, reqs[i]);
    }
    wf_sched_drain(e.s, 1000);
    wf_sched_stats s;
    wf_sched_get_stats(e.s, &s);
    ck_assert_int_eq(s.groups_live, 1);
    ck_assert(!s.groups[1].live);
    ck_assert_uint_ge(s.rerouted_total, 1);
    ck_assert_ptr_nonnull(strstr(s.groups[1].last_error, "went down"));
    ck_assert_ptr_nonnull(strstr(s.groups[1].last_error, "died"));
    genv_free(&e);

    /* Phase 2: both live; requests stream; then group 1 dies. Its requests (they produced
     * tokens) fail with WF_ECLOSED; group 0's finish. Long streams (PHASE2_TOKENS x 200 us
     * per batch), so that on a loaded machine (sanitizers, parallel tests) no request can
     * finish before every other one has streamed its first token. */
    genv_init(&e, 2, delay, 128);
    ck_assert_int_eq(wf_sched_start(e.s), WF_OK);
    int32_t q[NREQ][40];
    for (int i = 0; i < 4; i++) {
        wf_request_spec spec;
        spec_for(&spec, q[i], 12 + i, PHASE2_TOKENS, i);
        wf_sched_reject why;
        ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, (void *)(intptr_t)i, &reqs[i],
                                         &why),
                         WF_OK);
    }
    memset(&st, 0, sizeof st);
    /* Until every request streamed a token. */
    for (int spins = 0; spins < 3000; spins++) {
        wf_handoff_wait(&e.events, 5);
        for (wf_handoff_item *it = wf_handoff_take_all(&e.events), *next; it; it = next) {
            next = it->next;
            wf_request_event *ev = (wf_request_event *)it;
            ck_assert_int_eq(ev->kind, WF_EVENT_TOKEN);
            st.n[(int)(intptr_t)ev->user]++;
            wf_request_event_free(e.s, ev);
        }
        if (st.n[0] && st.n[1] && st.n[2] && st.n[3]) break;
    }
    int bound[NREQ];
    for (int i = 0; i < NREQ; i++) bound[i] = -2;
    wf_sched_foreach_request(e.s, group_of, bound);
    int on1 = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert(bound[i] == 0 || bound[i] == 1);
        on1 += bound[i] == 1;
    }
    ck_assert_int_eq(on1, 2);
    wf_fake_executor_die(&e.fx[1]);
    for (int spins = 0; spins < 3000 && st.finished < 4; spins++) {
        wf_handoff_wait(&e.events, 5);
        for (wf_handoff_item *it = wf_handoff_take_all(&e.events), *next; it; it = next) {
            next = it->next;
            wf_request_event *ev = (wf_request_event *)it;
            int i = (int)(intptr_t)ev->user;
            if (ev->kind == WF_EVENT_TOKEN) {
                st.n[i]++;
            } else {
                st.finished++;
                st.reason[i] = ev->finish;
                st.status[i] = ev->status;
                if (bound[i] == 1) ck_assert_ptr_nonnull(strstr(ev->message, "went down"));
            }
            wf_request_event_free(e.s, ev);
        }
    }
    ck_assert_int_eq(st.finished, 4);
    for (int i = 0; i < 4; i++) {
        if (bound[i] == 1) {
            ck_assert_int_eq(st.reason[i], WF_FINISH_ERROR);
            ck_assert_int_eq(st.status[i], WF_ECLOSED);
            ck_assert_int_lt(st.n[i], PHASE2_TOKENS);
        } else {
            ck_assert_int_eq(st.reason[i], WF_FINISH_LENGTH);
            ck_assert_int_eq(st.n[i], PHASE2_TOKENS);
        }
        wf_sched_release(e.s, reqs[i]);
    }
    wf_sched_get_stats(e.s, &s);
    ck_assert_int_eq(s.groups_live, 1);
    /* A removed group: wf_sched_remove_group takes group 0 down too; a new request then has
     * no live group and fails with a clear error. */
    ck_assert_int_eq(wf_sched_remove_group(e.s, 0, "worker 0 exited"), WF_OK);
    ck_assert_int_eq(wf_sched_remove_group(e.s, 7, "no such"), WF_ENOTFOUND);
    memset(&st, 0, sizeof st);
    for (int spins = 0; spins < 200; spins++) {
        wf_sched_get_stats(e.s, &s);
        if (s.groups_live == 0) break;
        usleep(5000);
    }
    ck_assert_int_eq(s.groups_live, 0);
    submit_all(&e, reqs, p, 1, 5);
    collect(&e, &st, 1, reqs);
    ck_assert_int_eq(st.reason[0], WF_FINISH_ERROR);
    ck_assert_int_eq(st.status[0], WF_ECLOSED);
    wf_sched_release(e.s, reqs[0]);
    wf_sched_drain(e.s, 1000);
    wf_sched_get_stats(e.s, &s);
    ck_assert_uint_eq(s.failed_total, 3);
    ck_assert_int_eq(s.groups[0].kv_blocks_used, 0);
    genv_free(&e);
}
END_TEST

static void wait_live(genv *e, int want, wf_sched_stats *st) {
    for (int spins = 0; spins < 2000; spins++) {
        wf_sched_get_stats(e->s, st);
        if (st->groups_live == want) return;
        usleep(1000);
    }
    ck_assert_int_eq(st->groups_live, want);
}

START_TEST(group_slots_are_reused_past_the_lane_limit) {
    /* A flapping worker: group 1 is removed and a new group added, more times than there are
     * slots. Each new group takes the slot of the one that went down (so the list stays two
     * long), gets an id never used before, and a stale id (the previous incarnation's) no
     * longer names anything. Every 8th round the group has requests with batches in flight
     * when it is removed: they end (re-run on group 0, or fail naming the group) and the new
     * group in the slot starts clean. */
    int delay[2] = {300, 300};
    genv e;
    genv_init(&e, 2, delay, 128);
    ck_assert_int_eq(wf_sched_start(e.s), WF_OK);
    wf_sched_stats st;
    int id = 1;
    wf_request *reqs[NREQ];
    int32_t p[NREQ][40];
    for (int round = 0; round < WF_SCHED_STATS_GROUPS + 6; round++) {
        wait_live(&e, 2, &st);
        ck_assert_int_eq(st.n_groups, 2);
        ck_assert_int_eq(st.groups[1].id, id);
        ck_assert_int_eq(st.groups[1].slot, 1);
        ck_assert(st.groups[1].live);
        bool busy = round % 8 == 0;
        streams ss = {0};
        if (busy) {
            submit_all(&e, reqs, p, 4, 40);
            for (int spins = 0; spins < 3000 && !(ss.n[0] || ss.n[1] || ss.n[2] || ss.n[3]); spins++) {
                wf_handoff_wait(&e.events, 5);
                for (wf_handoff_item *it = wf_handoff_take_all(&e.events), *next; it; it = next) {
                    next = it->next;
                    wf_request_event *ev = (wf_request_event *)it;
                    int i = (int)(intptr_t)ev->user;
                    if (ev->kind == WF_EVENT_TOKEN) ss.n[i]++;
                    else ss.finished++;
                    wf_request_event_free(e.s, ev);
                }
            }
        }
        ck_assert_int_eq(wf_sched_remove_group(e.s, id, "worker restarting"), WF_OK);
        if (busy) {
            collect(&e, &ss, 4, reqs);
            for (int i = 0; i < 4; i++) {
                ck_assert(ss.reason[i] == WF_FINISH_LENGTH ||
                          (ss.reason[i] == WF_FINISH_ERROR && ss.status[i] == WF_ECLOSED));
                wf_sched_release(e.s, reqs[i]);
            }
        }
        wait_live(&e, 1, &st);
        ck_assert(!st.groups[1].live);
        ck_assert_ptr_nonnull(strstr(st.groups[1].last_error, "worker restarting"));
        int new_id = -1;
        ck_assert_int_eq(wf_sched_add_group(e.s, &e.store[1], wf_fake_executor_get(&e.fx[1]), 1,
                                            &new_id),
                         WF_OK);
        ck_assert_int_eq(new_id, id + 1);
        /* The previous incarnation's id: its slot went to the new group. */
        ck_assert_int_eq(wf_sched_remove_group(e.s, id, "stale"), WF_ENOTFOUND);
        id = new_id;
    }
    wait_live(&e, 2, &st);
    ck_assert_int_eq(st.n_groups, 2);
    ck_assert_int_gt(id, WF_SCHED_STATS_GROUPS);
    /* The last group serves: both groups take requests and every one finishes. */
    submit_all(&e, reqs, p, NREQ, 10);
    streams ss = {0};
    collect(&e, &ss, NREQ, reqs);
    for (int i = 0; i < NREQ; i++) {
        ck_assert_int_eq(ss.reason[i], WF_FINISH_LENGTH);
        ck_assert_int_eq(ss.n[i], 10);
        wf_sched_release(e.s, reqs[i]);
    }
    wf_sched_drain(e.s, 1000);
    wf_sched_get_stats(e.s, &st);
    ck_assert_uint_gt(st.groups[1].iterations, 0);
    ck_assert_int_eq(st.groups[1].id, id);
    genv_free(&e);
}
END_TEST

START_TEST(event_allocation_failure_fails_the_request) {
    int delay[1] = {-1};
    genv e;
    genv_init(&e, 1, delay, 128);
    wf_request *reqs[2];
    int32_t p[2][40];
    /* Reserved FINISHED events come from the pool at submit: with every allocation failing,
     * submit refuses cleanly. */
    wf__sched_fail_event_allocs(e.s, 1 << 20);
    wf_request_spec spec;
    spec_for(&spec, p[0], 12, 10, 0);
    wf_sched_reject why;
    ck_assert_int_eq(wf_sched_submit(e.s, &spec, &e.events, NULL, &reqs[0], &why), WF_ENOMEM);
    /* Accepted while memory is there; then TOKEN events cannot be allocated: the request ends
     * with FINISHED(error, WF_ENOMEM) instead of the process aborting. */
    wf__sched_fail_event_allocs(e.s, 0);
    submit_all(&e, reqs, p, 1, 10);
    wf__sched_fail_event_allocs(e.s, 1 << 20);
    ck_assert_int_eq(wf_sched_start(e.s), WF_OK);
    streams st = {0};
    collect(&e, &st, 1, reqs);
    ck_assert_int_eq(st.reason[0], WF_FINISH_ERROR);
    ck_assert_int_eq(st.status[0], WF_ENOMEM);
    ck_assert_int_eq(st.n[0], 0);
    wf_sched_release(e.s, reqs[0]);
    /* Memory back: the next request streams normally. */
    wf__sched_fail_event_allocs(e.s, 0);
    int32_t q[2][40];
    submit_all(&e, reqs, q, 1, 10);
    memset(&st, 0, sizeof st);
    collect(&e, &st, 1, reqs);
    ck_assert_int_eq(st.reason[0], WF_FINISH_LENGTH);
    ck_assert_int_eq(st.n[0], 10);
    wf_sched_release(e.s, reqs[0]);
    wf_sched_drain(e.s, 1000);
    wf_sched_stats s;
    wf_sched_get_stats(e.s, &s);
    ck_assert_uint_eq(s.failed_total, 1);
    ck_assert_int_eq(s.kv_blocks_used, 0);
    genv_free(&e);
}
END_TEST

START_TEST(server_events_queue_is_bounded_and_the_scheduler_retries) {
    /* weftd's events queue (the server's) with a capacity of 4: a slow consumer fills it, the
     * scheduler keeps the rest and retries, and every token arrives in order, FINISHED last. */
    wf_server_options so;
    wf_server_options_init(&so);
    ck_assert_int_gt(so.events_queue, 0); /* bounded by default */
    so.events_queue = 4;
    wf_server *srv = wf_server_new(NULL, &so);
    ck_assert_ptr_nonnull(srv);
    wf_handoff *q = wf_server_events(srv);
    int delay[1] = {-1};
    genv e;
    genv_init(&e, 1, delay, 128);
    ck_assert_int_eq(wf_sched_start(e.s), WF_OK);
    wf_request *r;
    int32_t p[40];
    wf_request_spec spec;
    spec_for(&spec, p, 12, 50, 0);
    wf_sched_reject why;
    ck_assert_int_eq(wf_sched_submit(e.s, &spec, q, NULL, &r, &why), WF_OK);
    int tokens = 0, finished = 0, full_seen = 0;
    for (int spins = 0; spins < 5000 && !finished; spins++) {
        usleep(1000); /* slow consumer */
        if (wf_handoff_length(q) == 4) full_seen++;
        int len = 0;
        for (wf_handoff_item *it = wf_handoff_take_all(q), *next; it; it = next, len++) {
            next = it->next;
            wf_request_event *ev = (wf_request_event *)it;
            ck_assert_int_eq(finished, 0);
            if (ev->kind == WF_EVENT_TOKEN) tokens++;
            else finished++;
            wf_request_event_free(e.s, ev);
        }
        ck_assert_int_le(len, 4);
    }
    ck_assert_int_eq(finished, 1);
    ck_assert_int_eq(tokens, 50);
    ck_assert_int_gt(full_seen, 0); /* the bound was reached: the retry path ran */
    wf_sched_release(e.s, r);
    wf_sched_drain(e.s, 1000);
    genv_free(&e);
    wf_server_free(srv);
}
END_TEST

START_TEST(metrics_show_every_group) {
    wf_sched_stats st;
    memset(&st, 0, sizeof st);
    st.n_groups = 2;
    st.groups_live = 1;
    st.groups[0] = (wf_sched_group_stats){.id = 0, .rank = 0, .live = true, .running = 3,
                                          .kv_blocks_total = 100, .kv_blocks_used = 7,
                                          .batches_in_flight = 1, .iterations = 42};
    st.groups[1] = (wf_sched_group_stats){.id = 1, .rank = 5, .live = false, .failed_batches = 1};
    wf_metrics m;
    wf_metrics_init(&m);
    wf_jbuf b = {0};
    wf_metrics_render(&m, "tiny", &st, &b);
    ck_assert(!b.failed);
    ck_assert_ptr_nonnull(strstr(b.data, "weft:group_up{model_name=\"tiny\",group=\"0\",rank=\"0\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "weft:group_up{model_name=\"tiny\",group=\"1\",rank=\"5\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "weft:group_kv_blocks_used{model_name=\"tiny\",group=\"0\",rank=\"0\"} 7\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "weft:group_iterations_total{model_name=\"tiny\",group=\"0\",rank=\"0\"} 42\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "weft:group_failed_batches_total{model_name=\"tiny\",group=\"1\",rank=\"5\"} 1\n"));
    wf_jbuf_free(&b);
}
END_TEST

/* ---- the executor thread ----------------------------------------------------------------- */

typedef struct xt_env {
    atomic_int done, cancelled;
    atomic_int running;
    atomic_bool gate; /* the first batch waits for it */
} xt_env;

static wf_status xt_run(void *ctx, wf_task_batch *b, char *msg, size_t cap) {
    xt_env *x = ctx;
    ck_assert_int_eq(atomic_fetch_add(&x->running, 1), 0); /* one at a time */
    if (b->n_tasks == 1)
        while (!atomic_load(&x->gate)) usleep(200);
    atomic_fetch_sub(&x->running, 1);
    snprintf(msg, cap, "ran %d", b->n_tasks);
    return b->n_tasks == 3 ? WF_EIO : WF_OK;
}

static void xt_done(void *user, wf_task_batch *b, wf_status st, const char *msg) {
    xt_env *x = user;
    if (st == WF_ECANCELLED) {
        ck_assert_int_eq(b->n_tasks, 2);
        atomic_fetch_add(&x->cancelled, 1);
        return;
    }
    ck_assert_int_eq(st, b->n_tasks == 3 ? WF_EIO : WF_OK);
    ck_assert_ptr_nonnull(msg);
    char want[32];
    snprintf(want, sizeof want, "ran %d", b->n_tasks);
    ck_assert_str_eq(msg, want);
    atomic_fetch_add(&x->done, 1);
}

START_TEST(exec_thread_queues_runs_cancels) {
    xt_env x;
    atomic_init(&x.done, 0);
    atomic_init(&x.cancelled, 0);
    atomic_init(&x.running, 0);
    atomic_init(&x.gate, false);
    wf_exec_thread *t;
    ck_assert_int_eq(wf_exec_thread_new("t", 2, xt_run, &x, &t), WF_OK);
    wf_task_batch b[4] = {{.n_tasks = 1}, {.n_tasks = 2}, {.n_tasks = 3}, {.n_tasks = 4}};
    ck_assert_int_eq(wf_exec_thread_dispatch(t, &b[0], xt_done, &x), WF_OK);
    while (atomic_load(&x.running) == 0) usleep(100); /* b[0] runs, held by the gate */
    ck_assert_int_eq(wf_exec_thread_dispatch(t, &b[1], xt_done, &x), WF_OK);
    ck_assert_int_eq(wf_exec_thread_dispatch(t, &b[2], xt_done, &x), WF_OK);
    /* Two queued (the ring's capacity): a third is refused and never reported. */
    ck_assert_int_eq(wf_exec_thread_dispatch(t, &b[3], xt_done, &x), WF_EBUSY);
    /* Still queued: cancelled at once, from this thread. */
    wf_exec_thread_cancel(t, &b[1]);
    ck_assert_int_eq(atomic_load(&x.cancelled), 1);
    ck_assert_int_eq(atomic_load(&x.done), 0);
    atomic_store(&x.gate, true);
    wf_exec_thread_synchronize(t);
    ck_assert_int_eq(atomic_load(&x.done), 2); /* b[0] ok, b[2] WF_EIO */
    ck_assert_uint_eq(wf_exec_thread_batches(t), 3);
    ck_assert_int_eq(wf_exec_thread_dispatch(t, NULL, xt_done, &x), WF_EINVAL);
    wf_exec_thread_free(t);
}
END_TEST

static Suite *groups_suite(void) {
    Suite *s = suite_create("groups");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, lanes_route_and_group_down);
    tcase_add_test(tc, async_groups_give_the_outputs_of_one_group);
    tcase_add_test(tc, first_finisher_is_the_fast_group);
    tcase_add_test(tc, dead_group_requeues_unstarted_and_fails_started);
    tcase_add_test(tc, group_slots_are_reused_past_the_lane_limit);
    tcase_add_test(tc, event_allocation_failure_fails_the_request);
    tcase_add_test(tc, server_events_queue_is_bounded_and_the_scheduler_retries);
    tcase_add_test(tc, metrics_show_every_group);
    tcase_add_test(tc, exec_thread_queues_runs_cancels);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(groups_suite)
