/* AVX-512 panel kernels of the 32-element block types: up to 4 weight rows against the 8
 * activation rows of one panel (quant_impl.h). Each 512-bit register holds two outputs (one
 * weight row, two activation rows): one dpbusd forms both outputs' int32 lanes for a block, one
 * conversion and one fused multiply-add accumulate them, and every per-row or per-block cost
 * (unpacking a weight block, its scales, the activation scales) is paid once for 8 outputs.
 *
 * Per output the float arithmetic is exactly ggml's x86 vec_dot (and quant_tile_x86.h's): per
 * block, 8 int32 lanes of 4-byte products, converted, fused-multiply-added with dx*dy (rounded
 * once) into 8 float lanes; for Q4_1/Q5_1 summs = fma(m, s, summs); at the end the 8 lanes are
 * summed as wf_hsum_ps8 and summs added. The lower and upper halves of a register never mix, so
 * each output gets the same bits as a single vec_dot. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "engine/cpu/quant_impl.h"
#include "engine/cpu/quant_tile_x86.h" /* the kinds of block types, their sizes */
#include "engine/cpu/simd_x86.h"

#define PANEL_PAIRS (WF_QUANT_PANEL_ROWS / 2)

/* 16 bytes of nibbles -> 64 bytes: [low nibbles, high nibbles] in both 256-bit halves, i.e.
 * elements 0..31 of the block, twice. */
static WF_INLINE __m512i nibbles_x2(const uint8_t *qs) {
    const __m512i t = _mm512_broadcast_i32x4(_mm_loadu_si128((const void *)qs));
    const __m512i both = _mm512_mask_blend_epi64(0xCC, t, _mm512_srli_epi16(t, 4));
    return _mm512_and_si512(both, _mm512_set1_epi8(0x0f));
}

/* 0x10 in byte j (and j + 32) where bit j of qh is set: the fifth bit of the Q5 quants */
static WF_INLINE __m512i fifth_bits_x2(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    const __mmask64 m = (__mmask64)h | ((__mmask64)h << 32);
    return _mm512_maskz_mov_epi8(m, _mm512_set1_epi8(0x10));
}

/* The weight block's quants as unsigned bytes (elements 0..31 in both halves): 0..15 / 0..31
 * for the 4/5-bit types, q + 128 for Q8_0; the offsets are removed through the panel. */
static WF_INLINE __m512i weight_quants_x2(wf_tile_kind k, const char *blk) {
    switch (k) {
    case WF_TK_Q4_0: return nibbles_x2(((const wf_block_q4_0 *)(const void *)blk)->qs);
    case WF_TK_Q4_1: return nibbles_x2(((const wf_block_q4_1 *)(const void *)blk)->qs);
    case WF_TK_Q5_0: {
        const wf_block_q5_0 *b = (const void *)blk;
        return _mm512_or_si512(nibbles_x2(b->qs), fifth_bits_x2(b->qh));
    }
    case WF_TK_Q5_1: {
        const wf_block_q5_1 *b = (const void *)blk;
        return _mm512_or_si512(nibbles_x2(b->qs), fifth_bits_x2(b->qh));
    }
    default: {
        const wf_block_q8_0 *b = (const void *)blk;
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)b->qs));
        return _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
    }
    }
}

static WF_INLINE __m512i dot_u8i8(__m512i u, __m512i s, bool vnni) {
    if (vnni) return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
}

/* NR weight rows x NP pairs of panel rows. */
static WF_INLINE void panel_kernel(wf_tile_kind k, const int NR, const int NP, bool vnni, int n,
                                   float *s, size_t ss, const void *vx, size_t bx,
                                   const void *panel, int nc) {
    const bool has_min = k == WF_TK_Q4_1 || k == WF_TK_Q5_1;
    const bool has_offset = k == WF_TK_Q4_0 || k == WF_TK_Q5_0 || k == WF_TK_Q8_0;
    const size_t wbs = wf_tile_block_bytes(k);
    const size_t pbs = sizeof(wf_panel_block) + (has_offset ? sizeof(wf_panel_offsets) : 0);
    const char *x = vx;
    const unsigned char *p = panel;
    /* scale index per pair: lanes 0-7 take entry 2j, lanes 8-15 entry 2j+1 */
    __m512i pair_index[PANEL_PAIRS];
    WF_UNROLL
    for (int j = 0; j < NP; j++)
        pair_index[j] = _mm512_inserti64x4(_mm512_set1_epi32(2 * j), _mm256_set1_epi32(2 * j + 1), 1);
    __m512 acc[WF_QUANT_TILE_NR][PANEL_PAIRS];
    __m256 summs[WF_QUANT_TILE_NR]; /* lane c: the sum of m * s of output (r, c) */
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        summs[r] = _mm256_setzero_ps();
        WF_UNROLL
        for (int j = 0; j < NP; j++) acc[r][j] = _mm512_setzero_ps();
    }
    for (int i = 0; i < n / WF_QK; i++, p += pbs) {
        const wf_panel_block *pb = (const wf_panel_block *)(const void *)p;
        const wf_panel_offsets *po = (const wf_panel_offsets *)(const void *)(p + sizeof *pb);
        const __m256 yd = _mm256_loadu_ps(pb->d);
        __m512i lanes[PANEL_PAIRS];
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            const char *blk = x + (size_t)r * bx + (size_t)i * wbs;
            int32_t dm;
            memcpy(&dm, blk, sizeof dm); /* d (and m) are the block's first halves */
            const __m128 wsc = _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
            /* dx * dy for the 8 outputs of this row, each rounded once as ggml's scalar product */
            const __m256 dprod = _mm256_mul_ps(_mm256_broadcastss_ps(wsc), yd);
            if (has_min)
                summs[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(wsc)),
                                           _mm256_loadu_ps(pb->s), summs[r]);
            const __m512i wq = weight_quants_x2(k, blk);
            WF_UNROLL
            for (int j = 0; j < NP; j++) {
                lanes[j] = dot_u8i8(wq, _mm512_loadu_si512((const void *)pb->qs[2 * j]), vnni);
                if (has_offset)
                    lanes[j] = _mm512_sub_epi32(lanes[j], _mm512_loadu_si512((const void *)po->lanes[2 * j]));
                const __m512 d = _mm512_permutexvar_ps(pair_index[j], _mm512_castps256_ps512(dprod));
                acc[r][j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lanes[j]), acc[r][j]);
            }
        }
    }
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        float m[8];
        _mm256_storeu_ps(m, summs[r]);
        WF_UNROLL
        for (int j = 0; j < NP; j++) {
            float lo = wf_hsum_ps8(_mm512_castps512_ps256(acc[r][j]));
            float hi = wf_hsum_ps8(_mm512_extractf32x8_ps(acc[r][j], 1));
            if (has_min) {
                lo += m[2 * j];
                hi += m[2 * j + 1];
            }
            if (2 * j < nc) s[(size_t)(2 * j) * ss + (size_t)r] = lo;
            if (2 * j + 1 < nc) s[(size_t)(2 * j + 1) * ss + (size_t)r] = hi;
        }
    }
}

