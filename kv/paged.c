/* Reference-counted block pool with a hash-chained prefix cache and LRU eviction, and the
 * per-sequence block tables built on it (copy-on-write for shared partial blocks). */
#include "kv/paged.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCK_FREE = 0, BLOCK_CACHED = 1, BLOCK_USED = 2 };

typedef struct block_meta {
    int32_t ref;
    int32_t state;
    int32_t lru_prev, lru_next; /* CACHED blocks only */
    int32_t hnext;              /* next block in the same hash bucket */
    bool published;
    uint64_t hash, parent_hash;
} block_meta;

struct wf_kv_pool {
    int n_blocks, block_size;
    bool prefix_cache;
    block_meta *meta;
    int32_t *free_stack; /* FREE blocks; top at n_free - 1 */
    int n_free, n_cached, n_used;
    int32_t lru_head, lru_tail; /* head: least recently released */
    int32_t *buckets;           /* hash index: bucket -> first block, -1 */
    uint64_t bucket_mask;
    int32_t *tokens;            /* [block][block_size]: the tokens of published blocks */
    uint64_t prefix_queries, prefix_hits, evictions, cow_copies;
    wf_kv_pool *swa;            /* the local layers' blocks (split pools), or NULL */
    int window;                 /* positions a local layer attends to */
    uint64_t swa_released;
};

wf_status wf_kv_pool_new(int n_blocks, int block_size, bool prefix_cache, wf_kv_pool **out) {
    *out = NULL;
    if (n_blocks <= 0 || block_size <= 0) return WF_EINVAL;
    wf_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return WF_ENOMEM;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->prefix_cache = prefix_cache;
    size_t n_buckets = 16;
    while (n_buckets < (size_t)n_blocks * 2) n_buckets <<= 1;
    p->bucket_mask = n_buckets - 1;
    p->meta = calloc((size_t)n_blocks, sizeof *p->meta);
    p->free_stack = malloc((size_t)n_blocks * sizeof *p->free_stack);
    if (!p->meta || !p->free_stack) goto fail_alloc;
    if (prefix_cache) {
        p->buckets = malloc(n_buckets * sizeof *p->buckets);
        p->tokens = malloc((size_t)n_blocks * (size_t)block_size * sizeof *p->tokens);
        if (!p->buckets || !p->tokens) goto fail_alloc;
        for (size_t i = 0; i < n_buckets; i++) p->buckets[i] = -1;
    }
    /* Pushed high to low so that allocation hands out 0, 1, 2... (easier to read in logs). */
    for (int i = 0; i < n_blocks; i++) {
        p->meta[i].lru_prev = p->meta[i].lru_next = p->meta[i].hnext = -1;
        p->free_stack[i] = n_blocks - 1 - i;
    }
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    *out = p;
    return WF_OK;
fail_alloc:
    wf_kv_pool_free(p);
    return WF_ENOMEM;
}

wf_status wf_kv_pool_new_swa(int n_blocks, int n_swa_blocks, int block_size, int window,
                             bool prefix_cache, wf_kv_pool **out) {
    *out = NULL;
    if (window <= 0 || n_swa_blocks <= 0) return WF_EINVAL;
    wf_kv_pool *p;
    wf_status st = wf_kv_pool_new(n_blocks, block_size, prefix_cache, &p);
    if (st != WF_OK) return st;
    st = wf_kv_pool_new(n_swa_blocks, block_size, prefix_cache, &p->swa);
    if (st != WF_OK) {
        wf_kv_pool_free(p);
        return st;
    }
    p->window = window;
    *out = p;
    return WF_OK;
}

int wf_kv_pool_window(const wf_kv_pool *p) { return p->window; }

void wf_kv_pool_free(wf_kv_pool *p) {
    if (!p) return;
    wf_kv_pool_free(p->swa);
    free(p->meta);
    free(p->free_stack);
    free(p->buckets);
    free(p->tokens);
    free(p);
}

