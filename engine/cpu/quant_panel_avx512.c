/* AVX-512 kernels of the 32-element block types that hold two outputs per 512-bit register:
 * one dpbusd forms both outputs' int32 lanes for a block, one conversion and one fused
 * multiply-add accumulate them.
 * - Panel kernels (batched): 2 weight rows against the 16 activation rows of one panel
 *   (quant_impl.h); a register holds one weight row against two activation rows. Unpacking a
 *   weight block and its scales is paid once for 16 outputs; the panel carries each register's
 *   16 activation scales and int32 starting values ready to use, so per register and block
 *   the kernel issues only dpbusd, the dx * dy multiply or permute, the conversion and the fma (the
 *   floor of bench/kernels/mac_ceiling.c).
 * - Matrix-vector kernels (decode): 16 weight rows against one activation row; a register holds
 *   two weight rows (see the section below).
 *
 * Per output the float arithmetic is exactly ggml's x86 vec_dot (and quant_tile_x86.h's): per
 * block, 8 int32 lanes of 4-byte products, converted, fused-multiply-added with dx*dy (rounded
 * once) into 8 float lanes; for Q4_1/Q5_1 summs = fma(m, s, summs); at the end the 8 lanes are
 * summed as wf_hsum_ps8 and summs added. The lower and upper halves of a register never mix, so
 * each output gets the same bits as a single vec_dot. */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "engine/cpu/quant_impl.h"
#include "engine/cpu/quant_tile_x86.h" /* the kinds of block types, their sizes */
#include "engine/cpu/simd_x86.h"

#define PANEL_PAIRS (WF_QUANT_PANEL_ROWS / 2)
/* weight rows per panel kernel: 2 x 8 pairs = 16 accumulators. Against 4 rows x 4 pairs of
 * 8-row panels: +11% for the Q4_1 kernel inside the batch-32 step (perf, against attention's
 * time), per-row work spread over twice the outputs. */
#define PANEL_TILE_ROWS 2
_Static_assert(WF_QUANT_PANEL_ROWS == 16, "summs holds one lane per panel row");
/* bytes ahead in each weight row to prefetch: measured +15% at batch 8 over the hardware
 * prefetcher alone (1024-4096 alike) */
#define PANEL_PREFETCH 2048

/* Whether Q4_0/Q4_1 quants keep their high nibbles in place: a block's 16 bytes AND-ed with
 * 0x0f give its first 16 quants, AND-ed with 0xf0 its last 16 times 16, one operation instead
 * of a shift and an AND. The int32 lanes of the last 16 (lanes 4-7 of each row's eight) are
 * then 16 times ggml's, and their scale is taken as dx * dy / 16: exactly ggml's product
 * divided by a power of two, since both scales are halves and their product is a normal float
 * or zero, so fma(d / 16, 16 * lanes, acc) rounds as fma(d, lanes, acc). Only with VNNI:
 * maddubs would saturate its pairs of 240 * 127. */
static WF_INLINE bool high_nibbles_in_place(wf_tile_kind k, bool vnni) {
    return vnni && (k == WF_TK_Q4_0 || k == WF_TK_Q4_1);
}

/* The high nibbles' 128-bit quarters of a register of two rows (1 and 3): as 64-bit lanes, as
 * float lanes. */
#define HIGH_QUARTERS_EPI64 0xCC
#define HIGH_QUARTERS_PS 0xF0F0

/* Per lane: 1 where the lanes hold their true products, 1/16 where they hold 16x. */
static WF_INLINE __m512 high_nibble_scale(void) {
    return _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), HIGH_QUARTERS_PS, _mm512_set1_ps(1.0f / 16));
}

/* Bytes of `low` in the low nibbles' quarters, of `high` in the high nibbles'. */
static WF_INLINE __m512i bytes_by_quarter(int low, int high) {
    return _mm512_mask_blend_epi64(HIGH_QUARTERS_EPI64, _mm512_set1_epi8((char)low),
                                   _mm512_set1_epi8((char)high));
}

/* Quants of one block of two rows (lanes 0-7: row a; 8-15: row b; b = NULL: a in both), as
 * unsigned bytes: 0..15 / 0..31 for the 4/5-bit types (the last 16 times 16 where
 * high_nibbles_in_place), q + 128 for Q8_0; the offsets are removed through the int32 lanes'
 * starting values. */
