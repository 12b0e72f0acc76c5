/* engine/gfc: every collective over worlds of 1..8 real processes, random subsets in random
 * orders, overlapping groups running at the same time, sizes 0 B..64 MiB, each result compared
 * with a reference computed locally (all-reduce and reduce-scatter bit for bit against the
 * fixed-order serial sum). Also: forming a group sends nothing. The put path (pairs at or
 * above the put threshold): sizes straddling it, the registration cache's reuse and its
 * invalidation when a buffer is unmapped and mapped again, overlapping groups using it at the
 * same time, 0-byte slices among large ones, mismatched sizes giving an error, not a hang.
 * Odd-numbered all-to-all(-v) items of the plans run in place (test_gfc_inplace: the swap).
 * weft-test: labels=net,slow timeout=400 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check_main.h"
#include "engine/gfc/gfc.h"
#include "engine/world/world.h"
#include "engine/world/world_impl.h" /* wf__world_mem_cached */
#include "engine/gfc/gfc_blocks.h"
#include "engine/world/world_launch.h"

enum { K_BARRIER, K_BCAST, K_ALLGATHER, K_ALLTOALL, K_ALLTOALLV, K_RS, K_AR, K_P2P, K_COUNT };
static const char *kind_name[K_COUNT] = {"barrier",  "broadcast",      "allgather",  "alltoall",
                                         "alltoallv", "reduce_scatter", "allreduce", "send/recv"};

typedef struct item {
    int kind, root;
    size_t size; /* bytes per member (byte collectives) or floats (f32 ones) */
    int ranks[8], n;
} item;

/* Values of very different magnitudes, so that a different summation order would show. */
static float gen_float(int it, int member, size_t i) {
    uint32_t h = wt_h4((uint32_t)it, (uint32_t)member, 77u, (uint32_t)i);
    float v = (float)((int)(h % 2001u) - 1000);
    int e = (int)((h >> 11) % 24u) - 12;
    return e >= 0 ? v * (float)(1u << e) : v / (float)(1u << -e);
}

static size_t v_count(int it, int src, int dst, size_t size) {
    return size ? wt_h4((uint32_t)it, (uint32_t)src, (uint32_t)dst, 5u) % (size + 1) : 0;
}

static const size_t sizes[] = {0, 1, 3, 64, 4096, 12345, 65536, 262147, 1u << 20};

/* The plan every rank derives alike from the seed. */
static void make_plan(item *plan, int n_items, int world, uint32_t seed) {
    uint32_t s = seed;
    for (int t = 0; t < n_items; t++) {
        item *p = &plan[t];
        s = wt_mix(s + 1);
        p->kind = (int)(s % K_COUNT);
        s = wt_mix(s + 1);
        p->size = sizes[s % (sizeof sizes / sizeof sizes[0])];
        if (p->kind == K_RS || p->kind == K_AR) p->size /= 4; /* floats */
        s = wt_mix(s + 1);
        p->n = 1 + (int)(s % (uint32_t)world);
        if (p->kind == K_P2P && p->n < 2 && world >= 2) p->n = 2;
        int perm[8];
        for (int i = 0; i < world; i++) perm[i] = i;
        for (int i = world - 1; i > 0; i--) {
            s = wt_mix(s + 1);
            int j = (int)(s % (uint32_t)(i + 1));
            int tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
        }
        memcpy(p->ranks, perm, sizeof(int) * (size_t)p->n);
        s = wt_mix(s + 1);
        p->root = (int)(s % (uint32_t)p->n);
    }
}

