/* Paged KV bookkeeping: which block of a wf_kv_store holds which tokens. A reference-counted
 * block pool (O(1) alloc/free from a free list), per-sequence block tables, a prefix cache of
 * FULL blocks keyed by a hash chain (hash(parent_hash, block tokens)) with LRU eviction of
 * unreferenced cached blocks, and copy-on-write sharing between sequences (n > 1 choices).
 * The pool only counts blocks; it never touches K/V memory except through
 * wf_kv_store_copy_block when a shared partial block must be copied before a write.
 *
 *     wf_kv_pool *pool;
 *     wf_kv_pool_new(store.n_blocks, store.geometry.block_size, true, &pool);
 *     wf_kv_seq seq;
 *     wf_kv_seq_init(&seq, max_blocks_per_seq);
 *     int cached = wf_kv_seq_match_prefix(pool, &seq, prompt, n_prompt);  // reuse full blocks
 *     if (wf_kv_seq_reserve(pool, &seq, n_prompt, &store) == WF_EFULL) ...  // preempt someone
 *     // ... the engine writes K/V of positions [cached, n_prompt) into seq.blocks ...
 *     wf_kv_seq_commit(pool, &seq, prompt, n_prompt);   // publish newly full blocks
 *     wf_kv_seq fork;  wf_kv_seq_init(&fork, max_blocks_per_seq);
 *     wf_kv_seq_fork(pool, &seq, &fork);                 // n > 1: share every block
 *     wf_kv_seq_release(pool, &seq); wf_kv_seq_free(&seq);
 *     wf_kv_pool_free(pool);
 *
 * Block states: FREE (ref 0, on the free list), CACHED (ref 0, holds a published prefix block,
 * on the LRU list: reusable by a prefix hit, evicted oldest-first when the free list is empty),
 * USED (ref > 0). used + cached + free == n_blocks at all times.
 *
 * Sliding-window layers (a pool made by wf_kv_pool_new_swa, for a store split by layer kind,
 * kv/kv_store.h): the pool holds a second, smaller pool for the local layers and every
 * sequence a second, position-indexed table for them. The sequence functions keep both:
 * reserve takes blocks of both kinds (all or nothing), commit releases the local blocks that
 * lie entirely behind the window of the next position (their table entries become -1), so a
 * long sequence holds O(window) local blocks and O(context) global ones. Prefix caching covers
 * both kinds under one hash chain: a prefix is reused only as far as its global blocks AND the
 * local blocks of the window before its end are still cached (a prefix whose local blocks were
 * evicted is matched shorter, never wrongly).
 *
 *     wf_kv_pool_new_swa(store.n_blocks, store.n_swa_blocks, 16, 512, true, &pool);
 *     if (!wf_kv_seq_fits(pool, &seq, n_total)) ...     // both kinds have room
 *     // tasks carry seq.blocks and seq.swa_blocks
 *
 * Not thread-safe: one owner (the scheduler thread, or the simulator). */
#ifndef WF_KV_PAGED_H
#define WF_KV_PAGED_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_store.h"
#include "proto/base/status.h"

typedef struct wf_kv_pool wf_kv_pool;

typedef struct wf_kv_pool_usage {
    int n_blocks, used, cached, free;   /* used + cached + free == n_blocks */
    uint64_t prefix_queries;            /* prompt tokens looked up */
    uint64_t prefix_hits;               /* of those, served from the cache */
    uint64_t evictions;                 /* cached blocks reclaimed for new data */
    uint64_t cow_copies;                /* partial blocks copied before a divergent write */
    /* The sliding-window pool (all 0 when the pool is not split). */
    int swa_n_blocks, swa_used, swa_cached, swa_free;
    uint64_t swa_released;              /* local blocks released behind the window */
} wf_kv_pool_usage;

