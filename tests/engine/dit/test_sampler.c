/* engine/dit/sampler.c: trajectories equal diffusers 0.31's (fixtures written by
 * scripts/make_dit_sampler_fixtures.py: same initial latent, same per-step noise through the
 * noise hook, same fake model), steps are stateless (any worker, any order of schedules), the
 * generator path draws wf_dit_noise_fill(key, i), CFG combination, and clear errors for bad
 * configs and shapes. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/dit/sampler.h"

#define CASES_PATH WEFT_SOURCE_DIR "/tests/engine/data/dit/sampler_cases.json"
#define MAXN 64

/* The fixture's model, as in scripts/make_dit_sampler_fixtures.py. */
static void fake_model(const float *x_in, size_t n, double t, int mult, float *out) {
    for (size_t e = 0; e < n; e++) {
        out[e] = (float)(0.5 * (double)x_in[e] + 0.3 * sin(0.1 * (double)e + 0.002 * t));
        if (mult == 2) out[n + e] = (float)tanh(0.3 * (double)x_in[e] - 0.001 * t);
    }
}

static void read_floats(json_t *arr, float *out, size_t n) {
    ck_assert_msg(json_is_array(arr) && json_array_size(arr) == n, "array of %zu expected", n);
    for (size_t j = 0; j < n; j++) out[j] = (float)json_number_value(json_array_get(arr, j));
}

static json_t *load_cases(void) {
    json_error_t jerr;
    json_t *root = json_load_file(CASES_PATH, 0, &jerr);
    ck_assert_msg(root != NULL, "%s: %s", CASES_PATH, jerr.text);
    json_t *cases = json_object_get(root, "cases");
    ck_assert(json_is_array(cases) && json_array_size(cases) >= 10);
    json_incref(cases);
    json_decref(root);
    return cases;
}

/* Builds the schedule of one fixture case through the JSON parser. */
static wf_dit_schedule *case_schedule(json_t *c) {
    char *text = json_dumps(json_object_get(c, "config"), JSON_COMPACT);
    ck_assert_ptr_nonnull(text);
    wf_dit_sampler_config cfg;
    char err[256] = "";
    ck_assert_msg(wf_dit_sampler_config_parse(text, strlen(text), &cfg, err, sizeof err) == WF_OK,
                  "%s", err);
    free(text);
    cfg.eta = json_number_value(json_object_get(c, "eta"));
    wf_dit_schedule *s = NULL;
    int steps = (int)json_integer_value(json_object_get(c, "steps"));
    ck_assert_msg(wf_dit_schedule_new(&cfg, steps, &s, err, sizeof err) == WF_OK, "%s", err);
    return s;
}

/* Runs steps [from, to) of a case on x; noise from the fixture if use_fixture_noise. */
static void run_steps(const wf_dit_schedule *s, json_t *c, float *x, int from, int to,
                      int use_fixture_noise, wf_dit_noise_key key) {
    int C = (int)json_integer_value(json_object_get(c, "channels"));
    size_t plane = (size_t)json_integer_value(json_object_get(c, "plane"));
    int mult = (int)json_integer_value(json_object_get(c, "model_channels")) / C;
    size_t n = (size_t)C * plane;
    float x_in[MAXN], out[2 * MAXN], noise[MAXN];
    for (int i = from; i < to; i++) {
        float sc = wf_dit_schedule_input_scale(s, i);
        for (size_t e = 0; e < n; e++) x_in[e] = x[e] * sc;
        fake_model(x_in, n, wf_dit_schedule_timestep(s, i), mult, out);
        if (use_fixture_noise)
            read_floats(json_array_get(json_object_get(c, "noise"), (size_t)i), noise, n);
        wf_dit_step_io io = {.model_out = out, .model_channels = mult * C, .x = x, .x_prev = x,
                             .channels = C, .plane = plane, .key = key,
                             .noise = use_fixture_noise ? noise : NULL};
        ck_assert_int_eq(wf_dit_schedule_step(s, i, &io), WF_OK);
    }
}

