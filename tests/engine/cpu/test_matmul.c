/* engine/cpu/matmul.c: wf_matmul against a naive double-precision reference (dequantised
 * weights times the activations as the kernels see them) for every weight type, m in
 * {1, 3, 8, 33}, 1..3 threads; and bit-identical results whatever the thread count and to m
 * separate vec_dot calls (tiling must not change ggml's per-output order). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/quant.h"

static const wf_ggml_type weight_types[] = {
    WF_GGML_TYPE_F32,  WF_GGML_TYPE_F16,  WF_GGML_TYPE_BF16, WF_GGML_TYPE_Q4_0, WF_GGML_TYPE_Q4_1,
    WF_GGML_TYPE_Q5_0, WF_GGML_TYPE_Q5_1, WF_GGML_TYPE_Q8_0, WF_GGML_TYPE_Q4_K, WF_GGML_TYPE_Q6_K,
};

static uint64_t rng = 88172645463325252ull;
static float uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void run_case(wf_ggml_type t, int k, int n_out, int m, wf_threadpool **pools) {
    const wf_quant_ops *ops = wf_quant_ops_get(t);
    const wf_quant_ops *act = wf_quant_ops_get(ops->vec_dot_type);
    size_t wrow = wf_quant_row_size(t, k), arow = wf_quant_row_size(ops->vec_dot_type, k);
    float *wf = malloc(sizeof(float) * (size_t)n_out * (size_t)k);
    float *x = malloc(sizeof(float) * (size_t)m * (size_t)k);
    float *wd = malloc(sizeof(float) * (size_t)k), *xd = malloc(sizeof(float) * (size_t)k);
    char *w = malloc(wrow * (size_t)n_out);
    char *xq = malloc(arow * (size_t)m);
    float *y = malloc(sizeof(float) * (size_t)m * (size_t)n_out);
    float *y_first = malloc(sizeof(float) * (size_t)m * (size_t)n_out);
    size_t scratch_size = wf_matmul_scratch_size(t, k, m);
    void *scratch = malloc(scratch_size + 1);
    for (size_t i = 0; i < (size_t)n_out * (size_t)k; i++) wf[i] = uniform() * 0.1f;
    for (size_t i = 0; i < (size_t)m * (size_t)k; i++) x[i] = uniform();
    for (int r = 0; r < n_out; r++) ops->from_float(wf + (size_t)r * k, w + (size_t)r * wrow, k);
    for (int i = 0; i < m; i++) act->from_float(x + (size_t)i * k, xq + (size_t)i * arow, k);

    for (int ti = 0; ti < 3; ti++) {
        memset(y, 0xff, sizeof(float) * (size_t)m * (size_t)n_out); /* NaN: catches skipped outputs */
        wf_matmul(pools[ti], w, t, n_out, k, x, m, y, scratch);
        if (ti == 0) memcpy(y_first, y, sizeof(float) * (size_t)m * (size_t)n_out);
        else
            ck_assert_msg(memcmp(y, y_first, sizeof(float) * (size_t)m * (size_t)n_out) == 0,
                          "%s m=%d: %d threads differ from 1", wf_ggml_type_info_get(t)->name, m, ti + 1);
    }
    for (int i = 0; i < m; i++) {
        act->to_float(xq + (size_t)i * arow, xd, k);
        for (int r = 0; r < n_out; r++) {
            ops->to_float(w + (size_t)r * wrow, wd, k);
            double ref = 0, mag = 0;
            for (int j = 0; j < k; j++) {
                ref += (double)wd[j] * xd[j];
                mag += fabs((double)wd[j] * xd[j]);
            }
            float got = y[(size_t)i * n_out + r];
            /* Q8_1's half-precision s adds up to 2^-11 relative of the min term */
            double tol = 1e-5 * mag + (ops->vec_dot_type == WF_GGML_TYPE_Q8_1 ? 2e-3 * mag : 0) + 1e-6;
            ck_assert_msg(fabs(got - ref) <= tol, "%s m=%d i=%d r=%d: %g vs %g",
                          wf_ggml_type_info_get(t)->name, m, i, r, (double)got, ref);
            float one;
            ops->vec_dot(k, &one, w + (size_t)r * wrow, xq + (size_t)i * arow);
            ck_assert_msg(memcmp(&one, &got, sizeof(one)) == 0, "%s: tiled result differs from vec_dot",
                          wf_ggml_type_info_get(t)->name);
        }
    }
    free(wf); free(x); free(wd); free(xd); free(w); free(xq); free(y); free(y_first); free(scratch);
}

