/* engine/cpu/quant*.c: for every supported type and every ISA path this CPU has —
 * quantise/dequantise round-trip error bounds, SIMD to_float and vec_dot against the scalar
 * reference (1e-5 of the magnitude; bit-exact between AVX2 and AVX-512 where both mirror
 * ggml's lane structure), SIMD from_float byte-identical to scalar, odd row lengths, zeros,
 * denormals and large values, Q8_1's stored sum, and fixtures produced by gguf-py
 * (scripts/gen_quant_fixtures.py) for bit-exact agreement with ggml's reference quantisers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/cpu/features.h"
#include "engine/cpu/quant.h"
#include "engine/cpu/quant_impl.h" /* the AVX-512 kernel table, with and without VNNI */

static const wf_ggml_type all_types[] = {
    WF_GGML_TYPE_F32,  WF_GGML_TYPE_F16,  WF_GGML_TYPE_BF16, WF_GGML_TYPE_Q4_0,
    WF_GGML_TYPE_Q4_1, WF_GGML_TYPE_Q5_0, WF_GGML_TYPE_Q5_1, WF_GGML_TYPE_Q8_0,
    WF_GGML_TYPE_Q8_1, WF_GGML_TYPE_Q4_K, WF_GGML_TYPE_Q6_K, WF_GGML_TYPE_Q8_K,
};
#define N_TYPES (sizeof(all_types) / sizeof(all_types[0]))

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float uniform(void) { return (float)(next_u32() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

static int block_of(wf_ggml_type t) { return wf_ggml_type_info_get(t)->block_size; }

static wf_cpu_isa max_isa(void) { return wf_cpu_features_get()->isa; }

/* data patterns: 0 uniform, 1 gaussian-ish with outliers, 2 all zero, 3 denormals,
 * 4 large, 5 mixed zero blocks / constant blocks / tiny and huge blocks, 6 moderate */
static void fill(float *x, int n, int pattern, int seed) {
    rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(seed * 7919 + pattern);
    for (int i = 0; i < n; i++) {
        switch (pattern) {
        case 0: x[i] = uniform(); break;
        case 1: x[i] = (uniform() + uniform() + uniform()) * 0.3f * (i % 97 == 0 ? 20.0f : 1.0f); break;
        case 2: x[i] = 0.0f; break;
        case 3: x[i] = uniform() * 1e-39f; break;
        case 4: x[i] = uniform() * 6e4f; break;
        case 6: x[i] = uniform() * 1e3f; break;
        default: {
            int blk = (i / 32) % 4;
            x[i] = blk == 0 ? 0.0f : blk == 1 ? 0.5f : blk == 2 ? uniform() * 1e-6f : uniform() * 1e3f;
        }
        }
    }
}

static size_t row_bytes(wf_ggml_type t, int n) { return wf_quant_row_size(t, n); }

/* max |dequant(quant(x)) - x| per element, relative to the largest |x| of the element's
 * block (its super-block for K-quants) */
static float roundtrip_bound(wf_ggml_type t) {
    switch (t) {
    case WF_GGML_TYPE_F32: return 0.0f;
    case WF_GGML_TYPE_F16: return 1.0f / 1024;
    case WF_GGML_TYPE_BF16: return 1.0f / 128;
    case WF_GGML_TYPE_Q4_0: return 1.0f / 8 * 1.01f; /* +max maps to -8; -max clamps at 7 */
    case WF_GGML_TYPE_Q4_1: return 1.0f / 15 * 1.01f;
    case WF_GGML_TYPE_Q5_0: return 1.0f / 16 * 1.01f;
    case WF_GGML_TYPE_Q5_1: return 1.0f / 31 * 1.01f;
    case WF_GGML_TYPE_Q8_0: case WF_GGML_TYPE_Q8_1: case WF_GGML_TYPE_Q8_K: return 0.5f / 127 * 1.01f;
    case WF_GGML_TYPE_Q4_K: return 0.12f;
    case WF_GGML_TYPE_Q6_K: return 0.04f;
    default: return 0.0f;
    }
}

static void check_roundtrip(wf_ggml_type t, int n, int pattern) {
    const wf_quant_ops *ops = wf_quant_ops_for_isa(t, WF_CPU_ISA_SCALAR);
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    void *q = malloc(row_bytes(t, n));
    fill(x, n, pattern, n);
    ops->from_float(x, q, n);
    ops->to_float(q, y, n);
    int group = t == WF_GGML_TYPE_Q4_K || t == WF_GGML_TYPE_Q6_K || t == WF_GGML_TYPE_Q8_K ? 256 : 32;
    for (int b = 0; b < n; b += group) {
        int len = b + group <= n ? group : n - b;
        float amax = 0;
        for (int i = 0; i < len; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        /* halves (F16 scales) flush values below 2^-24 and saturate at 65504 */
        float slack = (t == WF_GGML_TYPE_F16 || t == WF_GGML_TYPE_F32 || t == WF_GGML_TYPE_BF16) ? 0x1p-24f : amax * 2e-3f + 128 * 0x1p-24f; /* half scales underflow below 2^-24 */
        if (t == WF_GGML_TYPE_Q8_K) slack = amax * 1e-6f + 1e-36f; /* float scale; -127/max overflows for denormal blocks */
        for (int i = 0; i < len; i++) {
            float err = fabsf(y[b + i] - x[b + i]);
            float bound = t == WF_GGML_TYPE_F16 || t == WF_GGML_TYPE_BF16
                              ? fabsf(x[b + i]) * roundtrip_bound(t) + slack
                              : amax * roundtrip_bound(t) + slack;
            ck_assert_msg(err <= bound, "%s n=%d pattern=%d i=%d: x=%g y=%g bound %g",
                          wf_ggml_type_info_get(t)->name, n, pattern, b + i, (double)x[b + i],
                          (double)y[b + i], (double)bound);
        }
    }
    free(x);
    free(y);
    free(q);
}

START_TEST(test_roundtrip) {
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        wf_ggml_type t = all_types[ti];
        int bs = block_of(t);
        const int mults[] = {1, 3, 7, 9};
        for (int mi = 0; mi < 4; mi++)
            for (int p = 0; p <= 5; p++) {
                if (t == WF_GGML_TYPE_F16 && p == 4) continue; /* beyond 65504 is inf by design */
                check_roundtrip(t, bs * mults[mi] * (bs == 1 ? 37 : 1), p);
            }
    }
}
END_TEST

/* all paths: from_float identical bytes, to_float within 1e-5 relative (exact in practice) */
START_TEST(test_simd_quantise_dequantise) {
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        wf_ggml_type t = all_types[ti];
        const wf_quant_ops *ref = wf_quant_ops_for_isa(t, WF_CPU_ISA_SCALAR);
        ck_assert_ptr_nonnull(ref);
        int bs = block_of(t);
        const int ns[] = {bs, 3 * bs, 5 * bs, bs == 1 ? 1001 : 11 * bs};
        for (int isa = WF_CPU_ISA_AVX2; isa <= (int)max_isa(); isa++) {
            const wf_quant_ops *ops = wf_quant_ops_for_isa(t, (wf_cpu_isa)isa);
            ck_assert_ptr_nonnull(ops);
            ck_assert_int_eq(ops->vec_dot_type, ref->vec_dot_type);
            for (int ni = 0; ni < 4; ni++)
                for (int p = 0; p <= 5; p++) {
                    int n = ns[ni];
                    size_t rb = row_bytes(t, n);
                    float *x = malloc(sizeof(float) * (size_t)n);
                    float *y0 = malloc(sizeof(float) * (size_t)n), *y1 = malloc(sizeof(float) * (size_t)n);
                    unsigned char *q0 = malloc(rb), *q1 = malloc(rb);
                    fill(x, n, p, ni);
                    ref->from_float(x, q0, n);
                    ops->from_float(x, q1, n);
                    ck_assert_msg(memcmp(q0, q1, rb) == 0, "%s %s from_float differs n=%d p=%d",
                                  wf_ggml_type_info_get(t)->name, wf_cpu_isa_name((wf_cpu_isa)isa), n, p);
                    ref->from_float_ref(x, q1, n);
                    ops->from_float_ref(x, q0, n);
                    ck_assert(memcmp(q0, q1, rb) == 0);
                    ref->to_float(q0, y0, n);
                    ops->to_float(q0, y1, n);
                    for (int i = 0; i < n; i++)
                        ck_assert_msg(fabsf(y0[i] - y1[i]) <= 1e-5f * fabsf(y0[i]),
                                      "%s %s to_float i=%d %g vs %g", wf_ggml_type_info_get(t)->name,
                                      wf_cpu_isa_name((wf_cpu_isa)isa), i, (double)y0[i], (double)y1[i]);
                    free(x); free(y0); free(y1); free(q0); free(q1);
                }
        }
    }
}
END_TEST

/* vec_dot: scalar vs a double-precision dot of the dequantised rows, every SIMD path vs the
 * scalar path, AVX-512 vs AVX2 bit-exact for the types both implement in ggml's lane order */
START_TEST(test_vec_dot) {
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        wf_ggml_type t = all_types[ti];
        const wf_quant_ops *ref = wf_quant_ops_for_isa(t, WF_CPU_ISA_SCALAR);
        if (!ref->vec_dot) continue; /* activation-only types */
        const wf_quant_ops *act = wf_quant_ops_for_isa(ref->vec_dot_type, WF_CPU_ISA_SCALAR);
        int bs = block_of(t);
        const int ns[] = {bs, 2 * bs, 3 * bs, 9 * bs, bs == 1 ? 1003 : 17 * bs, bs == 1 ? 4096 : 64 * bs};
        for (int ni = 0; ni < 6; ni++)
            for (int p = 0; p <= 5; p++) {
                int n = ns[ni];
                float *xw = malloc(sizeof(float) * (size_t)n), *xa = malloc(sizeof(float) * (size_t)n);
                float *dw = malloc(sizeof(float) * (size_t)n), *da = malloc(sizeof(float) * (size_t)n);
                void *qw = malloc(row_bytes(t, n)), *qa = malloc(row_bytes(ref->vec_dot_type, n));
                fill(xw, n, p, 100 + ni);
                /* activations stay below ~1e3 so Q8_1's s = d * sum(q) fits a half */
                fill(xa, n, (p + 1) % 6 == 4 ? 6 : (p + 1) % 6, 200 + ni);
                ref->from_float(xw, qw, n);
                act->from_float(xa, qa, n);
                ref->to_float(qw, dw, n);
                act->to_float(qa, da, n);
                double exact = 0, mag = 0;
                for (int i = 0; i < n; i++) {
                    exact += (double)dw[i] * (double)da[i];
                    mag += fabs((double)dw[i] * (double)da[i]);
                }
                float s_ref;
                ref->vec_dot(n, &s_ref, qw, qa);
                /* Q8_1's s and the Q4_1/Q5_1 min term round through half precision */
                double tol_ref = 1e-5 * mag + 1e-30;
                if (ref->vec_dot_type == WF_GGML_TYPE_Q8_1) {
                    /* per block: |m| * |d * sum(q)| * 2^-11, bounded by max|w| * sum|a| */
                    for (int b = 0; b < n; b += 32) {
                        double wmax = 0, asum = 0;
                        for (int i = b; i < b + 32; i++) {
                            wmax = fmax(wmax, fabs((double)dw[i]));
                            asum += fabs((double)da[i]);
                        }
                        tol_ref += wmax * asum * 0x1p-10;
                    }
                }
                ck_assert_msg(fabs(s_ref - exact) <= tol_ref, "%s n=%d p=%d scalar %g exact %g mag %g",
                              wf_ggml_type_info_get(t)->name, n, p, (double)s_ref, exact, mag);
                float s_avx2 = 0;
                for (int isa = WF_CPU_ISA_AVX2; isa <= (int)max_isa(); isa++) {
                    const wf_quant_ops *ops = wf_quant_ops_for_isa(t, (wf_cpu_isa)isa);
                    float s;
                    ops->vec_dot(n, &s, qw, qa);
                    ck_assert_msg(fabs((double)s - s_ref) <= 1e-5 * mag + 1e-30,
                                  "%s %s n=%d p=%d: %.9g vs scalar %.9g (mag %g)",
                                  wf_ggml_type_info_get(t)->name, wf_cpu_isa_name((wf_cpu_isa)isa), n,
                                  p, (double)s, (double)s_ref, mag);
                    if (isa == WF_CPU_ISA_AVX2) s_avx2 = s;
                    else if (t != WF_GGML_TYPE_F32 && t != WF_GGML_TYPE_F16 && t != WF_GGML_TYPE_BF16)
                        ck_assert_msg(memcmp(&s, &s_avx2, sizeof(s)) == 0,
                                      "%s avx512 %.9g != avx2 %.9g", wf_ggml_type_info_get(t)->name,
                                      (double)s, (double)s_avx2);
                }
                free(xw); free(xa); free(dw); free(da); free(qw); free(qa);
            }
    }
}
END_TEST