int wf_kv_pool_block_size(const wf_kv_pool *p) { return p->block_size; }
int wf_kv_pool_n_blocks(const wf_kv_pool *p) { return p->n_blocks; }
int wf_kv_pool_available(const wf_kv_pool *p) { return p->n_free + p->n_cached; }
int wf_kv_pool_refcount(const wf_kv_pool *p, int32_t block) { return p->meta[block].ref; }
int wf_kv_pool_swa_refcount(const wf_kv_pool *p, int32_t block) {
    return p->swa->meta[block].ref;
}

void wf_kv_pool_get_usage(const wf_kv_pool *p, wf_kv_pool_usage *out) {
    out->n_blocks = p->n_blocks;
    out->used = p->n_used;
    out->cached = p->n_cached;
    out->free = p->n_free;
    out->prefix_queries = p->prefix_queries;
    out->prefix_hits = p->prefix_hits;
    out->evictions = p->evictions + (p->swa ? p->swa->evictions : 0);
    out->cow_copies = p->cow_copies + (p->swa ? p->swa->cow_copies : 0);
    out->swa_n_blocks = p->swa ? p->swa->n_blocks : 0;
    out->swa_used = p->swa ? p->swa->n_used : 0;
    out->swa_cached = p->swa ? p->swa->n_cached : 0;
    out->swa_free = p->swa ? p->swa->n_free : 0;
    out->swa_released = p->swa_released;
}

static void lru_remove(wf_kv_pool *p, int32_t b) {
    block_meta *m = &p->meta[b];
    if (m->lru_prev >= 0) p->meta[m->lru_prev].lru_next = m->lru_next;
    else p->lru_head = m->lru_next;
    if (m->lru_next >= 0) p->meta[m->lru_next].lru_prev = m->lru_prev;
    else p->lru_tail = m->lru_prev;
    m->lru_prev = m->lru_next = -1;
    p->n_cached--;
}

static void lru_push_tail(wf_kv_pool *p, int32_t b) {
    block_meta *m = &p->meta[b];
    m->lru_prev = p->lru_tail;
    m->lru_next = -1;
    if (p->lru_tail >= 0) p->meta[p->lru_tail].lru_next = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

static void index_remove(wf_kv_pool *p, int32_t b) {
    block_meta *m = &p->meta[b];
    int32_t *link = &p->buckets[m->hash & p->bucket_mask];
    while (*link != b) {
        if (*link < 0) abort(); /* a published block must be in its bucket */
        link = &p->meta[*link].hnext;
    }
    *link = m->hnext;
    m->hnext = -1;
    m->published = false;
}

wf_status wf_kv_pool_alloc(wf_kv_pool *p, int32_t *block) {
    int32_t b;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        lru_remove(p, b);
        index_remove(p, b);
        p->evictions++;
    } else {
        return WF_EFULL;
    }
    p->meta[b].ref = 1;
    p->meta[b].state = BLOCK_USED;
    p->n_used++;
    *block = b;
    return WF_OK;
}

void wf_kv_pool_ref(wf_kv_pool *p, int32_t b) {
    block_meta *m = &p->meta[b];
    if (m->state == BLOCK_FREE) abort(); /* referencing a free block: a use-after-free */
    if (m->state == BLOCK_CACHED) {
        lru_remove(p, b);
        m->state = BLOCK_USED;
        p->n_used++;
    }
    m->ref++;
}

void wf_kv_pool_unref(wf_kv_pool *p, int32_t b) {
    block_meta *m = &p->meta[b];
    if (m->state != BLOCK_USED || m->ref <= 0) abort(); /* double free */
    if (--m->ref > 0) return;
    p->n_used--;
    if (m->published) {
        m->state = BLOCK_CACHED;
        lru_push_tail(p, b);
    } else {
        m->state = BLOCK_FREE;
        p->free_stack[p->n_free++] = b;
    }
}

uint64_t wf_kv_block_hash(uint64_t parent_hash, const int32_t *tokens, int n_tokens) {
    /* splitmix64 finaliser over (state ^ token): cheap, well mixed; keys are verified against
     * the stored tokens and parent hash, so a collision can never return wrong K/V. */
    uint64_t h = parent_hash ^ 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n_tokens; i++) {
        h ^= (uint64_t)(uint32_t)tokens[i] + 0x632be59bd9b4e019ull;
        h ^= h >> 30;
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 27;
        h *= 0x94d049bb133111ebull;
        h ^= h >> 31;
    }
    return h;
}

