/* sched/dit_sim.c, sched/dit_workload.c: the DiT cluster simulator is deterministic per seed
 * (same trace, same report) and differs across seeds; a request alone takes exactly what the
 * cost model says (static:1: T_single; elastic: the fastest degree, chunk after chunk on the
 * same ranks, plus one group formation when communicators are charged); its workloads are
 * GF-DiT's profiles as sched/workload/profiles/NAME.profile define them (the same arrivals weft-bench
 * samples, phase by phase, rates scaled to the load and the rank count) or a weft-bench trace
 * replayed request for request; the report's latency breakdown (waits, rank-time per job,
 * ranks idle while jobs wait, rank-time on misses) is what hand-made runs give; bad policies,
 * profiles and jobs are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "sched/dit_sim.h"
#include "sched/dit_workload.h"

static char err[256];

static void run(const wf_dit_sim_config *cfg, const char *pol, const wf_dit_sim_job *jobs, int n,
                wf_dit_sim_report *r) {
    ck_assert_msg(wf_dit_sim_run(cfg, pol, jobs, n, r, err, sizeof err) == WF_OK, "%s", err);
}

START_TEST(test_deterministic_per_seed) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    cfg.n_ranks = 16;
    /* short (10 min) rather than tridentserve (60 min): quick under the sanitizers */
    wf_dit_sim_job *a, *b, *c;
    int na, nb, nc;
    ck_assert_int_eq(wf_dit_workload_profile(&cfg, "short", 1.2, 7, &a, &na, NULL, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_dit_workload_profile(&cfg, "short", 1.2, 7, &b, &nb, NULL, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_dit_workload_profile(&cfg, "short", 1.2, 8, &c, &nc, NULL, err, sizeof err), WF_OK);
    ck_assert_int_gt(na, 50);
    ck_assert_int_eq(na, nb);
    ck_assert(!memcmp(a, b, sizeof *a * (size_t)na));
    ck_assert(na != nc || memcmp(a, c, sizeof *a * (size_t)na) != 0);
    const char *pols[] = {"elastic", "rssp", "static:2", "elastic"};
    for (int p = 0; p < 4; p++) {
        cfg.guided = p == 3; /* guided images: CFG or Ulysses on 2 ranks, cheap growth */
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

/* Where the latency goes: two S jobs at once. static:1 on one rank: the second waits the
 * first's 6774 ms, each uses T_single of rank-time, no rank idles; the second ends at 2 x
 * T_single, past its 1.5 x, so its rank-time counts as spent on a miss. rssp on 3 ranks: each
 * takes 2 ranks (efficiency 0.72 >= 0.7; 3 is not an allowed degree), so the second waits
 * 4721.6 ms with the third rank idle, each costs 2 x 4721.6 rank-ms and both make it; with
 * deadlines at T_single the second misses. */
START_TEST(test_latency_breakdown) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    cfg.n_ranks = 1;
    wf_dit_sim_job two[2] = {{.arrival_ms = 0, .cls = 0}, {.arrival_ms = 0, .cls = 0}};
    wf_dit_sim_report r;
    double t1 = 50 * 0.1323 * 1024, t2 = 50 * (0.1323 * 1024 / 1.82 + 20);
    run(&cfg, "static:1", two, 2, &r);
    ck_assert_double_eq_tol(r.cls_wait_mean_ms[0], t1 / 2, 1e-6);
    ck_assert_double_eq_tol(r.cls_rank_ms_mean[0], t1, 1e-6);
    ck_assert_double_eq_tol(r.idle_waiting_rank_ms, 0, 1e-9);
    ck_assert_int_eq(r.n_missed, 1);
    ck_assert_double_eq_tol(r.missed_rank_ms, t1, 1e-6);
    ck_assert_double_eq_tol(r.missed_early_rank_ms, t1, 1e-6); /* it started at t1 < 1.5 x t1 */
    cfg.n_ranks = 3;
    run(&cfg, "rssp", two, 2, &r);
    ck_assert_double_eq_tol(r.cls_wait_mean_ms[0], t2 / 2, 1e-6);
    ck_assert_double_eq_tol(r.cls_rank_ms_mean[0], 2 * t2, 1e-6);
    ck_assert_double_eq_tol(r.idle_waiting_rank_ms, t2, 1e-6);
    ck_assert_int_eq(r.n_missed, 0);
    ck_assert_double_eq_tol(r.missed_rank_ms, 0, 1e-9);
    cfg.classes[0].alpha = 1.0;
    run(&cfg, "rssp", two, 2, &r);
    ck_assert_int_eq(r.n_missed, 1);
    ck_assert_double_eq_tol(r.missed_rank_ms, 2 * t2, 1e-6);
    ck_assert_double_eq_tol(r.missed_early_rank_ms, 2 * t2, 1e-6); /* started at t2 < t1 */
    cfg.classes[0].alpha = 0.5; /* both due before they could end: the second starts late */
    run(&cfg, "rssp", two, 2, &r);
    ck_assert_int_eq(r.n_missed, 2);
    ck_assert_double_eq_tol(r.missed_rank_ms, 4 * t2, 1e-6);
    ck_assert_double_eq_tol(r.missed_early_rank_ms, 2 * t2, 1e-6);
}
END_TEST

/* Guided images: T_single is two forwards on one rank; alone under elastic a guided S runs on
 * 2 ranks in guidance-parallel mode (faster than Ulysses in the synthetic model); static:1 on
 * one rank. */
START_TEST(test_guided_single_request) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    cfg.guided = true;
    wf_dit_sim_job one = {.arrival_ms = 0, .cls = 0};
    wf_dit_sim_report r;
    double a = 0.1323 * 1024, x = 0.05 + 64.0 * 1024 / 1048576 * 0.1;
    ck_assert_double_eq_tol(wf_dit_sim_single_ms(&cfg, 0), 50 * 2 * a, 1e-6);
    run(&cfg, "static:1", &one, 1, &r);
    ck_assert_double_eq_tol(r.latency_mean_ms, 50 * 2 * a, 1e-6);
    run(&cfg, "elastic", &one, 1, &r);
    ck_assert_double_eq_tol(r.latency_mean_ms, 50 * (a + x), 1e-6);
    ck_assert_double_eq_tol(wf_dit_sim_latency_bound_ms(&cfg, &one, 1), 50 * (a + x), 1e-6);
    ck_assert_double_eq_tol(r.norm_latency_mean, (a + x) / (2 * a), 1e-9);
}
END_TEST

/* The daemon's overheads in the model: a request alone pays one chunk_ms per chunk of
 * chunk_steps steps (static:1 runs its 50 steps as one task, still 50 daemon chunks) and
 * request_ms once; T_single and the deadline include them; a cost file names them. */
START_TEST(test_overheads) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    cfg.cost.chunk_ms = 2;
    cfg.cost.request_ms = 30;
    wf_dit_sim_job one = {.arrival_ms = 0, .cls = 0};
    wf_dit_sim_report r;
    double t1 = 0.1323 * 1024, p2 = 0.1323 * 1024 / 1.82 + 20;
    run(&cfg, "static:1", &one, 1, &r);
    ck_assert_double_eq_tol(r.latency_mean_ms, 50 * (t1 + 2) + 30, 1e-6);
    ck_assert_double_eq_tol(wf_dit_sim_single_ms(&cfg, 0), 50 * (t1 + 2) + 30, 1e-6);
    run(&cfg, "elastic", &one, 1, &r);
    ck_assert_double_eq_tol(r.latency_mean_ms, 50 * (p2 + 2) + 30, 1e-6);
    ck_assert_double_eq_tol(wf_dit_sim_latency_bound_ms(&cfg, &one, 1), 50 * (p2 + 2) + 30, 1e-6);
    cfg.chunk_steps = 5; /* 10 chunks */
    run(&cfg, "static:1", &one, 1, &r);
    ck_assert_double_eq_tol(r.latency_mean_ms, 50 * t1 + 10 * 2 + 30, 1e-6);
    /* the file form */
    char path[] = "/tmp/weft-dit-cost-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "16 1 0.3\nchunk 0.15 # per chunk\nrequest 0.4\n");
    fclose(f);
    wf_dit_cost c;
    ck_assert_int_eq(wf_dit_cost_load(&c, path, err, sizeof err), WF_OK);
    ck_assert_double_eq_tol(c.chunk_ms, 0.15, 1e-12);
    ck_assert_double_eq_tol(c.request_ms, 0.4, 1e-12);
    f = fopen(path, "w");
    fprintf(f, "16 1 0.3\nsetup 3\n");
    fclose(f);
    ck_assert_int_eq(wf_dit_cost_load(&c, path, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, ":2: expected \"chunk MS\" or \"request MS\""));
    unlink(path);
}
END_TEST