/* Runs item t on this rank (a member) and checks the result; returns 0 if right. */
static int run_item(wf_world *w, const item *p, int t) {
    wf_group g;
    WT_CHECK(wf_gfc_group_init(&g, p->ranks, p->n) == WF_OK, "group");
    int me = wf_gfc_group_index(&g, wf_world_rank(w)), n = p->n;
    size_t sz = p->size;
    wf_status st = WF_OK;
    uint8_t *a = NULL, *b = NULL;
    switch (p->kind) {
    case K_BARRIER:
        st = wf_gfc_barrier(w, &g);
        break;
    case K_BCAST:
        a = malloc(sz + 1);
        for (size_t i = 0; i < sz; i++) a[i] = me == p->root ? wt_gen_byte(t, p->root, 0, i) : 0;
        st = wf_gfc_broadcast(w, &g, p->root, a, sz);
        for (size_t i = 0; st == WF_OK && i < sz; i++)
            WT_CHECK(a[i] == wt_gen_byte(t, p->root, 0, i), "item %d bcast byte %zu", t, i);
        break;
    case K_ALLGATHER:
        a = malloc(sz + 1);
        b = malloc(sz * (size_t)n + 1);
        for (size_t i = 0; i < sz; i++) a[i] = wt_gen_byte(t, me, 0, i);
        st = wf_gfc_allgather(w, &g, a, b, sz);
        for (int k = 0; st == WF_OK && k < n; k++)
            for (size_t i = 0; i < sz; i++)
                WT_CHECK(b[(size_t)k * sz + i] == wt_gen_byte(t, k, 0, i), "item %d from %d", t, k);
        break;
    case K_ALLTOALL: {
        size_t cnt[8], dsp[8];
        wt_blocks_even(cnt, dsp, n, sz);
        a = malloc(sz * (size_t)n + 1);
        b = malloc(sz * (size_t)n + 1);
        wt_blocks_fill(a, n, cnt, dsp, t, me);
        if (t % 2) { /* in place */
            memcpy(b, a, sz * (size_t)n);
            st = wf_gfc_alltoall(w, &g, b, b, sz);
        } else {
            st = wf_gfc_alltoall(w, &g, a, b, sz);
        }
        WT_CHECK(st != WF_OK || wt_blocks_check(b, n, cnt, dsp, t, me) == 0, "item %d", t);
        break;
    }
    case K_ALLTOALLV: {
        size_t sc[8], sd[8], rc[8], rd[8], stot = 0, rtot = 0;
        int in_place = t % 2; /* in place: one layout, a pair's two counts equal */
        for (int k = 0; k < n; k++) {
            sc[k] = in_place ? v_count(t, me < k ? me : k, me < k ? k : me, sz)
                             : v_count(t, me, k, sz);
            rc[k] = in_place ? sc[k] : v_count(t, k, me, sz);
        }
        /* Displacements in reverse member order, with gaps: nothing assumes a packed layout. */
        for (int k = n - 1; k >= 0; k--) {
            sd[k] = stot;
            stot += sc[k] + 3;
            rd[k] = in_place ? sd[k] : rtot;
            rtot += in_place ? sc[k] + 3 : rc[k] + 5;
        }
        a = malloc(stot + 1);
        b = calloc(1, rtot + 1);
        wt_blocks_fill(a, n, sc, sd, t, me);
        if (in_place) {
            memcpy(b, a, stot);
            st = wf_gfc_alltoallv(w, &g, b, sc, sd, b, rc, rd);
        } else {
            st = wf_gfc_alltoallv(w, &g, a, sc, sd, b, rc, rd);
        }
        WT_CHECK(st != WF_OK || wt_blocks_check(b, n, rc, rd, t, me) == 0, "item %d", t);
        break;
    }
    case K_RS:
    case K_AR: {
        size_t total = p->kind == K_RS ? sz * (size_t)n : sz;
        float *x = malloc(total * sizeof(float) + 4);
        float *y = malloc(total * sizeof(float) + 4);
        for (size_t i = 0; i < total; i++) x[i] = gen_float(t, me, i);
        size_t first = 0, cnt = total;
        if (p->kind == K_RS) {
            st = wf_gfc_reduce_scatter_f32(w, &g, x, y, sz);
            first = (size_t)me * sz;
            cnt = sz;
        } else if (t % 2) {
            st = wf_gfc_allreduce_f32(w, &g, x, x, total); /* in place */
            memcpy(y, x, total * sizeof(float));
        } else {
            st = wf_gfc_allreduce_f32(w, &g, x, y, total);
        }
        for (size_t i = 0; st == WF_OK && i < cnt; i++) {
            float ref = gen_float(t, 0, first + i);
            for (int k = 1; k < n; k++) ref += gen_float(t, k, first + i);
            if (memcmp(&ref, &y[i], sizeof ref) != 0) {
                free(x);
                free(y);
                WT_FAIL("item %d %s element %zu: %.9g != %.9g", t, kind_name[p->kind], i,
                        (double)y[i], (double)ref);
            }
        }
        free(x);
        free(y);
        break;
    }
    case K_P2P: {
        /* A ring inside the group: send to the next member, receive from the previous. */
        if (n < 2) break;
        a = malloc(sz + 1);
        b = malloc(sz + 1);
        for (size_t i = 0; i < sz; i++) a[i] = wt_gen_byte(t, me, 1, i);
        int next = (me + 1) % n, prev = (me + n - 1) % n;
        size_t got = 0;
        /* Even members send first: blocking rendezvous sends need the peer's receive. */
        if (me % 2 == 0) {
            st = wf_gfc_send(w, &g, next, (uint32_t)t, a, sz);
            if (st == WF_OK) st = wf_gfc_recv(w, &g, prev, (uint32_t)t, b, sz, &got);
        } else {
            st = wf_gfc_recv(w, &g, prev, (uint32_t)t, b, sz, &got);
            if (st == WF_OK) st = wf_gfc_send(w, &g, next, (uint32_t)t, a, sz);
        }
        WT_CHECK(st != WF_OK || got == sz, "item %d got %zu", t, got);
        for (size_t i = 0; st == WF_OK && i < sz; i++)
            WT_CHECK(b[i] == wt_gen_byte(t, prev, 1, i), "item %d byte %zu", t, i);
        break;
    }
    }
    free(a);
    free(b);
    WT_CHECK(st == WF_OK, "item %d %s (n %d, size %zu): %s: %s", t, kind_name[p->kind], n, sz,
             wf_status_name(st), wf_world_error(w));
    return 0;
}

