/* engine/dit/vae.c: decoder parity with diffusers 0.31's AutoencoderKL (fixtures from
 * scripts/make_dit_vae_fixtures.py: a tiny config and the sd-vae topology at reduced widths,
 * weights generated on both sides from a hash of name and index), identical results for any
 * thread count and load-time maximum, fp16 weights, and clear errors for missing tensors, shape
 * mismatches, bad sizes and bad configs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "engine/cpu/quant.h"
#include "engine/cpu/threadpool.h"
#include "engine/dit/dit.h"
#include "engine/dit/dit_gen.h"
#include "engine/dit/dit_step.h"
#include "engine/dit/vae.h"

#define DATA WEFT_SOURCE_DIR "/tests/engine/data/dit/"
#define MAX_TENSORS 256

typedef struct tensor {
    char name[128];
    int nd;
    int64_t shape[4];
    void *data;
} tensor;

typedef struct store {
    tensor t[MAX_TENSORS];
    int n;
    wf_dit_dtype dtype;
    const char *drop;     /* this name reads as missing */
    const char *misshape; /* this name reports a wrong first dimension */
} store;

static uint32_t fnv1a(const char *s) {
    uint32_t h = 0x811C9DC5u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x01000193u;
    return h;
}

/* weft_weight() of scripts/make_dit_vae_fixtures.py. */
static float gen_weight(const char *name, int nd, const int64_t *shape, uint64_t j) {
    uint32_t x = (uint32_t)(j * 0x9E3779B1u + fnv1a(name));
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    double r = (double)x / 4294967296.0 * 2.0 - 1.0;
    size_t len = strlen(name);
    int is_weight = len > 7 && strcmp(name + len - 7, ".weight") == 0;
    if (is_weight && nd >= 2) {
        int64_t fan_in = 1;
        for (int i = 1; i < nd; i++) fan_in *= shape[i];
        return (float)(r * sqrt(3.0 / (double)fan_in));
    }
    return (float)(is_weight ? 1.0 + 0.2 * r : 0.1 * r);
}

static void load_store(store *s, const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/weights.txt", dir);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    memset(s, 0, sizeof *s);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        tensor *t = &s->t[s->n];
        long long d[4] = {0};
        int got = sscanf(line, "%127s %lld %lld %lld %lld", t->name, &d[0], &d[1], &d[2], &d[3]);
        if (got < 2) continue;
        t->nd = got - 1;
        for (int i = 0; i < 4; i++) t->shape[i] = d[i];
        ck_assert_int_lt(++s->n, MAX_TENSORS);
    }
    fclose(f);
}

static void free_store(store *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->t[i].data);
        s->t[i].data = NULL;
    }
}

static wf_status lookup(void *user, const char *name, wf_dit_tensor_view *out) {
    store *s = user;
    if (s->drop && strcmp(name, s->drop) == 0) return WF_ENOTFOUND;
    for (int i = 0; i < s->n; i++) {
        tensor *t = &s->t[i];
        if (strcmp(t->name, name) != 0) continue;
        int64_t n = 1;
        for (int d = 0; d < t->nd; d++) n *= t->shape[d];
        if (!t->data) {
            t->data = malloc((size_t)n * 4);
            if (!t->data) return WF_ENOMEM;
            for (int64_t j = 0; j < n; j++) {
                float v = gen_weight(t->name, t->nd, t->shape, (uint64_t)j);
                if (s->dtype == WF_DIT_DTYPE_F16) ((uint16_t *)t->data)[j] = wf_fp32_to_fp16(v);
                else ((float *)t->data)[j] = v;
            }
        }
        out->dtype = s->dtype;
        out->n_dims = t->nd;
        memcpy(out->shape, t->shape, sizeof t->shape);
        if (s->misshape && strcmp(name, s->misshape) == 0) out->shape[0] += 1;
        out->data = t->data;
        return WF_OK;
    }
    return WF_ENOTFOUND;
}

static float *read_bin(const char *dir, const char *file, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    float *buf = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, sizeof(float), n, f), n);
    fclose(f);
    return buf;
}

typedef struct vcase {
    const char *dir;
    int c, h, w; /* latent */
} vcase;

static const vcase CASES[] = {{DATA "vae_tiny", 2, 4, 4}, {DATA "vae_sdvae", 4, 8, 8}};