/* The lower bound on any policy's mean latency: a job alone cannot beat its fastest degree
 * (elastic reaches it: 2 ranks for S); two jobs on one rank cannot beat serving one after the
 * other (static:1 reaches it); on a profile's trace no policy goes below it. */
START_TEST(test_latency_bound) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    wf_dit_sim_job one = {.arrival_ms = 1000, .cls = 0};
    wf_dit_sim_report r;
    double p2 = 50 * (0.1323 * 1024 / 1.82 + 20), t1 = 50 * 0.1323 * 1024;
    ck_assert_double_eq_tol(wf_dit_sim_latency_bound_ms(&cfg, &one, 1), p2, 1e-6);
    run(&cfg, "elastic", &one, 1, &r);
    ck_assert_double_eq_tol(r.latency_mean_ms, p2, 1e-6);
    ck_assert_double_eq_tol(wf_dit_sim_latency_bound_ms(&cfg, &one, 0), 0, 1e-12);
    cfg.n_ranks = 1;
    cfg.max_P = 1;
    wf_dit_sim_job two[2] = {{.arrival_ms = 0, .cls = 0}, {.arrival_ms = 0, .cls = 0}};
    ck_assert_double_eq_tol(wf_dit_sim_latency_bound_ms(&cfg, two, 2), (t1 + 2 * t1) / 2, 1e-6);
    run(&cfg, "static:1", two, 2, &r);
    ck_assert_double_eq_tol(r.latency_mean_ms, (t1 + 2 * t1) / 2, 1e-6);
    /* a later, shorter arrival preempts in the bound (SRPT): L at 0, S at 1000 on one rank */
    two[0].cls = 2;
    two[1] = (wf_dit_sim_job){.arrival_ms = 1000, .cls = 0};
    double tl = 50 * 0.1323 * 16384;
    ck_assert_double_eq_tol(wf_dit_sim_latency_bound_ms(&cfg, two, 2), (t1 + (tl + t1)) / 2, 1e-6);
    wf_dit_sim_config_init(&cfg);
    cfg.n_ranks = 16;
    wf_dit_sim_job *jobs;
    int n;
    ck_assert_int_eq(wf_dit_workload_profile(&cfg, "short", 1.2, 3, &jobs, &n, NULL, err, sizeof err), WF_OK);
    double bound = wf_dit_sim_latency_bound_ms(&cfg, jobs, n);
    ck_assert(bound > 0);
    const char *pols[] = {"elastic", "rssp", "static:1", "static:8"};
    for (int p = 0; p < 4; p++) {
        run(&cfg, pols[p], jobs, n, &r);
        ck_assert_msg(r.latency_mean_ms >= bound, "%s: mean %g below the bound %g", pols[p], r.latency_mean_ms, bound);
    }
    free(jobs);
}
END_TEST

