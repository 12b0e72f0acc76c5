/* Tests engine/tokenizer*.c against llama.cpp: fixtures recorded by
 * scripts/make_tokenizer_fixtures.py from llama-cpp-python (ids for >150 strings with every
 * add_special/parse_special combination, detokenized text, EOG sets, a checksum of every
 * token's piece) for the default model under five pre-tokenizers and for a small
 * SentencePiece vocabulary; plus in-memory vocabularies for BPE/SPM merge rules, the
 * streaming detokenizer and the piece API. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_impl.h"
#include "engine/unicode.h"

#define FIXDIR WEFT_SOURCE_DIR "/tests/engine/data/tokenizer/"

/* ---- fixture parsing ----------------------------------------------------------------------- */

static size_t unhex(const char *h, char *out) {
    if (strcmp(h, "-") == 0)
        return 0;
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert_int_eq(sscanf(h + 2 * i, "%2x", &v), 1);
        out[i] = (char)v;
    }
    return n;
}

static int parse_ids(const char *s, int32_t *ids, int cap) {
    if (strcmp(s, "-") == 0)
        return 0;
    int n = 0;
    for (const char *p = s; *p;) {
        ck_assert_int_lt(n, cap);
        ids[n++] = (int32_t)strtol(p, (char **)&p, 10);
        if (*p == ',')
            p++;
    }
    return n;
}

