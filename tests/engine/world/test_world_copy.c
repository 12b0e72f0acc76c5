/* engine/world/world_copy.c: the writer-side copy of puts into mapped memory gives the bytes of
 * memcpy for every length and alignment, on the streaming path (stores that bypass the cache)
 * as on the ordinary one, and never writes outside the destination; the swap of two blocks
 * (the in-place all-to-all's) likewise.
 * weft-test: labels=unit timeout=60 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/world/world_impl.h"

#define GUARD 64

static uint8_t pattern(size_t i) { return (uint8_t)(i * 131u + (i >> 8) * 7u + 1u); }

/* Copies n bytes from src offset so to dst offset d0 (both buffers guarded) and checks the
 * copy and the guards. */
static void check_copy(size_t n, size_t so, size_t d0, int mode) {
    uint8_t *src = malloc(n + so + 16), *dst = malloc(n + d0 + 2 * GUARD + 16);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    for (size_t i = 0; i < n + so + 16; i++) src[i] = pattern(i);
    memset(dst, 0xA5, n + d0 + 2 * GUARD + 16);
    uint8_t *d = dst + GUARD + d0;
    if (mode < 0) wf__world_copy(d, src + so, n);
    else wf__world_copy_as(d, src + so, n, mode);
    for (size_t i = 0; i < n; i++)
        if (d[i] != pattern(i + so))
            ck_abort_msg("n %zu src+%zu dst+%zu mode %d: byte %zu differs", n, so, d0, mode, i);
    for (size_t i = 0; i < GUARD + d0; i++) ck_assert_uint_eq(dst[i], 0xA5);
    for (size_t i = 0; i < GUARD; i++) ck_assert_uint_eq(d[n + i], 0xA5);
    free(src);
    free(dst);
}

START_TEST(test_copy_small_all_alignments) {
    static const size_t lens[] = {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4096, 4099};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t so = 0; so < 16; so += 5)
            for (size_t d0 = 0; d0 < 16; d0++)
                for (int mode = -1; mode <= 1; mode++) check_copy(lens[li], so, d0, mode);
}
END_TEST

/* Around the size at which copies start streaming, with odd lengths and offsets. */
START_TEST(test_copy_streaming_threshold) {
    size_t m = wf__world_stream_min();
    ck_assert_uint_ge(m, 1u << 20);
    check_copy(m - 1, 5, 3, -1); /* ordinary */
    check_copy(m, 0, 0, -1);     /* streaming, aligned */
    check_copy(m + 77, 5, 3, -1); /* streaming, unaligned head and a tail */
}
END_TEST

static void *first_call(void *arg) {
    *(size_t *)arg = wf__world_stream_min();
    return NULL;
}

/* The threshold is computed on first use, possibly by several threads at once (puts run on
 * any thread): all must see the same value, and under TSan the lazy init must not race. */
START_TEST(test_stream_min_concurrent_first_use) {
    enum { N = 4 };
    pthread_t t[N];
    size_t got[N];
    for (int i = 0; i < N; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, first_call, &got[i]), 0);
    for (int i = 0; i < N; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < N; i++) ck_assert_uint_eq(got[i], wf__world_stream_min());
}
END_TEST

/* wf__world_swap: both blocks exchanged for every length around the 64-byte step and every
 * relative alignment, nothing outside them written. */
static void check_swap(size_t n, size_t ao, size_t bo) {
    size_t cap = n + 2 * GUARD + 16;
    uint8_t *x = malloc(cap), *y = malloc(cap);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    memset(x, 0xA5, cap);
    memset(y, 0x5A, cap);
    uint8_t *a = x + GUARD + ao, *b = y + GUARD + bo;
    for (size_t i = 0; i < n; i++) a[i] = pattern(i), b[i] = pattern(i + 7777);
    wf__world_swap(a, b, n);
    for (size_t i = 0; i < n; i++)
        if (a[i] != pattern(i + 7777) || b[i] != pattern(i))
            ck_abort_msg("swap n %zu a+%zu b+%zu: byte %zu", n, ao, bo, i);
    for (size_t i = 0; i < GUARD + ao; i++) ck_assert_uint_eq(x[i], 0xA5);
    for (size_t i = GUARD + ao + n; i < cap; i++) ck_assert_uint_eq(x[i], 0xA5);
    for (size_t i = 0; i < GUARD + bo; i++) ck_assert_uint_eq(y[i], 0x5A);
    for (size_t i = GUARD + bo + n; i < cap; i++) ck_assert_uint_eq(y[i], 0x5A);
    free(x);
    free(y);
}

START_TEST(test_swap_lengths_alignments) {
    static const size_t lens[] = {0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 4099, 65536 + 13};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ao = 0; ao < 16; ao += 3)
            for (size_t bo = 0; bo < 16; bo += 5) check_swap(lens[li], ao, bo);
    check_swap(3u << 20, 1, 0); /* several MiB, unaligned */
}
END_TEST

static Suite *copy_suite(void) {
    Suite *s = suite_create("world_copy");
    TCase *tc = tcase_create("copy");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_stream_min_concurrent_first_use);
    tcase_add_test(tc, test_copy_small_all_alignments);
    tcase_add_test(tc, test_copy_streaming_threshold);
    tcase_add_test(tc, test_swap_lengths_alignments);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(copy_suite)
