/* engine/gfc: all-to-all(-v) in place (send == recv), where the two members of a pair swap
 * their blocks through mapped memory, each swapping one half. Real processes: pairs whose
 * buffers both map (wf_world_mem_alloc) swap with no data message and no put; pairs where only
 * one maps are swapped whole by that one; pairs neither maps, and pairs below the put
 * threshold, go by copies and the ordinary exchange. Uneven and odd block sizes, empty
 * blocks, 2-4 ranks in a scrambled order, every byte and the gaps between blocks checked;
 * disagreeing sizes are WF_EPROTO on both members and leave the data untouched; a layout that
 * differs between send and recv is WF_EINVAL.
 * weft-test: labels=net timeout=200 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/gfc/gfc.h"
#include "engine/world/world.h"
#include "engine/world/world_launch.h"

static uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static uint8_t gen_byte(int call, int src, int dst, size_t i) {
    return (uint8_t)mix((uint32_t)call * 0x9E3779B1u ^
                        mix((uint32_t)src * 0x85EBCA77u ^
                            mix((uint32_t)dst * 0xC2B2AE3Du ^ mix((uint32_t)i))));
}

/* The bytes each pair exchanges in call `call` (the same both ways): below, at and above the
 * put threshold, odd, empty. */
static size_t pair_count(int call, int a, int b) {
    static const size_t c[] = {0, 1, 4097, 65535, 65536, 65536 + 7, 262147, (1u << 20) + 1,
                               3u << 20};
    int lo = a < b ? a : b, hi = a < b ? b : a;
    return c[mix((uint32_t)(call * 64 + lo * 8 + hi)) % (sizeof c / sizeof c[0])];
}

typedef struct mode {
    int alloc_mask; /* bit r: world rank r's buffer from wf_world_mem_alloc, else malloc */
    int n;          /* group size (ranks n-1 .. 0, reversed: group order != world order) */
    int calls;
} mode;

/* One member: `calls` in-place all-to-all-v calls, checked byte for byte. Returns 0 if right. */
static int body_swap(wf_world *w, int rank, void *arg) {
    const mode *m = arg;
    int ranks[8];
    for (int i = 0; i < m->n; i++) ranks[i] = m->n - 1 - i;
    wf_group g;
    WT_CHECK(wf_gfc_group_init(&g, ranks, m->n) == WF_OK, "group");
    int me = wf_gfc_group_index(&g, rank), n = m->n;
    int alloc = (m->alloc_mask >> rank) & 1;
    size_t cap = (size_t)n * ((3u << 20) + 64);
    uint8_t *buf = alloc ? wf_world_mem_alloc(w, cap) : malloc(cap);
    WT_CHECK(buf, "buffer of %zu bytes", cap);
    for (int call = 0; call < m->calls; call++) {
        size_t cnt[8], dsp[8], off = 5; /* odd start: unaligned blocks */
        for (int j = n - 1; j >= 0; j--) { /* reverse order, gaps: no packed layout assumed */
            cnt[j] = pair_count(call, me, j);
            dsp[j] = off;
            off += cnt[j] + 11;
        }
        WT_CHECK(off <= cap, "layout fits");
        memset(buf, 0xEE, off);
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < cnt[j]; i++) buf[dsp[j] + i] = gen_byte(call, me, j, i);
        wf_world_stats s0, s1;
        wf_world_get_stats(w, &s0);
        wf_status st = wf_gfc_alltoallv(w, &g, buf, cnt, dsp, buf, cnt, dsp);
        WT_CHECK(st == WF_OK, "call %d: %s: %s", call, wf_status_name(st), wf_world_error(w));
        wf_world_get_stats(w, &s1);
        for (int j = 0; j < n; j++) {
            for (size_t i = 0; i < cnt[j]; i++)
                WT_CHECK(buf[dsp[j] + i] == gen_byte(call, j, me, i),
                         "call %d: block from member %d byte %zu of %zu", call, j, i, cnt[j]);
            size_t end = dsp[j] + cnt[j], gap = j > 0 ? dsp[j - 1] : off;
            for (size_t i = end; i < gap; i++)
                WT_CHECK(buf[i] == 0xEE, "call %d: byte %zu after block %d written", call, i, j);
        }
        for (size_t i = 0; i < 5; i++) WT_CHECK(buf[i] == 0xEE, "byte %zu before the blocks", i);
        /* Which path the large pairs took shows in the bytes that left this rank: a pair either
         * member maps moves no data through UCX (only regions and flags), any other pair
         * sends or puts its block. With UCX_TLS restricted, mapping may not be offered. */
        size_t small = 0, large_fb = 0;
        for (int j = 0; j < n; j++) {
            if (j == me) continue;
            int peer_alloc = (m->alloc_mask >> ranks[j]) & 1;
            if (cnt[j] < 65536) small += cnt[j];
            else if (!alloc && !peer_alloc) large_fb += cnt[j];
        }
        uint64_t moved = (s1.bytes_sent - s0.bytes_sent) + (s1.bytes_put - s0.bytes_put);
        uint64_t ctrl = (uint64_t)n * 4 * (sizeof(wf_world_region) + 64);
        if (!getenv("UCX_TLS"))
            WT_CHECK(moved <= small + large_fb + ctrl && moved + ctrl >= small + large_fb,
                     "call %d: %llu bytes left the rank, expected %zu (+ up to %llu of control)",
                     call, (unsigned long long)moved, small + large_fb, (unsigned long long)ctrl);
    }
    WT_CHECK(wf_gfc_barrier(w, &g) == WF_OK, "final barrier: %s", wf_world_error(w));
    if (alloc) wf_world_mem_free(w, buf);
    else free(buf);
    return 0;
}

