/* engine/dit/dit_step.c on the default DiT (deploy/models/weft-dit-fmnist): a request's latents
 * are bit-identical alone and inside a batch of 8 with mixed labels, guidance scales and step
 * indices; with 1 and 2 threads; and when steps 0..20 run as 0..7 then 7..20 on another stepper
 * (the state between steps is only latent, step, key); on another latent grid than the native
 * one (reserved by points and patches). Plus argument errors and the VAE hook of a
 * pixel-space model.
 * weft-test: labels=unit timeout=600 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/cpu/threadpool.h"
#include "engine/dit/dit_step.h"

#define MODEL WEFT_SOURCE_DIR "/deploy/models/weft-dit-fmnist"
enum { STEPS = 20, BATCH = 8 };

static wf_dit *model;
static wf_dit_sampler_config scfg;
static char err[512];

static void setup(void) {
    wf_dit_options opt = wf_dit_options_default();
    opt.max_batch = 2 * BATCH;
    opt.n_threads = 2;
    ck_assert_msg(wf_dit_load(MODEL, &opt, &model, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_msg(wf_dit_sampler_config_load(wf_dit_get_paths(model)->scheduler_config, &scfg,
                                             err, sizeof err) == WF_OK,
                  "%s", err);
}

static void teardown(void) {
    wf_dit_free(model);
    model = NULL;
}

static wf_dit_stepper *new_stepper(int max_items) {
    wf_dit_stepper *sp;
    int side = wf_dit_get_config(model)->sample_size;
    ck_assert_msg(wf_dit_stepper_new(model, &scfg, STEPS, max_items, side, side, &sp, err,
                                     sizeof err) == WF_OK,
                  "%s", err);
    return sp;
}

static wf_dit_item item(float *latent, int label, float guidance, uint64_t seed, uint32_t req) {
    return (wf_dit_item){.latent = latent,
                         .label = label,
                         .uncond_label = -1,
                         .guidance = guidance,
                         .key = {.seed = seed, .request = req},
                         .step = 0,
                         .step_end = STEPS};
}

/* Runs one item alone from x_T through all steps on a fresh stepper. */
static void run_alone(wf_threadpool *pool, wf_dit_item it) {
    wf_dit_stepper *sp = new_stepper(1);
    wf_dit_stepper_init_latent(sp, &it);
    ck_assert_msg(wf_dit_stepper_run(sp, pool, 1, &it, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_int_eq(it.step, STEPS);
    wf_dit_stepper_free(sp);
}

static int labels[BATCH] = {3, 0, 7, 3, 9, 5, 1, 10};
static float guidances[BATCH] = {4.0f, 1.0f, 2.5f, 4.0f, 1.0f, 6.0f, 1.5f, 1.0f};

START_TEST(test_alone_equals_in_batch) {
    wf_threadpool *pool = wf_threadpool_new(2);
    wf_dit_stepper *sp = new_stepper(BATCH);
    size_t n = wf_dit_stepper_latent_size(sp);
    float *lat = malloc(sizeof(float) * n * BATCH), *ref = malloc(sizeof(float) * n);
    float *x7 = malloc(sizeof(float) * n);
    ck_assert(pool && lat && ref && x7);
    wf_dit_item items[BATCH];
    for (int i = 0; i < BATCH; i++) {
        items[i] = item(lat + (size_t)i * n, labels[i], guidances[i], 100 + (uint64_t)i, 0);
        wf_dit_stepper_init_latent(sp, &items[i]);
    }
    items[6].uncond_label = 4; /* a negative label instead of the null class */
    /* item 2 enters the batch at step 7 (its own timestep), carried over from a chunk 0..7 */
    items[2].step_end = 7;
    ck_assert_msg(wf_dit_stepper_run(sp, pool, 1, &items[2], err, sizeof err) == WF_OK, "%s",
                  err);
    memcpy(x7, items[2].latent, sizeof(float) * n);
    items[2].step_end = STEPS;
    ck_assert_msg(wf_dit_stepper_run(sp, pool, BATCH, items, err, sizeof err) == WF_OK, "%s",
                  err);
    int finite = 1;
    for (size_t j = 0; j < n * BATCH; j++)
        finite &= isfinite(lat[j]) != 0;
    ck_assert(finite);
    for (int i = 0; i < BATCH; i++) {
        ck_assert_int_eq(items[i].step, STEPS);
        wf_dit_item a = item(ref, labels[i], guidances[i], 100 + (uint64_t)i, 0);
        if (i == 6)
            a.uncond_label = 4;
        run_alone(pool, a);
        ck_assert_msg(!memcmp(ref, items[i].latent, sizeof(float) * n),
                      "item %d differs alone vs in the batch", i);
    }
    /* guidance and the negative label change the result (the rows are really used) */
    wf_dit_item g1 = item(ref, labels[0], 1.0f, 100, 0);
    run_alone(pool, g1);
    ck_assert(memcmp(ref, items[0].latent, sizeof(float) * n) != 0);
    wf_dit_item neg = item(ref, labels[6], guidances[6], 106, 0);
    run_alone(pool, neg);
    ck_assert(memcmp(ref, items[6].latent, sizeof(float) * n) != 0);
    free(x7);
    free(ref);
    free(lat);
    wf_dit_stepper_free(sp);
    wf_threadpool_free(pool);
}
END_TEST

START_TEST(test_threads_do_not_matter) {
    wf_threadpool *p1 = wf_threadpool_new(1), *p2 = wf_threadpool_new(2);
    wf_dit_stepper *sp = new_stepper(BATCH);
    size_t n = wf_dit_stepper_latent_size(sp);
    float *a = malloc(sizeof(float) * n * BATCH), *b = malloc(sizeof(float) * n * BATCH);
    ck_assert(p1 && p2 && a && b);
    wf_dit_item ia[BATCH], ib[BATCH];
    for (int i = 0; i < BATCH; i++) {
        ia[i] = item(a + (size_t)i * n, labels[i], guidances[i], 7, (uint32_t)i);
        ib[i] = item(b + (size_t)i * n, labels[i], guidances[i], 7, (uint32_t)i);
        ia[i].step_end = ib[i].step_end = 10;
        wf_dit_stepper_init_latent(sp, &ia[i]);
        wf_dit_stepper_init_latent(sp, &ib[i]);
    }
    ck_assert(wf_dit_stepper_run(sp, p1, BATCH, ia, err, sizeof err) == WF_OK);
    ck_assert(wf_dit_stepper_run(sp, p2, BATCH, ib, err, sizeof err) == WF_OK);
    ck_assert(!memcmp(a, b, sizeof(float) * n * BATCH));
    /* and no pool at all (the caller's thread) */
    for (int i = 0; i < BATCH; i++) {
        ib[i].step = 0;
        wf_dit_stepper_init_latent(sp, &ib[i]);
    }
    ck_assert(wf_dit_stepper_run(sp, NULL, BATCH, ib, err, sizeof err) == WF_OK);
    ck_assert(!memcmp(a, b, sizeof(float) * n * BATCH));
    free(a);
    free(b);
    wf_dit_stepper_free(sp);
    wf_threadpool_free(p1);
    wf_threadpool_free(p2);
}
END_TEST

START_TEST(test_chunked_steps_on_another_stepper) {
    wf_threadpool *pool = wf_threadpool_new(2);
    wf_dit_stepper *s1 = new_stepper(2), *s2 = new_stepper(4);
    size_t n = wf_dit_stepper_latent_size(s1);
    float *whole = malloc(sizeof(float) * n), *part = malloc(sizeof(float) * n);
    ck_assert(pool && whole && part);
    wf_dit_item w = item(whole, 8, 3.0f, 99, 5);
    wf_dit_stepper_init_latent(s1, &w);
    ck_assert(wf_dit_stepper_run(s1, pool, 1, &w, err, sizeof err) == WF_OK);
    /* the chunk's state is only (latent, step, key): copy it to a new item on another stepper */
    wf_dit_item p = item(part, 8, 3.0f, 99, 5);
    wf_dit_stepper_init_latent(s2, &p);
    p.step_end = 7;
    ck_assert(wf_dit_stepper_run(s1, pool, 1, &p, err, sizeof err) == WF_OK);
    ck_assert_int_eq(p.step, 7);
    wf_dit_item q = item(part, 8, 3.0f, 99, 5);
    q.step = 7;
    ck_assert(wf_dit_stepper_run(s2, NULL, 1, &q, err, sizeof err) == WF_OK);
    ck_assert_int_eq(q.step, STEPS);
    ck_assert(!memcmp(whole, part, sizeof(float) * n));
    free(whole);
    free(part);
    wf_dit_stepper_free(s1);
    wf_dit_stepper_free(s2);
    wf_threadpool_free(pool);
}
END_TEST

START_TEST(test_errors) {
    wf_dit_stepper *sp = new_stepper(2);
    size_t n = wf_dit_stepper_latent_size(sp);
    float *lat = calloc(n * 3, sizeof(float));
    ck_assert(lat);
    wf_dit_item it[3] = {item(lat, 1, 1.0f, 1, 0), item(lat + n, 1, 1.0f, 1, 1),
                         item(lat + 2 * n, 1, 1.0f, 1, 2)};
    ck_assert_int_eq(wf_dit_stepper_run(sp, NULL, 3, it, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "at most 2"));
    it[0].step_end = STEPS + 1;
    ck_assert_int_eq(wf_dit_stepper_run(sp, NULL, 1, it, err, sizeof err), WF_EINVAL);
    it[0].step_end = 3;
    it[0].step = 4;
    ck_assert_int_eq(wf_dit_stepper_run(sp, NULL, 1, it, err, sizeof err), WF_EINVAL);
    it[0].step = 0;
    it[0].label = 11;
    ck_assert_int_eq(wf_dit_stepper_run(sp, NULL, 1, it, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "label 11"));
    it[0].label = 1;
    it[0].latent = NULL;
    ck_assert_int_eq(wf_dit_stepper_run(sp, NULL, 1, it, err, sizeof err), WF_EINVAL);
    /* a finished item is a no-op */
    it[1].step = it[1].step_end;
    ck_assert_int_eq(wf_dit_stepper_run(sp, NULL, 1, &it[1], err, sizeof err), WF_OK);
    ck_assert_float_eq(lat[n], 0.0f);
    /* more items than the model's reserved batch fail in the forward, not silently */
    wf_dit_stepper *big = new_stepper(BATCH + 1);
    float *lb = calloc(n * (BATCH + 1), sizeof(float));
    ck_assert(lb);
    wf_dit_item bi[BATCH + 1];
    for (int i = 0; i < BATCH + 1; i++)
        bi[i] = item(lb + (size_t)i * n, 2, 4.0f, 3, (uint32_t)i);
    ck_assert_int_eq(wf_dit_stepper_run(big, NULL, BATCH + 1, bi, err, sizeof err), WF_EINVAL);
    free(lb);
    wf_dit_stepper_free(big);
    int side = wf_dit_get_config(model)->sample_size;
    wf_dit_stepper *bad;
    ck_assert_int_eq(wf_dit_stepper_new(model, &scfg, 0, 1, side, side, &bad, err, sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_null(bad);
    ck_assert_int_eq(wf_dit_stepper_new(model, &scfg, 5, 0, side, side, &bad, err, sizeof err),
                     WF_EINVAL);
    free(lat);
    wf_dit_stepper_free(sp);
}
END_TEST

/* Another latent grid than the native one (an image twice as wide): the stepper's buffers are
 * reserved by point count, the model's by patch count (wf_dit_reserve_tokens); sizes above
 * either fail with a message, not silently. */
START_TEST(test_other_size) {
    const wf_dit_config *c = wf_dit_get_config(model);
    int side = c->sample_size, p = c->patch_size;
    wf_dit_stepper *sp = new_stepper(1);
    ck_assert_int_eq(wf_dit_stepper_reserve(sp, 0, err, sizeof err), WF_EINVAL);
    ck_assert_int_eq(wf_dit_stepper_reserve(sp, (size_t)2 * side * side, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_dit_stepper_set_size(sp, side, 3 * side, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "reserved"));
    ck_assert_int_eq(wf_dit_stepper_set_size(sp, side, 2 * side, err, sizeof err), WF_OK);
    size_t n = wf_dit_stepper_latent_size(sp);
    ck_assert_uint_eq(n, (size_t)c->in_channels * side * 2 * side);
    float *lat = malloc(sizeof(float) * n);
    ck_assert(lat);
    wf_dit_item it = item(lat, 3, 4.0f, 11, 0);
    it.step_end = 2;
    wf_dit_stepper_init_latent(sp, &it);
    /* the model reserved the native grid's patches only */
    ck_assert_int_eq(wf_dit_stepper_run(sp, NULL, 1, &it, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "reserved at load"), "%s", err);
    ck_assert_int_eq(wf_dit_reserve_tokens(model, 2 * (side / p) * (side / p), err, sizeof err), WF_OK);
    it.step = 0;
    ck_assert_msg(wf_dit_stepper_run(sp, NULL, 1, &it, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_int_eq(it.step, 2);
    for (size_t i = 0; i < n; i++) ck_assert(isfinite(lat[i]));
    /* any shape of as many patches; not more */
    ck_assert_int_eq(wf_dit_stepper_set_size(sp, 2 * side, side, err, sizeof err), WF_OK);
    it.step = 0;
    ck_assert_msg(wf_dit_stepper_run(sp, NULL, 1, &it, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_int_eq(wf_dit_reserve_tokens(model, (side / p) * (side / p), err, sizeof err), WF_OK);
    it.step = 0;
    ck_assert_int_eq(wf_dit_stepper_run(sp, NULL, 1, &it, err, sizeof err), WF_EINVAL);
    free(lat);
    wf_dit_stepper_free(sp);
}
END_TEST

START_TEST(test_pixel_space_model_has_no_vae) {
    wf_dit_vae *vae = (wf_dit_vae *)&err; /* overwritten with NULL */
    ck_assert_int_eq(wf_dit_vae_open(model, 32, 32, NULL, &vae, err, sizeof err), WF_ENOTFOUND);
    ck_assert_ptr_null(vae);
    ck_assert_ptr_nonnull(strstr(err, "pixel-space"));
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("dit_step");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_alone_equals_in_batch);
    tcase_add_test(tc, test_threads_do_not_matter);
    tcase_add_test(tc, test_chunked_steps_on_another_stepper);
    tcase_add_test(tc, test_other_size);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_pixel_space_model_has_no_vae);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(suite)
