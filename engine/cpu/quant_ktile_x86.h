/* Internal to engine/cpu: Q4_K and Q6_K dot products (times Q8_K) as register tiles of NR
 * weight rows x NC activation rows, each output computed with exactly the operations of
 * ggml's x86 AVX2 kernel (per super-block: int32 lanes of scale * byte-pair products, one
 * convert and fma into 8 float lanes; Q4_K's min term in 4 more lanes), so a tile equals
 * NR*NC single dot products bit for bit. Weight rows are unpacked once per tile and
 * activation rows loaded once per tile. Included by quant_avx2.c and quant_avx512.c. */
#ifndef WF_ENGINE_CPU_QUANT_KTILE_X86_H
#define WF_ENGINE_CPU_QUANT_KTILE_X86_H

#include "engine/cpu/quant_tile_x86.h"

#define WF_KT_MAXR 4
#define WF_KT_MAXC 4
/* Single-row decode (the matvec below): rows this far ahead are prefetched block by block.
 * Without it the K-quant rows streamed from DRAM at 3-5 GB/s against 27 GB/s for the Q5_0
 * matvec (which prefetches) on the same host; the hardware prefetchers did not keep up with
 * four interleaved row streams. */
#define WF_KT_MATVEC_ROWS_AHEAD 8

/* The lines of the block at p + pf (pf 0: none; the branch folds away in the tiles that
 * pass a constant 0). */
static WF_INLINE void wf_kt_prefetch(const void *p, size_t pf, size_t block) {
    if (!pf) return;
    for (size_t line = 0; line < block; line += 64) _mm_prefetch((const char *)p + pf + line, _MM_HINT_T0);
}

static WF_INLINE void wf_ktile_q4_K(const int NR, const int NC, int n, float *s, size_t ss,
                                    const void *vx, size_t bx, const void *vy, size_t by,
                                    size_t pf) {
    const char *x = vx, *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[WF_KT_MAXR][WF_KT_MAXC];
    __m128 acc_m[WF_KT_MAXR][WF_KT_MAXC];
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        WF_UNROLL
        for (int c = 0; c < NC; c++) {
            acc[r][c] = _mm256_setzero_ps();
            acc_m[r][c] = _mm_setzero_ps();
        }
    }
    for (int i = 0; i < n / WF_QK_K; i++) {
        const wf_block_q4_K *xb[WF_KT_MAXR];
        const wf_block_q8_K *yb[WF_KT_MAXC];
        uint8_t sc[WF_KT_MAXR][8], mn[WF_KT_MAXR][8];
        __m256i sumi[WF_KT_MAXR][WF_KT_MAXC];
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            xb[r] = (const void *)(x + (size_t)r * bx + (size_t)i * sizeof(wf_block_q4_K));
            wf_kt_prefetch(xb[r], pf, sizeof(wf_block_q4_K));
            wf_q4_K_scales(xb[r]->scales, sc[r], mn[r]);
        }
        WF_UNROLL
        for (int c = 0; c < NC; c++) {
            yb[c] = (const void *)(y + (size_t)c * by + (size_t)i * sizeof(wf_block_q8_K));
            /* the bsums, summed in pairs: one per 32-element group */
            __m256i bs = _mm256_loadu_si256((const void *)yb[c]->bsums);
            __m128i bs32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            WF_UNROLL
            for (int r = 0; r < NR; r++) {
                const float dmin = -yb[c]->d * _cvtsh_ss(xb[r]->dmin);
                __m128i mins16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const void *)mn[r]));
                acc_m[r][c] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(mins16, bs32)), acc_m[r][c]);
                sumi[r][c] = _mm256_setzero_si256();
            }
        }
        for (int j = 0; j < WF_QK_K / 64; j++) {
            __m256i ylo[WF_KT_MAXC], yhi[WF_KT_MAXC];
            WF_UNROLL
            for (int c = 0; c < NC; c++) {
                ylo[c] = _mm256_loadu_si256((const void *)(yb[c]->qs + 64 * j));
                yhi[c] = _mm256_loadu_si256((const void *)(yb[c]->qs + 64 * j + 32));
            }
            WF_UNROLL
            for (int r = 0; r < NR; r++) {
                __m256i bits = _mm256_loadu_si256((const void *)(xb[r]->qs + 32 * j));
                __m256i lo = _mm256_and_si256(bits, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                __m256i slo = _mm256_set1_epi16(sc[r][2 * j]), shi = _mm256_set1_epi16(sc[r][2 * j + 1]);
                WF_UNROLL
                for (int c = 0; c < NC; c++) {
                    __m256i pl = _mm256_madd_epi16(slo, _mm256_maddubs_epi16(lo, ylo[c]));
                    __m256i ph = _mm256_madd_epi16(shi, _mm256_maddubs_epi16(hi, yhi[c]));
                    sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_add_epi32(pl, ph));
                }
            }
        }
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            const float dx = _cvtsh_ss(xb[r]->d);
            WF_UNROLL
            for (int c = 0; c < NC; c++)
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(yb[c]->d * dx), _mm256_cvtepi32_ps(sumi[r][c]), acc[r][c]);
        }
    }
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        WF_UNROLL
        for (int c = 0; c < NC; c++) {
            __m128 m = acc_m[r][c];
            m = _mm_add_ps(m, _mm_movehl_ps(m, m));
            m = _mm_add_ss(m, _mm_movehdup_ps(m));
            s[(size_t)c * ss + (size_t)r] = wf_hsum_ps8(acc[r][c]) + _mm_cvtss_f32(m);
        }
    }
}

