/* engine/dit/noise.c: Philox4x32-10 known-answer vectors (Random123's kat_vectors), values that
 * depend only on (seed, request, step, element) — not on chunking, offsets or thread count —
 * distinct streams per key/step/request, and the moments of N(0, 1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/cpu/threadpool.h"
#include "engine/dit/noise.h"

START_TEST(test_philox_known_answers) {
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t k = 0; k < sizeof kat / sizeof kat[0]; k++) {
        uint32_t out[4];
        wf_dit_philox4x32(kat[k].ctr, kat[k].key, out);
        for (int j = 0; j < 4; j++)
            ck_assert_msg(out[j] == kat[k].out[j], "vector %zu word %d: %08x, want %08x", k, j,
                          out[j], kat[k].out[j]);
    }
}
END_TEST

enum { N = 100003 }; /* not a multiple of 4: chunk edges fall mid-block */

START_TEST(test_chunking_and_threads) {
    float *whole = malloc(sizeof(float) * N), *part = malloc(sizeof(float) * N);
    ck_assert(whole && part);
    wf_dit_noise_key key = {.seed = 0x123456789abcdefULL, .request = 5};
    wf_dit_noise_fill(key, 17, 0, whole, N);
    /* odd chunk sizes starting mid-block */
    static const size_t chunks[] = {1, 3, 5, 7, 1000, 4093};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        memset(part, 0, sizeof(float) * N);
        for (size_t j = 0; j < N; j += chunks[c])
            wf_dit_noise_fill(key, 17, j, part + j, j + chunks[c] <= N ? chunks[c] : N - j);
        ck_assert_mem_eq(whole, part, sizeof(float) * N);
    }
    /* an element of the middle, generated alone */
    float one;
    wf_dit_noise_fill(key, 17, 77777, &one, 1);
    ck_assert_mem_eq(&one, &whole[77777], sizeof one);
    for (int t = 1; t <= 4; t++) {
        wf_threadpool *pool = wf_threadpool_new(t);
        ck_assert_ptr_nonnull(pool);
        memset(part, 0, sizeof(float) * N);
        wf_dit_noise_fill_parallel(pool, key, 17, 0, part, N);
        ck_assert_mem_eq(whole, part, sizeof(float) * N);
        wf_threadpool_free(pool);
    }
    wf_dit_noise_fill_parallel(NULL, key, 17, 0, part, N);
    ck_assert_mem_eq(whole, part, sizeof(float) * N);
    free(whole);
    free(part);
}
END_TEST

START_TEST(test_streams_differ) {
    enum { M = 64 };
    float base[M], other[M];
    wf_dit_noise_key key = {.seed = 1, .request = 0};
    wf_dit_noise_fill(key, 0, 0, base, M);
    wf_dit_noise_key keys[] = {{2, 0}, {1, 1}, {1ULL << 32 | 1, 0}};
    for (size_t k = 0; k < 3; k++) {
        wf_dit_noise_fill(keys[k], 0, 0, other, M);
        ck_assert(memcmp(base, other, sizeof base) != 0);
    }
    wf_dit_noise_fill(key, 1, 0, other, M);
    ck_assert(memcmp(base, other, sizeof base) != 0);
    wf_dit_noise_fill(key, WF_DIT_NOISE_STEP_INIT, 0, other, M);
    ck_assert(memcmp(base, other, sizeof base) != 0);
    /* same key again: same values */
    wf_dit_noise_fill(key, 0, 0, other, M);
    ck_assert_mem_eq(base, other, sizeof base);
}
END_TEST

START_TEST(test_moments) {
    enum { M = 1 << 18 };
    float *z = malloc(sizeof(float) * M);
    ck_assert_ptr_nonnull(z);
    wf_dit_noise_fill((wf_dit_noise_key){.seed = 99, .request = 2}, 3, 0, z, M);
    double s1 = 0, s2 = 0, s3 = 0, s4 = 0, lag = 0;
    long beyond3 = 0;
    for (int j = 0; j < M; j++) {
        double v = z[j];
        ck_assert(isfinite(v));
        s1 += v;
        s2 += v * v;
        s3 += v * v * v;
        s4 += v * v * v * v;
        if (fabs(v) > 3) beyond3++;
        if (j) lag += v * z[j - 1];
    }
    double mean = s1 / M, var = s2 / M - mean * mean;
    /* standard errors at 2^18 samples: mean 0.002, variance 0.0028, third moment 0.0048,
     * fourth moment 0.019; the bounds are about 5 of them */
    ck_assert_msg(fabs(mean) < 0.01, "mean %g", mean);
    ck_assert_msg(fabs(var - 1) < 0.014, "variance %g", var);
    ck_assert_msg(fabs(s3 / M) < 0.025, "third moment %g", s3 / M);
    ck_assert_msg(fabs(s4 / M - 3) < 0.1, "fourth moment %g", s4 / M);
    ck_assert_msg(fabs(lag / M) < 0.01, "lag-1 correlation %g", lag / M);
    /* P(|z| > 3) = 0.0026998 */
    double tail = (double)beyond3 / M;
    ck_assert_msg(fabs(tail - 0.0026998) < 0.0005, "tail %g", tail);
    free(z);
}
END_TEST

static Suite *noise_suite(void) {
    Suite *s = suite_create("dit_noise");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_philox_known_answers);
    tcase_add_test(tc, test_chunking_and_threads);
    tcase_add_test(tc, test_streams_differ);
    tcase_add_test(tc, test_moments);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(noise_suite)
