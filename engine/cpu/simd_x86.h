/* Internal to engine/cpu: small x86 SIMD building blocks shared by quant_avx2.c and
 * quant_avx512.c. Include only from files compiled with at least the AVX2/FMA/F16C flags. */
#ifndef WF_ENGINE_CPU_SIMD_X86_H
#define WF_ENGINE_CPU_SIMD_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "engine/cpu/no_contract.h" /* wf_no_contract_f32: the scalar form, for leftover loops */

/* Horizontal sum of 8 floats in a fixed order: (hi + lo) pairwise, then 2, then 1. */
static inline float wf_hsum_ps8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles first (elements 0..15), then high. */
static inline __m256i wf_nibbles32(const uint8_t *p) {
    __m128i t = _mm_loadu_si128((const void *)p);
    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

/* 32 bits -> 32 bytes, 0xff where the bit is set. */
static inline __m256i wf_bits32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

/* Unsigned x signed bytes, each int32 lane = sum of its 4 byte products. Pair sums fit int16
 * for every use here (|products| <= 63 * 128), so this equals VNNI's dpbusd. */
static inline __m256i wf_dot_u8i8x4(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* Signed x signed bytes (x never -128), same lane layout. */
static inline __m256i wf_dot_i8x4(__m256i x, __m256i y) {
    return wf_dot_u8i8x4(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* y[0..31] = (float)q[i] * d */
static inline void wf_store_i8x32_scaled(float *y, __m256i q, __m256 d) {
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
}

/* One Q8 block as ggml's x86 activation quantiser: d = amax/127, x * (127/amax) rounded half
 * to even, saturated to int8. Returns the sum of the quants. */
static inline int wf_q8_block_avx2(const float *x, float *d_out, int8_t *qs) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(x + 8 * j);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[j]));
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float max = _mm_cvtss_f32(m4);
    *d_out = max / 127.f;
    const __m256 id = _mm256_set1_ps(max != 0.0f ? 127.f / max : 0.0f);
    __m256i q[4];
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        __m256 r = _mm256_round_ps(_mm256_mul_ps(v[j], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[j] = _mm256_cvtps_epi32(r);
        sum = _mm256_add_epi32(sum, q[j]);
    }
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((void *)qs, p);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s4);
}

/* Keeps the compiler from fusing the multiply that produced v with a following add (GCC
 * contracts vector intrinsics under -ffp-contract=fast): dequantisers round twice, like the
 * scalar path. */
static inline __m256 wf_no_contract(__m256 v) {
    __asm__("" : "+x"(v));
    return v;
}

/* Q8_K quantisation of one 256-element block exactly as ggml's quantize_row_q8_K_ref: the
 * signed value of largest magnitude (first one on ties) sets iscale = -127/max; quants are
 * nearest_int(iscale * x), i.e. round half to even (its magic-number trick, for the |v| <= 127
 * that occur); bsums are sums of 16. Returns d (= 1/iscale). */
static inline float wf_q8_K_block_avx2(const float *x, int8_t *qs, int16_t *bsums) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax8 = _mm256_setzero_ps();
    for (int j = 0; j < 256; j += 8) amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax8, 1), _mm256_castps256_ps128(amax8));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    float max = 0.0f;
    for (int j = 0; j < 256; j++) {
        if (__builtin_fabsf(x[j]) == amax) {
            max = x[j];
            break;
        }
    }
    const float iscale = -127.f / max;
    if (amax == 0.0f || !__builtin_isfinite(iscale)) {
        /* all zero, or a denormal block whose iscale overflowed: ggml's quants are all 0 */
        memset(qs, 0, 256);
        memset(bsums, 0, 16 * sizeof(int16_t));
        return amax == 0.0f ? 0.0f : 1 / iscale;
    }
    const __m256 vi = _mm256_set1_ps(iscale);
    const __m256i lim = _mm256_set1_epi32(127);
    for (int j = 0; j < 256; j += 32) {
        __m256i q[4];
        for (int t = 0; t < 4; t++) {
            __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * t), vi);
            q[t] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), lim);
        }
        __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((void *)(qs + j), b);
        /* sums of 16 signed bytes: |sad| of the bytes biased to unsigned, minus the bias */
        __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(b, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
        int64_t s64[4];
        _mm256_storeu_si256((void *)s64, sad);
        bsums[j / 16] = (int16_t)(s64[0] + s64[1] - 16 * 128);
        bsums[j / 16 + 1] = (int16_t)(s64[2] + s64[3] - 16 * 128);
    }
    return 1 / iscale;
}

/* The 8 six-bit scales and mins of a Q4_K block. */
static inline void wf_q4_K_scales(const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        mn[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
