/* Vocabulary loading, special tokens, pieces and (de)tokenization entry points. The rules
 * (defaults, EOG detection, special-token partitioning, piece rendering) follow llama.cpp's
 * llama-vocab.cpp so that ids and text match it exactly; the split/merge algorithms live in
 * tokenizer_bpe.c and tokenizer_spm.c. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, qsort_r */
#endif
#include "engine/tokenizer.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/tokenizer_impl.h"
#include "engine/unicode.h"

#define SPACE_ESC "\xE2\x96\x81" /* U+2581, SentencePiece's visible space */

/* ---- hashing ------------------------------------------------------------------------- */

uint64_t wf_tok_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix for the low bits */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static int map_init(wf_tok_map *m, size_t n_items) {
    size_t cap = 16;
    while (cap < n_items * 2)
        cap <<= 1;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots)
        return -1;
    memset(m->slots, 0xFF, cap * sizeof *m->slots);
    m->mask = (uint32_t)(cap - 1);
    return 0;
}

int32_t wf_tok_lookup(const wf_tokenizer *t, const char *s, size_t n) {
    if (n > t->max_token_len)
        return -1;
    uint32_t i = (uint32_t)wf_tok_hash(s, n) & t->tok_map.mask;
    for (;;) {
        int32_t id = t->tok_map.slots[i];
        if (id < 0)
            return -1;
        size_t len;
        const char *txt = wf_tok_text(t, id, &len);
        if (len == n && memcmp(txt, s, n) == 0)
            return id;
        i = (i + 1) & t->tok_map.mask;
    }
}

