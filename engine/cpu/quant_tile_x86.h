/* Internal to engine/cpu: dot products of the 32-element block types (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0) as register tiles: NR weight rows x NC activation rows per pass, each output
 * with its own accumulator. Every output gets exactly the float operations of a single
 * vec_dot (ggml's x86 order: per block 8 int32 lanes of 4-byte products -> float -> one fma
 * into 8 float lanes; horizontal sum at the end), so a tile is bit-identical to NR*NC calls,
 * but the independent accumulator chains keep the FMA units busy instead of waiting on one
 * chain, and a weight block is unpacked once for NC activation rows.
 *
 * Included by quant_avx2.c (vnni = false) and quant_avx512.c (vnni = the CPU's VNNI). */
#ifndef WF_ENGINE_CPU_QUANT_TILE_X86_H
#define WF_ENGINE_CPU_QUANT_TILE_X86_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "engine/cpu/quant_impl.h"
#include "engine/cpu/simd_x86.h"

#define WF_TILE_NR WF_QUANT_TILE_NR
#define WF_TILE_NC WF_QUANT_TILE_NC
/* bytes ahead in a weight row to prefetch when one activation row streams the weights (the
 * memory-bound decode case): the hardware prefetcher alone leaves a third of the bandwidth
 * unused here (measured 1.4-1.6x decode tokens/s with it on this VM) */
#define WF_TILE_PREFETCH 4096
#define WF_INLINE inline __attribute__((always_inline))
/* the r/c loops must be unrolled so that the accumulators live in registers */
#define WF_UNROLL _Pragma("GCC unroll 8")

typedef enum wf_tile_kind { WF_TK_Q4_0, WF_TK_Q4_1, WF_TK_Q5_0, WF_TK_Q5_1, WF_TK_Q8_0 } wf_tile_kind;

static WF_INLINE __m256i wf_tile_dot_u8i8(__m256i u, __m256i s, bool vnni) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    if (vnni) return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#endif
    (void)vnni;
    return wf_dot_u8i8x4(u, s);
}

static WF_INLINE size_t wf_tile_block_bytes(wf_tile_kind k) {
    switch (k) {
    case WF_TK_Q4_0: return sizeof(wf_block_q4_0);
    case WF_TK_Q4_1: return sizeof(wf_block_q4_1);
    case WF_TK_Q5_0: return sizeof(wf_block_q5_0);
    case WF_TK_Q5_1: return sizeof(wf_block_q5_1);
    default: return sizeof(wf_block_q8_0);
    }
}

/* The two halves at the start of a block (d and m for Q4_1/Q5_1, d and s for Q8_1; d and
 * the first data bytes otherwise, whose lane is then unused) as floats in lanes 0 and 1: one
 * conversion instead of two scalar ones. */
static WF_INLINE __m128 wf_tile_scales(const char *blk) {
    int32_t v;
    memcpy(&v, blk, sizeof(v));
    return _mm_cvtph_ps(_mm_cvtsi32_si128(v));
}

/* The quants of a weight block as bytes: unsigned 0..15/0..31 for the 4/5-bit types (the
 * offset of 8/16 of the _0 types is applied through the activation sums), signed for Q8_0. */
static WF_INLINE __m256i wf_tile_load_w(wf_tile_kind k, const char *blk) {
    switch (k) {
    case WF_TK_Q4_0: return wf_nibbles32(((const wf_block_q4_0 *)(const void *)blk)->qs);
    case WF_TK_Q4_1: return wf_nibbles32(((const wf_block_q4_1 *)(const void *)blk)->qs);
    case WF_TK_Q5_0: {
        const wf_block_q5_0 *b = (const void *)blk;
        return _mm256_or_si256(wf_nibbles32(b->qs), _mm256_and_si256(wf_bits32(b->qh), _mm256_set1_epi8(0x10)));
    }
    case WF_TK_Q5_1: {
        const wf_block_q5_1 *b = (const void *)blk;
        return _mm256_or_si256(wf_nibbles32(b->qs), _mm256_and_si256(wf_bits32(b->qh), _mm256_set1_epi8(0x10)));
    }
    default: return _mm256_loadu_si256((const void *)((const wf_block_q8_0 *)(const void *)blk)->qs);
    }
}

