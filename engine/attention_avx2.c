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

/* GGML_F32Cx16_REDUCE order on 64 slots held as 8 vectors of 8: slots 0-15 = a0,a1;
 * 16-31 = a2,a3; 32-47 = a4,a5; 48-63 = a6,a7. */
static inline float reduce_slots(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4,
                                 __m256 a5, __m256 a6, __m256 a7) {
    __m256 lo = _mm256_add_ps(_mm256_add_ps(a0, a4), _mm256_add_ps(a2, a6));
    __m256 hi = _mm256_add_ps(_mm256_add_ps(a1, a5), _mm256_add_ps(a3, a7));
    return wf_attn_tree8(_mm256_add_ps(lo, hi));
}

/* ggml_vec_dot_f16 of a half row already widened to floats (x) with y: 64-slot body in eight
 * named accumulators (kept in registers), tail in double. */
static float dotf8(int n, const float *x, const float *y) {
    int np = n & ~63;
    double sumf = 0.0;
    if (np > 0) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
               a7 = a0;
        for (int i = 0; i < np; i += 64) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
            a4 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 32), _mm256_loadu_ps(y + i + 32), a4);
            a5 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 40), _mm256_loadu_ps(y + i + 40), a5);
            a6 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 48), _mm256_loadu_ps(y + i + 48), a6);
            a7 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 56), _mm256_loadu_ps(y + i + 56), a7);
        }
        sumf = (double)reduce_slots(a0, a1, a2, a3, a4, a5, a6, a7);
    }
    for (int i = np; i < n; i++) sumf += (double)(x[i] * y[i]);
    return (float)sumf;
}

/* The 16-lane half of reduce_slots before its tree: lanes l and l+8 of the 64 slots summed. */
static inline __m256 row_lanes64(const __m256 *k, const float *y) {
    const __m256 z = _mm256_setzero_ps();
    __m256 a0 = _mm256_fmadd_ps(k[0], _mm256_loadu_ps(y), z);
    __m256 a1 = _mm256_fmadd_ps(k[1], _mm256_loadu_ps(y + 8), z);
    __m256 a2 = _mm256_fmadd_ps(k[2], _mm256_loadu_ps(y + 16), z);
    __m256 a3 = _mm256_fmadd_ps(k[3], _mm256_loadu_ps(y + 24), z);
    __m256 a4 = _mm256_fmadd_ps(k[4], _mm256_loadu_ps(y + 32), z);
    __m256 a5 = _mm256_fmadd_ps(k[5], _mm256_loadu_ps(y + 40), z);
    __m256 a6 = _mm256_fmadd_ps(k[6], _mm256_loadu_ps(y + 48), z);
    __m256 a7 = _mm256_fmadd_ps(k[7], _mm256_loadu_ps(y + 56), z);
    __m256 lo = _mm256_add_ps(_mm256_add_ps(a0, a4), _mm256_add_ps(a2, a6));
    __m256 hi = _mm256_add_ps(_mm256_add_ps(a1, a5), _mm256_add_ps(a3, a7));
    return _mm256_add_ps(lo, hi);
}

/* Scores of nh heads (a compile-time constant after inlining): sc[j * ld + p] =
 * f16dot(K[p], q_j) * scale, each K row widened once for every head; the maxima go to mx[j].
 * For head size 64 the final reductions of eight rows are done together (tree8x8). Also
 * prefetches the K rows ahead and the V rows the output phase reads next. */
