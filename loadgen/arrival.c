/* Gamma/Poisson inter-arrival gaps for weft-bench, drawn from the workload module's seeded
 * generator (sched/workload/workload.h), so a --seed gives the same gaps on every platform. */
#include "loadgen/arrival.h"

#include <math.h>

void wf_loadgen_arrival_init(wf_loadgen_arrival *arr, double rate, double burstiness,
                             uint64_t seed) {
    wf_workload_rng_seed(&arr->rng, seed);
    arr->rate = rate;
    arr->burstiness = burstiness > 0.0 ? burstiness : 1.0;
}

double wf_loadgen_arrival_next_gap(wf_loadgen_arrival *arr) {
    if (!(arr->rate > 0.0) || isinf(arr->rate)) return 0.0;
    double theta = 1.0 / (arr->rate * arr->burstiness);
    return wf_workload_rng_gamma(&arr->rng, arr->burstiness, theta);
}
