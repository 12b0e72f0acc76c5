/* libFuzzer target: any bytes through the default model's tokenizer (byte-level BPE, special
 * tokens parsed and not), then back through the streaming detokenizer. Checks the invariants
 * a server relies on: no crash, ids inside the vocabulary, the detokenizer never writes past its
 * cap and only emits whole UTF-8 characters. The vocabulary loads once per process.
 * weft-fuzz: covers=engine/tokenizer.c,engine/unicode.c */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "engine/unicode.h"

static wf_gguf *model_file;
static wf_tokenizer *tokenizer;

static void load_once(void) {
    if (tokenizer) return;
    const char *path = getenv("WEFT_MODEL");
    if (!path || !path[0]) path = WEFT_TEST_MODEL;
    char err[256];
    if (wf_gguf_open(path, &model_file, err, sizeof err) != WF_OK ||
        wf_tokenizer_from_gguf(model_file, &tokenizer, err, sizeof err) != WF_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path, err);
        abort();
    }
}

#define MAX_IDS 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int32_t ids[MAX_IDS];
    static char out[512];
    load_once();
    if (size > 16384) return 0; /* long inputs only slow the fuzzer; the unit test covers 64 KB */
    int n_vocab = wf_tokenizer_n_vocab(tokenizer);
    int cap = wf_tokenizer_max_detok_output(tokenizer);
    for (int parse_special = 0; parse_special <= 1; parse_special++) {
        int n = 0;
        if (wf_tokenizer_encode(tokenizer, (const char *)data, size, true, parse_special != 0,
                                ids, MAX_IDS, &n) != WF_OK)
            continue;
        if (n > MAX_IDS) n = MAX_IDS;
        wf_detokenizer detok;
        wf_detokenizer_init(&detok, tokenizer);
        for (int i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= n_vocab) abort();
            int written = wf_detokenizer_push(&detok, ids[i], out, cap);
            if (written < 0 || written > cap || wf_utf8_valid_prefix(out, (size_t)written) != (size_t)written) abort();
        }
        int tail = wf_detokenizer_flush(&detok, out, cap);
        if (tail < 0 || tail > cap || wf_utf8_valid_prefix(out, (size_t)tail) != (size_t)tail) abort();
    }
    return 0;
}
