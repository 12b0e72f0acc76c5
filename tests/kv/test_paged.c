/* Tests kv/paged.c: the block pool, the prefix cache and copy-on-write, with a property test
 * that runs thousands of random operations against a shadow model. */
#include "check_main.h"
#include "kv/paged.h"

#include <stdlib.h>
#include <string.h>

START_TEST(alloc_free_and_usage) {
    wf_kv_pool *p;
    ck_assert_int_eq(wf_kv_pool_new(4, 16, false, &p), WF_OK);
    int32_t b[5];
    for (int i = 0; i < 4; i++) ck_assert_int_eq(wf_kv_pool_alloc(p, &b[i]), WF_OK);
    ck_assert_int_eq(wf_kv_pool_alloc(p, &b[4]), WF_EFULL);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(p, &u);
    ck_assert_int_eq(u.used, 4);
    ck_assert_int_eq(u.free, 0);
    wf_kv_pool_ref(p, b[1]);
    wf_kv_pool_unref(p, b[1]);
    ck_assert_int_eq(wf_kv_pool_refcount(p, b[1]), 1);
    wf_kv_pool_unref(p, b[1]);
    ck_assert_int_eq(wf_kv_pool_available(p), 1);
    ck_assert_int_eq(wf_kv_pool_alloc(p, &b[4]), WF_OK);
    ck_assert_int_eq(b[4], b[1]);
    char err[128];
    ck_assert_msg(wf_kv_pool_check(p, err, sizeof err), "%s", err);
    wf_kv_pool *q = NULL;
    ck_assert_int_eq(wf_kv_pool_new(0, 16, false, &q), WF_EINVAL);
    ck_assert_ptr_null(q);
    ck_assert_int_eq(wf_kv_pool_new(2, 0, false, &q), WF_EINVAL);
    wf_kv_pool_free(p);
}
END_TEST