static inline __attribute__((always_inline)) void
scores_nh(int nh, int hd, const float *qf, float scale, const wf_attn_kv_view *kv, int n_pos,
          float *sc, size_t ld, float *mx) {
    for (int p = 0; p < n_pos && p < WF_ATTN_PF_AHEAD; p++) wf_attn_prefetch_row(kv->k_rows[p], hd, 0);
    float m[WF_ATTN_MAX_HEADS];
    for (int j = 0; j < nh; j++) m[j] = -INFINITY;
    int p = 0;
    if (hd == 64) {
        const __m256 vscale = _mm256_set1_ps(scale);
        __m256 vm[WF_ATTN_MAX_HEADS];
        for (int j = 0; j < nh; j++) vm[j] = _mm256_set1_ps(-INFINITY);
        for (; p + 8 <= n_pos; p += 8) {
            __m256 rows[WF_ATTN_MAX_HEADS][8];
            for (int r = 0; r < 8; r++) {
                if (p + r + WF_ATTN_PF_AHEAD < n_pos) wf_attn_prefetch_row(kv->k_rows[p + r + WF_ATTN_PF_AHEAD], hd, 0);
                wf_attn_prefetch_row(kv->v_rows[p + r], hd, 1); /* to L2: the output phase reads it */
                const uint16_t *k = kv->k_rows[p + r];
                __m256 kr[8];
                WF_ATTN_UNROLL
                for (int i = 0; i < 8; i++) kr[i] = wf_attn_load_h8(k + 8 * i);
                WF_ATTN_UNROLL
                for (int j = 0; j < nh; j++) rows[j][r] = row_lanes64(kr, qf + (size_t)j * 256);
            }
            for (int j = 0; j < nh; j++) {
                __m256 v = _mm256_mul_ps(wf_attn_tree8x8(rows[j]), vscale);
                _mm256_storeu_ps(sc + (size_t)j * ld + (size_t)p, v);
                vm[j] = _mm256_max_ps(v, vm[j]); /* NaN scores are skipped, as below */
            }
        }
        for (int j = 0; j < nh; j++) {
            float t[8];
            _mm256_storeu_ps(t, vm[j]);
            for (int i = 0; i < 8; i++) m[j] = t[i] > m[j] ? t[i] : m[j];
        }
    }
    for (; p < n_pos; p++) {
        if (p + WF_ATTN_PF_AHEAD < n_pos) wf_attn_prefetch_row(kv->k_rows[p + WF_ATTN_PF_AHEAD], hd, 0);
        wf_attn_prefetch_row(kv->v_rows[p], hd, 1);
        const uint16_t *k = kv->k_rows[p];
        float kf[256];
        for (int i = 0; i < hd; i += 8) _mm256_storeu_ps(kf + i, wf_attn_load_h8(k + i));
        for (int j = 0; j < nh; j++) {
            float v = dotf8(hd, kf, qf + (size_t)j * 256) * scale;
            sc[(size_t)j * ld + (size_t)p] = v;
            m[j] = v > m[j] ? v : m[j];
        }
    }
    for (int j = 0; j < nh; j++) mx[j] = m[j];
}

void wf_attn_softmax_prob_avx2(float *sc, int n_pos, float mx) {
    double sum = 0.0;
    const __m256 vmx = _mm256_set1_ps(mx);
    int c = 0;
    for (; c + 16 <= n_pos; c += 16) {
        __m256 e0 = expf8(_mm256_sub_ps(_mm256_loadu_ps(sc + c), vmx));
        __m256 e1 = expf8(_mm256_sub_ps(_mm256_loadu_ps(sc + c + 8), vmx));
        _mm256_storeu_ps(sc + c, e0);
        _mm256_storeu_ps(sc + c + 8, e1);
        sum += (double)wf_attn_tree8(_mm256_add_ps(e0, e1)); /* lanes l and l+8 first */
    }
    if (c < n_pos) {
        float lane[16];
        for (int l = 0; l < 16; l++) lane[l] = c + l < n_pos ? sc[c + l] : -INFINITY;
        __m256 e0 = expf8(_mm256_sub_ps(_mm256_loadu_ps(lane), vmx));
        __m256 e1 = expf8(_mm256_sub_ps(_mm256_loadu_ps(lane + 8), vmx));
        _mm256_storeu_ps(lane, e0);
        _mm256_storeu_ps(lane + 8, e1);
        for (int l = 0; c + l < n_pos; l++) sc[c + l] = lane[l];
        sum += (double)wf_attn_tree8(_mm256_add_ps(e0, e1));
    }
    const __m256 vinv = _mm256_set1_ps((float)(1.0 / sum));
    int p = 0;
    for (; p + 8 <= n_pos; p += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(sc + p), vinv),
                                    _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(sc + p, _mm256_cvtph_ps(h));
    }
    for (; p < n_pos; p++) {
        float v = sc[p] * _mm256_cvtss_f32(vinv);
        sc[p] = _cvtsh_ss((unsigned short)_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
    }
}