/* vec_dot_tile: every tile shape, padded strides, bit-identical to vec_dot per output. */
START_TEST(test_vec_dot_tile) {
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        wf_ggml_type t = all_types[ti];
        for (int isa = 0; isa <= (int)max_isa(); isa++) {
            const wf_quant_ops *ops = wf_quant_ops_for_isa(t, (wf_cpu_isa)isa);
            if (!ops->vec_dot_tile) continue;
            const wf_quant_ops *act = wf_quant_ops_for_isa(ops->vec_dot_type, (wf_cpu_isa)isa);
            const int n = block_of(t) * 7;
            const size_t bx = row_bytes(t, n) + 6, by = row_bytes(ops->vec_dot_type, n) + 4;
            char *w = calloc(WF_QUANT_TILE_NR, bx), *a = calloc(WF_QUANT_TILE_NC, by);
            float *f = malloc(sizeof(float) * (size_t)n);
            for (int r = 0; r < WF_QUANT_TILE_NR; r++) {
                fill(f, n, r % 2, 300 + r);
                ops->from_float(f, w + (size_t)r * bx, n);
            }
            for (int c = 0; c < WF_QUANT_TILE_NC; c++) {
                fill(f, n, c % 2 ? 6 : 1, 400 + c);
                act->from_float(f, a + (size_t)c * by, n);
            }
            for (int nr = 1; nr <= WF_QUANT_TILE_NR; nr++)
                for (int nc = 1; nc <= WF_QUANT_TILE_NC; nc++) {
                    float out[WF_QUANT_TILE_NC][WF_QUANT_TILE_NR + 3];
                    memset(out, 0xff, sizeof(out));
                    ops->vec_dot_tile(n, &out[0][0], WF_QUANT_TILE_NR + 3, w, bx, a, by, nr, nc);
                    for (int c = 0; c < WF_QUANT_TILE_NC; c++)
                        for (int r = 0; r < WF_QUANT_TILE_NR + 3; r++) {
                            if (c >= nc || r >= nr) { /* untouched */
                                uint32_t bits;
                                memcpy(&bits, &out[c][r], 4);
                                ck_assert_uint_eq(bits, 0xffffffffu);
                                continue;
                            }
                            float one;
                            ops->vec_dot(n, &one, w + (size_t)r * bx, a + (size_t)c * by);
                            ck_assert_msg(memcmp(&one, &out[c][r], 4) == 0, "%s %s tile %dx%d (%d,%d): %.9g vs %.9g",
                                          wf_ggml_type_info_get(t)->name, wf_cpu_isa_name((wf_cpu_isa)isa), nr, nc,
                                          r, c, (double)out[c][r], (double)one);
                        }
                }
            free(w); free(a); free(f);
        }
    }
}
END_TEST