static void config_of(const vcase *vc, wf_dit_vae_config *cfg) {
    char path[512], err[256] = "";
    snprintf(path, sizeof path, "%s/config.json", vc->dir);
    ck_assert_msg(wf_dit_vae_config_load(path, cfg, err, sizeof err) == WF_OK, "%s", err);
}

/* Decodes a case, returns the image (caller frees). */
static float *decode_case(const vcase *vc, wf_dit_dtype dtype, int max_side, wf_threadpool *pool,
                          size_t *n_out) {
    wf_dit_vae_config cfg;
    config_of(vc, &cfg);
    static store s;
    load_store(&s, vc->dir);
    s.dtype = dtype;
    wf_dit_vae *vae = NULL;
    char err[256] = "";
    ck_assert_msg(wf_dit_vae_new(&cfg, lookup, &s, max_side, max_side, pool, &vae, err,
                                 sizeof err) == WF_OK,
                  "%s", err);
    free_store(&s); /* the decoder keeps its own copies */
    int up = wf_dit_vae_upscale(vae);
    size_t n = (size_t)cfg.out_channels * (size_t)(vc->h * up) * (size_t)(vc->w * up);
    float *latent = read_bin(vc->dir, "latent.bin", (size_t)(vc->c * vc->h * vc->w));
    float *img = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(img);
    ck_assert_int_eq(wf_dit_vae_decode(vae, latent, vc->h, vc->w, img), WF_OK);
    free(latent);
    wf_dit_vae_free(vae);
    *n_out = n;
    return img;
}

static double rel_err(const float *got, const float *ref, size_t n) {
    double ss = 0, maxd = 0;
    for (size_t i = 0; i < n; i++) {
        ss += (double)ref[i] * ref[i];
        maxd = fmax(maxd, fabs((double)got[i] - ref[i]));
    }
    return maxd / sqrt(ss / (double)n);
}

START_TEST(test_parity_with_diffusers) {
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        size_t n;
        float *img = decode_case(&CASES[k], WF_DIT_DTYPE_F32, CASES[k].h, NULL, &n);
        float *ref = read_bin(CASES[k].dir, "image.bin", n);
        double e = rel_err(img, ref, n);
        ck_assert_msg(e <= 1e-5, "%s: max |d| / rms(ref) = %g", CASES[k].dir, e);
        free(img);
        free(ref);
    }
}
END_TEST

START_TEST(test_threads_and_larger_scratch) {
    const vcase *vc = &CASES[1];
    size_t n;
    float *base = decode_case(vc, WF_DIT_DTYPE_F32, vc->h, NULL, &n);
    for (int t = 2; t <= 3; t++) {
        wf_threadpool *pool = wf_threadpool_new(t);
        ck_assert_ptr_nonnull(pool);
        float *img = decode_case(vc, WF_DIT_DTYPE_F32, 2 * vc->h, pool, &n);
        ck_assert_mem_eq(img, base, n * sizeof(float));
        free(img);
        wf_threadpool_free(pool);
    }
    free(base);
}
END_TEST

/* The production hook: a latent model's folder (the tiny DiT plus vae/config.json and
 * vae/diffusion_pytorch_model.safetensors holding vae_tiny's weights) decodes through
 * wf_dit_vae_open, which reads the weights with the safetensors reader, to diffusers' image. */
