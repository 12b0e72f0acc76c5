/* Internal to engine/cpu (included by quant_avx512.c and quant_kpanel_avx512.c): Q4_K and Q6_K register tiles of NR
 * weight rows x NP pairs of activation rows, a pair sharing one 512-bit register: its low
 * 256 bits hold the first row's lanes and its high 256 bits the second's, each lane computed
 * with exactly the integer and float operations of quant_ktile_x86.h (ggml's AVX2 order), so
 * every output equals the single dot product bit for bit. A weight block is unpacked once per
 * 512-bit register pair instead of once per 256-bit output: half the unpacking and half the
 * multiply-add instructions of the 256-bit tiles for batched (prefill) matmuls. nc (<= 2 NP)
 * is the number of real activation rows; a missing second row repeats the first and is not
 * stored. */
#ifndef WF_ENGINE_CPU_QUANT_KPAIR_AVX512_H
#define WF_ENGINE_CPU_QUANT_KPAIR_AVX512_H

#include "engine/cpu/quant_tile_x86.h"

#define WF_KP_MAXR 2
#define WF_KP_MAXP 2

static WF_INLINE __m512i wf_kp_join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* acc + a16 . b16 in int32 pairs: VNNI's dpwssd fuses madd_epi16 and the add (exact, neither
 * form saturates: |scale * pair sum| < 2^16 here), one instruction fewer per product. */
static WF_INLINE __m512i wf_kp_madd_acc(__m512i acc, __m512i a16, __m512i b16, bool vnni) {
    if (vnni) return _mm512_dpwssd_epi32(acc, a16, b16);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a16, b16));
}

static WF_INLINE __m512 wf_kp_joinf(float lo, float hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(lo)), _mm256_set1_ps(hi), 1);
}

/* Q6_K: the 128 quants of one row's 128-element part at ql (64 bytes) and qh (32 bytes), made
 * unsigned (0..63): q[t] holds the 32 quants of elements 32t..32t+31 in both 256-bit halves, so
 * the two activation rows of a pair take the same weights. */
static WF_INLINE void wf_kp_q6_K_unpack(const uint8_t *ql, const uint8_t *qh, __m512i q[4]) {
    const __m512i m15 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3);
    const __m512i l1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)ql));
    const __m512i l2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(ql + 32)));
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)qh));
    q[0] = _mm512_or_si512(_mm512_and_si512(l1, m15), _mm512_slli_epi16(_mm512_and_si512(h, m3), 4));
    q[1] = _mm512_or_si512(_mm512_and_si512(l2, m15), _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2), m3), 4));
    q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m15), _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4), m3), 4));
    q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l2, 4), m15), _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 6), m3), 4));
}

/* the activation rows of pair p: 2p and 2p + 1, the latter clamped to nc - 1 */
#define WF_KP_ROWS(c0, c1, p, nc)                                                                \
    const int c0 = 2 * (p), c1 = 2 * (p) + 1 < (nc) ? 2 * (p) + 1 : 2 * (p)

