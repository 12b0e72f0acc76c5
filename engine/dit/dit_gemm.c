/* DiT GEMM driver and element-wise kernels: weight packing at load, the scalar reference
 * micro-kernels every SIMD variant is tested against, the run-time choice among them, and the
 * split of (row block x panel) tiles across the thread pool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/features.h"
#include "engine/cpu/quant.h"
#include "engine/dit/dit_kernels.h"

/* ---- scalar reference micro-kernels ------------------------------------------------------ */

void wf__dit_ukr_f32_scalar(const float *const *x, const float *panel, int k, float *const *y,
                            int mr, int nvalid, const float *bias) {
    for (int r = 0; r < mr; r++) {
        float acc[WF__DIT_NR];
        for (int j = 0; j < WF__DIT_NR; j++) acc[j] = 0.0f;
        for (int t = 0; t < k; t++) {
            float xv = x[r][t];
            const float *p = panel + (size_t)t * WF__DIT_NR;
            for (int j = 0; j < WF__DIT_NR; j++) acc[j] += xv * p[j];
        }
        for (int j = 0; j < nvalid; j++) y[r][j] = acc[j] + (bias ? bias[j] : 0.0f);
    }
}

void wf__dit_ukr_bf16_scalar(const uint16_t *const *x, const uint16_t *panel, int kp,
                             float *const *y, int mr, int nvalid, const float *bias) {
    for (int r = 0; r < mr; r++) {
        float acc[WF__DIT_NR];
        for (int j = 0; j < WF__DIT_NR; j++) acc[j] = 0.0f;
        for (int t2 = 0; t2 < kp / 2; t2++) {
            float x0 = wf_bf16_to_fp32(x[r][2 * t2]), x1 = wf_bf16_to_fp32(x[r][2 * t2 + 1]);
            const uint16_t *p = panel + (size_t)t2 * 2 * WF__DIT_NR;
            for (int j = 0; j < WF__DIT_NR; j++)
                acc[j] += x0 * wf_bf16_to_fp32(p[2 * j]) + x1 * wf_bf16_to_fp32(p[2 * j + 1]);
        }
        for (int j = 0; j < nvalid; j++) y[r][j] = acc[j] + (bias ? bias[j] : 0.0f);
    }
}

