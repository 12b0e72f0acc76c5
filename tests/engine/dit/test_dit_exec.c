/* engine/dit/dit_exec.h: the DiT executor's tasks on the committed default DiT
 * (deploy/models/weft-dit-digits): a whole trajectory through wf_executor_run, per-task errors
 * (unknown latent, taken id, short pixel buffer, LLM tasks), full latent table, schedule checks. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/dit/dit_exec.h"

#define MODEL WEFT_SOURCE_DIR "/deploy/models/weft-dit-digits"

static wf_dit_exec *open_exec(int max_latents) {
    wf_dit_exec_options o;
    wf_dit_exec_options_init(&o);
    o.model_path = MODEL;
    o.n_threads = 1;
    o.max_items = 2;
    o.max_latents = max_latents;
    wf_dit_exec *x;
    char err[400];
    ck_assert_msg(wf_dit_exec_open(&o, &x, err, sizeof err) == WF_OK, "%s", err);
    return x;
}

static wf_task dit_task(wf_task_kind kind, uint64_t latent, int a, int b) {
    wf_task t = {.kind = kind};
    if (kind == WF_TASK_FINISH) {
        t.finish.artifact = (wf_artifact){.id = latent, .kind = WF_ARTIFACT_LATENT};
        return t;
    }
    t.dit = (wf_task_dit){.class_label = 3, .negative_label = -1, .guidance_scale = 2.0f,
                          .sampler = -1, .num_steps = 6, .step_begin = a, .step_end = b,
                          .seed = 9, .noise_index = 0};
    t.dit.latent = (wf_artifact){.id = latent, .kind = WF_ARTIFACT_LATENT};
    return t;
}

static wf_status run(wf_dit_exec *x, wf_task *tasks, int n) {
    wf_task_batch b = {.tasks = tasks, .n_tasks = n};
    char msg[160];
    return wf_executor_run(wf_dit_exec_executor(x), &b, msg, sizeof msg);
}

/* One whole image (latent id 1) in one batch: ENCODE + DENOISE 0..6 + DECODE into px; every
 * task must succeed. Returns the DENOISE task's final step. */
static int run_whole(wf_dit_exec *x, uint8_t *px, size_t cap) {
    wf_task t[3] = {dit_task(WF_TASK_ENCODE, 1, 0, 0), dit_task(WF_TASK_DENOISE, 1, 0, 6),
                    dit_task(WF_TASK_DECODE_IMAGE, 1, 6, 6)};
    t[2].dit.pixels = px;
    t[2].dit.pixels_cap = cap;
    ck_assert_int_eq(run(x, t, 3), WF_OK);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(t[i].status, WF_OK);
    return t[1].dit.latent.latent.step;
}

START_TEST(trajectory_and_task_errors) {
    wf_dit_exec *x = open_exec(2);
    const wf_dit_exec_info *in = wf_dit_exec_get_info(x);
    ck_assert_int_eq(in->image_width * in->image_height * in->image_channels, 64);
    ck_assert(!in->latent_model);
    ck_assert(wf_executor_supports(wf_dit_exec_executor(x), WF_TASK_DENOISE));
    ck_assert(!wf_executor_supports(wf_dit_exec_executor(x), WF_TASK_PREFILL));
    uint8_t px[64], px2[64];
    /* ENCODE + DENOISE 0..6 + DECODE in one batch == ENCODE, DENOISE 0..2, 2..6, DECODE apart */
    ck_assert_int_eq(run_whole(x, px, sizeof px), 6);
    wf_task fin = dit_task(WF_TASK_FINISH, 1, 0, 0);
    ck_assert_int_eq(run(x, &fin, 1), WF_OK);
    wf_task s[4] = {dit_task(WF_TASK_ENCODE, 2, 0, 0), dit_task(WF_TASK_DENOISE, 2, 0, 2)};
    ck_assert_int_eq(run(x, s, 2), WF_OK);
    s[0] = dit_task(WF_TASK_DENOISE, 2, 2, 6);
    s[1] = dit_task(WF_TASK_DECODE_IMAGE, 2, 6, 6);
    s[1].dit.pixels = px2;
    s[1].dit.pixels_cap = sizeof px2;
    ck_assert_int_eq(run(x, s, 2), WF_OK);
    ck_assert_int_eq(s[0].status, WF_OK);
    ck_assert_int_eq(s[1].status, WF_OK);
    ck_assert_int_eq(memcmp(px, px2, sizeof px), 0);
    /* errors are per task */
    wf_task e[6] = {dit_task(WF_TASK_DENOISE, 99, 0, 1),      /* unknown latent */
                    dit_task(WF_TASK_ENCODE, 2, 0, 0),        /* id taken */
                    dit_task(WF_TASK_DECODE_IMAGE, 2, 6, 6),  /* no pixel buffer */
                    dit_task(WF_TASK_FINISH, 12345, 0, 0),    /* unknown: nothing to free */
                    {.kind = WF_TASK_PREFILL},
                    dit_task(WF_TASK_ENCODE, 3, 0, 0)};
    ck_assert_int_eq(run(x, e, 6), WF_OK);
    ck_assert_int_eq(e[0].status, WF_ENOTFOUND);
    ck_assert_int_eq(e[1].status, WF_EINVAL);
    ck_assert_int_eq(e[2].status, WF_EINVAL);
    ck_assert_int_eq(e[3].status, WF_OK);
    ck_assert_int_eq(e[4].status, WF_EUNSUPPORTED);
    ck_assert_int_eq(e[5].status, WF_OK); /* the second of two slots */
    wf_task full = dit_task(WF_TASK_ENCODE, 4, 0, 0);
    ck_assert_int_eq(run(x, &full, 1), WF_OK);
    ck_assert_int_eq(full.status, WF_EFULL);
    wf_dit_exec_free(x);
}
END_TEST

