/* Tests sched/fair.c and the "fair" policy: virtual clocks (charge / weight, no credit banked
 * while idle), Jain's index, and in the simulator (virtual time: deterministic, no wall clock)
 * a noisy virtual model sending 10x the load of three others: under "fair" each gets its
 * weighted share of served cost within 10 % while all are backlogged, and the light ones'
 * latency stays within 2x of their latency without the noisy one; FIFO co-location (fcfs)
 * gives neither (the contrast shows the scenario tests something). */
#include "check_main.h"
#include "sched/fair.h"
#include "sched/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

START_TEST(clocks_and_jain) {
    wf_fair f;
    wf_fair_init(&f);
    wf_fair_entry *a = wf_fair_join(&f, 1, 1.0, 0), *b = wf_fair_join(&f, 2, 2.0, 0);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_eq(wf_fair_join(&f, 1, 1.0, 0), a); /* one clock per virtual model */
    wf_fair_charge(&f, a, 10.0);
    wf_fair_charge(&f, b, 10.0);
    ck_assert_double_eq_tol(a->vtime, 10.0, 1e-12);
    ck_assert_double_eq_tol(b->vtime, 5.0, 1e-12); /* weight 2: half the virtual time */
    ck_assert_double_eq_tol(f.vnow, 5.0, 1e-12);
    /* b goes idle; a runs on; b comes back at the system time, without banked credit */
    wf_fair_leave(&f, b, 0);
    wf_fair_charge(&f, a, 30.0);
    wf_fair_charge(&f, a, 0.0);
    ck_assert_double_eq_tol(f.vnow, 40.0, 1e-12);
    wf_fair_join(&f, 2, 0.0, 0); /* weight <= 0 means 1 */
    ck_assert_double_eq_tol(b->vtime, 40.0, 1e-12);
    ck_assert_double_eq_tol(b->weight, 1.0, 1e-12);
    ck_assert_double_eq_tol(b->served, 10.0, 1e-12);
    ck_assert_int_eq(f.n, 2);
    wf_fair_free(&f);
    double eq[4] = {3, 3, 3, 3}, one[4] = {1, 0, 0, 0};
    ck_assert_double_eq_tol(wf_fair_jain(eq, 4), 1.0, 1e-12);
    ck_assert_double_eq_tol(wf_fair_jain(one, 4), 0.25, 1e-12);
}
END_TEST

START_TEST(seat_caps_and_activity) {
    const uint64_t ms = 1000000;
    wf_fair f;
    wf_fair_init(&f);
    /* alone: the whole batch, whatever the knee */
    wf_fair_entry *a = wf_fair_join(&f, 1, 1.0, 0);
    ck_assert_int_eq(wf_fair_seat_cap(&f, a, 64, 3.0, 0), 64);
    /* b arrives at 0, 100 and 200 ms (a mean gap of 100 ms) and its requests end at 250 ms */
    wf_fair_entry *b = wf_fair_join(&f, 2, 3.0, 0);
    wf_fair_join(&f, 2, 3.0, 100 * ms);
    wf_fair_join(&f, 2, 3.0, 200 * ms);
    ck_assert_double_eq_tol(b->gap_ns, 100.0 * ms, 1e-6);
    /* two active, weights 1 : 3, knee 3: S = min(64, 2 x 3) = 6 -> 1 and 4 seats (6/4 and
     * 18/4 rounded down); without a cost model (knee 0) S = 64 -> 16 and 48 */
    ck_assert_int_eq(wf_fair_seat_cap(&f, a, 64, 3.0, 200 * ms), 1);
    ck_assert_int_eq(wf_fair_seat_cap(&f, b, 64, 3.0, 200 * ms), 4);
    ck_assert_int_eq(wf_fair_seat_cap(&f, a, 64, 0.0, 200 * ms), 16);
    ck_assert_int_eq(wf_fair_seat_cap(&f, b, 64, 0.0, 200 * ms), 48);
    /* a knee past max_running: the share of max_running */
    ck_assert_int_eq(wf_fair_seat_cap(&f, a, 8, 100.0, 200 * ms), 2);
    for (int i = 0; i < 3; i++) wf_fair_leave(&f, b, 250 * ms);
    /* b has no request left but sends one every ~100 ms: still active for 2 gaps (200 ms) */
    ck_assert(wf_fair_active(b, 449 * ms));
    ck_assert_int_eq(wf_fair_seat_cap(&f, a, 64, 3.0, 449 * ms), 1);
    /* then idle: a alone again gets the whole batch */
    ck_assert(!wf_fair_active(b, 451 * ms));
    ck_assert_int_eq(wf_fair_seat_cap(&f, a, 64, 3.0, 451 * ms), 64);
    /* a one-off request (no gap known) is inactive as soon as it ends */
    wf_fair_entry *c = wf_fair_join(&f, 3, 1.0, 500 * ms);
    ck_assert_int_eq(wf_fair_seat_cap(&f, a, 64, 3.0, 500 * ms), 3);
    wf_fair_leave(&f, c, 510 * ms);
    ck_assert(!wf_fair_active(c, 510 * ms));
    ck_assert_int_eq(wf_fair_seat_cap(&f, a, 64, 3.0, 510 * ms), 64);
    wf_fair_free(&f);
}
END_TEST