/* The lower bound on any policy's misses: three S jobs at once on one rank, due at 1.5 x
 * T_single: only one can make it (bound 2, and static:1 and elastic miss exactly 2); a job
 * due before its fastest time alone counts anyway; on profiles' traces (overloaded
 * tridentserve among them) no policy misses fewer. */
START_TEST(test_misses_bound) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    cfg.n_ranks = 1;
    cfg.max_P = 1;
    wf_dit_sim_job three[3] = {{.cls = 0}, {.cls = 0}, {.cls = 0}};
    wf_dit_sim_report r;
    ck_assert_int_eq(wf_dit_sim_misses_bound(&cfg, three, 1), 0);
    ck_assert_int_eq(wf_dit_sim_misses_bound(&cfg, three, 0), 0);
    ck_assert_int_eq(wf_dit_sim_misses_bound(&cfg, three, 3), 2);
    const char *one_rank[] = {"static:1", "elastic"};
    for (int p = 0; p < 2; p++) {
        run(&cfg, one_rank[p], three, 3, &r);
        ck_assert_int_eq(r.n_missed, 2);
    }
    three[0].alpha = 0.5; /* due before it could end alone */
    ck_assert_int_eq(wf_dit_sim_misses_bound(&cfg, three, 1), 1);
    const char *pols[] = {"elastic", "rssp", "static:1", "gf-fcfs:1"};
    const char *profiles[] = {"short", "tridentserve"};
    for (int k = 0; k < 2; k++) {
        wf_dit_sim_config_init(&cfg);
        wf_dit_sim_job *jobs;
        int n;
        ck_assert_int_eq(wf_dit_workload_profile(&cfg, profiles[k], 1.2, 1, &jobs, &n, NULL, err, sizeof err), WF_OK);
        int bound = wf_dit_sim_misses_bound(&cfg, jobs, n);
        ck_assert(k == 0 || bound > 0);
        for (int p = 0; p < 4; p++) {
            run(&cfg, pols[p], jobs, n, &r);
            ck_assert_msg(r.n_missed >= bound, "%s: %d misses, below the bound %d", pols[p], r.n_missed, bound);
        }
        free(jobs);
    }
}
END_TEST