/* matvec, on every ISA path that has one (the K-quants' on AVX2 and AVX-512 too): three
 * 16-row tiles at a padded stride, each output bit-identical to that path's vec_dot and close
 * to the scalar reference's, nothing written past the rows asked for. */
START_TEST(test_matvec) {
    enum { ROWS = 3 * WF_QUANT_MATVEC_ROWS, PAD = 3 };
    int checked = 0;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const wf_ggml_type t = all_types[ti];
        const wf_quant_ops *ref = wf_quant_ops_for_isa(t, WF_CPU_ISA_SCALAR);
        for (int isa = 0; isa <= (int)max_isa(); isa++) {
            const wf_quant_ops *ops = wf_quant_ops_for_isa(t, (wf_cpu_isa)isa);
            if (!ops->matvec) continue;
            const wf_quant_ops *act = wf_quant_ops_for_isa(ops->vec_dot_type, (wf_cpu_isa)isa);
            const int n = block_of(t) * (block_of(t) == 256 ? 3 : 9);
            const size_t bx = row_bytes(t, n) + 6, by = row_bytes(ops->vec_dot_type, n);
            char *w = calloc(ROWS, bx), *a = calloc(1, by);
            float *f = malloc(sizeof(float) * (size_t)n);
            for (int r = 0; r < ROWS; r++) {
                fill(f, n, r % 3 == 0 ? 1 : r % 3 == 1 ? 5 : 6, 700 + r);
                ops->from_float(f, w + (size_t)r * bx, n);
            }
            fill(f, n, 1, 800);
            act->from_float(f, a, n);
            /* the scalar bound: relative to sum |w_i a_i| of the dequantised rows */
            float *da = malloc(sizeof(float) * (size_t)n), *dw = malloc(sizeof(float) * (size_t)n);
            wf_quant_ops_for_isa(ops->vec_dot_type, WF_CPU_ISA_SCALAR)->to_float(a, da, n);
            float out[ROWS + PAD];
            memset(out, 0xff, sizeof out);
            ops->matvec(n, out, w, bx, a, ROWS);
            for (int r = 0; r < ROWS + PAD; r++) {
                if (r >= ROWS) {
                    uint32_t bits;
                    memcpy(&bits, &out[r], 4);
                    ck_assert_uint_eq(bits, 0xffffffffu);
                    continue;
                }
                float one, scalar;
                ops->vec_dot(n, &one, w + (size_t)r * bx, a);
                ref->vec_dot(n, &scalar, w + (size_t)r * bx, a);
                ck_assert_msg(memcmp(&one, &out[r], 4) == 0, "%s %s matvec row %d: %.9g vs vec_dot %.9g",
                              wf_ggml_type_info_get(t)->name, wf_cpu_isa_name((wf_cpu_isa)isa), r,
                              (double)out[r], (double)one);
                ref->to_float(w + (size_t)r * bx, dw, n);
                double mag = 0;
                for (int i = 0; i < n; i++) mag += fabs((double)dw[i] * (double)da[i]);
                ck_assert_msg(fabs((double)out[r] - (double)scalar) <= 1e-5 * mag + 1e-30,
                              "%s %s matvec row %d: %.9g vs scalar %.9g", wf_ggml_type_info_get(t)->name,
                              wf_cpu_isa_name((wf_cpu_isa)isa), r, (double)out[r], (double)scalar);
            }
            checked++;
            free(w); free(a); free(f); free(da); free(dw);
        }
    }
    /* AVX2 and up: at least the K-quants' matvecs ran */
    if (max_isa() >= WF_CPU_ISA_AVX2) ck_assert_int_ge(checked, 2);
}
END_TEST

