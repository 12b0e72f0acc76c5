/* AVX-512 panel kernels of the K-quants (Q4_K, Q6_K weights against a panel of 16 Q8_K
 * activation rows, wf_kpanel_block): the batched (prefill, batch-32 decode) path.
 *
 * Each output gets exactly the operations of quant_kpair_avx512.h's pairs (ggml's AVX2 order:
 * per super-block int32 lanes of scale * byte-pair products, one conversion and one fma into 8
 * float lanes; Q4_K's min term fused into 4 more lanes), a register holding one weight row
 * against two activation rows in its 256-bit halves, so every output equals the single dot
 * product bit for bit. What changes is the work around the products: a weight row's block is
 * unpacked (scales, mins, nibbles) once for all 16 activation rows instead of once per 4, and
 * the activation side comes ready from the panel (rows joined in pairs, bsums summed, scales
 * broadcast), where the pair tiles joined and summed them per weight row pair. */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/cpu/quant_impl.h"
#include "engine/cpu/quant_kpair_avx512.h" /* wf_kp_q6_K_unpack */
#include "engine/cpu/quant_tile_x86.h" /* WF_INLINE, WF_UNROLL */
#include "engine/cpu/simd_x86.h"

#define KP_PAIRS (WF_QUANT_PANEL_ROWS / 2)
/* bytes ahead in the weight rows to prefetch (rows are contiguous, so this runs a few rows
 * ahead within the slice wf_matmul hands over) */
#define KP_PREFETCH 2048

/* acc + a16 . b16 in int32 pairs (VNNI's dpwssd; exact, |scale * pair sum| < 2^16 here) */
static WF_INLINE __m512i madd_acc(__m512i acc, __m512i a16, __m512i b16, bool vnni) {
    if (vnni) return _mm512_dpwssd_epi32(acc, a16, b16);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a16, b16));
}

static WF_INLINE void prefetch_block(const char *blk, size_t bytes) {
    for (size_t line = 0; line < bytes; line += 64) _mm_prefetch(blk + KP_PREFETCH + line, _MM_HINT_T0);
}

/* Stores pair p's outputs (row 2p, and 2p + 1 if < nc) of weight row s[0]: the 8 float lanes'
 * sum as wf_hsum_ps8, plus Q4_K's min lanes (m4: 4 per half) reduced as ggml's 128-bit tree. */
static WF_INLINE void store_pair(float *s, size_t ss, int p, int nc, __m512 acc, __m256 acc_m,
                                 bool has_min) {
    for (int h = 0; h < 2 && 2 * p + h < nc; h++) {
        float v = wf_hsum_ps8(h ? _mm512_extractf32x8_ps(acc, 1) : _mm512_castps512_ps256(acc));
        if (has_min) {
            __m128 m = h ? _mm256_extractf128_ps(acc_m, 1) : _mm256_castps256_ps128(acc_m);
            m = _mm_add_ps(m, _mm_movehl_ps(m, m));
            m = _mm_add_ss(m, _mm_movehdup_ps(m));
            v += _mm_cvtss_f32(m);
        }
        s[(size_t)(2 * p + h) * ss] = v;
    }
}

/* One Q4_K weight row against NP pairs of the panel. */
static WF_INLINE void q4_K_row(const int NP, bool vnni, int nc, int n, float *s, size_t ss,
                               const char *x, const wf_kpanel_block *pb) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[KP_PAIRS];
    __m256 acc_m[KP_PAIRS];
    WF_UNROLL
    for (int p = 0; p < NP; p++) {
        acc[p] = _mm512_setzero_ps();
        acc_m[p] = _mm256_setzero_ps();
    }
    for (int i = 0; i < n / WF_QK_K; i++, pb++) {
        const wf_block_q4_K *xb = (const void *)(x + (size_t)i * sizeof(wf_block_q4_K));
        prefetch_block((const char *)xb, sizeof *xb);
        uint8_t sc[8], mn[8];
        wf_q4_K_scales(xb->scales, sc, mn);
        /* (-y.d) * dmin as ggml: the same bits as y.d * (-dmin) */
        const __m256 neg_dmin = _mm256_set1_ps(-_cvtsh_ss(xb->dmin));
        const __m256i mins16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const void *)mn)));
        __m512i sumi[KP_PAIRS];
        WF_UNROLL
        for (int p = 0; p < NP; p++) {
            const __m256 dm = _mm256_mul_ps(_mm256_load_ps(pb->d4[p]), neg_dmin);
            const __m256i prod = _mm256_madd_epi16(mins16, _mm256_load_si256((const void *)pb->bsums32[p]));
            acc_m[p] = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(prod), acc_m[p]);
            sumi[p] = _mm512_setzero_si512();
        }
        for (int j = 0; j < WF_QK_K / 64; j++) {
            const __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(xb->qs + 32 * j)));
            const __m512i lo = _mm512_and_si512(bits, m4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4);
            const __m512i slo = _mm512_set1_epi16(sc[2 * j]), shi = _mm512_set1_epi16(sc[2 * j + 1]);
            WF_UNROLL
            for (int p = 0; p < NP; p++) {
                const __m512i ylo = _mm512_load_si512((const void *)pb->qs[2 * j][p]);
                const __m512i yhi = _mm512_load_si512((const void *)pb->qs[2 * j + 1][p]);
                sumi[p] = madd_acc(sumi[p], slo, _mm512_maddubs_epi16(lo, ylo), vnni);
                sumi[p] = madd_acc(sumi[p], shi, _mm512_maddubs_epi16(hi, yhi), vnni);
            }
        }
        const __m512 dx = _mm512_set1_ps(_cvtsh_ss(xb->d));
        WF_UNROLL
        for (int p = 0; p < NP; p++) /* y.d * x.d, rounded once as ggml's */
            acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(pb->d8[p]), dx),
                                     _mm512_cvtepi32_ps(sumi[p]), acc[p]);
    }
    WF_UNROLL
    for (int p = 0; p < NP; p++) store_pair(s, ss, p, nc, acc[p], acc_m[p], true);
}