#define N_ITEMS 60

static int body_plan(wf_world *w, int rank, void *arg) {
    item plan[N_ITEMS];
    make_plan(plan, N_ITEMS, wf_world_size(w), 1234u + (uint32_t)wf_world_size(w));
    for (int t = 0; t < N_ITEMS; t++) {
        int member = 0;
        for (int i = 0; i < plan[t].n; i++) member |= plan[t].ranks[i] == rank;
        if (member && run_item(w, &plan[t], t) != 0) return 1;
    }
    int all[8];
    for (int r = 0; r < wf_world_size(w); r++) all[r] = r;
    wf_group g;
    wf_gfc_group_init(&g, all, wf_world_size(w));
    WT_CHECK(wf_gfc_barrier(w, &g) == WF_OK, "final barrier: %s", wf_world_error(w));
    return 0;
}

static void run_plan(int n) {
    wt_env env = wt_env_default(n);
    ck_assert_int_eq(wt_run(&env, body_plan, NULL, 200), 0);
}

START_TEST(test_plan_1_2_3) {
    run_plan(1);
    run_plan(2);
    run_plan(3);
}
END_TEST

START_TEST(test_plan_5) { run_plan(5); }
END_TEST

START_TEST(test_plan_8) { run_plan(8); }
END_TEST

/* The largest sizes: 64 MiB all-reduce over 4 ranks in reversed order, 64 MiB of all-to-all
 * per rank over 4, and a 64 MiB broadcast. */
static int body_large(wf_world *w, int rank, void *arg) {
    int order[4] = {3, 1, 0, 2};
    item items[3] = {
        {.kind = K_AR, .size = (64u << 20) / 4, .n = 4},
        {.kind = K_ALLTOALL, .size = 16u << 20, .n = 4},
        {.kind = K_BCAST, .size = 64u << 20, .n = 4, .root = 1},
    };
    for (int t = 0; t < 3; t++) {
        memcpy(items[t].ranks, order, sizeof order);
        if (run_item(w, &items[t], 1000 + t) != 0) return 1;
    }
    return 0;
}

START_TEST(test_large_64mib) {
    wt_env env = wt_env_default(4);
    ck_assert_int_eq(wt_run(&env, body_large, NULL, 300), 0);
}
END_TEST

/* Forming groups is bookkeeping: no send, receive, put or endpoint. */
static int body_no_messages(wf_world *w, int rank, void *arg) {
    wf_world_stats before, after;
    wf_world_get_stats(w, &before);
    uint64_t ids = 0;
    for (int i = 0; i < 10000; i++) {
        int ranks[3] = {i % 3, (i + 1) % 3, (i + 2) % 3};
        wf_group g;
        wf_status gst = wf_gfc_group_init(&g, ranks, 1 + i / 7 % 3);
        WT_CHECK(gst == WF_OK, "group %d", i);
        ids ^= g.id;
    }
    wf_world_get_stats(w, &after);
    WT_CHECK(memcmp(&before, &after, sizeof before) == 0, "forming groups communicated");
    WT_CHECK(ids != 0, "ids");
    /* Same members, different order: different groups. */
    int a[3] = {0, 1, 2}, b[3] = {2, 1, 0};
    WT_CHECK(wf_gfc_group_hash(a, 3) != wf_gfc_group_hash(b, 3), "order must matter");
    int dup[2] = {1, 1};
    wf_group g;
    WT_CHECK(wf_gfc_group_init(&g, dup, 2) == WF_EINVAL, "duplicate ranks");
    /* A collective does communicate, and the counters see it. */
    WT_CHECK(wf_gfc_group_init(&g, a, 3) == WF_OK, "group");
    WT_CHECK(wf_gfc_barrier(w, &g) == WF_OK, "barrier: %s", wf_world_error(w));
    wf_world_get_stats(w, &after);
    WT_CHECK(after.sends > before.sends && after.recvs > before.recvs, "barrier counted");
    return 0;
}