/* Which phase of p holds time t (seconds), or -1. */
static int phase_of(const wf_workload_profile *p, double t) {
    for (size_t i = 0; i < p->n_phases; i++)
        if (t >= p->phases[i].start_s && t < p->phases[i].end_s) return (int)i;
    return -1;
}

/* --jobs-out's text: the header once (ranks, each class and its step time per allowed degree,
 * as the cost model gives them), then one line per job that reads back as the job. */
START_TEST(test_write_jobs) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    wf_dit_sim_job jobs[2] = {{.arrival_ms = 0, .cls = 0}, {.arrival_ms = 1500.25, .cls = 2, .alpha = 3}};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    wf_dit_sim_write_jobs(f, &cfg, 1, true, jobs, 2);
    wf_dit_sim_write_jobs(f, &cfg, 2, false, jobs, 1);
    ck_assert_int_eq(fclose(f), 0);
    int ranks = 0, n_class = 0, n_step = 0, n_job = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        int c, P, tokens, steps, seed;
        char name[8];
        double ms, arrival, deadline;
        if (sscanf(line, "ranks %d", &ranks) == 1) continue;
        if (sscanf(line, "class %d %7s %d %d %lf", &c, name, &tokens, &steps, &ms) == 5) {
            ck_assert_str_eq(name, cfg.classes[c].name);
            ck_assert_int_eq(tokens, cfg.classes[c].tokens);
            n_class++;
        } else if (sscanf(line, "step %d %d %lf", &c, &P, &ms) == 3) {
            ck_assert_double_eq_tol(ms, wf_dit_cost_step_ms(&cfg.cost, cfg.classes[c].tokens, P), 1e-5);
            n_step++;
        } else {
            ck_assert_int_eq(sscanf(line, "job %d %lf %d %lf", &seed, &arrival, &c, &deadline), 4);
            const wf_dit_sim_job *j = &jobs[n_job < 2 ? n_job : 0];
            ck_assert_int_eq(seed, n_job < 2 ? 1 : 2);
            ck_assert_double_eq_tol(arrival, j->arrival_ms, 1e-6);
            ck_assert_int_eq(c, j->cls);
            double alpha = j->alpha > 0 ? j->alpha : cfg.classes[c].alpha;
            ck_assert_double_eq_tol(deadline, arrival + alpha * wf_dit_sim_single_ms(&cfg, c), 1e-5);
            n_job++;
        }
    }
    free(text);
    ck_assert_int_eq(ranks, 8);
    ck_assert_int_eq(n_class, 3);
    ck_assert_int_eq(n_step, 12); /* the synthetic model's degrees 1, 2, 4, 8 for each class */
    ck_assert_int_eq(n_job, 3);
}
END_TEST

