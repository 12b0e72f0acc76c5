/* Byte-level BPE: llama.cpp's pre-tokenizer regexes as hand-written matchers over codepoint
 * category flags, GPT-2 byte-to-unicode encoding of each word, then rank-ordered merges with
 * a binary heap (O(n log n) per word, so long words and whitespace runs stay cheap).
 *
 * The matchers reproduce llama.cpp's unicode_regex_split: each regex of a pre-tokenizer's
 * chain splits every piece produced by the previous one, and the lookahead of \s+(?!\S)
 * never sees past the end of the current piece. */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer_impl.h"
#include "engine/unicode.h"

#define OOR 0xFFFFFFFFu

/* ---- pre-tokenizer matchers --------------------------------------------------------------
 * Each takes the codepoints, their flags, and input piece lengths (in codepoints), and writes
 * output piece lengths; returns the output count (<= number of codepoints). */

typedef struct splitter {
    const uint32_t *cp;
    const uint16_t *fl;
    uint32_t *out;
    size_t n_out;
    size_t prev; /* end of the last emitted piece */
} splitter;

static inline void add_piece(splitter *s, size_t end) {
    if (end > s->prev)
        s->out[s->n_out++] = (uint32_t)(end - s->prev);
    s->prev = end;
}

static inline uint16_t fl_at(const uint16_t *fl, size_t p, size_t end) { return p < end ? fl[p] : 0; }
static inline uint32_t cp_at(const uint32_t *cp, size_t p, size_t end) { return p < end ? cp[p] : OOR; }

#define L_ WF_UCF_LETTER
#define N_ WF_UCF_NUMBER
#define WS_ WF_UCF_WHITESPACE

/* The whitespace alternatives every pattern ends with: \s*[\r\n]+ (when crlf_runs), then
 * \s+(?!\S) (a run followed by more text leaves its last space to the next piece), then \s+.
 * Emits one piece starting at pos and returns where it ends. */
static size_t split_whitespace(splitter *s, size_t pos, size_t end, bool crlf_runs) {
    size_t nws = 0, last_rn = 0;
    while (pos + nws < end && (s->fl[pos + nws] & WS_)) {
        if (s->cp[pos + nws] == '\r' || s->cp[pos + nws] == '\n')
            last_rn = pos + nws + 1;
        nws++;
    }
    if (crlf_runs && last_rn > 0)
        pos = last_rn;
    else if (nws > 1 && pos + nws < end)
        pos += nws - 1;
    else
        pos += nws > 0 ? nws : 1; /* 1: a lone codepoint no alternative took (never for \s) */
    add_piece(s, pos);
    return pos;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(splitter *s, size_t ini, size_t end) {
    const uint32_t *cp = s->cp;
    const uint16_t *fl = s->fl;
/* flags / codepoint at p, 0 / OOR past the end of the piece (the regex sees nothing there) */
#define FL(p) fl_at(fl, (p), end)
#define CP(p) cp_at(cp, (p), end)
    size_t pos = ini;
    s->prev = ini;
    while (pos < end) {
        uint32_t c = cp[pos];
        uint16_t f = fl[pos];
        if (c == '\'' && pos + 1 < end) {
            uint32_t c1 = cp[pos + 1];
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                pos += 2;
                add_piece(s, pos);
                continue;
            }
            if (pos + 2 < end) {
                uint32_t c2 = cp[pos + 2];
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    pos += 3;
                    add_piece(s, pos);
                    continue;
                }
            }
        }
        uint16_t f2 = c == ' ' ? FL(pos + 1) : f;
        if (f2 & L_) {
            pos += c == ' ';
            while (f2 & L_)
                f2 = FL(++pos);
            add_piece(s, pos);
            continue;
        }
        if (f2 & N_) {
            pos += c == ' ';
            while (f2 & N_)
                f2 = FL(++pos);
            add_piece(s, pos);
            continue;
        }
        if (!(f2 & (WS_ | L_ | N_)) && f2) {
            pos += c == ' ';
            while (!(f2 & (WS_ | L_ | N_)) && f2)
                f2 = FL(++pos);
            add_piece(s, pos);
            continue;
        }
        pos = split_whitespace(s, pos, end, false);
    }
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (llama3: 3 digits, qwen2: 1) */
static void split_llama3(splitter *s, size_t ini, size_t end, size_t max_digits) {
    const uint32_t *cp = s->cp;
    const uint16_t *fl = s->fl;
    size_t pos = ini;
    s->prev = ini;
    while (pos < end) {
        uint32_t c = cp[pos];
        uint16_t f = fl[pos];
        if (c == '\'' && pos + 1 < end) {
            uint32_t c1 = wf_unicode_tolower_ascii(cp[pos + 1]);
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                pos += 2;
                add_piece(s, pos);
                continue;
            }
            if (pos + 2 < end) {
                uint32_t c2 = wf_unicode_tolower_ascii(cp[pos + 2]);
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    pos += 3;
                    add_piece(s, pos);
                    continue;
                }
            }
        }
        if (!(c == '\r' || c == '\n' || (f & N_))) {
            if ((f & L_) || (FL(pos + 1) & L_)) {
                pos++;
                while (FL(pos) & L_)
                    pos++;
                add_piece(s, pos);
                continue;
            }
        }
        if (f & N_) {
            size_t start = pos;
            while (FL(pos) & N_) {
                if (++pos - start >= max_digits) {
                    add_piece(s, pos);
                    start = pos;
                }
            }
            add_piece(s, pos);
            continue;
        }
        uint16_t f2 = c == ' ' ? FL(pos + 1) : f;
        if (!(f2 & (WS_ | L_ | N_)) && f) {
            pos += c == ' ';
            while (!(f2 & (WS_ | L_ | N_)) && f2)
                f2 = FL(++pos);
            uint32_t c2 = CP(pos);
            while (c2 == '\r' || c2 == '\n')
                c2 = CP(++pos);
            add_piece(s, pos);
            continue;
        }
        pos = split_whitespace(s, pos, end, true);
    }
