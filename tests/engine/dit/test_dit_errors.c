/* Tests the DiT loader's and forward's errors: corrupt or truncated weights and configs, an
 * unknown activation, mismatched shapes, missing tensors, per-block copies that differ, and bad
 * forward arguments (size not divisible by the patch, too large, batch, label) each fail with
 * the right status and a message naming the problem. Variants of the committed tiny diffusers
 * folder are written to a scratch directory. */
#define _GNU_SOURCE /* nftw */
#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "engine/dit/dit.h"
#include "engine/dit/dit_gen.h"
#include "engine/dit/safetensors.h"

#define TINY WEFT_SOURCE_DIR "/tests/engine/data/dit/tiny_diffusers"

static char g_dir[64];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb; (void)flag; (void)f;
    return remove(p);
}

static void copy_file(const char *src, const char *dst) {
    FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
    ck_assert(a && b);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) ck_assert_uint_eq(fwrite(buf, 1, n, b), n);
    fclose(a);
    ck_assert_int_eq(fclose(b), 0);
}

static void teardown(void);

/* A fresh copy of the tiny folder (the previous one removed); returns its path. */
static const char *scratch(void) {
    teardown();
    strcpy(g_dir, "/tmp/weft-dit-err-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    char p[256];
    snprintf(p, sizeof p, "%s/transformer", g_dir);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/model_index.json", g_dir);
    copy_file(TINY "/model_index.json", p);
    snprintf(p, sizeof p, "%s/transformer/config.json", g_dir);
    copy_file(TINY "/transformer/config.json", p);
    snprintf(p, sizeof p, "%s/transformer/diffusion_pytorch_model.safetensors", g_dir);
    copy_file(TINY "/transformer/diffusion_pytorch_model.safetensors", p);
    return g_dir;
}

static void teardown(void) {
    if (g_dir[0]) nftw(g_dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
    g_dir[0] = 0;
}

static void expect_load_fail(const char *path, wf_status want, const char *needle) {
    wf_dit *m = (wf_dit *)1;
    char err[512] = "";
    wf_status rc = wf_dit_load(path, NULL, &m, err, sizeof err);
    ck_assert_msg(rc == want, "got %s (%s), want %s", wf_status_name(rc), err, wf_status_name(want));
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
}

/* Rewrites one key of the scratch config (value as JSON text). */
static void set_config(const char *key, const char *json_value) {
    char p[256];
    snprintf(p, sizeof p, "%s/transformer/config.json", g_dir);
    json_t *o = json_load_file(p, 0, NULL);
    ck_assert_ptr_nonnull(o);
    json_object_set_new(o, key, json_loads(json_value, JSON_DECODE_ANY, NULL));
    ck_assert_int_eq(json_dump_file(o, p, 0), 0);
    json_decref(o);
}

/* Rewrites the scratch weights: drops tensor `drop` and/or perturbs tensor `bump` (fp32). */
static void rewrite_weights(const char *drop, const char *bump) {
    char p[256];
    snprintf(p, sizeof p, "%s/transformer/diffusion_pytorch_model.safetensors", g_dir);
    wf_safetensors *st;
    ck_assert_int_eq(wf_safetensors_open(TINY "/transformer/diffusion_pytorch_model.safetensors", &st, NULL, 0), WF_OK);
    dit_st_writer w;
    dit_st_init(&w);
    for (int64_t i = 0; i < wf_safetensors_n_tensors(st); i++) {
        const wf_safetensors_tensor *t = wf_safetensors_tensor_at(st, i);
        if (drop && !strcmp(t->name, drop)) continue;
        float *d = malloc((size_t)(t->n_elements ? t->n_elements : 1) * sizeof *d);
        wf_safetensors_to_f32(t, d, t->n_elements);
        if (bump && !strcmp(t->name, bump)) d[t->n_elements - 1] += 0.5f;
        long shape[8];
        for (int k = 0; k < t->n_dims; k++) shape[k] = (long)t->shape[k];
        dit_st_add(&w, t->name, t->n_dims, shape, d, (size_t)t->n_elements);
    }
    wf_safetensors_close(st);
    ck_assert_int_eq(dit_st_finish(&w, p), 0);
}

START_TEST(scratch_copy_loads) {
    /* the baseline: an unmodified copy (and a rewritten but equal weight file) loads */
    wf_dit *m;
    char err[256] = "";
    ck_assert_msg(wf_dit_load(scratch(), NULL, &m, err, sizeof err) == WF_OK, "%s", err);
    wf_dit_free(m);
    rewrite_weights(NULL, NULL);
    ck_assert_msg(wf_dit_load(g_dir, NULL, &m, err, sizeof err) == WF_OK, "%s", err);
    wf_dit_free(m);
}
END_TEST

START_TEST(unknown_activation) {
    scratch();
    set_config("activation_fn", "\"relu\"");
    expect_load_fail(g_dir, WF_EUNSUPPORTED, "unknown activation_fn 'relu'");
}
END_TEST

START_TEST(bad_config_values) {
    scratch();
    set_config("num_layers", "\"two\"");
    expect_load_fail(g_dir, WF_EFORMAT, "'num_layers' must be a positive integer");
    scratch();
    set_config("patch_size", "null");
    expect_load_fail(g_dir, WF_EFORMAT, "missing 'patch_size'");
    scratch();
    set_config("norm_type", "\"layer_norm\"");
    expect_load_fail(g_dir, WF_EUNSUPPORTED, "norm_type 'layer_norm'");
    scratch();
    set_config("_class_name", "\"UNet2DModel\"");
    expect_load_fail(g_dir, WF_EUNSUPPORTED, "is not DiTTransformer2DModel");
    scratch();
    char p[256];
    snprintf(p, sizeof p, "%s/transformer/config.json", g_dir);
    FILE *f = fopen(p, "w");
    fputs("{\"num_layers\": 2,", f); /* truncated JSON */
    fclose(f);
    expect_load_fail(g_dir, WF_EFORMAT, "config.json");
}
END_TEST

START_TEST(config_shape_mismatch) {
    scratch();
    set_config("attention_head_dim", "8"); /* hidden 16 vs weights of 32 */
    expect_load_fail(g_dir, WF_EFORMAT, "tensor 'pos_embed.proj.weight' has shape [32, 4, 2, 2] but the config needs [16, 4, 2, 2]");
    scratch();
    set_config("num_layers", "3");
    expect_load_fail(g_dir, WF_EFORMAT, "missing tensor 'transformer_blocks.2.");
    scratch();
    set_config("out_channels", "4");
    expect_load_fail(g_dir, WF_EFORMAT, "tensor 'proj_out_2.weight' has shape [32, 32]");
}
END_TEST

START_TEST(missing_tensor) {
    scratch();
    rewrite_weights("transformer_blocks.1.attn1.to_k.bias", NULL);
    expect_load_fail(g_dir, WF_EFORMAT, "missing tensor 'transformer_blocks.1.attn1.to_k.bias'");
}
END_TEST

/* Forward of the model at path on a fixed input (tiny_diffusers: 4 x 8 x 8 in, 8 x 8 x 8 out),
 * label 10 (the null class: the table row the bump changes). */
static void tiny_forward(const char *path, float *out) {
    wf_dit *m;
    char err[256] = "";
    ck_assert_msg(wf_dit_load(path, NULL, &m, err, sizeof err) == WF_OK, "%s", err);
    float x[4 * 8 * 8], t[1] = {321.0f};
    int32_t y[1] = {10};
    for (int i = 0; i < 4 * 8 * 8; i++) x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
    ck_assert_msg(wf_dit_forward(m, NULL, 1, 8, 8, x, t, y, out, NULL, err, sizeof err) == WF_OK, "%s", err);
    wf_dit_free(m);
}

START_TEST(per_block_copies_differ) {
    /* diffusers-trained models keep a timestep MLP and label table per block: when block 1's
     * copy differs from block 0's, weft loads it and block 1 uses it (the output changes) */
    float base[8 * 8 * 8], bumped[8 * 8 * 8];
    tiny_forward(scratch(), base);
    static const char *const names[] = {
        "transformer_blocks.1.norm1.emb.class_embedder.embedding_table.weight",
        "transformer_blocks.1.norm1.emb.timestep_embedder.linear_2.bias"};
    for (int k = 0; k < 2; k++) {
        scratch();
        rewrite_weights(NULL, names[k]);
        tiny_forward(g_dir, bumped);
        ck_assert_msg(memcmp(base, bumped, sizeof base) != 0, "%s: block 1's copy unused", names[k]);
    }
}
END_TEST

START_TEST(corrupt_weights) {
    scratch();
    char p[256];
    snprintf(p, sizeof p, "%s/transformer/diffusion_pytorch_model.safetensors", g_dir);
    ck_assert_int_eq(truncate(p, 5000), 0);
    expect_load_fail(g_dir, WF_EFORMAT, "diffusion_pytorch_model.safetensors");
    ck_assert_int_eq(unlink(p), 0);
    expect_load_fail(g_dir, WF_ENOTFOUND, "diffusion_pytorch_model.safetensors");
}
END_TEST

START_TEST(not_a_dit) {
    expect_load_fail(WEFT_SOURCE_DIR "/tests/engine/data", WF_ENOTFOUND, "not a DiT folder");
    expect_load_fail(WEFT_SOURCE_DIR "/tests/engine/data/dit/tiny_ref.safetensors", WF_EFORMAT, "no DiT tensors");
    expect_load_fail(WEFT_SOURCE_DIR "/README.md", WF_EFORMAT, "README.md");
}
END_TEST

START_TEST(forward_bad_arguments) {
    wf_dit_options opt = wf_dit_options_default();
    opt.max_batch = 2;
    opt.n_threads = 1;
    wf_dit *m;
    char err[256] = "";
    ck_assert_msg(wf_dit_load(TINY, &opt, &m, err, sizeof err) == WF_OK, "%s", err);
    float x[2 * 4 * 9 * 9] = {0}, out[2 * 8 * 9 * 9], t[2] = {1, 2};
    int32_t y[2] = {0, 10}, bad[2] = {0, 11};
    ck_assert_int_eq(wf_dit_forward(m, NULL, 1, 7, 8, x, t, y, out, NULL, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "size 7x8 is not a positive multiple of the patch size 2"), "%s", err);
    ck_assert_int_eq(wf_dit_forward(m, NULL, 1, 10, 10, x, t, y, out, NULL, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "above the maximum 8x8"), "%s", err);
    ck_assert_int_eq(wf_dit_forward(m, NULL, 3, 8, 8, x, t, y, out, NULL, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "batch 3 outside [1, 2]"), "%s", err);
    ck_assert_int_eq(wf_dit_forward(m, NULL, 2, 8, 8, x, t, bad, out, NULL, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "label 11 of item 1 outside [0, 10]"), "%s", err);
    wf_threadpool *pool = wf_threadpool_new(2);
    ck_assert_int_eq(wf_dit_forward(m, pool, 2, 8, 8, x, t, y, out, NULL, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "pool of 2 threads"), "%s", err);
    wf_threadpool_free(pool);
    ck_assert_int_eq(wf_dit_forward(m, NULL, 2, 8, 6, x, t, y, out, NULL, err, sizeof err), WF_OK); /* non-square */
    wf_dit_free(m);
}
END_TEST

static Suite *errors_suite(void) {
    Suite *s = suite_create("dit_errors");
    TCase *tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, scratch_copy_loads);
    tcase_add_test(tc, unknown_activation);
    tcase_add_test(tc, bad_config_values);
    tcase_add_test(tc, config_shape_mismatch);
    tcase_add_test(tc, missing_tensor);
    tcase_add_test(tc, per_block_copies_differ);
    tcase_add_test(tc, corrupt_weights);
    tcase_add_test(tc, not_a_dit);
    tcase_add_test(tc, forward_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(errors_suite)