START_TEST(test_vae_open_from_model_folder) {
    const vcase *vc = &CASES[0];
    char dir[] = "/tmp/weft_vae_hookXXXXXX", cmd[1024], path[512], err[512] = "";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "cp -r %s/tiny_diffusers/. %s && mkdir %s/vae && cp %s/config.json %s/vae/",
             DATA, dir, dir, vc->dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    static store s;
    load_store(&s, vc->dir);
    dit_st_writer w;
    dit_st_init(&w);
    for (int i = 0; i < s.n; i++) {
        tensor *t = &s.t[i];
        size_t n = 1;
        long shape[4];
        for (int d = 0; d < t->nd; d++) {
            n *= (size_t)t->shape[d];
            shape[d] = (long)t->shape[d];
        }
        float *d = malloc(n * sizeof *d);
        ck_assert_ptr_nonnull(d);
        for (size_t j = 0; j < n; j++) d[j] = gen_weight(t->name, t->nd, t->shape, j);
        dit_st_add(&w, t->name, t->nd, shape, d, n);
    }
    snprintf(path, sizeof path, "%s/vae/diffusion_pytorch_model.safetensors", dir);
    ck_assert_int_eq(dit_st_finish(&w, path), 0);

    wf_dit *m;
    ck_assert_msg(wf_dit_load(dir, NULL, &m, err, sizeof err) == WF_OK, "%s", err);
    wf_dit_vae *vae;
    ck_assert_msg(wf_dit_vae_open(m, vc->h, vc->w, NULL, &vae, err, sizeof err) == WF_OK, "%s", err);
    int up = wf_dit_vae_upscale(vae);
    size_t n = 3 * (size_t)(vc->h * up) * (size_t)(vc->w * up);
    float *latent = read_bin(vc->dir, "latent.bin", (size_t)(vc->c * vc->h * vc->w));
    float *ref = read_bin(vc->dir, "image.bin", n), *img = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(img);
    ck_assert_int_eq(wf_dit_vae_decode(vae, latent, vc->h, vc->w, img), WF_OK);
    double e = rel_err(img, ref, n);
    ck_assert_msg(e <= 1e-5, "max |d| / rms(ref) = %g", e);
    wf_dit_vae_free(vae);
    wf_dit_free(m);
    /* a missing weight file is the reader's error, naming the file */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(wf_dit_load(dir, NULL, &m, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_dit_vae_open(m, vc->h, vc->w, NULL, &vae, err, sizeof err), WF_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "diffusion_pytorch_model.safetensors"));
    wf_dit_free(m);
    free(latent);
    free(ref);
    free(img);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_fp16_weights) {
    const vcase *vc = &CASES[0];
    size_t n;
    float *img = decode_case(vc, WF_DIT_DTYPE_F16, vc->h, NULL, &n);
    float *ref = read_bin(vc->dir, "image.bin", n);
    double e = rel_err(img, ref, n);
    ck_assert_msg(e > 0 && e < 2e-2, "fp16 weights: max |d| / rms(ref) = %g", e);
    free(img);
    free(ref);
}
END_TEST

static void expect_new_error(const char *drop, const char *misshape, wf_status want,
                             const char *needle) {
    const vcase *vc = &CASES[0];
    wf_dit_vae_config cfg;
    config_of(vc, &cfg);
    static store s;
    load_store(&s, vc->dir);
    s.drop = drop;
    s.misshape = misshape;
    wf_dit_vae *vae = (wf_dit_vae *)&cfg;
    char err[256] = "";
    wf_status st = wf_dit_vae_new(&cfg, lookup, &s, 4, 4, NULL, &vae, err, sizeof err);
    free_store(&s);
    ck_assert_msg(st == want, "status %d, want %d (%s)", st, want, err);
    ck_assert_ptr_null(vae);
    ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
}

