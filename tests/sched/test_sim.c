/* Tests sched/sim.c: hand-checked results of small workloads under a fixed cost model, the
 * workload parser, and that the simulator exercises the real core (preemption, policies). */
#include "check_main.h"
#include "sched/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void cfg_fixed(wf_sim_config *c, const char *policy, int max_running) {
    wf_sim_config_init(c);
    c->policy = policy;
    c->cost[0] = 10; /* a: 10 ms per iteration */
    c->cost[1] = 1;  /* b: 1 ms per prefill token */
    c->cost[2] = 1;  /* c: 1 ms per decode token */
    c->cost[3] = 0;  /* d: no context term */
    c->max_batch_tokens = 100;
    c->max_running = max_running;
    c->kv_blocks = 256;
    c->block_size = 16;
}

/*           arrival prompt output ttft  tpot */
static const wf_sim_request W[3] = {
    {0, 50, 3, 100, 20, 0},   /* R0 */
    {0, 30, 2, 50, 20, 0},    /* R1 */
    {500, 20, 1, 100, 50, 0}, /* R2 */
};

START_TEST(fcfs_hand_checked) {
    /* t=0:   R0 and R1 admitted together: prefill 50 + 30 = 80 tokens <= 100.
     *        10 + 80*1 = 90 ms -> t=90: both first tokens (TTFT 90, 90).
     * t=90:  decode R0, R1: 10 + 2 = 12 -> t=102: R1 has 2 tokens: done (e2e 102).
     * t=102: decode R0: 10 + 1 = 11 -> t=113: R0 has 3 tokens: done (e2e 113).
     * idle until t=500: R2 prefill 20: 10 + 20 = 30 -> t=530: 1 token, done (TTFT = e2e = 30).
     * TPOT: R0 (113-90)/2 = 11.5; R1 (102-90)/1 = 12; R2 has one token: not counted.
     * SLOs: R0 90<=100, 11.5<=20 met; R1 90>50 missed; R2 30<=100 met -> 2/3.
     * Makespan 0..530 ms; goodput 2 / 0.530 s = 3.7736 req/s; 6 tokens / 0.53 s.
     * Nearest-rank percentiles: TTFT {30,90,90} -> p50 90, p90 90, p99 90;
     * e2e {30,102,113} -> p50 102, p90 113; TPOT {11.5,12} -> p50 11.5, p90 12. */
    wf_sim_config c;
    cfg_fixed(&c, "fcfs", 64);
    wf_sim_outcome o[3];
    wf_sim_report r;
    ck_assert_int_eq(wf_sim_run(&c, W, 3, o, &r), WF_OK);
    ck_assert_double_eq_tol(o[0].ttft_ms, 90, 1e-6);
    ck_assert_double_eq_tol(o[1].ttft_ms, 90, 1e-6);
    ck_assert_double_eq_tol(o[0].e2e_ms, 113, 1e-6);
    ck_assert_double_eq_tol(o[1].e2e_ms, 102, 1e-6);
    ck_assert_double_eq_tol(o[2].ttft_ms, 30, 1e-6);
    ck_assert_double_eq_tol(o[2].e2e_ms, 30, 1e-6);
    ck_assert_double_eq_tol(o[0].tpot_ms, 11.5, 1e-6);
    ck_assert_double_eq_tol(o[1].tpot_ms, 12, 1e-6);
    ck_assert(o[0].met_slo && !o[1].met_slo && o[2].met_slo);
    ck_assert_double_eq_tol(r.slo_attainment, 2.0 / 3.0, 1e-9);
    ck_assert_double_eq_tol(r.makespan_ms, 530, 1e-6);
    ck_assert_double_eq_tol(r.goodput_rps, 2 / 0.530, 1e-9);
    ck_assert_double_eq_tol(r.throughput_tok_s, 6 / 0.530, 1e-9);
    ck_assert_double_eq_tol(r.ttft_ms[0], 90, 1e-6);
    ck_assert_double_eq_tol(r.ttft_ms[2], 90, 1e-6);
    ck_assert_double_eq_tol(r.e2e_ms[0], 102, 1e-6);
    ck_assert_double_eq_tol(r.e2e_ms[1], 113, 1e-6);
    ck_assert_double_eq_tol(r.tpot_ms[0], 11.5, 1e-6);
    ck_assert_double_eq_tol(r.tpot_ms[1], 12, 1e-6);
    ck_assert_uint_eq(r.iterations, 4);
}
END_TEST