/* Pair key: left bytes, 0xFF (never inside UTF-8), right bytes. */
static uint64_t pair_hash(const char *l, size_t ln, const char *r, size_t rn) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < ln; i++)
        h = (h ^ (uint8_t)l[i]) * 0x100000001b3ull;
    h = (h ^ 0xFFu) * 0x100000001b3ull;
    for (size_t i = 0; i < rn; i++)
        h = (h ^ (uint8_t)r[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

int wf_tok_merge_rank(const wf_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn) {
    if (!t->merge_map.slots)
        return -1;
    uint32_t i = (uint32_t)pair_hash(l, ln, r, rn) & t->merge_map.mask;
    for (;;) {
        int32_t m = t->merge_map.slots[i];
        if (m < 0)
            return -1;
        const char *ml = t->merge_blob + t->merge_off[m];
        if (t->merge_llen[m] == ln && t->merge_rlen[m] == rn && memcmp(ml, l, ln) == 0 &&
            memcmp(ml + ln + 1, r, rn) == 0)
            return m;
        i = (i + 1) & t->merge_map.mask;
    }
}

/* ---- loading --------------------------------------------------------------------------- */

void wf_tokenizer_desc_init(wf_tokenizer_desc *d) {
    memset(d, 0, sizeof *d);
    for (int i = 0; i < WF_TOKSLOT_COUNT; i++)
        d->slots[i] = -1;
    d->add_bos = d->add_eos = d->add_space_prefix = -1;
}

typedef struct pre_info {
    const char *name;
    wf_tok_pre pre;
    bool ignore_merges, add_bos, clean_spaces;
    bool no_default_bos; /* BOS only if the GGUF names one */
} pre_info;

/* The pre-tokenizer names llama.cpp maps onto the regex families implemented here. */
static const pre_info k_pre[] = {
    {"default", WF_PRE_DEFAULT, false, false, true, false},
    {"llama3", WF_PRE_LLAMA3, true, true, true, false},
    {"llama-v3", WF_PRE_LLAMA3, true, true, true, false},
    {"llama-bpe", WF_PRE_LLAMA3, true, true, true, false},
    {"falcon3", WF_PRE_LLAMA3, true, true, true, false},
    {"pixtral", WF_PRE_LLAMA3, true, true, true, false},
    {"dbrx", WF_PRE_LLAMA3, false, false, true, false},
    {"smaug-bpe", WF_PRE_LLAMA3, false, false, true, false},
    {"gpt-2", WF_PRE_GPT2, false, false, true, false},
    {"phi-2", WF_PRE_GPT2, false, false, true, false},
    {"mpt", WF_PRE_GPT2, false, false, true, false},
    {"olmo", WF_PRE_GPT2, false, false, true, false},
    {"jais", WF_PRE_GPT2, false, false, true, false},
    {"exaone4", WF_PRE_GPT2, false, false, true, false},
    {"smollm", WF_PRE_SMOLLM, false, false, false, false},
    {"starcoder", WF_PRE_SMOLLM, false, false, true, false},
    {"refact", WF_PRE_SMOLLM, false, false, true, false},
    {"command-r", WF_PRE_SMOLLM, false, false, false, false},
    {"codeshell", WF_PRE_SMOLLM, false, false, true, false},
    {"exaone", WF_PRE_SMOLLM, false, false, true, false},
    {"minerva-7b", WF_PRE_SMOLLM, false, false, true, false},
    {"qwen2", WF_PRE_QWEN2, false, false, false, false},
    {"deepseek-r1-qwen", WF_PRE_QWEN2, false, false, false, false},
    {"stablelm2", WF_PRE_QWEN2, false, false, true, false},
    {"hunyuan", WF_PRE_QWEN2, false, false, false, false},
    {"megrez", WF_PRE_QWEN2, false, false, true, false},
    {"falcon", WF_PRE_FALCON, false, false, true, false},
    {"gpt-4o", WF_PRE_GPT4O, false, false, false, false},
    {"llama4", WF_PRE_GPT4O, false, false, false, false},
    {"tekken", WF_PRE_TEKKEN, true, true, false, false},
    {"chatglm-bpe", WF_PRE_LLAMA3, false, false, true, true},
    {"glm4", WF_PRE_LLAMA3, false, false, true, true},
};

/* Token texts llama.cpp treats as end-of-generation (and forces to CONTROL). */
static const char *const k_eog_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[", NULL};

static const char *const k_eot_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<end_of_utterance>", NULL};
static const char *const k_eom_names[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre_names[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", SPACE_ESC "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const k_fim_suf_names[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
    "<SUF>", SPACE_ESC "<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const k_fim_mid_names[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", SPACE_ESC "<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const k_fim_pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                              "[PAD]", NULL};
static const char *const k_fim_rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                              "<REPO>", "<reponame>", NULL};
static const char *const k_fim_sep_names[] = {"<|file_sep|>", NULL};

static int32_t find_text(const wf_tokenizer *t, const char *s) { return wf_tok_lookup(t, s, strlen(s)); }

/* llama.cpp fills an empty slot with the first matching token of its hash-map iteration;
 * we take the lowest id, which is the same whenever a vocabulary has one candidate. */
static void detect_slot(wf_tokenizer *t, int32_t *slot, const char *const *names) {
    if (*slot >= 0)
        return;
    for (int i = 0; names[i]; i++) {
        int32_t id = find_text(t, names[i]);
        if (id >= 0 && (*slot < 0 || id < *slot))
            *slot = id;
    }
    if (*slot >= 0)
        t->attr[*slot] |= WF_TOKA_CONTROL;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The byte of a <0xXX> token, as strtol(text.substr(3, 2), 16). */
static uint8_t byte_token_value(const char *txt, size_t len) {
    int v = 0;
    for (size_t i = 3; i < 5 && i < len; i++) {
        int h = hexval(txt[i]);
        if (h < 0)
            break;
        v = v * 16 + h;
    }
    return (uint8_t)v;
}

/* Writes into buf (when not NULL) and counts: the renderer runs once to size, once to fill. */
typedef struct pw {
    char *buf;
    size_t n;
} pw;

static void pw_put(pw *w, const void *p, size_t n) {
    if (w->buf && n)
        memcpy(w->buf + w->n, p, n);
    w->n += n;
}

/* The piece of id with render_special = true (llama.cpp's token_to_piece rules); buf may be
 * NULL to only measure. Returns its length. */
static size_t render_piece(const wf_tokenizer *t, int32_t id, char *buf) {
    size_t len;
    const char *txt = wf_tok_text(t, id, &len);
    uint16_t a = t->attr[id];
    pw w = {buf, 0};
    if (a & (WF_TOKA_UNKNOWN | WF_TOKA_CONTROL | WF_TOKA_USER_DEFINED)) {
        pw_put(&w, txt, len);
    } else if ((a & WF_TOKA_NORMAL) && t->type == WF_TOK_SPM) {
        for (size_t i = 0; i < len;) {
            if (len - i >= 3 && memcmp(txt + i, SPACE_ESC, 3) == 0) {
                pw_put(&w, " ", 1);
                i += 3;
            } else {
                pw_put(&w, txt + i++, 1);
            }
        }
    } else if (a & WF_TOKA_NORMAL) {
        for (size_t i = 0; i < len;) {
            size_t adv;
            uint32_t cp = wf_utf8_decode(txt + i, len - i, &adv);
            int b = wf_gpt2_cp_to_byte(cp);
            if (b >= 0) {
                char c = (char)b;
                pw_put(&w, &c, 1);
            } else { /* as llama_decode_text: "[UNK_BYTE_0x<hex of char><token text>]" */
                char u[4], hex[3];
                int un = wf_utf8_encode(cp, u);
                pw_put(&w, "[UNK_BYTE_0x", 12);
                for (int k = 0; k < un; k++) {
                    snprintf(hex, sizeof hex, "%02x", (uint8_t)u[k]);
                    pw_put(&w, hex, 2);
                }
                pw_put(&w, txt, len);
                pw_put(&w, "]", 1);
            }
            i += adv;
        }
    } else if (a & WF_TOKA_BYTE) {
        char c = (char)byte_token_value(txt, len);
        pw_put(&w, &c, 1);
    }
    return w.n;
}

static int cmp_special(const void *pa, const void *pb, void *ctx) {
    const wf_tokenizer *t = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la = t->text_off[a + 1] - t->text_off[a], lb = t->text_off[b + 1] - t->text_off[b];
    if (la != lb)
        return la > lb ? -1 : 1;
    return a < b ? -1 : (a > b);
}

/* Worst-case output of one detokenizer step for a piece: up to 3 pending bytes that turn
 * out invalid (3 x U+FFFD) plus the piece with every invalid subpart expanded to 3 bytes. */
static int detok_bound(const char *p, size_t n) {
    size_t out = 9;
    for (size_t i = 0; i < n;) {
        int k = wf_utf8_check(p + i, n - i);
        if (k > 0) {
            out += (size_t)k;
            i += (size_t)k;
        } else if (k == 0) {
            out += 3 * (n - i);
            break;
        } else {
            out += 3;
            i += (size_t)-k;
        }
    }
    return out > 1u << 30 ? 1 << 30 : (int)out;
}

static wf_status build_pieces(wf_tokenizer *t, char *err, size_t errlen) {
    size_t total = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        total += render_piece(t, id, NULL);
    if (total > 0xFFFFFFF0u) {
        wf_errorf(err, errlen, "tokenizer: token pieces too large");
        return WF_EFORMAT;
    }
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->piece_off);
    t->piece_blob = malloc(total + 1);
    if (!t->piece_off || !t->piece_blob) {
        wf_errorf(err, errlen, "out of memory building token pieces");
        return WF_ENOMEM;
    }
    size_t off = 0;
    t->max_detok_out = 16;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n = render_piece(t, id, t->piece_blob + off);
        t->piece_off[id] = (uint32_t)off;
        int b = detok_bound(t->piece_blob + off, n);
        if (b > t->max_detok_out && !(t->attr[id] & (WF_TOKA_CONTROL | WF_TOKA_UNKNOWN)))
            t->max_detok_out = b;
        off += n;
    }
    t->piece_off[t->n_vocab] = (uint32_t)off;
    return WF_OK;
}

static wf_status load_merges(wf_tokenizer *t, const wf_tokenizer_desc *d, char *err, size_t errlen) {
    size_t total = 0;
    for (int i = 0; i < d->n_merges; i++)
        total += (d->merge_lens ? d->merge_lens[i] : strlen(d->merges[i])) + 1;
    t->n_merges = d->n_merges;
    t->merge_blob = malloc(total + 1);
    t->merge_off = malloc(((size_t)d->n_merges + 1) * sizeof *t->merge_off);
    t->merge_llen = malloc(((size_t)d->n_merges + 1) * sizeof *t->merge_llen);
    t->merge_rlen = malloc(((size_t)d->n_merges + 1) * sizeof *t->merge_rlen);
    t->merge_res = malloc(((size_t)d->n_merges + 1) * sizeof *t->merge_res);
    bool use_ids = t->n_vocab <= (1 << 20) && d->n_merges < (1 << 24);
    size_t pcap = 16;
    while (pcap < (size_t)d->n_merges * 2)
        pcap <<= 1;
    if (use_ids) {
        t->pair_slots = malloc(pcap * sizeof *t->pair_slots);
        if (t->pair_slots) {
            memset(t->pair_slots, 0xFF, pcap * sizeof *t->pair_slots);
            t->pair_mask = (uint32_t)(pcap - 1);
        }
    }
    if (!t->merge_blob || !t->merge_off || !t->merge_llen || !t->merge_rlen || !t->merge_res ||
        (use_ids && !t->pair_slots) || map_init(&t->merge_map, (size_t)d->n_merges) != 0) {
        wf_errorf(err, errlen, "out of memory loading merges");
        return WF_ENOMEM;
    }
    size_t off = 0;
    char *cat = malloc(2 * 0xFFFF); /* left+right concatenation scratch */
    if (!cat) {
        wf_errorf(err, errlen, "out of memory loading merges");
        return WF_ENOMEM;
    }
    for (int i = 0; i < d->n_merges; i++) {
        size_t len = d->merge_lens ? d->merge_lens[i] : strlen(d->merges[i]);
        const char *m = d->merges[i];
        /* llama.cpp splits at the first space after position 0; none -> empty pair */
        size_t sp = len;
        for (size_t k = 1; k < len; k++)
            if (m[k] == ' ') {
                sp = k;
                break;
            }
        size_t ln = sp < len ? sp : 0, rn = sp < len ? len - sp - 1 : 0;
        if (ln > 0xFFFF || rn > 0xFFFF) {
            free(cat);
            wf_errorf(err, errlen, "tokenizer.ggml.merges: merge too long");
            return WF_EFORMAT;
        }
        t->merge_off[i] = (uint32_t)off;
        t->merge_llen[i] = (uint16_t)ln;
        t->merge_rlen[i] = (uint16_t)rn;
        memcpy(t->merge_blob + off, m, ln);
        t->merge_blob[off + ln] = ' ';
        memcpy(t->merge_blob + off + ln + 1, m + ln + 1, rn);
        off += ln + rn + 1;
        /* first occurrence wins (std::unordered_map::emplace keeps the earlier rank) */
        const char *l = t->merge_blob + t->merge_off[i];
        int32_t lid = wf_tok_lookup(t, l, ln), rid = wf_tok_lookup(t, l + ln + 1, rn);
        t->merge_res[i] = -1;
        if (ln + rn > 0) {
            memcpy(cat, l, ln);
            memcpy(cat + ln, l + ln + 1, rn);
            t->merge_res[i] = wf_tok_lookup(t, cat, ln + rn);
        }
        if (wf_tok_merge_rank(t, l, ln, l + ln + 1, rn) >= 0)
            continue;
        uint32_t h = (uint32_t)pair_hash(l, ln, l + ln + 1, rn) & t->merge_map.mask;
        while (t->merge_map.slots[h] >= 0)
            h = (h + 1) & t->merge_map.mask;
        t->merge_map.slots[h] = i;
        if (t->pair_slots && lid >= 0 && rid >= 0) {
            uint64_t key = wf_tok_pair_key(lid, rid);
            h = wf_tok_pair_slot(key) & t->pair_mask;
            while (t->pair_slots[h] != WF_TOK_PAIR_EMPTY)
                h = (h + 1) & t->pair_mask;
            t->pair_slots[h] = key | (uint64_t)i;
        }
    }
    free(cat);
    return WF_OK;
}

/* llama.cpp's per-model token attributes, keyed on general.name: Phi-3 special tokens
 * swallow the whitespace after them (except <unk>, <s>, <|endoftext|>), as does </s>. */
static void apply_model_attrs(wf_tokenizer *t, const char *name) {
    if (!name)
        return;
    char low[256];
    size_t n = 0;
    for (; name[n] && n + 1 < sizeof low; n++)
        low[n] = (char)((name[n] >= 'A' && name[n] <= 'Z') ? name[n] + 32 : name[n]);
    low[n] = 0;
    if (!strstr(low, "phi-3") && !strstr(low, "phi3"))
        return;
    for (int i = 0; i < t->n_special; i++)
        t->attr[t->special[i]] |= WF_TOKA_RSTRIP;
    int32_t id = find_text(t, "</s>");
    if (id >= 0)
        t->attr[id] |= WF_TOKA_RSTRIP;
    static const char *const k_keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < sizeof k_keep / sizeof k_keep[0]; i++)
        if ((id = find_text(t, k_keep[i])) >= 0)
            t->attr[id] &= (uint16_t)~WF_TOKA_RSTRIP;
}

wf_status wf_tokenizer_new(const wf_tokenizer_desc *d, wf_tokenizer **out, char *err, size_t errlen) {
    if (!d || !out || !d->model || d->n_vocab <= 0 || !d->tokens) {
        wf_errorf(err, errlen, "tokenizer: missing vocabulary");
        return WF_EINVAL;
    }
    *out = NULL;
    wf_status st = WF_ENOMEM;
    wf_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        wf_errorf(err, errlen, "out of memory");
        return WF_ENOMEM;
    }
    int32_t slots[WF_TOKSLOT_COUNT];
    for (int i = 0; i < WF_TOKSLOT_COUNT; i++)
        slots[i] = -1;

    /* model type and its defaults */
    if (strcmp(d->model, "llama") == 0) {
        t->type = WF_TOK_SPM;
        slots[WF_TOKSLOT_BOS] = 1;
        slots[WF_TOKSLOT_EOS] = 2;
        slots[WF_TOKSLOT_UNK] = 0;
        t->add_space_prefix = true;
        t->add_bos = true;
        t->clean_spaces = false;
        t->pre = WF_PRE_DEFAULT;
    } else if (strcmp(d->model, "gpt2") == 0) {
        t->type = WF_TOK_BPE;
        slots[WF_TOKSLOT_BOS] = 11;
        slots[WF_TOKSLOT_EOS] = 11;
        const char *pre = d->pre ? d->pre : "default";
        const pre_info *pi = NULL;
        for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
            if (strcmp(k_pre[i].name, pre) == 0)
                pi = &k_pre[i];
        if (!pi) {
            wf_errorf(err, errlen, "tokenizer.ggml.pre: unsupported pre-tokenizer '%s'", pre);
            st = WF_EUNSUPPORTED;
            goto fail;
        }
        t->pre = pi->pre;
        if (pi->no_default_bos)
            slots[WF_TOKSLOT_BOS] = -1;
        t->ignore_merges = pi->ignore_merges;
        t->add_bos = pi->add_bos;
        t->clean_spaces = pi->clean_spaces;
    } else {
        wf_errorf(err, errlen, "tokenizer.ggml.model: unsupported tokenizer '%s'", d->model);
        st = WF_EUNSUPPORTED;
        goto fail;
    }
    if (d->add_space_prefix >= 0)
        t->add_space_prefix = d->add_space_prefix != 0;

    /* tokens */
    int n = d->n_vocab;
    t->n_vocab = n;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t len = d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
        total += len ? len : 24; /* room for "[EMPTY_<i>]" */
    }
    if (total > 0xFFFFFFF0u) {
        wf_errorf(err, errlen, "tokenizer.ggml.tokens: vocabulary too large");
        st = WF_EFORMAT;
        goto fail;
    }
    t->text_blob = malloc(total + 1);
    t->text_off = malloc(((size_t)n + 1) * sizeof *t->text_off);
    t->scores = malloc((size_t)n * sizeof *t->scores);
    t->attr = malloc((size_t)n * sizeof *t->attr);
    t->eog = calloc((size_t)n, 1);
    if (!t->text_blob || !t->text_off || !t->scores || !t->attr || !t->eog ||
        map_init(&t->tok_map, (size_t)n) != 0) {
        wf_errorf(err, errlen, "out of memory loading the vocabulary");
        goto fail;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t len = d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
        t->text_off[i] = (uint32_t)off;
        if (len == 0) /* llama.cpp renames empty tokens */
            off += (size_t)sprintf(t->text_blob + off, "[EMPTY_%d]", i);
        else {
            memcpy(t->text_blob + off, d->tokens[i], len);
            off += len;
        }
        t->text_off[i + 1] = (uint32_t)off;
        if (t->text_off[i + 1] - t->text_off[i] > t->max_token_len)
            t->max_token_len = t->text_off[i + 1] - t->text_off[i];
        t->scores[i] = d->scores ? d->scores[i] : 0.0f;
        int tt = d->token_types ? d->token_types[i] : 1;
        static const uint16_t k_attr[] = {WF_TOKA_UNDEFINED, WF_TOKA_NORMAL, WF_TOKA_UNKNOWN,
                                          WF_TOKA_CONTROL, WF_TOKA_USER_DEFINED, WF_TOKA_UNUSED,
                                          WF_TOKA_BYTE};
        t->attr[i] = (tt >= 0 && tt <= 6) ? k_attr[tt] : WF_TOKA_UNDEFINED;
        size_t tl;
        const char *txt = wf_tok_text(t, i, &tl);
        if (wf_tok_lookup(t, txt, tl) >= 0) {
            char tmp[96];
            snprintf(tmp, sizeof tmp, "%.*s", (int)(tl < 60 ? tl : 60), txt);
            wf_errorf(err, errlen, "tokenizer.ggml.tokens: duplicate token '%s'", tmp);
            st = WF_EFORMAT;
            goto fail;
        }
        uint32_t h = (uint32_t)wf_tok_hash(txt, tl) & t->tok_map.mask;
        while (t->tok_map.slots[h] >= 0)
            h = (h + 1) & t->tok_map.mask;
        t->tok_map.slots[h] = i;
    }

    if (t->type == WF_TOK_BPE) {
        st = load_merges(t, d, err, errlen);
        if (st != WF_OK)
            goto fail;
    }

    /* special ids: defaults out of range are disabled; bad metadata keeps the default */
    for (int i = 0; i < WF_TOKSLOT_COUNT; i++) {
        if (slots[i] >= n)
            slots[i] = -1;
        if (d->slots[i] >= 0 && d->slots[i] < n)
            slots[i] = (int32_t)d->slots[i];
    }
    if (d->add_bos >= 0)
        t->add_bos = d->add_bos != 0;
    if (d->add_eos >= 0)
        t->add_eos = d->add_eos != 0;
    if (t->add_bos && slots[WF_TOKSLOT_BOS] < 0) {
        wf_errorf(err, errlen, "tokenizer.ggml.add_bos_token is true but there is no BOS token");
        st = WF_EFORMAT;
        goto fail;
    }
    if (t->add_eos && slots[WF_TOKSLOT_EOS] < 0) {
        wf_errorf(err, errlen, "tokenizer.ggml.add_eos_token is true but there is no EOS token");
        st = WF_EFORMAT;
        goto fail;
    }

    /* text-based detection of unset slots, then the EOG set (llama.cpp's load order) */
    detect_slot(t, &slots[WF_TOKSLOT_EOT], k_eot_names);
    detect_slot(t, &slots[WF_TOKSLOT_EOM], k_eom_names);
    detect_slot(t, &slots[WF_TOKSLOT_FIM_PRE], k_fim_pre_names);
    detect_slot(t, &slots[WF_TOKSLOT_FIM_SUF], k_fim_suf_names);
    detect_slot(t, &slots[WF_TOKSLOT_FIM_MID], k_fim_mid_names);
    detect_slot(t, &slots[WF_TOKSLOT_FIM_PAD], k_fim_pad_names);
    detect_slot(t, &slots[WF_TOKSLOT_FIM_REP], k_fim_rep_names);
    detect_slot(t, &slots[WF_TOKSLOT_FIM_SEP], k_fim_sep_names);
    for (int32_t id = 0; id < n; id++) {
        size_t tl;
        const char *txt = wf_tok_text(t, id, &tl);
        if ((t->attr[id] & WF_TOKA_CONTROL) && memmem(txt, tl, "unused", 6))
            t->attr[id] |= WF_TOKA_UNUSED;
    }
    static const int eog_slots[] = {WF_TOKSLOT_FIM_PAD, WF_TOKSLOT_FIM_REP, WF_TOKSLOT_FIM_SEP,
                                    WF_TOKSLOT_EOS, WF_TOKSLOT_EOT, WF_TOKSLOT_EOM};
    for (size_t i = 0; i < sizeof eog_slots / sizeof eog_slots[0]; i++)
        if (slots[eog_slots[i]] >= 0)
            t->eog[slots[eog_slots[i]]] = 1;
    for (int i = 0; k_eog_names[i]; i++) {
        int32_t id = find_text(t, k_eog_names[i]);
        if (id >= 0) {
            t->eog[id] = 1;
            t->attr[id] |= WF_TOKA_CONTROL;
        }
    }
    static const char *const k_always_rendered[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                    "<|constrain|>"}; /* gpt-oss */
    for (size_t i = 0; i < sizeof k_always_rendered / sizeof k_always_rendered[0]; i++) {
        int32_t id = find_text(t, k_always_rendered[i]);
        if (id >= 0)
            t->attr[id] = WF_TOKA_USER_DEFINED;
    }
    /* o200k_harmony / solar-open: <|end|> separates messages; gemma4: </s> is text */
    int32_t end_id = find_text(t, "<|end|>"), s_id = find_text(t, "</s>");
    bool has_return = false, has_call = false, has_flush = false, has_tool_response = false;
#define EOG_HAS(name) (find_text(t, name) >= 0 && t->eog[find_text(t, name)])
    has_return = EOG_HAS("<|return|>");
    has_call = EOG_HAS("<|call|>") || EOG_HAS("<|calls|>");
    has_flush = EOG_HAS("<|flush|>");
    has_tool_response = EOG_HAS("<|tool_response>");
#undef EOG_HAS
    if (end_id >= 0 && !t->eog[end_id])
        end_id = -1;
    if (s_id >= 0 && !t->eog[s_id])
        s_id = -1;
    if (end_id >= 0 && ((has_return && has_call) || (has_call && has_flush))) {
        t->eog[end_id] = 0;
        t->attr[end_id] = WF_TOKA_USER_DEFINED;
    }
    if (s_id >= 0 && has_tool_response) {
        t->eog[s_id] = 0;
        t->attr[s_id] = WF_TOKA_NORMAL;
    }
    t->bos = slots[WF_TOKSLOT_BOS];
    t->eos = slots[WF_TOKSLOT_EOS];
    t->eot = slots[WF_TOKSLOT_EOT];
    t->eom = slots[WF_TOKSLOT_EOM];
    t->unk = slots[WF_TOKSLOT_UNK];

    /* special tokens, longest first: they are matched in this order when partitioning */
    t->special = malloc((size_t)n * sizeof *t->special);
    if (!t->special) {
        wf_errorf(err, errlen, "out of memory");
        st = WF_ENOMEM;
        goto fail;
    }
    for (int32_t id = 0; id < n; id++)
        if (t->attr[id] & (WF_TOKA_CONTROL | WF_TOKA_USER_DEFINED | WF_TOKA_UNKNOWN))
            t->special[t->n_special++] = id;
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);

    /* BPE: the token of each byte's GPT-2 character (initial BPE symbols) */
    for (int b = 0; b < 256; b++) {
        char e[4];
        int en = wf_utf8_encode(wf_gpt2_byte_to_cp((uint8_t)b), e);
        t->byte_sym[b] = wf_tok_lookup(t, e, (size_t)en);
    }

    /* SPM byte fallback ids */
    for (int b = 0; b < 256; b++) {
        char hex[7];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int32_t id = wf_tok_lookup(t, hex, 6);
        if (id < 0) {
            char c = (char)b;
            id = wf_tok_lookup(t, &c, 1);
        }
        t->byte_tok[b] = id;
    }

    st = build_pieces(t, err, errlen);
    if (st != WF_OK)
        goto fail;
    apply_model_attrs(t, d->name);
    *out = t;
    return WF_OK;

fail:
    wf_tokenizer_free(t);
    return st;
}