START_TEST(test_forming_group_sends_nothing) {
    wt_env env = wt_env_default(3);
    ck_assert_int_eq(wt_run(&env, body_no_messages, NULL, 60), 0);
}
END_TEST

/* ---- the put path --------------------------------------------------------------------------- */
static uint64_t puts_now(wf_world *w) {
    wf_world_stats st;
    wf_world_get_stats(w, &st);
    return st.puts;
}

/* Sizes on both sides of a 4 KiB threshold, every data-moving collective; an all-to-all pair
 * moves by put exactly when it is at least the threshold. */
static int body_straddle(wf_world *w, int rank, void *arg) {
    wf_gfc_set_put_threshold(w, 4096);
    wf_gfc_set_put_caller_memory(w, 1);
    int ranks[3] = {2, 0, 1};
    static const size_t sz[] = {4095, 4096, 4097, 70001};
    static const int kinds[] = {K_ALLTOALL, K_ALLTOALLV, K_ALLGATHER, K_BCAST, K_RS, K_AR};
    int t = 2000;
    for (size_t si = 0; si < sizeof sz / sizeof sz[0]; si++) {
        for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++, t++) {
            item it = {.kind = kinds[ki], .size = sz[si], .n = 3, .root = t % 3};
            if (it.kind == K_RS || it.kind == K_AR) /* floats; all-reduce: 3 blocks' worth */
                it.size = sz[si] / 4 * (it.kind == K_AR ? 3 : 1);
            memcpy(it.ranks, ranks, sizeof ranks);
            uint64_t before = puts_now(w);
            if (run_item(w, &it, t) != 0) return 1;
            uint64_t puts = puts_now(w) - before;
            if (it.kind == K_ALLTOALL)
                WT_CHECK(puts == (sz[si] >= 4096 ? 2u : 0u), "size %zu: %llu puts", sz[si],
                         (unsigned long long)puts);
        }
    }
    return 0;
}

START_TEST(test_put_threshold_straddle) {
    wt_env env = wt_env_default(3);
    ck_assert_int_eq(wt_run(&env, body_straddle, NULL, 120), 0);
}
END_TEST

/* All-to-all of `per` bytes per pair between a and b (2 ranks), checked; 0 if right. */
static int a2a_check(wf_world *w, const wf_group *g, uint8_t *a, uint8_t *b, size_t per, int t) {
    int me = wf_gfc_group_index(g, wf_world_rank(w));
    for (int k = 0; k < g->n_ranks; k++)
        for (size_t i = 0; i < per; i++) a[(size_t)k * per + i] = wt_gen_byte(t, me, k, i);
    memset(b, 0, per * (size_t)g->n_ranks);
    wf_status st = wf_gfc_alltoall(w, g, a, b, per);
    WT_CHECK(st == WF_OK, "alltoall %d: %s", t, wf_world_error(w));
    for (int k = 0; k < g->n_ranks; k++)
        for (size_t i = 0; i < per; i++)
            WT_CHECK(b[(size_t)k * per + i] == wt_gen_byte(t, k, me, i), "call %d from %d byte %zu",
                     t, k, i);
    return 0;
}

/* Repeated calls reuse one registration (and the peer one unpacked key); a receive buffer
 * unmapped and mapped again (same size, usually the same address) is registered anew. */