START_TEST(two_groups_hand_checked) {
    /* Two groups, each with its own pool and batch, on the virtual clock. R0 and R1 arrive at
     * t=0: R0 -> group 0 (tie: lower id), R1 -> group 1 (least loaded); both plan at once.
     *   group 1: R1 prefill 30: 10 + 30 = 40 -> t=40 first token; decode 11 -> t=51 done.
     *   group 0: R0 prefill 50: 10 + 50 = 60 -> t=60; decodes -> t=71, t=82 done.
     *   t=500: R2 -> group 0 (tie): 10 + 20 = 30 -> t=530 done.
     * TTFT 60 / 40 / 30; e2e 82 / 51 / 30; TPOT 11 / 11; every SLO met (R1's 50 ms TTFT, which
     * one group missed at 90 ms). Iterations: 4 on group 0 + 2 on group 1. */
    wf_sim_config c;
    cfg_fixed(&c, "fcfs", 64);
    c.n_groups = 2;
    wf_sim_outcome o[3];
    wf_sim_report r;
    ck_assert_int_eq(wf_sim_run(&c, W, 3, o, &r), WF_OK);
    ck_assert_double_eq_tol(o[0].ttft_ms, 60, 1e-6);
    ck_assert_double_eq_tol(o[1].ttft_ms, 40, 1e-6);
    ck_assert_double_eq_tol(o[2].ttft_ms, 30, 1e-6);
    ck_assert_double_eq_tol(o[0].e2e_ms, 82, 1e-6);
    ck_assert_double_eq_tol(o[1].e2e_ms, 51, 1e-6);
    ck_assert_double_eq_tol(o[0].tpot_ms, 11, 1e-6);
    ck_assert_double_eq_tol(o[1].tpot_ms, 11, 1e-6);
    ck_assert(o[0].met_slo && o[1].met_slo && o[2].met_slo);
    ck_assert_double_eq_tol(r.slo_attainment, 1.0, 1e-9);
    ck_assert_double_eq_tol(r.makespan_ms, 530, 1e-6);
    ck_assert_uint_eq(r.iterations, 6);
    /* More groups than the limit: refused. */
    c.n_groups = 1000;
    ck_assert_int_eq(wf_sim_run(&c, W, 3, o, &r), WF_EINVAL);
}
END_TEST

START_TEST(one_at_a_time_fcfs_vs_slo) {
    /* max_running 1, R0 and R1 only.
     * fcfs: R0 first: prefill 10+50 = 60 -> TTFT 60; decodes 11, 11 -> done at 82;
     *       R1: prefill 10+30 = 40 -> TTFT 122 (> 50: missed); decode 11 -> 133.
     * slo:  R1's deadline (0+50) precedes R0's (0+100): prefill 40 -> TTFT 40; decode -> 51;
     *       R0: 51 + 60 = 111 -> TTFT 111 (> 100: missed); decodes -> 122, 133. */
    wf_sim_config c;
    wf_sim_outcome o[2];
    wf_sim_report r;
    cfg_fixed(&c, "fcfs", 1);
    ck_assert_int_eq(wf_sim_run(&c, W, 2, o, &r), WF_OK);
    ck_assert_double_eq_tol(o[0].ttft_ms, 60, 1e-6);
    ck_assert_double_eq_tol(o[0].e2e_ms, 82, 1e-6);
    ck_assert_double_eq_tol(o[1].ttft_ms, 122, 1e-6);
    ck_assert_double_eq_tol(o[1].e2e_ms, 133, 1e-6);
    cfg_fixed(&c, "slo", 1);
    ck_assert_int_eq(wf_sim_run(&c, W, 2, o, &r), WF_OK);
    ck_assert_double_eq_tol(o[1].ttft_ms, 40, 1e-6);
    ck_assert_double_eq_tol(o[1].e2e_ms, 51, 1e-6);
    ck_assert_double_eq_tol(o[0].ttft_ms, 111, 1e-6);
    ck_assert_double_eq_tol(o[0].e2e_ms, 133, 1e-6);
    ck_assert(o[1].met_slo && !o[0].met_slo);
}
END_TEST