/* A sequence's block table: blocks[i] holds positions [i*block_size, (i+1)*block_size). */
typedef struct wf_kv_seq {
    int32_t *blocks;
    int n_blocks, max_blocks;
    int n_tokens;          /* positions whose K/V is written (committed) */
    int n_hashed;          /* leading full blocks whose chain hash is known */
    uint64_t last_hash;    /* chain hash of block n_hashed-1 (salt when n_hashed == 0) */
    /* Prefix-cache namespace: the chain's root hash. Sequences with different salts never
     * share cached blocks (a virtual model's adapters change K/V); equal salts do. 0 default. */
    uint64_t salt;
    /* Split pools only: the local layers' table, position-indexed like blocks; entries below
     * swa_lo were released (-1), entries [swa_lo, n_blocks) are held. */
    int32_t *swa_blocks;
    int swa_lo;
} wf_kv_seq;

/* n_blocks/block_size > 0. prefix_cache false: released blocks go straight to the free list.
 * WF_EINVAL, WF_ENOMEM. */
wf_status wf_kv_pool_new(int n_blocks, int block_size, bool prefix_cache, wf_kv_pool **out);
/* A pool for a store split by layer kind: n_blocks global blocks, n_swa_blocks local blocks,
 * local layers attending to the last `window` positions (llama.cpp's n_swa). WF_EINVAL,
 * WF_ENOMEM. */
wf_status wf_kv_pool_new_swa(int n_blocks, int n_swa_blocks, int block_size, int window,
                             bool prefix_cache, wf_kv_pool **out);
void wf_kv_pool_free(wf_kv_pool *pool);
/* 0 when not split. */
int wf_kv_pool_window(const wf_kv_pool *pool);
int wf_kv_pool_block_size(const wf_kv_pool *pool);
int wf_kv_pool_n_blocks(const wf_kv_pool *pool);
/* Blocks an allocation can obtain right now (free + evictable cached); global blocks of a
 * split pool. */
int wf_kv_pool_available(const wf_kv_pool *pool);
/* Blocks an allocation of both kinds can obtain right now: the smaller of the two pools'
 * available counts (wf_kv_pool_available when not split). */
int wf_kv_pool_available_min(const wf_kv_pool *pool);
/* Whether a sequence of n_tokens could ever run alone in this pool (global blocks for all of
 * it, local blocks for one window). */
bool wf_kv_pool_can_hold(const wf_kv_pool *pool, int n_tokens);
/* Whether a new sequence of n_tokens (a prompt, prefilled chunk by chunk) can start now with
 * `slack` global blocks to spare (and the same share of the local pool): global blocks for all
 * of it, local blocks for its first window (they are recycled as it advances). */
bool wf_kv_pool_can_start(const wf_kv_pool *pool, int n_tokens, int slack);
/* The local table a task of seq carries (wf_artifact's swa_block_table): NULL when the pool
 * is not split. */
static inline const int32_t *wf_kv_seq_swa_table(const wf_kv_pool *pool, const wf_kv_seq *seq);
void wf_kv_pool_get_usage(const wf_kv_pool *pool, wf_kv_pool_usage *out);

/* Low-level block operations (the sequence functions below are built on them). */
/* Takes a free block (evicting the least recently used cached block if needed) with ref 1.
 * WF_EFULL when every block is in use. O(1). */
wf_status wf_kv_pool_alloc(wf_kv_pool *pool, int32_t *block);
void wf_kv_pool_ref(wf_kv_pool *pool, int32_t block);
/* Drops one reference; at 0 the block becomes CACHED (if published) or FREE. O(1). */
void wf_kv_pool_unref(wf_kv_pool *pool, int32_t block);
int wf_kv_pool_refcount(const wf_kv_pool *pool, int32_t block);
/* The same for a block of the sliding-window pool (split pools). */
int wf_kv_pool_swa_refcount(const wf_kv_pool *pool, int32_t block);

/* Chain hash of one full block given its parent's chain hash (0 for the first block). */
uint64_t wf_kv_block_hash(uint64_t parent_hash, const int32_t *tokens, int n_tokens);
/* The cached block holding exactly these block_size tokens after parent_hash, or -1.
 * Does not take a reference. */
int32_t wf_kv_pool_lookup(const wf_kv_pool *pool, uint64_t hash, uint64_t parent_hash,
                          const int32_t *tokens);
/* Tokens of tokens[0..n) that wf_kv_seq_match_prefix on a sequence with this salt would reuse
 * now (whole blocks, leaving at least one token), without taking references: for routers that
 * compare pools (the scheduler's groups, a coordinator's prefill workers). */