START_TEST(test_workload_profiles) {
    /* every built-in profile, at 8 and 16 ranks: the phases are the file's (start, end, mix,
     * rates in the file's proportions), the jobs are exactly weft-bench's samples for the seed,
     * each in a phase with arrivals and of a class of that phase's mix, and the offered load is
     * the one asked */
    const char *names[] = {"short", "tridentserve", "foreground_burst"};
    for (int k = 0; k < 3; k++) {
        wf_workload_profile file;
        ck_assert_int_eq(wf_workload_profile_load(names[k], &file, err, sizeof err), WF_OK);
        int n8 = 0;
        for (int ranks = 8; ranks <= 16; ranks += 8) {
            wf_dit_sim_config cfg;
            wf_dit_sim_config_init(&cfg);
            cfg.n_ranks = ranks;
            wf_workload_profile used;
            wf_dit_sim_job *j;
            int n;
            ck_assert_msg(wf_dit_workload_profile(&cfg, names[k], 0.9, 5, &j, &n, &used, err, sizeof err) == WF_OK,
                          "%s", err);
            ck_assert_uint_eq(used.n_phases, file.n_phases);
            double scale = 0;
            for (size_t i = 0; i < file.n_phases; i++) {
                const wf_workload_phase *f = &file.phases[i], *u = &used.phases[i];
                ck_assert_str_eq(u->name, f->name);
                ck_assert_double_eq(u->start_s, f->start_s);
                ck_assert_double_eq(u->end_s, f->end_s);
                for (size_t c = 0; c < file.n_classes; c++) ck_assert_double_eq(u->mix[c], f->mix[c]);
                if (f->rate == 0) {
                    ck_assert_double_eq(u->rate, 0);
                    continue;
                }
                if (scale == 0) scale = u->rate / f->rate;
                ck_assert_double_eq_tol(u->rate / f->rate, scale, 1e-9 * scale);
            }
            ck_assert(scale > 0);
            /* the same arrivals as weft-bench's sampler gives for this profile and seed */
            double *at = malloc(sizeof *at * (size_t)(n + 1));
            int *cls = malloc(sizeof *cls * (size_t)(n + 1));
            ck_assert_uint_eq(wf_workload_profile_sample(&used, 5, (size_t)n + 1, at, cls), (size_t)n);
            int per_phase[WF_WORKLOAD_MAX_PHASES] = {0};
            for (int i = 0; i < n; i++) {
                ck_assert_double_eq_tol(j[i].arrival_ms, at[i] * 1000, 1e-9);
                ck_assert_str_eq(cfg.classes[j[i].cls].name, used.classes[cls[i]].name);
                ck_assert(j[i].alpha == 0);
                if (i) ck_assert(j[i].arrival_ms >= j[i - 1].arrival_ms);
                int ph = phase_of(&file, at[i]);
                ck_assert_int_ge(ph, 0);
                ck_assert(file.phases[ph].rate > 0);
                ck_assert(file.phases[ph].mix[cls[i]] > 0);
                per_phase[ph]++;
            }
            /* each loaded phase holds its expected share (Poisson: within 5 sigma + 3) */
            for (size_t i = 0; i < used.n_phases; i++) {
                double e = used.phases[i].rate * (used.phases[i].end_s - used.phases[i].start_s);
                ck_assert_msg(fabs(per_phase[i] - e) <= 5 * sqrt(e) + 3, "%s phase %zu: %d jobs, expected %.1f",
                              names[k], i, per_phase[i], e);
            }
            /* expected offered load = 0.9 (the sampled one is close) */
            /* used carries the simulator's T_single */
            ck_assert_double_eq_tol(wf_workload_profile_offered_load(&used, ranks), 0.9, 1e-9);
            ck_assert_double_eq_tol(wf_dit_sim_offered_load(&cfg, j, n), 0.9, 0.3);
            if (ranks == 8) n8 = n;
            else ck_assert(n > 1.5 * n8 && n < 2.5 * n8); /* rates grow with the rank count */
            free(at);
            free(cls);
            free(j);
        }
    }
    /* GF-DiT's short: four phases at 0.8, 1.5, 2.5 and 0 requests/min */
    wf_workload_profile sh;
    ck_assert_int_eq(wf_workload_profile_load("short", &sh, err, sizeof err), WF_OK);
    ck_assert_uint_eq(sh.n_phases, 4);
    ck_assert_double_eq_tol(sh.phases[0].rate * 60, 0.8, 1e-12);
    ck_assert_double_eq_tol(sh.phases[1].rate * 60, 1.5, 1e-12);
    ck_assert_double_eq_tol(sh.phases[2].rate * 60, 2.5, 1e-12);
    ck_assert_double_eq(sh.phases[3].rate, 0);
    /* a profile file by path; a class the simulator lacks and a bad load are refused */
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    char path[] = "/tmp/weft_dit_sim_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("phase a 0 100 1/s S=1\nphase b 100 200 1/s L=1\n", f);
    fclose(f);
    wf_dit_sim_job *j;
    int n;
    ck_assert_int_eq(wf_dit_workload_profile(&cfg, path, 1.0, 1, &j, &n, NULL, err, sizeof err), WF_OK);
    for (int i = 0; i < n; i++) ck_assert_int_eq(j[i].cls, j[i].arrival_ms < 100000 ? 0 : 2);
    free(j);
    f = fopen(path, "w");
    fputs("class XL 64x64 steps=50\nphase a 0 100 1/s XL=1\n", f);
    fclose(f);
    ck_assert_int_eq(wf_dit_workload_profile(&cfg, path, 1.0, 1, &j, &n, NULL, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "'XL'"));
    unlink(path);
    ck_assert_int_eq(wf_dit_workload_profile(&cfg, "steady", 1.0, 1, &j, &n, NULL, err, sizeof err), WF_ENOTFOUND);
    ck_assert_int_eq(wf_dit_workload_profile(&cfg, "short", 0, 3, &j, &n, NULL, err, sizeof err), WF_EINVAL);
    wf_dit_sim_report r;
    wf_dit_sim_job one = {.arrival_ms = 0, .cls = 0};
    ck_assert_int_eq(wf_dit_sim_run(&cfg, "static:16", &one, 1, &r, err, sizeof err), WF_EINVAL);
    wf_dit_sim_job bad = {.arrival_ms = 0, .cls = 3};
    ck_assert_int_eq(wf_dit_sim_run(&cfg, "elastic", &bad, 1, &r, err, sizeof err), WF_EINVAL);
    cfg.n_ranks = 65;
    ck_assert_int_eq(wf_dit_sim_run(&cfg, "elastic", &one, 1, &r, err, sizeof err), WF_EINVAL);
}
END_TEST