START_TEST(chunked_prefill_in_sim) {
    /* Budget 100, one 250-token prompt: chunks 100, 100, 50 -> 110 + 110 + 60 = 280 ms TTFT. */
    wf_sim_request w[1] = {{0, 250, 1, 1000, 100, 0}};
    wf_sim_config c;
    cfg_fixed(&c, "fcfs", 8);
    wf_sim_outcome o[1];
    wf_sim_report r;
    ck_assert_int_eq(wf_sim_run(&c, w, 1, o, &r), WF_OK);
    ck_assert_double_eq_tol(o[0].ttft_ms, 280, 1e-6);
    ck_assert_uint_eq(r.iterations, 3);
}
END_TEST

START_TEST(small_cache_preempts_and_finishes) {
    wf_sim_request w[6];
    for (int i = 0; i < 6; i++) w[i] = (wf_sim_request){i * 1.0, 40, 60, 1000, 100, 0};
    wf_sim_config c;
    cfg_fixed(&c, "fcfs", 8);
    c.kv_blocks = 20; /* 320 tokens for 6 x 100 */
    wf_sim_outcome o[6];
    wf_sim_report r;
    ck_assert_int_eq(wf_sim_run(&c, w, 6, o, &r), WF_OK);
    ck_assert_uint_gt(r.preemptions, 0);
    ck_assert_int_eq(r.n_failed, 0);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(o[i].generated, 60);
}
END_TEST

START_TEST(workload_file) {
    char path[] = "/tmp/weft-sim-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("# arrival prompt output ttft tpot [priority]\n"
          "500 20 1 100 50\n"
          "\n"
          "0 50 3 100 20 2\n"
          "0 30 2 50 20\n",
          f);
    fclose(f);
    wf_sim_request *w;
    int n;
    char err[256];
    ck_assert_int_eq(wf_sim_load_workload(path, &w, &n, err, sizeof err), WF_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(w[0].prompt_len, 50); /* sorted by arrival, stable */
    ck_assert_int_eq(w[0].priority, 2);
    ck_assert_int_eq(w[1].prompt_len, 30);
    ck_assert_int_eq(w[2].prompt_len, 20);
    free(w);
    f = fopen(path, "w");
    fputs("0 10 5 100\n", f);
    fclose(f);
    ck_assert_int_eq(wf_sim_load_workload(path, &w, &n, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, ":1:"));
    unlink(path);
    wf_sim_request r;
    ck_assert_int_eq(wf_sim_parse_line("0 10 5 100 20 1 extra", &r), -1);
    ck_assert_int_eq(wf_sim_parse_line("0 0 5 100 20", &r), -1);
    ck_assert_int_eq(wf_sim_parse_line("   # comment", &r), 0);
}
END_TEST

