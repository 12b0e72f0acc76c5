/* SentencePiece-style tokenization (tokenizer.ggml.model "llama"), as llama.cpp's
 * llm_tokenizer_spm: spaces become U+2581, the text is split into UTF-8 characters, and
 * adjacent symbols whose concatenation is a vocabulary token are merged highest score first
 * (ties: leftmost). Symbols that are not tokens fall back to <0xNN> byte tokens. */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer_impl.h"
#include "engine/unicode.h"

typedef struct ssym {
    int32_t prev, next;
    uint32_t off, n;
} ssym;

static void try_add(const wf_tokenizer *t, const char *s, const ssym *syms, wf_tok_heap *h, int32_t l,
                    int32_t r) {
    if (l < 0 || r < 0)
        return;
    /* adjacent symbols are contiguous in s */
    int32_t id = wf_tok_lookup(t, s + syms[l].off, syms[l].n + syms[r].n);
    if (id < 0)
        return;
    wf__tok_heap_push(h, (wf_tok_bigram){-(double)t->scores[id], l, r, syms[l].n, syms[r].n, -1});
}

wf_status wf_tok_spm_encode(const wf_tokenizer *t, const char *text, size_t len, bool prefix_space,
                            wf_tok_out *o) {
    /* escaped text: optional leading space, every ' ' -> U+2581 (3 bytes) */
    size_t cap = 3 * (len + 1);
    char *s = malloc(cap);
    ssym *syms = malloc((len + 2) * sizeof *syms);
    wf_tok_heap h = {malloc((3 * (len + 2)) * sizeof *h.v), 0};
    wf_status st = WF_ENOMEM;
    if (!s || !syms || !h.v)
        goto done;
    size_t n = 0;
    if (prefix_space) {
        memcpy(s, "\xE2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + n, "\xE2\x96\x81", 3);
            n += 3;
        } else {
            s[n++] = text[i];
        }
    }
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t l = (size_t)wf_utf8_seq_len((uint8_t)s[off]);
        if (l > n - off)
            l = n - off;
        syms[ns] = (ssym){ns - 1, off + l == n ? -1 : ns + 1, (uint32_t)off, (uint32_t)l};
        ns++;
        off += l;
    }
    for (int32_t i = 1; i < ns; i++)
        try_add(t, s, syms, &h, i - 1, i);
    while (h.n) {
        wf_tok_bigram b = wf__tok_heap_pop(&h);
        ssym *L = &syms[b.left], *R = &syms[b.right];
        if (L->n == 0 || R->n == 0 || L->n != b.ln || R->n != b.rn)
            continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0)
            syms[R->next].prev = b.left;
        try_add(t, s, syms, &h, L->prev, b.left);
        try_add(t, s, syms, &h, b.left, L->next);
    }
    for (int32_t i = ns ? 0 : -1; i != -1; i = syms[i].next) {
        int32_t id = wf_tok_lookup(t, s + syms[i].off, syms[i].n);
        if (id >= 0) {
            wf_tok_emit(o, id);
            continue;
        }
        for (uint32_t k = 0; k < syms[i].n; k++) { /* byte fallback */
            int32_t bid = t->byte_tok[(uint8_t)s[syms[i].off + k]];
            if (bid >= 0)
                wf_tok_emit(o, bid);
        }
    }
    st = WF_OK;
done:
    free(s);
    free(syms);
    free(h.v);
    return st;
}