#undef FL
#undef CP
}

/* The GPT-4o / tekken regexes as llama.cpp runs them: std::regex over "collapsed" text, where
 * case exists only for ASCII (a non-ASCII letter is both "upper" and "lower") and marks end a
 * word:
 *   [^\r\n\p{L}\p{N}]?((?=\p{L})[^a-z])*((?=\p{L})[^A-Z])+(contraction)?
 *  |[^\r\n\p{L}\p{N}]?((?=\p{L})[^a-z])+((?=\p{L})[^A-Z])*(contraction)?
 *  |\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * (gpt-4o: contractions, 3 digits; tekken: no contractions, 1 digit). The first two
 * alternatives are resolved the way ECMAScript backtracking resolves them. */
static inline bool o_letter(const splitter *s, size_t p, size_t end) {
    return p < end && (s->fl[p] & L_) && !(s->fl[p] & WS_);
}
static inline bool o_upper(const splitter *s, size_t p, size_t end) { /* (?=\p{L})[^a-z] */
    return o_letter(s, p, end) && !(s->cp[p] >= 'a' && s->cp[p] <= 'z');
}
static inline bool o_lower(const splitter *s, size_t p, size_t end) { /* (?=\p{L})[^A-Z] */
    return o_letter(s, p, end) && !(s->cp[p] >= 'A' && s->cp[p] <= 'Z');
}
static inline bool o_number(const splitter *s, size_t p, size_t end) {
    if (p >= end)
        return false;
    uint32_t c = s->cp[p];
    return c < 0x80 ? (c >= '0' && c <= '9') : ((s->fl[p] & N_) && !(s->fl[p] & WS_));
}

/* (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])? at p: its length (0 if none). */
static size_t o_contraction(const splitter *s, size_t p, size_t end) {
    if (p + 1 >= end || s->cp[p] != '\'')
        return 0;
    uint32_t c1 = s->cp[p + 1] < 0x80 ? wf_unicode_tolower_ascii(s->cp[p + 1]) : 0;
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return 2;
    if (p + 2 >= end)
        return 0;
    uint32_t c2 = s->cp[p + 2] < 0x80 ? wf_unicode_tolower_ascii(s->cp[p + 2]) : 0;
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        return 3;
    return 0;
}