int32_t wf_kv_pool_lookup(const wf_kv_pool *p, uint64_t hash, uint64_t parent_hash,
                          const int32_t *tokens) {
    if (!p->prefix_cache) return -1;
    for (int32_t b = p->buckets[hash & p->bucket_mask]; b >= 0; b = p->meta[b].hnext) {
        const block_meta *m = &p->meta[b];
        if (m->hash == hash && m->parent_hash == parent_hash &&
            memcmp(p->tokens + (size_t)b * (size_t)p->block_size, tokens,
                   (size_t)p->block_size * sizeof *tokens) == 0)
            return b;
    }
    return -1;
}

bool wf_kv_pool_publish(wf_kv_pool *p, int32_t b, uint64_t hash, uint64_t parent_hash,
                        const int32_t *tokens) {
    if (!p->prefix_cache) return false;
    block_meta *m = &p->meta[b];
    if (m->published || m->state != BLOCK_USED) return false;
    if (wf_kv_pool_lookup(p, hash, parent_hash, tokens) >= 0) return false;
    m->hash = hash;
    m->parent_hash = parent_hash;
    m->published = true;
    memcpy(p->tokens + (size_t)b * (size_t)p->block_size, tokens,
           (size_t)p->block_size * sizeof *tokens);
    int32_t *head = &p->buckets[hash & p->bucket_mask];
    m->hnext = *head;
    *head = b;
    return true;
}

static bool pool_check(const wf_kv_pool *p, char *err, int errlen);

bool wf_kv_pool_check(const wf_kv_pool *p, char *err, int errlen) {
    if (!pool_check(p, err, errlen)) return false;
    if (p->swa && !pool_check(p->swa, err, errlen)) {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "swa pool: %s", err);
        snprintf(err, (size_t)errlen, "%s", tmp);
        return false;
    }
    return true;
}

static bool pool_check(const wf_kv_pool *p, char *err, int errlen) {
    int used = 0, cached = 0, fr = 0, lru_len = 0, n_pub = 0, n_indexed = 0;
    for (int b = 0; b < p->n_blocks; b++) {
        const block_meta *m = &p->meta[b];
        switch (m->state) {
        case BLOCK_USED:
            used++;
            if (m->ref <= 0) goto bad_ref;
            break;
        case BLOCK_CACHED:
            cached++;
            if (m->ref != 0 || !m->published) goto bad_ref;
            break;
        case BLOCK_FREE:
            fr++;
            if (m->ref != 0 || m->published) goto bad_ref;
            break;
        default:
            goto bad_ref;
        }
        if (m->published) n_pub++;
        continue;
    bad_ref:
        snprintf(err, (size_t)errlen, "block %d: state %d ref %d published %d", b, m->state,
                 m->ref, m->published);
        return false;
    }
    if (used != p->n_used || cached != p->n_cached || fr != p->n_free ||
        used + cached + fr != p->n_blocks) {
        snprintf(err, (size_t)errlen, "counts: used %d/%d cached %d/%d free %d/%d", used,
                 p->n_used, cached, p->n_cached, fr, p->n_free);
        return false;
    }
    /* The free stack holds each FREE block exactly once. */
    unsigned char *seen = calloc((size_t)p->n_blocks, 1);
    if (!seen) {
        snprintf(err, (size_t)errlen, "out of memory");
        return false;
    }
    bool ok = true;
    for (int i = 0; i < p->n_free && ok; i++) {
        int32_t b = p->free_stack[i];
        if (b < 0 || b >= p->n_blocks || seen[b] || p->meta[b].state != BLOCK_FREE) {
            snprintf(err, (size_t)errlen, "free stack entry %d (block %d) invalid", i, b);
            ok = false;
        } else {
            seen[b] = 1;
        }
    }
    for (int32_t b = p->lru_head, prev = -1; ok && b >= 0; prev = b, b = p->meta[b].lru_next) {
        if (p->meta[b].state != BLOCK_CACHED || p->meta[b].lru_prev != prev ||
            ++lru_len > p->n_blocks) {
            snprintf(err, (size_t)errlen, "LRU list broken at block %d", b);
            ok = false;
        }
    }
    if (ok && lru_len != p->n_cached) {
        snprintf(err, (size_t)errlen, "LRU length %d != cached %d", lru_len, p->n_cached);
        ok = false;
    }
    if (ok && p->prefix_cache) {
        for (uint64_t i = 0; ok && i <= p->bucket_mask; i++)
            for (int32_t b = p->buckets[i]; ok && b >= 0; b = p->meta[b].hnext) {
                if (!p->meta[b].published || (p->meta[b].hash & p->bucket_mask) != i ||
                    ++n_indexed > p->n_blocks) {
                    snprintf(err, (size_t)errlen, "hash index broken at block %d", b);
                    ok = false;
                }
            }
        if (ok && n_indexed != n_pub) {
            snprintf(err, (size_t)errlen, "indexed %d != published %d", n_indexed, n_pub);
            ok = false;
        }
    }
    free(seen);
    return ok;
}

