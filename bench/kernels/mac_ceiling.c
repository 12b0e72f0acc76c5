/* The most multiply-adds per second a core can do in ggml's per-block float order: the
 * arithmetic every bit-exact kernel of the 32-element block types (Q4_0/Q4_1/Q5_x/Q8_0) must
 * issue, with nothing else. Per block and output, 32 multiply-adds cost (two outputs share one
 * 512-bit register, so each operation below serves 64):
 *
 *     lanes = dpbusd(0, weight quants, activation quants)  8 int32 lanes of 4 products
 *     d     = dx * dy                                       the block's scale product, rounded
 *     acc   = fma(d, float(lanes), acc)                     8 float lanes
 *
 * Quants and scales come from a small buffer that stays in L1 and nothing is unpacked, so a
 * real kernel (which also unpacks nibbles, loads scales and streams weights) is slower. This is
 * the ceiling batched decode is held to when its tokens must match llama.cpp's bit for bit. */
#include "bench/kernels/mac_ceiling.h"

#include <immintrin.h>
#include <string.h>
#include <time.h>

#include "engine/cpu/features.h"

#define CEILING_BLOCKS 32 /* distinct blocks cycled through: 25 KiB, L1-resident */
#define CEILING_ROWS 4    /* weight registers per block (each: one row, two outputs' lanes) */
#define CEILING_COLS 4    /* activation registers per block */

typedef struct ceiling_data {
    _Alignas(64) unsigned char w[CEILING_BLOCKS][CEILING_ROWS][64];
    _Alignas(64) signed char y[CEILING_BLOCKS][CEILING_COLS][64];
    _Alignas(64) float dx[CEILING_BLOCKS][CEILING_ROWS][16];
    float dy[CEILING_BLOCKS][CEILING_COLS];
} ceiling_data;

typedef struct ceiling_run {
    ceiling_data data;
    long blocks;         /* per thread */
    double seconds[WF_THREADPOOL_MAX_THREADS]; /* per thread, wall */
    float sink[WF_THREADPOOL_MAX_THREADS];
} ceiling_run;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static float
ceiling_loop(const ceiling_data *c, long blocks) {
    __m512 acc[CEILING_ROWS * CEILING_COLS];
    for (int u = 0; u < CEILING_ROWS * CEILING_COLS; u++) acc[u] = _mm512_setzero_ps();
    for (long i = 0; i < blocks; i++) {
        const int b = (int)(i % CEILING_BLOCKS);
        __m512i w[CEILING_ROWS], y[CEILING_COLS];
        __m512 dx[CEILING_ROWS];
        for (int r = 0; r < CEILING_ROWS; r++) {
            w[r] = _mm512_load_si512(c->w[b][r]);
            dx[r] = _mm512_load_ps(c->dx[b][r]);
        }
        for (int j = 0; j < CEILING_COLS; j++) y[j] = _mm512_load_si512(c->y[b][j]);
#pragma GCC unroll 16
        for (int u = 0; u < CEILING_ROWS * CEILING_COLS; u++) {
            const int r = u % CEILING_ROWS, j = u / CEILING_ROWS;
            const __m512i lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r], y[j]);
            const __m512 d = _mm512_mul_ps(dx[r], _mm512_set1_ps(c->dy[b][j]));
            acc[u] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lanes), acc[u]);
        }
    }
    __m512 sum = acc[0];
    for (int u = 1; u < CEILING_ROWS * CEILING_COLS; u++) sum = _mm512_add_ps(sum, acc[u]);
    return _mm512_reduce_add_ps(sum);
}

static void ceiling_fn(void *arg, int ith, int nth) {
    (void)nth;
    ceiling_run *run = arg;
    const double t0 = now();
    run->sink[ith] = ceiling_loop(&run->data, run->blocks);
    run->seconds[ith] = now() - t0;
}

double wf_bench_mac_ceiling(wf_threadpool *pool, double seconds) {
    const wf_cpu_features *f = wf_cpu_features_get();
    if (f->isa < WF_CPU_ISA_AVX512 || !f->avx512vnni) return 0;
    static ceiling_run run; /* 27 KiB; one measurement at a time */
    memset(&run, 0, sizeof run);
    /* values that keep every float normal: denormals would measure the microcode assist */
    for (int b = 0; b < CEILING_BLOCKS; b++) {
        for (int r = 0; r < CEILING_ROWS; r++)
            for (int i = 0; i < 64; i++) {
                run.data.w[b][r][i] = (unsigned char)((b * 7 + r * 5 + i) & 15);
                if (i < 16) run.data.dx[b][r][i] = 1e-3f * (float)(1 + (b + r + i) % 7);
            }
        for (int j = 0; j < CEILING_COLS; j++) {
            for (int i = 0; i < 64; i++) run.data.y[b][j][i] = (signed char)((b * 13 + j * 3 + i * 11) % 255 - 127);
            run.data.dy[b][j] = 1e-2f * (float)(1 + (b + j) % 5);
        }
    }
    const int nth = wf_threadpool_size(pool);
    run.blocks = 1 << 16;
    for (;;) { /* grow until one run takes a quarter of the time asked for */
        wf_threadpool_run(pool, ceiling_fn, &run);
        if (run.seconds[0] >= seconds / 4 || run.blocks > (1L << 40)) break;
        run.blocks *= 2;
    }
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = now();
        wf_threadpool_run(pool, ceiling_fn, &run);
        const double macs = (double)run.blocks * CEILING_ROWS * CEILING_COLS * 64 * nth;
        const double rate = macs / (now() - t0);
        if (rate > best) best = rate;
    }
    return best;
}