static void split_o200k(splitter *s, size_t ini, size_t end, bool contractions, size_t max_digits) {
    const uint32_t *cp = s->cp;
    const uint16_t *fl = s->fl;
    size_t pos = ini;
    s->prev = ini;
    while (pos < end) {
        uint32_t c = cp[pos];
        bool has_pre = c != '\r' && c != '\n' && !o_letter(s, pos, end) && !o_number(s, pos, end);
        size_t e = 0;
        /* alternative 1: prefix? upper* lower+ -- U* greedy, backtracked to the last position
         * where lower+ can start */
        for (int take = has_pre ? 1 : 0; take >= 0 && !e; take--) {
            size_t q = pos + (size_t)take, p = q;
            while (o_upper(s, p, end))
                p++;
            for (size_t u = p;; u--) {
                if (o_lower(s, u, end)) {
                    e = u;
                    while (o_lower(s, e, end))
                        e++;
                    break;
                }
                if (u == q)
                    break;
            }
        }
        /* alternative 2: prefix? upper+ lower* */
        for (int take = has_pre ? 1 : 0; take >= 0 && !e; take--) {
            size_t q = pos + (size_t)take, p = q;
            while (o_upper(s, p, end))
                p++;
            if (p > q) {
                e = p;
                while (o_lower(s, e, end))
                    e++;
            }
        }
        if (e) {
            if (contractions)
                e += o_contraction(s, e, end);
            pos = e;
            add_piece(s, pos);
            continue;
        }
        if (o_number(s, pos, end)) { /* \p{N}{1,max_digits} */
            size_t n = 0;
            while (n < max_digits && o_number(s, pos + n, end))
                n++;
            pos += n;
            add_piece(s, pos);
            continue;
        }
        /*  ?[^\s\p{L}\p{N}]+[\r\n/]* */
        size_t q = pos + (c == ' ' && pos + 1 < end ? 1 : 0);
#define O_OTHER(p) ((p) < end && !(fl[p] & WS_) && !o_letter(s, (p), end) && !o_number(s, (p), end))
        if (!O_OTHER(q))
            q = pos;
        if (O_OTHER(q)) {
            while (O_OTHER(q))
                q++;
            while (q < end && (cp[q] == '\r' || cp[q] == '\n' || cp[q] == '/'))
                q++;
            pos = q;
            add_piece(s, pos);
            continue;
        }
#undef O_OTHER
        pos = split_whitespace(s, pos, end, true);
    }
}

/* Character classes of the std::regex pieces of llama.cpp's chains, evaluated on its
 * "collapsed" text: ASCII stays itself, other codepoints become their category. */
enum cls { CLS_PUNCT_RUN, CLS_PUNCT_BT_RUN, CLS_NUMBER_RUN, CLS_NUMBER_SINGLE };

static inline bool in_class(enum cls k, uint32_t c, uint16_t f) {
    if (k == CLS_PUNCT_RUN || k == CLS_PUNCT_BT_RUN) {
        /* [\p{P}\$\+<=>\^~\|]: all ASCII punctuation but '`'; falcon's class adds '`' */
        if (c < 0x80)
            return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x5F) ||
                   (c >= 0x7B && c <= 0x7E) || (c == '`' && k == CLS_PUNCT_BT_RUN);
        return (f & WF_UCF_PUNCTUATION) && !(f & WS_);
    }
    if (c < 0x80) /* \p{N} */
        return c >= '0' && c <= '9';
    return (f & N_) && !(f & WS_);
}

/* Splits each piece into maximal runs of the class (or single members) and the gaps. */
static void split_class(splitter *s, size_t ini, size_t end, enum cls k) {
    size_t pos = ini;
    s->prev = ini;
    while (pos < end) {
        if (!in_class(k, s->cp[pos], s->fl[pos])) {
            pos++;
            continue;
        }
        add_piece(s, pos);
        pos++;
        if (k != CLS_NUMBER_SINGLE)
            while (pos < end && in_class(k, s->cp[pos], s->fl[pos]))
                pos++;
        add_piece(s, pos);
    }
    add_piece(s, end);
}

