/* sched/dit_policy.c and sched/dit_cost.c: decisions of the DiT placement policies on small
 * hand-made situations (which group each job gets, and why), under GF-DiT's synthetic cost:
 *   T(1024, P)  = 135.5 | 94.4 | 100.7 | 163.0 ms for P = 1 | 2 | 4 | 8
 *   T(16384, P) = 2167.6 | 1211.0 | 710.9 | 508.6 ms
 * and the cost model itself (formula, measured table, online correction, file errors). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "sched/dit_policy.h"

static wf_dit_cost cost;
static char err[256];

static wf_dit_job job(int id, int tokens, double deadline_ms) {
    wf_dit_job j;
    memset(&j, 0, sizeof j);
    j.id = id;
    j.tokens = tokens;
    j.steps = 50;
    j.max_P = 8;
    j.deadline_ms = deadline_ms;
    j.latent_bytes = 64.0 * tokens;
    return j;
}

static wf_dit_policy *policy(const char *spec, int n_ranks) {
    wf_dit_policy *p;
    ck_assert_msg(wf_dit_policy_new(spec, n_ranks, &cost, 5, &p, err, sizeof err) == WF_OK, "%s", err);
    return p;
}

/* Runs one pick over jobs[0..n) with the given busy ranks; returns the task count. */
static int pick(wf_dit_policy *p, int n_ranks, const bool *busy, wf_dit_job *jobs, int n, wf_dit_task *t) {
    wf_dit_job *ready[16];
    for (int i = 0; i < n; i++) ready[i] = &jobs[i];
    wf_dit_view v = {.now_ms = 0, .n_ranks = n_ranks, .busy = busy, .ready = ready, .n_ready = n};
    return wf_dit_policy_pick(p, &v, t, 16);
}

/* The task of job index i, or NULL. */
static const wf_dit_task *task_of(const wf_dit_task *t, int k, int i) {
    for (int a = 0; a < k; a++)
        if (t[a].job == i) return &t[a];
    return NULL;
}

static void setup(void) { wf_dit_cost_synthetic(&cost); }

START_TEST(test_cost_synthetic_and_table) {
    ck_assert_double_eq_tol(wf_dit_cost_step_ms(&cost, 4096, 2), 0.1323 * 4096 / 1.82 + 20, 1e-9);
    ck_assert_double_eq_tol(wf_dit_cost_step_ms(&cost, 16384, 8), 0.1323 * 16384 / 5.88 + 140, 1e-9);
    ck_assert(!wf_dit_cost_allows(&cost, 3));
    ck_assert(wf_dit_cost_step_ms(&cost, 1024, 3) < 0);
    /* online correction: observed 2x slower at P = 2 moves only degree 2, toward 2x */
    for (int i = 0; i < 200; i++) wf_dit_cost_observe(&cost, 1024, 2, 2 * (0.1323 * 1024 / 1.82 + 20));
    ck_assert_double_eq_tol(cost.corr[2], 2.0, 1e-3);
    ck_assert_double_eq_tol(cost.corr[1], 1.0, 1e-12);
    /* measured table: linear between points, proportional outside */
    wf_dit_cost m;
    wf_dit_cost_measured(&m);
    ck_assert(!wf_dit_cost_allows(&m, 1));
    ck_assert_int_eq(wf_dit_cost_add_point(&m, 256, 1, 100), WF_OK);
    ck_assert_int_eq(wf_dit_cost_add_point(&m, 1024, 1, 500), WF_OK);
    ck_assert_int_eq(wf_dit_cost_add_point(&m, 256, 2, 60), WF_OK);
    ck_assert_int_eq(wf_dit_cost_add_point(&m, 0, 2, 60), WF_EINVAL);
    ck_assert_double_eq_tol(wf_dit_cost_step_ms(&m, 640, 1), 300, 1e-9);
    ck_assert_double_eq_tol(wf_dit_cost_step_ms(&m, 2048, 1), 1000, 1e-9);
    ck_assert_double_eq_tol(wf_dit_cost_step_ms(&m, 512, 2), 120, 1e-9);
    ck_assert(!wf_dit_cost_allows(&m, 4));
    ck_assert_double_eq_tol(wf_dit_cost_reshard_ms(&m, 0), 0, 1e-12);
    ck_assert_double_eq_tol(wf_dit_cost_reshard_ms(&m, 2 * 1048576.0), 0.05 + 0.2, 1e-12);
    /* the file form, and its errors */
    char path[] = "/tmp/weft-dit-cost-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# tokens P ms\n256 1 100\n256 2 60 # measured\n\n");
    fclose(f);
    ck_assert_int_eq(wf_dit_cost_load(&m, path, err, sizeof err), WF_OK);
    ck_assert_int_eq(m.n_points, 2);
    f = fopen(path, "w");
    fprintf(f, "256 1 100\n256 two 60\n");
    fclose(f);
    ck_assert_int_eq(wf_dit_cost_load(&m, path, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, ":2:"));
    /* Infinite (or absurd) times and overheads are refused (they would poison every prediction), and so
     * is a line too long to read whole (a long comment's tail read as a point). */
    const char *bad[] = {"256 1 100\n256 2 inf\n", "256 1 100\nchunk inf\n", "256 1 100\nrequest nan\n", "256 1 100\n256 2 2e9\n"};
    for (int b = 0; b < 4; b++) {
        f = fopen(path, "w");
        fputs(bad[b], f);
        fclose(f);
        ck_assert_int_eq(wf_dit_cost_load(&m, path, err, sizeof err), WF_EFORMAT);
        ck_assert_ptr_nonnull(strstr(err, ":2:"));
        ck_assert_ptr_nonnull(strstr(err, "1e9"));
    }
    ck_assert_int_eq(wf_dit_cost_add_point(&m, 256, 1, 1.0 / 0.0), WF_EINVAL);
    f = fopen(path, "w");
    fprintf(f, "256 1 100\n#");
    for (int i = 0; i < 300; i++) fputc(i < 290 ? 'x' : ' ', f);
    fprintf(f, "512 2 1\n");
    fclose(f);
    ck_assert_int_eq(wf_dit_cost_load(&m, path, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, ":2: line longer than"));
    /* A line that is no point is an error, not skipped; so is a point given twice (which
     * counted was the file's order), and a table without a single-rank point (every T_single,
     * and so every deadline, is one): each was accepted before. */
    const char *refused[][2] = {{"256 1 100\nfoo bar\n", ":2: expected"},
                                {"tokens P ms\n256 1 100\n", ":1: expected"},
                                {"256 1 100\n256 1 90\n", ":2: 256 tokens on 1 rank(s) (plain) given twice"},
                                {"256 2 60\n512 2 110\n", "no single-rank point"}};
    for (int b = 0; b < 4; b++) {
        f = fopen(path, "w");
        fputs(refused[b][0], f);
        fclose(f);
        ck_assert_int_eq(wf_dit_cost_load(&m, path, err, sizeof err), WF_EFORMAT);
        ck_assert_msg(strstr(err, refused[b][1]), "%s", err);
    }
    unlink(path);
    ck_assert_int_eq(wf_dit_cost_load(&m, "/nonexistent/cost.txt", err, sizeof err), WF_ENOTFOUND);
}
END_TEST