START_TEST(test_parity_with_diffusers) {
    json_t *cases = load_cases();
    size_t k;
    json_t *c;
    json_array_foreach(cases, k, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        wf_dit_schedule *s = case_schedule(c);
        json_t *ts = json_object_get(c, "timesteps");
        ck_assert_int_eq(wf_dit_schedule_n_steps(s), (int)json_array_size(ts));
        for (int i = 0; i < wf_dit_schedule_n_steps(s); i++) {
            double want = json_number_value(json_array_get(ts, (size_t)i));
            ck_assert_msg(fabs(wf_dit_schedule_timestep(s, i) - want) <= 1e-4 * fmax(1, want),
                          "%s: timestep %d: %g, diffusers %g", name, i,
                          wf_dit_schedule_timestep(s, i), want);
        }
        double want_sigma = json_number_value(json_object_get(c, "init_sigma"));
        ck_assert_msg(fabs(wf_dit_schedule_init_sigma(s) - want_sigma) <= 1e-5 * want_sigma,
                      "%s: init sigma %g, diffusers %g", name, wf_dit_schedule_init_sigma(s),
                      want_sigma);
        size_t n = (size_t)(json_integer_value(json_object_get(c, "channels")) *
                            json_integer_value(json_object_get(c, "plane")));
        float x[MAXN], ref[MAXN];
        read_floats(json_object_get(c, "z"), x, n);
        wf_dit_scale(x, n, wf_dit_schedule_init_sigma(s));
        run_steps(s, c, x, 0, wf_dit_schedule_n_steps(s), 1, (wf_dit_noise_key){0, 0});
        read_floats(json_object_get(c, "final"), ref, n);
        double maxref = 1, maxd = 0;
        for (size_t e = 0; e < n; e++) {
            maxref = fmax(maxref, fabs(ref[e]));
            maxd = fmax(maxd, fabs((double)x[e] - ref[e]));
        }
        ck_assert_msg(maxd <= 1e-4 * maxref, "%s: max |d| %g (max |ref| %g)", name, maxd, maxref);
        wf_dit_schedule_free(s);
    }
    json_decref(cases);
}
END_TEST

/* Steps are pure: a trajectory split across two "workers" (separately built schedules, a
 * different schedule object for each half) equals one run; the generator path equals feeding
 * wf_dit_noise_fill(key, i) through the hook. */
START_TEST(test_stateless_and_generator) {
    json_t *cases = load_cases();
    size_t k;
    json_t *c;
    json_array_foreach(cases, k, c) {
        size_t n = (size_t)(json_integer_value(json_object_get(c, "channels")) *
                            json_integer_value(json_object_get(c, "plane")));
        wf_dit_schedule *a = case_schedule(c), *b = case_schedule(c);
        int steps = wf_dit_schedule_n_steps(a), half = steps / 2;
        wf_dit_noise_key key = {.seed = 42 + k, .request = 3};
        float x1[MAXN], x2[MAXN];
        wf_dit_noise_fill(key, WF_DIT_NOISE_STEP_INIT, 0, x1, n);
        memcpy(x2, x1, sizeof x1);
        run_steps(a, c, x1, 0, steps, 0, key);
        run_steps(a, c, x2, 0, half, 0, key);
        run_steps(b, c, x2, half, steps, 0, key);
        ck_assert_mem_eq(x1, x2, n * sizeof(float));
        wf_dit_schedule_free(a);
        wf_dit_schedule_free(b);
    }
    json_decref(cases);
}
END_TEST

START_TEST(test_generator_noise_is_the_hook_noise) {
    wf_dit_sampler_config cfg;
    wf_dit_sampler_config_default(WF_DIT_SAMPLER_KIND_DDPM, &cfg);
    wf_dit_schedule *s = NULL;
    char err[256];
    ck_assert_int_eq(wf_dit_schedule_new(&cfg, 10, &s, err, sizeof err), WF_OK);
    enum { N = 600 }; /* more than one internal noise chunk */
    static float x[N], out[N], a[N], b[N], z[N];
    for (int e = 0; e < N; e++) {
        x[e] = (float)sin(e * 0.3);
        out[e] = (float)cos(e * 0.7);
    }
    wf_dit_noise_key key = {.seed = 7, .request = 1};
    wf_dit_step_io io = {.model_out = out, .model_channels = 3, .x = x, .x_prev = a,
                         .channels = 3, .plane = N / 3, .key = key};
    ck_assert_int_eq(wf_dit_schedule_step(s, 2, &io), WF_OK);
    wf_dit_noise_fill(key, 2, 0, z, N);
    io.noise = z;
    io.x_prev = b;
    ck_assert_int_eq(wf_dit_schedule_step(s, 2, &io), WF_OK);
    ck_assert_mem_eq(a, b, sizeof a);
    /* another step index draws other noise */
    io.noise = NULL;
    ck_assert_int_eq(wf_dit_schedule_step(s, 3, &io), WF_OK);
    io.noise = z;
    io.x_prev = a;
    ck_assert_int_eq(wf_dit_schedule_step(s, 3, &io), WF_OK);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    wf_dit_schedule_free(s);
}
END_TEST