/* ---- sequences ---- */

wf_status wf_kv_seq_init(wf_kv_seq *seq, int max_blocks) {
    memset(seq, 0, sizeof *seq);
    if (max_blocks <= 0) return WF_EINVAL;
    seq->blocks = malloc((size_t)max_blocks * sizeof *seq->blocks);
    seq->swa_blocks = malloc((size_t)max_blocks * sizeof *seq->swa_blocks);
    if (!seq->blocks || !seq->swa_blocks) {
        wf_kv_seq_free(seq);
        return WF_ENOMEM;
    }
    seq->max_blocks = max_blocks;
    return WF_OK;
}

void wf_kv_seq_free(wf_kv_seq *seq) {
    free(seq->blocks);
    free(seq->swa_blocks);
    memset(seq, 0, sizeof *seq);
}

void wf_kv_seq_set_salt(wf_kv_seq *seq, uint64_t salt) {
    seq->salt = salt;
    if (seq->n_hashed == 0) seq->last_hash = salt;
}

int wf_kv_seq_swa_held(const wf_kv_seq *seq) { return seq->n_blocks - seq->swa_lo; }

/* First block index a local layer still reads once positions [0, n_tokens) are written: the
 * next position q = n_tokens attends to keys > q - window (llama.cpp masks q - k >= n_swa). */
static int swa_first_block(const wf_kv_pool *p, int n_tokens) {
    int first_pos = n_tokens - p->window + 1;
    return first_pos > 0 ? first_pos / p->block_size : 0;
}

/* Releases the local blocks entirely behind the window. */
static void swa_slide(wf_kv_pool *p, wf_kv_seq *seq) {
    if (!p->swa) return;
    int lo = swa_first_block(p, seq->n_tokens);
    if (lo > seq->n_blocks) lo = seq->n_blocks;
    /* Newest first, as in release: the older blocks end up evicted first. */
    for (int i = lo - 1; i >= seq->swa_lo; i--) {
        wf_kv_pool_unref(p->swa, seq->swa_blocks[i]);
        seq->swa_blocks[i] = -1;
        p->swa_released++;
    }
    if (lo > seq->swa_lo) seq->swa_lo = lo;
}

int wf_kv_pool_cached_prefix(const wf_kv_pool *pool, uint64_t salt, const int32_t *tokens, int n) {
    int bs = wf_kv_pool_block_size(pool);
    int max_full = n > 0 ? (n - 1) / bs : 0;
    uint64_t parent = salt;
    int i = 0;
    for (; i < max_full; i++) {
        const int32_t *blk = tokens + (size_t)i * (size_t)bs;
        uint64_t h = wf_kv_block_hash(parent, blk, bs);
        if (wf_kv_pool_lookup(pool, h, parent, blk) < 0) break;
        parent = h;
    }
    return i * bs;
}