/* The guided dimension: synthetic GUIDED = two forwards over P ranks plus one comm term, CFG =
 * one forward per rank plus one latent's exchange, on 2 ranks only; measured points carry their
 * mode, GUIDED falls back to 2 x PLAIN, CFG only where measured; the file form names the mode. */
START_TEST(test_cost_guided_modes) {
    double a = 0.1323 * 4096;
    ck_assert_double_eq_tol(wf_dit_cost_mode_step_ms(&cost, 4096, 1, WF_DIT_COST_GUIDED), 2 * a, 1e-9);
    ck_assert_double_eq_tol(wf_dit_cost_mode_step_ms(&cost, 4096, 2, WF_DIT_COST_GUIDED), 2 * a / 1.82 + 20, 1e-9);
    double x = 0.05 + 64.0 * 4096 / 1048576 * 0.1; /* one latent exchanged: 256 KiB */
    ck_assert_double_eq_tol(wf_dit_cost_mode_step_ms(&cost, 4096, 2, WF_DIT_COST_CFG), a + x, 1e-9);
    ck_assert(wf_dit_cost_mode_step_ms(&cost, 4096, 4, WF_DIT_COST_CFG) < 0);
    ck_assert(wf_dit_cost_mode_step_ms(&cost, 4096, 1, WF_DIT_COST_CFG) < 0);
    wf_dit_cost_mode m = WF_DIT_COST_PLAIN;
    ck_assert_double_eq_tol(wf_dit_cost_guided_ms(&cost, 4096, 2, &m), a + x, 1e-9); /* CFG faster */
    ck_assert_int_eq(m, WF_DIT_COST_CFG);
    ck_assert_double_eq_tol(wf_dit_cost_guided_ms(&cost, 4096, 4, &m), 2 * a / 3.33 + 60, 1e-9);
    ck_assert_int_eq(m, WF_DIT_COST_GUIDED);
    ck_assert_str_eq(wf_dit_cost_mode_name(WF_DIT_COST_CFG), "cfg");
    /* measured: Ulysses-guided on 2 ranks beats CFG here (a machine where it does) */
    wf_dit_cost t;
    wf_dit_cost_measured(&t);
    ck_assert_int_eq(wf_dit_cost_add_point(&t, 256, 1, 10), WF_OK);
    ck_assert_int_eq(wf_dit_cost_add_point(&t, 256, 2, 6), WF_OK);
    ck_assert_int_eq(wf_dit_cost_add_mode_point(&t, 256, 2, WF_DIT_COST_CFG, 11), WF_OK);
    ck_assert_int_eq(wf_dit_cost_add_mode_point(&t, 256, 2, WF_DIT_COST_GUIDED, 10.5), WF_OK);
    ck_assert_int_eq(wf_dit_cost_add_mode_point(&t, 256, 4, WF_DIT_COST_CFG, 5), WF_EINVAL);
    ck_assert_double_eq_tol(wf_dit_cost_guided_ms(&t, 256, 1, &m), 20, 1e-9); /* 2 x plain: none measured */
    ck_assert_int_eq(m, WF_DIT_COST_GUIDED);
    ck_assert_double_eq_tol(wf_dit_cost_guided_ms(&t, 256, 2, &m), 10.5, 1e-9);
    ck_assert_int_eq(m, WF_DIT_COST_GUIDED);
    /* the online correction of a CFG observation is against CFG's prediction, and moves the
     * degree (both modes: 10.5 x 0.5 Ulysses, 11 x 0.5 CFG) */
    for (int i = 0; i < 200; i++) wf_dit_cost_observe_mode(&t, 256, 2, WF_DIT_COST_CFG, 5.5);
    ck_assert_double_eq_tol(t.corr[2], 0.5, 1e-3);
    ck_assert_double_eq_tol(wf_dit_cost_mode_step_ms(&t, 256, 2, WF_DIT_COST_CFG), 5.5, 1e-2);
    ck_assert_double_eq_tol(wf_dit_cost_guided_ms(&t, 256, 2, &m), 5.25, 1e-2);
    ck_assert_int_eq(m, WF_DIT_COST_GUIDED);
    char path[] = "/tmp/weft-dit-cost-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "256 1 10\n256 1 19 guided\n256 2 6 plain\n256 2 11 cfg\n");
    fclose(f);
    ck_assert_int_eq(wf_dit_cost_load(&t, path, err, sizeof err), WF_OK);
    ck_assert_int_eq(t.n_points, 4);
    ck_assert_double_eq_tol(wf_dit_cost_guided_ms(&t, 256, 1, NULL), 19, 1e-9);
    ck_assert_double_eq_tol(wf_dit_cost_guided_ms(&t, 256, 2, &m), 11, 1e-9); /* 2 x 6 Ulysses vs 11 CFG */
    ck_assert_int_eq(m, WF_DIT_COST_CFG);
    const char *bad[] = {"256 1 10\n256 4 3 cfg\n", "256 1 10\n256 2 3 ulysses\n", "256 1 10\n256 2 3 cfg x\n"};
    for (int b = 0; b < 3; b++) {
        f = fopen(path, "w");
        fputs(bad[b], f);
        fclose(f);
        ck_assert_int_eq(wf_dit_cost_load(&t, path, err, sizeof err), WF_EFORMAT);
        ck_assert_ptr_nonnull(strstr(err, ":2:"));
        ck_assert_ptr_nonnull(strstr(err, "plain|guided|cfg"));
    }
    unlink(path);
}
END_TEST