static WF_INLINE __m512i weight_quants_pair(wf_tile_kind k, bool vnni, const char *a, const char *b) {
    const size_t qs_at = k == WF_TK_Q4_0   ? offsetof(wf_block_q4_0, qs)
                         : k == WF_TK_Q4_1 ? offsetof(wf_block_q4_1, qs)
                         : k == WF_TK_Q5_0 ? offsetof(wf_block_q5_0, qs)
                         : k == WF_TK_Q5_1 ? offsetof(wf_block_q5_1, qs)
                                           : offsetof(wf_block_q8_0, qs);
    if (k == WF_TK_Q8_0) {
        __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(a + qs_at)));
        if (b) q = _mm512_inserti64x4(q, _mm256_loadu_si256((const void *)(b + qs_at)), 1);
        return _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
    }
    /* [a's 16 bytes, a's, b's, b's]; the second copy of each for the high nibbles */
    __m512i t = _mm512_broadcast_i32x4(_mm_loadu_si128((const void *)(a + qs_at)));
    if (b) t = _mm512_mask_broadcast_i32x4(t, 0xFF00, _mm_loadu_si128((const void *)(b + qs_at)));
    if (high_nibbles_in_place(k, vnni))
        return _mm512_and_si512(t, bytes_by_quarter(0x0f, 0xf0));
    t = _mm512_mask_srli_epi16(t, 0xFF00FF00u, t, 4);
    __m512i q = _mm512_and_si512(t, _mm512_set1_epi8(0x0f));
    if (k == WF_TK_Q5_0 || k == WF_TK_Q5_1) {
        const size_t qh_at =
            k == WF_TK_Q5_0 ? offsetof(wf_block_q5_0, qh) : offsetof(wf_block_q5_1, qh);
        uint32_t ha, hb;
        memcpy(&ha, a + qh_at, sizeof ha);
        memcpy(&hb, (b ? b : a) + qh_at, sizeof hb);
        const __mmask64 fifth = (__mmask64)ha | ((__mmask64)hb << 32);
        q = _mm512_mask_add_epi8(q, fifth, q, _mm512_set1_epi8(0x10));
    }
    return q;
}

static WF_INLINE __m512i dot_u8i8_acc(__m512i acc, __m512i u, __m512i s, bool vnni) {
    if (vnni) return _mm512_dpbusd_epi32(acc, u, s);
    const __m512i pairs = _mm512_maddubs_epi16(u, s);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
}

/* Whether the kernel forms a weight block's 16 products dx * dy with one multiply by the
 * panel's row scales (wf_panel_block.s) and hands each register its pair with a permute,
 * instead of one multiply per register: the same products, rounded once, so the same bits.
 * Per register the multiply pipes then carry only dpbusd and the fma. Q8_0: 1.12x for its
 * panels (Gemma's output matrix); Q5_0: 1.10x once the pairs' loads are shared by the tile's
 * weight rows (0.91x before, when the permutes competed with reloading every pair per row;
 * BENCHMARKS.md). The Q4_x types keep per-lane scales for the high nibbles and m * s. */
static WF_INLINE bool permuted_scales(wf_tile_kind k, bool vnni) {
    return k == WF_TK_Q8_0 || k == WF_TK_Q5_0;
}

/* [2j x 8, 2j + 1 x 8]: the permute that gives pair j's registers their products. */
static const int32_t pair_indices[PANEL_PAIRS][16] __attribute__((aligned(64))) = {
#define PAIR_INDEX(j) {2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, \
                       2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1}
    PAIR_INDEX(0), PAIR_INDEX(1), PAIR_INDEX(2), PAIR_INDEX(3),
    PAIR_INDEX(4), PAIR_INDEX(5), PAIR_INDEX(6), PAIR_INDEX(7)
#undef PAIR_INDEX
};
static WF_INLINE __m512i pair_index(int j) {
    /* a load, not built in registers: compilers rebuild constants inside the loop otherwise */
    return _mm512_load_si512((const void *)pair_indices[j]);
}

