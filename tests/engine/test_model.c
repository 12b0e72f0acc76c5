/* Model loading: hyper-parameters of the default model and the tiny models, and validation
 * errors naming the tensor (missing, misshapen, unsupported type, unknown architecture),
 * produced by patching a tiny GGUF in memory. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/gguf.h"
#include "engine/model.h"

static const char *model_path(void) {
    const char *m = getenv("WEFT_MODEL");
    return m && *m ? m : WEFT_TEST_MODEL;
}

static void tiny_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/tests/engine/data/tiny/%s.gguf", WEFT_SOURCE_DIR, name);
}

START_TEST(test_default_model_hparams) {
    wf_model *m;
    char err[256];
    ck_assert_msg(wf_model_load(model_path(), &m, err, sizeof err) == WF_OK, "%s", err);
    const wf_model_hparams *hp = &m->hp;
    ck_assert_int_eq(m->arch, WF_ARCH_LLAMA);
    ck_assert_str_eq(m->arch_name, "llama");
    ck_assert_int_eq(hp->n_embd, 576);
    ck_assert_int_eq(hp->n_layer, 30);
    ck_assert_int_eq(hp->n_head, 9);
    ck_assert_int_eq(hp->n_head_kv, 3);
    ck_assert_int_eq(hp->head_dim, 64);
    ck_assert_int_eq(hp->n_rot, 64);
    ck_assert_int_eq(hp->n_ff, 1536);
    ck_assert_int_eq(hp->n_vocab, 49152);
    ck_assert_int_eq(hp->n_ctx_train, 8192);
    ck_assert(hp->rms_eps > 0.99e-5f && hp->rms_eps < 1.01e-5f);
    ck_assert(hp->rope_freq_base == 100000.0f);
    ck_assert(hp->rope_freq_scale == 1.0f);
    ck_assert_int_eq(hp->rope_kind, WF_ROPE_NORM);
    ck_assert(hp->tied_output);
    ck_assert(!hp->qkv_bias);
    ck_assert_ptr_eq(m->output.data, m->tok_embd.data);
    ck_assert_int_eq(m->tok_embd.type, WF_GGML_TYPE_Q8_0);
    ck_assert_int_eq(m->layers[0].wq.type, WF_GGML_TYPE_Q4_1);
    ck_assert_int_eq(m->layers[29].w_down.ne0, 1536);
    ck_assert_int_eq(m->layers[29].w_down.ne1, 576);
    ck_assert_ptr_null(m->rope_freqs.data);
    /* weights stay in the mapping: pointers inside the file */
    const char *base = wf_gguf_base(m->gguf);
    ck_assert((const char *)m->layers[3].wk.data > base &&
              (const char *)m->layers[3].wk.data < base + wf_gguf_size(m->gguf));
    ck_assert(m->weight_bytes > (80u << 20) && m->weight_bytes <= wf_gguf_size(m->gguf));
    /* per layer q, o: 576x576; k, v: 576x192; gate, up, down: 576x1536; tied output 49152x576 */
    ck_assert_int_eq(m->matmul_macs, 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536) + 49152 * 576);
    wf_model_free(m);
    wf_model_free(NULL);
}
END_TEST

