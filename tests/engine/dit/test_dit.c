/* Tests engine/dit/dit.c and dit_load.c against diffusers' DiTTransformer2DModel: references
 * made by scripts/make_dit_fixtures.py (no torch here). DiT-S/2 at full depth and DiT-XL/2
 * width at depth 2 are rebuilt from the shared generator (dit_gen.h); the tiny model is read
 * from a real diffusers folder and an original-layout bf16 file of the same weights. Each
 * comparison is max|d| / RMS(reference) on the output and on intermediates (patch embedding,
 * conditioning, first and last block), <= 1e-5 in fp32 and <= 1e-2 in bf16.
 * weft-test: labels=unit timeout=300 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "engine/dit/dit.h"
#include "engine/dit/dit_gen.h"
#include "engine/dit/safetensors.h"

#define DATA WEFT_SOURCE_DIR "/tests/engine/data/dit/"

typedef struct ref_case {
    wf_safetensors *st;
    json_t *cfg, *ts, *labels;
    int size, shift, stride;
    uint64_t seed;
} ref_case;

static void ref_open(ref_case *r, const char *name) {
    char path[512], err[256] = "";
    snprintf(path, sizeof path, DATA "%s.safetensors", name);
    ck_assert_msg(wf_safetensors_open(path, &r->st, err, sizeof err) == WF_OK, "%s", err);
    r->cfg = json_loads(wf_safetensors_metadata(r->st, "config"), 0, NULL);
    r->ts = json_loads(wf_safetensors_metadata(r->st, "timesteps"), 0, NULL);
    r->labels = json_loads(wf_safetensors_metadata(r->st, "labels"), 0, NULL);
    ck_assert_ptr_nonnull(r->cfg);
    ck_assert_ptr_nonnull(r->ts);
    ck_assert_ptr_nonnull(r->labels);
    r->size = atoi(wf_safetensors_metadata(r->st, "size"));
    r->shift = atoi(wf_safetensors_metadata(r->st, "shift"));
    r->stride = atoi(wf_safetensors_metadata(r->st, "token_stride"));
    r->seed = strtoull(wf_safetensors_metadata(r->st, "seed"), NULL, 10);
}

static void ref_close(ref_case *r) {
    json_decref(r->cfg);
    json_decref(r->ts);
    json_decref(r->labels);
    wf_safetensors_close(r->st);
}

static int cfg_int(const ref_case *r, const char *k) { return (int)json_integer_value(json_object_get(r->cfg, k)); }

/* Collects the intermediates forward reports, at the reference's token subset. */
typedef struct dumps {
    int depth, stride;
    float *patch, *cond, *first, *last;
    size_t n_patch, n_cond, n_first, n_last;
} dumps;

static float *subset(const float *data, int batch, int rows, int cols, int stride, size_t *n) {
    int per = (rows + stride - 1) / stride;
    float *o = malloc((size_t)batch * per * cols * sizeof *o);
    size_t k = 0;
    for (int b = 0; b < batch; b++)
        for (int r = 0; r < rows; r += stride) {
            memcpy(o + k, data + ((size_t)b * rows + r) * cols, (size_t)cols * sizeof *o);
            k += (size_t)cols;
        }
    *n = k;
    return o;
}

static void on_dump(void *user, const char *what, int index, const float *data, int batch, int rows, int cols) {
    dumps *d = user;
    if (!strcmp(what, "patch")) d->patch = subset(data, batch, rows, cols, d->stride, &d->n_patch);
    if (!strcmp(what, "cond")) d->cond = subset(data, batch, rows, cols, 1, &d->n_cond);
    if (!strcmp(what, "block") && index == 0) d->first = subset(data, batch, rows, cols, d->stride, &d->n_first);
    if (!strcmp(what, "block") && index == d->depth - 1)
        d->last = subset(data, batch, rows, cols, d->stride, &d->n_last);
}

/* max|got - ref| / rms(ref) for tensor `name` of the reference */
static double rel_err(const ref_case *r, const char *name, const float *got, size_t n) {
    const wf_safetensors_tensor *t = wf_safetensors_find(r->st, name);
    ck_assert_ptr_nonnull(t);
    ck_assert_msg((size_t)t->n_elements == n, "%s: %lld reference values, %zu computed", name,
                  (long long)t->n_elements, n);
    float *ref = malloc(n * sizeof *ref);
    wf_safetensors_to_f32(t, ref, (int64_t)n);
    double ss = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        ss += (double)ref[i] * ref[i];
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= mx)) mx = d; /* NaN counts as a failure */
    }
    free(ref);
    double rms = sqrt(ss / (double)n);
    ck_assert_msg(rms > 1e-3, "%s: reference RMS %g is vacuous", name, rms);
    return mx / rms;
}