/* Output of nh heads for dims [dc, dc + 8): acc[slot] = sum over p = slot (mod 64), in order,
 * of fma(V[p], prob[p]); the 64 slots combined as (s + s+32) + (s+16 + s+48), then the 16-lane
 * tree. Slot sums live in registers (empty slots are exact zeros), so nothing is cleared or
 * accumulated in memory; each V chunk is widened once for every head. */
static inline __attribute__((always_inline)) void
out_nh(int nh, int hd, const wf_attn_kv_view *kv, int n_pos, const float *pf, size_t ld,
       float *out) {
    const uint16_t *const *vr = kv->v_rows;
    for (int dc = 0; dc < hd; dc += 8) {
        __m256 t[WF_ATTN_MAX_HEADS][16];
        for (int l = 0; l < 16; l++) {
            __m256 half[2][WF_ATTN_MAX_HEADS];
            for (int pair = 0; pair < 2; pair++) {
                /* slots l + 16 * pair and l + 16 * pair + 32 */
                const int s0 = l + 16 * pair;
                __m256 a[WF_ATTN_MAX_HEADS], b[WF_ATTN_MAX_HEADS];
                WF_ATTN_UNROLL
                for (int j = 0; j < nh; j++) a[j] = b[j] = _mm256_setzero_ps();
                for (int p = s0; p < n_pos; p += 64) {
                    __m256 v = wf_attn_load_h8(vr[p] + dc);
                    WF_ATTN_UNROLL
                    for (int j = 0; j < nh; j++)
                        a[j] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(pf + (size_t)j * ld + p),
                                               a[j]);
                    if (p + 32 < n_pos) {
                        __m256 w = wf_attn_load_h8(vr[p + 32] + dc);
                        WF_ATTN_UNROLL
                        for (int j = 0; j < nh; j++)
                            b[j] = _mm256_fmadd_ps(
                                w, _mm256_broadcast_ss(pf + (size_t)j * ld + p + 32), b[j]);
                    }
                }
                WF_ATTN_UNROLL
                for (int j = 0; j < nh; j++) half[pair][j] = _mm256_add_ps(a[j], b[j]);
            }
            WF_ATTN_UNROLL
            for (int j = 0; j < nh; j++) t[j][l] = _mm256_add_ps(half[0][j], half[1][j]);
        }
        for (int j = 0; j < nh; j++) {
            for (int w = 8; w >= 1; w /= 2)
                for (int l = 0; l < w; l++) t[j][l] = _mm256_add_ps(t[j][l], t[j][l + w]);
            _mm256_storeu_ps(out + (size_t)j * (size_t)hd + dc, t[j][0]);
        }
    }
}

