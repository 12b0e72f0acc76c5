/* engine/gfc: all-to-all(-v) in place (send == recv), where the two members of a pair swap
 * their blocks through mapped memory, each swapping one half. Real processes: pairs whose
 * buffers both map (wf_world_mem_alloc) swap with no data message and no put; pairs where only
 * one maps are swapped whole by that one; pairs neither maps, and pairs below the put
 * threshold, go by copies and the ordinary exchange. Uneven and odd block sizes, empty
 * blocks, 2-4 ranks in a scrambled order, every byte and the gaps between blocks checked;
 * disagreeing sizes are WF_EPROTO on both members and leave the data untouched; a layout that
 * differs between send and recv is WF_EINVAL. A member killed in the middle of its half of a
 * swap: the survivor gets WF_EPEER naming it within its time-out, its block for that member
 * holds only old or swapped bytes, the rest of its buffer is intact, and after a replacement
 * joins the group swaps again.
 * weft-test: labels=net timeout=200 */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check_main.h"
#include "engine/gfc/gfc.h"
#include "engine/world/world.h"
#include "engine/gfc/gfc_blocks.h"
#include "engine/world/world_launch.h"

/* The bytes each pair exchanges in call `call` (the same both ways): below, at and above the
 * put threshold, odd, empty. */
