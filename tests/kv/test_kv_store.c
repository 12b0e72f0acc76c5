/* Tests kv/kv_store.c: a store laid out in caller memory (wf_kv_store_init_in, how a worker puts
 * its paged KV into its UCX-registered buffer) has the same layout as an allocated one; a peer
 * that knows only the byte count (wf_kv_store_layout) computes offsets that address exactly the
 * blocks the owner reads and writes; the caller's memory is never freed by the store. */
#include "check_main.h"
#include "kv/kv_store.h"

#include <stdlib.h>
#include <string.h>

static const wf_kv_geometry G = {.n_layers = 3, .n_kv_heads = 2, .head_dim = 8, .block_size = 4,
                                 .dtype = WF_KV_DTYPE_F16};

START_TEST(init_in_matches_init_and_layout) {
    size_t bytes = 10 * wf_kv_geometry_block_bytes(&G) + 100; /* 10 blocks and change */
    wf_kv_store a, b, far;
    ck_assert_int_eq(wf_kv_store_init(&a, &G, bytes), WF_OK);
    unsigned char *mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    ck_assert_ptr_nonnull(mem);
    ck_assert_int_eq(wf_kv_store_init_in(&b, &G, mem, bytes), WF_OK);
    ck_assert_int_eq(wf_kv_store_layout(&far, &G, bytes), WF_OK);
    ck_assert_int_eq(a.n_blocks, 10);
    ck_assert_int_eq(b.n_blocks, a.n_blocks);
    ck_assert_int_eq(far.n_blocks, a.n_blocks);
    ck_assert_uint_eq(b.block_bytes, a.block_bytes);
    ck_assert_ptr_null(far.k);
    ck_assert_ptr_eq(b.k, mem);
    /* Every (layer, block, K/V) the owner addresses is where the peer's offset points, and the
     * regions tile the slabs without overlap. */
    unsigned char *seen = calloc(bytes, 1);
    for (int l = 0; l < G.n_layers; l++)
        for (int blk = 0; blk < b.n_blocks; blk++)
            for (int v = 0; v < 2; v++) {
                unsigned char *p = v ? wf_kv_store_v(&b, l, blk) : wf_kv_store_k(&b, l, blk);
                size_t off = wf_kv_store_offset(&far, l, blk, v);
                ck_assert_ptr_eq(p, mem + off);
                ck_assert_uint_le(off + far.block_bytes, bytes);
                for (size_t i = 0; i < far.block_bytes; i++) {
                    ck_assert_int_eq(seen[off + i], 0);
                    seen[off + i] = 1;
                }
            }
    free(seen);
    wf_kv_store_free(&b); /* borrowed: mem stays the caller's */
    memset(mem, 0xab, bytes);
    free(mem);
    wf_kv_store_free(&a);
}
END_TEST

START_TEST(init_in_rejects) {
    wf_kv_store s;
    unsigned char *mem = aligned_alloc(64, 1 << 16);
    ck_assert_int_eq(wf_kv_store_init_in(&s, &G, mem + 8, 1 << 15), WF_EINVAL); /* misaligned */
    ck_assert_int_eq(wf_kv_store_init_in(&s, &G, NULL, 1 << 15), WF_EINVAL);
    ck_assert_int_eq(wf_kv_store_init_in(&s, &G, mem, 16), WF_EINVAL); /* below one block */
    wf_kv_geometry bad = G;
    bad.head_dim = 0;
    ck_assert_int_eq(wf_kv_store_layout(&s, &bad, 1 << 15), WF_EINVAL);
    free(mem);
}
END_TEST

/* A worker process's split store (wf_kv_store_init_swa_in) has the layout the allocated split
 * store of the same budget has: same block counts and offsets, every (layer, block, K/V) of both
 * kinds inside the caller's bytes and none overlapping; the local-block count wanted for
 * --max-running windows and one batch of chunks. */
START_TEST(init_swa_in_matches_init_swa) {
    wf_kv_geometry g = G;
    g.n_layers = 6;
    g.swa_layers = 0x1b; /* layers 0, 1, 3, 4 local */
    g.swa_window = 10;
    size_t bytes = 40 * wf_kv_geometry_block_bytes(&g) + 100;
    wf_kv_store a, b;
    ck_assert_int_eq(wf_kv_store_init_swa(&a, &g, bytes, 12), WF_OK);
    unsigned char *mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    ck_assert_ptr_nonnull(mem);
    ck_assert_int_eq(wf_kv_store_init_swa_in(&b, &g, mem, bytes, 12), WF_OK);
    ck_assert_int_eq(b.n_swa_blocks, 12);
    ck_assert_int_eq(b.n_blocks, a.n_blocks);
    ck_assert_int_gt(b.n_blocks, 40); /* the local layers' leftover budget went to global blocks */
    ck_assert_uint_eq(b.swa_base, a.swa_base);
    ck_assert_ptr_eq(b.k, mem);
    ck_assert_uint_le(wf_kv_store_bytes(&b), bytes);
    unsigned char *seen = calloc(bytes, 1);
    for (int l = 0; l < g.n_layers; l++) {
        int nb = wf_kv_store_layer_is_swa(&b, l) ? b.n_swa_blocks : b.n_blocks;
        for (int blk = 0; blk < nb; blk++)
            for (int v = 0; v < 2; v++) {
                unsigned char *p = v ? wf_kv_store_v(&b, l, blk) : wf_kv_store_k(&b, l, blk);
                unsigned char *q = v ? wf_kv_store_v(&a, l, blk) : wf_kv_store_k(&a, l, blk);
                size_t off = (size_t)(p - mem);
                ck_assert_uint_eq(off - (v ? wf_kv_store_bytes(&b) / 2 : 0),
                                  (size_t)(q - (v ? a.v : a.k)));
                ck_assert_uint_le(off + b.block_bytes, bytes);
                for (size_t i = 0; i < b.block_bytes; i++) {
                    ck_assert_int_eq(seen[off + i], 0);
                    seen[off + i] = 1;
                }
            }
    }
    free(seen);
    wf_kv_store_free(&b);
    wf_kv_store_free(&a);
    /* misaligned memory, a bad mask */
    ck_assert_int_eq(wf_kv_store_init_swa_in(&b, &g, mem + 8, bytes, 12), WF_EINVAL);
    wf_kv_geometry bad = g;
    bad.swa_layers = 0x3f;
    ck_assert_int_eq(wf_kv_store_init_swa_in(&b, &bad, mem, bytes, 12), WF_EINVAL);
    free(mem);
    /* 4 running: 4 x (ceil(10 / 4) + 2) + ceil(9 / 4) = 23; none without local layers */
    ck_assert_int_eq(wf_kv_swa_blocks_wanted(&g, 4, 9), 23);
    ck_assert_int_eq(wf_kv_swa_blocks_wanted(&G, 4, 9), 0);
}
END_TEST

static Suite *kv_store_suite(void) {
    Suite *s = suite_create("kv_store");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, init_in_matches_init_and_layout);
    tcase_add_test(tc, init_in_rejects);
    tcase_add_test(tc, init_swa_in_matches_init_swa);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(kv_store_suite)