void wf__dit_round_bf16_scalar(const float *x, uint16_t *y, int n) {
    for (int i = 0; i < n; i++) y[i] = wf_fp32_to_bf16(x[i]);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

static wf__dit_gemm_impl g_impls[4];
static int g_n_impls;

static void impls_init(void) {
    const wf_cpu_features *f = wf_cpu_features_get();
    int n = 0;
#if defined(__x86_64__)
    if (f->isa >= WF_CPU_ISA_AVX512) {
        if (f->avx512bf16)
            g_impls[n++] = (wf__dit_gemm_impl){"avx512bf16", 8, wf__dit_ukr_f32_avx512,
                                               wf__dit_ukr_bf16_avx512bf16, wf__dit_round_bf16_avx512};
        g_impls[n++] = (wf__dit_gemm_impl){"avx512", 8, wf__dit_ukr_f32_avx512, wf__dit_ukr_bf16_avx512,
                                           wf__dit_round_bf16_avx512};
    }
    if (f->isa >= WF_CPU_ISA_AVX2)
        g_impls[n++] = (wf__dit_gemm_impl){"avx2", 3, wf__dit_ukr_f32_avx2, wf__dit_ukr_bf16_avx2,
                                           wf__dit_round_bf16_avx2};
#else
    (void)f;
#endif
    g_impls[n++] = (wf__dit_gemm_impl){"scalar", 4, wf__dit_ukr_f32_scalar, wf__dit_ukr_bf16_scalar,
                                       wf__dit_round_bf16_scalar};
    g_n_impls = n;
}

#include <pthread.h>
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

int wf__dit_gemm_impls(const wf__dit_gemm_impl **out) {
    pthread_once(&g_once, impls_init);
    *out = g_impls;
    return g_n_impls;
}

const wf__dit_gemm_impl *wf__dit_gemm_best(void) {
    pthread_once(&g_once, impls_init);
    return &g_impls[0];
}

/* ---- packing ------------------------------------------------------------------------------ */

int wf__dit_linear_pack(wf__dit_linear *l, const float *w, const float *bias, int n, int k, int bf16) {
    memset(l, 0, sizeof *l);
    l->n = n;
    l->k = k;
    l->kp = (k + 1) & ~1;
    int np = (n + WF__DIT_NR - 1) / WF__DIT_NR;
    if (bias) {
        l->bias = malloc((size_t)n * sizeof *l->bias);
        if (!l->bias) goto fail;
        memcpy(l->bias, bias, (size_t)n * sizeof *l->bias);
    }
    if (bf16) {
        size_t sz = (size_t)np * (size_t)l->kp * WF__DIT_NR * sizeof(uint16_t);
        l->wb = aligned_alloc(64, (sz + 63) & ~(size_t)63);
        if (!l->wb) goto fail;
        memset(l->wb, 0, sz);
        for (int p = 0; p < np; p++)
            for (int j = 0; j < WF__DIT_NR && p * WF__DIT_NR + j < n; j++) {
                const float *row = w + (size_t)(p * WF__DIT_NR + j) * k;
                uint16_t *dst = l->wb + (size_t)p * l->kp * WF__DIT_NR;
                for (int t = 0; t < k; t++)
                    dst[(size_t)(t / 2) * 2 * WF__DIT_NR + 2 * j + (t & 1)] = wf_fp32_to_bf16(row[t]);
            }
    } else {
        size_t sz = (size_t)np * (size_t)k * WF__DIT_NR * sizeof(float);
        l->wf = aligned_alloc(64, (sz + 63) & ~(size_t)63);
        if (!l->wf) goto fail;
        memset(l->wf, 0, sz);
        for (int p = 0; p < np; p++)
            for (int j = 0; j < WF__DIT_NR && p * WF__DIT_NR + j < n; j++) {
                const float *row = w + (size_t)(p * WF__DIT_NR + j) * k;
                float *dst = l->wf + (size_t)p * k * WF__DIT_NR;
                for (int t = 0; t < k; t++) dst[(size_t)t * WF__DIT_NR + j] = row[t];
            }
    }
    return 0;
fail:
    wf__dit_linear_free(l);
    return -1;
}

void wf__dit_linear_free(wf__dit_linear *l) {
    free(l->wf);
    free(l->wb);
    free(l->bias);
    memset(l, 0, sizeof *l);
}

/* ---- threaded GEMM ------------------------------------------------------------------------ */

/* Rows per block: a block of x rows (k <= 4608 floats each) is reused across the panels a
 * thread owns while it is in L2. */
#define WF__DIT_MB 48

typedef struct gemm_ctx {
    const wf__dit_gemm_impl *impl;
    const wf__dit_linear *l;
    const float *x;
    const uint16_t *xb; /* bf16 rows; row r at xb + (r - xb_row0) * kp */
    int m, xb_row0;
    float *y;
} gemm_ctx;

/* Rows [r0, r1) (at most one row block) against panel p. */
static void gemm_tile(const gemm_ctx *c, int r0, int r1, int p) {
    const wf__dit_linear *l = c->l;
    int mr = c->impl->mr;
    int col = p * WF__DIT_NR, nvalid = l->n - col < WF__DIT_NR ? l->n - col : WF__DIT_NR;
    const float *bias = l->bias ? l->bias + col : NULL;
    for (int r = r0; r < r1; r += mr) {
        int rows = r1 - r < mr ? r1 - r : mr;
        float *yr[WF__DIT_MR_MAX];
        if (l->wb) {
            const uint16_t *xr[WF__DIT_MR_MAX];
            for (int i = 0; i < mr; i++) {
                int ri = r + (i < rows ? i : rows - 1);
                xr[i] = c->xb + (size_t)(ri - c->xb_row0) * l->kp;
                yr[i] = c->y + (size_t)ri * l->n + col;
            }
            c->impl->bf16(xr, l->wb + (size_t)p * l->kp * WF__DIT_NR, l->kp, yr, rows, nvalid, bias);
        } else {
            const float *xr[WF__DIT_MR_MAX];
            for (int i = 0; i < mr; i++) {
                int ri = r + (i < rows ? i : rows - 1);
                xr[i] = c->x + (size_t)ri * l->k;
                yr[i] = c->y + (size_t)ri * l->n + col;
            }
            c->impl->f32(xr, l->wf + (size_t)p * l->k * WF__DIT_NR, l->k, yr, rows, nvalid, bias);
        }
    }
}

static void gemm_worker(void *arg, int ith, int nth) {
    const gemm_ctx *c = arg;
    int nb = (c->m + WF__DIT_MB - 1) / WF__DIT_MB;
    int np = (c->l->n + WF__DIT_NR - 1) / WF__DIT_NR;
    /* Contiguous ranges of (row block, panel) tiles, panel-major within a row block. */
    long total = (long)nb * np;
    long t0 = total * ith / nth, t1 = total * (ith + 1) / nth;
    for (long t = t0; t < t1; t++) {
        int r0 = (int)(t / np) * WF__DIT_MB, r1 = r0 + WF__DIT_MB < c->m ? r0 + WF__DIT_MB : c->m;
        gemm_tile(c, r0, r1, (int)(t % np));
    }
}

/* bf16 copies of rows [r0, r1) of x (k floats each) at xb (kp each, the pad column zero). */
static void round_rows(const wf__dit_gemm_impl *impl, const float *x, int k, int kp, int r0, int r1,
                       uint16_t *xb) {
    for (int r = r0; r < r1; r++) {
        uint16_t *dst = xb + (size_t)(r - r0) * kp;
        impl->round(x + (size_t)r * k, dst, k);
        if (kp > k) dst[k] = 0;
    }
}

typedef struct round_ctx {
    const wf__dit_gemm_impl *impl;
    const float *x;
    uint16_t *xb;
    int m, k, kp;
} round_ctx;

static void round_worker(void *arg, int ith, int nth) {
    const round_ctx *c = arg;
    int r0 = (int)((long)c->m * ith / nth), r1 = (int)((long)c->m * (ith + 1) / nth);
    round_rows(c->impl, c->x, c->k, c->kp, r0, r1, c->xb + (size_t)r0 * c->kp);
}

void wf__dit_linear_run(wf_threadpool *pool, const wf__dit_gemm_impl *impl, const wf__dit_linear *l,
                        const float *x, int m, float *y, uint16_t *xb) {
    if (!impl) impl = wf__dit_gemm_best();
    if (l->wb) {
        round_ctx rc = {impl, x, xb, m, l->k, l->kp};
        wf_threadpool_run(pool, round_worker, &rc);
    }
    gemm_ctx c = {impl, l, x, xb, m, 0, y};
    wf_threadpool_run(pool, gemm_worker, &c);
}

void wf__dit_linear_rows(const wf__dit_gemm_impl *impl, const wf__dit_linear *l, const float *x, int r0, int r1,
                         float *y, uint16_t *xb) {
    if (r0 >= r1) return;
    if (!impl) impl = wf__dit_gemm_best();
    if (l->wb) round_rows(impl, x, l->k, l->kp, r0, r1, xb);
    gemm_ctx c = {impl, l, x, xb, r1, r0, y};
    int np = (l->n + WF__DIT_NR - 1) / WF__DIT_NR;
    for (int rb = r0; rb < r1; rb += WF__DIT_MB) {
        int re = rb + WF__DIT_MB < r1 ? rb + WF__DIT_MB : r1;
        for (int p = 0; p < np; p++) gemm_tile(&c, rb, re, p);
    }
}

/* ---- LayerNorm + adaLN modulation, GELU, SiLU --------------------------------------------- */

typedef struct ln_ctx {
    const float *x;
    float *y;
    int rows, d;
    float eps;
    const float *g, *b, *shift, *scale;
    int rows_per_item, mod_stride;
} ln_ctx;

static void ln_rows(const ln_ctx *c, int r0, int r1) {
    const wf__dit_ln_row_fn row = wf__dit_ln_row_best();
    for (int r = r0; r < r1; r++) {
        const int item = r / c->rows_per_item;
        const float *sh = c->shift ? c->shift + (size_t)item * c->mod_stride : NULL;
        const float *sc = c->scale ? c->scale + (size_t)item * c->mod_stride : NULL;
        row(c->x + (size_t)r * c->d, c->y + (size_t)r * c->d, c->d, c->eps, c->g, c->b, sh, sc);
    }
}

static void ln_worker(void *arg, int ith, int nth) {
    const ln_ctx *c = arg;
    ln_rows(c, (int)((long)c->rows * ith / nth), (int)((long)c->rows * (ith + 1) / nth));
}

void wf__dit_ln_modulate_rows(const float *x, float *y, int r0, int r1, int d, float eps, const float *g,
                              const float *b, const float *shift, const float *scale, int rows_per_item,
                              int mod_stride) {
    ln_ctx c = {x, y, r1, d, eps, g, b, shift, scale, rows_per_item, mod_stride};
    ln_rows(&c, r0, r1);
}

void wf__dit_ln_modulate(wf_threadpool *pool, const float *x, float *y, int rows, int d, float eps,
                         const float *g, const float *b, const float *shift, const float *scale,
                         int rows_per_item, int mod_stride) {
    ln_ctx c = {x, y, rows, d, eps, g, b, shift, scale, rows_per_item, mod_stride};
    wf_threadpool_run(pool, ln_worker, &c);
}

void wf__dit_silu(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + wf__dit_expf(-x[i]));
}