/* A guided job's degree follows the mode: S guided (1024 tokens) with a 8000 ms deadline misses
 * it on one rank (2 x 135.5 x 50 = 13.5 s); on 2 ranks guidance-parallel takes 6.78 s, Ulysses
 * 8.44 s: with CFG the best fit is 2 ranks in CFG mode; on a model without CFG it is 4 ranks
 * (Ulysses 7.07 s). An unguided job's task is PLAIN. Static lanes of 2 run it in CFG mode. */
/* The chunk overhead learnt online: the first observation replaces the start value, then an
 * EWMA (weight corr_weight) that converges to the mean of noisy observations and never goes
 * below 0; the policy's remaining-time prediction includes what it learnt. */
START_TEST(test_cost_chunk_overhead_online) {
    wf_dit_cost c;
    wf_dit_cost_synthetic(&c);
    c.chunk_ms = 5;
    wf_dit_cost_observe_chunk(&c, 2.0);
    ck_assert_double_eq_tol(c.chunk_ms, 2.0, 1e-12);
    ck_assert_int_eq(c.chunk_obs, 1);
    wf_dit_cost_observe_chunk(&c, 4.0);
    ck_assert_double_eq_tol(c.chunk_ms, 0.9 * 2.0 + 0.1 * 4.0, 1e-12);
    /* noisy around 3 ms (alternating 1 and 5): the mean stays near 3 */
    for (int i = 0; i < 400; i++) wf_dit_cost_observe_chunk(&c, i % 2 ? 5.0 : 1.0);
    ck_assert_double_eq_tol(c.chunk_ms, 3.0, 0.25);
    /* steps faster than predicted: negative overheads pull it to 0, not below */
    for (int i = 0; i < 400; i++) wf_dit_cost_observe_chunk(&c, -1.0);
    ck_assert_double_eq_tol(c.chunk_ms, 0.0, 1e-12);
    ck_assert_int_eq(c.chunk_obs, 802);
    wf_dit_cost_observe_chunk(&c, 0.0 / 0.0); /* NaN: ignored */
    ck_assert_int_eq(c.chunk_obs, 802);
    /* the policy's remaining time of a job counts one chunk_ms per chunk left */
    c.chunk_ms = 0;
    wf_dit_job j = {.id = 0, .tokens = 1024, .steps = 20, .steps_done = 10, .max_P = 8,
                    .arrival_ms = 0, .deadline_ms = 1e9};
    double base = wf_dit_policy_remaining_ms(&c, &j, 1, false, 5);
    c.chunk_ms = 7;
    ck_assert_double_eq_tol(wf_dit_policy_remaining_ms(&c, &j, 1, false, 5) - base, 2 * 7.0, 1e-9);
}
END_TEST

/* The request overhead learnt from lone requests: the median of the latest
 * WF_DIT_COST_REQUEST_WINDOW, so a first slow request (code paged in) or one preempted does not
 * hold it up; never below 0; a lone request's predicted latency is steps x T + chunks x
 * chunk_ms + request_ms (chunks of chunk_steps, the last one partial). */
START_TEST(test_cost_request_overhead_online) {
    wf_dit_cost c;
    wf_dit_cost_synthetic(&c);
    wf_dit_cost_observe_request(&c, 900.0); /* the daemon's first request */
    ck_assert_double_eq_tol(c.request_ms, 900.0, 1e-12);
    wf_dit_cost_observe_request(&c, 1.0);
    ck_assert_double_eq_tol(c.request_ms, 450.5, 1e-12); /* two: their mean */
    wf_dit_cost_observe_request(&c, 1.2);
    ck_assert_double_eq_tol(c.request_ms, 1.2, 1e-12);   /* the outlier no longer counts */
    for (int i = 0; i < 40; i++) wf_dit_cost_observe_request(&c, i % 7 == 0 ? 50.0 : 2.0);
    ck_assert_double_eq_tol(c.request_ms, 2.0, 1e-12);
    ck_assert_int_eq(c.request_obs, 43);
    wf_dit_cost_observe_request(&c, 0.0 / 0.0); /* NaN: ignored */
    ck_assert_int_eq(c.request_obs, 43);
    for (int i = 0; i < WF_DIT_COST_REQUEST_WINDOW; i++) wf_dit_cost_observe_request(&c, -3.0);
    ck_assert_double_eq_tol(c.request_ms, 0.0, 1e-12);
    /* alone: 10 steps of 1024 tokens on 1 rank (135.48 ms each), chunks of 4 (3 chunks) */
    c.chunk_ms = 2;
    c.request_ms = 30;
    ck_assert_double_eq_tol(wf_dit_cost_alone_ms(&c, 1024, 1, WF_DIT_COST_PLAIN, 10, 4),
                            10 * 0.1323 * 1024 + 3 * 2.0 + 30.0, 1e-9);
    ck_assert_double_eq_tol(wf_dit_cost_alone_ms(&c, 1024, 1, WF_DIT_COST_GUIDED, 10, 1),
                            10 * 2 * 0.1323 * 1024 + 10 * 2.0 + 30.0, 1e-9);
    ck_assert(wf_dit_cost_alone_ms(&c, 1024, 3, WF_DIT_COST_PLAIN, 10, 1) < 0); /* no degree 3 */
    ck_assert(wf_dit_cost_alone_ms(&c, 1024, 1, WF_DIT_COST_PLAIN, 10, 0) < 0);
}
END_TEST