void wf_tokenizer_free(wf_tokenizer *t) {
    if (!t)
        return;
    free(t->text_blob);
    free(t->text_off);
    free(t->scores);
    free(t->attr);
    free(t->eog);
    free(t->tok_map.slots);
    free(t->merge_blob);
    free(t->merge_off);
    free(t->merge_llen);
    free(t->merge_rlen);
    free(t->merge_map.slots);
    free(t->merge_res);
    free(t->pair_slots);
    free(t->piece_blob);
    free(t->piece_off);
    free(t->special);
    free(t);
}

/* ---- GGUF ------------------------------------------------------------------------------ */

static bool gguf_get_flag(const wf_gguf *g, const char *key, int *out) {
    bool b;
    if (!wf_gguf_get_bool(g, key, &b))
        return false;
    *out = b;
    return true;
}

wf_status wf_tokenizer_from_gguf(const wf_gguf *g, wf_tokenizer **out, char *err, size_t errlen) {
    return wf_tok_from_gguf_pre(g, NULL, out, err, errlen);
}

wf_status wf_tok_from_gguf_pre(const wf_gguf *g, const char *pre_override, wf_tokenizer **out,
                               char *err, size_t errlen) {
    if (!g || !out)
        return WF_EINVAL;
    *out = NULL;
    wf_status st = WF_EFORMAT;
    wf_tokenizer_desc d;
    wf_tokenizer_desc_init(&d);
    char model[32] = "", pre[64] = "";
    const char **tokens = NULL, **merges = NULL;
    uint32_t *tok_lens = NULL, *merge_lens = NULL;
    float *scores = NULL;
    int32_t *types = NULL;

    wf_gguf_str s;
    if (!wf_gguf_get_str(g, "tokenizer.ggml.model", &s)) {
        wf_errorf(err, errlen, "tokenizer.ggml.model: missing");
        return WF_EFORMAT;
    }
    snprintf(model, sizeof model, "%.*s", (int)(s.len < 31 ? s.len : 31), s.data);
    d.model = model;
    if (wf_gguf_get_str(g, "tokenizer.ggml.pre", &s)) {
        snprintf(pre, sizeof pre, "%.*s", (int)(s.len < 63 ? s.len : 63), s.data);
        d.pre = pre;
    }
    if (pre_override)
        d.pre = pre_override;
    char name[256];
    if (wf_gguf_get_str(g, "general.name", &s)) {
        snprintf(name, sizeof name, "%.*s", (int)(s.len < 255 ? s.len : 255), s.data);
        d.name = name;
    }

    wf_gguf_value_type et;
    uint64_t n;
    const void *data;
    if (!wf_gguf_get_array(g, "tokenizer.ggml.tokens", &et, &n, &data) || et != WF_GGUF_STRING ||
        n == 0 || n > (1u << 30)) {
        wf_errorf(err, errlen, "tokenizer.ggml.tokens: missing or not an array of strings");
        return WF_EFORMAT;
    }
    d.n_vocab = (int)n;
    tokens = malloc(n * sizeof *tokens);
    tok_lens = malloc(n * sizeof *tok_lens);
    if (!tokens || !tok_lens) {
        st = WF_ENOMEM;
        wf_errorf(err, errlen, "out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (!wf_gguf_get_array_str(g, "tokenizer.ggml.tokens", i, &s) || s.len > (1u << 20)) {
            wf_errorf(err, errlen, "tokenizer.ggml.tokens: bad element");
            goto done;
        }
        tokens[i] = s.data;
        tok_lens[i] = (uint32_t)s.len;
    }
    d.tokens = tokens;
    d.token_lens = tok_lens;

    uint64_t m;
    if (wf_gguf_get_array(g, "tokenizer.ggml.scores", &et, &m, &data)) {
        if ((et != WF_GGUF_FLOAT32 && et != WF_GGUF_INT32) || m < n) {
            wf_errorf(err, errlen, "tokenizer.ggml.scores: bad type or length");
            goto done;
        }
        scores = malloc(n * sizeof *scores);
        if (!scores) {
            st = WF_ENOMEM;
            goto done;
        }
        for (uint64_t i = 0; i < n; i++) {
            if (et == WF_GGUF_FLOAT32) {
                memcpy(&scores[i], (const char *)data + 4 * i, 4);
            } else {
                int32_t v;
                memcpy(&v, (const char *)data + 4 * i, 4);
                scores[i] = (float)v;
            }
        }
        d.scores = scores;
    }
    if (wf_gguf_get_array(g, "tokenizer.ggml.token_type", &et, &m, &data)) {
        if (et != WF_GGUF_INT32 || m < n) {
            wf_errorf(err, errlen, "tokenizer.ggml.token_type: bad type or length");
            goto done;
        }
        types = malloc(n * sizeof *types);
        if (!types) {
            st = WF_ENOMEM;
            goto done;
        }
        memcpy(types, data, n * sizeof *types);
        d.token_types = types;
    }
    if (strcmp(model, "gpt2") == 0) {
        if (!wf_gguf_get_array(g, "tokenizer.ggml.merges", &et, &m, &data) || et != WF_GGUF_STRING ||
            m > (1u << 30)) {
            wf_errorf(err, errlen, "tokenizer.ggml.merges: missing or not an array of strings");
            goto done;
        }
        merges = malloc((m ? m : 1) * sizeof *merges);
        merge_lens = malloc((m ? m : 1) * sizeof *merge_lens);
        if (!merges || !merge_lens) {
            st = WF_ENOMEM;
            goto done;
        }
        for (uint64_t i = 0; i < m; i++) {
            if (!wf_gguf_get_array_str(g, "tokenizer.ggml.merges", i, &s) || s.len > 0xFFFF) {
                wf_errorf(err, errlen, "tokenizer.ggml.merges: bad element");
                goto done;
            }
            merges[i] = s.data;
            merge_lens[i] = (uint32_t)s.len;
        }
        d.n_merges = (int)m;
        d.merges = merges;
        d.merge_lens = merge_lens;
    }

    static const struct { const char *key; int slot; } k_keys[] = {
        {"tokenizer.ggml.bos_token_id", WF_TOKSLOT_BOS},
        {"tokenizer.ggml.eos_token_id", WF_TOKSLOT_EOS},
        {"tokenizer.ggml.eot_token_id", WF_TOKSLOT_EOT},
        {"tokenizer.ggml.eom_token_id", WF_TOKSLOT_EOM},
        {"tokenizer.ggml.unknown_token_id", WF_TOKSLOT_UNK},
        {"tokenizer.ggml.seperator_token_id", WF_TOKSLOT_SEP},
        {"tokenizer.ggml.padding_token_id", WF_TOKSLOT_PAD},
        {"tokenizer.ggml.mask_token_id", WF_TOKSLOT_MASK},
        {"tokenizer.ggml.fim_pre_token_id", WF_TOKSLOT_FIM_PRE},
        {"tokenizer.ggml.fim_suf_token_id", WF_TOKSLOT_FIM_SUF},
        {"tokenizer.ggml.fim_mid_token_id", WF_TOKSLOT_FIM_MID},
        {"tokenizer.ggml.fim_pad_token_id", WF_TOKSLOT_FIM_PAD},
        {"tokenizer.ggml.fim_rep_token_id", WF_TOKSLOT_FIM_REP},
        {"tokenizer.ggml.fim_sep_token_id", WF_TOKSLOT_FIM_SEP},
        /* deprecated spellings, read last as llama.cpp does */
        {"tokenizer.ggml.prefix_token_id", WF_TOKSLOT_FIM_PRE},
        {"tokenizer.ggml.suffix_token_id", WF_TOKSLOT_FIM_SUF},
        {"tokenizer.ggml.middle_token_id", WF_TOKSLOT_FIM_MID},
    };
    for (size_t i = 0; i < sizeof k_keys / sizeof k_keys[0]; i++) {
        uint32_t v;
        if (wf_gguf_get_u32(g, k_keys[i].key, &v) && v < n)
            d.slots[k_keys[i].slot] = v;
    }
    gguf_get_flag(g, "tokenizer.ggml.add_bos_token", &d.add_bos);
    gguf_get_flag(g, "tokenizer.ggml.add_eos_token", &d.add_eos);
    gguf_get_flag(g, "tokenizer.ggml.add_space_prefix", &d.add_space_prefix);

    st = wf_tokenizer_new(&d, out, err, errlen);
done:
    free(tokens);
    free(tok_lens);
    free(merges);
    free(merge_lens);
    free(scores);
    free(types);
    return st;
}