START_TEST(test_tiny_qwen2_and_rope_variants) {
    char path[1024], err[256];
    wf_model *m;
    tiny_path(path, sizeof path, "qwen2-q8_0");
    ck_assert_msg(wf_model_load(path, &m, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_int_eq(m->arch, WF_ARCH_QWEN2);
    ck_assert_int_eq(m->hp.rope_kind, WF_ROPE_NEOX);
    ck_assert(m->hp.qkv_bias);
    ck_assert(!m->hp.tied_output);
    ck_assert_ptr_nonnull(m->layers[1].bk.data);
    ck_assert_int_eq(m->layers[1].bk.ne0, 128);
    wf_model_free(m);
    tiny_path(path, sizeof path, "llama-q4_0");
    ck_assert_msg(wf_model_load(path, &m, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_ptr_nonnull(m->rope_freqs.data); /* llama3-style frequency factors */
    ck_assert_int_eq(m->rope_freqs.ne0, 32);
    wf_model_free(m);
    tiny_path(path, sizeof path, "llama-q8_0");
    ck_assert_msg(wf_model_load(path, &m, err, sizeof err) == WF_OK, "%s", err);
    ck_assert(m->hp.rope_freq_scale == 0.5f); /* linear factor 2 */
    wf_model_free(m);
    const char *types[] = {"llama-q5_0", "llama-q5_1", "llama-f16", "llama-bf16", "llama-q4_k",
                           "llama-q6_k"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        tiny_path(path, sizeof path, types[i]);
        ck_assert_msg(wf_model_load(path, &m, err, sizeof err) == WF_OK, "%s: %s", types[i], err);
        wf_model_free(m);
    }
}
END_TEST

/* The tiny Q8_0 llama file in memory, for patching. */
static unsigned char *read_tiny(size_t *size) {
    char path[1024];
    tiny_path(path, sizeof path, "llama-q8_0");
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static unsigned char *find(unsigned char *buf, size_t size, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= size; i++)
        if (memcmp(buf + i, s, n) == 0) return buf + i;
    ck_abort_msg("'%s' not found in the file", s);
    return NULL;
}

/* Loads the patched buffer; returns the status and fills err. */
static wf_status load_patched(unsigned char *buf, size_t size, char *err, size_t errlen) {
    wf_gguf *g;
    wf_status st = wf_gguf_open_memory(buf, size, &g, err, errlen);
    ck_assert_msg(st == WF_OK, "patched file must stay a valid GGUF: %s", err);
    wf_model *m = NULL;
    st = wf_model_load_gguf(g, &m, err, errlen);
    if (st == WF_OK) wf_model_free(m);
    return st;
}

START_TEST(test_missing_tensor) {
    size_t size;
    unsigned char *buf = read_tiny(&size);
    unsigned char *p = find(buf, size, "blk.1.ffn_up.weight");
    p[9] = 'X'; /* ffn_uX */
    char err[256];
    ck_assert_int_eq(load_patched(buf, size, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, "blk.1.ffn_up.weight") && strstr(err, "missing"), "%s", err);
    free(buf);
}
END_TEST

START_TEST(test_wrong_shape) {
    size_t size;
    unsigned char *buf = read_tiny(&size);
    /* tensor info: name, n_dims u32, ne[] u64: make attn_k's rows 128 long instead of 256 */
    const char *name = "blk.0.attn_k.weight";
    unsigned char *p = find(buf, size, name) + strlen(name);
    uint64_t ne0;
    memcpy(&ne0, p + 4, 8);
    ck_assert_uint_eq(ne0, 256);
    ne0 = 128;
    memcpy(p + 4, &ne0, 8);
    char err[256];
    ck_assert_int_eq(load_patched(buf, size, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, name) && strstr(err, "shape"), "%s", err);
    free(buf);
}
END_TEST

START_TEST(test_unsupported_type_and_arch) {
    size_t size;
    unsigned char *buf = read_tiny(&size);
    const char *name = "blk.0.attn_v.weight";
    unsigned char *p = find(buf, size, name) + strlen(name);
    uint32_t n_dims;
    memcpy(&n_dims, p, 4);
    uint32_t type = 10; /* Q2_K: smaller than Q8_0, so the file stays valid; no kernels */
    memcpy(p + 4 + 8 * n_dims, &type, 4);
    char err[256];
    ck_assert_int_eq(load_patched(buf, size, err, sizeof err), WF_EUNSUPPORTED);
    ck_assert_msg(strstr(err, name) && strstr(err, "q2_k"), "%s", err);
    free(buf);

    buf = read_tiny(&size);
    /* the architecture value follows its key; "llama" -> "llamb" */
    unsigned char *k = find(buf, size, "general.architecture");
    unsigned char *v = find(k, size - (size_t)(k - buf), "llama");
    v[4] = 'b';
    ck_assert_int_eq(load_patched(buf, size, err, sizeof err), WF_EUNSUPPORTED);
    ck_assert_msg(strstr(err, "llamb"), "%s", err);
    free(buf);
}
END_TEST

START_TEST(test_open_missing_file) {
    wf_model *m = (wf_model *)1;
    char err[256] = "";
    ck_assert_int_ne(wf_model_load("/nonexistent.gguf", &m, err, sizeof err), WF_OK);
    ck_assert_ptr_null(m);
    ck_assert(strlen(err) > 0);
}
END_TEST

static Suite *model_suite(void) {
    Suite *s = suite_create("engine_model");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, test_default_model_hparams);
    tcase_add_test(tc, test_tiny_qwen2_and_rope_variants);
    tcase_add_test(tc, test_missing_tensor);
    tcase_add_test(tc, test_wrong_shape);
    tcase_add_test(tc, test_unsupported_type_and_arch);
    tcase_add_test(tc, test_open_missing_file);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(model_suite)