START_TEST(schedules_and_classes) {
    wf_dit_exec *x = open_exec(4);
    char err[200];
    ck_assert_int_eq(wf_dit_exec_check_schedule(x, -1, 20, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_dit_exec_check_schedule(x, -1, 999, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_dit_exec_check_schedule(x, -1, 1000, err, sizeof err), WF_EINVAL);
    ck_assert_int_eq(wf_dit_exec_check_schedule(x, -1, 0, err, sizeof err), WF_EINVAL);
    ck_assert_int_eq(wf_dit_exec_check_schedule(x, 2 /* euler */, 50, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_dit_exec_class_index(x, "9"), 9);
    ck_assert_int_eq(wf_dit_exec_class_index(x, "10"), -1);
    ck_assert_int_eq(wf_dit_exec_class_index(x, "-1"), -1);
    ck_assert_int_eq(wf_dit_exec_class_index(x, ""), -1);
    wf_dit_exec_free(x);
    wf_dit_exec_options o;
    wf_dit_exec_options_init(&o);
    o.model_path = "/nonexistent/dit";
    wf_dit_exec *bad;
    ck_assert_int_ne(wf_dit_exec_open(&o, &bad, err, sizeof err), WF_OK);
    ck_assert_ptr_null(bad);
    ck_assert(strlen(err) > 0);
}
END_TEST

/* Other sizes than the native 8x8: a 16-wide, 8-high image beside a native one in one batch
 * (the executor runs one forward per latent size), the native image unchanged by its company,
 * the decoded image of the asked size; sizes it cannot make fail alone. */
START_TEST(other_sizes) {
    wf_dit_exec *x = open_exec(4);
    const wf_dit_exec_info *in = wf_dit_exec_get_info(x);
    ck_assert_int_eq(in->size_multiple, 2); /* patch 2, no VAE */
    ck_assert_int_eq(in->image_scale, 1);
    ck_assert_int_eq(in->max_pixels, 4 * 64); /* the default: 4 x the native pixels */
    uint8_t alone[64], native[64], wide[128];
    ck_assert_int_eq(run_whole(x, alone, sizeof alone), 6);
    wf_task fin = dit_task(WF_TASK_FINISH, 1, 0, 0);
    ck_assert_int_eq(run(x, &fin, 1), WF_OK);
    wf_task t[6] = {dit_task(WF_TASK_ENCODE, 1, 0, 0),       dit_task(WF_TASK_ENCODE, 2, 0, 0),
                    dit_task(WF_TASK_DENOISE, 2, 0, 6),      dit_task(WF_TASK_DENOISE, 1, 0, 6),
                    dit_task(WF_TASK_DECODE_IMAGE, 1, 6, 6), dit_task(WF_TASK_DECODE_IMAGE, 2, 6, 6)};
    t[1].dit.latent.latent.height = 8;
    t[1].dit.latent.latent.width = 16;
    t[4].dit.pixels = native;
    t[4].dit.pixels_cap = sizeof native;
    t[5].dit.pixels = wide;
    t[5].dit.pixels_cap = sizeof wide;
    ck_assert_int_eq(run(x, t, 6), WF_OK);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(t[i].status, WF_OK);
    ck_assert_int_eq(t[1].dit.latent.latent.width, 16);
    ck_assert_int_eq(t[2].dit.latent.latent.step, 6);
    ck_assert_int_eq(t[2].dit.latent.latent.width, 16);
    ck_assert_int_eq(t[5].dit.image.image.width, 16);
    ck_assert_int_eq(t[5].dit.image.image.height, 8);
    ck_assert_int_eq(t[4].dit.image.image.width, 8);
    ck_assert_int_eq(memcmp(alone, native, sizeof native), 0);
    int lo = 255, hi = 0; /* a real image, not a constant */
    for (size_t i = 0; i < sizeof wide; i++) {
        lo = wide[i] < lo ? wide[i] : lo;
        hi = wide[i] > hi ? wide[i] : hi;
    }
    ck_assert_int_gt(hi - lo, 64);
    /* a 16x8 image does not fit a native-size buffer; sizes it cannot make */
    wf_task e[4] = {dit_task(WF_TASK_DECODE_IMAGE, 2, 6, 6), dit_task(WF_TASK_ENCODE, 3, 0, 0),
                    dit_task(WF_TASK_ENCODE, 4, 0, 0), dit_task(WF_TASK_ENCODE, 5, 0, 0)};
    e[0].dit.pixels = native;
    e[0].dit.pixels_cap = sizeof native;
    e[1].dit.latent.latent.height = 7; /* not a patch multiple */
    e[1].dit.latent.latent.width = 8;
    e[2].dit.latent.latent.height = 32; /* 512 pixels > 256 */
    e[2].dit.latent.latent.width = 16;
    e[3].dit.latent.latent.height = 32; /* 256: the largest, any shape */
    e[3].dit.latent.latent.width = 8;
    ck_assert_int_eq(run(x, e, 4), WF_OK);
    ck_assert_int_eq(e[0].status, WF_EINVAL);
    ck_assert_int_eq(e[1].status, WF_EINVAL);
    ck_assert_int_eq(e[2].status, WF_EINVAL);
    ck_assert_int_eq(e[3].status, WF_OK);
    wf_dit_exec_free(x);
}
END_TEST

/* A latent that moves between executors (a worker rank's and the coordinator's tables, as
 * server/workers/dit_router.h moves it): steps 0..3 on one, 3..6 on the other, the same image. */
START_TEST(latents_cross_executors) {
    wf_dit_exec *home = open_exec(2), *far = open_exec(1);
    size_t n = wf_dit_exec_latent_floats(home);
    ck_assert_uint_eq(n, wf_dit_exec_latent_floats(far));
    ck_assert_ptr_null(wf_dit_exec_latent(home, 5, false)); /* not held */
    ck_assert_ptr_null(wf_dit_exec_latent(home, 0, true));  /* 0 is no id */
    uint8_t ref[64], got[64];
    ck_assert_int_eq(run_whole(home, ref, sizeof ref), 6);
    wf_dit_exec_latent_drop(home, 1);
    ck_assert_ptr_null(wf_dit_exec_latent(home, 1, false));
    wf_task e = dit_task(WF_TASK_ENCODE, 5, 0, 0);
    ck_assert_int_eq(run(home, &e, 1), WF_OK);
    float *h = wf_dit_exec_latent(home, 5, false);
    ck_assert_ptr_nonnull(h);
    float *f = wf_dit_exec_latent(far, 5, true);
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_eq(wf_dit_exec_latent(far, 5, true), f);   /* held: the same slot */
    ck_assert_ptr_null(wf_dit_exec_latent(far, 6, true));    /* its one slot is taken */
    memcpy(f, h, n * sizeof(float));
    wf_task d = dit_task(WF_TASK_DENOISE, 5, 0, 3);
    ck_assert_int_eq(run(far, &d, 1), WF_OK);
    ck_assert_int_eq(d.status, WF_OK);
    memcpy(h, f, n * sizeof(float));
    wf_dit_exec_latent_drop(far, 5);
    ck_assert_ptr_null(wf_dit_exec_latent(far, 5, false));
    wf_task r[2] = {dit_task(WF_TASK_DENOISE, 5, 3, 6), dit_task(WF_TASK_DECODE_IMAGE, 5, 6, 6)};
    r[1].dit.pixels = got;
    r[1].dit.pixels_cap = sizeof got;
    ck_assert_int_eq(run(home, r, 2), WF_OK);
    ck_assert_int_eq(r[1].status, WF_OK);
    ck_assert_int_eq(memcmp(ref, got, sizeof ref), 0);
    wf_dit_sampler_config cfg;
    wf_dit_exec_sampler_config(home, -1, &cfg);
    ck_assert_int_eq((int)cfg.kind, wf_dit_exec_get_info(home)->default_sampler);
    ck_assert_ptr_nonnull(wf_dit_exec_model(home));
    ck_assert_ptr_nonnull(wf_dit_exec_pool(home));
    wf_dit_exec_free(home);
    wf_dit_exec_free(far);
}
END_TEST

static Suite *dit_exec_suite(void) {
    Suite *s = suite_create("engine/dit/dit_exec");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, trajectory_and_task_errors);
    tcase_add_test(tc, schedules_and_classes);
    tcase_add_test(tc, latents_cross_executors);
    tcase_add_test(tc, other_sizes);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(dit_exec_suite)