static inline __attribute__((always_inline)) void
group_nh(int nh, const float *q, int hd, float scale, const wf_attn_kv_view *kv, int n_pos,
         wf_attn_scratch *s, float *out) {
    /* q rounded to half (as ggml converts src1 to the F16 vec_dot type), kept as floats */
    float qf[WF_ATTN_MAX_HEADS][256];
    for (int j = 0; j < nh; j++)
        for (int i = 0; i < hd; i += 8) {
            __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(q + (size_t)j * (size_t)hd + i),
                                        _MM_FROUND_TO_NEAREST_INT);
            _mm256_storeu_ps(qf[j] + i, _mm256_cvtph_ps(h));
        }
    const size_t ld = (size_t)s->max_ctx;
    float mx[WF_ATTN_MAX_HEADS];
    scores_nh(nh, hd, qf[0], scale, kv, n_pos, s->scores, ld, mx);
    if (kv->first > 0)
        for (int j = 0; j < nh; j++)
            wf__attn_mask_prefix(s->scores + (size_t)j * ld, kv->first, n_pos, &mx[j]);
    for (int j = 0; j < nh; j++) wf_attn_softmax_prob_avx2(s->scores + (size_t)j * ld, n_pos, mx[j]);
    out_nh(nh, hd, kv, n_pos, s->scores, ld, out);
}

_Static_assert(WF_ATTN_MAX_HEADS == 4, "group_nh is instantiated for 1..4 heads");

void wf_attn_group_avx2(const float *q, int n_q, int hd, float scale, const wf_attn_kv_view *kv,
                        int n_pos, wf_attn_scratch *s, float *out) {
    for (int j0 = 0; j0 < n_q; j0 += WF_ATTN_MAX_HEADS) {
        const float *qj = q + (size_t)j0 * (size_t)hd;
        float *oj = out + (size_t)j0 * (size_t)hd;
        switch (n_q - j0 < WF_ATTN_MAX_HEADS ? n_q - j0 : WF_ATTN_MAX_HEADS) {
        case 1: group_nh(1, qj, hd, scale, kv, n_pos, s, oj); break;
        case 2: group_nh(2, qj, hd, scale, kv, n_pos, s, oj); break;
        case 3: group_nh(3, qj, hd, scale, kv, n_pos, s, oj); break;
        default: group_nh(4, qj, hd, scale, kv, n_pos, s, oj); break;
        }
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

/* The conversions inline (F16C, the same round-to-nearest-even as wf_fp32_to_fp16), 8 lanes
 * at a time; only the table lookups stay scalar. The out-of-range cases are blended in. */
void wf_attn_rope_neox_avx2(const float *cache, int n_rot, float *x) {
    const int h = n_rot / 2;
    int k = 0;
    for (; k + 8 <= h; k += 8) {
        /* cache holds (cos, sin) pairs: split 16 floats into 8 cos and 8 sin in order */
        const __m256 a = _mm256_loadu_ps(cache + 2 * k), b = _mm256_loadu_ps(cache + 2 * k + 8);
        const __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0)));
        const __m256 s = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0)));
        const __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + h);
        /* fmsub(x0, c, x1 * s) = fma(x0, c, -(x1 * s)): one rounding of the same exact value */
        _mm256_storeu_ps(x + k, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
        _mm256_storeu_ps(x + k + h, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
    }
    for (; k < h; k++) {
        const float c = cache[2 * k], s = cache[2 * k + 1];
        const float x0 = x[k], x1 = x[k + h];
        x[k] = fmaf(x0, c, -(x1 * s));
        x[k + h] = fmaf(x0, s, x1 * c);
    }
}

void wf_attn_geglu_avx2(const uint16_t *tab, size_t n, float *gate, const float *up) {
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
        uint16_t h[8];
        _mm_storeu_si128((void *)h, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        for (int j = 0; j < 8; j++) h[j] = tab[h[j]];
        __m256 y = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const void *)h)), u);
        y = _mm256_blendv_ps(y, _mm256_mul_ps(x, u), _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        y = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), y);
        _mm256_storeu_ps(gate + i, y);
    }
    for (; i < n; i++) {
        const float x = gate[i];
        if (x <= -10.0f)
            gate[i] = 0.0f;
        else if (x >= 10.0f)
            gate[i] = x * up[i];
        else
            gate[i] = _cvtsh_ss(tab[_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)]) * up[i];
    }
}
