/* Seeded random numbers and request arrival processes for weft-bench.
 *
 *     wf_loadgen_rng rng;
 *     wf_loadgen_rng_seed(&rng, 42);
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

typedef struct wf_loadgen_rng {
    uint64_t s[4]; /* xoshiro256** state */
} wf_loadgen_rng;

/* Seeds the state from one 64-bit value (splitmix64 expansion); any seed is valid. */
void wf_loadgen_rng_seed(wf_loadgen_rng *rng, uint64_t seed);
/* Next raw 64-bit value. */
uint64_t wf_loadgen_rng_next(wf_loadgen_rng *rng);
/* Uniform double in [0, 1). */
double wf_loadgen_rng_uniform(wf_loadgen_rng *rng);
/* Uniform integer in [lo, hi] (inclusive); lo when hi <= lo. */
int64_t wf_loadgen_rng_range(wf_loadgen_rng *rng, int64_t lo, int64_t hi);
/* Standard normal deviate (Box-Muller). */
double wf_loadgen_rng_normal(wf_loadgen_rng *rng);
/* Gamma(shape, scale) deviate, shape > 0 (Marsaglia-Tsang; boosted for shape < 1). */
double wf_loadgen_rng_gamma(wf_loadgen_rng *rng, double shape, double scale);

typedef struct wf_loadgen_arrival {
    wf_loadgen_rng rng;
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
