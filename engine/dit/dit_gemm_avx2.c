/* AVX2 DiT GEMM micro-kernels: 3 rows x 32 columns (four ymm per row, 12 accumulators). The bf16
 * kernel widens the packed pairs to fp32 (even k: shift left 16; odd k: mask the high half).
 * Checked against the scalar reference in tests/engine/dit/test_dit_kernels.c. */
#include <immintrin.h>
#include <string.h>

#include "engine/cpu/quant.h"
#include "engine/dit/dit_kernels.h"

#define MR 3

static inline void store_rows(__m256 acc[MR][4], float *const *y, int mr, int nvalid, const float *bias) {
    for (int r = 0; r < mr; r++) {
        if (nvalid == 32) {
            for (int q = 0; q < 4; q++) {
                __m256 v = acc[r][q];
                if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + 8 * q));
                _mm256_storeu_ps(y[r] + 8 * q, v);
            }
        } else {
            float tmp[32];
            for (int q = 0; q < 4; q++) _mm256_storeu_ps(tmp + 8 * q, acc[r][q]);
            for (int j = 0; j < nvalid; j++) y[r][j] = tmp[j] + (bias ? bias[j] : 0.0f);
        }
    }
}

void wf__dit_ukr_f32_avx2(const float *const *x, const float *panel, int k, float *const *y,
                          int mr, int nvalid, const float *bias) {
    __m256 acc[MR][4];
    for (int r = 0; r < MR; r++)
        for (int q = 0; q < 4; q++) acc[r][q] = _mm256_setzero_ps();
    for (int t = 0; t < k; t++) {
        const float *p = panel + (size_t)t * WF__DIT_NR;
        __m256 w0 = _mm256_loadu_ps(p), w1 = _mm256_loadu_ps(p + 8);
        __m256 w2 = _mm256_loadu_ps(p + 16), w3 = _mm256_loadu_ps(p + 24);
        for (int r = 0; r < MR; r++) {
            __m256 a = _mm256_broadcast_ss(x[r] + t);
            acc[r][0] = _mm256_fmadd_ps(a, w0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, w1, acc[r][1]);
            acc[r][2] = _mm256_fmadd_ps(a, w2, acc[r][2]);
            acc[r][3] = _mm256_fmadd_ps(a, w3, acc[r][3]);
        }
    }
    store_rows(acc, y, mr, nvalid, bias);
}

void wf__dit_ukr_bf16_avx2(const uint16_t *const *x, const uint16_t *panel, int kp,
                           float *const *y, int mr, int nvalid, const float *bias) {
    __m256 acc[MR][4];
    for (int r = 0; r < MR; r++)
        for (int q = 0; q < 4; q++) acc[r][q] = _mm256_setzero_ps();
    const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
    for (int t2 = 0; t2 < kp / 2; t2++) {
        const uint16_t *p = panel + (size_t)t2 * 2 * WF__DIT_NR;
        __m256 e[4], o[4];
        for (int q = 0; q < 4; q++) {
            __m256i v = _mm256_loadu_si256((const void *)(p + 16 * q));
            e[q] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
            o[q] = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
        }
        for (int r = 0; r < MR; r++) {
            uint32_t pr;
            memcpy(&pr, x[r] + 2 * t2, 4);
            __m256 xe = _mm256_castsi256_ps(_mm256_set1_epi32((int)(pr << 16)));
            __m256 xo = _mm256_castsi256_ps(_mm256_set1_epi32((int)(pr & 0xffff0000u)));
            for (int q = 0; q < 4; q++)
                acc[r][q] = _mm256_fmadd_ps(xo, o[q], _mm256_fmadd_ps(xe, e[q], acc[r][q]));
        }
    }
    store_rows(acc, y, mr, nvalid, bias);
}

/* wf_fp32_to_bf16 over n floats, 8 at a time (see the AVX-512 version). */
void wf__dit_round_bf16_avx2(const float *x, uint16_t *y, int n) {
    const __m256i low = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(64);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const void *)(x + i));
        __m256i hi = _mm256_srli_epi32(u, 16);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(low, _mm256_and_si256(hi, one))), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
        /* values are <= 0xffff: the unsigned-saturating pack keeps them; it interleaves the
         * 128-bit lanes, the permute puts them back in order */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((void *)(y + i), _mm256_castsi256_si128(p));
    }
    for (; i < n; i++) y[i] = wf_fp32_to_bf16(x[i]);
}
