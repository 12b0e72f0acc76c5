/* sched/dit_sim.c: the DiT cluster simulator is deterministic per seed (same trace, same
 * report) and differs across seeds; a request alone takes exactly what the cost model says
 * (static:1: T_single; elastic: the fastest degree, chunk after chunk on the same ranks, plus
 * one group formation when communicators are charged); the workload follows its profile; bad
 * policies are refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "sched/dit_sim.h"

static char err[256];

static void run(const wf_dit_sim_config *cfg, const char *pol, const wf_dit_sim_job *jobs, int n,
                wf_dit_sim_report *r) {
    ck_assert_msg(wf_dit_sim_run(cfg, pol, jobs, n, r, err, sizeof err) == WF_OK, "%s", err);
}

START_TEST(test_deterministic_per_seed) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    cfg.n_ranks = 16;
    const wf_dit_sim_profile *prof = wf_dit_sim_profile_find("tridentserve");
    ck_assert_ptr_nonnull(prof);
    wf_dit_sim_job *a, *b, *c;
    int na, nb, nc;
    ck_assert_int_eq(wf_dit_sim_workload(&cfg, prof, 1.2, 7, &a, &na), WF_OK);
    ck_assert_int_eq(wf_dit_sim_workload(&cfg, prof, 1.2, 7, &b, &nb), WF_OK);
    ck_assert_int_eq(wf_dit_sim_workload(&cfg, prof, 1.2, 8, &c, &nc), WF_OK);
    ck_assert_int_gt(na, 50);
    ck_assert_int_eq(na, nb);
    ck_assert(!memcmp(a, b, sizeof *a * (size_t)na));
    ck_assert(na != nc || memcmp(a, c, sizeof *a * (size_t)na) != 0);
    const char *pols[] = {"elastic", "rssp", "static:2"};
    for (int p = 0; p < 3; p++) {
        wf_dit_sim_report r1, r2, r3;
        run(&cfg, pols[p], a, na, &r1);
        run(&cfg, pols[p], b, nb, &r2);
        run(&cfg, pols[p], c, nc, &r3);
        ck_assert(!memcmp(&r1, &r2, sizeof r1));
        ck_assert(memcmp(&r1, &r3, sizeof r1) != 0);
        ck_assert_int_eq(r1.n_jobs, na);
        ck_assert(r1.utilisation > 0 && r1.utilisation <= 1.0 + 1e-9);
        ck_assert(r1.latency_p99_ms >= r1.latency_p95_ms && r1.latency_mean_ms > 0);
    }
    free(a);
    free(b);
    free(c);
}
END_TEST

START_TEST(test_single_request_latency) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    wf_dit_sim_job one = {.arrival_ms = 1000, .cls = 0}; /* S: 1024 tokens, 50 steps */
    wf_dit_sim_report r;
    run(&cfg, "static:1", &one, 1, &r);
    double single = 50 * (0.1323 * 1024);
    ck_assert_double_eq_tol(r.latency_mean_ms, single, 1e-6);
    ck_assert_double_eq_tol(wf_dit_sim_single_ms(&cfg, 0), single, 1e-9);
    ck_assert_double_eq_tol(r.norm_latency_mean, 1.0, 1e-9);
    ck_assert_int_eq(r.n_missed, 0);
    ck_assert_int_eq(r.tasks, 1);
    /* elastic: leftovers give it its fastest degree (2), 50 one-step chunks, never moved */
    run(&cfg, "elastic", &one, 1, &r);
    double p2 = 50 * (0.1323 * 1024 / 1.82 + 20);
    ck_assert_double_eq_tol(r.latency_mean_ms, p2, 1e-6);
    ck_assert_int_eq(r.tasks, 50);
    ck_assert_int_eq(r.reshards, 0);
    /* with communicators: the first task on the pair pays one formation */
    cfg.cost.group_form_ms = 778;
    run(&cfg, "elastic", &one, 1, &r);
    ck_assert_double_eq_tol(r.latency_mean_ms, p2 + 778, 1e-6);
    ck_assert_int_eq(r.groups_formed, 1);
    /* a deadline it cannot meet counts as missed: L under static:8 on 8 ranks meets it, under
     * a factor below 1 nobody can */
    cfg.cost.group_form_ms = 0;
    cfg.classes[2].alpha = 0.1;
    wf_dit_sim_job l = {.arrival_ms = 0, .cls = 2};
    run(&cfg, "static:8", &l, 1, &r);
    ck_assert_int_eq(r.n_missed, 1);
    ck_assert_int_eq(r.cls_missed[2], 1);
}
END_TEST

START_TEST(test_workload_profiles) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    /* foreground_burst: the middle 30 s are almost all S; the outer phases have none */
    const wf_dit_sim_profile *fb = wf_dit_sim_profile_find("foreground_burst");
    wf_dit_sim_job *j;
    int n;
    ck_assert_int_eq(wf_dit_sim_workload(&cfg, fb, 1.0, 3, &j, &n), WF_OK);
    int s_out = 0, s_in = 0, in = 0;
    for (int i = 0; i < n; i++) {
        bool burst = j[i].arrival_ms >= 60000 && j[i].arrival_ms < 90000;
        in += burst;
        if (j[i].cls == 0) burst ? s_in++ : s_out++;
        if (i) ck_assert(j[i].arrival_ms >= j[i - 1].arrival_ms);
        ck_assert(j[i].arrival_ms < 150000);
    }
    ck_assert_int_eq(s_out, 0);
    ck_assert_int_gt(s_in, in / 2);
    free(j);
    ck_assert_ptr_null(wf_dit_sim_profile_find("steady"));
    ck_assert_int_eq(wf_dit_sim_workload(&cfg, fb, 0, 3, &j, &n), WF_EINVAL);
    wf_dit_sim_report r;
    wf_dit_sim_job one = {.arrival_ms = 0, .cls = 0};
    ck_assert_int_eq(wf_dit_sim_run(&cfg, "static:16", &one, 1, &r, err, sizeof err), WF_EINVAL);
    cfg.n_ranks = 65;
    ck_assert_int_eq(wf_dit_sim_run(&cfg, "elastic", &one, 1, &r, err, sizeof err), WF_EINVAL);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("dit_sim");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_deterministic_per_seed);
    tcase_add_test(tc, test_single_request_latency);
    tcase_add_test(tc, test_workload_profiles);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(suite)