static uint64_t fnv_pieces(const wf_tokenizer *t, bool special) {
    uint64_t h = 0xcbf29ce484222325ull;
    static char buf[1 << 16];
    for (int id = 0; id < wf_tokenizer_n_vocab(t); id++) {
        int n = wf_tokenizer_token_to_piece(t, id, special, buf, sizeof buf);
        ck_assert_int_ge(n, 0);
        uint8_t len[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
        for (int i = 0; i < 4; i++)
            h = (h ^ len[i]) * 0x100000001b3ull;
        for (int i = 0; i < n; i++)
            h = (h ^ (uint8_t)buf[i]) * 0x100000001b3ull;
    }
    return h;
}

static wf_tokenizer *load(const char *path, const char *pre_override) {
    char err[256] = "";
    wf_gguf *g = NULL;
    wf_status st = wf_gguf_open(path, &g, err, sizeof err);
    ck_assert_msg(st == WF_OK, "open %s: %s", path, err);
    wf_tokenizer *t = NULL;
    st = wf_tok_from_gguf_pre(g, pre_override, &t, err, sizeof err);
    ck_assert_msg(st == WF_OK, "tokenizer %s: %s", path, err);
    wf_gguf_close(g); /* the tokenizer keeps its own copy */
    return t;
}

/* Runs every line of a fixture against t; returns the number of T cases checked. */
static int run_fixture(const wf_tokenizer *t, const char *name) {
    char path[512];
    snprintf(path, sizeof path, FIXDIR "%s.txt", name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "missing fixture %s", path);
    static char line[1 << 18], text[1 << 16], want_text[1 << 17], got_text[1 << 17];
    static char want_stream[1 << 17];
    static int32_t want[1 << 14], got[1 << 14];
    int n_cases = 0, n_bad = 0, n_roundtrip = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '#' || line[0] == 0)
            continue;
        char *save = NULL, *tag = strtok_r(line, " ", &save);
        if (strcmp(tag, "V") == 0) {
            ck_assert_int_eq(wf_tokenizer_n_vocab(t), atoi(strtok_r(NULL, " ", &save)));
        } else if (strcmp(tag, "S") == 0) {
            ck_assert_int_eq(wf_tokenizer_bos(t), atoi(strtok_r(NULL, " ", &save)));
            ck_assert_int_eq(wf_tokenizer_eos(t), atoi(strtok_r(NULL, " ", &save)));
            ck_assert_int_eq(wf_tokenizer_add_bos(t), atoi(strtok_r(NULL, " ", &save)));
            ck_assert_int_eq(wf_tokenizer_add_eos(t), atoi(strtok_r(NULL, " ", &save)));
        } else if (strcmp(tag, "G") == 0) {
            int n = parse_ids(strtok_r(NULL, " ", &save), want, 1 << 14), k = 0;
            for (int id = 0; id < wf_tokenizer_n_vocab(t); id++) {
                if (!wf_tokenizer_is_eog(t, id))
                    continue;
                ck_assert_msg(k < n && want[k] == id, "%s: unexpected EOG id %d", name, id);
                k++;
            }
            ck_assert_int_eq(k, n);
            ck_assert(!wf_tokenizer_is_eog(t, -1));
            ck_assert(!wf_tokenizer_is_eog(t, wf_tokenizer_n_vocab(t)));
        } else if (strcmp(tag, "P") == 0) {
            uint64_t h1 = strtoull(strtok_r(NULL, " ", &save), NULL, 16);
            uint64_t h0 = strtoull(strtok_r(NULL, " ", &save), NULL, 16);
            ck_assert_msg(fnv_pieces(t, true) == h1, "%s: pieces (render_special) differ", name);
            ck_assert_msg(fnv_pieces(t, false) == h0, "%s: pieces differ", name);
        } else if (strcmp(tag, "T") == 0) {
            bool add_special = atoi(strtok_r(NULL, " ", &save)) != 0;
            bool parse_special = atoi(strtok_r(NULL, " ", &save)) != 0;
            size_t len = unhex(strtok_r(NULL, " ", &save), text);
            int nw = parse_ids(strtok_r(NULL, " ", &save), want, 1 << 14);
            const char *f_dt = strtok_r(NULL, " ", &save), *f_st = strtok_r(NULL, " ", &save);
            size_t dl = strcmp(f_dt, "=") == 0 ? len : unhex(f_dt, want_text);
            if (strcmp(f_dt, "=") == 0)
                memcpy(want_text, text, len);
            size_t sl = strcmp(f_st, "=") == 0 ? dl : unhex(f_st, want_stream);
            if (strcmp(f_st, "=") == 0)
                memcpy(want_stream, want_text, dl);
            int n = -1;
            ck_assert_int_eq(wf_tokenizer_encode(t, text, len, add_special, parse_special, got,
                                                 1 << 14, &n), WF_OK);
            bool ok = n == nw && memcmp(got, want, sizeof(int32_t) * (size_t)n) == 0;
            if (!ok && n_bad++ < 5) {
                fprintf(stderr, "%s: MISMATCH add=%d parse=%d text='%.*s'\n  want:", name,
                        add_special, parse_special, (int)len, text);
                for (int i = 0; i < nw; i++)
                    fprintf(stderr, " %d", want[i]);
                fprintf(stderr, "\n  got: ");
                for (int i = 0; i < n; i++)
                    fprintf(stderr, " %d", got[i]);
                fprintf(stderr, "\n");
            }
            /* detokenize the reference ids, as llama_detokenize */
            int gl = wf_tokenizer_decode(t, want, nw, false, got_text, sizeof got_text);
            if (gl != (int)dl || memcmp(got_text, want_text, dl) != 0) {
                if (n_bad++ < 5)
                    fprintf(stderr, "%s: DETOK MISMATCH text='%.*s' got='%.*s' want='%.*s'\n", name,
                            (int)len, text, gl, got_text, (int)dl, want_text);
            }
            if (dl == len && memcmp(want_text, text, len) == 0)
                n_roundtrip++;
            /* streaming the ids prints what Python's errors="replace" decoding prints */
            wf_detokenizer d;
            wf_detokenizer_init(&d, t);
            size_t on = 0;
            for (int i = 0; i <= nw; i++) {
                char chunk[256];
                int k = i < nw ? wf_detokenizer_push(&d, want[i], chunk, sizeof chunk)
                               : wf_detokenizer_flush(&d, chunk, sizeof chunk);
                ck_assert_int_eq(wf_utf8_valid_prefix(chunk, (size_t)k), (size_t)k);
                memcpy(got_text + on, chunk, (size_t)k);
                on += (size_t)k;
            }
            if ((on != sl || memcmp(got_text, want_stream, sl) != 0) && n_bad++ < 5)
                fprintf(stderr, "%s: STREAM MISMATCH text='%.*s' got='%.*s' want='%.*s'\n", name,
                        (int)len, text, (int)on, got_text, (int)sl, want_stream);
            /* a too-small buffer reports the needed size and writes nothing past cap */
            if (nw > 1) {
                int32_t small[1] = {-7};
                ck_assert_int_eq(wf_tokenizer_encode(t, text, len, add_special, parse_special, small,
                                                     1, &n), WF_OK);
                ck_assert_int_eq(n, nw);
                ck_assert_int_eq(small[0], want[0]);
            }
            n_cases++;
        }
    }
    fclose(f);
    fprintf(stderr, "%s: %d cases, %d mismatches, %d exact round trips\n", name, n_cases, n_bad,
            n_roundtrip);
    ck_assert_msg(n_bad == 0, "%s: %d mismatches", name, n_bad);
    ck_assert_int_ge(n_cases, 400);
    return n_cases;
}