static int body_reg_cache(wf_world *w, int rank, void *arg) {
    wf_gfc_set_put_caller_memory(w, 1);
    int ranks[2] = {0, 1};
    wf_group g;
    wf_gfc_group_init(&g, ranks, 2);
    size_t per = 1u << 20, len = 2 * per;
    uint8_t *a = malloc(len);
    uint8_t *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    WT_CHECK(a && b != MAP_FAILED, "alloc");
    wf_world_stats s0, s1;
    wf_world_get_stats(w, &s0);
    for (int t = 0; t < 4; t++)
        if (a2a_check(w, &g, a, b, per, 3000 + t) != 0) return 1;
    wf_world_get_stats(w, &s1);
    int cached = wf__world_mem_cached(w);
    if (cached) {
        WT_CHECK(s1.mem_registrations - s0.mem_registrations == 1, "%llu registrations",
                 (unsigned long long)(s1.mem_registrations - s0.mem_registrations));
        WT_CHECK(s1.mem_cache_hits - s0.mem_cache_hits == 3, "%llu hits",
                 (unsigned long long)(s1.mem_cache_hits - s0.mem_cache_hits));
        WT_CHECK(s1.rkeys_unpacked - s0.rkeys_unpacked == 1, "%llu keys unpacked",
                 (unsigned long long)(s1.rkeys_unpacked - s0.rkeys_unpacked));
    } else {
        fprintf(stderr, "rank %d: no UCX memory events: registrations are not cached\n", rank);
    }
    /* Unmap and map again: the cached registration must go (and with it the peer's key). */
    uintptr_t old = (uintptr_t)b;
    WT_CHECK(munmap(b, len) == 0, "munmap");
    /* At the same address on purpose: the same (pointer, size) key with other pages. */
    b = mmap((void *)old, len, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    WT_CHECK(b != MAP_FAILED, "mmap");
    WT_CHECK((uintptr_t)b == old, "mapped again elsewhere (an old kernel ignores the flag)");
    for (int t = 0; t < 2; t++)
        if (a2a_check(w, &g, a, b, per, 3100 + t) != 0) return 1;
    wf_world_stats s2;
    wf_world_get_stats(w, &s2);
    if (cached) {
        WT_CHECK(s2.mem_invalidations - s1.mem_invalidations >= 1, "no invalidation");
        WT_CHECK(s2.mem_registrations - s1.mem_registrations == 1, "%llu registrations",
                 (unsigned long long)(s2.mem_registrations - s1.mem_registrations));
        WT_CHECK(s2.rkeys_unpacked - s1.rkeys_unpacked == 1, "peer unpacked %llu keys",
                 (unsigned long long)(s2.rkeys_unpacked - s1.rkeys_unpacked));
    }
    munmap(b, len);
    /* malloc'd, freed and allocated again (glibc may reuse the address, mapped or not). */
    for (int t = 0; t < 3; t++) {
        uint8_t *m = malloc(len);
        WT_CHECK(m != NULL, "malloc");
        if (a2a_check(w, &g, a, m, per, 3200 + t) != 0) return 1;
        free(m);
    }
    /* Registered memory from the world: the same checks through shared memory. */
    uint8_t *ra = wf_world_mem_alloc(w, len), *rb = wf_world_mem_alloc(w, len);
    WT_CHECK(ra && rb, "wf_world_mem_alloc");
    for (int t = 0; t < 3; t++)
        if (a2a_check(w, &g, ra, rb, per, 3300 + t) != 0) return 1;
    wf_world_mem_free(w, ra);
    wf_world_mem_free(w, rb);
    free(a);
    return wf_gfc_barrier(w, &g) == WF_OK ? 0 : 1;
}

START_TEST(test_put_registration_cache) {
    wt_env env = wt_env_default(2);
    ck_assert_int_eq(wt_run(&env, body_reg_cache, NULL, 120), 0);
}
END_TEST

/* Puts into memory peers map (wf_world_mem_alloc): the writer copies itself (no UCX put, no
 * flush), streaming past the cache from wf__world_stream_min() bytes, while the own slice is
 * copied in 1 MiB pieces between polls for the peers' regions. Odd lengths and displacements
 * (unaligned destinations), slices just below, at and above the streaming size, an own slice
 * of several pieces plus a tail, empty slices; 3 ranks; every byte checked; each put counted
 * as a copy into mapped memory when UCX may use shared memory. */
static int body_mapped_odd(wf_world *w, int rank, void *arg) {
    int ranks[3] = {2, 0, 1};
    wf_group g;
    wf_gfc_group_init(&g, ranks, 3);
    int me = wf_gfc_group_index(&g, rank), n = 3;
    size_t m = wf__world_stream_min();
    /* Per call t, the bytes member i sends member j. */
    const size_t plans[3][3][3] = {
        {{(3u << 20) + 5, m + 13, m - 1}, {m + 13, m + 7, 65536 + 3}, {m - 1, 65536 + 3, 1}},
        {{0, m + 64 + 7, 100}, {m + 64 + 7, 0, 1u << 20}, {100, 1u << 20, (1u << 20) + 1}},
        {{7, 70001, m}, {70001, (5u << 20) + 3, 0}, {m, 0, 13}},
    };
    size_t cap = 3 * (m + 128) + (8u << 20);
    uint8_t *send = wf_world_mem_alloc(w, cap), *recv = wf_world_mem_alloc(w, cap);
    WT_CHECK(send && recv, "wf_world_mem_alloc");
    wf_world_stats s0, s1;
    for (int t = 0; t < 3; t++) {
        size_t sc[3], sd[3], rc[3], rd[3], so = 1, ro = 3; /* odd starts: unaligned */
        for (int j = 0; j < n; j++) {
            sc[j] = plans[t][me][j];
            sd[j] = so;
            so += sc[j] + 5;
            rc[j] = plans[t][j][me];
            rd[j] = ro;
            ro += rc[j] + 9;
        }
        WT_CHECK(so <= cap && ro <= cap, "plan %d fits", t);
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < sc[j]; i++) send[sd[j] + i] = wt_gen_byte(4000 + t, me, j, i);
        memset(recv, 0xEE, ro);
        wf_world_get_stats(w, &s0);
        wf_status st = wf_gfc_alltoallv(w, &g, send, sc, sd, recv, rc, rd);
        WT_CHECK(st == WF_OK, "alltoallv %d: %s", t, wf_world_error(w));
        wf_world_get_stats(w, &s1);
        for (int j = 0; j < n; j++) {
            for (size_t i = 0; i < rc[j]; i++)
                WT_CHECK(recv[rd[j] + i] == wt_gen_byte(4000 + t, j, me, i),
                         "call %d: from member %d byte %zu of %zu", t, j, i, rc[j]);
            /* The gaps between slices stay untouched. */
            size_t end = rd[j] + rc[j], gap = j + 1 < n ? rd[j + 1] : ro;
            for (size_t i = end; i < gap; i++)
                WT_CHECK(recv[i] == 0xEE, "call %d: byte %zu after slice %d written", t, i, j);
        }
        unsigned large = 0;
        for (int j = 0; j < n; j++) large += j != me && sc[j] >= 65536;
        if (!getenv("UCX_TLS"))
            WT_CHECK(s1.puts_direct - s0.puts_direct == large, "call %d: %llu of %u puts were "
                     "copies into mapped memory", t,
                     (unsigned long long)(s1.puts_direct - s0.puts_direct), large);
    }
    wf_world_mem_free(w, send);
    wf_world_mem_free(w, recv);
    return wf_gfc_barrier(w, &g) == WF_OK ? 0 : 1;
}