/* ---- queries --------------------------------------------------------------------------- */

int wf_tokenizer_n_vocab(const wf_tokenizer *t) { return t->n_vocab; }
int32_t wf_tokenizer_bos(const wf_tokenizer *t) { return t->bos; }
int32_t wf_tokenizer_eos(const wf_tokenizer *t) { return t->eos; }
bool wf_tokenizer_add_bos(const wf_tokenizer *t) { return t->add_bos; }
bool wf_tokenizer_add_eos(const wf_tokenizer *t) { return t->add_eos; }
int wf_tokenizer_max_detok_output(const wf_tokenizer *t) { return t->max_detok_out; }

bool wf_tokenizer_is_eog(const wf_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

bool wf_tokenizer_is_control(const wf_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->attr[id] & WF_TOKA_CONTROL);
}

const char *wf_tokenizer_token_text(const wf_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    size_t l;
    const char *s = wf_tok_text(t, id, &l);
    if (len)
        *len = l;
    return s;
}

/* ---- encode ---------------------------------------------------------------------------- */

typedef struct frag {
    int32_t token; /* -1: raw text [off, off + len) */
    size_t off, len;
} frag;

typedef struct frag_list {
    frag *v;
    size_t n, cap;
} frag_list;

static int frag_push(frag_list *l, int32_t token, size_t off, size_t len) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        frag *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (frag){token, off, len};
    return 0;
}