static bool have_model(void) {
    if (access(WEFT_TEST_MODEL, R_OK) == 0)
        return true;
    fprintf(stderr, "skipping: %s not found\n", WEFT_TEST_MODEL);
    return false;
}

START_TEST(test_fixture_smollm) {
    if (!have_model())
        return;
    wf_tokenizer *t = load(WEFT_TEST_MODEL, NULL);
    run_fixture(t, "smollm");
    wf_tokenizer_free(t);
}
END_TEST

/* Gemma 3's 262k SentencePiece vocabulary (scripts/make_tokenizer_fixtures.py --gemma); the
 * model is fetched by scripts/setup, so its absence is a failure. */
START_TEST(test_fixture_gemma3) {
    wf_tokenizer *t = load(WEFT_TEST_GEMMA_MODEL, NULL);
    run_fixture(t, "gemma3");
    wf_tokenizer_free(t);
}
END_TEST

/* The same vocabulary under the other pre-tokenizers (as the fixture script rewrote it). */
START_TEST(test_fixture_pre_types) {
    if (!have_model())
        return;
    static const char *const pre[][2] = {{"llama-bpe", "llama3"}, {"qwen2", "qwen2"},
                                         {"gpt-2", "gpt2"},        {"default", "default"},
                                         {"falcon", "falcon"},     {"chatglm-bpe", "chatglm-bpe"},
                                         {"gpt-4o", "gpt-4o"},     {"tekken", "tekken"}};
    wf_tokenizer *t = load(WEFT_TEST_MODEL, pre[_i][0]);
    run_fixture(t, pre[_i][1]);
    wf_tokenizer_free(t);
}
END_TEST

START_TEST(test_fixture_spm) {
    wf_tokenizer *t = load(FIXDIR "spm_tiny.gguf", NULL);
    run_fixture(t, "spm");
    wf_tokenizer_free(t);
}
END_TEST

/* The same vocabulary named "Phi-3 ...": special tokens swallow the whitespace after them. */
START_TEST(test_fixture_spm_phi3) {
    wf_tokenizer *t = load(FIXDIR "spm_phi3.gguf", NULL);
    run_fixture(t, "spm_phi3");
    wf_tokenizer_free(t);
}
END_TEST

/* ---- in-memory vocabularies ------------------------------------------------------------- */

/* A byte-level BPE vocabulary over "a", "b", "c", "Ġ" with merges a+b, ab+c, Ġ+a. */
static wf_tokenizer *tiny_bpe(const char *pre) {
    static const char *const toks[] = {"<|end|>", "a", "b", "c", "\xC4\xA0", "ab", "abc", ("\xC4\xA0" "a"),
                                       "bc", "<x>"};
    static const int32_t types[] = {3, 1, 1, 1, 1, 1, 1, 1, 1, 4};
    static const char *const merges[] = {"a b", "ab c", "\xC4\xA0 a", "b c"};
    wf_tokenizer_desc d;
    wf_tokenizer_desc_init(&d);
    d.model = "gpt2";
    d.pre = pre;
    d.n_vocab = 10;
    d.tokens = toks;
    d.token_types = types;
    d.n_merges = 4;
    d.merges = merges;
    d.slots[WF_TOKSLOT_EOS] = 0;
    char err[128];
    wf_tokenizer *t = NULL;
    ck_assert_msg(wf_tokenizer_new(&d, &t, err, sizeof err) == WF_OK, "%s", err);
    return t;
}

static int enc(const wf_tokenizer *t, const char *s, bool special, int32_t *ids) {
    int n = -1;
    ck_assert_int_eq(wf_tokenizer_encode(t, s, strlen(s), false, special, ids, 64, &n), WF_OK);
    return n;
}