START_TEST(test_cfg_combine) {
    float cond[6] = {1, 2, 3, 10, 20, 30}, uncond[6] = {0, 1, 5, -1, -1, -1}, out[6];
    wf_dit_cfg_combine(out, cond, uncond, 3, 6, 4.0f);
    const float want[6] = {4, 5, -3, 10, 20, 30};
    for (int j = 0; j < 6; j++) ck_assert_float_eq(out[j], want[j]);
    wf_dit_cfg_combine(cond, cond, uncond, 3, 6, 1.0f); /* scale 1 = cond, in place */
    for (int j = 0; j < 6; j++) ck_assert_float_eq(cond[j], want[j] == 4 ? 1 : cond[j]);
}
END_TEST

static void expect_error(const char *json, wf_status want, const char *needle) {
    wf_dit_sampler_config cfg;
    char err[256] = "";
    wf_status st = wf_dit_sampler_config_parse(json, strlen(json), &cfg, err, sizeof err);
    ck_assert_msg(st == want, "%s: status %d, want %d (%s)", json, st, want, err);
    ck_assert_msg(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", json, err, needle);
}

START_TEST(test_bad_configs) {
    expect_error("{\"_class_name\": \"PNDMScheduler\"}", WF_EINVAL, "PNDMScheduler");
    expect_error("{\"_class_name\": \"DDIMScheduler\", \"beta_schedule\": \"cosine\"}", WF_EINVAL,
                 "'cosine'");
    expect_error("{\"_class_name\": \"DDIMScheduler\", \"timestep_spacing\": \"karras\"}",
                 WF_EINVAL, "'karras'");
    expect_error("{\"_class_name\": \"DDIMScheduler\", \"prediction_type\": \"flow\"}", WF_EINVAL,
                 "'flow'");
    expect_error("{\"_class_name\": \"DDPMScheduler\", \"variance_type\": \"fixed_medium\"}",
                 WF_EINVAL, "'fixed_medium'");
    expect_error("{\"_class_name\": \"DDPMScheduler\", \"variance_type\": \"learned\"}",
                 WF_EUNSUPPORTED, "learned");
    expect_error("{\"_class_name\": \"DDIMScheduler\", \"thresholding\": true}", WF_EUNSUPPORTED,
                 "thresholding");
    expect_error("{\"_class_name\": \"EulerDiscreteScheduler\", \"use_karras_sigmas\": true}",
                 WF_EUNSUPPORTED, "use_karras_sigmas");
    expect_error("{\"_class_name\": \"EulerDiscreteScheduler\", \"interpolation_type\": "
                 "\"log_linear\"}",
                 WF_EUNSUPPORTED, "log_linear");
    expect_error("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", "
                 "\"use_dynamic_shifting\": true}",
                 WF_EUNSUPPORTED, "use_dynamic_shifting");
    expect_error("{\"_class_name\": \"DDPMScheduler\", \"trained_betas\": [0.1, 0.2]}",
                 WF_EUNSUPPORTED, "trained_betas");
    expect_error("{\"_class_name\": \"DDIMScheduler\", \"beta_start\": \"0.1\"}", WF_EFORMAT,
                 "beta_start");
    expect_error("{\"_class_name\": \"DDIMScheduler\", \"num_train_timesteps\": 1.5}", WF_EFORMAT,
                 "num_train_timesteps");
    expect_error("{\"_class_name\": \"DDIMScheduler\", \"clip_sample\": 1}", WF_EFORMAT,
                 "clip_sample");
    expect_error("{\"_class_name\": \"DDIMScheduler\", \"beta_end\": 2.0}", WF_EINVAL, "beta_end");
    expect_error("{\"beta_start\": 0.1}", WF_EFORMAT, "_class_name");
    expect_error("[1, 2]", WF_EFORMAT, "not a JSON object");
    expect_error("{\"_class_name\": \"DDIMScheduler\",", WF_EFORMAT, "line");
    expect_error("", WF_EFORMAT, "scheduler config");

    wf_dit_sampler_kind kind;
    char err[256] = "";
    ck_assert_int_eq(wf_dit_sampler_kind_parse("heun", &kind, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "'heun'"));
    ck_assert_int_eq(wf_dit_sampler_kind_parse("flow_euler", &kind, err, sizeof err), WF_OK);
    ck_assert_int_eq(kind, WF_DIT_SAMPLER_KIND_FLOW_EULER);
    ck_assert_str_eq(wf_dit_sampler_kind_name(WF_DIT_SAMPLER_KIND_EULER), "euler");
}
END_TEST

START_TEST(test_good_config_and_load) {
    const char *text = "{\"_class_name\": \"DDIMScheduler\", \"_diffusers_version\": \"0.31.0\","
                       " \"beta_schedule\": \"scaled_linear\", \"beta_start\": 0.00085,"
                       " \"beta_end\": 0.012, \"clip_sample\": false, \"steps_offset\": 1,"
                       " \"trained_betas\": null, \"timestep_spacing\": \"trailing\","
                       " \"set_alpha_to_one\": false, \"unknown_future_key\": 3}";
    char path[] = "/tmp/weft_test_sched_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    wf_dit_sampler_config cfg;
    char err[256] = "";
    ck_assert_msg(wf_dit_sampler_config_load(path, &cfg, err, sizeof err) == WF_OK, "%s", err);
    remove(path);
    ck_assert_int_eq(cfg.kind, WF_DIT_SAMPLER_KIND_DDIM);
    ck_assert_int_eq(cfg.beta_schedule, WF_DIT_BETA_SCHEDULE_SCALED_LINEAR);
    ck_assert_int_eq(cfg.spacing, WF_DIT_SPACING_TRAILING);
    ck_assert_int_eq(cfg.steps_offset, 1);
    ck_assert(!cfg.clip_sample && !cfg.set_alpha_to_one);
    ck_assert_double_eq_tol(cfg.beta_end, 0.012, 1e-12);
    /* the default DiT's own config (deploy/models/weft-dit-fmnist) */
    ck_assert_msg(wf_dit_sampler_config_load(WEFT_SOURCE_DIR "/deploy/models/weft-dit-fmnist/"
                                             "scheduler/scheduler_config.json",
                                             &cfg, err, sizeof err) == WF_OK,
                  "%s", err);
    ck_assert_int_eq(cfg.kind, WF_DIT_SAMPLER_KIND_DDIM);
    ck_assert_int_eq(cfg.num_train_timesteps, 1000);
    ck_assert_int_eq(wf_dit_sampler_config_load("/nonexistent/scheduler_config.json", &cfg, err,
                                                sizeof err),
                     WF_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/scheduler_config.json"));
}
END_TEST

START_TEST(test_bad_schedules_and_shapes) {
    wf_dit_sampler_config cfg;
    wf_dit_sampler_config_default(WF_DIT_SAMPLER_KIND_DDPM, &cfg);
    wf_dit_schedule *s = (wf_dit_schedule *)&cfg;
    char err[256] = "";
    ck_assert_int_eq(wf_dit_schedule_new(&cfg, 0, &s, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(wf_dit_schedule_new(&cfg, 1001, &s, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "1001"));
    cfg.steps_offset = 500; /* leading timesteps would pass num_train_timesteps - 1 */
    ck_assert_int_eq(wf_dit_schedule_new(&cfg, 2, &s, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "steps_offset"));
    cfg.steps_offset = 0;
    cfg.variance = WF_DIT_VARIANCE_LEARNED_RANGE;
    ck_assert_int_eq(wf_dit_schedule_new(&cfg, 4, &s, err, sizeof err), WF_OK);
    float x[8] = {0}, out[16] = {0};
    wf_dit_step_io io = {.model_out = out, .model_channels = 2, .x = x, .x_prev = x,
                         .channels = 2, .plane = 4};
    ck_assert_int_eq(wf_dit_schedule_step(s, 0, &io), WF_EINVAL); /* learned_range needs 2C */
    io.model_channels = 3;
    ck_assert_int_eq(wf_dit_schedule_step(s, 0, &io), WF_EINVAL);
    io.model_channels = 4;
    ck_assert_int_eq(wf_dit_schedule_step(s, 4, &io), WF_EINVAL);
    ck_assert_int_eq(wf_dit_schedule_step(s, -1, &io), WF_EINVAL);
    ck_assert_int_eq(wf_dit_schedule_step(s, 0, &io), WF_OK);
    io.x = NULL;
    ck_assert_int_eq(wf_dit_schedule_step(s, 0, &io), WF_EINVAL);
    wf_dit_schedule_free(s);
    wf_dit_schedule_free(NULL);
    cfg.eta = -1;
    ck_assert_int_eq(wf_dit_schedule_new(&cfg, 4, &s, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "eta"));
}
END_TEST

static Suite *sampler_suite(void) {
    Suite *s = suite_create("dit_sampler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_parity_with_diffusers);
    tcase_add_test(tc, test_stateless_and_generator);
    tcase_add_test(tc, test_generator_noise_is_the_hook_noise);
    tcase_add_test(tc, test_cfg_combine);
    tcase_add_test(tc, test_bad_configs);
    tcase_add_test(tc, test_good_config_and_load);
    tcase_add_test(tc, test_bad_schedules_and_shapes);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(sampler_suite)
