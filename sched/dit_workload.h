/* Internal: the DiT simulator's workloads, from the same sources weft-bench uses, so that one
 * set of files defines GF-DiT's profiles and a real run and the simulator see the same requests.
 *
 *     wf_dit_sim_job *jobs; int n;
 *     wf_workload_profile used;                       // the phases as scaled (optional)
 *     if (wf_dit_workload_profile(&cfg, "short", 0.8, seed, &jobs, &n, &used, err, sizeof err))
 *         puts(err);
 *     // or the requests of a `weft-bench --trace-out` file, times rescaled to 80% load:
 *     wf_dit_workload_trace(&cfg, "trace.json", 0.8, &jobs, &n, NULL, err, sizeof err);
 *
 * Profiles are sched/workload/workload.h's: a built-in name (sched/workload/profiles/NAME.profile,
 * compiled in) or a file path, parsed and sampled by the very code weft-bench runs (same seed, same arrival
 * times and classes). Their classes map to the simulator's by name (S, M, L); the simulator keeps
 * its own sizes and steps (cfg->classes: GF-DiT's synthetic S/M/L) and its alphas.
 *
 * Load. GF-DiT's rates are requests per minute for its video cluster; here every phase's rate is
 * multiplied by one factor so that the expected offered load, the work (sum of T_single over the
 * requests, T_single from the simulator's cost model) over n_ranks x the span of the phases that
 * have arrivals, equals `load`: the phases keep their relative rates and mixes, and the rates
 * grow linearly with the rank count (16 ranks at load 1 get twice the requests of 8). load 1
 * keeps every rank busy at P = 1 on average. This is weft-bench's --target-load with
 * --servers = n_ranks.
 *
 * Traces (GF-DiT's workload JSON, as `weft-bench --trace-out` writes it): each request keeps its
 * arrival order, class (by name) and its class's alpha as the trace gives it ((deadline -
 * arrival) / profiled_optimal_latency_ms; the simulator's alpha when the trace has no T_single;
 * the deadline itself is alpha x the simulator's T_single); with load > 0
 * every arrival time is multiplied by one factor so that the trace's offered load on the
 * simulated cluster (wf_dit_sim_offered_load) is `load` (*time_scale says which); with load 0 the
 * trace's clock is kept. */
#ifndef WF_SCHED_DIT_WORKLOAD_H
#define WF_SCHED_DIT_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "sched/workload/workload.h"
#include "proto/base/status.h"
#include "sched/dit_sim.h"

/* Samples profile name_or_path at `load` (> 0) with `seed`. *jobs is malloc'ed; *used (if not
 * NULL) gets the profile with the simulator's T_single and the scaled rates. WF_ENOTFOUND,
 * WF_EFORMAT (a bad file, a class the simulator lacks), WF_EINVAL (load), WF_ENOMEM. */
wf_status wf_dit_workload_profile(const wf_dit_sim_config *cfg, const char *name_or_path, double load,
                                  uint64_t seed, wf_dit_sim_job **jobs, int *n, wf_workload_profile *used,
                                  char *err, size_t errlen);
/* Reads trace `path` (see above). load 0 keeps its clock. *time_scale (if not NULL) gets the
 * factor applied to its times. WF_ENOTFOUND, WF_EFORMAT, WF_EINVAL, WF_ENOMEM. */
wf_status wf_dit_workload_trace(const wf_dit_sim_config *cfg, const char *path, double load,
                                wf_dit_sim_job **jobs, int *n, double *time_scale, char *err, size_t errlen);

#endif