/* The AVX-512 wide kernels, with and without VNNI (the table is filled directly, so a VNNI CPU
 * tests both; the K-quants' panels too): matvec over 32 rows and panel_dot over every row/column count, padded strides,
 * weights and activations with outliers, large values and zero blocks, bit-identical to the
 * AVX-512 vec_dot per output and never writing past the rows asked for. */
START_TEST(test_wide_kernels) {
    const wf_cpu_features *cpu = wf_cpu_features_get();
    if (cpu->isa < WF_CPU_ISA_AVX512) return;
    const wf_ggml_type types[] = {WF_GGML_TYPE_Q4_0, WF_GGML_TYPE_Q4_1, WF_GGML_TYPE_Q5_0,
                                  WF_GGML_TYPE_Q5_1, WF_GGML_TYPE_Q8_0, WF_GGML_TYPE_Q4_K,
                                  WF_GGML_TYPE_Q6_K};
    enum { ROWS = 2 * WF_QUANT_MATVEC_ROWS, PAD = 3 };
    for (int vnni = 0; vnni <= (int)cpu->avx512vnni; vnni++) {
        wf_quant_ops wide[WF_GGML_TYPE_COUNT] = {{0}};
        wf_quant_fill_panel_avx512(wide, vnni);
        wf_quant_fill_kpanel_avx512(wide, vnni);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const wf_ggml_type t = types[ti];
            const wf_quant_ops *ops = wf_quant_ops_for_isa(t, WF_CPU_ISA_AVX512);
            const wf_quant_ops *act = wf_quant_ops_for_isa(ops->vec_dot_type, WF_CPU_ISA_AVX512);
            const bool k_quant = t == WF_GGML_TYPE_Q4_K || t == WF_GGML_TYPE_Q6_K;
            const int n = k_quant ? 256 * 3 : 32 * 9;
            const size_t bx = row_bytes(t, n) + 6, by = row_bytes(ops->vec_dot_type, n) + 4;
            char *w = calloc(ROWS, bx), *a = calloc(WF_QUANT_PANEL_ROWS, by);
            float *f = malloc(sizeof(float) * (size_t)n);
            for (int r = 0; r < ROWS; r++) {
                fill(f, n, r % 3 == 0 ? 1 : r % 3 == 1 ? 5 : 6, 500 + r);
                ops->from_float(f, w + (size_t)r * bx, n);
            }
            for (int c = 0; c < WF_QUANT_PANEL_ROWS; c++) {
                fill(f, n, c % 3 == 0 ? 1 : c % 3 == 1 ? 4 : 5, 600 + c); /* 5: tiny scales */
                act->from_float(f, a + (size_t)c * by, n);
            }
            float one[WF_QUANT_PANEL_ROWS][ROWS];
            for (int c = 0; c < WF_QUANT_PANEL_ROWS; c++)
                for (int r = 0; r < ROWS; r++) ops->vec_dot(n, &one[c][r], w + (size_t)r * bx, a + (size_t)c * by);
            const char *name = wf_ggml_type_info_get(t)->name;
            if (wide[t].matvec) {
                float out[ROWS + PAD];
                memset(out, 0xff, sizeof out);
                wide[t].matvec(n, out, w, bx, a, ROWS);
                for (int r = 0; r < ROWS + PAD; r++) {
                    if (r >= ROWS) {
                        uint32_t bits;
                        memcpy(&bits, &out[r], 4);
                        ck_assert_uint_eq(bits, 0xffffffffu);
                    } else {
                        ck_assert_msg(memcmp(&one[0][r], &out[r], 4) == 0, "%s vnni=%d matvec row %d: %.9g vs %.9g",
                                      name, vnni, r, (double)out[r], (double)one[0][r]);
                    }
                }
            }
            if (wide[t].panel_dot) {
                void *panel = aligned_alloc(64, (wf_quant_panel_size(t, n) + 63) / 64 * 64);
                for (int nc = 1; nc <= WF_QUANT_PANEL_ROWS; nc++) {
                    wide[t].panel_pack(a, by, nc, n, panel);
                    for (int nr = 1; nr <= 9; nr++) {
                        float out[WF_QUANT_PANEL_ROWS][ROWS];
                        memset(out, 0xff, sizeof out);
                        wide[t].panel_dot(n, &out[0][0], ROWS, w, bx, panel, nr, nc);
                        for (int c = 0; c < WF_QUANT_PANEL_ROWS; c++)
                            for (int r = 0; r < ROWS; r++) {
                                if (c >= nc || r >= nr) {
                                    uint32_t bits;
                                    memcpy(&bits, &out[c][r], 4);
                                    ck_assert_uint_eq(bits, 0xffffffffu);
                                    continue;
                                }
                                ck_assert_msg(memcmp(&one[c][r], &out[c][r], 4) == 0,
                                              "%s vnni=%d panel %dx%d (%d,%d): %.9g vs %.9g", name, vnni, nr, nc,
                                              r, c, (double)out[c][r], (double)one[c][r]);
                            }
                    }
                }
                free(panel);
            }
            free(w); free(a); free(f);
        }
    }
}
END_TEST

