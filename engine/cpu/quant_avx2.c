/* AVX2 + FMA + F16C kernels. The dot products keep the lane structure of ggml's x86 kernels
 * (per block: 8 int32 lanes of 4-byte products, converted and fused-multiply-added into 8
 * float lanes, one horizontal sum at the end), which is what llama.cpp computes on this CPU;
 * the AVX-512 file reproduces the same floats. Quantisers give the scalar path's exact bytes. */
#include <immintrin.h>
#include <string.h>

#include "engine/cpu/quant_impl.h"
#include "engine/cpu/quant_ktile_x86.h"
#include "engine/cpu/quant_tile_x86.h"
#include "engine/cpu/simd_x86.h"

/* ---- float types ------------------------------------------------------------------------ */

static void f32_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j),
                                     acc[j]);
    /* ggml's reduce order over its 4 accumulators: (acc0 + acc2) + (acc1 + acc3) */
    float sum = wf_hsum_ps8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[2]),
                                          _mm256_add_ps(acc[1], acc[3])));
    /* leftovers (all of a rank-8 B product): rounded product, then add, as llama.cpp's build
     * computes them; a fused multiply-add here flips a last bit now and then */
    for (; i < n; i++) sum += wf_no_contract_f32(x[i] * y[i]);
    *s = sum;
}

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *x = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(x + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(x[i]);
}

static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *y = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((void *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
    for (; i < n; i++) y[i] = _cvtss_sh(src[i], 0);
}

static void f16_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++) {
            __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(x + i + 8 * j)));
            __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(y + i + 8 * j)));
            acc[j] = _mm256_fmadd_ps(a, b, acc[j]);
        }
    /* ggml's GGML_F32Cx8_REDUCE: (acc0 + acc2) + (acc1 + acc3), the two 128-bit halves, two
     * hadds; the leftovers add in double (ggml_float), so F16 LoRA products round as
     * llama.cpp's do */
    __m256 r = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
    __m128 t1 = _mm_hadd_ps(t0, t0);
    double sum = (double)_mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    for (; i < n; i++) sum += (double)(_cvtsh_ss(x[i]) * _cvtsh_ss(y[i]));
    *s = (float)sum;
}

static inline __m256 bf16x8_to_ps(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *x = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf16x8_to_ps(x + i));
    for (; i < n; i++) dst[i] = wf_bf16_to_fp32(x[i]);
}

static void bf16_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(bf16x8_to_ps(x + i + 8 * j), bf16x8_to_ps(y + i + 8 * j),
                                     acc[j]);
    float sum = wf_hsum_ps8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
                                          _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += wf_bf16_to_fp32(x[i]) * wf_bf16_to_fp32(y[i]);
    *s = sum;
}

/* ---- legacy block types ----------------------------------------------------------------- */

WF_TILE_DEFINE(q4_0, WF_TK_Q4_0, false)
WF_TILE_DEFINE(q4_1, WF_TK_Q4_1, false)
WF_TILE_DEFINE(q5_0, WF_TK_Q5_0, false)
WF_TILE_DEFINE(q5_1, WF_TK_Q5_1, false)
WF_TILE_DEFINE(q8_0, WF_TK_Q8_0, false)

static void q4_0_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d));
        __m256i q = _mm256_sub_epi8(wf_nibbles32(x[i].qs), _mm256_set1_epi8(8));
        wf_store_i8x32_scaled(y, q, d);
    }
}

static void q4_1_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d)), m = _mm256_set1_ps(_cvtsh_ss(x[i].m));
        __m256i q = wf_nibbles32(x[i].qs);
        /* q*d + m rounded twice, as the scalar path (no fma) */
        for (int j = 0; j < 4; j++) {
            __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                _mm_loadl_epi64((const void *)((const uint8_t *)&q + 8 * j))));
            _mm256_storeu_ps(y + 8 * j, _mm256_add_ps(wf_no_contract(_mm256_mul_ps(f, d)), m));
        }
    }
}

static void q8_0_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK)
        wf_store_i8x32_scaled(y, _mm256_loadu_si256((const void *)x[i].qs),
                              _mm256_set1_ps(_cvtsh_ss(x[i].d)));
}

static void q8_0_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float d;
        wf_q8_block_avx2(x, &d, y[i].qs);
        y[i].d = _cvtss_sh(d, 0);
    }
}

static void q8_1_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float d;
        int sum = wf_q8_block_avx2(x, &d, y[i].qs);
        y[i].d = _cvtss_sh(d, 0);
        y[i].s = _cvtss_sh(d * (float)sum, 0);
    }
}