/* NR weight rows x NP pairs of panel rows. */
static WF_INLINE void panel_kernel(wf_tile_kind k, const int NR, const int NP, bool vnni, int n,
                                   float *s, size_t ss, const void *vx, size_t bx,
                                   const void *panel, int nc) {
    const bool permuted = permuted_scales(k, vnni);
    const bool has_min = k == WF_TK_Q4_1 || k == WF_TK_Q5_1;
    const bool has_offset = k == WF_TK_Q4_0 || k == WF_TK_Q5_0 || k == WF_TK_Q8_0;
    const size_t wbs = wf_tile_block_bytes(k);
    const size_t pbs = sizeof(wf_panel_block) + (has_offset ? sizeof(wf_panel_offsets) : 0);
    const char *x = vx;
    const unsigned char *p = panel;
    __m512 acc[PANEL_TILE_ROWS][PANEL_PAIRS];
    __m512 summs[PANEL_TILE_ROWS]; /* lane c: the sum of m * s of output (r, c) */
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        summs[r] = _mm512_setzero_ps();
        WF_UNROLL
        for (int j = 0; j < NP; j++) acc[r][j] = _mm512_setzero_ps();
    }
    for (int i = 0; i < n / WF_QK; i++, p += pbs) {
        const wf_panel_block *pb = (const wf_panel_block *)(const void *)p;
        const wf_panel_offsets *po = (const wf_panel_offsets *)(const void *)(p + sizeof *pb);
        __m512i wq[PANEL_TILE_ROWS];
        __m512 dx[PANEL_TILE_ROWS], products[PANEL_TILE_ROWS];
        WF_UNROLL
        for (int r = 0; r < NR; r++) {
            const char *blk = x + (size_t)r * bx + (size_t)i * wbs;
            _mm_prefetch(blk + PANEL_PREFETCH, _MM_HINT_T0);
            int32_t dm;
            memcpy(&dm, blk, sizeof dm); /* d (and m) are the block's first halves */
            const __m128 wsc = _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
            dx[r] = _mm512_broadcastss_ps(wsc);
            if (has_min)
                summs[r] = _mm512_fmadd_ps(_mm512_broadcastss_ps(_mm_movehdup_ps(wsc)),
                                           _mm512_load_ps(pb->s), summs[r]);
            wq[r] = weight_quants_pair(k, vnni, blk, NULL);
            products[r] = permuted ? _mm512_mul_ps(dx[r], _mm512_load_ps(pb->s)) : dx[r];
        }
        /* pairs outside, weight rows inside: each pair's quants, starting values and scales
         * are loaded once for all NR rows (1.5 loads per register instead of 3 at NR = 2) */
        WF_UNROLL
        for (int j = 0; j < NP; j++) {
            const __m512i yq = _mm512_load_si512((const void *)pb->qs[2 * j]);
            const __m512i start = has_offset ? _mm512_load_si512((const void *)po->start[j])
                                             : _mm512_setzero_si512();
            const __m512 ysc = permuted ? _mm512_setzero_ps() : _mm512_load_ps(pb->scale[j]);
            WF_UNROLL
            for (int r = 0; r < NR; r++) {
                const __m512i lanes = dot_u8i8_acc(start, wq[r], yq, vnni);
                /* dx * dy of both outputs, each rounded once as ggml's scalar product */
                const __m512 d = permuted ? _mm512_permutexvar_ps(pair_index(j), products[r])
                                          : _mm512_mul_ps(dx[r], ysc);
                acc[r][j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lanes), acc[r][j]);
            }
        }
    }
    WF_UNROLL
    for (int r = 0; r < NR; r++) {
        float m[WF_QUANT_PANEL_ROWS];
        _mm512_storeu_ps(m, summs[r]);
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

#define PANEL_CASE(k, vnni, R, P)                                                                \
    case R * 16 + P: panel_kernel(k, R, P, vnni, n, s + r, ss, xr, bx, panel, nc); break;
#define PANEL_CASES(k, vnni, R)                                                                  \
    PANEL_CASE(k, vnni, R, 1) PANEL_CASE(k, vnni, R, 2) PANEL_CASE(k, vnni, R, 3)                \
    PANEL_CASE(k, vnni, R, 4) PANEL_CASE(k, vnni, R, 5) PANEL_CASE(k, vnni, R, 6)                \
    PANEL_CASE(k, vnni, R, 7) PANEL_CASE(k, vnni, R, 8)

/* Instantiates <name>_panel_dot (2-row tiles, a single row for an odd last one; as many pairs
 * as the panel has rows) and <name>_panel_pack, the layout it reads. */
#define PANEL_DEFINE(name, type, k, vnni)                                                        \
    static void name##_panel_dot(int n, float *s, size_t ss, const void *x, size_t bx,           \
                                 const void *panel, int nr, int nc) {                            \
        const int np = (nc + 1) / 2;                                                             \
        for (int r = 0; r < nr;) {                                                               \
            const int rows = nr - r >= PANEL_TILE_ROWS ? PANEL_TILE_ROWS : 1;                     \
            const char *xr = (const char *)x + (size_t)r * bx;                                   \
            switch (rows * 16 + np) {                                                            \
            PANEL_CASES(k, vnni, 2)                                                              \
            PANEL_CASES(k, vnni, 1)                                                              \
            default: __builtin_trap(); /* nc out of [1, WF_QUANT_PANEL_ROWS] */                  \
            }                                                                                    \
            r += rows;                                                                           \
        }                                                                                        \
    }                                                                                            \
    static void name##_panel_pack(const void *xq, size_t xq_row, int nrows, int n, void *panel) { \
        wf_quant_panel_pack_layout(type, high_nibbles_in_place(k, vnni), xq, xq_row, nrows, n,   \
                                   panel);                                                       \
    }

