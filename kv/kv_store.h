/* KV storage: the memory the engine reads and writes keys and values in, cut into fixed-size
 * blocks. This is the seam between engine/ (which computes K and V) and kv/ (which decides
 * which block holds which tokens: block tables, allocator, prefix cache).
 *
 * Layout, for each layer and for K and V separately:
 *     [block][token within block][kv_head * head_dim]   (dtype F16 or F32)
 * A sequence's token at position p lives in block table[p / block_size], slot p % block_size.
 * A contiguous cache is the special case table[i] = i.
 *
 *     wf_kv_store store;
 *     wf_kv_geometry g = {.n_layers = 30, .n_kv_heads = 3, .head_dim = 64,
 *                         .block_size = 16, .dtype = WF_KV_DTYPE_F16};
 *     if (wf_kv_store_init(&store, &g, 256u << 20) != WF_OK) ...   // 256 MiB budget
 *     uint16_t *k = wf_kv_store_k(&store, layer, block);             // one block's keys
 *     wf_kv_store_free(&store);
 *
 * Not thread-safe by itself: the scheduler guarantees no two writers touch one block. */
#ifndef WF_KV_KV_STORE_H
#define WF_KV_KV_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

typedef enum wf_kv_dtype {
    WF_KV_DTYPE_F16 = 0, /* what llama.cpp uses by default; halves memory */
    WF_KV_DTYPE_F32 = 1,
} wf_kv_dtype;

typedef struct wf_kv_geometry {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int block_size; /* tokens per block */
    wf_kv_dtype dtype;
} wf_kv_geometry;

typedef struct wf_kv_store {
    wf_kv_geometry geometry;
    int n_blocks;
    size_t elem_bytes;       /* 2 for F16, 4 for F32 */
    size_t row_elems;        /* n_kv_heads * head_dim */
    size_t block_bytes;      /* one block of one layer's K (or V) */
    unsigned char *k, *v;    /* base of [layer][block][token][row] */
    int borrowed;            /* wf_kv_store_init_in: the memory is the caller's */
} wf_kv_store;

/* Allocates as many blocks as fit in budget_bytes (K and V of every layer counted).
 * WF_EINVAL for a bad geometry or a budget below one block, WF_ENOMEM if allocation fails. */
wf_status wf_kv_store_init(wf_kv_store *store, const wf_kv_geometry *geometry,
                           size_t budget_bytes);
/* Lays the store out in caller memory (e.g. a UCX-registered buffer that peers put into): as
 * many blocks as fit in bytes, K slab at mem, V slab right after it. mem must be 64-byte aligned
 * and outlive the store. Two processes calling it with the same geometry and byte count get the
 * same layout, so one can address the other's blocks (wf_kv_store_offset). WF_EINVAL as init. */
wf_status wf_kv_store_init_in(wf_kv_store *store, const wf_kv_geometry *geometry, void *mem,
                              size_t bytes);
/* The layout of a store of this geometry over `bytes` (n_blocks, block_bytes) without memory:
 * k and v are NULL. Used to address a peer's blocks. */
wf_status wf_kv_store_layout(wf_kv_store *store, const wf_kv_geometry *geometry, size_t bytes);
/* Byte offset of (layer, block)'s K (v = 0) or V (v = 1) from the start of an _init_in store. */
size_t wf_kv_store_offset(const wf_kv_store *store, int layer, int block, int v);
void wf_kv_store_free(wf_kv_store *store);

/* Bytes one block costs across all layers, K and V. */
size_t wf_kv_geometry_block_bytes(const wf_kv_geometry *geometry);

static inline void *wf_kv_store_k(const wf_kv_store *s, int layer, int block) {
    return s->k + ((size_t)layer * (size_t)s->n_blocks + (size_t)block) * s->block_bytes;
}
static inline void *wf_kv_store_v(const wf_kv_store *s, int layer, int block) {
    return s->v + ((size_t)layer * (size_t)s->n_blocks + (size_t)block) * s->block_bytes;
}

#endif
