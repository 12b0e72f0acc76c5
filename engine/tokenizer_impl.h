/* Internals shared by tokenizer.c (vocabulary, special tokens, pieces), tokenizer_bpe.c
 * (byte-level BPE and its pre-tokenizers) and tokenizer_spm.c (SentencePiece merges).
 * Not a public header: only the tokenizer sources and its tests include it. */
#ifndef WF_ENGINE_TOKENIZER_IMPL_H
#define WF_ENGINE_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/tokenizer.h"

/* Token attributes, as llama.cpp's llama_token_attr bits. */
enum {
    WF_TOKA_UNDEFINED = 0,
    WF_TOKA_UNKNOWN = 1 << 0,
    WF_TOKA_UNUSED = 1 << 1,
    WF_TOKA_NORMAL = 1 << 2,
    WF_TOKA_CONTROL = 1 << 3,
    WF_TOKA_USER_DEFINED = 1 << 4,
    WF_TOKA_BYTE = 1 << 5,
    WF_TOKA_LSTRIP = 1 << 7, /* special token eats the whitespace before it */
    WF_TOKA_RSTRIP = 1 << 8, /* ... and after it */
};

typedef enum wf_tok_type { WF_TOK_SPM = 1, WF_TOK_BPE = 2 } wf_tok_type;

/* Pre-tokenizer families (which regex chain splits text into words before BPE). */
typedef enum wf_tok_pre {
    WF_PRE_DEFAULT = 0, /* llama.cpp's fallback chain: punct runs, gpt2, \p{N}+, 3 digits */
    WF_PRE_GPT2,        /* the GPT-2 regex */
    WF_PRE_SMOLLM,      /* \p{N} singles, then GPT-2 (also starcoder, refact, ...) */
    WF_PRE_LLAMA3,      /* llama3 regex, \p{N}{1,3} */
    WF_PRE_QWEN2,       /* llama3 regex with single \p{N} */
    WF_PRE_FALCON,      /* punctuation runs (with '`'), GPT-2, then 3-digit groups */
    WF_PRE_GPT4O,       /* o200k: case-aware letter runs, contractions, \p{N}{1,3} */
    WF_PRE_TEKKEN,      /* as GPT4O without contractions, single \p{N} */
} wf_tok_pre;

/* Open-addressing hash set of ids keyed by byte strings. */
typedef struct wf_tok_map {
    int32_t *slots; /* -1 = empty */
    uint32_t mask;
} wf_tok_map;

struct wf_tokenizer {
    wf_tok_type type;
    wf_tok_pre pre;
    int n_vocab;

    /* token texts as stored in the GGUF: blob + offsets (text_off[n_vocab] = end) */
    char *text_blob;
    uint32_t *text_off;
    float *scores;
    uint16_t *attr;
    uint8_t *eog;
    wf_tok_map tok_map;

    /* BPE merges "left right": left = merge_blob[merge_off[i] .. + merge_llen[i]),
     * right follows after one space. rank = index. */
    int n_merges;
    char *merge_blob;
    uint32_t *merge_off;
    uint16_t *merge_llen;
    uint16_t *merge_rlen;
    wf_tok_map merge_map;
    /* the same merges keyed by token ids, when both sides are tokens (the hot path): each
     * slot packs left id (20 bits), right id (20 bits) and rank (24 bits) into one word so
     * a probe touches one cache line. Empty slots are ~0. NULL if ids do not fit. */
    uint64_t *pair_slots;
    uint32_t pair_mask;
    int32_t *merge_res; /* id of left+right for each merge, -1 if none */
    int32_t byte_sym[256]; /* id of the GPT-2 character of each byte, -1 if none */

    /* token_to_piece(render_special = true) for every id, precomputed like llama.cpp */
    char *piece_blob;
    uint32_t *piece_off;

    /* special tokens (CONTROL | USER_DEFINED | UNKNOWN) by decreasing text length */
    int32_t *special;
    int n_special;

    int32_t byte_tok[256]; /* SPM byte fallback: <0xXX> (or the byte itself), -1 if none */