static void bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *y = dst;
    int64_t i = 0;
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    for (; i + 16 <= n; i += 16) {
        __m256i h[2];
        for (int t = 0; t < 2; t++) {
            __m256i u = _mm256_loadu_si256((const void *)(src + i + 8 * t));
            /* round to nearest even on the dropped 16 bits; NaN: truncated and quieted */
            __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
            __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
            h[t] = _mm256_blendv_epi8(r, q, nan);
        }
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h[0], h[1]), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256((void *)(y + i), p);
    }
    for (; i < n; i++) y[i] = wf_fp32_to_bf16(src[i]);
}

static void q5_0_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        __m256i q = _mm256_or_si256(wf_nibbles32(x[i].qs), _mm256_and_si256(wf_bits32(x[i].qh), _mm256_set1_epi8(0x10)));
        wf_store_i8x32_scaled(y, _mm256_sub_epi8(q, _mm256_set1_epi8(16)), _mm256_set1_ps(_cvtsh_ss(x[i].d)));
    }
}

static void q5_1_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d)), m = _mm256_set1_ps(_cvtsh_ss(x[i].m));
        __m256i q = _mm256_or_si256(wf_nibbles32(x[i].qs), _mm256_and_si256(wf_bits32(x[i].qh), _mm256_set1_epi8(0x10)));
        __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int j = 0; j < 4; j++) {
            __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[j]));
            _mm256_storeu_ps(y + 8 * j, _mm256_add_ps(wf_no_contract(_mm256_mul_ps(f, d)), m));
        }
    }
}

static void q8_1_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK)
        wf_store_i8x32_scaled(y, _mm256_loadu_si256((const void *)x[i].qs), _mm256_set1_ps(_cvtsh_ss(x[i].d)));
}

/* ---- K-quants --------------------------------------------------------------------------- */

static void q4_K_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q4_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / WF_QK_K; i++) {
        const float d = _cvtsh_ss(x[i].d), dmin = _cvtsh_ss(x[i].dmin);
        uint8_t sc[8], mn[8];
        wf_q4_K_scales(x[i].scales, sc, mn);
        const uint8_t *q = x[i].qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            __m256i bits = _mm256_loadu_si256((const void *)q);
            __m256i half[2] = {_mm256_and_si256(bits, m4), _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4)};
            for (int h = 0; h < 2; h++, y += 32) {
                /* d1 * q - m1 with d1 = d * sc and m1 = dmin * m rounded first, as ggml */
                const __m256 d1 = _mm256_set1_ps(d * sc[j + h]), m1 = _mm256_set1_ps(dmin * mn[j + h]);
                __m128i lo = _mm256_castsi256_si128(half[h]), hi = _mm256_extracti128_si256(half[h], 1);
                const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
                for (int t = 0; t < 4; t++) {
                    __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[t]));
                    _mm256_storeu_ps(y + 8 * t, _mm256_sub_ps(wf_no_contract(_mm256_mul_ps(d1, f)), m1));
                }
            }
        }
    }
}

static void q6_K_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q6_K *x = vx;
    const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / WF_QK_K; i++) {
        const float d = _cvtsh_ss(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        for (int j = 0; j < WF_QK_K; j += 128, ql += 64, qh += 32) {
            __m256i l1 = _mm256_loadu_si256((const void *)ql), l2 = _mm256_loadu_si256((const void *)(ql + 32));
            __m256i h = _mm256_loadu_si256((const void *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l1, m15), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l2, m15), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m15), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
            for (int t = 0; t < 4; t++) {
                __m256i qs = _mm256_sub_epi8(q[t], off);
                __m128i lo = _mm256_castsi256_si128(qs), hi = _mm256_extracti128_si256(qs, 1);
                /* 16 elements per scale; y = (d * sc) * q, rounded in that order */
                const int is = (j + 32 * t) / 16;
                const __m256 d0 = _mm256_set1_ps(d * (float)x[i].scales[is]);
                const __m256 d1 = _mm256_set1_ps(d * (float)x[i].scales[is + 1]);
                float *o = y + j + 32 * t;
                _mm256_storeu_ps(o, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
                _mm256_storeu_ps(o + 8, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
                _mm256_storeu_ps(o + 16, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
                _mm256_storeu_ps(o + 24, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
            }
        }
        y += WF_QK_K;
    }
}

/* 16 vector registers: at most 2x2 outputs per K-quant tile */
WF_KTILE_DEFINE(q4_K, wf_ktile_q4_K, 4)
WF_KTILE_DEFINE(q6_K, wf_ktile_q6_K, 4)

static void q8_K_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / WF_QK_K; i++, x += WF_QK_K) y[i].d = wf_q8_K_block_avx2(x, y[i].qs, y[i].bsums);
}

static void q8_K_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q8_K *x = vx;
    for (int64_t i = 0; i < n / WF_QK_K; i++, y += WF_QK_K)
        for (int j = 0; j < WF_QK_K; j += 32)
            wf_store_i8x32_scaled(y + j, _mm256_loadu_si256((const void *)(x[i].qs + j)), _mm256_set1_ps(x[i].d));
}