START_TEST(slo_sizes_prefill_chunks_to_the_tpot_budget) {
    /* Cost 10 + 1/prefill token + 1/decode token; budget 100; blocks of 16.
     * R0: t=0, prompt 10, 20 tokens, TPOT SLO 30.  R1: t=25, prompt 57, 1 token.
     *   t=0:  R0 prefill 10: 10+10 = 20 -> t=20 (R0 token 1)
     *   t=20: R0 decode: 11 -> t=31 (R1 arrived at 25)
     * slo: R0's TPOT is an average: after this iteration its n tokens are due within 30*n
     * of its first token (t=20); the decode costs 10+1 = 11 and the rest goes to prefill.
     *   t=31: R0 has 2 tokens, banked 30*2 - 11 = 49: decode + R1 chunk of 38: 49 -> t=80.
     *   t=80: R0 has 3 tokens: 30*3 - 60 = 30: decode + R1's last 19: 10+1+19 = 30 -> t=110.
     *   R1's first (and only) token at 110: TTFT 110-25 = 85; R0 exactly on its TPOT.
     *   (A per-iteration cap of 30 ms would give chunks of 19 and TTFT 96.)
     * fcfs: t=31: R0 decode + R1's whole 57-token prompt: 10+1+57 = 68 -> t=99: TTFT 74.
     * Both: R0 ends after 20 tokens at 286 (slo: 110 + 16*11; fcfs: 99 + 17*11).
     * That is the TPOT budget alone (prefill_stretch 0). With the stall cap (stretch 2) an
     * iteration that decodes may add 11 ms (its decode-only cost) of prefill: 11 tokens, less
     * than the one-block floor of 16, so R1 runs in chunks of 16, 16, 16, 9:
     *   t=31 -> 58 -> 85 -> 112 (10+1+16 each), then 10+1+9 = 20 -> t=132: TTFT 107, and no
     *   iteration of R0 takes more than 27 ms (the banked version had one of 49). */
    static const wf_sim_request w[2] = {{0, 10, 20, 1000, 30, 0}, {25, 57, 1, 1000, 100, 0}};
    wf_sim_config c;
    wf_sim_outcome o[2];
    wf_sim_report r;
    cfg_fixed(&c, "slo", 64);
    c.prefill_stretch = 0;
    ck_assert_int_eq(wf_sim_run(&c, w, 2, o, &r), WF_OK);
    ck_assert_double_eq_tol(o[1].ttft_ms, 85, 1e-6);
    ck_assert_double_eq_tol(o[0].e2e_ms, 286, 1e-6);
    cfg_fixed(&c, "slo", 64);
    c.prefill_stretch = 2;
    ck_assert_int_eq(wf_sim_run(&c, w, 2, o, &r), WF_OK);
    ck_assert_double_eq_tol(o[1].ttft_ms, 107, 1e-6);
    ck_assert_double_eq_tol(o[0].e2e_ms, 286, 1e-6);
    ck_assert(o[0].tpot_ms <= 30 + 1e-6);
    cfg_fixed(&c, "fcfs", 64);
    ck_assert_int_eq(wf_sim_run(&c, w, 2, o, &r), WF_OK);
    ck_assert_double_eq_tol(o[1].ttft_ms, 74, 1e-6);
    ck_assert_double_eq_tol(o[0].e2e_ms, 286, 1e-6);
}
END_TEST

START_TEST(slo_serves_requests_that_can_still_meet_their_slo) {
    /* One at a time. R0: t=0, prompt 50 -> done at 60 (TTFT 60 <= 100).
     * R1: t=1, prompt 10, TTFT SLO 30: already missed at t=60, so keyed 1 + 3 x 30 = 91 (aging
     * 2).  R2: t=2, prompt 10, SLO 85: deadline 87 < 91.
     * slo: R2 first (R1 is hopeless): 60 -> 80, TTFT 78 (met); R1: 80 -> 100, TTFT 99.
     * Plain EDF would serve R1 (deadline 31) first and make R2 miss too (TTFT 98 > 85). */
    static const wf_sim_request w[3] = {
        {0, 50, 1, 100, 100, 0}, {1, 10, 1, 30, 100, 0}, {2, 10, 1, 85, 100, 0}};
    wf_sim_config c;
    wf_sim_outcome o[3];
    wf_sim_report r;
    cfg_fixed(&c, "slo", 1);
    ck_assert_int_eq(wf_sim_run(&c, w, 3, o, &r), WF_OK);
    ck_assert_double_eq_tol(o[0].ttft_ms, 60, 1e-6);
    ck_assert_double_eq_tol(o[2].ttft_ms, 78, 1e-6);
    ck_assert_double_eq_tol(o[1].ttft_ms, 99, 1e-6);
    ck_assert_double_eq_tol(r.slo_attainment, 2.0 / 3.0, 1e-9);
}
END_TEST