PANEL_DEFINE(q4_0, WF_GGML_TYPE_Q4_0, WF_TK_Q4_0, false)
PANEL_DEFINE(q4_1, WF_GGML_TYPE_Q4_1, WF_TK_Q4_1, false)
PANEL_DEFINE(q5_0, WF_GGML_TYPE_Q5_0, WF_TK_Q5_0, false)
PANEL_DEFINE(q5_1, WF_GGML_TYPE_Q5_1, WF_TK_Q5_1, false)
PANEL_DEFINE(q4_0_vnni, WF_GGML_TYPE_Q4_0, WF_TK_Q4_0, true)
PANEL_DEFINE(q4_1_vnni, WF_GGML_TYPE_Q4_1, WF_TK_Q4_1, true)
PANEL_DEFINE(q5_0_vnni, WF_GGML_TYPE_Q5_0, WF_TK_Q5_0, true)
PANEL_DEFINE(q5_1_vnni, WF_GGML_TYPE_Q5_1, WF_TK_Q5_1, true)
PANEL_DEFINE(q8_0_vnni, WF_GGML_TYPE_Q8_0, WF_TK_Q8_0, true)

/* ---- matrix-vector: 16 weight rows against one activation row (the decode case) ---------
 *
 * Memory-bound decode needs few operations per weight byte. Per block, the 16 rows' scales come
 * in with one gather (d, and m for the _1 types, sit at each block's start) and are converted,
 * multiplied by the activation's scale and (for Q4_1/Q5_1) fused into summs 16 rows at a time;
 * each 512-bit register then holds two rows j and j + 8 (lanes 0-7 and 8-15) of one block, so
 * dpbusd, conversion and fma each serve two outputs. Per output the float arithmetic is ggml's,
 * as in the panel kernel above: the two halves never mix. */

#define MATVEC_PAIRS (WF_QUANT_MATVEC_ROWS / 2)
_Static_assert(WF_QUANT_MATVEC_ROWS == 16, "a tile is one 16-lane gather and 8 register pairs");
/* tiles of 16 rows ahead to prefetch (a tile is 16 consecutive rows, one contiguous range) */
#define MATVEC_PREFETCH_TILES 2 /* 1, 2 and 4 measured alike in decode */

/* [v[j] x 8, v[j + 8] x 8] for j < 4 from lo = v's quarters (0, 0, 2, 2), for j >= 4 from
 * hi = (1, 1, 3, 3): one in-lane permute with an immediate (the switch folds away once the
 * caller's loop over j is unrolled). */
static WF_INLINE __m512 pair_scale(__m512 lo, __m512 hi, int j) {
    switch (j) {
    case 0: return _mm512_permute_ps(lo, 0x00);
    case 1: return _mm512_permute_ps(lo, 0x55);
    case 2: return _mm512_permute_ps(lo, 0xaa);
    case 3: return _mm512_permute_ps(lo, 0xff);
    case 4: return _mm512_permute_ps(hi, 0x00);
    case 5: return _mm512_permute_ps(hi, 0x55);
    case 6: return _mm512_permute_ps(hi, 0xaa);
    default: return _mm512_permute_ps(hi, 0xff);
    }
}