START_TEST(test_bpe_merge_order) {
    wf_tokenizer *t = tiny_bpe("gpt-2");
    int32_t ids[64];
    /* "abc": a+b (rank 0) first, then ab+c (rank 1); b+c (rank 3) never applies */
    ck_assert_int_eq(enc(t, "abc", false, ids), 1);
    ck_assert_int_eq(ids[0], 6);
    /* "bcab": b+c and a+b; leftmost-lowest rank wins: a+b (0) then b+c (3) */
    ck_assert_int_eq(enc(t, "bcab", false, ids), 2);
    ck_assert_int_eq(ids[0], 8);
    ck_assert_int_eq(ids[1], 5);
    /* " a" is one word (space + letters) -> "Ġa" */
    ck_assert_int_eq(enc(t, "c a", false, ids), 2);
    ck_assert_int_eq(ids[0], 3);
    ck_assert_int_eq(ids[1], 7);
    /* unknown bytes: no token for "d" or its byte -> dropped, as llama.cpp */
    ck_assert_int_eq(enc(t, "d", false, ids), 0);
    /* special tokens: control only with parse_special, user-defined always */
    ck_assert_int_eq(enc(t, "a<|end|>b", true, ids), 3);
    ck_assert_int_eq(ids[1], 0);
    ck_assert_int_eq(enc(t, "a<x>b", false, ids), 3);
    ck_assert_int_eq(ids[1], 9);
    ck_assert(wf_tokenizer_is_eog(t, 0));
    ck_assert(wf_tokenizer_is_control(t, 0));
    ck_assert(!wf_tokenizer_is_eog(t, 1));
    /* defaults for gpt2 vocabularies: BOS 11 is out of range -> none, no add_bos */
    ck_assert_int_eq(wf_tokenizer_bos(t), -1);
    ck_assert(!wf_tokenizer_add_bos(t));
    wf_tokenizer_free(t);
}
END_TEST

/* Word splitting of each pre-tokenizer family (the fixtures check the resulting ids). */
static void expect_split(wf_tok_pre pre, const char *text, const char *const *want) {
    size_t lens[64];
    int n = wf_tok_pre_split(pre, text, strlen(text), lens);
    size_t off = 0;
    int k = 0;
    for (; want[k]; k++) {
        ck_assert_msg(k < n, "'%s': only %d words", text, n);
        ck_assert_msg(lens[k] == strlen(want[k]) && memcmp(text + off, want[k], lens[k]) == 0,
                      "'%s' word %d: '%.*s' != '%s'", text, k, (int)lens[k], text + off, want[k]);
        off += lens[k];
    }
    ck_assert_int_eq(n, k);
}

START_TEST(test_pre_split) {
    expect_split(WF_PRE_SMOLLM, "abc 123", (const char *const[]){"abc", " ", "1", "2", "3", NULL});
    expect_split(WF_PRE_GPT2, "abc 123  x\n\n", (const char *const[]){"abc", " 123", " ", " x", "\n\n", NULL});
    expect_split(WF_PRE_GPT2, "it's", (const char *const[]){"it", "'s", NULL});
    expect_split(WF_PRE_LLAMA3, "12345 IT'S", (const char *const[]){"123", "45", " IT", "'S", NULL});
    expect_split(WF_PRE_LLAMA3, "a\n\n  b", (const char *const[]){"a", "\n\n", " ", " b", NULL});
    expect_split(WF_PRE_QWEN2, "x=12;", (const char *const[]){"x", "=", "1", "2", ";", NULL});
    expect_split(WF_PRE_DEFAULT, "a+=1234", (const char *const[]){"a", "+=", "123", "4", NULL});
}
END_TEST

/* A NORMAL token that is not GPT-2 byte-encoded renders as llama.cpp's [UNK_BYTE_0x..] text;
 * long ones must not overflow the piece table. */
START_TEST(test_unk_byte_piece) {
    char longtok[3 * 60 + 1];
    for (int i = 0; i < 60; i++)
        memcpy(longtok + 3 * i, "\xE4\xB8\xAD", 3);
    longtok[180] = 0;
    const char *toks[] = {"a", "\xE4\xB8\xAD\xE6\x96\x87", longtok};
    wf_tokenizer_desc d;
    wf_tokenizer_desc_init(&d);
    d.model = "gpt2";
    d.pre = "gpt-2";
    d.n_vocab = 3;
    d.tokens = toks;
    char err[128];
    wf_tokenizer *t = NULL;
    ck_assert_msg(wf_tokenizer_new(&d, &t, err, sizeof err) == WF_OK, "%s", err);
    char buf[1 << 16];
    const char *want = "[UNK_BYTE_0xe4b8ad\xE4\xB8\xAD\xE6\x96\x87][UNK_BYTE_0xe69687\xE4\xB8\xAD\xE6\x96\x87]";
    int n = wf_tokenizer_token_to_piece(t, 1, false, buf, sizeof buf);
    ck_assert_int_eq(n, (int)strlen(want));
    ck_assert(memcmp(buf, want, (size_t)n) == 0);
    n = wf_tokenizer_token_to_piece(t, 2, false, buf, sizeof buf);
    ck_assert_int_eq(n, 60 * (12 + 6 + 180 + 1));
    wf_tokenizer_free(t);
}
END_TEST