START_TEST(slo_late_request_waits_a_bounded_time) {
    /* As above, but R2 arrives at t=10: deadline 95 is later than R1's aged key 91, so the late
     * R1 goes first (60 -> 80, TTFT 79) and R2 follows (80 -> 100, TTFT 90): a late request
     * yields only to requests that arrived less than 2 TTFT windows after it. */
    static const wf_sim_request w[3] = {
        {0, 50, 1, 100, 100, 0}, {1, 10, 1, 30, 100, 0}, {10, 10, 1, 85, 100, 0}};
    wf_sim_config c;
    wf_sim_outcome o[3];
    wf_sim_report r;
    cfg_fixed(&c, "slo", 1);
    ck_assert_int_eq(wf_sim_run(&c, w, 3, o, &r), WF_OK);
    ck_assert_double_eq_tol(o[1].ttft_ms, 79, 1e-6);
    ck_assert_double_eq_tol(o[2].ttft_ms, 90, 1e-6);
}
END_TEST

START_TEST(slo_overload_keeps_the_ttft_tail_bounded) {
    /* Sustained overload, one at a time: a request every 15 ms, each costing 10 + 10 = 20 ms,
     * TTFT SLO 50. The queue grows by 5 ms of work per arrival and almost everyone misses.
     * With "late goes last" the first late requests starved until the burst ended (max TTFT
     * about the whole makespan). With aging, a late request (key q + 150) is overtaken only by
     * requests that arrived before q + 100, at most 100 / 15 + 1 = 7 of them (140 ms of work),
     * so no TTFT exceeds FCFS's worst by more than that, and the p99 stays within a small
     * multiple of the median. */
    enum { N = 80 };
    wf_sim_request w[N];
    for (int i = 0; i < N; i++) w[i] = (wf_sim_request){15.0 * i, 10, 1, 50, 100, 0};
    wf_sim_outcome o[N];
    wf_sim_report fcfs, slo;
    wf_sim_config c;
    cfg_fixed(&c, "fcfs", 1);
    ck_assert_int_eq(wf_sim_run(&c, w, N, o, &fcfs), WF_OK);
    double fcfs_max = 0;
    for (int i = 0; i < N; i++) fcfs_max = o[i].ttft_ms > fcfs_max ? o[i].ttft_ms : fcfs_max;
    cfg_fixed(&c, "slo", 1);
    ck_assert_int_eq(wf_sim_run(&c, w, N, o, &slo), WF_OK);
    double slo_max = 0;
    for (int i = 0; i < N; i++) slo_max = o[i].ttft_ms > slo_max ? o[i].ttft_ms : slo_max;
    ck_assert_double_le(slo_max, fcfs_max + 7 * 20 + 1e-6);
    ck_assert_double_le(slo.ttft_ms[2], 6 * slo.ttft_ms[0]);
    /* Same work, same makespan: ordering moved waiting time around, it did not add any. */
    ck_assert_double_eq_tol(slo.makespan_ms, fcfs.makespan_ms, 1e-6);
}
END_TEST

