/* Tests engine/dit/dit_gemm*.c and dit_attn*.c: every GEMM micro-kernel this CPU runs (fp32 and
 * bf16; scalar, AVX2, AVX-512, AVX512_BF16) against the scalar reference and against a plain
 * triple loop, over odd shapes (partial panels, row remainders, odd k), with 1 and 2 threads;
 * the tiled attention against a naive softmax(QK^T/sqrt(d))V, for token counts that are not
 * multiples of the tiles. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/cpu/quant.h"
#include "engine/cpu/features.h"
#include "engine/dit/dit_attn_unit.h"
#include "engine/dit/dit_kernels.h"

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* y = x W^T + b in double, from (optionally bf16-rounded) x and W */
static void naive(const float *x, const float *w, const float *b, int m, int n, int k, int bf16, float *y) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = b[j];
            for (int t = 0; t < k; t++) {
                float xv = x[(size_t)i * k + t], wv = w[(size_t)j * k + t];
                if (bf16) {
                    xv = wf_bf16_to_fp32(wf_fp32_to_bf16(xv));
                    wv = wf_bf16_to_fp32(wf_fp32_to_bf16(wv));
                }
                s += (double)xv * wv;
            }
            y[(size_t)i * n + j] = (float)s;
        }
}

static void check_gemm(int m, int n, int k, int bf16, wf_threadpool *pool) {
    unsigned seed = (unsigned)(m * 7919 + n * 31 + k);
    float *x = malloc((size_t)m * k * sizeof *x), *w = malloc((size_t)n * k * sizeof *w);
    float *b = malloc((size_t)n * sizeof *b), *ref = malloc((size_t)m * n * sizeof *ref);
    float *y = malloc((size_t)m * n * sizeof *y), *ys = malloc((size_t)m * n * sizeof *ys);
    uint16_t *xb = malloc((size_t)m * (k + 1) * sizeof *xb);
    for (size_t i = 0; i < (size_t)m * k; i++) x[i] = frand(&seed);
    for (size_t i = 0; i < (size_t)n * k; i++) w[i] = frand(&seed);
    for (int i = 0; i < n; i++) b[i] = frand(&seed);
    naive(x, w, b, m, n, k, bf16, ref);
    wf__dit_linear l;
    ck_assert_int_eq(wf__dit_linear_pack(&l, w, b, n, k, bf16), 0);
    const wf__dit_gemm_impl *impls;
    int ni = wf__dit_gemm_impls(&impls);
    ck_assert_str_eq(impls[ni - 1].name, "scalar");
    wf__dit_linear_run(pool, &impls[ni - 1], &l, x, m, ys, xb);
    for (int v = 0; v < ni; v++) {
        for (size_t i = 0; i < (size_t)m * n; i++) y[i] = NAN;
        wf__dit_linear_run(pool, &impls[v], &l, x, m, y, xb);
        double mx = 0, mxs = 0;
        for (size_t i = 0; i < (size_t)m * n; i++) {
            double d = fabs((double)y[i] - ref[i]), ds = fabs((double)y[i] - ys[i]);
            if (!(d <= mx)) mx = d;
            if (!(ds <= mxs)) mxs = ds;
        }
        /* fp32 sums of k products of |v| <= 1: rounding grows like k * 2^-24 at worst */
        double tol = 1e-6 * k + 1e-5;
        ck_assert_msg(mx <= tol && mxs <= tol, "%s %s m=%d n=%d k=%d: max |d| %g vs naive, %g vs scalar",
                      impls[v].name, bf16 ? "bf16" : "fp32", m, n, k, mx, mxs);
    }
    wf__dit_linear_free(&l);
    free(x);
    free(w);
    free(b);
    free(ref);
    free(y);
    free(ys);
    free(xb);
}

static const int shapes[][3] = {{1, 1, 1}, {1, 32, 16}, {7, 45, 33}, {13, 64, 256}, {50, 100, 77},
                                {97, 33, 384}, {6, 200, 1}, {2, 2304, 384}};

START_TEST(gemm_variants_fp32) {
    wf_threadpool *pool = wf_threadpool_new(2);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        check_gemm(shapes[i][0], shapes[i][1], shapes[i][2], 0, NULL);
        check_gemm(shapes[i][0], shapes[i][1], shapes[i][2], 0, pool);
    }
    wf_threadpool_free(pool);
}
END_TEST