int wf_kv_seq_match_prefix(wf_kv_pool *p, wf_kv_seq *seq, const int32_t *tokens, int n) {
    if (n <= 0 || seq->n_blocks != 0) return 0;
    p->prefix_queries += (uint64_t)n;
    if (!p->prefix_cache) return 0;
    int bs = p->block_size;
    int max_full = (n - 1) / bs; /* keep >= 1 token to compute: its logits are sampled */
    if (max_full > seq->max_blocks) max_full = seq->max_blocks;
    uint64_t parent = seq->salt;
    int i = 0;
    for (; i < max_full; i++) {
        const int32_t *blk = tokens + (size_t)i * (size_t)bs;
        uint64_t h = wf_kv_block_hash(parent, blk, bs);
        int32_t b = wf_kv_pool_lookup(p, h, parent, blk);
        if (b < 0) break;
        seq->blocks[i] = b;
        parent = h;
    }
    int m = i;
    if (p->swa && m > 0) {
        /* The local blocks under the same keys: swa_blocks[j] = the cached local block j or
         * -1. A prefix of m blocks is usable when blocks [first(m), m) are all there. */
        parent = seq->salt;
        for (int j = 0; j < m; j++) {
            const int32_t *blk = tokens + (size_t)j * (size_t)bs;
            uint64_t h = wf_kv_block_hash(parent, blk, bs);
            seq->swa_blocks[j] = wf_kv_pool_lookup(p->swa, h, parent, blk);
            parent = h;
        }
        int run = 0; /* present local blocks ending at index m-1 */
        for (; m > 0; m--) {
            int lo = swa_first_block(p, m * bs);
            run = 0;
            for (int j = m - 1; j >= lo && seq->swa_blocks[j] >= 0; j--) run++;
            if (run >= m - lo) break;
        }
        int lo = m > 0 ? swa_first_block(p, m * bs) : 0;
        for (int j = 0; j < m; j++) {
            if (j < lo) seq->swa_blocks[j] = -1;
            else wf_kv_pool_ref(p->swa, seq->swa_blocks[j]);
        }
        seq->swa_lo = lo;
    }
    /* The chain hash of the last kept block, recomputed (the loop above may have shortened). */
    parent = seq->salt;
    for (int j = 0; j < m; j++) {
        wf_kv_pool_ref(p, seq->blocks[j]);
        parent = wf_kv_block_hash(parent, tokens + (size_t)j * (size_t)bs, bs);
    }
    seq->n_blocks = m;
    seq->n_hashed = m;
    seq->last_hash = parent;
    seq->n_tokens = m * bs;
    p->prefix_hits += (uint64_t)seq->n_tokens;
    return seq->n_tokens;
}

/* The block that the next write (position n_tokens) lands in needs a private copy. */
static bool needs_cow(const wf_kv_pool *p, const int32_t *blocks, int n_blocks, int n_tokens,
                      int n_total) {
    if (n_total <= n_tokens) return false;
    int j = n_tokens / p->block_size;
    return j < n_blocks && blocks[j] >= 0 && p->meta[blocks[j]].ref > 1;
}

static int table_needed(const wf_kv_pool *p, const int32_t *blocks, int n_blocks, int n_tokens,
                        int n_total) {
    int want = (n_total + p->block_size - 1) / p->block_size;
    int extra = want > n_blocks ? want - n_blocks : 0;
    return extra + (needs_cow(p, blocks, n_blocks, n_tokens, n_total) ? 1 : 0);
}

int wf_kv_seq_blocks_needed(const wf_kv_pool *p, const wf_kv_seq *seq, int n_total) {
    return table_needed(p, seq->blocks, seq->n_blocks, seq->n_tokens, n_total);
}

bool wf_kv_seq_fits(const wf_kv_pool *p, const wf_kv_seq *seq, int n_total) {
    if (wf_kv_seq_blocks_needed(p, seq, n_total) > wf_kv_pool_available(p)) return false;
    return !p->swa || table_needed(p->swa, seq->swa_blocks, seq->n_blocks, seq->n_tokens,
                                   n_total) <= wf_kv_pool_available(p->swa);
}

