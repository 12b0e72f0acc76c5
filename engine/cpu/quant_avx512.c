/* AVX-512 (F/BW/VL/DQ, plus VNNI's dpbusd where the CPU has it) kernels. The block dot
 * products keep 256-bit lanes (ggml's x86 accumulation order, so results are bit-identical to
 * the AVX2 path) but use dpbusd and the 32 vector registers for wider tiles; quantisers,
 * dequantisers and float dot products use 512-bit registers. Types and slots not specialised
 * here fall back to AVX2 (the K-quants' dot products). */
#include <immintrin.h>
#include <stdbool.h>

#include "engine/cpu/quant_impl.h"
#include "engine/cpu/quant_kpair_avx512.h"
#include "engine/cpu/quant_ktile_x86.h"
#include "engine/cpu/quant_tile_x86.h"
#include "engine/cpu/simd_x86.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* ---- legacy block types: the shared register tiles, with VNNI's dpbusd when present ----- */

/* (Pairing two outputs per 512-bit register was tried: no faster than these 256-bit tiles,
 * which already keep the ports busy with up to 8 independent accumulators.) */
WF_TILE_DEFINE(q4_0, WF_TK_Q4_0, false)
WF_TILE_DEFINE(q4_1, WF_TK_Q4_1, false)
WF_TILE_DEFINE(q5_0, WF_TK_Q5_0, false)
WF_TILE_DEFINE(q5_1, WF_TK_Q5_1, false)
WF_TILE_DEFINE(q8_0, WF_TK_Q8_0, false)
WF_TILE_DEFINE(q4_0_vnni, WF_TK_Q4_0, true)
WF_TILE_DEFINE(q4_1_vnni, WF_TK_Q4_1, true)
WF_TILE_DEFINE(q5_0_vnni, WF_TK_Q5_0, true)
WF_TILE_DEFINE(q5_1_vnni, WF_TK_Q5_1, true)
WF_TILE_DEFINE(q8_0_vnni, WF_TK_Q8_0, true)

/* K-quants: the same 256-bit tiles for one activation row (32 vector registers hold up to
 * 2x4 outputs), pairs of activation rows per 512-bit register for several (quant_kpair_avx512.h:
 * ~17% fewer CPU samples than the 2x4 tiles for Gemma 3's prefill; a pairs-of-weight-rows
 * variant for one activation row was no faster, so decode keeps the 256-bit tiles) */
WF_KTILE_DEFINE(q4_K, wf_ktile_q4_K, 8)
WF_KTILE_DEFINE(q6_K, wf_ktile_q6_K, 8)
WF_KPAIR_DEFINE(q4_K, q4_K, wf_kpair_q4_K, false)
WF_KPAIR_DEFINE(q6_K, q6_K, wf_kpair_q6_K, false)
WF_KPAIR_DEFINE(q4_K_vnni, q4_K, wf_kpair_q4_K, true)
WF_KPAIR_DEFINE(q6_K_vnni, q6_K, wf_kpair_q6_K, true)

/* ---- activation quantisers: same bytes as the scalar and AVX2 paths ---------------------- */

static ALWAYS_INLINE int q8_block(const float *x, float *d_out, int8_t *qs) {
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    __m512 a = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
    const float max = _mm512_reduce_max_ps(a);
    *d_out = max / 127.f;
    const __m512 id = _mm512_set1_ps(max != 0.0f ? 127.f / max : 0.0f);
    __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm_storeu_si128((void *)qs, _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128((void *)(qs + 16), _mm512_cvtsepi32_epi8(q1));
    /* ggml sums the unsaturated int32 quants; they never exceed int8 range for finite x */
    return _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}

static void q8_0_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float d;
        q8_block(x, &d, y[i].qs);
        y[i].d = _cvtss_sh(d, 0);
    }
}

static void q8_1_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float d;
        int sum = q8_block(x, &d, y[i].qs);
        y[i].d = _cvtss_sh(d, 0);
        y[i].s = _cvtss_sh(d * (float)sum, 0);
    }
}

/* ---- dequantisers ------------------------------------------------------------------------ */