    uint32_t max_token_len; /* longest token text: no longer string can be a token */
    int32_t bos, eos, eot, eom, unk;
    bool add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;
    int max_detok_out; /* worst-case bytes one wf_detokenizer_push can write */
};

/* Appends token ids to a caller buffer, counting past its capacity. */
typedef struct wf_tok_out {
    int32_t *ids;
    int cap;
    int n;
} wf_tok_out;

static inline void wf_tok_emit(wf_tok_out *o, int32_t id) {
    if (o->n < o->cap)
        o->ids[o->n] = id;
    o->n++;
}

uint64_t wf_tok_hash(const char *s, size_t n);
/* Token id of text s[0..n), -1 if none. */
int32_t wf_tok_lookup(const wf_tokenizer *t, const char *s, size_t n);
static inline const char *wf_tok_text(const wf_tokenizer *t, int32_t id, size_t *len) {
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text_blob + t->text_off[id];
}
/* BPE merge rank of (left, right), -1 if they do not merge. */
int wf_tok_merge_rank(const wf_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn);
/* The same for two token ids (both >= 0, < 2^20 when pair_slots is set). */
#define WF_TOK_PAIR_EMPTY (~(uint64_t)0)
static inline uint64_t wf_tok_pair_key(int32_t l, int32_t r) {
    return ((uint64_t)(uint32_t)l << 20 | (uint32_t)r) << 24;
}
static inline uint32_t wf_tok_pair_slot(uint64_t key) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 40);
}
static inline int wf_tok_merge_rank_ids(const wf_tokenizer *t, int32_t l, int32_t r) {
    uint64_t key = wf_tok_pair_key(l, r);
    for (uint32_t i = wf_tok_pair_slot(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        uint64_t v = t->pair_slots[i];
        if (v == WF_TOK_PAIR_EMPTY)
            return -1;
        if ((v & ~(uint64_t)0xFFFFFF) == key)
            return (int)(v & 0xFFFFFF);
    }
}

/* wf_tokenizer_from_gguf with tokenizer.ggml.pre replaced by pre_override (if not NULL):
 * lets tests run every pre-tokenizer over one real vocabulary. */
wf_status wf_tok_from_gguf_pre(const wf_gguf *g, const char *pre_override, wf_tokenizer **out,
                               char *err, size_t errlen);

/* A candidate merge of two adjacent symbols for the BPE and SentencePiece merge loops. The
 * heap pops the lowest key first (BPE: the merge rank; SPM: minus the piece's score, so the
 * best score wins), ties going to the leftmost pair, as llama.cpp orders them. ln and rn are
 * the symbols' byte lengths when the pair was queued: a pair whose symbols changed since is
 * stale and skipped. */
typedef struct wf_tok_bigram {
    double key;
    int32_t left, right;
    uint32_t ln, rn;
    int32_t rank; /* BPE only: index into the merge results */
} wf_tok_bigram;

typedef struct wf_tok_heap {
    wf_tok_bigram *v; /* capacity is the caller's: at most one entry per adjacent pair event */
    size_t n;
} wf_tok_heap;

void wf__tok_heap_push(wf_tok_heap *h, wf_tok_bigram b);
wf_tok_bigram wf__tok_heap_pop(wf_tok_heap *h);

/* Tokenizes one raw-text fragment (no special tokens inside) into o. Return WF_ENOMEM on
 * scratch allocation failure. */
wf_status wf_tok_bpe_encode(const wf_tokenizer *t, const char *text, size_t len, wf_tok_out *o);
wf_status wf_tok_spm_encode(const wf_tokenizer *t, const char *text, size_t len, bool prefix_space,
                            wf_tok_out *o);

/* Pre-tokenization only (exposed for tests): splits text into words as the BPE pre-tokenizer
 * `pre` does; writes byte lengths of consecutive words (in the original text, after invalid
 * bytes were replaced by U+FFFD, i.e. of the re-encoded text) into lens (capacity >= len),
 * returns their count, or -1 on allocation failure. */
int wf_tok_pre_split(wf_tok_pre pre, const char *text, size_t len, size_t *lens);

#endif