/* Runs model m on the reference's inputs and compares everything. */
static void compare(wf_dit *m, const ref_case *r, double tol, const char *label) {
    const wf_dit_config *c = wf_dit_get_config(m);
    int B = (int)json_array_size(r->ts), S = r->size, C = c->in_channels;
    float *x = malloc((size_t)B * C * S * S * sizeof *x), t[8];
    int32_t y[8];
    dit_gen_values("input.latents", (size_t)B * C * S * S, 0, r->seed, x);
    for (int b = 0; b < B; b++) {
        t[b] = (float)json_number_value(json_array_get(r->ts, b));
        y[b] = (int32_t)json_integer_value(json_array_get(r->labels, b));
    }
    size_t n_out = (size_t)B * c->out_channels * S * S;
    float *out = malloc(n_out * sizeof *out);
    dumps d = {.depth = c->depth, .stride = r->stride};
    wf_dit_dump hook = {on_dump, &d};
    wf_threadpool *pool = wf_threadpool_new(2);
    char err[256] = "";
    ck_assert_msg(wf_dit_forward(m, pool, B, S, S, x, t, y, out, &hook, err, sizeof err) == WF_OK, "%s", err);
    double e_out = rel_err(r, "out", out, n_out), e_patch = rel_err(r, "patch", d.patch, d.n_patch);
    double e_cond = rel_err(r, "cond", d.cond, d.n_cond), e_first = rel_err(r, "block_first", d.first, d.n_first);
    double e_last = rel_err(r, "block_last", d.last, d.n_last);
    fprintf(stderr, "%-28s patch %.2e cond %.2e first %.2e last %.2e out %.2e (tol %.0e)\n", label, e_patch, e_cond,
           e_first, e_last, e_out, tol);
    ck_assert_msg(e_patch <= tol && e_cond <= tol && e_first <= tol && e_last <= tol && e_out <= tol,
                  "%s: relative error above %g", label, tol);
    /* Determinism: a second run (positions cached, buffers reused) gives the same bits. */
    float *out2 = malloc(n_out * sizeof *out2);
    ck_assert(wf_dit_forward(m, pool, B, S, S, x, t, y, out2, NULL, err, sizeof err) == WF_OK);
    ck_assert(memcmp(out, out2, n_out * sizeof *out) == 0);
    wf_threadpool_free(pool);
    free(out2);
    free(out);
    free(x);
    free(d.patch);
    free(d.cond);
    free(d.first);
    free(d.last);
}

/* A generated model from the reference's config, in the original layout, loaded with the
 * reference's timestep convention. */
static void generated_case(const char *name, bool bf16, double tol) {
    ref_case r;
    ref_open(&r, name);
    dit_gen_cfg g = {cfg_int(&r, "hidden"), cfg_int(&r, "heads"), cfg_int(&r, "depth"), cfg_int(&r, "in_channels"),
                     cfg_int(&r, "out_channels"), cfg_int(&r, "patch"), cfg_int(&r, "sample"),
                     cfg_int(&r, "num_classes")};
    char path[] = "/tmp/weft-dit-XXXXXX.safetensors";
    int fd = mkstemps(path, 12);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(dit_gen_write_original(&g, r.seed, path), 0);
    wf_dit_options opt = wf_dit_options_default();
    opt.max_batch = (int)json_array_size(r.ts);
    opt.max_height = opt.max_width = r.size > g.sample ? r.size : g.sample;
    opt.timestep_shift = r.shift;
    opt.norm_eps = 1e-5f; /* diffusers' feed-forward norm eps (the original DiT uses 1e-6) */
    opt.heads = g.heads;
    opt.sample_size = g.sample;
    opt.bf16 = bf16;
    wf_dit *m;
    char err[256] = "";
    ck_assert_msg(wf_dit_load(path, &opt, &m, err, sizeof err) == WF_OK, "%s", err);
    unlink(path);
    const wf_dit_config *c = wf_dit_get_config(m);
    ck_assert_int_eq(c->hidden, g.hidden);
    ck_assert_int_eq(c->depth, g.depth);
    ck_assert_int_eq(c->heads, g.heads);
    ck_assert_int_eq(c->out_channels, g.out_channels);
    ck_assert_int_eq(c->layout, WF_DIT_LAYOUT_ORIGINAL);
    char label[64];
    snprintf(label, sizeof label, "%s %s", name, bf16 ? "bf16" : "fp32");
    compare(m, &r, tol, label);
    wf_dit_free(m);
    ref_close(&r);
}

START_TEST(s2_full_depth_fp32) { generated_case("s2_ref", false, 1e-5); }
END_TEST
START_TEST(s2_full_depth_bf16) { generated_case("s2_ref", true, 1e-2); }
END_TEST
START_TEST(xl2_width_fp32) { generated_case("xl2_ref", false, 1e-5); }
END_TEST
START_TEST(xl2_width_bf16) { generated_case("xl2_ref", true, 1e-2); }
END_TEST
START_TEST(pixel_space_fp32) { generated_case("pixel_ref", false, 1e-5); }
END_TEST
START_TEST(pixel_space_other_resolution) { generated_case("pixel_ref_24", false, 1e-5); }
END_TEST

