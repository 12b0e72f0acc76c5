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

/* Twelve named accumulators: an array of them is kept in memory by GCC at -O2. */
#define ACCS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define DECL(i) __m512 a##i = _mm512_set1_ps((float)i);
#define SUM(i) s = _mm512_add_ps(s, a##i);

__attribute__((target("avx512f,avx512bf16")))
static float run_bf16(long iters) {
    ACCS(DECL)
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x3f003f00);
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
    for (long n = 0; n < iters; n++) {
        ACCS(STEP)
        __asm__ volatile("" ::: "memory");
    }
#undef STEP
    __m512 s = _mm512_setzero_ps();
    ACCS(SUM)
    return _mm512_reduce_add_ps(s);
}

static float run_f32(long iters) {
    ACCS(DECL)
    __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, x, y);
    for (long n = 0; n < iters; n++) {
        ACCS(STEP)
        __asm__ volatile("" ::: "memory");
    }
#undef STEP
    __m512 s = _mm512_setzero_ps();
    ACCS(SUM)
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
