/* Internal CPU kernels of the DiT forward (not a public header): dense GEMM against weights
 * packed once at load (fp32 or bf16), the fused tiled attention, LayerNorm with adaLN
 * modulation, GELU (tanh) and SiLU. All run on weft's thread pool and allocate nothing.
 *
 * Packed layout: the n output columns are cut into panels of WF__DIT_NR columns (the last one
 * zero-padded). fp32 panel: k rows of NR floats (element [t][j] = W[p*NR + j][t]). bf16 panel:
 * kp/2 rows of NR pairs (element [t2][j][e] = W[p*NR + j][2*t2 + e]), kp = k rounded up to
 * even, zero-padded: the pair layout vdpbf16ps consumes. */
#ifndef WF_ENGINE_DIT_KERNELS_H
#define WF_ENGINE_DIT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/cpu/threadpool.h"

#define WF__DIT_NR 32   /* columns per packed panel */
#define WF__DIT_MR_MAX 8

/* A linear layer y = x W^T + b with its weight packed in one of the two formats. */
typedef struct wf__dit_linear {
    int n, k, kp;
    float *wf;      /* fp32 panels, or NULL */
    uint16_t *wb;   /* bf16 panels, or NULL */
    float *bias;    /* n floats, or NULL */
} wf__dit_linear;

/* One micro-kernel: y[r][0..nvalid) = bias + sum_t x_r[t] * panel[t][.] for r < mr (the
 * remaining row pointers repeat a valid row; their results are not stored). fp32: x rows are
 * float; bf16: x rows are bf16 (uint16) of length kp. */
typedef void (*wf__dit_ukr_f32)(const float *const *x, const float *panel, int k, float *const *y,
                                int mr, int nvalid, const float *bias);
typedef void (*wf__dit_ukr_bf16)(const uint16_t *const *x, const uint16_t *panel, int kp,
                                 float *const *y, int mr, int nvalid, const float *bias);

/* Rounds n floats to bf16 as wf_fp32_to_bf16 does (a bf16 layer's input rows). */
typedef void (*wf__dit_round_bf16)(const float *x, uint16_t *y, int n);

typedef struct wf__dit_gemm_impl {
    const char *name;
    int mr;
    wf__dit_ukr_f32 f32;
    wf__dit_ukr_bf16 bf16;
    wf__dit_round_bf16 round;
} wf__dit_gemm_impl;

/* The implementations this CPU can run, best first, scalar last (always present). */
int wf__dit_gemm_impls(const wf__dit_gemm_impl **out);
const wf__dit_gemm_impl *wf__dit_gemm_best(void);

void wf__dit_ukr_f32_scalar(const float *const *x, const float *panel, int k, float *const *y,
                            int mr, int nvalid, const float *bias);
void wf__dit_ukr_bf16_scalar(const uint16_t *const *x, const uint16_t *panel, int kp,
                             float *const *y, int mr, int nvalid, const float *bias);
void wf__dit_ukr_f32_avx2(const float *const *x, const float *panel, int k, float *const *y,
                          int mr, int nvalid, const float *bias);
void wf__dit_ukr_bf16_avx2(const uint16_t *const *x, const uint16_t *panel, int kp,
                           float *const *y, int mr, int nvalid, const float *bias);
void wf__dit_round_bf16_scalar(const float *x, uint16_t *y, int n);
void wf__dit_round_bf16_avx2(const float *x, uint16_t *y, int n);
void wf__dit_round_bf16_avx512(const float *x, uint16_t *y, int n);
void wf__dit_ukr_f32_avx512(const float *const *x, const float *panel, int k, float *const *y,
                            int mr, int nvalid, const float *bias);
void wf__dit_ukr_bf16_avx512(const uint16_t *const *x, const uint16_t *panel, int kp,
                             float *const *y, int mr, int nvalid, const float *bias);
void wf__dit_ukr_bf16_avx512bf16(const uint16_t *const *x, const uint16_t *panel, int kp,
                                 float *const *y, int mr, int nvalid, const float *bias);

/* Packs W (n x k row-major fp32) into l (allocating l->wf or l->wb); bias copied if non-NULL.
 * Returns 0, or -1 when out of memory (l is then freed). */