static WF_INLINE void wf_kpair_q4_K(const int NR, const int NP, bool vnni, int nc, int n,
                                    float *s, size_t ss, const void *vx, size_t bx,
                                    const void *vy, size_t by) {
    const char *x = vx, *y = vy;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[WF_KP_MAXR][WF_KP_MAXP];
    __m256 acc_m[WF_KP_MAXR][WF_KP_MAXP];
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        WF_UNROLL
        for (int p = 0; p < NP; p++) {
            acc[r][p] = _mm512_setzero_ps();
            acc_m[r][p] = _mm256_setzero_ps();
        }
    }
    for (int i = 0; i < n / WF_QK_K; i++) {
        const wf_block_q4_K *xb[WF_KP_MAXR];
        const wf_block_q8_K *yb[2 * WF_KP_MAXP];
        uint8_t sc[WF_KP_MAXR][8], mn[WF_KP_MAXR][8];
        __m512i sumi[WF_KP_MAXR][WF_KP_MAXP];
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            xb[r] = (const void *)(x + (size_t)r * bx + (size_t)i * sizeof(wf_block_q4_K));
            wf_q4_K_scales(xb[r]->scales, sc[r], mn[r]);
        }
        WF_UNROLL
        for (int p = 0; p < NP; p++) {
            WF_KP_ROWS(c0, c1, p, nc);
            yb[2 * p] = (const void *)(y + (size_t)c0 * by + (size_t)i * sizeof(wf_block_q8_K));
            yb[2 * p + 1] = (const void *)(y + (size_t)c1 * by + (size_t)i * sizeof(wf_block_q8_K));
            __m128i bs32[2];
            for (int h = 0; h < 2; h++) {
                __m256i bs = _mm256_loadu_si256((const void *)yb[2 * p + h]->bsums);
                bs32[h] = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            }
            const __m256i bs2 = _mm256_setr_m128i(bs32[0], bs32[1]);
            WF_UNROLL
            for (int r = 0; r < NR; r++) {
                const float dmin = _cvtsh_ss(xb[r]->dmin);
                const __m256 dm = _mm256_setr_m128(_mm_set1_ps(-yb[2 * p]->d * dmin),
                                                   _mm_set1_ps(-yb[2 * p + 1]->d * dmin));
                const __m256i mins16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const void *)mn[r])));
                acc_m[r][p] = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(_mm256_madd_epi16(mins16, bs2)), acc_m[r][p]);
                sumi[r][p] = _mm512_setzero_si512();
            }
        }
        for (int j = 0; j < WF_QK_K / 64; j++) {
            __m512i ylo[WF_KP_MAXP], yhi[WF_KP_MAXP];
            WF_UNROLL
            for (int p = 0; p < NP; p++) {
                const int8_t *q0 = yb[2 * p]->qs + 64 * j, *q1 = yb[2 * p + 1]->qs + 64 * j;
                ylo[p] = wf_kp_join(_mm256_loadu_si256((const void *)q0), _mm256_loadu_si256((const void *)q1));
                yhi[p] = wf_kp_join(_mm256_loadu_si256((const void *)(q0 + 32)), _mm256_loadu_si256((const void *)(q1 + 32)));
            }
            WF_UNROLL
            for (int r = 0; r < NR; r++) {
                const __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(xb[r]->qs + 32 * j)));
                const __m512i lo = _mm512_and_si512(bits, m4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4);
                const __m512i slo = _mm512_set1_epi16(sc[r][2 * j]), shi = _mm512_set1_epi16(sc[r][2 * j + 1]);
                WF_UNROLL
                for (int p = 0; p < NP; p++) {
                    sumi[r][p] = wf_kp_madd_acc(sumi[r][p], slo, _mm512_maddubs_epi16(lo, ylo[p]), vnni);
                    sumi[r][p] = wf_kp_madd_acc(sumi[r][p], shi, _mm512_maddubs_epi16(hi, yhi[p]), vnni);
                }
            }
        }
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            const float dx = _cvtsh_ss(xb[r]->d);
            WF_UNROLL
            for (int p = 0; p < NP; p++)
                acc[r][p] = _mm512_fmadd_ps(wf_kp_joinf(yb[2 * p]->d * dx, yb[2 * p + 1]->d * dx),
                                            _mm512_cvtepi32_ps(sumi[r][p]), acc[r][p]);
        }
    }
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        WF_UNROLL
        for (int p = 0; p < NP; p++) {
            for (int h = 0; h < 2 && 2 * p + h < nc; h++) {
                __m128 m = h ? _mm256_extractf128_ps(acc_m[r][p], 1) : _mm256_castps256_ps128(acc_m[r][p]);
                m = _mm_add_ps(m, _mm_movehl_ps(m, m));
                m = _mm_add_ss(m, _mm_movehdup_ps(m));
                const __m256 a = h ? _mm512_extractf32x8_ps(acc[r][p], 1) : _mm512_castps512_ps256(acc[r][p]);
                s[(size_t)(2 * p + h) * ss + (size_t)r] = wf_hsum_ps8(a) + _mm_cvtss_f32(m);
            }
        }
    }
}

