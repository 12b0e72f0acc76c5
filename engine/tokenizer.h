/* Text <-> token ids, identical to llama.cpp's tokenizer for the same GGUF: byte-level BPE
 * ("gpt2" models with the pre-tokenizer named by tokenizer.ggml.pre) and SentencePiece-style
 * ("llama" models: score merges, byte fallback <0xNN>, ▁ for spaces).
 *
 *     wf_tokenizer *tok;
 *     char err[256];
 *     if (wf_tokenizer_from_gguf(gguf, &tok, err, sizeof err) != WF_OK) die(err);
 *     int32_t ids[512]; int n;
 *     wf_tokenizer_encode(tok, text, strlen(text), true, true, ids, 512, &n);
 *     if (n > 512) { ... call again with a buffer of n ids ... }
 *     wf_detokenizer d; char buf[256];
 *     wf_detokenizer_init(&d, tok);
 *     for (int i = 0; i < n; i++) fwrite(buf, 1, wf_detokenizer_push(&d, ids[i], buf, 256), stdout);
 *     fwrite(buf, 1, wf_detokenizer_flush(&d, buf, 256), stdout);
 *     wf_tokenizer_free(tok);
 *
 * Pre-tokenizers (tokenizer.ggml.pre) implemented, by regex family: "default" (or absent);
 * GPT-2: gpt-2, phi-2, mpt, olmo, jais, exaone4; SmolLM: smollm, starcoder, refact, command-r,
 * codeshell, exaone, minerva-7b; Llama 3: llama3, llama-v3, llama-bpe, falcon3, pixtral, dbrx,
 * smaug-bpe, chatglm-bpe, glm4; Qwen2: qwen2, deepseek-r1-qwen, stablelm2, hunyuan, megrez;
 * Falcon: falcon; GPT-4o: gpt-4o, llama4; Tekken: tekken. Others are refused
 * (WF_EUNSUPPORTED).
 *
 * Thread-safety: a wf_tokenizer is immutable after wf_tokenizer_from_gguf; every const function
 * may be called from any number of threads at once. A wf_detokenizer belongs to one thread.
 * Memory: wf_tokenizer_from_gguf copies everything it needs, so the wf_gguf may be closed
 * afterwards. token_to_piece and the detokenizer never allocate. */
#ifndef WF_ENGINE_TOKENIZER_H
#define WF_ENGINE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

typedef struct wf_gguf wf_gguf;
typedef struct wf_tokenizer wf_tokenizer;

/* Builds a tokenizer from the tokenizer.ggml.* metadata of g. Returns WF_OK and *out (free with
 * wf_tokenizer_free), WF_EFORMAT (missing/malformed vocabulary, with err naming the key),
 * WF_EUNSUPPORTED (tokenizer model other than "gpt2"/"llama", or a pre-tokenizer name this
 * build does not implement; llama.cpp also refuses unknown names) or WF_ENOMEM. A missing
 * tokenizer.ggml.pre selects llama.cpp's "default" chain. */
wf_status wf_tokenizer_from_gguf(const wf_gguf *g, wf_tokenizer **out, char *err, size_t errlen);

/* Special-token slots of a vocabulary (tokenizer.ggml.<slot>_token_id). */
typedef enum wf_tokenizer_slot {
    WF_TOKSLOT_BOS = 0, WF_TOKSLOT_EOS, WF_TOKSLOT_EOT, WF_TOKSLOT_EOM, WF_TOKSLOT_UNK,
    WF_TOKSLOT_SEP, WF_TOKSLOT_PAD, WF_TOKSLOT_MASK, WF_TOKSLOT_FIM_PRE, WF_TOKSLOT_FIM_SUF,
    WF_TOKSLOT_FIM_MID, WF_TOKSLOT_FIM_PAD, WF_TOKSLOT_FIM_REP, WF_TOKSLOT_FIM_SEP,
    WF_TOKSLOT_COUNT
} wf_tokenizer_slot;

/* An in-memory vocabulary description: the same fields as the GGUF metadata. Used by
 * wf_tokenizer_from_gguf and by tests/tools that build small vocabularies directly. */
typedef struct wf_tokenizer_desc {
    const char *model;          /* tokenizer.ggml.model: "gpt2" or "llama" */
    const char *pre;            /* tokenizer.ggml.pre, NULL if absent */
    const char *name;           /* general.name, NULL if absent (llama.cpp keys a few
                                   per-model token attributes on it, e.g. Phi-3) */
    int n_vocab;
    const char *const *tokens;  /* n_vocab texts */
    const uint32_t *token_lens; /* NULL: texts are NUL-terminated */
    const float *scores;        /* NULL: all 0 */
    const int32_t *token_types; /* NULL: all NORMAL (1); 2 UNKNOWN 3 CONTROL 4 USER_DEFINED 5 UNUSED 6 BYTE */
    int n_merges;               /* BPE merges "left right", rank = index */
    const char *const *merges;
    const uint32_t *merge_lens; /* NULL: NUL-terminated */
    int64_t slots[WF_TOKSLOT_COUNT]; /* ids from metadata, -1 if absent */
    int add_bos, add_eos, add_space_prefix; /* 0/1, or -1 if absent (model defaults) */
} wf_tokenizer_desc;