/* [0-9][0-9][0-9]: leftmost non-overlapping ASCII digit triples. */
static void split_digit3(splitter *s, size_t ini, size_t end) {
    const uint32_t *cp = s->cp;
    size_t pos = ini;
    s->prev = ini;
#define D(p) (cp[p] >= '0' && cp[p] <= '9')
    while (pos + 3 <= end) {
        if (D(pos) && D(pos + 1) && D(pos + 2)) {
            add_piece(s, pos);
            pos += 3;
            add_piece(s, pos);
        } else {
            pos++;
        }
    }
#undef D
    add_piece(s, end);
}

typedef enum step {
    STEP_GPT2, STEP_LLAMA3, STEP_QWEN2, STEP_GPT4O, STEP_TEKKEN, STEP_PUNCT, STEP_PUNCT_BT,
    STEP_NUM_RUN, STEP_NUM1, STEP_DIGIT3
} step;

static size_t run_step(step k, const uint32_t *cp, const uint16_t *fl, const uint32_t *in, size_t n_in,
                       uint32_t *out) {
    splitter s = {cp, fl, out, 0, 0};
    size_t start = 0;
    for (size_t i = 0; i < n_in; i++) {
        size_t ini = start, end = start + in[i];
        start = end;
        switch (k) {
        case STEP_GPT2: split_gpt2(&s, ini, end); break;
        case STEP_LLAMA3: split_llama3(&s, ini, end, 3); break;
        case STEP_QWEN2: split_llama3(&s, ini, end, 1); break;
        case STEP_GPT4O: split_o200k(&s, ini, end, true, 3); break;
        case STEP_TEKKEN: split_o200k(&s, ini, end, false, 1); break;
        case STEP_PUNCT: split_class(&s, ini, end, CLS_PUNCT_RUN); break;
        case STEP_PUNCT_BT: split_class(&s, ini, end, CLS_PUNCT_BT_RUN); break;
        case STEP_NUM_RUN: split_class(&s, ini, end, CLS_NUMBER_RUN); break;
        case STEP_NUM1: split_class(&s, ini, end, CLS_NUMBER_SINGLE); break;
        case STEP_DIGIT3: split_digit3(&s, ini, end); break;
        }
    }
    return s.n_out;
}

/* The regex chain of each pre-tokenizer family (llama.cpp's llm_tokenizer_bpe). */
static int chain_of(wf_tok_pre pre, step *steps) {
    switch (pre) {
    case WF_PRE_GPT2: steps[0] = STEP_GPT2; return 1;
    case WF_PRE_SMOLLM: steps[0] = STEP_NUM1; steps[1] = STEP_GPT2; return 2;
    case WF_PRE_LLAMA3: steps[0] = STEP_LLAMA3; return 1;
    case WF_PRE_QWEN2: steps[0] = STEP_QWEN2; return 1;
    case WF_PRE_GPT4O: steps[0] = STEP_GPT4O; return 1;
    case WF_PRE_TEKKEN: steps[0] = STEP_TEKKEN; return 1;
    case WF_PRE_FALCON: steps[0] = STEP_PUNCT_BT; steps[1] = STEP_GPT2; steps[2] = STEP_DIGIT3; return 3;
    case WF_PRE_DEFAULT: break;
    }
    steps[0] = STEP_PUNCT;
    steps[1] = STEP_GPT2;
    steps[2] = STEP_NUM_RUN;
    steps[3] = STEP_DIGIT3;
    return 4;
}

/* Decodes text into codepoints + flags and splits it into words (codepoint counts).
 * Returns the word count; *lens_out points into scratch a or b. */