static wf_dit *load_ok(const char *path, int shift, int max_size, int heads) {
    wf_dit_options opt = wf_dit_options_default();
    opt.heads = heads;
    opt.norm_eps = heads ? 1e-5f : 0.0f; /* original files: diffusers' eps, to compare */
    opt.timestep_shift = shift;
    opt.max_height = opt.max_width = max_size;
    wf_dit *m = NULL;
    char err[256] = "";
    ck_assert_msg(wf_dit_load(path, &opt, &m, err, sizeof err) == WF_OK, "%s", err);
    return m;
}

START_TEST(tiny_diffusers_folder) {
    wf_dit *m = load_ok(DATA "tiny_diffusers", -1, 12, 0);
    const wf_dit_config *c = wf_dit_get_config(m);
    ck_assert_int_eq(c->layout, WF_DIT_LAYOUT_DIFFUSERS);
    ck_assert_int_eq(c->timestep_shift, 1);
    ck_assert_int_eq(c->num_classes, 10);
    ck_assert(fabsf(c->norm_eps - 1e-5f) < 1e-9f);
    const wf_dit_paths *p = wf_dit_get_paths(m);
    ck_assert_ptr_nonnull(p->model_index);
    ck_assert_ptr_nonnull(p->scheduler_config);
    ck_assert(strstr(p->scheduler_config, "scheduler/scheduler_config.json") != NULL);
    ck_assert(strstr(p->weights, "transformer/diffusion_pytorch_model.safetensors") != NULL);
    ck_assert_ptr_null(p->vae_dir); /* the fixture has no vae/ */
    ref_case r;
    ref_open(&r, "tiny_ref");
    compare(m, &r, 1e-5, "tiny diffusers");
    ref_close(&r);
    ref_open(&r, "tiny_ref_12"); /* 12x12: positions recomputed for a 6x6 grid, base 4 */
    compare(m, &r, 1e-5, "tiny diffusers 12x12");
    ref_close(&r);
    wf_dit_free(m);
    /* the transformer folder alone loads too */
    m = load_ok(DATA "tiny_diffusers/transformer", -1, 0, 0);
    ck_assert_ptr_null(wf_dit_get_paths(m)->model_index);
    wf_dit_free(m);
}
END_TEST

START_TEST(tiny_original_layout) {
    /* same weights, original keys, bf16 storage (the values are bf16-exact) */
    wf_dit *m = load_ok(DATA "tiny_original.safetensors", -1, 0, 2);
    const wf_dit_config *c = wf_dit_get_config(m);
    ck_assert_int_eq(c->layout, WF_DIT_LAYOUT_ORIGINAL);
    ck_assert_int_eq(c->timestep_shift, 0);
    ck_assert_int_eq(c->hidden, 32);
    ck_assert_int_eq(c->patch_size, 2);
    ck_assert_int_eq(c->out_channels, 8);
    ck_assert_int_eq(c->depth, 2);
    wf_dit_free(m);
    ref_case r;
    m = load_ok(DATA "tiny_original.safetensors", 1, 0, 2);
    ref_open(&r, "tiny_ref"); /* identical output to the diffusers folder */
    compare(m, &r, 1e-5, "tiny original (shift 1)");
    ref_close(&r);
    wf_dit_free(m);
    m = load_ok(DATA "tiny_original.safetensors", -1, 0, 2);
    ref_open(&r, "tiny_ref_shift0"); /* diffusers run with the original timestep features */
    compare(m, &r, 1e-5, "tiny original (shift 0)");
    ref_close(&r);
    wf_dit_free(m);
}
END_TEST

START_TEST(detect) {
    ck_assert(wf_dit_detect(DATA "tiny_diffusers"));
    ck_assert(wf_dit_detect(DATA "tiny_diffusers/transformer"));
    ck_assert(wf_dit_detect(DATA "tiny_original.safetensors"));
    ck_assert(wf_dit_detect(DATA "tiny_diffusers/transformer/diffusion_pytorch_model.safetensors"));
    ck_assert(!wf_dit_detect(DATA "tiny_ref.safetensors")); /* a safetensors file, not a DiT */
    ck_assert(!wf_dit_detect(DATA));
    ck_assert(!wf_dit_detect(DATA "nope"));
    ck_assert(!wf_dit_detect(WEFT_SOURCE_DIR "/README.md"));
}
END_TEST

static Suite *dit_suite(void) {
    Suite *s = suite_create("dit");
    TCase *tc = tcase_create("parity");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, tiny_diffusers_folder);
    tcase_add_test(tc, tiny_original_layout);
    tcase_add_test(tc, detect);
    tcase_add_test(tc, pixel_space_fp32);
    tcase_add_test(tc, pixel_space_other_resolution);
    tcase_add_test(tc, s2_full_depth_fp32);
    tcase_add_test(tc, s2_full_depth_bf16);
    tcase_add_test(tc, xl2_width_fp32);
    tcase_add_test(tc, xl2_width_bf16);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(dit_suite)