static WF_INLINE void wf_kpair_q6_K(const int NR, const int NP, bool vnni, int nc, int n,
                                    float *s, size_t ss, const void *vx, size_t bx,
                                    const void *vy, size_t by) {
    const char *x = vx, *y = vy;
    __m512 acc[WF_KP_MAXR][WF_KP_MAXP];
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        WF_UNROLL
        for (int p = 0; p < NP; p++) acc[r][p] = _mm512_setzero_ps();
    }
    for (int i = 0; i < n / WF_QK_K; i++) {
        const wf_block_q6_K *xb[WF_KP_MAXR];
        const wf_block_q8_K *yb[2 * WF_KP_MAXP];
        __m512i sumi[WF_KP_MAXR][WF_KP_MAXP];
        WF_UNROLL
        for (int r = 0; r < NR; r++)
            xb[r] = (const void *)(x + (size_t)r * bx + (size_t)i * sizeof(wf_block_q6_K));
        WF_UNROLL
        for (int p = 0; p < NP; p++) {
            WF_KP_ROWS(c0, c1, p, nc);
            yb[2 * p] = (const void *)(y + (size_t)c0 * by + (size_t)i * sizeof(wf_block_q8_K));
            yb[2 * p + 1] = (const void *)(y + (size_t)c1 * by + (size_t)i * sizeof(wf_block_q8_K));
            const __m512i bs = wf_kp_join(_mm256_loadu_si256((const void *)yb[2 * p]->bsums),
                                          _mm256_loadu_si256((const void *)yb[2 * p + 1]->bsums));
            WF_UNROLL
            for (int r = 0; r < NR; r++) {
                /* quants are used unsigned (q + 32): subtract 32 * sum(scale * bsum) */
                const __m512i sc16 = _mm512_broadcast_i64x4(_mm256_cvtepi8_epi16(_mm_loadu_si128((const void *)xb[r]->scales)));
                sumi[r][p] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_madd_epi16(bs, sc16), 5));
            }
        }
        for (int j = 0; j < WF_QK_K / 128; j++) {
            __m512i q8[WF_KP_MAXP][4];
            WF_UNROLL
            for (int p = 0; p < NP; p++)
                for (int t = 0; t < 4; t++)
                    q8[p][t] = wf_kp_join(_mm256_loadu_si256((const void *)(yb[2 * p]->qs + 128 * j + 32 * t)),
                                          _mm256_loadu_si256((const void *)(yb[2 * p + 1]->qs + 128 * j + 32 * t)));
            WF_UNROLL
            for (int r = 0; r < NR; r++) {
                __m512i q[4];
                wf_kp_q6_K_unpack(xb[r]->ql + 64 * j, xb[r]->qh + 32 * j, q);
                for (int t = 0; t < 4; t++) {
                    /* 16 elements per scale: low 128 bits of each half use scale 8j+2t, high 8j+2t+1 */
                    const int is = 8 * j + 2 * t;
                    const __m512i scv = _mm512_broadcast_i64x4(_mm256_setr_m128i(_mm_set1_epi16(xb[r]->scales[is]), _mm_set1_epi16(xb[r]->scales[is + 1])));
                    WF_UNROLL
                    for (int p = 0; p < NP; p++)
                        sumi[r][p] = wf_kp_madd_acc(sumi[r][p], scv, _mm512_maddubs_epi16(q[t], q8[p][t]), vnni);
                }
            }
        }
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            const float dx = _cvtsh_ss(xb[r]->d);
            WF_UNROLL
            for (int p = 0; p < NP; p++)
                acc[r][p] = _mm512_fmadd_ps(wf_kp_joinf(yb[2 * p]->d * dx, yb[2 * p + 1]->d * dx),
                                            _mm512_cvtepi32_ps(sumi[r][p]), acc[r][p]);
        }
    }
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        WF_UNROLL
        for (int p = 0; p < NP; p++)
            for (int h = 0; h < 2 && 2 * p + h < nc; h++)
                s[(size_t)(2 * p + h) * ss + (size_t)r] =
                    wf_hsum_ps8(h ? _mm512_extractf32x8_ps(acc[r][p], 1) : _mm512_castps512_ps256(acc[r][p]));
    }
}

/* <vname>_vec_dot_kpair (a vec_dot_tile) for one K-quant: one activation row through the
 * 256-bit tiles of quant_ktile_x86.h (<name>_vec_dot_tile, up to 4 weight rows), several through
 * the pairs above (up to 2 weight rows x 2 pairs at once; larger tiles are split), with VNNI's
 * dpwssd where vnni. */
#define WF_KPAIR_DEFINE(vname, name, fn, vnni)                                                   \
    static void vname##_vec_dot_kpair(int n, float *s, size_t ss, const void *x, size_t bx,      \
                                      const void *y, size_t by, int nr, int nc) {               \
        if (nc == 1) {                                                                          \
            name##_vec_dot_tile(n, s, ss, x, bx, y, by, nr, nc);                                \
            return;                                                                             \
        }                                                                                       \
        for (; nr > 0; nr -= WF_KP_MAXR, s += WF_KP_MAXR, x = (const char *)x + WF_KP_MAXR * bx) { \
            const int r = nr < WF_KP_MAXR ? nr : WF_KP_MAXR;                                    \
            const int np = (nc + 1) / 2;                                                        \
            if (r == 2 && np == 2) fn(2, 2, vnni, nc, n, s, ss, x, bx, y, by);                  \
            else if (r == 2) fn(2, 1, vnni, nc, n, s, ss, x, bx, y, by);                        \
            else if (np == 2) fn(1, 2, vnni, nc, n, s, ss, x, bx, y, by);                       \
            else fn(1, 1, vnni, nc, n, s, ss, x, bx, y, by);                                    \
        }                                                                                       \
    }

#endif
