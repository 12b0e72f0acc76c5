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
 * Sliding-window layers (geometry.swa_layers != 0: Gemma 3's local layers) get their own blocks:
 * the store holds n_blocks blocks of the other (global) layers and n_swa_blocks blocks of the
 * local layers, each kind addressed by its own block table (kv/paged.h keeps a local table
 * whose blocks behind the window go back to the pool), so memory for local layers follows the
 * window rather than the context. wf_kv_store_k/v take the model's layer index either way.
 *
 *     g.swa_layers = mask_of_local_layers; g.swa_window = 512;
 *     wf_kv_store_init_swa(&store, &g, budget, 600);   // 600 local blocks, the rest global
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
    /* Layers (bit l: layer l, l < 64) that attend to the last swa_window positions only and
     * keep their own blocks; 0: every layer shares one block table (the layout above). */
    uint64_t swa_layers;
    int swa_window;
} wf_kv_geometry;

typedef struct wf_kv_store {
    wf_kv_geometry geometry;
    int n_blocks;            /* blocks of the global layers (all layers when not split) */
    int n_swa_blocks;        /* blocks of the sliding-window layers (0 when not split) */
    size_t swa_base;         /* byte offset of the sliding-window region in each slab */
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
/* A store split by layer kind (geometry.swa_layers != 0): swa_blocks blocks of the local
 * layers (capped at what an unsplit store of this budget would give them, so a split never
 * holds fewer local blocks than the shared layout), the rest of the budget to global blocks.
 * wf_kv_store_init with swa_layers set splits at that cap. WF_EINVAL for a bad mask (a layer
 * >= 64 or >= n_layers, every layer local) or a budget below one block of each kind. */
wf_status wf_kv_store_init_swa(wf_kv_store *store, const wf_kv_geometry *geometry,
                               size_t budget_bytes, int swa_blocks);
/* wf_kv_store_init_swa laid out in caller memory (as wf_kv_store_init_in): a worker process's
 * split store in its registered buffer. Peers cannot address it (wf_kv_store_layout refuses
 * split geometries), so prefill/decode transfers need unsplit stores. */
wf_status wf_kv_store_init_swa_in(wf_kv_store *store, const wf_kv_geometry *geometry, void *mem,
                                  size_t bytes, int swa_blocks);
/* The local blocks weftd gives a split store: every running sequence's window (plus the block
 * being written and a partial one) and one batch of prompt chunks, so that sequences shorter
 * than the window are never bound by them below max_running. 0 when geometry is not split. The
 * in-process store and worker processes size theirs alike. */
int wf_kv_swa_blocks_wanted(const wf_kv_geometry *geometry, int max_running, int max_batch_tokens);
/* Whether layer l keeps its blocks in the sliding-window region. */
static inline int wf_kv_store_layer_is_swa(const wf_kv_store *s, int layer) {
    return layer < 64 && (int)((s->geometry.swa_layers >> layer) & 1u);
}
/* Total bytes of K and V memory (both kinds). */
size_t wf_kv_store_bytes(const wf_kv_store *store);
/* Lays the store out in caller memory, not split (geometry.swa_layers must be 0) (e.g. a UCX-registered buffer that peers put into): as
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

/* Byte offset of (layer, block) inside the K (or V) slab. A local layer's block indexes the
 * sliding-window region; a global layer's the global one (layers of each kind in order). */
static inline size_t wf_kv_store_slab_off(const wf_kv_store *s, int layer, int block) {
    uint64_t m = s->geometry.swa_layers;
    if (!m) return ((size_t)layer * (size_t)s->n_blocks + (size_t)block) * s->block_bytes;
    uint64_t below = layer >= 64 ? m : m & ((UINT64_C(1) << layer) - 1);
    int n_swa_below = __builtin_popcountll(below);
    if (wf_kv_store_layer_is_swa(s, layer))
        return s->swa_base +
               ((size_t)n_swa_below * (size_t)s->n_swa_blocks + (size_t)block) * s->block_bytes;
    return ((size_t)(layer - n_swa_below) * (size_t)s->n_blocks + (size_t)block) * s->block_bytes;
}
static inline void *wf_kv_store_k(const wf_kv_store *s, int layer, int block) {
    return s->k + wf_kv_store_slab_off(s, layer, block);
}
static inline void *wf_kv_store_v(const wf_kv_store *s, int layer, int block) {
    return s->v + wf_kv_store_slab_off(s, layer, block);
}

#endif
