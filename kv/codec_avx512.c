/* AVX-512 row kernels of the KV codec (see codec_impl.h): 16 lanes, so the first four
 * Hadamard stages run inside one register. Rows whose length is not a multiple of 16 fall back
 * to the AVX2 kernels (and those to scalar); results are bit-identical to the scalar ones. */
#include "kv/codec_impl.h"

#include <immintrin.h>

static void avx512_f16_to_f32(const uint16_t *src, float *dst, int n) {
    if (n & 15) {
        wf__kvc_kernels_avx2.f16_to_f32(src, dst, n);
        return;
    }
    for (int i = 0; i < n; i += 16)
        _mm512_storeu_ps(dst + i,
                         _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(src + i))));
}

static void avx512_f32_to_f16(const float *src, uint16_t *dst, int n) {
    if (n & 15) {
        wf__kvc_kernels_avx2.f32_to_f16(src, dst, n);
        return;
    }
    for (int i = 0; i < n; i += 16)
        _mm256_storeu_si256((void *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
}

static void avx512_mul(float *x, const float *s, int n) {
    if (n & 15) {
        wf__kvc_kernels_avx2.mul(x, s, n);
        return;
    }
    for (int i = 0; i < n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(s + i)));
}

static void avx512_fill(float *x, float v, int n) {
    if (n & 15) {
        wf__kvc_kernels_avx2.fill(x, v, n);
        return;
    }
    __m512 b = _mm512_set1_ps(v);
    for (int i = 0; i < n; i += 16) _mm512_storeu_ps(x + i, b);
}

/* Lane i pairs with lane i ^ h (s holds the partner); lanes in `upper` get s - x, others x + s. */
static inline __m512 stage_in(__m512 x, __m512 s, __mmask16 upper) {
    return _mm512_mask_blend_ps(upper, _mm512_add_ps(x, s), _mm512_sub_ps(s, x));
}

static void avx512_fwht(float *x, int n) {
    if (n < 16) {
        wf__kvc_kernels_avx2.fwht(x, n);
        return;
    }
    for (int i = 0; i < n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        v = stage_in(v, _mm512_permute_ps(v, 0xB1), 0xAAAA);
        v = stage_in(v, _mm512_permute_ps(v, 0x4E), 0xCCCC);
        v = stage_in(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)), 0xF0F0);
        v = stage_in(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)), 0xFF00);
        _mm512_storeu_ps(x + i, v);
    }
    for (int h = 16; h < n; h <<= 1)
        for (int i = 0; i < n; i += h << 1)
            for (int j = i; j < i + h; j += 16) {
                __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + h);
                _mm512_storeu_ps(x + j, _mm512_add_ps(a, b));
                _mm512_storeu_ps(x + j + h, _mm512_sub_ps(a, b));
            }
}

static float avx512_absmax(const float *x, int n) {
    if (n & 15) return wf__kvc_kernels_avx2.absmax(x, n);
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) /* max(v, m) returns m when v is NaN: NaN is ignored */
        m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);
    return _mm512_reduce_max_ps(m);
}

static void avx512_absmax_acc(const float *x, float *m, int n) {
    if (n & 15) {
        wf__kvc_kernels_avx2.absmax_acc(x, m, n);
        return;
    }
    for (int i = 0; i < n; i += 16)
        _mm512_storeu_ps(m + i, _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)),
                                              _mm512_loadu_ps(m + i)));
}

static void avx512_quantize(const float *x, const float *inv, int qmax, uint8_t *codes, int n) {
    if (n & 15) {
        wf__kvc_kernels_avx2.quantize(x, inv, qmax, codes, n);
        return;
    }
    const __m512 hi = _mm512_set1_ps((float)qmax), lo = _mm512_set1_ps(-(float)qmax);
    const __m512i off = _mm512_set1_epi32(qmax);
    for (int i = 0; i < n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(inv + i));
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), off);
        _mm_storeu_si128((void *)(codes + i), _mm512_cvtepi32_epi8(q));
    }
}

static void avx512_dequantize(const uint8_t *codes, const float *scale, int qmax, float *x,
                              int n) {
    if (n & 15) {
        wf__kvc_kernels_avx2.dequantize(codes, scale, qmax, x, n);
        return;
    }
    const __m512i off = _mm512_set1_epi32(qmax);
    for (int i = 0; i < n; i += 16) {
        __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(codes + i)));
        __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(c, off));
        _mm512_storeu_ps(x + i, _mm512_mul_ps(v, _mm512_loadu_ps(scale + i)));
    }
}

static void avx512_quantize4(const float *x, const float *inv, uint8_t *packed, int n) {
    if (n & 15) {
        wf__kvc_kernels_avx2.quantize4(x, inv, packed, n);
        return;
    }
    const __m512 hi = _mm512_set1_ps(7.0f), lo = _mm512_set1_ps(-7.0f);
    const __m512i off = _mm512_set1_epi32(7);
    const __m128i nib = _mm_set1_epi16(0x1001); /* even byte x 1 + odd byte x 16 */
    for (int i = 0; i < n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(inv + i));
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        __m128i c = _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(v), off));
        __m128i p = _mm_maddubs_epi16(c, nib);
        _mm_storel_epi64((void *)(packed + i / 2), _mm_packus_epi16(p, p));
    }
}

static void avx512_dequantize4(const uint8_t *packed, const float *scale, float *x, int n) {
    if (n & 15) {
        wf__kvc_kernels_avx2.dequantize4(packed, scale, x, n);
        return;
    }
    const __m128i low = _mm_set1_epi8(15);
    const __m512i off = _mm512_set1_epi32(7);
    for (int i = 0; i < n; i += 16) {
        __m128i b = _mm_loadl_epi64((const void *)(packed + i / 2));
        __m128i c = _mm_unpacklo_epi8(_mm_and_si128(b, low),
                                      _mm_and_si128(_mm_srli_epi16(b, 4), low));
        __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(c), off));
        _mm512_storeu_ps(x + i, _mm512_mul_ps(v, _mm512_loadu_ps(scale + i)));
    }
}

const wf__kvc_kernels wf__kvc_kernels_avx512 = {
    .name = "avx512",
    .f16_to_f32 = avx512_f16_to_f32,
    .f32_to_f16 = avx512_f32_to_f16,
    .mul = avx512_mul,
    .fill = avx512_fill,
    .fwht = avx512_fwht,
    .absmax = avx512_absmax,
    .absmax_acc = avx512_absmax_acc,
    .quantize = avx512_quantize,
    .dequantize = avx512_dequantize,
    .quantize4 = avx512_quantize4,
    .dequantize4 = avx512_dequantize4,
};