START_TEST(test_bad_vocab) {
    static const char *const dup[] = {"a", "a"};
    wf_tokenizer_desc d;
    wf_tokenizer_desc_init(&d);
    d.model = "gpt2";
    d.n_vocab = 2;
    d.tokens = dup;
    char err[128] = "";
    wf_tokenizer *t = NULL;
    ck_assert_int_eq(wf_tokenizer_new(&d, &t, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_null(t);
    ck_assert(strstr(err, "duplicate") != NULL);
    static const char *const ok[] = {"a", "b"};
    d.tokens = ok;
    d.pre = "no-such-pre";
    ck_assert_int_eq(wf_tokenizer_new(&d, &t, err, sizeof err), WF_EUNSUPPORTED);
    d.pre = NULL;
    d.model = "bert";
    ck_assert_int_eq(wf_tokenizer_new(&d, &t, err, sizeof err), WF_EUNSUPPORTED);
    d.model = "gpt2";
    d.add_bos = 1; /* add_bos with no BOS token */
    ck_assert_int_eq(wf_tokenizer_new(&d, &t, err, sizeof err), WF_EFORMAT);
    ck_assert_int_eq(wf_tokenizer_new(NULL, &t, err, sizeof err), WF_EINVAL);
}
END_TEST

START_TEST(test_spm_in_memory) {
    /* scores decide: "ab" (-1) beats "bc" (-2) for "abc" -> ab + c */
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "c", "ab", "bc",
                                       "<0x0A>", "<0xC3>", "<0xA9>"};
    static const float scores[] = {0, 0, 0, -5, -10, -10, -10, -1, -2, 0, 0, 0};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6, 6};
    wf_tokenizer_desc d;
    wf_tokenizer_desc_init(&d);
    d.model = "llama";
    d.n_vocab = 12;
    d.tokens = toks;
    d.scores = scores;
    d.token_types = types;
    char err[128];
    wf_tokenizer *t = NULL;
    ck_assert_msg(wf_tokenizer_new(&d, &t, err, sizeof err) == WF_OK, "%s", err);
    ck_assert(wf_tokenizer_add_bos(t));
    int32_t ids[64];
    int n = -1;
    ck_assert_int_eq(wf_tokenizer_encode(t, "abc", 3, true, false, ids, 64, &n), WF_OK);
    ck_assert_int_eq(n, 4); /* <s> ▁ ab c */
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 3);
    ck_assert_int_eq(ids[2], 7);
    ck_assert_int_eq(ids[3], 6);
    /* byte fallback: "\n" -> <0x0A>, "é" -> <0xC3> <0xA9> */
    ck_assert_int_eq(wf_tokenizer_encode(t, "\n\xC3\xA9", 3, false, false, ids, 64, &n), WF_OK);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(ids[1], 9);
    ck_assert_int_eq(ids[2], 10);
    ck_assert_int_eq(ids[3], 11);
    char buf[16];
    ck_assert_int_eq(wf_tokenizer_token_to_piece(t, 10, false, buf, 16), 1);
    ck_assert_int_eq((uint8_t)buf[0], 0xC3);
    ck_assert_int_eq(wf_tokenizer_token_to_piece(t, 3, false, buf, 16), 1);
    ck_assert_int_eq(buf[0], ' ');
    /* decode strips the prefix space of the first piece */
    int32_t seq[] = {3, 7, 6};
    ck_assert_int_eq(wf_tokenizer_decode(t, seq, 3, false, buf, 16), 3);
    ck_assert(memcmp(buf, "abc", 3) == 0);
    wf_tokenizer_free(t);
}
END_TEST

/* ---- pieces and streaming detokenizer (default model) ------------------------------------ */