START_TEST(test_put_mapped_odd_sizes) {
    wt_env env = wt_env_default(3);
    ck_assert_int_eq(wt_run(&env, body_mapped_odd, NULL, 120), 0);
}
END_TEST

/* Groups sharing ranks, in different orders, run large collectives while the others are still
 * in theirs: rank 3 starts B while 1 and 2 are in A. */
static int body_overlap(wf_world *w, int rank, void *arg) {
    static const int ga[3] = {0, 1, 2}, gb[3] = {3, 2, 1}, gc[2] = {1, 3};
    const int *lists[3] = {ga, gb, gc};
    int lens[3] = {3, 3, 2};
    for (int it = 0; it < 12; it++) {
        /* A receiver's own choice: ranks differ in it from one iteration to the next. */
        wf_gfc_set_put_caller_memory(w, (it + rank) % 2);
        for (int k = 0; k < 3; k++) {
            static const int kinds[3] = {K_ALLTOALLV, K_ALLTOALL, K_AR};
            item p = {.kind = kinds[(it + k) % 3], .n = lens[k],
                      .size = 65536 * (size_t)(1 + (it + k) % 4)};
            memcpy(p.ranks, lists[k], sizeof(int) * (size_t)lens[k]);
            int member = 0;
            for (int i = 0; i < p.n; i++) member |= p.ranks[i] == rank;
            if (member && run_item(w, &p, 4000 + it * 3 + k) != 0) return 1;
        }
    }
    return 0;
}