int wf__dit_linear_pack(wf__dit_linear *l, const float *w, const float *bias, int n, int k, int bf16);
void wf__dit_linear_free(wf__dit_linear *l);

/* y[m][n] = x[m][k] W^T + b, on the pool with implementation impl (NULL: the best). For a bf16
 * layer, xb is scratch of m * kp uint16 (x is rounded into it). */
void wf__dit_linear_run(wf_threadpool *pool, const wf__dit_gemm_impl *impl, const wf__dit_linear *l,
                        const float *x, int m, float *y, uint16_t *xb);

/* Rows [r0, r1) of wf__dit_linear_run on the calling thread alone, for a caller that owns those
 * rows through a chain of steps (dit.c's block, one parallel region): no pool, no barrier. For a
 * bf16 layer xb is scratch of (r1 - r0) * kp uint16 for these rows only. */
void wf__dit_linear_rows(const wf__dit_gemm_impl *impl, const wf__dit_linear *l, const float *x, int r0, int r1,
                         float *y, uint16_t *xb);

/* Attention over qkv[B*T][3D] (q | k | v, heads of hd = D/heads consecutive columns), into
 * o[B*T][D]. scratch: wf__dit_attention_scratch(hd) floats per thread of the pool. */
size_t wf__dit_attention_scratch(int hd);
void wf__dit_attention(wf_threadpool *pool, const float *qkv, float *o, int batch, int tokens,
                       int heads, int hd, float *scratch);

/* One ISA's attention work unit (dit_attn_impl.h compiled for that ISA). */
typedef struct wf__dit_attn_impl {
    const char *name;
    void (*unit)(const float *qkv, float *o, int tokens, int heads, int hd, int b, int h, int q0,
                 float *scratch);
} wf__dit_attn_impl;

/* The units this CPU can run, best first, scalar last; wf__dit_attention uses the first. */
int wf__dit_attention_impls(const wf__dit_attn_impl **out);
/* wf__dit_attention with a given unit (NULL: the best), for the tests' per-ISA checks. */
void wf__dit_attention_with(wf_threadpool *pool, const wf__dit_attn_impl *impl, const float *qkv, float *o,
                            int batch, int tokens, int heads, int hd, float *scratch);

/* y[r] = LN(x[r]) (* g + b if g) * (1 + scale) + shift, over rows of d; rows_per_item rows share
 * one scale/shift (a batch item); scale/shift rows are at stride mod_stride. */
void wf__dit_ln_modulate(wf_threadpool *pool, const float *x, float *y, int rows, int d, float eps,
                         const float *g, const float *b, const float *shift, const float *scale,
                         int rows_per_item, int mod_stride);

/* One row of wf__dit_ln_modulate (sh/sc this row's shift and scale, or NULL), this CPU's best
 * compilation of it. */
typedef void (*wf__dit_ln_row_fn)(const float *x, float *y, int d, float eps, const float *g, const float *b,
                                  const float *sh, const float *sc);
wf__dit_ln_row_fn wf__dit_ln_row_best(void);

/* wf__dit_ln_modulate of rows [r0, r1) on the calling thread. */
void wf__dit_ln_modulate_rows(const float *x, float *y, int r0, int r1, int d, float eps, const float *g,
                              const float *b, const float *shift, const float *scale, int rows_per_item,
                              int mod_stride);

/* exp(x) for the softmax and activations: Cephes' range reduction and degree-6 polynomial
 * (relative error ~1e-7, no libm call, so loops over it vectorise). x below -87 gives ~0. */
static inline float wf__dit_expf(float x) {
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    float n = (float)(int)(x * 1.44269504088896341f + (x >= 0 ? 0.5f : -0.5f));
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    union {
        int32_t i;
        float f;
    } sc = {.i = ((int32_t)n + 127) << 23};
    return y * sc.f;
}

/* x[i] = gelu_tanh(x[i]) and silu, in place. */
void wf__dit_gelu_tanh(wf_threadpool *pool, float *x, size_t n);
void wf__dit_gelu_tanh_serial(float *x, size_t n); /* on the calling thread */
void wf__dit_silu(float *x, size_t n);

#endif