static size_t pre_split(wf_tok_pre pre, const char *text, size_t len, uint32_t *cp, uint16_t *fl,
                        size_t *n_cp, uint32_t *a, uint32_t *b, uint32_t **lens_out) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t adv;
        cp[n] = wf_utf8_decode(text + i, len - i, &adv);
        fl[n] = wf_unicode_flags(cp[n]);
        n++;
        i += adv;
    }
    *n_cp = n;
    step steps[4];
    int ns = chain_of(pre, steps);
    a[0] = (uint32_t)n;
    size_t cnt = n ? 1 : 0;
    uint32_t *in = a, *out = b;
    for (int k = 0; k < ns; k++) {
        cnt = run_step(steps[k], cp, fl, in, cnt, out);
        uint32_t *tmp = in;
        in = out;
        out = tmp;
    }
    *lens_out = in;
    return cnt;
}

int wf_tok_pre_split(wf_tok_pre pre, const char *text, size_t len, size_t *lens) {
    uint32_t *cp = malloc((len + 1) * sizeof *cp);
    uint16_t *fl = malloc((len + 1) * sizeof *fl);
    uint32_t *a = malloc((len + 1) * sizeof *a), *b = malloc((len + 1) * sizeof *b);
    int ret = -1;
    if (!cp || !fl || !a || !b)
        goto done;
    size_t n_cp;
    uint32_t *w;
    size_t nw = pre_split(pre, text, len, cp, fl, &n_cp, a, b, &w);
    size_t c = 0;
    for (size_t i = 0; i < nw; i++) {
        size_t bytes = 0;
        for (uint32_t k = 0; k < w[i]; k++) {
            char u[4];
            bytes += (size_t)wf_utf8_encode(cp[c++], u);
        }
        lens[i] = bytes;
    }
    ret = (int)nw;
done:
    free(cp);
    free(fl);
    free(a);
    free(b);
    return ret;
}

/* ---- merges ------------------------------------------------------------------------------ */

typedef struct sym {
    int32_t prev, next;
    uint32_t off, n;
    int32_t id; /* token of this symbol's text, -1 if it is not a token */
} sym;

static inline bool bigram_before(const wf_tok_bigram *x, const wf_tok_bigram *y) {
    return x->key < y->key || (x->key == y->key && x->left < y->left);
}

void wf__tok_heap_push(wf_tok_heap *h, wf_tok_bigram b) {
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
}

wf_tok_bigram wf__tok_heap_pop(wf_tok_heap *h) {
    wf_tok_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bigram_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!bigram_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n)
        h->v[i] = last;
    return top;
}

static void try_bigram(const wf_tokenizer *t, const char *w, const sym *syms, wf_tok_heap *h, int32_t l,
                       int32_t r) {
    if (l < 0 || r < 0)
        return;
    int rank = t->pair_slots && syms[l].id >= 0 && syms[r].id >= 0
                   ? wf_tok_merge_rank_ids(t, syms[l].id, syms[r].id)
                   : wf_tok_merge_rank(t, w + syms[l].off, syms[l].n, w + syms[r].off, syms[r].n);
    if (rank < 0)
        return;
    wf__tok_heap_push(h, (wf_tok_bigram){rank, l, r, syms[l].n, syms[r].n, rank});
}

/* One byte-encoded word -> ids (llama.cpp's llm_tokenizer_bpe_session::tokenize). raw holds
 * the word's bytes before GPT-2 encoding: raw[i] is the byte of encoded character i. */
