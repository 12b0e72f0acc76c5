/* KV storage allocation: one aligned slab for K and one for V, sized from the memory budget. */
#include "kv/kv_store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t wf_kv_geometry_block_bytes(const wf_kv_geometry *g) {
    size_t elem = g->dtype == WF_KV_DTYPE_F32 ? 4 : 2;
    return 2 * (size_t)g->n_layers * (size_t)g->block_size * (size_t)g->n_kv_heads *
           (size_t)g->head_dim * elem;
}

wf_status wf_kv_store_layout(wf_kv_store *store, const wf_kv_geometry *g, size_t budget_bytes) {
    memset(store, 0, sizeof *store);
    if (g->n_layers <= 0 || g->n_kv_heads <= 0 || g->head_dim <= 0 || g->block_size <= 0 ||
        (g->dtype != WF_KV_DTYPE_F16 && g->dtype != WF_KV_DTYPE_F32))
        return WF_EINVAL;
    size_t per_block = wf_kv_geometry_block_bytes(g);
    size_t n_blocks = budget_bytes / per_block;
    if (n_blocks == 0) return WF_EINVAL;
    if (n_blocks > INT32_MAX) n_blocks = INT32_MAX;
    store->geometry = *g;
    store->n_blocks = (int)n_blocks;
    store->elem_bytes = g->dtype == WF_KV_DTYPE_F32 ? 4 : 2;
    store->row_elems = (size_t)g->n_kv_heads * (size_t)g->head_dim;
    store->block_bytes = (size_t)g->block_size * store->row_elems * store->elem_bytes;
    return WF_OK;
}

size_t wf_kv_store_offset(const wf_kv_store *s, int layer, int block, int v) {
    size_t slab = s->block_bytes * (size_t)s->geometry.n_layers * (size_t)s->n_blocks;
    return (v ? slab : 0) + ((size_t)layer * (size_t)s->n_blocks + (size_t)block) * s->block_bytes;
}

wf_status wf_kv_store_init_in(wf_kv_store *store, const wf_kv_geometry *g, void *mem, size_t bytes) {
    wf_status st = wf_kv_store_layout(store, g, bytes);
    if (st != WF_OK) return st;
    if (!mem || ((uintptr_t)mem & 63)) {
        memset(store, 0, sizeof *store);
        return WF_EINVAL;
    }
    size_t slab = store->block_bytes * (size_t)g->n_layers * (size_t)store->n_blocks;
    store->k = mem;
    store->v = (unsigned char *)mem + slab;
    store->borrowed = 1;
    return WF_OK;
}

wf_status wf_kv_store_init(wf_kv_store *store, const wf_kv_geometry *g, size_t budget_bytes) {
    wf_status st = wf_kv_store_layout(store, g, budget_bytes);
    if (st != WF_OK) return st;
    size_t n_blocks = (size_t)store->n_blocks;
    size_t slab = store->block_bytes * (size_t)g->n_layers * n_blocks;
    /* 64-byte alignment so AVX-512 loads of a row never split a cache line needlessly. */
    store->k = aligned_alloc(64, (slab + 63) & ~(size_t)63);
    store->v = aligned_alloc(64, (slab + 63) & ~(size_t)63);
    if (!store->k || !store->v) {
        wf_kv_store_free(store);
        return WF_ENOMEM;
    }
    return WF_OK;
}

void wf_kv_store_free(wf_kv_store *store) {
    if (!store->borrowed) {
        free(store->k);
        free(store->v);
    }
    memset(store, 0, sizeof *store);
}