/* One Q6_K weight row against NP pairs of the panel. */
static WF_INLINE void q6_K_row(const int NP, bool vnni, int nc, int n, float *s, size_t ss,
                               const char *x, const wf_kpanel_block *pb) {
    __m512 acc[KP_PAIRS];
    WF_UNROLL
    for (int p = 0; p < NP; p++) acc[p] = _mm512_setzero_ps();
    for (int i = 0; i < n / WF_QK_K; i++, pb++) {
        const wf_block_q6_K *xb = (const void *)(x + (size_t)i * sizeof(wf_block_q6_K));
        prefetch_block((const char *)xb, sizeof *xb);
        __m512i sumi[KP_PAIRS];
        /* quants are used unsigned (q + 32): start at -32 * sum(scale * bsum) */
        const __m512i sc16 = _mm512_broadcast_i64x4(_mm256_cvtepi8_epi16(_mm_loadu_si128((const void *)xb->scales)));
        WF_UNROLL
        for (int p = 0; p < NP; p++) {
            const __m512i bs = _mm512_load_si512((const void *)pb->bsums[p]);
            sumi[p] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_madd_epi16(bs, sc16), 5));
        }
        for (int j = 0; j < WF_QK_K / 128; j++) {
            __m512i q[4];
            wf_kp_q6_K_unpack(xb->ql + 64 * j, xb->qh + 32 * j, q);
            WF_UNROLL
            for (int t = 0; t < 4; t++) {
                /* 16 elements per scale: the low 128 bits of each half use scale 8j+2t, the high 8j+2t+1 */
                const int is = 8 * j + 2 * t;
                const __m512i scv = _mm512_broadcast_i64x4(_mm256_setr_m128i(_mm_set1_epi16(xb->scales[is]), _mm_set1_epi16(xb->scales[is + 1])));
                WF_UNROLL
                for (int p = 0; p < NP; p++)
                    sumi[p] = madd_acc(sumi[p], scv,
                                       _mm512_maddubs_epi16(q[t], _mm512_load_si512((const void *)pb->qs[4 * j + t][p])), vnni);
            }
        }
        const __m512 dx = _mm512_set1_ps(_cvtsh_ss(xb->d));
        WF_UNROLL
        for (int p = 0; p < NP; p++)
            acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(pb->d8[p]), dx),
                                     _mm512_cvtepi32_ps(sumi[p]), acc[p]);
    }
    WF_UNROLL
    for (int p = 0; p < NP; p++) store_pair(s, ss, p, nc, acc[p], _mm256_setzero_ps(), false);
}

#define KP_CASE(fn, vnni, P)                                                                     \
    case P: fn(P, vnni, nc, n, s + r, ss, (const char *)x + (size_t)r * bx, panel); break;

/* <name>_kpanel_dot: the nr weight rows one at a time, as many pairs as the panel has rows. */
#define KPANEL_DEFINE(name, fn, vnni)                                                             \
    static void name##_kpanel_dot(int n, float *s, size_t ss, const void *x, size_t bx,          \
                                  const void *panel, int nr, int nc) {                           \
        for (int r = 0; r < nr; r++) {                                                           \
            switch ((nc + 1) / 2) {                                                              \
            KP_CASE(fn, vnni, 1) KP_CASE(fn, vnni, 2) KP_CASE(fn, vnni, 3) KP_CASE(fn, vnni, 4)  \
            KP_CASE(fn, vnni, 5) KP_CASE(fn, vnni, 6) KP_CASE(fn, vnni, 7) KP_CASE(fn, vnni, 8)  \
            default: __builtin_trap(); /* nc out of [1, WF_QUANT_PANEL_ROWS] */                  \
            }                                                                                    \
        }                                                                                        \
    }

KPANEL_DEFINE(q4_K, q4_K_row, false)
KPANEL_DEFINE(q6_K, q6_K_row, false)
KPANEL_DEFINE(q4_K_vnni, q4_K_row, true)
KPANEL_DEFINE(q6_K_vnni, q6_K_row, true)

static void kpanel_pack(const void *xq, size_t xq_row, int nrows, int n, void *panel) {
    wf_quant_kpanel_pack(xq, xq_row, nrows, n, panel);
}

void wf_quant_fill_kpanel_avx512(wf_quant_ops ops[WF_GGML_TYPE_COUNT], bool vnni) {
    ops[WF_GGML_TYPE_Q4_K].panel_dot = vnni ? q4_K_vnni_kpanel_dot : q4_K_kpanel_dot;
    ops[WF_GGML_TYPE_Q6_K].panel_dot = vnni ? q6_K_vnni_kpanel_dot : q6_K_kpanel_dot;
    ops[WF_GGML_TYPE_Q4_K].panel_pack = kpanel_pack;
    ops[WF_GGML_TYPE_Q6_K].panel_pack = kpanel_pack;
}
