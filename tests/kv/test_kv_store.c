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

static Suite *kv_store_suite(void) {
    Suite *s = suite_create("kv_store");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, init_in_matches_init_and_layout);
    tcase_add_test(tc, init_in_rejects);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(kv_store_suite)