START_TEST(gemm_variants_bf16) {
    wf_threadpool *pool = wf_threadpool_new(2);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        check_gemm(shapes[i][0], shapes[i][1], shapes[i][2], 1, NULL);
        check_gemm(shapes[i][0], shapes[i][1], shapes[i][2], 1, pool);
    }
    wf_threadpool_free(pool);
}
END_TEST

START_TEST(gemm_impls_listed) {
    const wf__dit_gemm_impl *impls;
    int ni = wf__dit_gemm_impls(&impls);
    ck_assert_int_ge(ni, 1);
    for (int i = 0; i < ni; i++) {
        ck_assert_int_le(impls[i].mr, WF__DIT_MR_MAX);
        printf("dit gemm impl: %s (mr %d)\n", impls[i].name, impls[i].mr);
    }
    ck_assert_ptr_eq(wf__dit_gemm_best(), &impls[0]);
}
END_TEST

static void check_attention_with(const wf__dit_attn_impl *impl, int batch, int tokens, int heads, int hd,
                                 wf_threadpool *pool) {
    int D = heads * hd, nth = pool ? wf_threadpool_size(pool) : 1;
    unsigned seed = (unsigned)(tokens * 131 + hd);
    size_t nq = (size_t)batch * tokens * 3 * D;
    float *qkv = malloc(nq * sizeof *qkv), *o = malloc((size_t)batch * tokens * D * sizeof *o);
    float *scratch = malloc(wf__dit_attention_scratch(hd) * (size_t)nth * sizeof *scratch);
    for (size_t i = 0; i < nq; i++) qkv[i] = 2.0f * frand(&seed);
    wf__dit_attention_with(pool, impl, qkv, o, batch, tokens, heads, hd, scratch);
    double *s = malloc((size_t)tokens * sizeof *s), mx = 0;
    for (int b = 0; b < batch; b++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < tokens; i++) {
                const float *q = qkv + ((size_t)b * tokens + i) * 3 * D + h * hd;
                double smax = -INFINITY, sum = 0;
                for (int j = 0; j < tokens; j++) {
                    const float *k = qkv + ((size_t)b * tokens + j) * 3 * D + D + h * hd;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += (double)q[e] * k[e];
                    s[j] = d / sqrt((double)hd);
                    if (s[j] > smax) smax = s[j];
                }
                for (int j = 0; j < tokens; j++) sum += s[j] = exp(s[j] - smax);
                for (int e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int j = 0; j < tokens; j++)
                        acc += s[j] * qkv[((size_t)b * tokens + j) * 3 * D + 2 * D + h * hd + e];
                    double d = fabs(acc / sum - o[((size_t)b * tokens + i) * D + h * hd + e]);
                    if (!(d <= mx)) mx = d;
                }
            }
    ck_assert_msg(mx < 2e-5, "attention (%s) B=%d T=%d H=%d hd=%d: max |d| %g", impl->name, batch, tokens,
                  heads, hd, mx);
    free(s);
    free(qkv);
    free(o);
    free(scratch);
}

/* Every attention unit this CPU runs (each ISA's compilation of dit_attn_impl.h). */
static void check_attention(int batch, int tokens, int heads, int hd, wf_threadpool *pool) {
    const wf__dit_attn_impl *impls;
    int ni = wf__dit_attention_impls(&impls);
    for (int i = 0; i < ni; i++) check_attention_with(&impls[i], batch, tokens, heads, hd, pool);
}

START_TEST(attention_matches_naive) {
    wf_threadpool *pool = wf_threadpool_new(2);
    check_attention(1, 1, 1, 8, NULL);
    check_attention(2, 16, 2, 16, pool);
    check_attention(2, 65, 3, 64, pool);   /* one key past a tile */
    check_attention(1, 100, 2, 72, NULL);  /* XL's head width */
    check_attention(1, 33, 2, 40, pool);   /* odd query tail, head width of 5 x 8 / 3 x 16 lanes */
    check_attention(2, 256, 6, 64, pool);
    wf_threadpool_free(pool);
}
END_TEST