/* Activation quantisers as ggml's x86 backend; Q8_1's s = half(d * sum(qs)). */
START_TEST(test_q8_activation_semantics) {
    float x[64];
    fill(x, 64, 1, 5);
    x[3] = 63.5f / 127.f * 2.0f; /* values landing exactly on .5 after scaling */
    unsigned char q[2 * 36];
    const wf_quant_ops *q81 = wf_quant_ops_get(WF_GGML_TYPE_Q8_1);
    q81->from_float(x, q, 64);
    for (int b = 0; b < 2; b++) {
        const unsigned char *blk = q + 36 * b;
        uint16_t d, s;
        memcpy(&d, blk, 2);
        memcpy(&s, blk + 2, 2);
        int sum = 0;
        float amax = 0;
        for (int i = 0; i < 32; i++) {
            sum += (int8_t)blk[4 + i];
            amax = fmaxf(amax, fabsf(x[32 * b + i]));
        }
        ck_assert_uint_eq(d, wf_fp32_to_fp16(amax / 127.f));
        ck_assert_uint_eq(s, wf_fp32_to_fp16(amax / 127.f * (float)sum));
        for (int i = 0; i < 32; i++)
            ck_assert_int_eq((int8_t)blk[4 + i], (int)nearbyintf(x[32 * b + i] * (127.f / amax)));
    }
    /* round half to even (x86 backend) vs half away from zero (reference): 2.5 -> 2 vs 3 */
    float t[32] = {0};
    t[0] = 127.0f;
    t[1] = 2.5f;
    t[2] = -3.5f;
    unsigned char a[34], r[34];
    wf_quant_ops_get(WF_GGML_TYPE_Q8_0)->from_float(t, a, 32);
    wf_quant_ops_get(WF_GGML_TYPE_Q8_0)->from_float_ref(t, r, 32);
    ck_assert_int_eq((int8_t)a[2 + 1], 2);
    ck_assert_int_eq((int8_t)r[2 + 1], 3);
    ck_assert_int_eq((int8_t)a[2 + 2], -4);
    ck_assert_int_eq((int8_t)r[2 + 2], -4);
    ck_assert_int_eq((int8_t)a[2 + 0], 127);
}
END_TEST

