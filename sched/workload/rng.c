/* The workloads' seeded PRNG (xoshiro256** seeded by splitmix64) and its deviates. The
 * generator is ours, not libc's, so a seed gives the same arrivals and classes on every
 * platform, in weft-bench and in the simulators alike. */
#include "sched/workload/workload.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void wf_workload_rng_seed(wf_workload_rng *rng, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

uint64_t wf_workload_rng_next(wf_workload_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double wf_workload_rng_uniform(wf_workload_rng *rng) {
    return (double)(wf_workload_rng_next(rng) >> 11) * 0x1.0p-53;
}

int64_t wf_workload_rng_range(wf_workload_rng *rng, int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    uint64_t span = (uint64_t)(hi - lo) + 1;
    /* Rejection keeps the draw unbiased for spans that do not divide 2^64. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t v;
    do v = wf_workload_rng_next(rng);
    while (v >= limit);
    return lo + (int64_t)(v % span);
}

double wf_workload_rng_normal(wf_workload_rng *rng) {
    double u1 = 1.0 - wf_workload_rng_uniform(rng); /* (0, 1]: log is finite */
    double u2 = wf_workload_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double wf_workload_rng_gamma(wf_workload_rng *rng, double shape, double scale) {
    if (shape < 1.0) {
        /* Gamma(a) = Gamma(a + 1) * U^(1/a) for a < 1. */
        double u = 1.0 - wf_workload_rng_uniform(rng);
        return wf_workload_rng_gamma(rng, shape + 1.0, scale) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = wf_workload_rng_normal(rng);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = wf_workload_rng_uniform(rng);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
        if (u > 0.0 && log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v * scale;
    }
}

int wf_workload_rng_pick(wf_workload_rng *rng, const double *w, size_t n, double total) {
    double r = wf_workload_rng_uniform(rng) * total, acc = 0;
    int last = 0;
    for (size_t c = 0; c < n; c++) {
        if (w[c] <= 0) continue;
        acc += w[c];
        last = (int)c;
        if (r < acc) return (int)c;
    }
    return last; /* rounding at the top end */
}