static void run_mode(int n, int alloc_mask, int calls) {
    mode m = {.alloc_mask = alloc_mask, .n = n, .calls = calls};
    wt_env env = wt_env_default(n);
    ck_assert_int_eq(wt_run(&env, body_swap, &m, 120), 0);
}

/* Every buffer mapped: every large pair swaps halves. */
START_TEST(test_inplace_mapped) {
    run_mode(2, 0x3, 6);
    run_mode(3, 0x7, 6);
}
END_TEST

/* Nothing mapped (malloc'd buffers): copies and the ordinary exchange. */
START_TEST(test_inplace_not_mapped) { run_mode(3, 0x0, 4); }
END_TEST

/* Mixed: ranks 0 and 2 mapped, 1 and 3 not: pairs of both kinds and one-sided ones (the member
 * that maps swaps both halves). */
START_TEST(test_inplace_mixed) { run_mode(4, 0x5, 4); }
END_TEST

/* The plain all-to-all in place, 1 MiB per rank (the benchmark's case), 2 ranks. */
static int body_alltoall(wf_world *w, int rank, void *arg) {
    int ranks[2] = {0, 1};
    wf_group g;
    wf_gfc_group_init(&g, ranks, 2);
    size_t per = 1u << 19;
    uint8_t *buf = wf_world_mem_alloc(w, 2 * per);
    WT_CHECK(buf, "wf_world_mem_alloc");
    for (int call = 0; call < 3; call++) {
        for (int j = 0; j < 2; j++)
            for (size_t i = 0; i < per; i++) buf[(size_t)j * per + i] = gen_byte(call, rank, j, i);
        wf_status st = wf_gfc_alltoall(w, &g, buf, buf, per);
        WT_CHECK(st == WF_OK, "alltoall: %s", wf_world_error(w));
        for (int j = 0; j < 2; j++)
            for (size_t i = 0; i < per; i++)
                WT_CHECK(buf[(size_t)j * per + i] == gen_byte(call, j, rank, i),
                         "call %d block %d byte %zu", call, j, i);
    }
    wf_world_mem_free(w, buf);
    return wf_gfc_barrier(w, &g) == WF_OK ? 0 : 1;
}

START_TEST(test_inplace_alltoall) {
    wt_env env = wt_env_default(2);
    ck_assert_int_eq(wt_run(&env, body_alltoall, NULL, 60), 0);
}
END_TEST

/* Sizes that disagree on a large pair: WF_EPROTO on both members, nothing swapped; then the
 * group works again. A send/recv layout that differs in place: WF_EINVAL, nothing sent. */
static int body_mismatch(wf_world *w, int rank, void *arg) {
    int ranks[2] = {0, 1};
    wf_group g;
    wf_gfc_group_init(&g, ranks, 2);
    size_t big = 1u << 18;
    uint8_t *buf = wf_world_mem_alloc(w, 4 * big);
    WT_CHECK(buf, "wf_world_mem_alloc");
    for (size_t i = 0; i < 4 * big; i++) buf[i] = (uint8_t)(i * 7 + (size_t)rank);
    size_t cnt[2] = {big, big}, dsp[2] = {0, 2 * big};
    cnt[1 - rank] = rank ? big + 1 : big; /* rank 1 says big + 1 for the pair */
    wf_status st = wf_gfc_alltoallv(w, &g, buf, cnt, dsp, buf, cnt, dsp);
    WT_CHECK(st == WF_EPROTO, "mismatch gave %s", wf_status_name(st));
    for (size_t i = 0; i < 4 * big; i++)
        WT_CHECK(buf[i] == (uint8_t)(i * 7 + (size_t)rank), "byte %zu changed", i);
    size_t other[2] = {2 * big, 0};
    WT_CHECK(wf_gfc_alltoallv(w, &g, buf, cnt, dsp, buf, cnt, other) == WF_EINVAL,
             "in place with two layouts");
    cnt[0] = cnt[1] = big;
    WT_CHECK(wf_gfc_alltoallv(w, &g, buf, cnt, dsp, buf, cnt, dsp) == WF_OK, "after: %s",
             wf_world_error(w));
    wf_world_mem_free(w, buf);
    return wf_gfc_barrier(w, &g) == WF_OK ? 0 : 1;
}

START_TEST(test_inplace_size_mismatch) {
    wt_env env = wt_env_default(2);
    ck_assert_int_eq(wt_run(&env, body_mismatch, NULL, 60), 0);
}
END_TEST

static Suite *gfc_inplace_suite(void) {
    Suite *s = suite_create("gfc_inplace");
    TCase *tc = tcase_create("gfc_inplace");
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, test_inplace_alltoall);
    tcase_add_test(tc, test_inplace_mapped);
    tcase_add_test(tc, test_inplace_not_mapped);
    tcase_add_test(tc, test_inplace_mixed);
    tcase_add_test(tc, test_inplace_size_mismatch);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(gfc_inplace_suite)