/* Fixtures: tests/engine/cpu/data/quant_<type>.bin = u32 n, n floats, then the bytes gguf-py's
 * quantize() produced, then n floats its dequantize() produced (see the generator script). */
static void check_fixture(const char *name, wf_ggml_type t) {
    char path[512];
    snprintf(path, sizeof(path), "%s/tests/engine/cpu/data/quant_%s.bin", WEFT_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "missing fixture %s", path);
    uint32_t n;
    ck_assert_int_eq(fread(&n, 4, 1, f), 1);
    size_t rb = row_bytes(t, n);
    ck_assert_uint_gt(rb, 0);
    float *x = malloc(4 * (size_t)n), *deq = malloc(4 * (size_t)n), *y = malloc(4 * (size_t)n);
    unsigned char *want = malloc(rb), *got = malloc(rb);
    int has_quant = 0;
    ck_assert_int_eq(fread(x, 4, n, f), n);
    ck_assert_int_eq(fread(&has_quant, 4, 1, f), 1);
    if (has_quant) ck_assert_uint_eq(fread(want, 1, rb, f), rb);
    else ck_assert_uint_eq(fread(got, 1, rb, f), rb); /* bytes to dequantise (made by weft) */
    ck_assert_int_eq(fread(deq, 4, n, f), n);
    fclose(f);
    for (int isa = 0; isa <= (int)max_isa(); isa++) {
        const wf_quant_ops *ops = wf_quant_ops_for_isa(t, (wf_cpu_isa)isa);
        if (has_quant) {
            ops->from_float_ref(x, got, n);
            for (size_t i = 0; i < rb; i++)
                ck_assert_msg(got[i] == want[i], "%s %s: byte %zu is %02x, gguf-py %02x", name,
                              wf_cpu_isa_name((wf_cpu_isa)isa), i, got[i], want[i]);
        }
        ops->to_float(has_quant ? want : got, y, n);
        for (uint32_t i = 0; i < n; i++)
            ck_assert_msg(y[i] == deq[i] || fabsf(y[i] - deq[i]) <= 1e-6f * fabsf(deq[i]),
                          "%s %s: element %u is %g, gguf-py %g", name,
                          wf_cpu_isa_name((wf_cpu_isa)isa), i, (double)y[i], (double)deq[i]);
    }
    free(x); free(deq); free(y); free(want); free(got);
}