void wf_quant_fill_avx2(wf_quant_ops ops[WF_GGML_TYPE_COUNT]) {
    ops[WF_GGML_TYPE_F32].vec_dot = f32_vec_dot;
    ops[WF_GGML_TYPE_F16].to_float = f16_to_float;
    ops[WF_GGML_TYPE_F16].from_float = f16_from_float;
    ops[WF_GGML_TYPE_F16].from_float_ref = f16_from_float;
    ops[WF_GGML_TYPE_F16].vec_dot = f16_vec_dot;
    ops[WF_GGML_TYPE_BF16].to_float = bf16_to_float;
    ops[WF_GGML_TYPE_BF16].vec_dot = bf16_vec_dot;
    ops[WF_GGML_TYPE_Q4_0].to_float = q4_0_to_float;
    ops[WF_GGML_TYPE_Q4_0].vec_dot = q4_0_vec_dot;
    ops[WF_GGML_TYPE_Q4_0].vec_dot_tile = q4_0_vec_dot_tile;
    ops[WF_GGML_TYPE_Q4_1].to_float = q4_1_to_float;
    ops[WF_GGML_TYPE_Q4_1].vec_dot = q4_1_vec_dot;
    ops[WF_GGML_TYPE_Q4_1].vec_dot_tile = q4_1_vec_dot_tile;
    ops[WF_GGML_TYPE_Q5_0].vec_dot = q5_0_vec_dot;
    ops[WF_GGML_TYPE_Q5_0].vec_dot_tile = q5_0_vec_dot_tile;
    ops[WF_GGML_TYPE_Q5_1].vec_dot = q5_1_vec_dot;
    ops[WF_GGML_TYPE_Q5_1].vec_dot_tile = q5_1_vec_dot_tile;
    ops[WF_GGML_TYPE_Q8_0].to_float = q8_0_to_float;
    ops[WF_GGML_TYPE_Q8_0].from_float = q8_0_from_float;
    ops[WF_GGML_TYPE_Q8_0].vec_dot = q8_0_vec_dot;
    ops[WF_GGML_TYPE_Q8_0].vec_dot_tile = q8_0_vec_dot_tile;
    ops[WF_GGML_TYPE_Q8_1].from_float = q8_1_from_float;
    ops[WF_GGML_TYPE_BF16].from_float = bf16_from_float;
    ops[WF_GGML_TYPE_BF16].from_float_ref = bf16_from_float;
    ops[WF_GGML_TYPE_Q5_0].to_float = q5_0_to_float;
    ops[WF_GGML_TYPE_Q5_1].to_float = q5_1_to_float;
    ops[WF_GGML_TYPE_Q8_1].to_float = q8_1_to_float;
    ops[WF_GGML_TYPE_Q4_K].to_float = q4_K_to_float;
    ops[WF_GGML_TYPE_Q4_K].vec_dot = q4_K_vec_dot;
    ops[WF_GGML_TYPE_Q4_K].vec_dot_tile = q4_K_vec_dot_tile;
    ops[WF_GGML_TYPE_Q4_K].matvec = q4_K_matvec;
    ops[WF_GGML_TYPE_Q6_K].to_float = q6_K_to_float;
    ops[WF_GGML_TYPE_Q6_K].vec_dot = q6_K_vec_dot;
    ops[WF_GGML_TYPE_Q6_K].vec_dot_tile = q6_K_vec_dot_tile;
    ops[WF_GGML_TYPE_Q6_K].matvec = q6_K_matvec;
    ops[WF_GGML_TYPE_Q8_K].to_float = q8_K_to_float;
    ops[WF_GGML_TYPE_Q8_K].from_float = q8_K_from_float;
    ops[WF_GGML_TYPE_Q8_K].from_float_ref = q8_K_from_float;
}
