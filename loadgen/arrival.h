/* Request arrival processes for weft-bench (the seeded generator is sched/workload/workload.h's).
 *
 *     wf_loadgen_arrival arr;
 *     wf_loadgen_arrival_init(&arr, 10.0, 1.0, 42);   // Poisson, 10 req/s
 *     double gap_s = wf_loadgen_arrival_next_gap(&arr); // seconds until the next request
 *
 * Gaps follow vLLM benchmark_serving: gamma(shape = burstiness, scale = 1 / (rate *
 * burstiness)), so the mean gap is 1/rate whatever the burstiness and burstiness 1 is a Poisson
 * process (exponential gaps); < 1 is burstier, > 1 more regular (variance = mean^2/shape).
 * Everything here is deterministic given the seed, allocation-free, and not thread-safe (one
 * generator per thread). */
#ifndef WF_LOADGEN_ARRIVAL_H
#define WF_LOADGEN_ARRIVAL_H

#include <stdint.h>

#include "sched/workload/workload.h"

typedef struct wf_loadgen_arrival {
    wf_workload_rng rng;
    double rate;       /* requests per second; <= 0 or infinite = all at once */
    double burstiness; /* gamma shape; 1 = Poisson */
} wf_loadgen_arrival;

/* rate in requests/s (INFINITY or <= 0: every gap is 0); burstiness > 0 (values <= 0 are
 * treated as 1). */
void wf_loadgen_arrival_init(wf_loadgen_arrival *arr, double rate, double burstiness,
                             uint64_t seed);
/* The gap in seconds between one request and the next. */
double wf_loadgen_arrival_next_gap(wf_loadgen_arrival *arr);

#endif