START_TEST(test_piece_api) {
    if (!have_model())
        return;
    wf_tokenizer *t = load(WEFT_TEST_MODEL, NULL);
    char buf[256];
    /* <|im_end|> (2) is control: "" unless render_special */
    ck_assert_int_eq(wf_tokenizer_token_to_piece(t, 2, false, buf, sizeof buf), 0);
    ck_assert_int_eq(wf_tokenizer_token_to_piece(t, 2, true, buf, sizeof buf), 10);
    ck_assert(memcmp(buf, "<|im_end|>", 10) == 0);
    ck_assert_int_eq(wf_tokenizer_token_to_piece(t, 2, true, buf, 4), -10); /* needs 10 */
    ck_assert_int_eq(wf_tokenizer_token_to_piece(t, -1, true, buf, sizeof buf), 0);
    ck_assert_int_eq(wf_tokenizer_token_to_piece(t, 1 << 20, true, buf, sizeof buf), 0);
    int32_t ids[16];
    int n = enc(t, " world", false, ids);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(wf_tokenizer_token_to_piece(t, ids[0], false, buf, sizeof buf), 6);
    ck_assert(memcmp(buf, " world", 6) == 0);
    size_t tl;
    const char *txt = wf_tokenizer_token_text(t, ids[0], &tl);
    ck_assert_int_eq(tl, 7); /* "Ġ" is U+0120, two bytes */
    ck_assert(memcmp(txt, "\xC4\xA0world", 7) == 0);
    ck_assert(wf_tokenizer_is_eog(t, 2));
    ck_assert(wf_tokenizer_is_eog(t, 0));
    ck_assert(!wf_tokenizer_is_eog(t, 1));
    ck_assert_int_le(wf_tokenizer_max_detok_output(t), 256);
    wf_tokenizer_free(t);
}
END_TEST

/* Feeds ids one at a time; checks no output ever ends inside a UTF-8 character and that the
 * stream equals the expected text. */
static void stream_check(const wf_tokenizer *t, const int32_t *ids, int n, const char *want, size_t wl) {
    wf_detokenizer d;
    wf_detokenizer_init(&d, t);
    char out[4096], buf[256];
    size_t on = 0;
    for (int i = 0; i < n; i++) {
        int k = wf_detokenizer_push(&d, ids[i], buf, sizeof buf);
        ck_assert_int_ge(k, 0);
        if (k > 0) /* every chunk is complete, valid UTF-8 */
            ck_assert_int_eq(wf_utf8_valid_prefix(buf, (size_t)k), (size_t)k);
        memcpy(out + on, buf, (size_t)k);
        on += (size_t)k;
    }
    int k = wf_detokenizer_flush(&d, buf, sizeof buf);
    memcpy(out + on, buf, (size_t)k);
    on += (size_t)k;
    ck_assert_msg(on == wl && memcmp(out, want, wl) == 0, "stream '%.*s' != '%.*s'", (int)on, out,
                  (int)wl, want);
}

START_TEST(test_stream_detok) {
    if (!have_model())
        return;
    wf_tokenizer *t = load(WEFT_TEST_MODEL, NULL);
    int32_t ids[256];
    /* emoji split over several byte tokens: nothing is emitted until each is complete */
    static const char *const texts[] = {"I \xF0\x9F\x98\x80 you", "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
                                        "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C",
                                        "\xF0\x9F\x87\xBA\xF0\x9F\x87\xB8 flags", "plain ascii text"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int n = enc(t, texts[i], false, ids);
        stream_check(t, ids, n, texts[i], strlen(texts[i]));
    }
    /* the emoji takes more than one token, and the first alone emits nothing */
    int n = enc(t, "\xF0\x9F\x98\x80", false, ids);
    ck_assert_int_gt(n, 1);
    wf_detokenizer d;
    char buf[256];
    wf_detokenizer_init(&d, t);
    ck_assert_int_eq(wf_detokenizer_push(&d, ids[0], buf, sizeof buf), 0);
    /* an incomplete tail at the end flushes as one U+FFFD */
    ck_assert_int_eq(wf_detokenizer_flush(&d, buf, sizeof buf), 3);
    ck_assert(memcmp(buf, "\xEF\xBF\xBD", 3) == 0);
    /* an invalid sequence mid-stream: "\xE4\xBD" then "A" -> U+FFFD then "A" */
    wf_detokenizer_init(&d, t);
    int32_t lead_c3 = -1, a_tok = -1;
    for (int id = 0; id < wf_tokenizer_n_vocab(t); id++) {
        char p[8];
        int k = wf_tokenizer_token_to_piece(t, id, false, p, sizeof p);
        if (k == 1 && (uint8_t)p[0] == 0xC3)
            lead_c3 = id;
        if (k == 1 && p[0] == 'A')
            a_tok = id;
    }
    ck_assert_int_ge(lead_c3, 0);
    ck_assert_int_ge(a_tok, 0);
    ck_assert_int_eq(wf_detokenizer_push(&d, lead_c3, buf, sizeof buf), 0);
    ck_assert_int_eq(wf_detokenizer_push(&d, a_tok, buf, sizeof buf), 4);
    ck_assert(memcmp(buf, "\xEF\xBF\xBD" "A", 4) == 0);
    /* control tokens are not rendered */
    ck_assert_int_eq(wf_detokenizer_push(&d, 2, buf, sizeof buf), 0);
    ck_assert_int_eq(wf_detokenizer_flush(&d, buf, sizeof buf), 0);
    wf_tokenizer_free(t);
}
END_TEST