int wf_kv_seq_fit_tokens(const wf_kv_pool *p, const wf_kv_seq *seq) {
    /* Both tables end at n_blocks; a shared partial last block costs one copy first. */
    int fit = (seq->n_blocks + wf_kv_pool_available(p)) * p->block_size;
    if (needs_cow(p, seq->blocks, seq->n_blocks, seq->n_tokens, seq->n_tokens + 1))
        fit -= p->block_size;
    if (p->swa) {
        int f2 = (seq->n_blocks + wf_kv_pool_available(p->swa)) * p->block_size;
        if (needs_cow(p->swa, seq->swa_blocks, seq->n_blocks, seq->n_tokens, seq->n_tokens + 1))
            f2 -= p->block_size;
        if (f2 < fit) fit = f2;
    }
    return fit > seq->n_tokens ? fit : seq->n_tokens;
}

int wf_kv_pool_available_min(const wf_kv_pool *p) {
    int a = wf_kv_pool_available(p);
    if (p->swa && wf_kv_pool_available(p->swa) < a) a = wf_kv_pool_available(p->swa);
    return a;
}

/* Local blocks a sequence holds at most: the window before the next position plus it. */
static int swa_window_blocks(const wf_kv_pool *p) {
    return (p->window + p->block_size - 1) / p->block_size + 1;
}

bool wf_kv_pool_can_hold(const wf_kv_pool *p, int n_tokens) {
    int need = (n_tokens + p->block_size - 1) / p->block_size;
    if (need > p->n_blocks) return false;
    if (!p->swa) return true;
    int win = swa_window_blocks(p);
    return (need < win ? need : win) <= p->swa->n_blocks;
}

bool wf_kv_pool_can_start(const wf_kv_pool *p, int n_tokens, int slack) {
    int bs = p->block_size;
    int need = (n_tokens + bs - 1) / bs;
    if (need + slack > wf_kv_pool_available(p)) return false;
    if (!p->swa) return true;
    int win = swa_window_blocks(p);
    int swa_slack = (int)((int64_t)slack * p->swa->n_blocks / p->n_blocks); /* same share */
    return (need < win ? need : win) + swa_slack <= wf_kv_pool_available(p->swa);
}

/* Copy-on-write of the block at n_tokens (if shared), then blocks up to `want`. */
static void table_reserve(wf_kv_pool *p, int32_t *blocks, int n_blocks, int n_tokens,
                          int n_total, int want, wf_kv_store *store, bool swa) {
    int32_t b;
    if (needs_cow(p, blocks, n_blocks, n_tokens, n_total)) {
        int j = n_tokens / p->block_size;
        if (wf_kv_pool_alloc(p, &b) != WF_OK) abort(); /* counted by the caller */
        if (store) {
            if (swa) wf_kv_store_copy_swa_block(store, b, blocks[j]);
            else wf_kv_store_copy_block(store, b, blocks[j]);
        }
        wf_kv_pool_unref(p, blocks[j]);
        blocks[j] = b;
        p->cow_copies++;
    }
    for (int i = n_blocks; i < want; i++) {
        if (wf_kv_pool_alloc(p, &b) != WF_OK) abort();
        blocks[i] = b;
    }
}

wf_status wf_kv_seq_reserve(wf_kv_pool *p, wf_kv_seq *seq, int n_total, wf_kv_store *store) {
    int want = (n_total + p->block_size - 1) / p->block_size;
    if (want > seq->max_blocks) return WF_ERANGE;
    if (!wf_kv_seq_fits(p, seq, n_total)) return WF_EFULL;
    table_reserve(p, seq->blocks, seq->n_blocks, seq->n_tokens, n_total, want, store, false);
    if (p->swa)
        table_reserve(p->swa, seq->swa_blocks, seq->n_blocks, seq->n_tokens, n_total, want,
                      store, true);
    if (want > seq->n_blocks) seq->n_blocks = want;
    return WF_OK;
}