static void bpe_word(const wf_tokenizer *t, const char *w, size_t wn, const char *raw, sym *syms,
                     wf_tok_heap *h, wf_tok_out *o) {
    if (t->ignore_merges) {
        int32_t id = wf_tok_lookup(t, w, wn);
        if (id >= 0) {
            wf_tok_emit(o, id);
            return;
        }
    }
    int32_t ns = 0;
    for (size_t off = 0; off < wn;) {
        size_t l = (size_t)wf_utf8_seq_len((uint8_t)w[off]);
        if (l > wn - off)
            l = wn - off;
        syms[ns] = (sym){ns - 1, off + l == wn ? -1 : ns + 1, (uint32_t)off, (uint32_t)l,
                         t->byte_sym[(uint8_t)raw[ns]]};
        ns++;
        off += l;
    }
    h->n = 0;
    for (int32_t i = 1; i < ns; i++)
        try_bigram(t, w, syms, h, i - 1, i);
    while (h->n) {
        wf_tok_bigram b = wf__tok_heap_pop(h);
        sym *L = &syms[b.left], *R = &syms[b.right];
        if (L->n == 0 || R->n == 0 || L->n != b.ln || R->n != b.rn)
            continue; /* stale: one side has merged since */
        L->n += R->n;
        L->id = t->merge_res[b.rank];
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0)
            syms[R->next].prev = b.left;
        try_bigram(t, w, syms, h, L->prev, b.left);
        try_bigram(t, w, syms, h, b.left, L->next);
    }
    for (int32_t i = ns ? 0 : -1; i != -1; i = syms[i].next) {
        if (syms[i].n == 0)
            continue;
        int32_t id = syms[i].id;
        if (id >= 0) {
            wf_tok_emit(o, id);
            continue;
        }
        /* no token: each byte of the encoded text on its own, if that is a token */
        for (uint32_t k = 0; k < syms[i].n; k++) {
            int32_t bid = wf_tok_lookup(t, w + syms[i].off + k, 1);
            if (bid >= 0)
                wf_tok_emit(o, bid);
        }
    }
}

wf_status wf_tok_bpe_encode(const wf_tokenizer *t, const char *text, size_t len, wf_tok_out *o) {
    if (len == 0)
        return WF_OK;
    wf_status st = WF_ENOMEM;
    uint32_t *cp = malloc(len * sizeof *cp);
    uint16_t *fl = malloc(len * sizeof *fl);
    uint32_t *a = malloc((len + 1) * sizeof *a), *b = malloc((len + 1) * sizeof *b);
    char *enc = NULL;
    sym *syms = NULL;
    wf_tok_heap h = {0};
    if (!cp || !fl || !a || !b)
        goto done;
    size_t n_cp;
    uint32_t *words;
    size_t nw = pre_split(t->pre, text, len, cp, fl, &n_cp, a, b, &words);

    /* the longest word, in re-encoded UTF-8 bytes, sizes the per-word scratch */
    size_t max_bytes = 0, c = 0;
    for (size_t i = 0; i < nw; i++) {
        size_t bytes = 0;
        for (uint32_t k = 0; k < words[i]; k++, c++)
            bytes += cp[c] < 0x80 ? 1 : cp[c] < 0x800 ? 2 : cp[c] < 0x10000 ? 3 : 4;
        if (bytes > max_bytes)
            max_bytes = bytes;
    }
    enc = malloc(3 * max_bytes + 8); /* GPT-2 encoded text, then the raw bytes */
    syms = malloc((max_bytes + 1) * sizeof *syms);
    h.v = malloc((3 * max_bytes + 3) * sizeof *h.v);
    if (!enc || !syms || !h.v)
        goto done;

    char *raw = enc + 2 * max_bytes + 4;
    c = 0;
    for (size_t i = 0; i < nw; i++) {
        size_t en = 0, rn = 0;
        for (uint32_t k = 0; k < words[i]; k++) {
            char u[4];
            int un = wf_utf8_encode(cp[c++], u);
            for (int j = 0; j < un; j++) { /* GPT-2 byte-level: each byte becomes a char */
                uint32_t e = wf_gpt2_byte_to_cp((uint8_t)u[j]);
                if (e < 0x80) {
                    enc[en++] = (char)e;
                } else { /* all mapped codepoints are < U+0800: two bytes */
                    enc[en++] = (char)(0xC0 | (e >> 6));
                    enc[en++] = (char)(0x80 | (e & 0x3F));
                }
                raw[rn++] = u[j];
            }
        }
        bpe_word(t, enc, en, raw, syms, &h, o);
    }
    st = WF_OK;
done:
    free(cp);
    free(fl);
    free(a);
    free(b);
    free(enc);
    free(syms);
    free(h.v);
    return st;
}