/* Long inputs: repeated text, a long whitespace run and a long word must tokenize
 * identically in one call and stay consistent (round trip through decode). */
START_TEST(test_long_inputs) {
    if (!have_model())
        return;
    wf_tokenizer *t = load(WEFT_TEST_MODEL, NULL);
    size_t len = 1 << 16;
    char *text = malloc(len + 1), *back = malloc(len + 16);
    int32_t *ids = malloc(sizeof(int32_t) * (len + 16));
    ck_assert_ptr_nonnull(text);
    for (int variant = 0; variant < 3; variant++) {
        for (size_t i = 0; i < len; i++)
            text[i] = variant == 0 ? "Hello world, this is a test. "[i % 29] : variant == 1 ? ' ' : 'x';
        int n = -1;
        ck_assert_int_eq(wf_tokenizer_encode(t, text, len, false, false, ids, (int)len + 16, &n), WF_OK);
        ck_assert_int_gt(n, 0);
        int bl = wf_tokenizer_decode(t, ids, n, false, back, (int)len + 16);
        ck_assert_int_eq(bl, (int)len);
        ck_assert(memcmp(back, text, len) == 0);
    }
    free(text);
    free(back);
    free(ids);
    wf_tokenizer_free(t);
}
END_TEST

/* Arbitrary bytes never crash and always decode back to something. */
START_TEST(test_random_bytes) {
    wf_tokenizer *t = load(FIXDIR "spm_tiny.gguf", NULL);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    char text[512];
    int32_t ids[4096];
    for (int round = 0; round < 200; round++) {
        size_t len = (size_t)(round * 7 % 500);
        for (size_t i = 0; i < len; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            text[i] = (char)(s >> 24);
        }
        int n = -1;
        ck_assert_int_eq(wf_tokenizer_encode(t, text, len, true, true, ids, 4096, &n), WF_OK);
        ck_assert_int_le(n, 4096);
        for (int i = 0; i < n; i++)
            ck_assert(ids[i] >= 0 && ids[i] < wf_tokenizer_n_vocab(t));
        wf_detokenizer d;
        char buf[256];
        wf_detokenizer_init(&d, t);
        for (int i = 0; i < n; i++) {
            int k = wf_detokenizer_push(&d, ids[i], buf, sizeof buf);
            ck_assert_int_eq(wf_utf8_valid_prefix(buf, (size_t)k), (size_t)k);
        }
    }
    wf_tokenizer_free(t);
}
END_TEST

static Suite *tokenizer_suite(void) {
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("fixtures");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fixture_smollm);
    tcase_add_loop_test(tc, test_fixture_pre_types, 0, 8);
    tcase_add_test(tc, test_fixture_spm);
    tcase_add_test(tc, test_fixture_spm_phi3);
    tcase_add_test(tc, test_fixture_gemma3);
    suite_add_tcase(s, tc);
    TCase *tu = tcase_create("unit");
    tcase_set_timeout(tu, 60);
    tcase_add_test(tu, test_bpe_merge_order);
    tcase_add_test(tu, test_pre_split);
    tcase_add_test(tu, test_unk_byte_piece);
    tcase_add_test(tu, test_bad_vocab);
    tcase_add_test(tu, test_spm_in_memory);
    tcase_add_test(tu, test_piece_api);
    tcase_add_test(tu, test_stream_detok);
    tcase_add_test(tu, test_long_inputs);
    tcase_add_test(tu, test_random_bytes);
    suite_add_tcase(s, tu);
    return s;
}

WF_CHECK_MAIN(tokenizer_suite)