void wf_kv_seq_commit(wf_kv_pool *p, wf_kv_seq *seq, const int32_t *tokens, int n_total) {
    if (n_total > seq->n_tokens) seq->n_tokens = n_total;
    if (p->prefix_cache) {
        int bs = p->block_size;
        while ((seq->n_hashed + 1) * bs <= seq->n_tokens && seq->n_hashed < seq->n_blocks) {
            const int32_t *blk = tokens + (size_t)seq->n_hashed * (size_t)bs;
            uint64_t h = wf_kv_block_hash(seq->last_hash, blk, bs);
            wf_kv_pool_publish(p, seq->blocks[seq->n_hashed], h, seq->last_hash, blk);
            /* The local block of the same positions, under the same key: a later prompt
             * with this prefix finds both kinds (still held: publish precedes the slide). */
            if (p->swa && seq->swa_blocks[seq->n_hashed] >= 0)
                wf_kv_pool_publish(p->swa, seq->swa_blocks[seq->n_hashed], h, seq->last_hash,
                                   blk);
            seq->last_hash = h;
            seq->n_hashed++;
        }
    }
    swa_slide(p, seq);
}

wf_status wf_kv_seq_fork(wf_kv_pool *p, const wf_kv_seq *src, wf_kv_seq *dst) {
    return wf_kv_seq_fork_prefix(p, src, src->n_tokens, dst);
}

wf_status wf_kv_seq_fork_prefix(wf_kv_pool *p, const wf_kv_seq *src, int n_tokens,
                                wf_kv_seq *dst) {
    if (n_tokens < 0 || n_tokens > src->n_tokens ||
        (n_tokens != src->n_tokens && n_tokens % p->block_size != 0))
        return WF_EINVAL;
    int n = (n_tokens + p->block_size - 1) / p->block_size;
    if (n > dst->max_blocks) return WF_ERANGE;
    /* src released local blocks that a shorter prefix's window still reads */
    if (p->swa && swa_first_block(p, n_tokens) < src->swa_lo && swa_first_block(p, n_tokens) < n)
        return WF_ERANGE;
    wf_kv_seq_release(p, dst);
    for (int i = 0; i < n; i++) {
        wf_kv_pool_ref(p, src->blocks[i]);
        dst->blocks[i] = src->blocks[i];
        if (p->swa) {
            dst->swa_blocks[i] = src->swa_blocks[i];
            if (i >= src->swa_lo) wf_kv_pool_ref(p->swa, src->swa_blocks[i]);
        }
    }
    dst->n_blocks = n;
    dst->swa_lo = p->swa ? (src->swa_lo < n ? src->swa_lo : n) : 0;
    dst->n_tokens = n_tokens;
    dst->n_hashed = src->n_hashed < n ? src->n_hashed : n;
    dst->last_hash = src->last_hash;
    dst->salt = src->salt;
    if (dst->n_hashed != src->n_hashed) { /* a shorter prefix: its chain hash is recomputed
                                             by the next commit (publishing is idempotent) */
        dst->n_hashed = 0;
        dst->last_hash = dst->salt;
    }
    swa_slide(p, dst);
    return WF_OK;
}

void wf_kv_seq_release(wf_kv_pool *p, wf_kv_seq *seq) {
    /* Tail first: the chain's root ends most recently used, so eviction takes leaves first. */
    for (int i = seq->n_blocks - 1; i >= 0; i--) {
        wf_kv_pool_unref(p, seq->blocks[i]);
        if (p->swa && i >= seq->swa_lo) wf_kv_pool_unref(p->swa, seq->swa_blocks[i]);
    }
    seq->n_blocks = 0;
    seq->swa_lo = 0;
    seq->n_tokens = 0;
    seq->n_hashed = 0;
    seq->last_hash = seq->salt;
}

static void copy_layers(wf_kv_store *s, int32_t dst, int32_t src, int swa) {
    for (int l = 0; l < s->geometry.n_layers; l++) {
        if (wf_kv_store_layer_is_swa(s, l) != swa) continue;
        memcpy(wf_kv_store_k(s, l, dst), wf_kv_store_k(s, l, src), s->block_bytes);
        memcpy(wf_kv_store_v(s, l, dst), wf_kv_store_v(s, l, src), s->block_bytes);
    }
}

void wf_kv_store_copy_block(wf_kv_store *s, int32_t dst, int32_t src) { copy_layers(s, dst, src, 0); }

void wf_kv_store_copy_swa_block(wf_kv_store *s, int32_t dst, int32_t src) {
    copy_layers(s, dst, src, 1);
}