static WF_INLINE void wf_tile(wf_tile_kind k, const int NR, const int NC, bool vnni, int n, float *s,
                              size_t ss, const void *vx, size_t bx, const void *vy, size_t by) {
    const bool has_min = k == WF_TK_Q4_1 || k == WF_TK_Q5_1;
    const int offset = k == WF_TK_Q4_0 ? 8 : k == WF_TK_Q5_0 ? 16 : 0;
    const size_t wbs = wf_tile_block_bytes(k);
    const size_t ybs = has_min ? sizeof(wf_block_q8_1) : sizeof(wf_block_q8_0);
    const size_t yqs = has_min ? offsetof(wf_block_q8_1, qs) : offsetof(wf_block_q8_0, qs);
    const char *x = vx, *y = vy;
    __m256 acc[WF_TILE_NR][WF_TILE_NC];
    __m128 macc[WF_TILE_NR][WF_TILE_NC]; /* lane 1: the sum of m * s over blocks */
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        WF_UNROLL
        for (int c = 0; c < NC; c++) {
            acc[r][c] = _mm256_setzero_ps();
            macc[r][c] = _mm_setzero_ps();
        }
    }
    for (int i = 0; i < n / WF_QK; i++) {
        __m256i wq[WF_TILE_NR], yq[WF_TILE_NC], yoff[WF_TILE_NC];
        __m128 wsc[WF_TILE_NR], ysc[WF_TILE_NC];
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            const char *blk = x + (size_t)r * bx + (size_t)i * wbs;
            if (NC == 1) _mm_prefetch(blk + WF_TILE_PREFETCH, _MM_HINT_T0);
            wsc[r] = wf_tile_scales(blk);
            wq[r] = wf_tile_load_w(k, blk);
        }
        WF_UNROLL
        for (int c = 0; c < NC; c++) {
            const char *yb = y + (size_t)c * by + (size_t)i * ybs;
            ysc[c] = wf_tile_scales(yb);
            yq[c] = _mm256_loadu_si256((const void *)(yb + yqs));
            /* offset * (4-byte sums of y): subtracting it from the unsigned dot gives the
             * same int32 lanes as ggml's signed (q - offset) * y */
            if (offset) yoff[c] = wf_tile_dot_u8i8(_mm256_set1_epi8((char)offset), yq[c], vnni);
        }
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            __m256i ax = wq[r];
            if (k == WF_TK_Q8_0) ax = _mm256_sign_epi8(wq[r], wq[r]);
            WF_UNROLL
            for (int c = 0; c < NC; c++) {
                __m256i lanes;
                if (k == WF_TK_Q8_0) lanes = wf_tile_dot_u8i8(ax, _mm256_sign_epi8(yq[c], wq[r]), vnni);
                else lanes = wf_tile_dot_u8i8(ax, yq[c], vnni);
                if (offset) lanes = _mm256_sub_epi32(lanes, yoff[c]);
                /* lane 0: dx * dy, rounded once as ggml's scalar product */
                const __m256 d = _mm256_broadcastss_ps(_mm_mul_ps(wsc[r], ysc[c]));
                acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[r][c]);
                /* lane 1: summs += m * s, fused as compilers contract ggml's statement */
                if (has_min) macc[r][c] = _mm_fmadd_ps(wsc[r], ysc[c], macc[r][c]);
            }
        }
    }
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        WF_UNROLL
        for (int c = 0; c < NC; c++) {
            float sum = wf_hsum_ps8(acc[r][c]);
            if (has_min) sum += _mm_cvtss_f32(_mm_movehdup_ps(macc[r][c]));
            s[(size_t)c * ss + (size_t)r] = sum;
        }
    }
}

/* Instantiates, for one kind and VNNI choice, <name>_vec_dot and <name>_vec_dot_tile. Up to
 * 4 weight rows against one activation row (the decode case: 4 independent chains) or 2
 * weight rows against up to 4 activation rows; larger requests are split. */
#define WF_TILE_DEFINE(name, kind, vnni)                                                        \
    static void name##_vec_dot(int n, float *s, const void *x, const void *y) {                \
        wf_tile(kind, 1, 1, vnni, n, s, 1, x, 0, y, 0);                                         \
    }                                                                                           \
    static void name##_vec_dot_tile(int n, float *s, size_t ss, const void *x, size_t bx,       \
                                    const void *y, size_t by, int nr, int nc) {                 \
        if (nr > 2 && nc > 1) {                                                                 \
            name##_vec_dot_tile(n, s, ss, x, bx, y, by, 2, nc);                                 \
            name##_vec_dot_tile(n, s + 2, ss, (const char *)x + 2 * bx, bx, y, by, nr - 2, nc); \
            return;                                                                             \
        }                                                                                       \
        switch (nc * 8 + nr) {                                                                  \
        case 8 + 1: wf_tile(kind, 1, 1, vnni, n, s, ss, x, bx, y, by); break;                   \
        case 8 + 2: wf_tile(kind, 2, 1, vnni, n, s, ss, x, bx, y, by); break;                   \
        case 8 + 3: wf_tile(kind, 3, 1, vnni, n, s, ss, x, bx, y, by); break;                   \
        case 8 + 4: wf_tile(kind, 4, 1, vnni, n, s, ss, x, bx, y, by); break;                   \
        case 16 + 1: wf_tile(kind, 1, 2, vnni, n, s, ss, x, bx, y, by); break;                  \
        case 16 + 2: wf_tile(kind, 2, 2, vnni, n, s, ss, x, bx, y, by); break;                  \
        case 24 + 1: wf_tile(kind, 1, 3, vnni, n, s, ss, x, bx, y, by); break;                  \
        case 24 + 2: wf_tile(kind, 2, 3, vnni, n, s, ss, x, bx, y, by); break;                  \
        case 32 + 1: wf_tile(kind, 1, 4, vnni, n, s, ss, x, bx, y, by); break;                  \
        case 32 + 2: wf_tile(kind, 2, 4, vnni, n, s, ss, x, bx, y, by); break;                  \
        default: __builtin_trap(); /* nr, nc out of [1, 4] */                                   \
        }                                                                                       \
    }

#endif