int wf_kv_pool_cached_prefix(const wf_kv_pool *pool, uint64_t salt, const int32_t *tokens, int n);
/* Registers a FULL, referenced block under its chain hash. Returns false (and changes nothing)
 * if the cache is off, the block is already published, or another block holds this key. */
bool wf_kv_pool_publish(wf_kv_pool *pool, int32_t block, uint64_t hash, uint64_t parent_hash,
                        const int32_t *tokens);

/* Checks every internal invariant (list membership vs refcounts, counts, hash index).
 * Returns true when consistent; otherwise writes what broke into err. For tests. */
bool wf_kv_pool_check(const wf_kv_pool *pool, char *err, int errlen);

/* Sequences. max_blocks bounds the table (n_ctx / block_size rounded up); allocates once.
 * WF_ENOMEM. */
wf_status wf_kv_seq_init(wf_kv_seq *seq, int max_blocks);
void wf_kv_seq_free(wf_kv_seq *seq);
/* Sets the prefix-cache namespace of an empty sequence (kept across release). */
void wf_kv_seq_set_salt(wf_kv_seq *seq, uint64_t salt);
/* On an empty sequence: references the longest run of cached full blocks that match the
 * start of tokens, leaving at least one token to compute (its logits are needed). Sets
 * n_tokens to the matched length, counts queries/hits, returns the matched length. */
int wf_kv_seq_match_prefix(wf_kv_pool *pool, wf_kv_seq *seq, const int32_t *tokens, int n);
/* Global blocks that wf_kv_seq_reserve(seq, n_total) would take from the pool. */
int wf_kv_seq_blocks_needed(const wf_kv_pool *pool, const wf_kv_seq *seq, int n_total);
/* Whether wf_kv_seq_reserve(seq, n_total) would succeed now (blocks of both kinds). */
bool wf_kv_seq_fits(const wf_kv_pool *pool, const wf_kv_seq *seq, int n_total);
/* The largest n_total that wf_kv_seq_reserve could make writable now (ignoring max_blocks). */
int wf_kv_seq_fit_tokens(const wf_kv_pool *pool, const wf_kv_seq *seq);
/* Local blocks the sequence holds (0 when not split). */
int wf_kv_seq_swa_held(const wf_kv_seq *seq);
/* Makes positions [n_tokens, n_total) writable: appends blocks, and copies a shared partial
 * last block (copy-on-write, through store when not NULL) before the first divergent write.
 * All or nothing: WF_EFULL (nothing changed) when the pool lacks blocks; WF_ERANGE beyond
 * max_blocks. */
wf_status wf_kv_seq_reserve(wf_kv_pool *pool, wf_kv_seq *seq, int n_total, wf_kv_store *store);
/* Marks positions up to n_total written; tokens[0..n_total) are the sequence's tokens. Newly
 * full blocks are published to the prefix cache. */
void wf_kv_seq_commit(wf_kv_pool *pool, wf_kv_seq *seq, const int32_t *tokens, int n_total);
/* dst (empty) shares every block of src (one more reference each). WF_ERANGE if too small. */
wf_status wf_kv_seq_fork(wf_kv_pool *pool, const wf_kv_seq *src, wf_kv_seq *dst);
/* The same for the first n_tokens positions of src only (a multiple of the block size, or
 * src->n_tokens): dst holds them, as if it had written them. */
wf_status wf_kv_seq_fork_prefix(wf_kv_pool *pool, const wf_kv_seq *src, int n_tokens,
                                wf_kv_seq *dst);
/* Drops every block reference; the sequence is empty again (reusable). */
void wf_kv_seq_release(wf_kv_pool *pool, wf_kv_seq *seq);

/* Copies K and V of block src into block dst: of the global layers (every layer when not
 * split), or with swa, of the sliding-window layers. */
void wf_kv_store_copy_block(wf_kv_store *store, int32_t dst, int32_t src);
void wf_kv_store_copy_swa_block(wf_kv_store *store, int32_t dst, int32_t src);

static inline const int32_t *wf_kv_seq_swa_table(const wf_kv_pool *pool, const wf_kv_seq *seq) {
    return wf_kv_pool_window(pool) > 0 ? seq->swa_blocks : NULL;
}

#endif