/* Rows [0, 16) at x (row stride bx) against the activation row y: s[r] = dot(row r, y). */
static WF_INLINE void matvec_tile(wf_tile_kind k, bool vnni, int n, float *s, const char *x,
                                  size_t bx, const char *y) {
    const bool has_min = k == WF_TK_Q4_1 || k == WF_TK_Q5_1;
    const int offset = k == WF_TK_Q4_0 ? 8 : k == WF_TK_Q5_0 ? 16 : k == WF_TK_Q8_0 ? 128 : 0;
    const size_t wbs = wf_tile_block_bytes(k);
    const size_t ybs = has_min ? sizeof(wf_block_q8_1) : sizeof(wf_block_q8_0);
    const size_t yqs = has_min ? offsetof(wf_block_q8_1, qs) : offsetof(wf_block_q8_0, qs);
    const size_t half = MATVEC_PAIRS * bx; /* row j + 8 is half bytes after row j */
    const __m512i row_at =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32((int)bx));
    __m512 acc[MATVEC_PAIRS];
    WF_UNROLL
    for (int j = 0; j < MATVEC_PAIRS; j++) acc[j] = _mm512_setzero_ps();
    __m512 summs = _mm512_setzero_ps(); /* lane r: row r's sum of m * s */
    const char *ahead = x + MATVEC_PREFETCH_TILES * WF_QUANT_MATVEC_ROWS * bx;
    for (int i = 0; i < n / WF_QK; i++) {
        const char *blk = x + (size_t)i * wbs;
        /* the tile MATVEC_PREFETCH_TILES ahead, spread over this tile's blocks */
        WF_UNROLL
        for (size_t line = 0; line < WF_QUANT_MATVEC_ROWS * wbs; line += 64)
            _mm_prefetch(ahead + line, _MM_HINT_T0);
        ahead += WF_QUANT_MATVEC_ROWS * wbs;
        const char *yb = y + (size_t)i * ybs;
        const __m128 ysc = wf_tile_scales(yb); /* d, and s for Q8_1 */
        const __m512i yq = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(yb + yqs)));
        /* the offset types' weights are unsigned q + offset: start each int32 lane at
         * -offset * (sum of its 4 activation bytes) to land on ggml's signed products */
        __m512i start = _mm512_setzero_si512();
        if (offset) {
            /* 16x for the lanes of high nibbles kept in place */
            const __m512i offsets = high_nibbles_in_place(k, vnni)
                                        ? bytes_by_quarter(offset, 16 * offset)
                                        : _mm512_set1_epi8((char)offset);
            start = _mm512_sub_epi32(start, dot_u8i8_acc(_mm512_setzero_si512(), offsets, yq, vnni));
        }
        /* d (and m) of all 16 rows' blocks */
        const __m512i dm = _mm512_i32gather_epi32(row_at, (const void *)blk, 1);
        const __m512 xd = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
        /* dx * dy for each row, rounded once as ggml's scalar product */
        const __m512 dprod = _mm512_mul_ps(xd, _mm512_broadcastss_ps(ysc));
        __m512 dlo = _mm512_shuffle_f32x4(dprod, dprod, _MM_SHUFFLE(2, 2, 0, 0));
        __m512 dhi = _mm512_shuffle_f32x4(dprod, dprod, _MM_SHUFFLE(3, 3, 1, 1));
        if (high_nibbles_in_place(k, vnni)) {
            dlo = _mm512_mul_ps(dlo, high_nibble_scale());
            dhi = _mm512_mul_ps(dhi, high_nibble_scale());
        }
        if (has_min) {
            const __m512 xm = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
            summs = _mm512_fmadd_ps(xm, _mm512_broadcastss_ps(_mm_movehdup_ps(ysc)), summs);
        }
        const char *row = blk;
        WF_UNROLL
        for (int j = 0; j < MATVEC_PAIRS; j++, row += bx) {
            const __m512i wq = weight_quants_pair(k, vnni, row, row + half);
            const __m512i lanes = dot_u8i8_acc(start, wq, yq, vnni);
            acc[j] = _mm512_fmadd_ps(pair_scale(dlo, dhi, j), _mm512_cvtepi32_ps(lanes), acc[j]);
        }
    }
    /* wf_hsum_ps8 on both halves of every pair at once: (hi + lo) of the 128-bit quarters, then
     * lanes 0+2 and 1+3, then 0+1; pair j's results land in lanes 0 and 8, for rows j, j + 8 */
    __m512 out = _mm512_setzero_ps();
    const __m512i from_pair = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(8), 1);
    WF_UNROLL
    for (int j = 0; j < MATVEC_PAIRS; j++) {
        const __m512 swapped = _mm512_shuffle_f32x4(acc[j], acc[j], _MM_SHUFFLE(2, 3, 0, 1));
        __m512 t = _mm512_add_ps(swapped, acc[j]);
        t = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));
        t = _mm512_add_ps(t, _mm512_movehdup_ps(t));
        out = _mm512_mask_permutexvar_ps(out, (__mmask16)(0x101u << j), from_pair, t);
    }
    if (has_min) out = _mm512_add_ps(out, summs);
    _mm512_storeu_ps(s, out);
}

