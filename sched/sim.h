/* Internal: the discrete-event simulator. It drives the scheduler's own planning core
 * (sched/core.h: the same policies, batching, KV pool, preemption) with a virtual clock; each
 * iteration lasts what the cost model predicts for the batch the core packed. With n_groups > 1
 * it runs several groups as weftd does (sched/lanes.h: routing, one core and pool per group),
 * each planning its next batch when its previous one ends on the virtual clock.
 *
 *     wf_sim_request *w; int n; char err[256];
 *     wf_sim_load_workload("trace.txt", &w, &n, err, sizeof err);
 *     wf_sim_config cfg; wf_sim_config_init(&cfg);
 *     cfg.policy = "slo";
 *     wf_sim_report rep;
 *     wf_sim_run(&cfg, w, n, NULL, &rep);      // percentiles, SLO attainment, goodput
 *     free(w);
 *
 * Workload file: one request per line, "arrival_ms prompt_len output_len ttft_slo_ms
 * tpot_slo_ms [priority]"; '#' starts a comment. Requests generate exactly output_len tokens.
 * Pure and single-threaded: the same input gives the same report. */
#ifndef WF_SCHED_SIM_H
#define WF_SCHED_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/base/status.h"

typedef struct wf_sim_request {
    double arrival_ms;
    int prompt_len, output_len;
    double ttft_slo_ms, tpot_slo_ms;
    int priority;
} wf_sim_request;

typedef struct wf_sim_config {
    const char *policy;     /* fcfs, priority, slo */
    double cost[4];         /* a, b, c, d (ms) */
    int max_batch_tokens, max_running, n_ctx;
    int kv_blocks, block_size;
    bool prefix_cache;
    double admission_factor; /* > 0: admission control as weftd's submit (wf_core_admit) */
    double prefill_stretch;  /* wf_core_config.prefill_stretch (default: weftd's) */
    int queue_size;          /* with admission: waiting requests before WF_EFULL */
    int n_groups;            /* device groups, each with its own kv_blocks and batch (default 1) */
} wf_sim_config;

/* Per request (index as in the workload). */
typedef struct wf_sim_outcome {
    double ttft_ms, tpot_ms, e2e_ms; /* tpot 0 with fewer than 2 tokens */
    int generated;
    int preemptions;
    bool met_slo;                    /* ttft <= slo and tpot <= slo */
    bool failed;
    bool rejected;                   /* refused by admission control (counts as missed) */
} wf_sim_outcome;

typedef struct wf_sim_report {
    int n_requests, n_failed, n_rejected;
    double ttft_ms[3], tpot_ms[3], e2e_ms[3]; /* p50, p90, p99 (nearest rank) */
    double slo_attainment;                    /* fraction of ALL requests meeting both SLOs */
    double goodput_rps;                       /* SLO-meeting requests per second of makespan */
    double throughput_tok_s;                  /* generated tokens per second of makespan */
    double makespan_ms;                       /* first arrival to last finish */
    uint64_t iterations, preemptions;
} wf_sim_report;

void wf_sim_config_init(wf_sim_config *cfg);
/* WF_ENOTFOUND, WF_EFORMAT (err names the line), WF_ENOMEM. *out is malloc'ed, sorted by
 * arrival (stable). */
wf_status wf_sim_load_workload(const char *path, wf_sim_request **out, int *n, char *err,
                               int errlen);
/* Parses one workload line; returns 1 for a request, 0 for blank/comment, -1 if malformed. */
int wf_sim_parse_line(const char *line, wf_sim_request *out);
/* outcomes (may be NULL) has n entries. WF_EINVAL (bad config: err-free, see log), WF_ENOMEM. */
wf_status wf_sim_run(const wf_sim_config *cfg, const wf_sim_request *reqs, int n,
                     wf_sim_outcome *outcomes, wf_sim_report *report);

#endif