static void q4_1_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q4_1 *x = vx;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(x[i].d)), m = _mm512_set1_ps(_cvtsh_ss(x[i].m));
        __m128i raw = _mm_loadu_si128((const void *)x[i].qs);
        __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw, m4)));
        __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), m4)));
        /* multiply, then add: two roundings like the scalar path */
        _mm512_storeu_ps(y, _mm512_add_round_ps(_mm512_mul_ps(lo, d), m, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        _mm512_storeu_ps(y + 16, _mm512_add_round_ps(_mm512_mul_ps(hi, d), m, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
}

static void q8_0_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(x[i].d));
        __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)x[i].qs)));
        __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)(x[i].qs + 16))));
        _mm512_storeu_ps(y, _mm512_mul_ps(a, d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(b, d));
    }
}

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *x = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(x + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(x[i]);
}

/* ---- float dot products: 4 x 16 lanes --------------------------------------------------- */

static void f32_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * j), _mm512_loadu_ps(y + i + 16 * j), acc[j]);
    /* ggml's GGML_F32x16_REDUCE order, (acc0 + acc2) + (acc1 + acc3): LoRA's f32 A/B products
     * then round as llama.cpp's do */
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3])));
    /* leftovers (all of a rank-8 B product): rounded product, then add, as llama.cpp's build
     * computes them; a fused multiply-add here flips a last bit now and then */
    for (; i < n; i++) sum += wf_no_contract_f32(x[i] * y[i]);
    *s = sum;
}

static void f16_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 4; j++) {
            __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(x + i + 16 * j)));
            __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(y + i + 16 * j)));
            acc[j] = _mm512_fmadd_ps(a, b, acc[j]);
        }
    /* ggml's GGML_F32Cx16_REDUCE, (acc0 + acc2) + (acc1 + acc3), and its leftovers in double
     * (ggml_float): F16 LoRA products then round as llama.cpp's do */
    double sum = (double)_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3])));
    for (; i < n; i++) sum += (double)(_cvtsh_ss(x[i]) * _cvtsh_ss(y[i]));
    *s = (float)sum;
}

void wf_quant_fill_avx512(wf_quant_ops ops[WF_GGML_TYPE_COUNT]) {
    const bool vnni = wf_cpu_features_get()->avx512vnni;
#define SET_DOT(T, name)                                                                       \
    ops[WF_GGML_TYPE_##T].vec_dot = vnni ? name##_vnni_vec_dot : name##_vec_dot;             \
    ops[WF_GGML_TYPE_##T].vec_dot_tile = vnni ? name##_vnni_vec_dot_tile : name##_vec_dot_tile
    SET_DOT(Q4_0, q4_0);
    SET_DOT(Q4_1, q4_1);
    SET_DOT(Q5_0, q5_0);
    SET_DOT(Q5_1, q5_1);
    SET_DOT(Q8_0, q8_0);
#undef SET_DOT
    wf_quant_fill_panel_avx512(ops, vnni);
    ops[WF_GGML_TYPE_Q4_K].vec_dot = q4_K_vec_dot;
    ops[WF_GGML_TYPE_Q4_K].vec_dot_tile = vnni ? q4_K_vnni_vec_dot_kpair : q4_K_vec_dot_kpair;
    ops[WF_GGML_TYPE_Q4_K].matvec = q4_K_matvec;
    ops[WF_GGML_TYPE_Q6_K].vec_dot = q6_K_vec_dot;
    ops[WF_GGML_TYPE_Q6_K].vec_dot_tile = vnni ? q6_K_vnni_vec_dot_kpair : q6_K_vec_dot_kpair;
    ops[WF_GGML_TYPE_Q6_K].matvec = q6_K_matvec;
    wf_quant_fill_kpanel_avx512(ops, vnni); /* batched: panels of 16 activation rows */
    ops[WF_GGML_TYPE_F32].vec_dot = f32_vec_dot;
    ops[WF_GGML_TYPE_F16].to_float = f16_to_float;
    ops[WF_GGML_TYPE_F16].vec_dot = f16_vec_dot;
    ops[WF_GGML_TYPE_Q4_1].to_float = q4_1_to_float;
    ops[WF_GGML_TYPE_Q8_0].to_float = q8_0_to_float;
    ops[WF_GGML_TYPE_Q8_0].from_float = q8_0_from_float;
    ops[WF_GGML_TYPE_Q8_1].from_float = q8_1_from_float;
}
