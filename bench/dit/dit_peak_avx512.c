/* Peak loops for weft-dit-bench: independent chains of AVX-512 FMAs (fp32) and vdpbf16ps (bf16
 * pairs), enough of them to cover the latency, on every thread of the pool. The result is the
 * machine's attainable multiply-add rate the GEMMs are compared against. */
#include <immintrin.h>
#include <stdint.h>

#include "engine/cpu/threadpool.h"

double wf_bench_dit_peak(wf_threadpool *pool, int bf16, long iters);

typedef struct peak_ctx {
    long iters;
    int bf16;
    float sink[256];
} peak_ctx;

#define CHAINS 12

__attribute__((target("avx512f,avx512bf16")))
static float run_bf16(long iters) {
    __m512 acc[CHAINS];
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x3f003f00);
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

static float run_f32(long iters) {
    __m512 acc[CHAINS];
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

static void peak_worker(void *arg, int ith, int nth) {
    peak_ctx *c = arg;
    (void)nth;
    c->sink[ith] = c->bf16 ? run_bf16(c->iters) : run_f32(c->iters);
}

/* Multiply-adds done: fp32 16 per FMA lane-op, bf16 32 (two products per lane). */
double wf_bench_dit_peak(wf_threadpool *pool, int bf16, long iters) {
    peak_ctx c = {.iters = iters, .bf16 = bf16};
    wf_threadpool_run(pool, peak_worker, &c);
    return (double)iters * CHAINS * (bf16 ? 32 : 16) * wf_threadpool_size(pool);
}