/* Points at two token counts (a daemon's native size and its largest): T(tokens, P) is
 * interpolated between them, and the online correction moves only the observed size class
 * (and the degree's), so a slow large size does not slow the small one's predictions. */
START_TEST(test_cost_size_classes) {
    wf_dit_cost c;
    wf_dit_cost_measured(&c);
    ck_assert_int_eq(wf_dit_cost_add_point(&c, 16, 1, 2.0), WF_OK);
    ck_assert_int_eq(wf_dit_cost_add_point(&c, 16, 2, 3.0), WF_OK);
    ck_assert_int_eq(wf_dit_cost_add_point(&c, 1024, 1, 100.0), WF_OK);
    ck_assert_int_eq(wf_dit_cost_add_point(&c, 1024, 2, 60.0), WF_OK);
    ck_assert_int_eq(c.n_classes, 2);
    /* P = 2 pays at 1024 tokens, not at 16 */
    ck_assert(wf_dit_cost_step_ms(&c, 1024, 2) < wf_dit_cost_step_ms(&c, 1024, 1));
    ck_assert(wf_dit_cost_step_ms(&c, 16, 2) > wf_dit_cost_step_ms(&c, 16, 1));
    ck_assert_double_eq_tol(wf_dit_cost_step_ms(&c, 520, 1), 51.0, 1e-9); /* halfway */
    for (int i = 0; i < 200; i++) wf_dit_cost_observe(&c, 1024, 2, 120.0);
    ck_assert_double_eq_tol(wf_dit_cost_correction(&c, 1024, 2), 2.0, 1e-3);
    ck_assert_double_eq_tol(wf_dit_cost_step_ms(&c, 1024, 2), 120.0, 0.1);
    ck_assert_double_eq_tol(wf_dit_cost_correction(&c, 16, 2), 1.0, 1e-12);
    ck_assert_double_eq_tol(wf_dit_cost_step_ms(&c, 16, 2), 3.0, 1e-12);
    ck_assert_double_eq_tol(wf_dit_cost_correction(&c, 700, 2), 2.0, 1e-3); /* nearer 1024 in ratio */
    ck_assert_double_eq_tol(wf_dit_cost_correction(&c, 64, 2), 1.0, 1e-12);
    ck_assert_double_eq_tol(c.corr[2], 2.0, 1e-3); /* the degree's too */
    ck_assert_double_eq_tol(wf_dit_cost_correction(&c, 1024, 1), 1.0, 1e-12);
    /* one token count: the degree's correction only */
    wf_dit_cost o;
    wf_dit_cost_measured(&o);
    ck_assert_int_eq(wf_dit_cost_add_point(&o, 16, 1, 2.0), WF_OK);
    wf_dit_cost_observe(&o, 1024, 1, 2.0 * 64 * 3);
    ck_assert_double_eq_tol(wf_dit_cost_correction(&o, 16, 1), o.corr[1], 1e-12);
    ck_assert(o.corr[1] > 1.0);
}
END_TEST

START_TEST(test_elastic_guided_degree) {
    wf_dit_policy *p = policy("elastic", 4);
    bool busy[4] = {true, true, false, false};
    wf_dit_job jobs[1] = {job(0, 1024, 8000)};
    jobs[0].guided = true;
    wf_dit_task t[16];
    int k = pick(p, 4, busy, jobs, 1, t);
    ck_assert_int_eq(k, 1);
    ck_assert_int_eq(t[0].n_ranks, 2);
    ck_assert_int_eq(t[0].mode, WF_DIT_COST_CFG);
    wf_dit_policy_free(p);
    /* the same model measured, without CFG points: Ulysses only */
    wf_dit_cost m;
    wf_dit_cost_measured(&m);
    int P[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        wf_dit_cost_add_point(&m, 1024, P[i], wf_dit_cost_step_ms(&cost, 1024, P[i]));
        wf_dit_cost_add_mode_point(&m, 1024, P[i], WF_DIT_COST_GUIDED,
                                   wf_dit_cost_mode_step_ms(&cost, 1024, P[i], WF_DIT_COST_GUIDED));
    }
    wf_dit_policy *q;
    ck_assert_int_eq(wf_dit_policy_new("elastic", 4, &m, 5, &q, err, sizeof err), WF_OK);
    bool idle[4] = {0};
    k = pick(q, 4, idle, jobs, 1, t);
    ck_assert_int_eq(k, 1);
    ck_assert_int_eq(t[0].n_ranks, 4);
    ck_assert_int_eq(t[0].mode, WF_DIT_COST_GUIDED);
    jobs[0].guided = false; /* unguided: 6.77 s on one rank meets 8000 */
    k = pick(q, 4, idle, jobs, 1, t);
    ck_assert_int_eq(t[0].mode, WF_DIT_COST_PLAIN);
    wf_dit_policy_free(q);
    jobs[0].guided = true;
    p = policy("static:2", 4);
    k = pick(p, 4, idle, jobs, 1, t);
    ck_assert_int_eq(k, 1);
    ck_assert_int_eq(t[0].n_ranks, 2);
    ck_assert_int_eq(t[0].mode, WF_DIT_COST_CFG);
    wf_dit_policy_free(p);
}
END_TEST

/* Cheap growth: two guided S jobs (1024 tokens: 271.0 ms a step on one rank, 135.6 on two in
 * CFG mode: the same rank-time) and two free ranks. The more urgent one gets both ranks in CFG
 * mode rather than each one rank: it finishes twice as fast and the other, with slack, waits a
 * chunk (5 steps: 678 ms). When the other cannot wait (its deadline 14000 ms < 678 + 50 x 271),
 * the lent rank comes back and each runs on one. Plain jobs never grow so (two ranks cost 39%
 * more rank-time for S). */