START_TEST(layernorm_modulate) {
    /* rows of a constant plus a ramp: mean and variance known in closed form */
    const int d = 48, rows = 4;
    float x[4 * 48], y[4 * 48], g[48], b[48], shift[2 * 96], scale[2 * 96];
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < d; i++) x[r * d + i] = 100.0f * (float)r + (float)i;
    for (int i = 0; i < d; i++) {
        g[i] = 0.5f;
        b[i] = 1.0f;
    }
    for (int i = 0; i < 2 * 96; i++) {
        shift[i] = 0.25f;
        scale[i] = 1.0f;
    }
    double mean = (d - 1) / 2.0, var = ((double)d * d - 1) / 12.0;
    wf__dit_ln_modulate(NULL, x, y, rows, d, 1e-6f, NULL, NULL, NULL, NULL, 2, 96);
    for (int i = 0; i < d; i++)
        ck_assert_double_eq_tol(y[3 * d + i], (i - mean) / sqrt(var + 1e-6), 1e-5);
    wf__dit_ln_modulate(NULL, x, y, rows, d, 1e-6f, g, b, shift, scale, 2, 96);
    for (int i = 0; i < d; i++)
        ck_assert_double_eq_tol(y[i], ((i - mean) / sqrt(var + 1e-6) * 0.5 + 1.0) * 2.0 + 0.25, 1e-5);
}
END_TEST

START_TEST(activations) {
    float v[5] = {-3.0f, -0.5f, 0.0f, 0.7f, 4.0f}, s[5];
    memcpy(s, v, sizeof v);
    wf__dit_gelu_tanh(NULL, v, 5);
    wf__dit_silu(s, 5);
    const float xs[5] = {-3.0f, -0.5f, 0.0f, 0.7f, 4.0f};
    for (int i = 0; i < 5; i++) {
        double x = xs[i];
        double ge = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        ck_assert_double_eq_tol(v[i], ge, 1e-6);
        ck_assert_double_eq_tol(s[i], x / (1 + exp(-x)), 1e-6);
    }
}
END_TEST

/* Every implementation's bf16 rounding gives wf_fp32_to_bf16's bits: ties to even, carries into
 * the exponent, infinities, NaNs (kept quiet), zeros, subnormals, and random bit patterns, over a
 * length with a vector tail. */
START_TEST(bf16_rounding_matches_reference) {
    enum { N = 4099 };
    static float x[N];
    static uint16_t y[N];
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x3f808000u, 0x3f818000u,
                                0x3f80ffffu, 0x3f7fffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                                0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fff8000u, 0x47ff8000u, 0xc0490fdbu};
    const int ns = (int)(sizeof special / sizeof special[0]);
    uint32_t st = 12345u;
    for (int i = 0; i < N; i++) {
        uint32_t u;
        if (i < ns) u = special[i];
        else {
            st = st * 1664525u + 1013904223u;
            u = st ^ (st >> 7) * 2654435761u;
        }
        memcpy(&x[i], &u, sizeof u);
    }
    const wf__dit_gemm_impl *impls;
    int ni = wf__dit_gemm_impls(&impls);
    for (int k = 0; k < ni; k++)
        for (int len = N - 16; len <= N; len += 5) { /* every tail length of a 16-lane loop, some */
            memset(y, 0xab, sizeof y);
            impls[k].round(x, y, len);
            for (int i = 0; i < len; i++) {
                uint32_t bits;
                memcpy(&bits, &x[i], sizeof bits);
                ck_assert_msg(y[i] == wf_fp32_to_bf16(x[i]), "%s: element %d (0x%08x): 0x%04x, want 0x%04x",
                              impls[k].name, i, (unsigned)bits, y[i], wf_fp32_to_bf16(x[i]));
            }
            ck_assert_uint_eq(y[len], 0xabab); /* nothing written past n */
        }
}
END_TEST

/* wf__dit_linear_rows over a split of the rows gives wf__dit_linear_run's output bit for bit
 * (dit.c's row-owning block regions rely on it), fp32 and bf16. */