/* Instantiates <name>_matvec: nr (a multiple of 16) rows against one activation row. */
#define MATVEC_DEFINE(name, k, vnni)                                                              \
    static void name##_matvec(int n, float *s, const void *x, size_t bx, const void *y, int nr) { \
        for (int r = 0; r + WF_QUANT_MATVEC_ROWS <= nr; r += WF_QUANT_MATVEC_ROWS)                \
            matvec_tile(k, vnni, n, s + r, (const char *)x + (size_t)r * bx, bx, y);             \
    }

MATVEC_DEFINE(q4_0, WF_TK_Q4_0, false)
MATVEC_DEFINE(q4_1, WF_TK_Q4_1, false)
MATVEC_DEFINE(q5_0, WF_TK_Q5_0, false)
MATVEC_DEFINE(q5_1, WF_TK_Q5_1, false)
MATVEC_DEFINE(q4_0_vnni, WF_TK_Q4_0, true)
MATVEC_DEFINE(q4_1_vnni, WF_TK_Q4_1, true)
MATVEC_DEFINE(q5_0_vnni, WF_TK_Q5_0, true)
MATVEC_DEFINE(q5_1_vnni, WF_TK_Q5_1, true)
MATVEC_DEFINE(q8_0_vnni, WF_TK_Q8_0, true)

void wf_quant_fill_panel_avx512(wf_quant_ops ops[WF_GGML_TYPE_COUNT], bool vnni) {
#define SET_PANEL(type, name)                                                                    \
    do {                                                                                         \
        ops[type].panel_dot = vnni ? name##_vnni_panel_dot : name##_panel_dot;                    \
        ops[type].panel_pack = vnni ? name##_vnni_panel_pack : name##_panel_pack;                 \
    } while (0)
    SET_PANEL(WF_GGML_TYPE_Q4_0, q4_0);
    SET_PANEL(WF_GGML_TYPE_Q4_1, q4_1);
    SET_PANEL(WF_GGML_TYPE_Q5_0, q5_0);
    SET_PANEL(WF_GGML_TYPE_Q5_1, q5_1);
#undef SET_PANEL
    /* without VNNI, Q8_0's unsigned q + 128 would saturate maddubs' pair sums: tiles only */
    ops[WF_GGML_TYPE_Q8_0].panel_dot = vnni ? q8_0_vnni_panel_dot : NULL;
    ops[WF_GGML_TYPE_Q8_0].panel_pack = vnni ? q8_0_vnni_panel_pack : NULL;
    ops[WF_GGML_TYPE_Q4_0].matvec = vnni ? q4_0_vnni_matvec : q4_0_matvec;
    ops[WF_GGML_TYPE_Q4_1].matvec = vnni ? q4_1_vnni_matvec : q4_1_matvec;
    ops[WF_GGML_TYPE_Q5_0].matvec = vnni ? q5_0_vnni_matvec : q5_0_matvec;
    ops[WF_GGML_TYPE_Q5_1].matvec = vnni ? q5_1_vnni_matvec : q5_1_matvec;
    ops[WF_GGML_TYPE_Q8_0].matvec = vnni ? q8_0_vnni_matvec : NULL;
}
