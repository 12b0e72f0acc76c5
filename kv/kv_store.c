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

static wf_status layout(wf_kv_store *store, const wf_kv_geometry *g, size_t budget_bytes);

wf_status wf_kv_store_layout(wf_kv_store *store, const wf_kv_geometry *g, size_t budget_bytes) {
    memset(store, 0, sizeof *store);
    if (g->swa_layers) return WF_EINVAL; /* peers address unsplit stores only */
    return layout(store, g, budget_bytes);
}

static wf_status layout(wf_kv_store *store, const wf_kv_geometry *g, size_t budget_bytes) {
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

static size_t slab_bytes(const wf_kv_store *s) {
    int n_swa = __builtin_popcountll(s->geometry.swa_layers);
    return s->block_bytes * ((size_t)(s->geometry.n_layers - n_swa) * (size_t)s->n_blocks +
                             (size_t)n_swa * (size_t)s->n_swa_blocks);
}

size_t wf_kv_store_bytes(const wf_kv_store *s) { return 2 * slab_bytes(s); }

size_t wf_kv_store_offset(const wf_kv_store *s, int layer, int block, int v) {
    return (v ? slab_bytes(s) : 0) + wf_kv_store_slab_off(s, layer, block);
}

static wf_status place_in(wf_kv_store *store, void *mem) {
    if (!mem || ((uintptr_t)mem & 63)) {
        memset(store, 0, sizeof *store);
        return WF_EINVAL;
    }
    size_t slab = slab_bytes(store);
    store->k = mem;
    store->v = (unsigned char *)mem + slab;
    store->borrowed = 1;
    return WF_OK;
}

wf_status wf_kv_store_init_in(wf_kv_store *store, const wf_kv_geometry *g, void *mem, size_t bytes) {
    wf_status st = wf_kv_store_layout(store, g, bytes);
    return st == WF_OK ? place_in(store, mem) : st;
}

static wf_status alloc_slabs(wf_kv_store *store) {
    size_t slab = slab_bytes(store);
    /* 64-byte alignment so AVX-512 loads of a row never split a cache line needlessly. */
    store->k = aligned_alloc(64, (slab + 63) & ~(size_t)63);
    store->v = aligned_alloc(64, (slab + 63) & ~(size_t)63);
    if (!store->k || !store->v) {
        wf_kv_store_free(store);
        return WF_ENOMEM;
    }
    return WF_OK;
}

/* The split layout of budget_bytes (no memory): local blocks capped at the unsplit count. */
static wf_status layout_swa(wf_kv_store *store, const wf_kv_geometry *g, size_t budget_bytes,
                            int swa_blocks) {
    memset(store, 0, sizeof *store);
    if (!g->swa_layers) return layout(store, g, budget_bytes);
    int n_swa = __builtin_popcountll(g->swa_layers);
    if (g->n_layers <= 0 || (g->n_layers < 64 && (g->swa_layers >> g->n_layers) != 0) ||
        n_swa >= g->n_layers || g->swa_window <= 0 || swa_blocks <= 0)
        return WF_EINVAL;
    /* The unsplit layout of this budget: its block count caps the local blocks. */
    wf_kv_geometry flat = *g;
    flat.swa_layers = 0;
    wf_status st = layout(store, &flat, budget_bytes);
    if (st != WF_OK) return st;
    int cap = store->n_blocks;
    if (swa_blocks > cap) swa_blocks = cap;
    size_t per_layer_block = 2 * store->block_bytes;
    size_t swa_bytes = per_layer_block * (size_t)n_swa * (size_t)swa_blocks;
    size_t global = (budget_bytes - swa_bytes) / (per_layer_block * (size_t)(g->n_layers - n_swa));
    if (global == 0) {
        memset(store, 0, sizeof *store);
        return WF_EINVAL;
    }
    if (global > INT32_MAX) global = INT32_MAX;
    store->geometry = *g;
    store->n_blocks = (int)global;
    store->n_swa_blocks = swa_blocks;
    store->swa_base = store->block_bytes * (size_t)(g->n_layers - n_swa) * global;
    return WF_OK;
}

wf_status wf_kv_store_init_swa(wf_kv_store *store, const wf_kv_geometry *g, size_t budget_bytes,
                               int swa_blocks) {
    wf_status st = layout_swa(store, g, budget_bytes, swa_blocks);
    return st == WF_OK ? alloc_slabs(store) : st;
}

wf_status wf_kv_store_init_swa_in(wf_kv_store *store, const wf_kv_geometry *g, void *mem,
                                  size_t bytes, int swa_blocks) {
    wf_status st = layout_swa(store, g, bytes, swa_blocks);
    return st == WF_OK ? place_in(store, mem) : st;
}

int wf_kv_swa_blocks_wanted(const wf_kv_geometry *g, int max_running, int max_batch_tokens) {
    if (!g->swa_layers || g->block_size <= 0 || g->swa_window <= 0) return 0;
    long bs = g->block_size;
    long n = (long)max_running * ((g->swa_window + bs - 1) / bs + 2) + (max_batch_tokens + bs - 1) / bs;
    return n > INT32_MAX ? INT32_MAX : n < 1 ? 1 : (int)n;
}

wf_status wf_kv_store_init(wf_kv_store *store, const wf_kv_geometry *g, size_t budget_bytes) {
    return wf_kv_store_init_swa(store, g, budget_bytes, INT32_MAX);
}

void wf_kv_store_free(wf_kv_store *store) {
    if (!store->borrowed) {
        free(store->k);
        free(store->v);
    }
    memset(store, 0, sizeof *store);
}