START_TEST(test_gguf_py_fixtures) {
    check_fixture("f16", WF_GGML_TYPE_F16);
    check_fixture("bf16", WF_GGML_TYPE_BF16);
    check_fixture("q4_0", WF_GGML_TYPE_Q4_0);
    check_fixture("q4_1", WF_GGML_TYPE_Q4_1);
    check_fixture("q5_0", WF_GGML_TYPE_Q5_0);
    check_fixture("q5_1", WF_GGML_TYPE_Q5_1);
    check_fixture("q8_0", WF_GGML_TYPE_Q8_0);
    check_fixture("q4_k", WF_GGML_TYPE_Q4_K);
    check_fixture("q6_k", WF_GGML_TYPE_Q6_K);
}
END_TEST

START_TEST(test_dispatch) {
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        wf_ggml_type t = all_types[ti];
        ck_assert_ptr_nonnull(wf_quant_ops_get(t));
        ck_assert_ptr_eq(wf_quant_ops_get(t), wf_quant_ops_for_isa(t, max_isa()));
    }
    ck_assert_ptr_null(wf_quant_ops_get(WF_GGML_TYPE_Q2_K));
    ck_assert_ptr_null(wf_quant_ops_get((wf_ggml_type)4));
    ck_assert_ptr_null(wf_quant_ops_get((wf_ggml_type)1000));
    ck_assert_int_eq(wf_quant_ops_get(WF_GGML_TYPE_Q4_1)->vec_dot_type, WF_GGML_TYPE_Q8_1);
    ck_assert_int_eq(wf_quant_ops_get(WF_GGML_TYPE_Q4_0)->vec_dot_type, WF_GGML_TYPE_Q8_0);
    ck_assert_int_eq(wf_quant_ops_get(WF_GGML_TYPE_Q5_1)->vec_dot_type, WF_GGML_TYPE_Q8_1);
    ck_assert_int_eq(wf_quant_ops_get(WF_GGML_TYPE_Q4_K)->vec_dot_type, WF_GGML_TYPE_Q8_K);
    ck_assert_int_eq(wf_quant_ops_get(WF_GGML_TYPE_F16)->vec_dot_type, WF_GGML_TYPE_F16);
    ck_assert_uint_eq(wf_quant_row_size(WF_GGML_TYPE_Q4_1, 576), 18 * 20);
    ck_assert_uint_eq(wf_quant_row_size(WF_GGML_TYPE_Q4_1, 577), 0);
    ck_assert_uint_eq(wf_quant_row_size(WF_GGML_TYPE_Q6_K, 512), 420);
}
END_TEST

static Suite *quant_suite(void) {
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dispatch);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_simd_quantise_dequantise);
    tcase_add_test(tc, test_vec_dot);
    tcase_add_test(tc, test_vec_dot_tile);
    tcase_add_test(tc, test_matvec);
    tcase_add_test(tc, test_wide_kernels);
    tcase_add_test(tc, test_q8_activation_semantics);
    tcase_add_test(tc, test_gguf_py_fixtures);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(quant_suite)
