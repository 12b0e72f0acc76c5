/* Internal: the DiT cluster simulator: the placement policies (sched/dit_policy.h) over 1..64
 * ranks on a virtual clock, task times from the cost model (sched/dit_cost.h), jobs of classes
 * S/M/L by sequence length, deadline = arrival + alpha x T_single (the job's time on one rank).
 * The jobs come from GF-DiT's profiles or a weft-bench trace (sched/dit_workload.h).
 *
 *     wf_dit_sim_config cfg;
 *     wf_dit_sim_config_init(&cfg);                 // 8 ranks, synthetic cost, 1-step chunks
 *     wf_dit_sim_job *jobs; int n;
 *     wf_dit_workload_profile(&cfg, "short", 0.8, seed, &jobs, &n, NULL, err, sizeof err);
 *     wf_dit_sim_report rep;
 *     wf_dit_sim_run(&cfg, "elastic", jobs, n, &rep, err, sizeof err);
 *     free(jobs);
 *
 * A task on a group the job did not hold before pays the reshard of its latent (by bytes); a
 * task on a group never formed before pays cfg.cost.group_form_ms (0 with group-free
 * collectives; set it to GF-DiT's ~778 ms to see what communicators would cost).
 * Pure and single-threaded: the same inputs give the same report. */
#ifndef WF_SCHED_DIT_SIM_H
#define WF_SCHED_DIT_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "proto/base/status.h"
#include "sched/dit_cost.h"
#include "sched/dit_policy.h"

#define WF_DIT_SIM_CLASSES 3 /* S, M, L */

typedef struct wf_dit_sim_class {
    const char *name;
    int tokens, steps;
    double alpha;        /* deadline = arrival + alpha x T_single */
} wf_dit_sim_class;

typedef struct wf_dit_sim_config {
    int n_ranks, chunk_steps, max_P;
    wf_dit_cost cost;
    wf_dit_sim_class classes[WF_DIT_SIM_CLASSES];
    double latent_bytes_per_token;
    bool guided;         /* every job guided (dit_cost.h's guided modes; T_single guided too) */
} wf_dit_sim_config;

typedef struct wf_dit_sim_job {
    double arrival_ms;
    int cls;
    double alpha;        /* deadline factor; 0: the class's (a trace carries its own) */
} wf_dit_sim_job;

typedef struct wf_dit_sim_report {
    int n_jobs, n_missed;
    int cls_jobs[WF_DIT_SIM_CLASSES], cls_missed[WF_DIT_SIM_CLASSES];
    double latency_mean_ms, latency_p95_ms, latency_p99_ms, norm_latency_mean;
    double cls_latency_mean_ms[WF_DIT_SIM_CLASSES];
    double throughput_rps, utilisation, makespan_ms;
    int tasks, reshards, groups_formed;
    /* Where the latency goes (why a policy's mean is what it is): per class, the mean time a
     * job waited for ranks (its latency minus its tasks' time and the request's overhead) and
     * its mean rank-time (sum over its tasks of ranks x duration: above T_single means the
     * degrees it ran at cost more than they saved); rank-ms idle while jobs waited for ranks
     * (the policy kept ranks free), and rank-ms spent on jobs that then missed; of those, the
     * rank-ms of their tasks started before their deadlines (spent while the job could still
     * make it: what a triage that gives up early saves; the rest is served once late). */
    double cls_wait_mean_ms[WF_DIT_SIM_CLASSES], cls_rank_ms_mean[WF_DIT_SIM_CLASSES];
    double idle_waiting_rank_ms, missed_rank_ms, missed_early_rank_ms;
} wf_dit_sim_report;

/* 8 ranks, max degree 8, chunks of 1 step, GF-DiT's synthetic cost; S/M/L = 1024/4096/16384
 * tokens, 50 steps, alpha 1.5/2/6; 64 latent bytes per token. */
void wf_dit_sim_config_init(wf_dit_sim_config *cfg);
/* The job's time on one rank. */
double wf_dit_sim_single_ms(const wf_dit_sim_config *cfg, int cls);
/* Sum of the jobs' T_single over n_ranks x the span of their arrivals: the offered load (1 =
 * every rank busy at P = 1 on average); 0 when fewer than two distinct arrival times. */
double wf_dit_sim_offered_load(const wf_dit_sim_config *cfg, const wf_dit_sim_job *jobs, int n);
/* A lower bound on the mean latency (ms) of ANY policy on jobs[0..n) (sorted by arrival), so
 * that a goal such as "2x lower than the best static policy" can be checked for feasibility:
 * max(the mean of each job's fastest time alone, steps x min_P T(tokens, P); the mean latency
 * of preemptive shortest-remaining-work-first on one server of speed n_ranks, each job's work
 * being min_P P x T(tokens, P) x steps rank-ms). Why the second is a bound: a job on P ranks
 * advances at most P work units per ms (its work per step is at most P x T(P)), so every
 * cluster schedule is a schedule of one speed-n_ranks server, on which SRPT minimises the sum
 * of latencies (Schrage 1968). Reshards and group formation only add. 0 when n < 1. */
double wf_dit_sim_latency_bound_ms(const wf_dit_sim_config *cfg, const wf_dit_sim_job *jobs, int n);
/* A lower bound on the number of missed deadlines of ANY policy on jobs[0..n) (sorted by
 * arrival): the jobs that miss even alone on their fastest degree, plus the largest over the
 * windows [a, b] (a an arrival, b a job's deadline less request_ms) of the fewest jobs whose
 * least work (min_P P x T(tokens, P) x steps rank-ms) covers the excess of the work of the jobs
 * that arrive and are due inside the window over n_ranks x (b - a): those jobs, if on time, run
 * all their steps inside it, on at most n_ranks ranks. O(n^2). 0 when n < 1 (or no memory). */
int wf_dit_sim_misses_bound(const wf_dit_sim_config *cfg, const wf_dit_sim_job *jobs, int n);
/* Writes jobs[0..n) of trace `seed` as text for outside solvers (bench/elastic/bounds.py):
 * with header (once per file) "ranks R", per class "class C NAME tokens steps overhead_ms" and
 * "step C P MS" for each allowed degree; then "job SEED ARRIVAL_MS CLASS DEADLINE_MS" per job. */
void wf_dit_sim_write_jobs(FILE *f, const wf_dit_sim_config *cfg, int seed, bool header, const wf_dit_sim_job *jobs,
                           int n);
/* Runs jobs[0..n) (sorted by arrival) under policy spec. WF_EINVAL (bad policy or config),
 * WF_ENOMEM, WF_EPROTO (the policy left work waiting with every rank idle). */
wf_status wf_dit_sim_run(const wf_dit_sim_config *cfg, const char *policy, const wf_dit_sim_job *jobs, int n,
                         wf_dit_sim_report *rep, char *err, size_t errlen);

#endif