START_TEST(test_elastic_cheap_growth) {
    wf_dit_policy *p = policy("elastic", 4);
    bool busy[4] = {true, false, false, true};
    wf_dit_job jobs[2] = {job(0, 1024, 13900), job(1, 1024, 1e5)};
    jobs[0].guided = jobs[1].guided = true;
    wf_dit_task t[16];
    int k = pick(p, 4, busy, jobs, 2, t);
    ck_assert_int_eq(k, 1);
    ck_assert_int_eq(t[0].job, 0);
    ck_assert_int_eq(t[0].n_ranks, 2);
    ck_assert_int_eq(t[0].mode, WF_DIT_COST_CFG);
    jobs[1].deadline_ms = 14000;
    k = pick(p, 4, busy, jobs, 2, t);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(task_of(t, k, 0)->n_ranks, 1);
    ck_assert_int_eq(task_of(t, k, 1)->n_ranks, 1);
    ck_assert_int_eq(task_of(t, k, 0)->mode, WF_DIT_COST_GUIDED);
    jobs[0].guided = jobs[1].guided = false;
    jobs[1].deadline_ms = 1e5;
    k = pick(p, 4, busy, jobs, 2, t);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(task_of(t, k, 0)->n_ranks, 1);
    ck_assert_int_eq(task_of(t, k, 1)->n_ranks, 1);
    wf_dit_policy_free(p);
}
END_TEST