START_TEST(gemm_rows_match_run) {
    const int m = 37, n = 70, k = 45, cuts[] = {0, 8, 9, 30, 37};
    float *x = malloc((size_t)m * k * sizeof *x), *w = malloc((size_t)n * k * sizeof *w), b[70];
    float *y0 = malloc((size_t)m * n * sizeof *y0), *y1 = malloc((size_t)m * n * sizeof *y1);
    uint16_t *xb = malloc((size_t)m * (k + 1) * sizeof *xb);
    unsigned seed = 7;
    for (int i = 0; i < m * k; i++) x[i] = frand(&seed);
    for (int i = 0; i < n * k; i++) w[i] = frand(&seed);
    for (int i = 0; i < n; i++) b[i] = frand(&seed);
    wf_threadpool *pool = wf_threadpool_new(2);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        wf__dit_linear l;
        ck_assert_int_eq(wf__dit_linear_pack(&l, w, b, n, k, bf16), 0);
        wf__dit_linear_run(pool, NULL, &l, x, m, y0, xb);
        memset(y1, 0, (size_t)m * n * sizeof *y1);
        for (int c = 0; c + 1 < 5; c++) wf__dit_linear_rows(NULL, &l, x, cuts[c], cuts[c + 1], y1, xb);
        ck_assert_int_eq(memcmp(y0, y1, (size_t)m * n * sizeof *y0), 0);
        wf__dit_linear_free(&l);
    }
    wf_threadpool_free(pool);
    free(x);
    free(w);
    free(y0);
    free(y1);
    free(xb);
}
END_TEST

/* Each ISA's LayerNorm row (dit_attn_impl.h) against a double-precision reference, with and
 * without the affine and the modulation, at widths with and without an 8-lane tail. */
START_TEST(layernorm_row_every_isa) {
    wf__dit_ln_row_fn fns[3] = {wf__dit_ln_row_scalar, NULL, NULL};
    int nf = 1;
#if defined(__x86_64__)
    if (wf_cpu_features_get()->isa >= WF_CPU_ISA_AVX2) fns[nf++] = wf__dit_ln_row_avx2;
    if (wf_cpu_features_get()->isa >= WF_CPU_ISA_AVX512) fns[nf++] = wf__dit_ln_row_avx512;
#endif
    enum { DMAX = 389 };
    float x[DMAX], y[DMAX], g[DMAX], b[DMAX], sh[DMAX], sc[DMAX];
    unsigned seed = 99;
    for (int i = 0; i < DMAX; i++) {
        x[i] = 3.0f + 2.0f * frand(&seed);
        g[i] = frand(&seed), b[i] = frand(&seed), sh[i] = frand(&seed), sc[i] = frand(&seed);
    }
    const int ds[] = {5, 8, 37, 384, 389};
    for (int f = 0; f < nf; f++)
        for (int di = 0; di < 5; di++)
            for (int mode = 0; mode < 3; mode++) {
                const int d = ds[di];
                const float *gp = mode == 1 ? g : NULL, *bp = mode == 1 ? b : NULL;
                const float *shp = mode == 2 ? sh : NULL, *scp = mode == 2 ? sc : NULL;
                fns[f](x, y, d, 1e-6f, gp, bp, shp, scp);
                double mean = 0, var = 0;
                for (int i = 0; i < d; i++) mean += x[i];
                mean /= d;
                for (int i = 0; i < d; i++) var += (x[i] - mean) * (x[i] - mean);
                double rstd = 1.0 / sqrt(var / d + 1e-6);
                for (int i = 0; i < d; i++) {
                    double want = (x[i] - mean) * rstd;
                    if (gp) want = want * g[i] + b[i];
                    if (scp) want = want * (1.0 + sc[i]) + sh[i];
                    ck_assert_msg(fabs(y[i] - want) < 2e-5, "ln row impl %d d=%d mode %d i=%d: %g vs %g", f, d,
                                  mode, i, y[i], want);
                }
            }
}
END_TEST

static Suite *kernels_suite(void) {
    Suite *s = suite_create("dit_kernels");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, gemm_impls_listed);
    tcase_add_test(tc, gemm_variants_fp32);
    tcase_add_test(tc, gemm_variants_bf16);
    tcase_add_test(tc, attention_matches_naive);
    tcase_add_test(tc, layernorm_modulate);
    tcase_add_test(tc, activations);
    tcase_add_test(tc, bf16_rounding_matches_reference);
    tcase_add_test(tc, gemm_rows_match_run);
    tcase_add_test(tc, layernorm_row_every_isa);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(kernels_suite)