START_TEST(admission_in_the_simulator) {
    /* Factor 2, same cost. R0 (t=0, 50 tokens, SLO 100): nothing queued: 10 + 50 = 60 <= 200,
     * admitted. R1 (t=0, 30 tokens, SLO 40): behind R0's 50 queued tokens: 10 + 80 = 90 > 80,
     * refused (counts as missed). R2 (t=500) admitted. R0 alone: TTFT 60, decodes 11, 11 ->
     * e2e 82; R2: TTFT 30. Attainment 2/3 of all requests. */
    static const wf_sim_request w[3] = {
        {0, 50, 3, 100, 20, 0}, {0, 30, 2, 40, 20, 0}, {500, 20, 1, 100, 50, 0}};
    wf_sim_config c;
    cfg_fixed(&c, "fcfs", 64);
    c.admission_factor = 2;
    wf_sim_outcome o[3];
    wf_sim_report r;
    ck_assert_int_eq(wf_sim_run(&c, w, 3, o, &r), WF_OK);
    ck_assert(o[1].rejected && !o[0].rejected && !o[2].rejected);
    ck_assert_int_eq(r.n_rejected, 1);
    ck_assert_double_eq_tol(o[0].ttft_ms, 60, 1e-6);
    ck_assert_double_eq_tol(o[0].e2e_ms, 82, 1e-6);
    ck_assert_double_eq_tol(o[2].ttft_ms, 30, 1e-6);
    ck_assert_double_eq_tol(r.slo_attainment, 2.0 / 3.0, 1e-9);
}
END_TEST

START_TEST(admission_predicts_in_the_policy_order) {
    /* Factor 1, same cost, all at t=0. R0 and R1: 90-token prompts, relaxed SLO 10000. R2: 20
     * tokens, SLO 120. Counted first-come-first-served, R2 sits behind 180 queued tokens
     * (predicted 10 + 10 + 200 = 220 > 120): fcfs refuses it, rightly. slo orders R2 first
     * (deadline 120 < 10000): nothing is ahead of it (10 + 20 = 30), so it is admitted, and it
     * is served in the first iteration with an 80-token chunk of R0: TTFT 10 + 100 = 110. */
    static const wf_sim_request w[3] = {
        {0, 90, 1, 10000, 200, 0}, {0, 90, 1, 10000, 200, 0}, {0, 20, 1, 120, 200, 0}};
    wf_sim_config c;
    wf_sim_outcome o[3];
    wf_sim_report r;
    cfg_fixed(&c, "fcfs", 64);
    c.admission_factor = 1;
    ck_assert_int_eq(wf_sim_run(&c, w, 3, o, &r), WF_OK);
    ck_assert(!o[0].rejected && !o[1].rejected && o[2].rejected);
    cfg_fixed(&c, "slo", 64);
    c.admission_factor = 1;
    ck_assert_int_eq(wf_sim_run(&c, w, 3, o, &r), WF_OK);
    ck_assert(!o[0].rejected && !o[1].rejected && !o[2].rejected);
    ck_assert_double_eq_tol(o[2].ttft_ms, 110, 1e-6);
    ck_assert(o[2].met_slo);
}
END_TEST

static Suite *sim_suite(void) {
    Suite *s = suite_create("sched_sim");
    TCase *tc = tcase_create("sim");
    tcase_add_test(tc, fcfs_hand_checked);
    tcase_add_test(tc, two_groups_hand_checked);
    tcase_add_test(tc, one_at_a_time_fcfs_vs_slo);
    tcase_add_test(tc, chunked_prefill_in_sim);
    tcase_add_test(tc, small_cache_preempts_and_finishes);
    tcase_add_test(tc, workload_file);
    tcase_add_test(tc, admission_in_the_simulator);
    tcase_add_test(tc, admission_predicts_in_the_policy_order);
    tcase_add_test(tc, slo_sizes_prefill_chunks_to_the_tpot_budget);
    tcase_add_test(tc, slo_serves_requests_that_can_still_meet_their_slo);
    tcase_add_test(tc, slo_late_request_waits_a_bounded_time);
    tcase_add_test(tc, slo_overload_keeps_the_ttft_tail_bounded);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(sim_suite)
