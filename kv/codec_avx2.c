/* AVX2 + F16C row kernels of the KV codec (see codec_impl.h). Rows whose length is not a
 * multiple of 8 take the scalar kernel; results are bit-identical to it (same operations in the
 * same order, round-to-nearest-even conversions). */
#include "kv/codec_impl.h"

#include <immintrin.h>

static void avx2_f16_to_f32(const uint16_t *src, float *dst, int n) {
    if (n & 7) {
        wf__kvc_kernels_scalar.f16_to_f32(src, dst, n);
        return;
    }
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(src + i))));
}

static void avx2_f32_to_f16(const float *src, uint16_t *dst, int n) {
    if (n & 7) {
        wf__kvc_kernels_scalar.f32_to_f16(src, dst, n);
        return;
    }
    for (int i = 0; i < n; i += 8)
        _mm_storeu_si128((void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
}

static void avx2_mul(float *x, const float *s, int n) {
    if (n & 7) {
        wf__kvc_kernels_scalar.mul(x, s, n);
        return;
    }
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(s + i)));
}

static void avx2_fill(float *x, float v, int n) {
    if (n & 7) {
        wf__kvc_kernels_scalar.fill(x, v, n);
        return;
    }
    __m256 b = _mm256_set1_ps(v);
    for (int i = 0; i < n; i += 8) _mm256_storeu_ps(x + i, b);
}

/* One butterfly stage inside a register: s holds each lane's partner (lane i ^ h); the lower
 * lane of a pair gets x + s (a + b), the upper s - x (a - b), picked by the blend mask. */
static inline __m256 stage_in(__m256 x, __m256 s, int upper_mask) {
    __m256 sum = _mm256_add_ps(x, s), dif = _mm256_sub_ps(s, x);
    switch (upper_mask) {
    case 0xAA: return _mm256_blend_ps(sum, dif, 0xAA);
    case 0xCC: return _mm256_blend_ps(sum, dif, 0xCC);
    default: return _mm256_blend_ps(sum, dif, 0xF0);
    }
}

static void avx2_fwht(float *x, int n) {
    if (n < 8) {
        wf__kvc_kernels_scalar.fwht(x, n);
        return;
    }
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        v = stage_in(v, _mm256_permute_ps(v, 0xB1), 0xAA);
        v = stage_in(v, _mm256_permute_ps(v, 0x4E), 0xCC);
        v = stage_in(v, _mm256_permute2f128_ps(v, v, 0x01), 0xF0);
        _mm256_storeu_ps(x + i, v);
    }
    for (int h = 8; h < n; h <<= 1)
        for (int i = 0; i < n; i += h << 1)
            for (int j = i; j < i + h; j += 8) {
                __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
                _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
            }
}

static float avx2_absmax(const float *x, int n) {
    if (n & 7) return wf__kvc_kernels_scalar.absmax(x, n);
    const __m256 mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) /* max(v, m) returns m when v is NaN: NaN is ignored */
        m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), mask), m);
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_shuffle_ps(r, r, 1));
    return _mm_cvtss_f32(r);
}

static void avx2_absmax_acc(const float *x, float *m, int n) {
    if (n & 7) {
        wf__kvc_kernels_scalar.absmax_acc(x, m, n);
        return;
    }
    const __m256 mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(m + i, _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), mask),
                                              _mm256_loadu_ps(m + i)));
}

static void avx2_quantize(const float *x, const float *inv, int qmax, uint8_t *codes, int n) {
    if (n & 7) {
        wf__kvc_kernels_scalar.quantize(x, inv, qmax, codes, n);
        return;
    }
    const __m256 hi = _mm256_set1_ps((float)qmax), lo = _mm256_set1_ps(-(float)qmax);
    const __m256i off = _mm256_set1_epi32(qmax);
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(inv + i));
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi); /* max(NaN, lo) = lo, as the scalar */
        __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), off);
        __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64((void *)(codes + i), _mm_packus_epi16(q16, q16));
    }
}

static void avx2_dequantize(const uint8_t *codes, const float *scale, int qmax, float *x, int n) {
    if (n & 7) {
        wf__kvc_kernels_scalar.dequantize(codes, scale, qmax, x, n);
        return;
    }
    const __m256i off = _mm256_set1_epi32(qmax);
    for (int i = 0; i < n; i += 8) {
        __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(codes + i)));
        __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(c, off));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(v, _mm256_loadu_ps(scale + i)));
    }
}

/* 8 floats -> 8 codes in the low 8 bytes. */
static inline __m128i quant8(const float *x, const float *inv, __m256 lo, __m256 hi, __m256i off) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(inv));
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), off);
    __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    return _mm_packus_epi16(q16, q16);
}

static void avx2_quantize4(const float *x, const float *inv, uint8_t *packed, int n) {
    if (n & 15) {
        wf__kvc_kernels_scalar.quantize4(x, inv, packed, n);
        return;
    }
    const __m256 hi = _mm256_set1_ps(7.0f), lo = _mm256_set1_ps(-7.0f);
    const __m256i off = _mm256_set1_epi32(7);
    const __m128i nib = _mm_set1_epi16(0x1001); /* even byte x 1 + odd byte x 16 */
    for (int i = 0; i < n; i += 16) {
        __m128i c = _mm_unpacklo_epi64(quant8(x + i, inv + i, lo, hi, off),
                                       quant8(x + i + 8, inv + i + 8, lo, hi, off));
        __m128i p = _mm_maddubs_epi16(c, nib);
        _mm_storel_epi64((void *)(packed + i / 2), _mm_packus_epi16(p, p));
    }
}

static void avx2_dequantize4(const uint8_t *packed, const float *scale, float *x, int n) {
    if (n & 15) {
        wf__kvc_kernels_scalar.dequantize4(packed, scale, x, n);
        return;
    }
    const __m128i low = _mm_set1_epi8(15);
    const __m256i off = _mm256_set1_epi32(7);
    for (int i = 0; i < n; i += 16) {
        __m128i b = _mm_loadl_epi64((const void *)(packed + i / 2));
        __m128i c = _mm_unpacklo_epi8(_mm_and_si128(b, low),
                                      _mm_and_si128(_mm_srli_epi16(b, 4), low));
        __m256 v0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(c), off));
        __m256 v1 = _mm256_cvtepi32_ps(
            _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(c, 8)), off));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(v0, _mm256_loadu_ps(scale + i)));
        _mm256_storeu_ps(x + i + 8, _mm256_mul_ps(v1, _mm256_loadu_ps(scale + i + 8)));
    }
}

const wf__kvc_kernels wf__kvc_kernels_avx2 = {
    .name = "avx2",
    .f16_to_f32 = avx2_f16_to_f32,
    .f32_to_f16 = avx2_f32_to_f16,
    .mul = avx2_mul,
    .fill = avx2_fill,
    .fwht = avx2_fwht,
    .absmax = avx2_absmax,
    .absmax_acc = avx2_absmax_acc,
    .quantize = avx2_quantize,
    .dequantize = avx2_dequantize,
    .quantize4 = avx2_quantize4,
    .dequantize4 = avx2_dequantize4,
};