/* Instantiates <name>_panel_dot: full 4-row tiles, single rows for the rest; as many pairs as
 * the panel has rows. */
#define PANEL_DEFINE(name, k, vnni)                                                              \
    static void name##_panel_dot(int n, float *s, size_t ss, const void *x, size_t bx,           \
                                 const void *panel, int nr, int nc) {                            \
        const int np = (nc + 1) / 2;                                                             \
        for (int r = 0; r < nr;) {                                                               \
            const int rows = nr - r >= WF_QUANT_TILE_NR ? WF_QUANT_TILE_NR : 1;                   \
            const char *xr = (const char *)x + (size_t)r * bx;                                   \
            switch (rows * 8 + np) {                                                             \
            case 32 + 4: panel_kernel(k, 4, 4, vnni, n, s + r, ss, xr, bx, panel, nc); break;    \
            case 32 + 3: panel_kernel(k, 4, 3, vnni, n, s + r, ss, xr, bx, panel, nc); break;    \
            case 32 + 2: panel_kernel(k, 4, 2, vnni, n, s + r, ss, xr, bx, panel, nc); break;    \
            case 32 + 1: panel_kernel(k, 4, 1, vnni, n, s + r, ss, xr, bx, panel, nc); break;    \
            case 8 + 4: panel_kernel(k, 1, 4, vnni, n, s + r, ss, xr, bx, panel, nc); break;     \
            case 8 + 3: panel_kernel(k, 1, 3, vnni, n, s + r, ss, xr, bx, panel, nc); break;     \
            case 8 + 2: panel_kernel(k, 1, 2, vnni, n, s + r, ss, xr, bx, panel, nc); break;     \
            case 8 + 1: panel_kernel(k, 1, 1, vnni, n, s + r, ss, xr, bx, panel, nc); break;     \
            default: __builtin_trap(); /* nc out of [1, WF_QUANT_PANEL_ROWS] */                  \
            }                                                                                    \
            r += rows;                                                                           \
        }                                                                                        \
    }

PANEL_DEFINE(q4_0, WF_TK_Q4_0, false)
PANEL_DEFINE(q4_1, WF_TK_Q4_1, false)
PANEL_DEFINE(q5_0, WF_TK_Q5_0, false)
PANEL_DEFINE(q5_1, WF_TK_Q5_1, false)
PANEL_DEFINE(q4_0_vnni, WF_TK_Q4_0, true)
PANEL_DEFINE(q4_1_vnni, WF_TK_Q4_1, true)
PANEL_DEFINE(q5_0_vnni, WF_TK_Q5_0, true)
PANEL_DEFINE(q5_1_vnni, WF_TK_Q5_1, true)
PANEL_DEFINE(q8_0_vnni, WF_TK_Q8_0, true)

void wf_quant_fill_panel_avx512(wf_quant_ops ops[WF_GGML_TYPE_COUNT], bool vnni) {
    ops[WF_GGML_TYPE_Q4_0].panel_dot = vnni ? q4_0_vnni_panel_dot : q4_0_panel_dot;
    ops[WF_GGML_TYPE_Q4_1].panel_dot = vnni ? q4_1_vnni_panel_dot : q4_1_panel_dot;
    ops[WF_GGML_TYPE_Q5_0].panel_dot = vnni ? q5_0_vnni_panel_dot : q5_0_panel_dot;
    ops[WF_GGML_TYPE_Q5_1].panel_dot = vnni ? q5_1_vnni_panel_dot : q5_1_panel_dot;
    /* without VNNI, Q8_0's unsigned q + 128 would saturate maddubs' pair sums: tiles only */
    ops[WF_GGML_TYPE_Q8_0].panel_dot = vnni ? q8_0_vnni_panel_dot : NULL;
}