START_TEST(prefix_hit_and_lru_eviction) {
    /* 4-token blocks; a 10-token "system prompt" gives 2 full blocks. */
    wf_kv_pool *p;
    ck_assert_int_eq(wf_kv_pool_new(6, 4, true, &p), WF_OK);
    int32_t prompt[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    wf_kv_seq a, b;
    wf_kv_seq_init(&a, 8);
    wf_kv_seq_init(&b, 8);
    ck_assert_int_eq(wf_kv_seq_match_prefix(p, &a, prompt, 10), 0);
    ck_assert_int_eq(wf_kv_seq_reserve(p, &a, 10, NULL), WF_OK);
    wf_kv_seq_commit(p, &a, prompt, 10);
    ck_assert_int_eq(a.n_hashed, 2);
    /* Same prompt: both full blocks are shared. */
    ck_assert_int_eq(wf_kv_seq_match_prefix(p, &b, prompt, 10), 8);
    ck_assert_int_eq(b.blocks[0], a.blocks[0]);
    ck_assert_int_eq(b.blocks[1], a.blocks[1]);
    ck_assert_int_eq(wf_kv_pool_refcount(p, a.blocks[0]), 2);
    /* A prompt of exactly 8 tokens keeps one block to compute (its logits are needed). */
    wf_kv_seq c;
    wf_kv_seq_init(&c, 8);
    ck_assert_int_eq(wf_kv_seq_match_prefix(p, &c, prompt, 8), 4);
    wf_kv_seq_release(p, &c);
    wf_kv_seq_release(p, &a);
    wf_kv_seq_release(p, &b);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(p, &u);
    ck_assert_int_eq(u.used, 0);
    ck_assert_int_eq(u.cached, 2);
    ck_assert_int_eq(u.free, 4);
    ck_assert_uint_eq(u.prefix_queries, 28);
    ck_assert_uint_eq(u.prefix_hits, 12);
    /* Still cached after release: a new sequence hits. */
    ck_assert_int_eq(wf_kv_seq_match_prefix(p, &a, prompt, 10), 8);
    wf_kv_seq_release(p, &a);
    /* Taking all 6 blocks evicts both cached ones (the leaf, block 1 of the chain, first). */
    int32_t blk[6];
    for (int i = 0; i < 4; i++) ck_assert_int_eq(wf_kv_pool_alloc(p, &blk[i]), WF_OK);
    ck_assert_int_eq(wf_kv_pool_alloc(p, &blk[4]), WF_OK);
    wf_kv_pool_get_usage(p, &u);
    ck_assert_uint_eq(u.evictions, 1);
    ck_assert_int_eq(u.cached, 1);
    ck_assert_int_eq(wf_kv_seq_match_prefix(p, &a, prompt, 10), 4); /* root survived */
    char err[128];
    ck_assert_msg(wf_kv_pool_check(p, err, sizeof err), "%s", err);
    wf_kv_seq_release(p, &a);
    for (int i = 0; i < 5; i++) wf_kv_pool_unref(p, blk[i]);
    wf_kv_seq_free(&a);
    wf_kv_seq_free(&b);
    wf_kv_seq_free(&c);
    wf_kv_pool_free(p);
}
END_TEST

/* The salt is the namespace of the prefix cache: a virtual model with other adapters never
 * reuses another's blocks, one with the same salt does, and release/fork keep it. */
START_TEST(prefix_salt_separates_namespaces) {
    wf_kv_pool *p;
    ck_assert_int_eq(wf_kv_pool_new(16, 4, true, &p), WF_OK);
    int32_t prompt[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    wf_kv_seq a, b, c, d;
    wf_kv_seq_init(&a, 8);
    wf_kv_seq_init(&b, 8);
    wf_kv_seq_init(&c, 8);
    wf_kv_seq_init(&d, 8);
    wf_kv_seq_set_salt(&a, 0x1234);
    wf_kv_seq_set_salt(&c, 0x1234);
    ck_assert_int_eq(wf_kv_seq_match_prefix(p, &a, prompt, 10), 0);
    ck_assert_int_eq(wf_kv_seq_reserve(p, &a, 10, NULL), WF_OK);
    wf_kv_seq_commit(p, &a, prompt, 10);
    /* The peek agrees with the match that follows, per salt, and takes nothing. */
    ck_assert_int_eq(wf_kv_pool_cached_prefix(p, 0, prompt, 10), 0);
    ck_assert_int_eq(wf_kv_pool_cached_prefix(p, 0x1234, prompt, 10), 8);
    ck_assert_int_eq(wf_kv_pool_cached_prefix(p, 0x1234, prompt, 8), 4);
    ck_assert_int_eq(wf_kv_pool_cached_prefix(p, 0x1234, prompt, 0), 0);
    ck_assert_int_eq(wf_kv_pool_refcount(p, a.blocks[0]), 1);
    ck_assert_int_eq(wf_kv_seq_match_prefix(p, &b, prompt, 10), 0); /* salt 0: other space */
    ck_assert_int_eq(wf_kv_seq_match_prefix(p, &c, prompt, 10), 8); /* same salt: shared */
    ck_assert_int_eq(c.blocks[0], a.blocks[0]);
    wf_kv_seq_release(p, &c);
    ck_assert_uint_eq(c.salt, 0x1234);
    ck_assert_int_eq(wf_kv_seq_match_prefix(p, &c, prompt, 10), 8); /* kept across release */
    ck_assert_int_eq(wf_kv_seq_fork(p, &a, &d), WF_OK);
    ck_assert_uint_eq(d.salt, 0x1234);
    char err[128];
    ck_assert_msg(wf_kv_pool_check(p, err, sizeof err), "%s", err);
    wf_kv_seq *all[] = {&a, &b, &c, &d};
    for (int i = 0; i < 4; i++) {
        wf_kv_seq_release(p, all[i]);
        wf_kv_seq_free(all[i]);
    }
    wf_kv_pool_free(p);
}
END_TEST

START_TEST(cow_copies_shared_partial_block) {
    wf_kv_geometry g = {.n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .block_size = 4,
                        .dtype = WF_KV_DTYPE_F32};
    wf_kv_store store;
    ck_assert_int_eq(wf_kv_store_init(&store, &g, wf_kv_geometry_block_bytes(&g) * 8), WF_OK);
    wf_kv_pool *p;
    ck_assert_int_eq(wf_kv_pool_new(store.n_blocks, 4, true, &p), WF_OK);
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 0, 0};
    wf_kv_seq a, b;
    wf_kv_seq_init(&a, 4);
    wf_kv_seq_init(&b, 4);
    ck_assert_int_eq(wf_kv_seq_reserve(p, &a, 6, &store), WF_OK);
    ((float *)wf_kv_store_k(&store, 1, a.blocks[1]))[0] = 42.0f;
    wf_kv_seq_commit(p, &a, toks, 6);
    ck_assert_int_eq(wf_kv_seq_fork(p, &a, &b), WF_OK);
    ck_assert_int_eq(wf_kv_pool_refcount(p, a.blocks[1]), 2);
    ck_assert_int_eq(wf_kv_seq_blocks_needed(p, &b, 7), 1);
    ck_assert_int_eq(wf_kv_seq_reserve(p, &b, 7, &store), WF_OK);
    ck_assert_int_ne(b.blocks[1], a.blocks[1]);
    ck_assert_int_eq(b.blocks[0], a.blocks[0]);
    ck_assert(((float *)wf_kv_store_k(&store, 1, b.blocks[1]))[0] == 42.0f);
    /* a is now the only owner of its partial block: it writes in place. */
    ck_assert_int_eq(wf_kv_seq_blocks_needed(p, &a, 7), 0);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(p, &u);
    ck_assert_uint_eq(u.cow_copies, 1);
    wf_kv_seq_release(p, &a);
    wf_kv_seq_release(p, &b);
    wf_kv_pool_get_usage(p, &u);
    ck_assert_int_eq(u.used, 0);
    wf_kv_seq_free(&a);
    wf_kv_seq_free(&b);
    wf_kv_pool_free(p);
    wf_kv_store_free(&store);
}
END_TEST

/* A store split by layer kind: local layers in their own region with their own block count,
 * every (layer, block) at a distinct place inside the slabs, and the local region capped at
 * what the unsplit layout of the budget would give. */
START_TEST(split_store_layout) {
    wf_kv_geometry g = {.n_layers = 6, .n_kv_heads = 1, .head_dim = 4, .block_size = 4,
                        .dtype = WF_KV_DTYPE_F32, .swa_layers = 0x1f & ~(1u << 2),
                        .swa_window = 8}; /* layers 0,1,3,4 local; 2 and 5 global */
    size_t per_layer_block = 2 * 4 * 4 * 4; /* K+V, 4 tokens x 4 floats */
    size_t budget = per_layer_block * (2 * 50 + 4 * 10);
    wf_kv_store st;
    ck_assert_int_eq(wf_kv_store_init_swa(&st, &g, budget, 10), WF_OK);
    ck_assert_int_eq(st.n_swa_blocks, 10);
    ck_assert_int_eq(st.n_blocks, 50);
    ck_assert_uint_le(wf_kv_store_bytes(&st), budget);
    ck_assert(wf_kv_store_layer_is_swa(&st, 0) && !wf_kv_store_layer_is_swa(&st, 2) &&
              !wf_kv_store_layer_is_swa(&st, 5));
    /* Every slot written with its own tag reads back: no two (layer, block) overlap. */
    for (int l = 0; l < 6; l++) {
        int nb = wf_kv_store_layer_is_swa(&st, l) ? st.n_swa_blocks : st.n_blocks;
        for (int b = 0; b < nb; b++)
            for (int e = 0; e < 16; e++) {
                ((float *)wf_kv_store_k(&st, l, b))[e] = (float)(l * 100000 + b * 100 + e);
                ((float *)wf_kv_store_v(&st, l, b))[e] = (float)-(l * 100000 + b * 100 + e);
            }
    }
    for (int l = 0; l < 6; l++) {
        int nb = wf_kv_store_layer_is_swa(&st, l) ? st.n_swa_blocks : st.n_blocks;
        for (int b = 0; b < nb; b++) {
            ck_assert(((float *)wf_kv_store_k(&st, l, b))[15] == (float)(l * 100000 + b * 100 + 15));
            ck_assert(((float *)wf_kv_store_v(&st, l, b))[0] == (float)-(l * 100000 + b * 100));
        }
    }
    /* copy_block moves the global layers only; copy_swa_block the local ones. */
    wf_kv_store_copy_block(&st, 1, 0);
    ck_assert(((float *)wf_kv_store_k(&st, 2, 1))[3] == (float)(2 * 100000 + 3));
    ck_assert(((float *)wf_kv_store_k(&st, 0, 1))[3] == (float)(100 + 3));
    wf_kv_store_copy_swa_block(&st, 1, 0);
    ck_assert(((float *)wf_kv_store_k(&st, 0, 1))[3] == (float)3);
    wf_kv_store_free(&st);
    /* More local blocks than the unsplit layout holds: capped there. */
    size_t flat = wf_kv_geometry_block_bytes(&(wf_kv_geometry){.n_layers = 6, .n_kv_heads = 1,
                                                               .head_dim = 4, .block_size = 4,
                                                               .dtype = WF_KV_DTYPE_F32});
    ck_assert_int_eq(wf_kv_store_init_swa(&st, &g, flat * 20, 1000), WF_OK);
    ck_assert_int_eq(st.n_swa_blocks, 20);
    ck_assert_int_eq(st.n_blocks, 20);
    wf_kv_store_free(&st);
    /* Bad masks: every layer local, a layer beyond n_layers; peers' layouts are unsplit. */
    wf_kv_geometry bad = g;
    bad.swa_layers = 0x3f;
    ck_assert_int_eq(wf_kv_store_init_swa(&st, &bad, budget, 10), WF_EINVAL);
    bad.swa_layers = 1u << 6;
    ck_assert_int_eq(wf_kv_store_init_swa(&st, &bad, budget, 10), WF_EINVAL);
    ck_assert_int_eq(wf_kv_store_layout(&st, &g, budget), WF_EINVAL);
}
END_TEST

/* A long generation (one token at a time, as decoding does) holds every global block but only
 * the window's local blocks: the rest go back to the pool as it advances. */
START_TEST(swa_long_sequence_holds_window) {
    enum { W = 32, B = 8, N = 1000 };
    wf_kv_pool *p;
    ck_assert_int_eq(wf_kv_pool_new_swa(200, 8, B, W, false, &p), WF_OK);
    ck_assert_int_eq(wf_kv_pool_window(p), W);
    wf_kv_seq s;
    wf_kv_seq_init(&s, 200);
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = i % 97;
    /* a 100-token prompt in one chunk: needs its 13 local blocks at once (only 8 exist), so
     * it goes in chunks, as the scheduler sizes them with wf_kv_seq_fit_tokens */
    ck_assert(!wf_kv_seq_fits(p, &s, 100));
    ck_assert_int_eq(wf_kv_seq_reserve(p, &s, 100, NULL), WF_EFULL);
    int n = 0, max_held = 0;
    char err[160];
    while (n < N) {
        int fit = wf_kv_seq_fit_tokens(p, &s);
        int target = n + (n < 100 ? 100 - n : 1);
        if (target > fit) target = fit;
        ck_assert_int_gt(target, n);
        ck_assert_int_eq(wf_kv_seq_reserve(p, &s, target, NULL), WF_OK);
        wf_kv_seq_commit(p, &s, toks, target);
        n = target;
        if (wf_kv_seq_swa_held(&s) > max_held) max_held = wf_kv_seq_swa_held(&s);
        ck_assert_msg(wf_kv_pool_check(p, err, sizeof err), "%s", err);
    }
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(p, &u);
    ck_assert_int_eq(u.used, N / B);
    ck_assert_int_le(max_held, W / B + 1);
    ck_assert_int_eq(u.swa_used, wf_kv_seq_swa_held(&s));
    ck_assert_int_le(u.swa_used, W / B + 1);
    ck_assert_uint_eq(u.swa_released, (uint64_t)(N / B - u.swa_used));
    ck_assert_int_eq(s.swa_blocks[0], -1);
    wf_kv_seq_release(p, &s);
    wf_kv_pool_get_usage(p, &u);
    ck_assert_int_eq(u.used + u.swa_used, 0);
    ck_assert_int_eq(u.swa_free, 8);
    wf_kv_seq_free(&s);
    wf_kv_pool_free(p);
}
END_TEST

/* The prefix cache over a split pool: a cached prompt is reused with the local blocks of the
 * window before the match end; when those were evicted, the match stops where the local
 * blocks it needs still are (here: nowhere), never handing out global blocks alone. */
START_TEST(swa_prefix_reuse_needs_window_blocks) {
    enum { W = 8, B = 4 };
    wf_kv_pool *p;
    ck_assert_int_eq(wf_kv_pool_new_swa(40, 6, B, W, true, &p), WF_OK);
    int32_t prompt[30];
    for (int i = 0; i < 30; i++) prompt[i] = 1000 + i;
    wf_kv_seq a, b, c;
    wf_kv_seq_init(&a, 16);
    wf_kv_seq_init(&b, 16);
    wf_kv_seq_init(&c, 16);
    for (int n = 0; n < 30;) { /* chunks of 8: at most 8 + W local tokens held */
        int t = n + 8 < 30 ? n + 8 : 30;
        ck_assert_int_eq(wf_kv_seq_reserve(p, &a, t, NULL), WF_OK);
        wf_kv_seq_commit(p, &a, prompt, t);
        n = t;
    }
    ck_assert_int_eq(a.swa_lo, (30 - W + 1) / B);
    /* While a holds its window: b reuses 7 full blocks (28 tokens) of both kinds. */
    ck_assert_int_eq(wf_kv_seq_match_prefix(p, &b, prompt, 30), 28);
    ck_assert_int_eq(b.swa_lo, (28 - W + 1) / B);
    for (int j = b.swa_lo; j < 7; j++) {
        ck_assert_int_eq(b.swa_blocks[j], a.swa_blocks[j]);
        ck_assert_int_eq(wf_kv_pool_swa_refcount(p, b.swa_blocks[j]), 2);
    }
    for (int j = 0; j < b.swa_lo; j++) ck_assert_int_eq(b.swa_blocks[j], -1);
    char err[160];
    ck_assert_msg(wf_kv_pool_check(p, err, sizeof err), "%s", err);
    wf_kv_seq_release(p, &b);
    wf_kv_seq_release(p, &a);
    /* Evict every cached local block: a different prompt takes all 6 local blocks. */
    int32_t other[24];
    for (int i = 0; i < 24; i++) other[i] = 5000 + i;
    ck_assert_int_eq(wf_kv_seq_reserve(p, &c, 24, NULL), WF_OK);
    wf_kv_seq_commit(p, &c, other, 24);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(p, &u);
    ck_assert_uint_gt(u.evictions, 0); /* local blocks of the long prompt reclaimed */
    wf_kv_seq_release(p, &c);
    wf_kv_seq_free(&c);
    wf_kv_seq_init(&c, 16);
    /* The long prompt's global blocks are still cached, its local window is not. */
    int m = wf_kv_seq_match_prefix(p, &b, prompt, 30);
    ck_assert_int_eq(m, 0);
    ck_assert_int_eq(b.n_blocks, 0);
    ck_assert_msg(wf_kv_pool_check(p, err, sizeof err), "%s", err);
    wf_kv_seq_free(&a);
    wf_kv_seq_free(&b);
    wf_kv_seq_free(&c);
    wf_kv_pool_free(p);
}
END_TEST

/* ---- property test ---- */
enum { NSEQ = 8, BS = 4, NBLK = 48, MAXB = 16, MAXTOK = MAXB * BS, NSWA = 40 };

typedef struct shadow_seq {
    int32_t tokens[MAXTOK];
    int n;
} shadow_seq;

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* window > 0: a split pool (kv/paged.h), local blocks mirrored in content_swa and checked over
 * the window each sequence still reads. */
static void run_property(bool prefix_cache, uint64_t seed, int window) {
    wf_kv_pool *p;
    if (window > 0)
        ck_assert_int_eq(wf_kv_pool_new_swa(NBLK, NSWA, BS, window, prefix_cache, &p), WF_OK);
    else
        ck_assert_int_eq(wf_kv_pool_new(NBLK, BS, prefix_cache, &p), WF_OK);
    wf_kv_seq seqs[NSEQ];
    shadow_seq sh[NSEQ];
    int32_t content[NBLK][BS]; /* what the "engine" wrote in each slot */
    int32_t content_swa[NSWA][BS];
    memset(content, -1, sizeof content);
    memset(content_swa, -1, sizeof content_swa);
    for (int i = 0; i < NSEQ; i++) {
        wf_kv_seq_init(&seqs[i], MAXB);
        sh[i].n = 0;
    }
    uint64_t rng = seed, queries = 0, hits = 0;
    char err[160];
    for (int op = 0; op < 5000; op++) {
        int i = (int)(rng_next(&rng) % NSEQ);
        wf_kv_seq *s = &seqs[i];
        int r = (int)(rng_next(&rng) % 100);
        if (sh[i].n == 0) {
            /* Start: one of 3 shared "system prompts" plus a random tail. */
            int sys = (int)(rng_next(&rng) % 3);
            int n = 1 + (int)(rng_next(&rng) % 24);
            for (int t = 0; t < n; t++)
                sh[i].tokens[t] = t < 12 ? sys * 100 + t : (int32_t)(rng_next(&rng) % 5);
            sh[i].n = n;
            int m = wf_kv_seq_match_prefix(p, s, sh[i].tokens, n);
            queries += (uint64_t)n;
            hits += (uint64_t)m;
            ck_assert_int_eq(m % BS, 0);
            ck_assert_int_lt(m, n);
            s->n_tokens = m; /* the rest is computed by the append below */
        } else if (r < 55) {
            /* Append k tokens: reserve, write, commit. */
            int k = 1 + (int)(rng_next(&rng) % 9);
            int target = sh[i].n > s->n_tokens ? sh[i].n : s->n_tokens + k;
            if (target > MAXTOK) target = MAXTOK;
            if (target <= s->n_tokens) continue;
            for (int t = sh[i].n; t < target; t++) sh[i].tokens[t] = (int32_t)(rng_next(&rng) % 5);
            if (target > sh[i].n) sh[i].n = target;
            bool fits = wf_kv_seq_fits(p, s, target);
            ck_assert(fits == (wf_kv_seq_fit_tokens(p, s) >= target));
            if (window == 0)
                ck_assert(fits == (wf_kv_seq_blocks_needed(p, s, target) <=
                                   wf_kv_pool_available(p)));
            int jb = s->n_tokens / BS;
            int32_t before = jb < s->n_blocks ? s->blocks[jb] : -1;
            int32_t before_swa = window > 0 && jb < s->n_blocks ? s->swa_blocks[jb] : -1;
            wf_status st = wf_kv_seq_reserve(p, s, target, NULL);
            if (st == WF_OK && before >= 0 && s->blocks[jb] != before) /* COW: mirror the copy */
                memcpy(content[s->blocks[jb]], content[before], sizeof content[0]);
            if (st == WF_OK && before_swa >= 0 && s->swa_blocks[jb] != before_swa)
                memcpy(content_swa[s->swa_blocks[jb]], content_swa[before_swa],
                       sizeof content_swa[0]);
            if (!fits) {
                ck_assert_int_eq(st, WF_EFULL);
                continue;
            }
            ck_assert_int_eq(st, WF_OK);
            for (int pos = s->n_tokens; pos < target; pos++) {
                int32_t b = s->blocks[pos / BS];
                if (wf_kv_pool_refcount(p, b) != 1) /* never write into a shared block */
                    ck_abort_msg("op %d: write into block %d with ref %d", op, b,
                                 wf_kv_pool_refcount(p, b));
                content[b][pos % BS] = sh[i].tokens[pos];
                if (window > 0) {
                    int32_t bl = s->swa_blocks[pos / BS];
                    ck_assert_int_ge(bl, 0);
                    content_swa[bl][pos % BS] = sh[i].tokens[pos];
                }
            }
            wf_kv_seq_commit(p, s, sh[i].tokens, target);
        } else if (r < 70) {
            int j = (int)(rng_next(&rng) % NSEQ);
            if (j == i || sh[j].n != 0 || s->n_tokens != sh[i].n) continue;
            ck_assert_int_eq(wf_kv_seq_fork(p, s, &seqs[j]), WF_OK);
            sh[j] = sh[i];
        } else {
            wf_kv_seq_release(p, s);
            sh[i].n = 0;
        }
        /* Invariants after every operation. */
        if (!wf_kv_pool_check(p, err, sizeof err)) ck_abort_msg("op %d: %s", op, err);
        int refs[NBLK] = {0}, refs_swa[NSWA] = {0};
        int distinct = 0;
        for (int q = 0; q < NSEQ; q++) {
            for (int b = 0; b < seqs[q].n_blocks; b++) refs[seqs[q].blocks[b]]++;
            for (int pos = 0; pos < seqs[q].n_tokens; pos++)
                if (content[seqs[q].blocks[pos / BS]][pos % BS] != sh[q].tokens[pos])
                    ck_abort_msg("op %d: seq %d pos %d holds wrong K/V", op, q, pos);
            if (window == 0) continue;
            /* The local table: released below the window of the next position, held (and
             * right) from there on; O(window) blocks held. */
            const wf_kv_seq *sq = &seqs[q];
            int first = sq->n_tokens - window + 1 > 0 ? (sq->n_tokens - window + 1) / BS : 0;
            if (first > sq->n_blocks) first = sq->n_blocks;
            if (sq->swa_lo != first)
                ck_abort_msg("op %d: seq %d swa_lo %d, window starts at block %d", op, q,
                             sq->swa_lo, first);
            ck_assert_int_le(wf_kv_seq_swa_held(sq), sq->n_blocks);
            for (int b = 0; b < sq->n_blocks; b++) {
                if (b < sq->swa_lo) {
                    ck_assert_int_eq(sq->swa_blocks[b], -1);
                    continue;
                }
                refs_swa[sq->swa_blocks[b]]++;
            }
            for (int pos = sq->swa_lo * BS; pos < sq->n_tokens; pos++)
                if (content_swa[sq->swa_blocks[pos / BS]][pos % BS] != sh[q].tokens[pos])
                    ck_abort_msg("op %d: seq %d pos %d holds wrong local K/V", op, q, pos);
        }
        for (int b = 0; b < NSWA && window > 0; b++)
            if (wf_kv_pool_swa_refcount(p, b) != refs_swa[b])
                ck_abort_msg("op %d: local block %d ref %d, tables hold %d", op, b,
                             wf_kv_pool_swa_refcount(p, b), refs_swa[b]);
        for (int b = 0; b < NBLK; b++) {
            if (wf_kv_pool_refcount(p, b) != refs[b])
                ck_abort_msg("op %d: block %d ref %d, tables hold %d", op, b,
                             wf_kv_pool_refcount(p, b), refs[b]);
            distinct += refs[b] > 0;
        }
        wf_kv_pool_usage u;
        wf_kv_pool_get_usage(p, &u);
        if (u.used != distinct || u.used + u.cached + u.free != NBLK ||
            u.prefix_queries != queries || u.prefix_hits != hits ||
            (!prefix_cache && u.cached != 0))
            ck_abort_msg("op %d: usage used %d/%d cached %d free %d queries %llu/%llu hits "
                         "%llu/%llu",
                         op, u.used, distinct, u.cached, u.free,
                         (unsigned long long)u.prefix_queries, (unsigned long long)queries,
                         (unsigned long long)u.prefix_hits, (unsigned long long)hits);
    }
    if (prefix_cache) ck_assert_uint_gt(hits, 0);
    wf_kv_pool_usage end;
    wf_kv_pool_get_usage(p, &end);
    if (window > 0) ck_assert_uint_gt(end.swa_released, 0); /* the window did slide */
    ck_assert_uint_gt(end.cow_copies, 0); /* the forks did diverge */
    if (prefix_cache) ck_assert_uint_gt(end.evictions, 0); /* LRU reclaim was exercised */
    for (int i = 0; i < NSEQ; i++) {
        wf_kv_seq_release(p, &seqs[i]);
        wf_kv_seq_free(&seqs[i]);
    }
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(p, &u);
    ck_assert_int_eq(u.used, 0);
    ck_assert_int_eq(u.cached + u.free, NBLK);
    wf_kv_pool_free(p);
}

START_TEST(property_random_ops) {
    for (uint64_t seed = 1; seed <= 4; seed++) {
        run_property(true, seed * 0x9e3779b97f4a7c15ull, 0);
        run_property(false, seed * 0x2545f4914f6cdd1dull, 0);
        run_property(true, seed * 0x9e3779b97f4a7c15ull, 6);
        run_property(false, seed * 0x2545f4914f6cdd1dull, 9);
    }
}
END_TEST

static Suite *paged_suite(void) {
    Suite *s = suite_create("kv_paged");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, alloc_free_and_usage);
    tcase_add_test(tc, prefix_hit_and_lru_eviction);
    tcase_add_test(tc, prefix_salt_separates_namespaces);
    tcase_add_test(tc, cow_copies_shared_partial_block);
    tcase_add_test(tc, split_store_layout);
    tcase_add_test(tc, swa_long_sequence_holds_window);
    tcase_add_test(tc, swa_prefix_reuse_needs_window_blocks);
    tcase_add_test(tc, property_random_ops);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(paged_suite)
