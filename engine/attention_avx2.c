/* AVX2/FMA/F16C path of attention.c: the same operations lane by lane (fused multiply-adds,
 * the same accumulator slots and reduction trees), so the bits equal the portable code's.
 * Built with -mavx2 -mfma -mf16c; called only when the CPU has them. Vector code is written
 * with explicit intrinsics: no mul+add here is left for the compiler to contract. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/attention.h"

/* ggml_v_expf on 8 lanes; lanes whose scale exponent leaves the normal range take the scalar
 * routine (scalef semantics for subnormal results). */
static inline __m256 expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b,
                                        _mm256_set1_ps(0x1.573e2ep-5f)),
                        u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b,
                                        _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    /* 2^n for n in [-126, 127] is exact as a float built from its exponent bits */
    const __m256 lo = _mm256_set1_ps(-126.0f), hi = _mm256_set1_ps(127.0f);
    __m256 out_of_range = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(n, lo, _CMP_LT_OQ),
                                                    _mm256_cmp_ps(n, hi, _CMP_GT_OQ)),
                                       _mm256_cmp_ps(n, n, _CMP_UNORD_Q));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                  23);
    __m256 res = _mm256_mul_ps(j, _mm256_castsi256_ps(e));
    if (__builtin_expect(_mm256_movemask_ps(out_of_range) != 0, 0)) {
        float xs[8], rs[8];
        _mm256_storeu_ps(xs, x);
        _mm256_storeu_ps(rs, res);
        int m = _mm256_movemask_ps(out_of_range);
        for (int l = 0; l < 8; l++)
            if (m & (1 << l)) rs[l] = wf_attn_expf(xs[l]);
        res = _mm256_loadu_ps(rs);
    }
    return res;
}

/* pairwise tree of 8 lanes with the order of _mm512_reduce_add_ps's lower levels:
 * l+4, l+2, l+1 */
static inline float tree8(__m256 t) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    __m128 c = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(c);
}

static inline __m256 load_h8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* ggml_vec_dot_f16 (AVX-512 F32Cx16 layout): 64 slots = 8 vectors of 8 here. */
static float f16dot8(int n, const uint16_t *x, const float *yf) {
    int np = n & ~63;
    double sumf = 0.0;
    if (np > 0) {
        __m256 acc[8];
        for (int k = 0; k < 8; k++) acc[k] = _mm256_setzero_ps();
        for (int i = 0; i < np; i += 64)
            for (int k = 0; k < 8; k++)
                acc[k] = _mm256_fmadd_ps(load_h8(x + i + 8 * k), _mm256_loadu_ps(yf + i + 8 * k),
                                         acc[k]);
        /* slots 0-15 = acc0,acc1; 16-31 = acc2,acc3; 32-47 = acc4,acc5; 48-63 = acc6,acc7 */
        __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
        __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
        sumf = (double)tree8(_mm256_add_ps(lo, hi));
    }
    for (int i = np; i < n; i++) {
        float xi = _cvtsh_ss(x[i]);
        sumf += (double)(xi * yf[i]);
    }
    return (float)sumf;
}

void wf_attn_one_avx2(const float *q, int hd, float scale, const wf_attn_kv_view *kv, int n_pos,
                      wf_attn_scratch *s, float *out) {
    /* q rounded to half (as ggml converts src1 to the F16 vec_dot type), kept as floats */
    float qf[256];
    for (int i = 0; i < hd; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(q + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(qf + i, _mm256_cvtph_ps(h));
    }
    float *sc = s->scores;
    float mx = -INFINITY;
    for (int p = 0; p < n_pos; p++) {
        float v = f16dot8(hd, kv->k_rows[p], qf) * scale;
        sc[p] = v;
        mx = v > mx ? v : mx;
    }
    double sum = 0.0;
    const __m256 vmx = _mm256_set1_ps(mx);
    int c = 0;
    for (; c + 16 <= n_pos; c += 16) {
        __m256 e0 = expf8(_mm256_sub_ps(_mm256_loadu_ps(sc + c), vmx));
        __m256 e1 = expf8(_mm256_sub_ps(_mm256_loadu_ps(sc + c + 8), vmx));
        _mm256_storeu_ps(sc + c, e0);
        _mm256_storeu_ps(sc + c + 8, e1);
        sum += (double)tree8(_mm256_add_ps(e0, e1)); /* lanes l and l+8 first */
    }
    if (c < n_pos) {
        float lane[16];
        for (int l = 0; l < 16; l++) lane[l] = c + l < n_pos ? sc[c + l] : -INFINITY;
        __m256 e0 = expf8(_mm256_sub_ps(_mm256_loadu_ps(lane), vmx));
        __m256 e1 = expf8(_mm256_sub_ps(_mm256_loadu_ps(lane + 8), vmx));
        _mm256_storeu_ps(lane, e0);
        _mm256_storeu_ps(lane + 8, e1);
        for (int l = 0; c + l < n_pos; l++) sc[c + l] = lane[l];
        sum += (double)tree8(_mm256_add_ps(e0, e1));
    }
    const __m256 vinv = _mm256_set1_ps((float)(1.0 / sum));
    int p = 0;
    for (; p + 8 <= n_pos; p += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(sc + p), vinv),
                                    _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(s->prob + p), h);
    }
    for (; p < n_pos; p++) {
        float v = sc[p] * _mm256_cvtss_f32(vinv);
        s->prob[p] = (uint16_t)_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
    }
    /* V: acc[slot][d] += v[p][d] * prob[p], slot = p % 64 */
    float *acc = s->acc;
    memset(acc, 0, (size_t)64 * (size_t)hd * sizeof(float));
    for (p = 0; p < n_pos; p++) {
        if (s->prob[p] == 0) continue;
        const __m256 pr = _mm256_set1_ps(_cvtsh_ss(s->prob[p]));
        float *a = acc + (size_t)(p & 63) * (size_t)hd;
        const uint16_t *v = kv->v_rows[p];
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(a + d, _mm256_fmadd_ps(load_h8(v + d), pr, _mm256_loadu_ps(a + d)));
    }
    for (int d = 0; d < hd; d += 8) {
        __m256 t[16];
#define A(sl) _mm256_loadu_ps(acc + (size_t)(sl) * (size_t)hd + d)
        for (int l = 0; l < 16; l++)
            t[l] = _mm256_add_ps(_mm256_add_ps(A(l), A(l + 32)), _mm256_add_ps(A(l + 16), A(l + 48)));
#undef A
        for (int w = 8; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) t[l] = _mm256_add_ps(t[l], t[l + w]);
        _mm256_storeu_ps(out + d, t[0]);
    }
}

void wf_attn_swiglu_avx2(size_t n, float *gate, const float *up) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(gate + i);
        __m256 e = expf8(_mm256_sub_ps(zero, x));
        __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, e));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) gate[i] = wf_attn_silu(gate[i]) * up[i];
}