static inline bool is_c_space(char c) { /* isspace() in the C locale */
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Splits raw fragments at every occurrence of each special token, longest token first
 * (llama.cpp's tokenizer_st_partition). Control/unknown tokens only when parse_special;
 * user-defined tokens always. */
static int partition(const wf_tokenizer *t, const char *text, size_t len, bool parse_special,
                     frag_list *cur) {
    frag_list next = {0};
    if (frag_push(cur, -1, 0, len) != 0)
        return -1;
    /* Which byte pairs occur in the text: a special token whose first two bytes never occur
     * cannot match, so vocabularies with thousands of special tokens stay cheap. */
    uint64_t pairs[65536 / 64];
    memset(pairs, 0, sizeof pairs);
    for (size_t i = 0; i + 1 < len; i++) {
        unsigned p = (unsigned)(uint8_t)text[i] << 8 | (uint8_t)text[i + 1];
        pairs[p >> 6] |= 1ull << (p & 63);
    }
    for (int si = 0; si < t->n_special; si++) {
        int32_t id = t->special[si];
        if (!parse_special && (t->attr[id] & (WF_TOKA_CONTROL | WF_TOKA_UNKNOWN)))
            continue;
        size_t sl;
        const char *st = wf_tok_text(t, id, &sl);
        if (sl > len)
            continue;
        if (sl >= 2) {
            unsigned p = (unsigned)(uint8_t)st[0] << 8 | (uint8_t)st[1];
            if (!(pairs[p >> 6] & (1ull << (p & 63))))
                continue;
        }
        bool any = false;
        for (size_t i = 0; i < cur->n && !any; i++)
            if (cur->v[i].token < 0 && cur->v[i].len >= sl &&
                memmem(text + cur->v[i].off, cur->v[i].len, st, sl))
                any = true;
        if (!any)
            continue;
        next.n = 0;
        for (size_t i = 0; i < cur->n; i++) {
            frag f = cur->v[i];
            if (f.token >= 0) {
                if (frag_push(&next, f.token, 0, 0) != 0)
                    goto oom;
                continue;
            }
            size_t pos = f.off, end = f.off + f.len;
            while (pos < end) {
                const char *m = end - pos >= sl ? memmem(text + pos, end - pos, st, sl) : NULL;
                if (!m) {
                    if (frag_push(&next, -1, pos, end - pos) != 0)
                        goto oom;
                    break;
                }
                size_t mo = (size_t)(m - text), left_end = mo;
                if (t->attr[id] & WF_TOKA_LSTRIP)
                    while (left_end > pos && is_c_space(text[left_end - 1]))
                        left_end--;
                if (left_end > pos && frag_push(&next, -1, pos, left_end - pos) != 0)
                    goto oom;
                if (frag_push(&next, id, 0, 0) != 0)
                    goto oom;
                pos = mo + sl;
                if (t->attr[id] & WF_TOKA_RSTRIP)
                    while (pos < end && is_c_space(text[pos]))
                        pos++;
            }
        }
        frag_list tmp = *cur;
        *cur = next;
        next = tmp;
    }
    free(next.v);
    return 0;
oom:
    free(next.v);
    return -1;
}

wf_status wf_tokenizer_encode(const wf_tokenizer *t, const char *text, size_t len, bool add_special,
                              bool parse_special, int32_t *out, int cap, int *n_out) {
    if (!t || (!text && len) || cap < 0 || (!out && cap > 0) || !n_out)
        return WF_EINVAL;
    if (len > (size_t)INT32_MAX / 2) /* ids are counted in an int: at most len + 2 of them */
        return WF_ERANGE;
    wf_tok_out o = {out, cap, 0};
    frag_list frags = {0};
    wf_status st = WF_OK;
    if (len > 0 && partition(t, text, len, parse_special, &frags) != 0) {
        st = WF_ENOMEM;
        goto done;
    }
    if (add_special && t->add_bos)
        wf_tok_emit(&o, t->bos);
    bool prev_special = true; /* SPM: a space is prefixed to text after a special token */
    for (size_t i = 0; i < frags.n; i++) {
        frag f = frags.v[i];
        if (f.token >= 0) {
            wf_tok_emit(&o, f.token);
            prev_special = true;
            continue;
        }
        if (t->type == WF_TOK_SPM)
            st = wf_tok_spm_encode(t, text + f.off, f.len, t->add_space_prefix && prev_special, &o);
        else
            st = wf_tok_bpe_encode(t, text + f.off, f.len, &o);
        if (st != WF_OK)
            goto done;
        prev_special = false;
    }
    if (add_special && t->add_eos)
        wf_tok_emit(&o, t->eos);
done:
    free(frags.v);
    *n_out = o.n;
    return st;
}

/* ---- pieces and decoding ----------------------------------------------------------------- */

static const char *piece_of(const wf_tokenizer *t, int32_t id, bool render_special, size_t *len) {
    if (id < 0 || id >= t->n_vocab ||
        (!render_special && (t->attr[id] & (WF_TOKA_CONTROL | WF_TOKA_UNKNOWN)))) {
        *len = 0;
        return "";
    }
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->piece_blob + t->piece_off[id];
}

int wf_tokenizer_token_to_piece(const wf_tokenizer *t, int32_t id, bool render_special, char *buf,
                                int cap) {
    size_t n;
    const char *p = piece_of(t, id, render_special, &n);
    if (n > (size_t)(cap < 0 ? 0 : cap))
        return -(int)n;
    if (n)
        memcpy(buf, p, n);
    return (int)n;
}

/* llama.cpp's clean_up_tokenization_spaces passes, in place; returns the new length. */
static size_t clean_spaces(char *s, size_t total) {
    size_t n = total ? 1 : 0;
    for (size_t i = 1; i < total; i++) { /* " ?", " !", " .", " ," */
        char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            n--;
        s[n++] = x;
    }
    total = n;
    n = total ? 1 : 0;
    for (size_t i = 1; i < total; i++) { /* " ' " -> "'" */
        char x = s[i];
        if (x == '\'' && i + 1 < total && s[i - 1] == ' ' && s[i + 1] == ' ') {
            n--;
            s[++i] = '\0';
        }
        s[n++] = x;
    }
    total = n;
    n = total ? 1 : 0;
    for (size_t i = 1; i < total; i++) { /* " 's", " 'm", " 're", " 've" */
        char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < total) {
            char x1 = s[i + 1];
            if (x1 == 's' || x1 == 'm')
                n--;
            else if (i + 2 < total && ((x1 == 'r' && s[i + 2] == 'e') || (x1 == 'v' && s[i + 2] == 'e')))
                n--;
        }
        s[n++] = x;
    }
    return n;
}

int wf_tokenizer_decode(const wf_tokenizer *t, const int32_t *ids, int n, bool render_special,
                        char *buf, int cap) {
    size_t total = 0, avail = cap > 0 ? (size_t)cap : 0;
    bool remove_space = t->add_space_prefix;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *p = piece_of(t, ids[i], render_special, &len);
        if (remove_space && len && p[0] == ' ') {
            p++;
            len--;
        }
        remove_space = false;
        if (len && total + len <= avail)
            memcpy(buf + total, p, len);
        total += len;
    }
    if (total > avail)
        return -(int)total;
    if (t->clean_spaces)
        total = clean_spaces(buf, total);
    return (int)total;
}