START_TEST(test_trace_replay) {
    /* a trace as weft-bench --trace-out writes it (its classes: 8x8 at 5/15/45 steps, real
     * T_single) replays request for request: order, class, alpha; the clock kept or rescaled */
    wf_workload_profile p;
    ck_assert_int_eq(wf_workload_profile_load("foreground_burst", &p, err, sizeof err), WF_OK);
    double ts[3] = {40, 110, 300};
    for (int c = 0; c < 3; c++) p.classes[c].t_single_ms = ts[c];
    wf_workload_profile_scale_time(&p, 60.0 / wf_workload_profile_end_s(&p));
    wf_workload_profile_scale_rate(&p, 0.8 / wf_workload_profile_offered_load(&p, 1));
    enum { MAX = 4096 };
    static double at[MAX];
    static int cls[MAX];
    static int64_t seeds[MAX];
    size_t m = wf_workload_profile_sample(&p, 11, MAX, at, cls);
    ck_assert(m > 20 && m < MAX);
    for (size_t i = 0; i < m; i++) seeds[i] = (int64_t)i;
    char path[] = "/tmp/weft_dit_trace_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    wf_workload_trace tr = {.n = m, .arrival_s = at, .class_idx = cls, .seed = seeds};
    ck_assert_int_eq(wf_workload_trace_write(path, &p, 1.0, 11, &tr, err, sizeof err), WF_OK);
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    wf_dit_sim_job *j, *k;
    int n, nk;
    double scale;
    ck_assert_msg(wf_dit_workload_trace(&cfg, path, 0, &j, &n, &scale, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_int_eq(n, (int)m);
    ck_assert_double_eq(scale, 1);
    for (int i = 0; i < n; i++) {
        ck_assert_double_eq_tol(j[i].arrival_ms, at[i] * 1000, 1e-6);
        ck_assert_str_eq(cfg.classes[j[i].cls].name, p.classes[cls[i]].name);
        ck_assert_double_eq_tol(j[i].alpha, p.classes[cls[i]].alpha, 1e-9);
    }
    ck_assert_int_eq(wf_dit_workload_trace(&cfg, path, 0.7, &k, &nk, &scale, err, sizeof err), WF_OK);
    ck_assert_int_eq(nk, n);
    ck_assert(scale > 1); /* GF-DiT's S/M/L are far slower than weft-bench's 8x8 images */
    ck_assert_double_eq_tol(wf_dit_sim_offered_load(&cfg, k, nk), 0.7, 1e-9);
    for (int i = 0; i < n; i++) {
        ck_assert_double_eq_tol(k[i].arrival_ms, j[i].arrival_ms * scale, 1e-6 * k[i].arrival_ms + 1e-9);
        ck_assert_int_eq(k[i].cls, j[i].cls);
    }
    /* the replay runs, and a per-request alpha sets the deadline */
    wf_dit_sim_report r1, r2;
    run(&cfg, "elastic", k, nk, &r1);
    run(&cfg, "elastic", k, nk, &r2);
    ck_assert(!memcmp(&r1, &r2, sizeof r1));
    ck_assert_int_eq(r1.n_jobs, n);
    wf_dit_sim_job tight = {.arrival_ms = 0, .cls = 0, .alpha = 0.5};
    run(&cfg, "static:1", &tight, 1, &r1);
    ck_assert_int_eq(r1.n_missed, 1);
    tight.alpha = 1.01;
    run(&cfg, "static:1", &tight, 1, &r1);
    ck_assert_int_eq(r1.n_missed, 0);
    free(j);
    free(k);
    /* a broken trace names the problem */
    FILE *f = fopen(path, "w");
    fputs("{\"requests\": [{\"request_class\": \"S\", \"arrival_ms\": -1}]}", f);
    fclose(f);
    ck_assert_int_eq(wf_dit_workload_trace(&cfg, path, 0, &j, &n, NULL, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "request 0"));
    /* without T_single in the trace, the simulator's alphas; a class it lacks is refused */
    f = fopen(path, "w");
    fputs("{\"requests\": [{\"request_class\": \"L\", \"arrival_ms\": 5, \"width\": 8, \"height\": 8, "
          "\"num_steps\": 45}]}", f);
    fclose(f);
    ck_assert_msg(wf_dit_workload_trace(&cfg, path, 0, &j, &n, NULL, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(j[0].cls, 2);
    ck_assert(j[0].alpha == 0);
    ck_assert_double_eq_tol(j[0].arrival_ms, 5, 1e-9);
    free(j);
    f = fopen(path, "w");
    fputs("{\"requests\": [{\"request_class\": \"XL\", \"arrival_ms\": 5, \"width\": 8, \"height\": 8, "
          "\"num_steps\": 45}]}", f);
    fclose(f);
    ck_assert_int_eq(wf_dit_workload_trace(&cfg, path, 0, &j, &n, NULL, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "'XL'"));
    unlink(path);
    ck_assert_int_eq(wf_dit_workload_trace(&cfg, "/nonexistent/trace.json", 0, &j, &n, NULL, err, sizeof err),
                     WF_ENOTFOUND);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("dit_sim");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_deterministic_per_seed);
    tcase_add_test(tc, test_single_request_latency);
    tcase_add_test(tc, test_latency_bound);
    tcase_add_test(tc, test_misses_bound);
    tcase_add_test(tc, test_write_jobs);
    tcase_add_test(tc, test_latency_breakdown);
    tcase_add_test(tc, test_overheads);
    tcase_add_test(tc, test_guided_single_request);
    tcase_add_test(tc, test_workload_profiles);
    tcase_add_test(tc, test_trace_replay);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(suite)