START_TEST(test_load_errors) {
    expect_new_error("decoder.up_blocks.1.resnets.0.conv2.weight", NULL, WF_ENOTFOUND,
                     "decoder.up_blocks.1.resnets.0.conv2.weight");
    expect_new_error("decoder.mid_block.attentions.0.to_q.bias", NULL, WF_ENOTFOUND, "query.bias");
    expect_new_error(NULL, "decoder.conv_in.weight", WF_EINVAL, "[33x2x3x3], expected [32x2x3x3]");
    expect_new_error(NULL, "decoder.conv_norm_out.bias", WF_EINVAL, "conv_norm_out.bias");
    /* a config that disagrees with the weights: more latent channels than stored */
    const vcase *vc = &CASES[0];
    wf_dit_vae_config cfg;
    config_of(vc, &cfg);
    cfg.latent_channels = 3;
    static store s;
    load_store(&s, vc->dir);
    wf_dit_vae *vae = NULL;
    char err[256] = "";
    ck_assert_int_eq(wf_dit_vae_new(&cfg, lookup, &s, 4, 4, NULL, &vae, err, sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "decoder.conv_in.weight"));
    cfg.latent_channels = 2;
    ck_assert_int_eq(wf_dit_vae_new(&cfg, lookup, &s, 0, 4, NULL, &vae, err, sizeof err),
                     WF_EINVAL);
    ck_assert_int_eq(wf_dit_vae_new(&cfg, lookup, &s, 4, 4, NULL, &vae, err, sizeof err), WF_OK);
    float latent[2 * 5 * 5] = {0}, img[3 * 10 * 10];
    ck_assert_int_eq(wf_dit_vae_decode(vae, latent, 5, 4, img), WF_EINVAL); /* above max */
    ck_assert_int_eq(wf_dit_vae_decode(vae, latent, 0, 4, img), WF_EINVAL);
    ck_assert_int_eq(wf_dit_vae_decode(vae, NULL, 4, 4, img), WF_EINVAL);
    ck_assert_int_eq(wf_dit_vae_decode(vae, latent, 2, 3, img), WF_OK); /* smaller is fine */
    /* any shape of at most 4 x 4 points (another image size than the native one), the same
     * pixels as a decoder made for exactly that shape */
    for (int i = 0; i < 2 * 16; i++) latent[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    ck_assert_int_eq(wf_dit_vae_decode(vae, latent, 2, 8, img), WF_OK);
    ck_assert_int_eq(wf_dit_vae_decode(vae, latent, 1, 17, img), WF_EINVAL); /* 17 points */
    wf_dit_vae *exact = NULL;
    float img2[3 * 10 * 10];
    ck_assert_int_eq(wf_dit_vae_new(&cfg, lookup, &s, 2, 8, NULL, &exact, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_dit_vae_decode(exact, latent, 2, 8, img2), WF_OK);
    int up = wf_dit_vae_upscale(vae);
    ck_assert_int_eq(memcmp(img, img2, sizeof(float) * (size_t)cfg.out_channels * 2 * up * 8 * up), 0);
    wf_dit_vae_free(exact);
    wf_dit_vae_free(vae);
    wf_dit_vae_free(NULL);
    free_store(&s);
}
END_TEST

static void expect_cfg_error(const char *json, wf_status want, const char *needle) {
    wf_dit_vae_config cfg;
    char err[256] = "";
    wf_status st = wf_dit_vae_config_parse(json, strlen(json), &cfg, err, sizeof err);
    ck_assert_msg(st == want, "%s: status %d, want %d (%s)", json, st, want, err);
    ck_assert_msg(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", json, err, needle);
}

START_TEST(test_config_errors) {
    expect_cfg_error("{\"block_out_channels\": [32, 48]}", WF_EINVAL, "not divisible");
    expect_cfg_error("{\"_class_name\": \"AutoencoderTiny\", \"block_out_channels\": [32]}",
                     WF_EUNSUPPORTED, "AutoencoderTiny");
    expect_cfg_error("{\"block_out_channels\": [32], \"up_block_types\": [\"UpBlock2D\"]}",
                     WF_EUNSUPPORTED, "UpBlock2D");
    expect_cfg_error("{\"layers_per_block\": 2}", WF_EFORMAT, "block_out_channels");
    expect_cfg_error("{\"block_out_channels\": [32], \"scaling_factor\": 0}", WF_EINVAL,
                     "scaling_factor");
    expect_cfg_error("{\"block_out_channels\": [32], \"latent_channels\": \"4\"}", WF_EFORMAT,
                     "latent_channels");
    expect_cfg_error("{\"block_out_channels\": [32], \"act_fn\": \"gelu\"}", WF_EUNSUPPORTED,
                     "act_fn");
    expect_cfg_error("[]", WF_EFORMAT, "not a JSON object");
    expect_cfg_error("{", WF_EFORMAT, "line");
    wf_dit_vae_config cfg;
    char err[256] = "";
    ck_assert_int_eq(wf_dit_vae_config_load("/nonexistent/vae/config.json", &cfg, err, sizeof err),
                     WF_ENOTFOUND);
    ck_assert_int_eq(wf_dit_vae_config_load(DATA "vae_sdvae/config.json", &cfg, err, sizeof err),
                     WF_OK);
    ck_assert_int_eq(cfg.n_blocks, 4);
    ck_assert_int_eq(cfg.layers_per_block, 2);
    ck_assert_int_eq(cfg.norm_num_groups, 32);
    ck_assert_double_eq_tol(cfg.scaling_factor, 0.18215, 1e-12);
}
END_TEST

static Suite *vae_suite(void) {
    Suite *s = suite_create("dit_vae");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_parity_with_diffusers);
    tcase_add_test(tc, test_threads_and_larger_scratch);
    tcase_add_test(tc, test_fp16_weights);
    tcase_add_test(tc, test_vae_open_from_model_folder);
    tcase_add_test(tc, test_load_errors);
    tcase_add_test(tc, test_config_errors);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(vae_suite)