static WF_INLINE void wf_ktile_q6_K(const int NR, const int NC, int n, float *s, size_t ss,
                                    const void *vx, size_t bx, const void *vy, size_t by,
                                    size_t pf) {
    const char *x = vx, *y = vy;
    const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    __m256 acc[WF_KT_MAXR][WF_KT_MAXC];
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        WF_UNROLL
        for (int c = 0; c < NC; c++) acc[r][c] = _mm256_setzero_ps();
    }
    for (int i = 0; i < n / WF_QK_K; i++) {
        const wf_block_q6_K *xb[WF_KT_MAXR];
        const wf_block_q8_K *yb[WF_KT_MAXC];
        __m256i sumi[WF_KT_MAXR][WF_KT_MAXC];
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            xb[r] = (const void *)(x + (size_t)r * bx + (size_t)i * sizeof(wf_block_q6_K));
            wf_kt_prefetch(xb[r], pf, sizeof(wf_block_q6_K));
        }
        WF_UNROLL
        for (int c = 0; c < NC; c++) {
            yb[c] = (const void *)(y + (size_t)c * by + (size_t)i * sizeof(wf_block_q8_K));
            const __m256i bs = _mm256_loadu_si256((const void *)yb[c]->bsums);
            WF_UNROLL
            for (int r = 0; r < NR; r++) {
                /* quants are used unsigned (q + 32): subtract 32 * sum(scale * bsum) */
                const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const void *)xb[r]->scales));
                sumi[r][c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
            }
        }
        for (int j = 0; j < WF_QK_K / 128; j++) {
            __m256i q8[WF_KT_MAXC][4];
            WF_UNROLL
            for (int c = 0; c < NC; c++)
                for (int t = 0; t < 4; t++) q8[c][t] = _mm256_loadu_si256((const void *)(yb[c]->qs + 128 * j + 32 * t));
            WF_UNROLL
            for (int r = 0; r < NR; r++) {
                const uint8_t *ql = xb[r]->ql + 64 * j, *qh = xb[r]->qh + 32 * j;
                __m256i l1 = _mm256_loadu_si256((const void *)ql), l2 = _mm256_loadu_si256((const void *)(ql + 32));
                __m256i h = _mm256_loadu_si256((const void *)qh);
                __m256i q[4];
                q[0] = _mm256_or_si256(_mm256_and_si256(l1, m15), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
                q[1] = _mm256_or_si256(_mm256_and_si256(l2, m15), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
                q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
                q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m15), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
                for (int t = 0; t < 4; t++) {
                    /* 16 elements per scale: low 128-bit half uses scale 8j+2t, high 8j+2t+1 */
                    const int is = 8 * j + 2 * t;
                    const __m256i scv = _mm256_setr_m128i(_mm_set1_epi16(xb[r]->scales[is]), _mm_set1_epi16(xb[r]->scales[is + 1]));
                    WF_UNROLL
                    for (int c = 0; c < NC; c++)
                        sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_madd_epi16(scv, _mm256_maddubs_epi16(q[t], q8[c][t])));
                }
            }
        }
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            const float dx = _cvtsh_ss(xb[r]->d);
            WF_UNROLL
            for (int c = 0; c < NC; c++)
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(yb[c]->d * dx), _mm256_cvtepi32_ps(sumi[r][c]), acc[r][c]);
        }
    }
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        WF_UNROLL
        for (int c = 0; c < NC; c++) s[(size_t)c * ss + (size_t)r] = wf_hsum_ps8(acc[r][c]);
    }
}