static void cfg(wf_sim_config *c, const char *policy) {
    wf_sim_config_init(c);
    c->policy = policy;
    c->cost[0] = 2;    /* a: ms per iteration */
    c->cost[1] = 0.05; /* b: per prefill token */
    c->cost[2] = 1;    /* c: per decode token */
    c->cost[3] = 0;
    c->max_batch_tokens = 256;
    c->max_running = 8;
    c->kv_blocks = 1024;
    c->block_size = 16;
    c->n_ctx = 512;
}

/* Virtual model v sends `rate` requests per second for `secs` seconds, evenly spaced. */
static int add_load(wf_sim_request *w, int n, uint32_t v, double weight, double rate, double secs) {
    int k = (int)(rate * secs);
    for (int i = 0; i < k; i++)
        w[n++] = (wf_sim_request){.arrival_ms = (i + 0.5 * v / 4.0) * 1000.0 / rate,
                                  .prompt_len = 64, .output_len = 16, .ttft_slo_ms = 1e9,
                                  .tpot_slo_ms = 1e9, .vmodel = v, .weight = weight};
    return n;
}

static int by_arrival(const void *a, const void *b) {
    const wf_sim_request *x = a, *y = b;
    return x->arrival_ms < y->arrival_ms ? -1 : x->arrival_ms > y->arrival_ms;
}

static void run_cost(const char *policy, wf_sim_request *w, int n, wf_sim_report *r,
                     const double *cost) {
    qsort(w, (size_t)n, sizeof *w, by_arrival);
    wf_sim_config c;
    cfg(&c, policy);
    if (cost)
        for (int i = 0; i < 4; i++) c.cost[i] = cost[i];
    ck_assert_int_eq(wf_sim_run(&c, w, n, NULL, r), WF_OK);
    ck_assert_int_eq(r->n_failed, 0);
}

static void run(const char *policy, wf_sim_request *w, int n, wf_sim_report *r) {
    run_cost(policy, w, n, r, NULL);
}

/* Shares of served cost while all are backlogged, against weight shares. */
static double worst_share_error(const wf_sim_report *r, const char *label) {
    double tot = 0, wtot = 0, worst = 0;
    for (int v = 0; v < r->n_vmodels; v++) {
        tot += r->vm_served_all_busy[v];
        wtot += r->vm_weight[v];
    }
    for (int v = 0; v < r->n_vmodels; v++) {
        double share = r->vm_served_all_busy[v] / tot, want = r->vm_weight[v] / wtot;
        double e = fabs(share / want - 1.0);
        if (e > worst) worst = e;
        fprintf(stderr, "%s: vmodel %d weight %g share %.3f (weighted share %.3f)\n", label, v,
               r->vm_weight[v], share, want);
    }
    fprintf(stderr, "%s: Jain's index %.4f over %.0f ms with every virtual model backlogged\n", label,
           r->jain_all_busy, r->all_busy_ms);
    return worst;
}

/* Capacity is ~50 requests/s (8 seats, 16 decode iterations of ~10 ms each): three light
 * tenants at 20/s each and a noisy one at 200/s keep all four backlogged for 8 s. */
