/* AVX-512 DiT GEMM micro-kernels: 8 rows x 32 columns (two zmm per row, 16 accumulators; 8 rows
 * measured ~2% less CPU time per DiT step than 6).
 * fp32 broadcasts x and FMAs against the packed panel; bf16 either uses vdpbf16ps (AVX512_BF16,
 * enabled per function so the rest of the file needs only the common AVX-512 flags) or widens
 * bf16 to fp32 with shifts and FMAs. Checked against the scalar reference in
 * tests/engine/dit/test_dit_kernels.c. */
#include <immintrin.h>
#include <string.h>

#include "engine/cpu/quant.h"
#include "engine/dit/dit_kernels.h"

#define MR 8

static inline void store_rows(__m512 acc[MR][2], float *const *y, int mr, int nvalid, const float *bias) {
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    if (bias) {
        __mmask16 m0 = nvalid >= 16 ? 0xffff : (__mmask16)((1u << nvalid) - 1);
        __mmask16 m1 = nvalid >= 32 ? 0xffff : nvalid <= 16 ? 0 : (__mmask16)((1u << (nvalid - 16)) - 1);
        b0 = _mm512_maskz_loadu_ps(m0, bias);
        b1 = _mm512_maskz_loadu_ps(m1, bias + 16);
    }
    for (int r = 0; r < mr; r++) {
        __m512 v0 = _mm512_add_ps(acc[r][0], b0), v1 = _mm512_add_ps(acc[r][1], b1);
        if (nvalid == 32) {
            _mm512_storeu_ps(y[r], v0);
            _mm512_storeu_ps(y[r] + 16, v1);
        } else {
            __mmask16 m0 = nvalid >= 16 ? 0xffff : (__mmask16)((1u << nvalid) - 1);
            __mmask16 m1 = nvalid <= 16 ? 0 : (__mmask16)((1u << (nvalid - 16)) - 1);
            _mm512_mask_storeu_ps(y[r], m0, v0);
            _mm512_mask_storeu_ps(y[r] + 16, m1, v1);
        }
    }
}

void wf__dit_ukr_f32_avx512(const float *const *x, const float *panel, int k, float *const *y,
                            int mr, int nvalid, const float *bias) {
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3], *x4 = x[4], *x5 = x[5], *x6 = x[6], *x7 = x[7];
    for (int t = 0; t < k; t++) {
        const float *p = panel + (size_t)t * WF__DIT_NR;
        __m512 w0 = _mm512_loadu_ps(p), w1 = _mm512_loadu_ps(p + 16);
        __m512 a;
#define ROW(r, xr)                                          \
        a = _mm512_set1_ps(xr[t]);                          \
        acc[r][0] = _mm512_fmadd_ps(a, w0, acc[r][0]);      \
        acc[r][1] = _mm512_fmadd_ps(a, w1, acc[r][1]);
        ROW(0, x0) ROW(1, x1) ROW(2, x2) ROW(3, x3) ROW(4, x4) ROW(5, x5) ROW(6, x6) ROW(7, x7)
#undef ROW
    }
    store_rows(acc, y, mr, nvalid, bias);
}

static inline __m512 bcast_pair(const uint16_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return _mm512_castsi512_ps(_mm512_set1_epi32((int)v));
}

__attribute__((target("avx512bf16")))
void wf__dit_ukr_bf16_avx512bf16(const uint16_t *const *x, const uint16_t *panel, int kp,
                                 float *const *y, int mr, int nvalid, const float *bias) {
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const uint16_t *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3], *x4 = x[4], *x5 = x[5], *x6 = x[6], *x7 = x[7];
    for (int t2 = 0; t2 < kp / 2; t2++) {
        const uint16_t *p = panel + (size_t)t2 * 2 * WF__DIT_NR;
        __m512bh w0 = (__m512bh)_mm512_loadu_si512(p), w1 = (__m512bh)_mm512_loadu_si512(p + 32);
        __m512bh a;
#define ROW(r, xr)                                             \
        a = (__m512bh)bcast_pair(xr + 2 * t2);                 \
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, w0);        \
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, w1);
        ROW(0, x0) ROW(1, x1) ROW(2, x2) ROW(3, x3) ROW(4, x4) ROW(5, x5) ROW(6, x6) ROW(7, x7)
#undef ROW
    }
    store_rows(acc, y, mr, nvalid, bias);
}

/* Without AVX512_BF16: a pair lane (lo = even k, hi = odd k) widens to two fp32 vectors. */
void wf__dit_ukr_bf16_avx512(const uint16_t *const *x, const uint16_t *panel, int kp,
                             float *const *y, int mr, int nvalid, const float *bias) {
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
    for (int t2 = 0; t2 < kp / 2; t2++) {
        const uint16_t *p = panel + (size_t)t2 * 2 * WF__DIT_NR;
        __m512i v0 = _mm512_loadu_si512(p), v1 = _mm512_loadu_si512(p + 32);
        __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));
        __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi_mask));
        __m512 e1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
        __m512 o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi_mask));
        for (int r = 0; r < MR; r++) {
            uint32_t pr;
            memcpy(&pr, x[r] + 2 * t2, 4);
            __m512 xe = _mm512_castsi512_ps(_mm512_set1_epi32((int)(pr << 16)));
            __m512 xo = _mm512_castsi512_ps(_mm512_set1_epi32((int)(pr & 0xffff0000u)));
            acc[r][0] = _mm512_fmadd_ps(xo, o0, _mm512_fmadd_ps(xe, e0, acc[r][0]));
            acc[r][1] = _mm512_fmadd_ps(xo, o1, _mm512_fmadd_ps(xe, e1, acc[r][1]));
        }
    }
    store_rows(acc, y, mr, nvalid, bias);
}

/* Rounds n floats to bf16 exactly as wf_fp32_to_bf16 (nearest even; a NaN stays a quiet NaN),
 * 16 at a time: the scalar call per element cost ~10% of a bf16 DiT step. */
void wf__dit_round_bf16_avx512(const float *x, uint16_t *y, int n) {
    const __m512i low = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(64);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512(x + i);
        __m512i hi = _mm512_srli_epi32(u, 16);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(low, _mm512_and_si512(hi, one))), 16);
        __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs_mask), inf);
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
        _mm256_storeu_si256((void *)(y + i), _mm512_cvtepi32_epi16(r));
    }
    for (; i < n; i++) y[i] = wf_fp32_to_bf16(x[i]);
}