START_TEST(test_matmul_types) {
    wf_threadpool *pools[3];
    for (int i = 0; i < 3; i++) {
        pools[i] = wf_threadpool_new(i + 1);
        ck_assert_ptr_nonnull(pools[i]);
    }
    /* 8: one panel, half padding; 20: a full panel and two rows; 33: two and an odd row */
    const int ms[] = {1, 3, 8, 20, 33};
    for (size_t ti = 0; ti < sizeof(weight_types) / sizeof(weight_types[0]); ti++) {
        wf_ggml_type t = weight_types[ti];
        int bs = wf_ggml_type_info_get(t)->block_size;
        int k = bs == 256 ? 512 : bs == 1 ? 200 : 96;
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) run_case(t, k, 37, ms[mi], pools);
    }
    for (int i = 0; i < 3; i++) wf_threadpool_free(pools[i]);
}
END_TEST

START_TEST(test_matmul_shapes) {
    /* the default model's shapes (k = 576, Q4_1) and a NULL pool */
    wf_threadpool *pools[3] = {NULL, NULL, NULL};
    pools[1] = wf_threadpool_new(2);
    pools[2] = wf_threadpool_new(3);
    run_case(WF_GGML_TYPE_Q4_1, 576, 200, 5, pools);
    run_case(WF_GGML_TYPE_Q8_0, 576, 65, 1, pools);
    ck_assert_uint_eq(wf_matmul_scratch_size(WF_GGML_TYPE_F32, 64, 4), 0);
    ck_assert_uint_eq(wf_matmul_scratch_size(WF_GGML_TYPE_Q4_1, 576, 2), 2 * 18 * 36);
    ck_assert_uint_eq(wf_matmul_scratch_size(WF_GGML_TYPE_Q4_K, 512, 1), 2 * 292);
    ck_assert_uint_eq(wf_matmul_scratch_size(WF_GGML_TYPE_Q2_K, 512, 1), 0);
    wf_threadpool_free(pools[1]);
    wf_threadpool_free(pools[2]);
}
END_TEST

/* q/k/v-style calls: three matrices sharing x in one wf_matmul_multi give the bits of three
 * wf_matmul calls, for the tile path (m = 1, 3) and the panel path (m = 9). */
START_TEST(test_matmul_multi) {
    const wf_ggml_type types[] = {WF_GGML_TYPE_Q4_1, WF_GGML_TYPE_Q8_0, WF_GGML_TYPE_Q4_K};
    const int n_outs[3] = {64, 16, 40};
    wf_threadpool *pool = wf_threadpool_new(2);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const wf_ggml_type t = types[ti];
        const int k = wf_ggml_type_info_get(t)->block_size == 256 ? 512 : 576;
        const wf_quant_ops *ops = wf_quant_ops_get(t);
        const size_t wrow = wf_quant_row_size(t, k);
        for (int m = 1; m <= 9; m += 4) {
            float *x = malloc(sizeof(float) * (size_t)m * (size_t)k);
            for (size_t i = 0; i < (size_t)m * (size_t)k; i++) x[i] = uniform();
            void *scratch = malloc(wf_matmul_scratch_size(t, k, m) + 1);
            char *w[3];
            float *y_multi[3], *y_one[3];
            wf_matmul_out outs[3];
            float *row = malloc(sizeof(float) * (size_t)k);
            for (int o = 0; o < 3; o++) {
                w[o] = malloc(wrow * (size_t)n_outs[o]);
                for (int r = 0; r < n_outs[o]; r++) {
                    for (int j = 0; j < k; j++) row[j] = uniform() * 0.1f;
                    ops->from_float(row, w[o] + (size_t)r * wrow, k);
                }
                y_multi[o] = malloc(sizeof(float) * (size_t)m * (size_t)n_outs[o]);
                y_one[o] = malloc(sizeof(float) * (size_t)m * (size_t)n_outs[o]);
                outs[o] = (wf_matmul_out){w[o], n_outs[o], y_multi[o]};
                wf_matmul(pool, w[o], t, n_outs[o], k, x, m, y_one[o], scratch);
            }
            wf_matmul_multi(pool, t, k, x, m, outs, 3, scratch);
            for (int o = 0; o < 3; o++) {
                ck_assert_msg(memcmp(y_multi[o], y_one[o], sizeof(float) * (size_t)m * (size_t)n_outs[o]) == 0,
                              "%s m=%d matrix %d: multi differs from single", wf_ggml_type_info_get(t)->name, m, o);
                free(w[o]);
                free(y_multi[o]);
                free(y_one[o]);
            }
            free(row);
            free(scratch);
            free(x);
        }
    }
    wf_threadpool_free(pool);
}
END_TEST

static Suite *matmul_suite(void) {
    Suite *s = suite_create("matmul");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_matmul_types);
    tcase_add_test(tc, test_matmul_shapes);
    tcase_add_test(tc, test_matmul_multi);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(matmul_suite)