/* Sets every optional field of d to "absent". */
void wf_tokenizer_desc_init(wf_tokenizer_desc *d);

/* Builds a tokenizer from d (copied; d's arrays may be freed afterwards). Same statuses as
 * wf_tokenizer_from_gguf. */
wf_status wf_tokenizer_new(const wf_tokenizer_desc *d, wf_tokenizer **out, char *err, size_t errlen);

/* Frees t; NULL is a no-op. */
void wf_tokenizer_free(wf_tokenizer *t);

int wf_tokenizer_n_vocab(const wf_tokenizer *t);
int32_t wf_tokenizer_bos(const wf_tokenizer *t); /* -1 if none */
int32_t wf_tokenizer_eos(const wf_tokenizer *t); /* -1 if none */
/* From tokenizer.ggml.add_bos_token; llama.cpp's per-model defaults when absent. */
bool wf_tokenizer_add_bos(const wf_tokenizer *t);
/* From tokenizer.ggml.add_eos_token; false when absent. */
bool wf_tokenizer_add_eos(const wf_tokenizer *t);
/* End-of-generation: EOS, EOT, EOM and the text tokens llama.cpp adds to its EOG set at load
 * (<|im_end|>, <|eot_id|>, <|end|>, <end_of_turn>, <|endoftext|>, ...). False for bad ids. */
bool wf_tokenizer_is_eog(const wf_tokenizer *t, int32_t id);
/* True if id is a CONTROL token (rendered as "" unless render_special). */
bool wf_tokenizer_is_control(const wf_tokenizer *t, int32_t id);
/* The vocabulary text of a token (as stored in the GGUF, not byte-decoded), length in *len;
 * NULL for bad ids. Valid while t lives. */
const char *wf_tokenizer_token_text(const wf_tokenizer *t, int32_t id, size_t *len);

/* text -> ids. add_special: add BOS/EOS as the model wants. parse_special: text like
 * "<|im_start|>" becomes the control token (user-defined tokens are always matched, as in
 * llama.cpp). Writes at most cap ids; *n_out is the number needed (if > cap, call again with
 * a bigger buffer; out may be NULL with cap 0 to only count). Invalid UTF-8 input is tokenized as
 * llama.cpp does (byte tokens); never crashes. Returns WF_OK, WF_EINVAL (NULL arguments, cap <
 * 0), WF_ERANGE (len > 1 GiB) or WF_ENOMEM (scratch allocation failed). Allocates scratch
 * proportional to len (about 15 bytes per input byte plus ~80 bytes per byte of the longest
 * pre-tokenized word); never touches out[cap..]. */
wf_status wf_tokenizer_encode(const wf_tokenizer *t, const char *text, size_t len, bool add_special,
                              bool parse_special, int32_t *out, int cap, int *n_out);

/* Raw bytes of one token (gpt2 byte-level decoded, SentencePiece ▁ -> space, <0xNN> -> byte).
 * Returns bytes written (<= cap) or -needed if cap is too small. Control tokens give ""
 * unless render_special; bad ids give 0. No allocation. */
int wf_tokenizer_token_to_piece(const wf_tokenizer *t, int32_t id, bool render_special, char *buf,
                                int cap);

/* ids -> text, as llama.cpp's detokenize (remove_special=false, unparse_special=render_special):
 * the first piece loses one leading space when the vocabulary adds a space prefix (SPM), and
 * the clean_up_tokenization_spaces passes run where llama.cpp runs them (gpt-2, default,
 * llama3 ... but not smollm/qwen2). Same return convention as token_to_piece: bytes written
 * or -needed. No allocation. */
int wf_tokenizer_decode(const wf_tokenizer *t, const int32_t *ids, int n, bool render_special,
                        char *buf, int cap);

/* Worst-case number of bytes one wf_detokenizer_push or flush can write for this vocabulary
 * (90 for SmolLM2; well under 256 for common vocabularies). */
int wf_tokenizer_max_detok_output(const wf_tokenizer *t);

/* Streaming detokenizer: never emits part of a UTF-8 character; no allocation. Emits the
 * concatenation of token_to_piece(render_special = false) like llama.cpp's server (no
 * first-space strip, no space clean-up); control tokens give "". Invalid byte sequences are replaced by one U+FFFD per
 * maximal invalid subpart (as Python's errors="replace") as soon as they are known to be
 * invalid. Output never exceeds cap: a cap below wf_tokenizer_max_detok_output() may
 * truncate a pathological piece (whole characters are dropped, never split). */
typedef struct wf_detokenizer {
    const wf_tokenizer *tok;
    char pending[8]; /* bytes of an incomplete UTF-8 character (at most 3) */
    int n_pending;
    bool first;      /* true until the first push */
} wf_detokenizer;
void wf_detokenizer_init(wf_detokenizer *d, const wf_tokenizer *t);
/* Bytes written to out; cap >= wf_tokenizer_max_detok_output() (<= 256 in practice) always
 * suffices. */
int wf_detokenizer_push(wf_detokenizer *d, int32_t id, char *out, int cap);
/* Leftover bytes (an incomplete tail becomes U+FFFD). The detokenizer may be reused after. */
int wf_detokenizer_flush(wf_detokenizer *d, char *out, int cap);

#endif
