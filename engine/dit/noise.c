/* Philox4x32-10 and Box-Muller: the counter-based noise of engine/dit/noise.h. */
#include "engine/dit/noise.h"

#include <math.h>

#include "engine/cpu/threadpool.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void wf_dit_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The four normals of one 128-bit block. */
static void normals_of_block(wf_dit_noise_key key, uint32_t step, uint64_t block, float z[4]) {
    const uint32_t k[2] = {(uint32_t)key.seed, (uint32_t)(key.seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), step, key.request};
    uint32_t u[4];
    wf_dit_philox4x32(ctr, k, u);
    const double two_pi = 6.283185307179586476925286766559;
    for (int h = 0; h < 2; h++) {
        double u1 = ((double)u[2 * h] + 1.0) * 0x1p-32; /* (0, 1]: log is finite */
        double u2 = (double)u[2 * h + 1] * 0x1p-32;
        double r = sqrt(-2.0 * log(u1));
        z[2 * h] = (float)(r * cos(two_pi * u2));
        z[2 * h + 1] = (float)(r * sin(two_pi * u2));
    }
}

void wf_dit_noise_fill(wf_dit_noise_key key, uint32_t step, uint64_t first, float *out, size_t n) {
    size_t j = 0;
    while (j < n) {
        uint64_t e = first + j;
        float z[4];
        normals_of_block(key, step, e >> 2, z);
        for (unsigned lane = (unsigned)(e & 3); lane < 4 && j < n; lane++) out[j++] = z[lane];
    }
}

typedef struct fill_ctx {
    wf_dit_noise_key key;
    uint32_t step;
    uint64_t first;
    float *out;
    size_t n;
} fill_ctx;

static void fill_part(void *arg, int ith, int nth) {
    const fill_ctx *c = arg;
    size_t lo = c->n * (size_t)ith / (size_t)nth, hi = c->n * (size_t)(ith + 1) / (size_t)nth;
    wf_dit_noise_fill(c->key, c->step, c->first + lo, c->out + lo, hi - lo);
}

void wf_dit_noise_fill_parallel(wf_threadpool *pool, wf_dit_noise_key key, uint32_t step,
                                uint64_t first, float *out, size_t n) {
    fill_ctx c = {key, step, first, out, n};
    wf_threadpool_run(pool, fill_part, &c);
}