static size_t pair_count(int call, int a, int b) {
    static const size_t c[] = {0, 1, 4097, 65535, 65536, 65536 + 7, 262147, (1u << 20) + 1,
                               3u << 20};
    int lo = a < b ? a : b, hi = a < b ? b : a;
    return c[wt_mix((uint32_t)(call * 64 + lo * 8 + hi)) % (sizeof c / sizeof c[0])];
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
        wt_blocks_fill(buf, n, cnt, dsp, call, me);
        wf_world_stats s0, s1;
        wf_world_get_stats(w, &s0);
        wf_status st = wf_gfc_alltoallv(w, &g, buf, cnt, dsp, buf, cnt, dsp);
        WT_CHECK(st == WF_OK, "call %d: %s: %s", call, wf_status_name(st), wf_world_error(w));
        wf_world_get_stats(w, &s1);
        WT_CHECK(wt_blocks_check(buf, n, cnt, dsp, call, me) == 0, "call %d", call);
        for (int j = 0; j < n; j++) {
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
    (void)arg;
    wf_group g = wt_group_first(2);
    size_t per = 1u << 19, cnt[2], dsp[2];
    wt_blocks_even(cnt, dsp, 2, per);
    uint8_t *buf = wf_world_mem_alloc(w, 2 * per);
    WT_CHECK(buf, "wf_world_mem_alloc");
    for (int call = 0; call < 3; call++) {
        wt_blocks_fill(buf, 2, cnt, dsp, call, rank);
        wf_status st = wf_gfc_alltoall(w, &g, buf, buf, per);
        WT_CHECK(st == WF_OK, "alltoall: %s", wf_world_error(w));
        WT_CHECK(wt_blocks_check(buf, 2, cnt, dsp, call, rank) == 0, "call %d", call);
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
    (void)arg;
    wf_group g = wt_group_first(2);
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

/* ---- a member killed mid-swap ------------------------------------------------------------------
 * Rank 1 makes one page of its block for rank 0 read-only (3/4 of the way in), so a swap of
 * that pair run by rank 1 faults there and the fault handler SIGKILLs the process: it dies
 * with part of the pair swapped, deterministically, whatever the host's load. (Which member
 * swaps a pair changes from call to call: a call that rank 0 swaps goes through, as rank 0
 * writes through its own mapping; the next call is rank 1's.) Rank 0 must get WF_EPEER naming
 * rank 1 within its time-out; its block for rank 1 is undefined (each byte old or swapped,
 * and here swapped up to the page and not after it: rank 1 died mid-way), every other byte of
 * its buffer intact. Rank 0 then admits a replacement and the group swaps again (the dead
 * incarnation's mapping is not reused). */
#define KILL_BLK (4u << 20)
#define KILL_PAGE (KILL_BLK / 2 + KILL_BLK / 4)
#define KILL_TIMEOUT_MS 5000
#define KILL_CALLS 4
#define VICTIM_RETURNED 77

static void die_now(int sig) {
    (void)sig;
    kill(getpid(), SIGKILL);
}

static const size_t kill_cnt[2] = {KILL_BLK, KILL_BLK}, kill_dsp[2] = {0, KILL_BLK};

/* Fills the two blocks with call's bytes, swaps in place, checks. */
static int kill_swap_ok(wf_world *w, const wf_group *g, uint8_t *buf, int call) {
    int me = wf_gfc_group_index(g, wf_world_rank(w));
    wt_blocks_fill(buf, 2, kill_cnt, kill_dsp, call, me);
    wf_status st = wf_gfc_alltoall(w, g, buf, buf, KILL_BLK);
    WT_CHECK(st == WF_OK, "call %d: %s: %s", call, wf_status_name(st), wf_world_error(w));
    return wt_blocks_check(buf, 2, kill_cnt, kill_dsp, call, me);
}

static int body_kill(wf_world *w, int rank, void *arg) {
    (void)arg;
    wf_group g = wt_group_first(2);
    uint32_t epoch = wf_world_epoch(w);
    uint8_t *buf = wf_world_mem_alloc(w, 2 * KILL_BLK);
    WT_CHECK(buf, "wf_world_mem_alloc");
    /* A whole call first: endpoints, regions and mappings all exist before the kill. Whether
     * the pair swaps through the mapping shows in the bytes that left: none of the block then
     * (UCX_TLS may leave out the transports that map: the pair then moves by messages or puts,
     * and the victim dies when its block's data lands on the page instead). */
    wf_world_stats s0, s1;
    wf_world_get_stats(w, &s0);
    if (kill_swap_ok(w, &g, buf, 0)) return 1;
    wf_world_get_stats(w, &s1);
    int mapped = (s1.bytes_sent - s0.bytes_sent) + (s1.bytes_put - s0.bytes_put) < KILL_BLK;
    if (rank == 1) {
        /* Every way out of here but the kill is VICTIM_RETURNED: the parent tells them apart. */
        struct sigaction sa = {.sa_handler = die_now};
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        for (int call = 1; call <= KILL_CALLS; call++) {
            if (mprotect(buf + KILL_PAGE, 4096, PROT_READ | PROT_WRITE) != 0) break;
            wt_blocks_fill(buf, 2, kill_cnt, kill_dsp, call, rank);
            if (mprotect(buf + KILL_PAGE, 4096, PROT_READ) != 0) break;
            wf_status st = wf_gfc_alltoall(w, &g, buf, buf, KILL_BLK);
            if (st != WF_OK) {
                fprintf(stderr, "the victim's call %d failed: %s: %s\n", call,
                        wf_status_name(st), wf_world_error(w));
                break;
            }
        }
        fprintf(stderr, "the victim's swaps did not fault\n");
        _exit(VICTIM_RETURNED);
    }
    wf_world_set_timeout_ms(w, KILL_TIMEOUT_MS);
    wf_status st = WF_OK;
    int call = 1;
    double ms = 0;
    for (; call <= KILL_CALLS; call++) {
        wt_blocks_fill(buf, 2, kill_cnt, kill_dsp, call, rank);
        uint64_t t0 = wf_clock_now_ns();
        st = wf_gfc_alltoall(w, &g, buf, buf, KILL_BLK);
        ms = (double)(wf_clock_now_ns() - t0) / 1e6;
        if (st != WF_OK) break;
        if (wt_blocks_check(buf, 2, kill_cnt, kill_dsp, call, rank)) return 1;
    }
    WT_CHECK(st == WF_EPEER, "survivor got %s: %s", wf_status_name(st), wf_world_error(w));
    WT_CHECK(wf_world_error_rank(w) == 1, "blamed rank %d: %s", wf_world_error_rank(w),
             wf_world_error(w));
    WT_CHECK(ms < KILL_TIMEOUT_MS + 2000, "noticed after %.0f ms", ms);
    /* The own block and nothing else intact; the block for rank 1 old or swapped byte by byte. */
    for (size_t i = 0; i < KILL_BLK; i++)
        WT_CHECK(buf[i] == wt_gen_byte(call, 0, 0, i), "own block byte %zu changed", i);
    uint8_t *pair = buf + KILL_BLK;
    size_t swapped[2] = {0, 0}, differ[2] = {0, 0};
    for (size_t i = 0; i < KILL_BLK; i++) {
        uint8_t old = wt_gen_byte(call, 0, 1, i), now = wt_gen_byte(call, 1, 0, i);
        WT_CHECK(pair[i] == old || pair[i] == now, "pair byte %zu neither old nor swapped", i);
        int part = i >= KILL_PAGE;
        differ[part] += old != now;
        swapped[part] += old != now && pair[i] == now;
    }
    WT_CHECK(!mapped || (swapped[0] > 0 && swapped[1] < differ[1]),
             "swapped %zu of %zu bytes before the page, %zu of %zu from it: not mid-swap",
             swapped[0], differ[0], swapped[1], differ[1]);
    fprintf(stderr, "survivor (%s, call %d): %s after %.1f ms; swapped %zu/%zu before the page, %zu/%zu from it\n",
            mapped ? "mapped" : "not mapped", call, wf_status_name(st), ms, swapped[0], differ[0],
            swapped[1], differ[1]);
    int slot = -1;
    WT_CHECK(wf_world_admit(w, &slot) == WF_OK, "admit: %s", wf_world_error(w));
    WT_CHECK(slot == 1 && wf_world_epoch(w) == epoch + 1, "admitted slot %d, epoch %u", slot,
             wf_world_epoch(w));
    wf_world_set_timeout_ms(w, 20000);
    if (kill_swap_ok(w, &g, buf, 100)) return 1;
    wf_world_mem_free(w, buf);
    return wf_gfc_barrier(w, &g) == WF_OK ? 0 : 1;
}

static int body_kill_replacement(wf_world *w, int rank, void *arg) {
    (void)arg;
    WT_CHECK(rank == 1 && wf_world_incarnation(w, 1) == 2, "replacement of rank 1");
    wf_group g = wt_group_first(2);
    uint8_t *buf = wf_world_mem_alloc(w, 2 * KILL_BLK);
    WT_CHECK(buf, "wf_world_mem_alloc");
    if (kill_swap_ok(w, &g, buf, 100)) return 1;
    wf_world_mem_free(w, buf);
    return wf_gfc_barrier(w, &g) == WF_OK ? 0 : 1;
}

START_TEST(test_inplace_member_killed_mid_swap) {
    wt_env env = wt_env_default(2);
    /* With transports restricted to TCP (UCX_TLS=tcp,self: no mapping) the world itself keeps
     * peer-error handling on local endpoints: UCX 1.13 aborts a process whose put to a peer
     * that died is answered without it. */
    pid_t pids[3];
    int codes[3];
    for (int r = 0; r < 2; r++) pids[r] = wt_spawn(&env, r, body_kill, NULL);
    /* The victim ends by its SIGKILL (or by a sanitizer's report of the fault, if the sanitizer
     * keeps SIGSEGV to itself): any end but exit code 0, or VICTIM_RETURNED. */
    pid_t victim = pids[1], p = 0;
    int status = 0;
    for (int i = 0; i < 60000 && (p = waitpid(victim, &status, WNOHANG)) == 0; i++) usleep(1000);
    if (p != victim) {
        kill(victim, SIGKILL);
        waitpid(victim, NULL, 0);
    }
    int died = p == victim && !(WIFEXITED(status) && (WEXITSTATUS(status) == 0 ||
                                                      WEXITSTATUS(status) == VICTIM_RETURNED));
    pids[1] = 0;
    pids[2] = wt_spawn(&env, 1, body_kill_replacement, NULL);
    int bad = wt_wait(pids, 3, 90, codes);
    ck_assert_msg(died, "the victim did not die mid-swap (waitpid %d, status 0x%x)", (int)p, status);
    ck_assert_int_eq(bad, 0);
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
    tcase_add_test(tc, test_inplace_member_killed_mid_swap);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(gfc_inplace_suite)