/* ---- streaming detokenizer ------------------------------------------------------------ */

void wf_detokenizer_init(wf_detokenizer *d, const wf_tokenizer *t) {
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->first = true;
}

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

typedef struct sink {
    char *out;
    int cap, n;
} sink;

static void sink_put(sink *s, const char *p, int n) {
    if (s->n + n > s->cap)
        return; /* never split a character: drop it whole */
    memcpy(s->out + s->n, p, (size_t)n);
    s->n += n;
}

/* Emits the complete characters of p[0..n), replacing invalid subparts with U+FFFD, and
 * returns how many trailing bytes form an incomplete (possibly valid) sequence. */
static size_t emit_valid(sink *s, const char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && (uint8_t)p[run] < 0x80)
            run++;
        if (run > i) {
            sink_put(s, p + i, (int)(run - i));
            i = run;
            continue;
        }
        int k = wf_utf8_check(p + i, n - i);
        if (k > 0) {
            sink_put(s, p + i, k);
            i += (size_t)k;
        } else if (k == 0) {
            return n - i;
        } else {
            sink_put(s, k_fffd, 3);
            i += (size_t)-k;
        }
    }
    return 0;
}

int wf_detokenizer_push(wf_detokenizer *d, int32_t id, char *out, int cap) {
    sink s = {out, cap, 0};
    size_t n;
    const char *p = piece_of(d->tok, id, false, &n);
    d->first = false;
    /* complete the pending prefix with as few bytes of p as needed */
    size_t used = 0;
    while (d->n_pending > 0 && used < n) {
        d->pending[d->n_pending++] = p[used++];
        int k = wf_utf8_check(d->pending, (size_t)d->n_pending);
        if (k == 0)
            continue;
        int np = d->n_pending;
        d->n_pending = 0;
        if (k > 0) {
            sink_put(&s, d->pending, k);
        } else {
            /* replace the invalid subpart, then re-scan what followed it */
            sink_put(&s, k_fffd, 3);
            size_t rest = (size_t)(np + k);
            char tmp[8];
            memcpy(tmp, d->pending - k, rest);
            size_t tail = emit_valid(&s, tmp, rest);
            memcpy(d->pending, tmp + rest - tail, tail);
            d->n_pending = (int)tail;
        }
    }
    size_t tail = emit_valid(&s, p + used, n - used);
    if (tail) { /* tail < 4 and pending is empty here (it was consumed above) */
        memcpy(d->pending + d->n_pending, p + n - tail, tail);
        d->n_pending += (int)tail;
    }
    return s.n;
}

int wf_detokenizer_flush(wf_detokenizer *d, char *out, int cap) {
    sink s = {out, cap, 0};
    if (d->n_pending > 0)
        sink_put(&s, k_fffd, 3); /* an incomplete sequence at the end is one U+FFFD */
    d->n_pending = 0;
    return s.n;
}