START_TEST(test_put_overlapping_groups) {
    wt_env env = wt_env_default(4);
    ck_assert_int_eq(wt_run(&env, body_overlap, NULL, 200), 0);
}
END_TEST

/* All-to-all-v with 0-byte slices among large and small ones (and a 0-byte self slice). */
static int body_zero_slices(wf_world *w, int rank, void *arg) {
    int ranks[3] = {0, 1, 2};
    wf_group g;
    wf_gfc_group_init(&g, ranks, 3);
    /* cnt[src][dst] */
    static const size_t cnt[3][3] = {{0, 200000, 0}, {0, 0, 7}, {150001, 0, 65536}};
    int me = rank;
    size_t sc[3], sd[3], rc[3], rd[3], stot = 0, rtot = 0;
    for (int k = 0; k < 3; k++) {
        sc[k] = cnt[me][k];
        rc[k] = cnt[k][me];
        sd[k] = stot;
        stot += sc[k];
        rd[k] = rtot;
        rtot += rc[k];
    }
    for (int t = 0; t < 4; t++) {
        wf_gfc_set_put_caller_memory(w, t % 2); /* puts, then messages after a decline */
        uint8_t *a = malloc(stot + 1), *b = calloc(1, rtot + 1);
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; i < sc[k]; i++) a[sd[k] + i] = wt_gen_byte(5000 + t, me, k, i);
        wf_status st = wf_gfc_alltoallv(w, &g, a, sc, sd, b, rc, rd);
        WT_CHECK(st == WF_OK, "alltoallv: %s", wf_world_error(w));
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; i < rc[k]; i++)
                WT_CHECK(b[rd[k] + i] == wt_gen_byte(5000 + t, k, me, i), "from %d byte %zu", k, i);
        free(a);
        free(b);
    }
    return 0;
}

START_TEST(test_put_alltoallv_zero_slices) {
    wt_env env = wt_env_default(3);
    ck_assert_int_eq(wt_run(&env, body_zero_slices, NULL, 120), 0);
}
END_TEST

/* Rank 0 sends 100000 bytes to rank 1, which expects 90000 (both put-sized): both get
 * WF_EPROTO at once (not a time-out), and the group then works again. */
static int body_mismatch(wf_world *w, int rank, void *arg) {
    wf_gfc_set_put_caller_memory(w, 1);
    int ranks[2] = {0, 1};
    wf_group g;
    wf_gfc_group_init(&g, ranks, 2);
    size_t sc[2] = {0, 0}, rc[2] = {0, 0}, d[2] = {0, 0};
    if (rank == 0) sc[1] = 100000;
    else rc[0] = 90000;
    uint8_t *a = calloc(1, 100000), *b = calloc(1, 100000);
    uint64_t t0 = wf_clock_now_ns();
    wf_status st = wf_gfc_alltoallv(w, &g, a, sc, d, b, rc, d);
    double ms = (double)(wf_clock_now_ns() - t0) / 1e6;
    WT_CHECK(st == WF_EPROTO, "rank %d: %s: %s", rank, wf_status_name(st), wf_world_error(w));
    WT_CHECK(ms < 10000, "rank %d: the error took %.0f ms", rank, ms);
    free(a);
    free(b);
    uint8_t *x = malloc(2 * 100000), *y = malloc(2 * 100000);
    int rc2 = a2a_check(w, &g, x, y, 100000, 6000);
    free(x);
    free(y);
    return rc2;
}

START_TEST(test_put_size_mismatch) {
    wt_env env = wt_env_default(2);
    ck_assert_int_eq(wt_run(&env, body_mismatch, NULL, 120), 0);
}
END_TEST

static Suite *gfc_suite(void) {
    Suite *s = suite_create("gfc");
    TCase *tc = tcase_create("gfc");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_forming_group_sends_nothing);
    tcase_add_test(tc, test_plan_1_2_3);
    tcase_add_test(tc, test_plan_5);
    tcase_add_test(tc, test_plan_8);
    tcase_add_test(tc, test_large_64mib);
    tcase_add_test(tc, test_put_threshold_straddle);
    tcase_add_test(tc, test_put_registration_cache);
    tcase_add_test(tc, test_put_mapped_odd_sizes);
    tcase_add_test(tc, test_put_overlapping_groups);
    tcase_add_test(tc, test_put_alltoallv_zero_slices);
    tcase_add_test(tc, test_put_size_mismatch);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(gfc_suite)