/* <name>_vec_dot, <name>_vec_dot_tile and <name>_matvec for one K-quant; tiles above
 * max_pairs outputs (what the register file holds) are split. The matvec (nr a multiple of
 * WF_QUANT_MATVEC_ROWS) runs 4-row tiles, each prefetching the rows
 * WF_KT_MATVEC_ROWS_AHEAD ahead; the results are the tiles', so bit-identical to vec_dot. */
#define WF_KTILE_DEFINE(name, fn, max_pairs)                                                    \
    static void name##_vec_dot(int n, float *s, const void *x, const void *y) {                 \
        fn(1, 1, n, s, 1, x, 0, y, 0, 0);                                                       \
    }                                                                                           \
    static void name##_matvec(int n, float *s, const void *x, size_t bx, const void *y,         \
                              int nr) {                                                         \
        const size_t pf = WF_KT_MATVEC_ROWS_AHEAD * bx;                                         \
        for (int r = 0; r + 4 <= nr; r += 4)                                                    \
            fn(4, 1, n, s + r, 1, (const char *)x + (size_t)r * bx, bx, y, 0, pf);              \
    }                                                                                           \
    static void name##_vec_dot_tile(int n, float *s, size_t ss, const void *x, size_t bx,       \
                                    const void *y, size_t by, int nr, int nc) {                 \
        if (nr * nc > (max_pairs)) {                                                            \
            if (nc > 1) {                                                                       \
                int h = nc / 2;                                                                 \
                name##_vec_dot_tile(n, s, ss, x, bx, y, by, nr, h);                             \
                name##_vec_dot_tile(n, s + (size_t)h * ss, ss, x, bx, (const char *)y + h * by, \
                                    by, nr, nc - h);                                            \
            } else {                                                                            \
                int h = nr / 2;                                                                 \
                name##_vec_dot_tile(n, s, ss, x, bx, y, by, h, nc);                             \
                name##_vec_dot_tile(n, s + h, ss, (const char *)x + h * bx, bx, y, by, nr - h,  \
                                    nc);                                                        \
            }                                                                                   \
            return;                                                                             \
        }                                                                                       \
        switch (nc * 8 + nr) {                                                                  \
        case 8 + 1: fn(1, 1, n, s, ss, x, bx, y, by, 0); break;                                 \
        case 8 + 2: fn(2, 1, n, s, ss, x, bx, y, by, 0); break;                                 \
        case 8 + 3: fn(3, 1, n, s, ss, x, bx, y, by, 0); break;                                 \
        case 8 + 4: fn(4, 1, n, s, ss, x, bx, y, by, 0); break;                                 \
        case 16 + 1: fn(1, 2, n, s, ss, x, bx, y, by, 0); break;                                \
        case 16 + 2: fn(2, 2, n, s, ss, x, bx, y, by, 0); break;                                \
        case 24 + 1: fn(1, 3, n, s, ss, x, bx, y, by, 0); break;                                \
        case 32 + 1: fn(1, 4, n, s, ss, x, bx, y, by, 0); break;                                \
        case 16 + 3: fn(3, 2, n, s, ss, x, bx, y, by, 0); break;                                \
        case 16 + 4: fn(4, 2, n, s, ss, x, bx, y, by, 0); break;                                \
        case 24 + 2: fn(2, 3, n, s, ss, x, bx, y, by, 0); break;                                \
        case 32 + 2: fn(2, 4, n, s, ss, x, bx, y, by, 0); break;                                \
        default: __builtin_trap(); /* nr, nc out of [1, 4] or above max_pairs */                \
        }                                                                                       \
    }

#endif