START_TEST(test_policy_names) {
    wf_dit_policy *p;
    ck_assert_int_eq(wf_dit_policy_new("static:3", 8, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "static:3"));
    ck_assert_int_eq(wf_dit_policy_new("static:8", 4, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_int_eq(wf_dit_policy_new("fastest", 4, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "fastest"));
    ck_assert_int_eq(wf_dit_policy_new("rssp:1024", 4, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_int_eq(wf_dit_policy_new("gf-static:3", 8, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "gf-static:3"));
    ck_assert_int_eq(wf_dit_policy_new("gf-rssp:1024", 8, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "gf-rssp:TOKENS=P"));
    /* rssp tables name degrees the ranks can form, each size once (they were clamped or
     * dropped at run time) */
    ck_assert_int_eq(wf_dit_policy_new("rssp:64=3", 8, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "64=3: P must be a power of two"), "%s", err);
    ck_assert_int_eq(wf_dit_policy_new("rssp:64=4", 2, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "at most the 2 ranks"), "%s", err);
    ck_assert_int_eq(wf_dit_policy_new("gf-rssp:1=2,16384=4", 2, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "16384=4"), "%s", err);
    ck_assert_int_eq(wf_dit_policy_new("rssp:64=1,64=2", 8, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "64 tokens named twice"), "%s", err);
    ck_assert_int_eq(wf_dit_policy_new("rssp:64=1,256=2", 2, &cost, 5, &p, err, sizeof err), WF_OK);
    wf_dit_policy_free(p);
    /* GF-DiT's own default map (S:4) is clamped to the ranks there are, as its simulator does */
    ck_assert_int_eq(wf_dit_policy_new("gf-rssp", 2, &cost, 5, &p, err, sizeof err), WF_OK);
    wf_dit_policy_free(p);
    ck_assert_int_eq(wf_dit_policy_new("gf-fcfs:16", 8, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_int_eq(wf_dit_policy_new("gf-elastic", 8, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_int_eq(wf_dit_policy_new("elastic", 0, &cost, 5, &p, err, sizeof err), WF_EINVAL);
    ck_assert_int_eq(wf_dit_policy_new("elastic", 4, &cost, 0, &p, err, sizeof err), WF_EINVAL);
}
END_TEST

/* Best fit: each job the smallest degree meeting its deadline, in deadline order. A (short,
 * tight: P = 1 takes 6774 ms > 5000, P = 2 takes 4718) gets 2; B and C (lenient) one each. */
START_TEST(test_elastic_smallest_degree) {
    wf_dit_policy *p = policy("elastic", 4);
    bool busy[4] = {0};
    wf_dit_job jobs[3] = {job(0, 16384, 1e9), job(1, 1024, 5000), job(2, 1024, 20000)};
    wf_dit_task t[16];
    int k = pick(p, 4, busy, jobs, 3, t);
    ck_assert_int_eq(k, 3);
    ck_assert_int_eq(task_of(t, k, 1)->n_ranks, 2);
    ck_assert_int_eq(task_of(t, k, 2)->n_ranks, 1);
    ck_assert_int_eq(task_of(t, k, 0)->n_ranks, 1);
    for (int a = 0; a < k; a++) ck_assert_int_eq(t[a].steps, 5); /* a chunk, then reconsidered */
    /* the groups are disjoint and cover the 4 ranks */
    int seen[4] = {0};
    for (int a = 0; a < k; a++)
        for (int i = 0; i < t[a].n_ranks; i++) seen[t[a].ranks[i]]++;
    for (int r = 0; r < 4; r++) ck_assert_int_eq(seen[r], 1);
    wf_dit_policy_free(p);
}
END_TEST

/* Leftovers go to the most urgent job, at the fastest degree: one short job alone on 8 ranks
 * meets its deadline on 1, but 2 ranks are faster (94.4 ms vs 135.5; 4 and 8 are slower). */
START_TEST(test_elastic_leftovers_to_most_urgent) {
    wf_dit_policy *p = policy("elastic", 8);
    bool busy[8] = {0};
    wf_dit_job jobs[2] = {job(0, 1024, 1e5), job(1, 16384, 1e9)};
    wf_dit_task t[16];
    int k = pick(p, 8, busy, jobs, 1, t);
    ck_assert_int_eq(k, 1);
    ck_assert_int_eq(t[0].n_ranks, 2);
    /* with a long job too: both fit on one rank; leftovers (6) go first to the short one (more
     * urgent: earlier deadline) up to its fastest degree 2, then the long one gets 5 ranks'
     * worth: its fastest allowed degree within 1 + 5 = 6 is 4 */
    k = pick(p, 8, busy, jobs, 2, t);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(task_of(t, k, 0)->n_ranks, 2);
    ck_assert_int_eq(task_of(t, k, 1)->n_ranks, 4);
    wf_dit_policy_free(p);
}
END_TEST

/* Demotion: a long job ahead in deadline order holds the room a short job at risk needs (2
 * ranks: 6774 ms on one > its 5000 ms deadline, 4718 on two); with far more work left, the
 * long one waits a chunk. Without that much more work, no demotion: the short job starts on
 * the one rank left rather than wait (and is reconsidered at its chunk's end). */
START_TEST(test_elastic_demotes_long_job) {
    wf_dit_policy *p = policy("elastic", 8);
    bool busy[8] = {true, true, true, true, true, true, false, false};
    wf_dit_job jobs[2] = {job(0, 16384, 4900), job(1, 1024, 5000)};
    jobs[0].steps_done = 48; /* 2 steps left: 4335 ms on one rank, not 4x the short job's work */
    wf_dit_task t[16];
    int k = pick(p, 8, busy, jobs, 2, t);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(task_of(t, k, 0)->n_ranks, 1);
    ck_assert_int_eq(task_of(t, k, 1)->n_ranks, 1);
    /* on 8 free ranks: the long job (13 steps left: 28179 ms on one rank, > 4x the short
     * job's 6774) meets its 6700 ms deadline only on 8 ranks (6612 ms) and comes first in
     * deadline order, so it takes all 8; the short job at risk (6750 ms: needs 2) demotes it,
     * and the long one then gets the largest degree left over (4 of the 6) */
    bool none[8] = {0};
    jobs[0].steps_done = 37;
    jobs[0].deadline_ms = 6700;
    jobs[1].deadline_ms = 6750;
    k = pick(p, 8, none, jobs, 2, t);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(task_of(t, k, 1)->n_ranks, 2);
    ck_assert_int_eq(task_of(t, k, 0)->n_ranks, 4);
    /* without the short job, the long one gets its 8 */
    k = pick(p, 8, none, jobs, 1, t);
    ck_assert_int_eq(t[0].n_ranks, 8);
    wf_dit_policy_free(p);
}
END_TEST

/* Jobs that cannot meet their deadline on any degree get one rank each, after the others. */
START_TEST(test_elastic_late_jobs_one_rank) {
    wf_dit_policy *p = policy("elastic", 3);
    bool busy[3] = {0};
    wf_dit_job jobs[3] = {job(0, 1024, 10), job(1, 1024, 20), job(2, 1024, 1e9)};
    wf_dit_task t[16];
    int k = pick(p, 3, busy, jobs, 3, t);
    ck_assert_int_eq(k, 3);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(task_of(t, k, i)->n_ranks, 1);
    wf_dit_policy_free(p);
}
END_TEST

/* A late job never takes a rank a feasible job's best fit needs (under a sustained overload,
 * e.g. GF-DiT's tridentserve, that turned one miss into several); once late by more than its
 * single-rank time it goes before what feasible jobs would get beyond their best fit and before
 * the other late jobs (which go shortest first), so partly fitting newcomers cannot starve it. */
START_TEST(test_elastic_late_job_aging) {
    wf_dit_policy *p = policy("elastic", 3);
    bool busy[3] = {true, true, false};
    double aged = 1000 + 50 * 135.5 + 100; /* job 0 is late by more than its 6.8 s alone */
    wf_dit_job jobs[3] = {job(0, 1024, 1000), job(1, 1024, 1e9), job(2, 1024, aged - 10)};
    wf_dit_job *ready[3] = {&jobs[0], &jobs[1], &jobs[2]};
    wf_dit_view v = {.now_ms = 2000, .n_ranks = 3, .busy = busy, .ready = ready, .n_ready = 2};
    wf_dit_task t[4];
    ck_assert_int_eq(wf_dit_policy_pick(p, &v, t, 4), 1);
    ck_assert_int_eq(t[0].job, 1); /* late by 1 s: the feasible job goes first */
    v.now_ms = aged;
    ck_assert_int_eq(wf_dit_policy_pick(p, &v, t, 4), 1);
    ck_assert_int_eq(t[0].job, 1); /* aged, but the feasible job's best fit needs the rank */
    /* two free ranks: the feasible job gets its best fit (1), the aged job the other one rather
     * than the feasible job its fastest degree (2) */
    busy[1] = false;
    wf_dit_task *a, *b;
    ck_assert_int_eq(wf_dit_policy_pick(p, &v, t, 4), 2);
    a = (wf_dit_task *)task_of(t, 2, 0), b = (wf_dit_task *)task_of(t, 2, 1);
    ck_assert(a && b);
    ck_assert_int_eq(a->n_ranks, 1);
    ck_assert_int_eq(b->n_ranks, 1);
    /* one free rank, two late jobs: the aged one before the not yet aged one, though the
     * latter has less work left (late jobs go shortest first otherwise) */
    busy[1] = true;
    jobs[0].steps_done = 10;
    jobs[2].steps_done = 40;
    ready[1] = &jobs[2];
    ck_assert_int_eq(wf_dit_policy_pick(p, &v, t, 4), 1);
    ck_assert_int_eq(t[0].job, 0);
    v.now_ms = aged - 5; /* neither aged: the shorter one first */
    jobs[0].deadline_ms = 1100;
    ck_assert_int_eq(wf_dit_policy_pick(p, &v, t, 4), 1);
    ck_assert_int_eq(t[0].job, 1);
    wf_dit_policy_free(p);
}
END_TEST

/* Overload triage (Moore-Hodgson on the cluster as one server of 0.8 x its ranks): one rank,
 * a 50-step job (27.09 s of work) due at 30 s and two 20-step ones (10.84 s each) due at 31
 * and 32 s (less than 4x apart: no demotion). EDF alone would run the long one and both short
 * ones would miss; the summed work passes the first short job's deadline (37.93 s / 0.8 =
 * 47.4 s > 31 s), so the job with the most work is set aside (it alone misses) and the first
 * short one takes the rank. */
START_TEST(test_elastic_triage_sets_long_job_aside) {
    wf_dit_policy *p = policy("elastic", 1);
    bool busy[1] = {false};
    wf_dit_job jobs[3] = {job(0, 4096, 30000), job(1, 4096, 31000), job(2, 4096, 32000)};
    jobs[1].steps = jobs[2].steps = 20;
    wf_dit_task t[16];
    ck_assert_int_eq(pick(p, 1, busy, jobs, 3, t), 1);
    ck_assert_int_eq(t[0].job, 1);
    /* alone it is never set aside for its own work (27.09 s / 0.8 = 33.9 s is past its 30 s,
     * but the whole cluster is what it can have, and it fits) */
    ck_assert_int_eq(pick(p, 1, busy, jobs, 1, t), 1);
    ck_assert_int_eq(t[0].job, 0);
    /* a short job due late enough for both (37.93 s / 0.8 = 47.4 s <= 60 s): EDF */
    jobs[1].deadline_ms = 60000;
    ck_assert_int_eq(pick(p, 1, busy, jobs, 2, t), 1);
    ck_assert_int_eq(t[0].job, 0);
    /* a job late anyway (due before its own time) takes no part: it neither fills the sum
     * (6.77 + 27.09 s / 0.8 would pass 30 s and set the long job aside) nor is chosen */
    wf_dit_job more[2] = {job(0, 1024, 1000), job(1, 4096, 30000)};
    ck_assert_int_eq(pick(p, 1, busy, more, 2, t), 1);
    ck_assert_int_eq(t[0].job, 1);
    /* of equal jobs the one due first is set aside (the furthest behind; one of the two misses
     * either way: 54.2 s of work, the second due at 50 s): the second takes the rank */
    wf_dit_job two[2] = {job(0, 4096, 30000), job(1, 4096, 50000)};
    ck_assert_int_eq(pick(p, 1, busy, two, 2, t), 1);
    ck_assert_int_eq(t[0].job, 1);
    wf_dit_policy_free(p);
}
END_TEST

/* A job keeps the ranks it held when they are free (no reshard). */
START_TEST(test_elastic_keeps_ranks) {
    wf_dit_policy *p = policy("elastic", 8);
    bool busy[8] = {0};
    wf_dit_job jobs[1] = {job(0, 1024, 1e5)};
    jobs[0].n_ranks = 2;
    jobs[0].ranks[0] = 6;
    jobs[0].ranks[1] = 5;
    wf_dit_task t[16];
    ck_assert_int_eq(pick(p, 8, busy, jobs, 1, t), 1);
    ck_assert_int_eq(t[0].n_ranks, 2);
    ck_assert_int_eq(t[0].ranks[0], 6);
    ck_assert_int_eq(t[0].ranks[1], 5);
    /* one of them busy: the other is kept, the second is the lowest free */
    busy[6] = true;
    ck_assert_int_eq(pick(p, 8, busy, jobs, 1, t), 1);
    ck_assert_int_eq(t[0].ranks[0], 5);
    ck_assert_int_eq(t[0].ranks[1], 0);
    wf_dit_policy_free(p);
}
END_TEST

/* static:2 on 8 ranks: lanes {0,1} {2,3} {4,5} {6,7}; a busy rank blocks its lane; jobs take
 * whole lanes in deadline order and run every step there. */
START_TEST(test_static_lanes) {
    wf_dit_policy *p = policy("static:2", 8);
    bool busy[8] = {false, false, false, true, false, false, false, false};
    wf_dit_job jobs[4] = {job(0, 1024, 300), job(1, 1024, 100), job(2, 16384, 200), job(3, 1024, 400)};
    wf_dit_task t[16];
    int k = pick(p, 8, busy, jobs, 4, t);
    ck_assert_int_eq(k, 3);
    ck_assert_int_eq(t[0].job, 1);
    ck_assert_int_eq(t[0].ranks[0], 0);
    ck_assert_int_eq(t[1].job, 2);
    ck_assert_int_eq(t[1].ranks[0], 4);
    ck_assert_int_eq(t[2].job, 0);
    ck_assert_int_eq(t[2].ranks[0], 6);
    for (int a = 0; a < k; a++) {
        ck_assert_int_eq(t[a].n_ranks, 2);
        ck_assert_int_eq(t[a].steps, 50);
    }
    /* a job whose model allows only P = 1 uses one rank of its lane */
    jobs[1].max_P = 1;
    k = pick(p, 8, busy, jobs, 2, t);
    ck_assert_int_eq(task_of(t, k, 1)->n_ranks, 1);
    wf_dit_policy_free(p);
}
END_TEST

/* rssp: the largest degree with parallel efficiency >= 0.7: S -> 2 (0.72), L -> 4 (0.76); or a
 * table; backfill: a job that does not fit lets a smaller one behind it start. */
START_TEST(test_rssp) {
    wf_dit_policy *p = policy("rssp", 8);
    wf_dit_job s = job(0, 1024, 0), l = job(1, 16384, 0);
    ck_assert_int_eq(wf_dit_policy_rssp_degree(p, &s), 2);
    ck_assert_int_eq(wf_dit_policy_rssp_degree(p, &l), 4);
    bool busy[8] = {true, true, true, true, true, false, false, false};
    wf_dit_job jobs[2] = {job(0, 16384, 100), job(1, 1024, 200)};
    wf_dit_task t[16];
    int k = pick(p, 8, busy, jobs, 2, t);
    ck_assert_int_eq(k, 1);
    ck_assert_int_eq(t[0].job, 1);
    ck_assert_int_eq(t[0].n_ranks, 2);
    ck_assert_int_eq(t[0].steps, 50);
    wf_dit_policy_free(p);
    p = policy("rssp:1=1,10000=8", 8);
    ck_assert_int_eq(wf_dit_policy_rssp_degree(p, &s), 1);
    ck_assert_int_eq(wf_dit_policy_rssp_degree(p, &l), 8);
    wf_dit_policy_free(p);
}
END_TEST

/* gf-static:2 on 8 ranks (GF-DiT's static-SP baseline): jobs bound round-robin to the lanes
 * {0,1} {2,3} {4,5} {6,7} in arrival order (0 -> lane 0, 1 -> 1, 2 -> 2, 3 -> 3, 4 -> 0, 5 -> 1),
 * each lane first come first served: job 5, due first, waits behind job 1 on its lane even
 * when other lanes are free (no deadline order, no moving). */
START_TEST(test_gf_static_binds_round_robin) {
    wf_dit_policy *p = policy("gf-static:2", 8);
    bool busy[8] = {false, false, false, true, false, false, false, false};
    wf_dit_job jobs[6];
    for (int i = 0; i < 6; i++) {
        jobs[i] = job(i, 1024, 1000 - 100 * i);
        jobs[i].arrival_ms = i;
    }
    wf_dit_task t[16];
    int k = pick(p, 8, busy, jobs, 6, t);
    ck_assert_int_eq(k, 3); /* lane 1 busy; 4 and 5 queue behind 0 and 1 */
    ck_assert_int_eq(task_of(t, k, 0)->ranks[0], 0);
    ck_assert_int_eq(task_of(t, k, 2)->ranks[0], 4);
    ck_assert_int_eq(task_of(t, k, 3)->ranks[0], 6);
    ck_assert_int_eq(task_of(t, k, 3)->n_ranks, 2);
    ck_assert_int_eq(task_of(t, k, 3)->steps, 50);
    /* later: 0, 2, 3 running on lanes 0, 2, 3... then all free: 1 and 4 start on their lanes,
     * 5 waits for 1 although lanes 2 and 3 are free */
    wf_dit_job rest[3] = {jobs[1], jobs[4], jobs[5]};
    bool none[8] = {false};
    k = pick(p, 8, none, rest, 3, t);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(task_of(t, k, 0)->ranks[0], 2);
    ck_assert_int_eq(task_of(t, k, 1)->ranks[0], 0);
    ck_assert_ptr_null(task_of(t, k, 2));
    wf_dit_policy_free(p);
}
END_TEST

/* gf-rssp (GF-DiT's RSSP, default S:4, M:4, L:1) on 8 ranks: L jobs bound round-robin to the
 * single ranks, S jobs to the blocks {0-3} {4-7}; lanes of both sizes overlap. In arrival order:
 * L0 -> rank 0 starts; S1 -> {0-3} waits (rank 0 taken); S2 -> {4-7} starts; L3 -> rank 1. */
START_TEST(test_gf_rssp_overlapping_lanes) {
    wf_dit_policy *p = policy("gf-rssp", 8);
    wf_dit_job jobs[4] = {job(0, 16384, 1e9), job(1, 1024, 1), job(2, 1024, 2), job(3, 16384, 1e9)};
    for (int i = 0; i < 4; i++) jobs[i].arrival_ms = i;
    ck_assert_int_eq(wf_dit_policy_rssp_degree(p, &jobs[0]), 1);
    ck_assert_int_eq(wf_dit_policy_rssp_degree(p, &jobs[1]), 4);
    bool none[8] = {false};
    wf_dit_task t[16];
    int k = pick(p, 8, none, jobs, 4, t);
    ck_assert_int_eq(k, 3);
    ck_assert_int_eq(task_of(t, k, 0)->ranks[0], 0);
    ck_assert_int_eq(task_of(t, k, 0)->n_ranks, 1);
    ck_assert_ptr_null(task_of(t, k, 1));
    ck_assert_int_eq(task_of(t, k, 2)->n_ranks, 4);
    ck_assert_int_eq(task_of(t, k, 2)->ranks[0], 4);
    ck_assert_int_eq(task_of(t, k, 3)->ranks[0], 1);
    wf_dit_policy_free(p);
}
END_TEST

/* gf-fcfs:2 on 4 ranks (GF-DiT's runtime FCFS, earliest-free binding): a long L job binds to
 * lane 0 (its backlog then ends at ~60 s), so the next two S jobs (6.8 s each) both bind to
 * lane 1 (backlog 4.8 then 9.5 s on 2 ranks < 60 s) and queue there FCFS; round-robin would have sent the
 * second S behind the L job. */
START_TEST(test_gf_fcfs_earliest_free) {
    wf_dit_policy *p = policy("gf-fcfs:2", 4);
    wf_dit_job jobs[3] = {job(0, 16384, 1e9), job(1, 1024, 1e9), job(2, 1024, 1e9)};
    for (int i = 0; i < 3; i++) jobs[i].arrival_ms = i;
    bool none[4] = {false};
    wf_dit_task t[16];
    int k = pick(p, 4, none, jobs, 3, t);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(task_of(t, k, 0)->ranks[0], 0);
    ck_assert_int_eq(task_of(t, k, 1)->ranks[0], 2);
    ck_assert_ptr_null(task_of(t, k, 2));
    ck_assert_int_eq(jobs[2].lane, 2);
    wf_dit_policy_free(p);
    p = policy("gf-static:2", 4); /* round-robin: job 2 to lane 0, behind the L job */
    for (int i = 0; i < 3; i++) jobs[i].lane = 0;
    k = pick(p, 4, none, jobs, 3, t);
    ck_assert_int_eq(jobs[2].lane, 1);
    wf_dit_policy_free(p);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("dit_policy");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_cost_synthetic_and_table);
    tcase_add_test(tc, test_cost_guided_modes);
    tcase_add_test(tc, test_cost_chunk_overhead_online);
    tcase_add_test(tc, test_cost_request_overhead_online);
    tcase_add_test(tc, test_cost_size_classes);
    tcase_add_test(tc, test_elastic_guided_degree);
    tcase_add_test(tc, test_elastic_cheap_growth);
    tcase_add_test(tc, test_policy_names);
    tcase_add_test(tc, test_elastic_smallest_degree);
    tcase_add_test(tc, test_elastic_leftovers_to_most_urgent);
    tcase_add_test(tc, test_elastic_demotes_long_job);
    tcase_add_test(tc, test_elastic_late_jobs_one_rank);
    tcase_add_test(tc, test_elastic_keeps_ranks);
    tcase_add_test(tc, test_elastic_late_job_aging);
    tcase_add_test(tc, test_elastic_triage_sets_long_job_aside);
    tcase_add_test(tc, test_static_lanes);
    tcase_add_test(tc, test_rssp);
    tcase_add_test(tc, test_gf_static_binds_round_robin);
    tcase_add_test(tc, test_gf_rssp_overlapping_lanes);
    tcase_add_test(tc, test_gf_fcfs_earliest_free);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(suite)
