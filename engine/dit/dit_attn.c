/* Fused tiled attention, GELU and LayerNorm rows for the DiT forward: work units (batch item,
 * head, query tile; chunks of activations) split across the pool, each running the unit of the
 * best ISA for this CPU (dit_attn_impl.h). The scalar units are this file's own compilation of
 * the same source. */
#define WF__ATTN_UNIT wf__dit_attn_unit_scalar
#define WF__GELU_UNIT wf__dit_gelu_unit_scalar
#define WF__LN_UNIT wf__dit_ln_row_scalar
#define WF__ATTN_VW 4 /* SSE2 on x86-64; generic code elsewhere */
#define WF__ATTN_R 2
#include "engine/dit/dit_attn_impl.h"

#include <pthread.h>
#include <stdatomic.h>

#include "engine/cpu/features.h"
#include "engine/dit/dit_kernels.h"

size_t wf__dit_attention_scratch(int hd) {
    /* Q, Kt, S, V, A, M, L, C of dit_attn_impl.h; V and A rows padded to the widest vector (16) */
    const size_t hdp = ((size_t)hd + 15) / 16 * 16;
    return (size_t)WF__ATTN_QT * hd + (size_t)hd * WF__ATTN_KT + WF__ATTN_QT * WF__ATTN_KT +
           WF__ATTN_KT * hdp + WF__ATTN_QT * hdp + 3 * WF__ATTN_QT;
}

static wf__dit_attn_impl g_units[3];
static int g_n_units;
static pthread_once_t g_units_once = PTHREAD_ONCE_INIT;

static void units_init(void) {
    int n = 0;
#if defined(__x86_64__)
    wf_cpu_isa isa = wf_cpu_features_get()->isa;
    if (isa >= WF_CPU_ISA_AVX512) g_units[n++] = (wf__dit_attn_impl){"avx512", wf__dit_attn_unit_avx512};
    if (isa >= WF_CPU_ISA_AVX2) g_units[n++] = (wf__dit_attn_impl){"avx2", wf__dit_attn_unit_avx2};
#endif
    g_units[n++] = (wf__dit_attn_impl){"scalar", wf__dit_attn_unit_scalar};
    g_n_units = n;
}

int wf__dit_attention_impls(const wf__dit_attn_impl **out) {
    pthread_once(&g_units_once, units_init);
    *out = g_units;
    return g_n_units;
}

typedef struct attn_ctx {
    const float *qkv;
    float *o;
    int batch, tokens, heads, hd;
    float *scratch;
    void (*unit)(WF__ATTN_UNIT_ARGS);
    _Atomic long next; /* next unit to take */
} attn_ctx;

/* Units are taken from a shared counter, not split evenly up front: on a loaded host a
 * descheduled thread delays the region by one unit at most, the running threads take the rest.
 * Units write disjoint outputs, so who runs which changes nothing. */
static void attn_worker(void *arg, int ith, int nth) {
    (void)nth;
    attn_ctx *c = arg;
    int nqt = (c->tokens + WF__ATTN_QT - 1) / WF__ATTN_QT;
    long total = (long)c->batch * c->heads * nqt;
    float *scratch = c->scratch + wf__dit_attention_scratch(c->hd) * (size_t)ith;
    for (long u; (u = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed)) < total;) {
        int qt = (int)(u % nqt), h = (int)(u / nqt % c->heads), b = (int)(u / nqt / c->heads);
        c->unit(c->qkv, c->o, c->tokens, c->heads, c->hd, b, h, qt * WF__ATTN_QT, scratch);
    }
}

void wf__dit_attention_with(wf_threadpool *pool, const wf__dit_attn_impl *impl, const float *qkv, float *o,
                            int batch, int tokens, int heads, int hd, float *scratch) {
    if (!impl) {
        const wf__dit_attn_impl *all;
        wf__dit_attention_impls(&all);
        impl = &all[0];
    }
    attn_ctx c = {.qkv = qkv, .o = o, .batch = batch, .tokens = tokens, .heads = heads, .hd = hd,
                  .scratch = scratch, .unit = impl->unit};
    atomic_init(&c.next, 0);
    wf_threadpool_run(pool, attn_worker, &c);
}

void wf__dit_attention(wf_threadpool *pool, const float *qkv, float *o, int batch, int tokens,
                       int heads, int hd, float *scratch) {
    wf__dit_attention_with(pool, NULL, qkv, o, batch, tokens, heads, hd, scratch);
}

typedef struct gelu_ctx {
    float *x;
    size_t n;
    void (*unit)(float *x, size_t n);
} gelu_ctx;

static void gelu_worker(void *arg, int ith, int nth) {
    const gelu_ctx *c = arg;
    /* split on multiples of 16 so every thread's chunks stay full */
    size_t blocks = (c->n + 15) / 16, b0 = blocks * (size_t)ith / (size_t)nth, b1 = blocks * (size_t)(ith + 1) / (size_t)nth;
    size_t i0 = b0 * 16, i1 = b1 * 16 < c->n ? b1 * 16 : c->n;
    if (i1 > i0) c->unit(c->x + i0, i1 - i0);
}

static void (*gelu_unit(void))(float *, size_t) {
#if defined(__x86_64__)
    wf_cpu_isa isa = wf_cpu_features_get()->isa;
    if (isa >= WF_CPU_ISA_AVX512) return wf__dit_gelu_unit_avx512;
    if (isa >= WF_CPU_ISA_AVX2) return wf__dit_gelu_unit_avx2;
#endif
    return wf__dit_gelu_unit_scalar;
}

void wf__dit_gelu_tanh(wf_threadpool *pool, float *x, size_t n) {
    gelu_ctx c = {x, n, gelu_unit()};
    wf_threadpool_run(pool, gelu_worker, &c);
}

void wf__dit_gelu_tanh_serial(float *x, size_t n) { gelu_unit()(x, n); }

wf__dit_ln_row_fn wf__dit_ln_row_best(void) {
#if defined(__x86_64__)
    wf_cpu_isa isa = wf_cpu_features_get()->isa;
    if (isa >= WF_CPU_ISA_AVX512) return wf__dit_ln_row_avx512;
    if (isa >= WF_CPU_ISA_AVX2) return wf__dit_ln_row_avx2;
#endif
    return wf__dit_ln_row_scalar;
}