START_TEST(noisy_neighbour_weighted_shares) {
    enum { CAP = 5000 };
    wf_sim_request *w = malloc(CAP * sizeof *w);
    /* with weights 1,1,2,4 the heaviest is entitled to half the capacity: the light tenants
     * send 40/s (the noisy one 400/s) so that all stay backlogged */
    const double weights[2][4] = {{1, 1, 1, 1}, {1, 1, 2, 4}}, rate[2] = {20, 40};
    for (int k = 0; k < 2; k++) {
        int n = add_load(w, 0, 0, weights[k][0], 10 * rate[k], 8);
        for (uint32_t v = 1; v < 4; v++) n = add_load(w, n, v, weights[k][v], rate[k], 8);
        wf_sim_report fair, fifo;
        run("fair", w, n, &fair);
        ck_assert_int_eq(fair.n_vmodels, 4);
        ck_assert(fair.all_busy_ms > 4000);
        char label[32];
        snprintf(label, sizeof label, "fair, weights set %d", k);
        double err = worst_share_error(&fair, label);
        ck_assert_msg(err <= 0.10, "a weighted share is %.1f %% off", 100 * err);
        if (k == 0) ck_assert(fair.jain_all_busy > 0.99);
        run("fcfs", w, n, &fifo);
        snprintf(label, sizeof label, "fcfs, weights set %d", k);
        double fifo_err = worst_share_error(&fifo, label);
        ck_assert_msg(fifo_err > 0.5, "FIFO was fair (%.2f): the scenario tests nothing",
                      fifo_err);
    }
    free(w);
}
END_TEST

/* Light tenants at 8/s each fit in their share; the noisy one (80/s) overloads the rest.
 * Step cost 8 ms + 0.5 ms per decode (weights read once per step, as on a memory-bound
 * device), and the compute-bound model of the other tests (2 ms + 1 ms per decode), where a
 * full batch of 8 makes a step 5x longer than the light tenants' own: there the seat cap
 * (a / c = 2 seats per active virtual model) is what keeps their p99 within 2x (2.55x when
 * the noisy one could fill the batch). */
START_TEST(noisy_neighbour_latency) {
    const double memory_bound[4] = {8, 0.05, 0.5, 0};
    enum { CAP = 4000 };
    wf_sim_request *w = malloc(CAP * sizeof *w);
    int n = 0;
    for (uint32_t v = 1; v < 4; v++) n = add_load(w, n, v, 1, 8, 8);
    wf_sim_report alone, fair, fifo;
    run_cost("fair", w, n, &alone, memory_bound);
    int n_light = n;
    n = add_load(w, n, 0, 1, 80, 8);
    {   /* the compute-bound model */
        wf_sim_report a2, f2;
        run("fair", w, n_light, &a2);
        run("fair", w, n, &f2);
        for (int v = 1; v < 4; v++) {
            fprintf(stderr, "compute-bound steps: vmodel %d p99 e2e alone %.1f ms, fair with the "
                    "noisy one %.1f ms (%.2fx)\n", v, a2.vm_e2e_ms[v][2], f2.vm_e2e_ms[v][2],
                    f2.vm_e2e_ms[v][2] / a2.vm_e2e_ms[v][2]);
            ck_assert(f2.vm_e2e_ms[v][2] <= 2.0 * a2.vm_e2e_ms[v][2]);
        }
    }
    run_cost("fair", w, n, &fair, memory_bound);
    run_cost("fcfs", w, n, &fifo, memory_bound);
    for (int v = 1; v < 4; v++) {
        fprintf(stderr, "vmodel %d p99 e2e: alone %.1f ms, fair with the noisy one %.1f ms (%.2fx), "
               "fcfs %.1f ms (%.2fx)\n", v, alone.vm_e2e_ms[v][2], fair.vm_e2e_ms[v][2],
               fair.vm_e2e_ms[v][2] / alone.vm_e2e_ms[v][2], fifo.vm_e2e_ms[v][2],
               fifo.vm_e2e_ms[v][2] / alone.vm_e2e_ms[v][2]);
        ck_assert(fair.vm_e2e_ms[v][2] <= 2.0 * alone.vm_e2e_ms[v][2]);
        ck_assert(fifo.vm_e2e_ms[v][2] > 2.0 * alone.vm_e2e_ms[v][2]);
    }
    free(w);
}
END_TEST

static Suite *fair_suite(void) {
    Suite *s = suite_create("sched_fair");
    TCase *tc = tcase_create("fair");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, clocks_and_jain);
    tcase_add_test(tc, seat_caps_and_activity);
    tcase_add_test(tc, noisy_neighbour_weighted_shares);
    tcase_add_test(tc, noisy_neighbour_latency);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(fair_suite)
