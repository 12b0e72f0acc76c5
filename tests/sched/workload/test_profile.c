/* Unit tests of sched/workload/profile.c: the built-in GF-DiT profiles, profile text parsing and its
 * errors, piecewise-Poisson sampling (rates and class mixes within statistical bounds for
 * fixed seeds, determinism per seed), load scaling and deadlines. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "sched/workload/workload.h"

START_TEST(test_builtin_profiles) {
    char err[256];
    const char *const *names = wf_workload_profile_builtin_names();
    int found = 0;
    for (size_t i = 0; names[i]; i++)
        if (!strcmp(names[i], "short") || !strcmp(names[i], "tridentserve") ||
            !strcmp(names[i], "foreground_burst"))
            found++;
    ck_assert_int_eq(found, 3);
    wf_workload_profile p;
    ck_assert_int_eq(wf_workload_profile_load("tridentserve", &p, err, sizeof err), WF_OK);
    ck_assert_str_eq(p.name, "tridentserve");
    ck_assert_uint_eq(p.n_phases, 5);
    ck_assert_uint_eq(p.n_classes, 3);
    ck_assert_double_eq_tol(wf_workload_profile_end_s(&p), 3600, 1e-9);
    /* phase overload: 1500..2400 s at 2.4 req/min, S/M/L = 0.5/0.3/0.2 */
    ck_assert_str_eq(p.phases[2].name, "overload");
    ck_assert_double_eq_tol(p.phases[2].start_s, 1500, 1e-9);
    ck_assert_double_eq_tol(p.phases[2].rate, 2.4 / 60, 1e-12);
    ck_assert_double_eq_tol(p.phases[2].mix[0], 0.5, 1e-12);
    ck_assert_double_eq_tol(p.phases[2].mix[2], 0.2, 1e-12);
    /* default classes: S/M/L with alphas 1.5/2/6 (GF-DiT) */
    ck_assert_str_eq(p.classes[0].name, "S");
    ck_assert_double_eq(p.classes[0].alpha, 1.5);
    ck_assert_double_eq(p.classes[1].alpha, 2.0);
    ck_assert_double_eq(p.classes[2].alpha, 6.0);
    ck_assert_int_eq(p.classes[0].priority, 100);
    ck_assert_int_eq(wf_workload_profile_load("short", &p, err, sizeof err), WF_OK);
    ck_assert_uint_eq(p.n_phases, 4);
    ck_assert_double_eq(p.phases[3].rate, 0); /* the drain */
    ck_assert_int_eq(wf_workload_profile_load("foreground_burst", &p, err, sizeof err), WF_OK);
    ck_assert_double_eq_tol(p.phases[1].mix[0], 0.85, 1e-12);
    ck_assert_double_eq(p.phases[0].mix[0], 0);
    ck_assert_int_eq(wf_workload_profile_load("no_such_profile", &p, err, sizeof err), WF_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "tridentserve"));
}
END_TEST

START_TEST(test_parse_and_errors) {
    char err[256];
    wf_workload_profile p;
    const char *ok = "# two classes replaced, one added\n"
                     "class S 64x48 steps=7 alpha=1.25 priority=9\n"
                     "class XL 128x128 steps=60\n"
                     "phase a 0 10 120/min S=1 XL=3   # trailing comment\n"
                     "\n"
                     "phase b 12 20 2/s M=1\n"
                     "phase c 20 30 0\n";
    ck_assert_int_eq(wf_workload_profile_parse(ok, "t.profile", &p, err, sizeof err), WF_OK);
    ck_assert_str_eq(p.name, "t");
    ck_assert_uint_eq(p.n_classes, 4);
    ck_assert_int_eq(p.classes[0].width, 64);
    ck_assert_int_eq(p.classes[0].height, 48);
    ck_assert_int_eq(p.classes[0].steps, 7);
    ck_assert_double_eq(p.classes[0].alpha, 1.25);
    ck_assert_int_eq(p.classes[0].priority, 9);
    ck_assert_int_eq(wf_workload_profile_class_index(&p, "XL"), 3);
    ck_assert_double_eq(p.classes[3].alpha, 2.0); /* default alpha */
    ck_assert(!p.classes[3].has_priority);
    ck_assert_double_eq(p.phases[0].rate, 2.0);
    ck_assert_double_eq(p.phases[0].mix[3], 3.0);
    ck_assert_double_eq(p.phases[1].rate, 2.0);
    ck_assert_double_eq_tol(wf_workload_profile_expected_requests(&p), 2 * 10 + 2 * 8, 1e-9);

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"phase a 0 10 1 Q=1\n", "t:1: unknown class 'Q'"},
        {"phase a 0 10 1 S=1\nphase b 5 20 1 S=1\n", "t:2: phase b starts before"},
        {"phase a 10 10 1 S=1\n", "t:1: phase a must have 0 <= start < end"},
        {"phase a 0 10 3/h S=1\n", "t:1: use: phase NAME"},
        {"phase a 0 10 1\n", "t:1: phase a has arrivals but no class weight"},
        {"phase a 0 10 1 S=-1\n", "t:1: bad class weight"},
        {"class S 32 steps=3\nphase a 0 1 1 S=1\n", "t:1: use: class NAME WxH"},
        {"class S 32x32\n", "t:1: use: class NAME WxH"},
        {"phase a 0 1 1 S=1\nclass T 8x8 steps=1\n", "t:2: class lines go before phases"},
        {"rate 5\n", "t:1: unknown directive 'rate'"},
        {"# nothing\n", "t: no phase lines"},
        /* found by tests/fuzz/fuzz_profile.c: weights summing to infinity made the offered
         * load NaN (inf / inf) */
        {"phase a 0 1 1e9 S=1e308 M=1e308\n", "t:1: phase a: the class weights must sum to a "
                                              "finite number"},
        {"phase a 0 1e300 1e300 S=1\n", "t:1: phase a: rate x length is not a finite"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(wf_workload_profile_parse(bad[i].text, "t", &p, err, sizeof err), WF_EFORMAT);
        ck_assert_msg(strstr(err, bad[i].want), "case %zu: '%s' lacks '%s'", i, err, bad[i].want);
    }
}
END_TEST

START_TEST(test_class_flag_and_mix) {
    char err[256];
    wf_workload_class c;
    ck_assert_int_eq(wf_workload_class_parse("M:64x32:20:3:-5", &c, err, sizeof err), WF_OK);
    ck_assert_str_eq(c.name, "M");
    ck_assert_int_eq(c.width, 64);
    ck_assert_int_eq(c.height, 32);
    ck_assert_int_eq(c.steps, 20);
    ck_assert_double_eq(c.alpha, 3);
    ck_assert(c.has_priority);
    ck_assert_int_eq(c.priority, -5);
    ck_assert_int_eq(wf_workload_class_parse("S:8x8:4", &c, err, sizeof err), WF_OK);
    ck_assert_double_eq(c.alpha, 2.0);
    const char *bad[] = {"S", "S:8x8", "S:8:4", "S:8x8:0", "S:8x8:4:0", "S:8x8:4:1:2:3", "S:0x8:4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(wf_workload_class_parse(bad[i], &c, err, sizeof err), WF_EINVAL);
    wf_workload_profile p;
    wf_workload_profile_default_classes(&p);
    double mix[WF_WORKLOAD_MAX_CLASSES];
    ck_assert_int_eq(wf_workload_profile_parse_mix(&p, "S=3,L=1", mix, err, sizeof err), WF_OK);
    ck_assert_double_eq(mix[0], 3);
    ck_assert_double_eq(mix[1], 0);
    ck_assert_double_eq(mix[2], 1);
    ck_assert_int_eq(wf_workload_profile_parse_mix(&p, "X=1", mix, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "unknown class 'X'"));
    ck_assert_int_eq(wf_workload_profile_parse_mix(&p, "S=1e308,M=1e308", mix, err, sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "must sum to a finite number"));
    /* --image-class replaces a default class by name, in place */
    ck_assert_int_eq(wf_workload_class_parse("M:16x16:9", &c, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_workload_profile_set_class(&p, &c), WF_OK);
    ck_assert_uint_eq(p.n_classes, 3);
    ck_assert_int_eq(p.classes[1].steps, 9);
}
END_TEST

/* Three phases: 20 s at 50/s (S:M:L = 1:1:2), 10 s silent, 10 s at 200/s (S only, then mixed). */
static const char *PHASES = "phase a 0 20 50/s S=1 M=1 L=2\n"
                            "phase quiet 20 30 0\n"
                            "phase b 30 40 200/s S=9 M=1\n";

START_TEST(test_piecewise_poisson_statistics) {
    char err[256];
    wf_workload_profile p;
    ck_assert_int_eq(wf_workload_profile_parse(PHASES, "stat", &p, err, sizeof err), WF_OK);
    size_t cap = 10000;
    double *t = malloc(cap * sizeof *t);
    int *c = malloc(cap * sizeof *c);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        size_t n = wf_workload_profile_sample(&p, seed, cap, t, c);
        size_t in_a = 0, in_quiet = 0, in_b = 0, cls_a[3] = {0}, cls_b[3] = {0};
        for (size_t i = 0; i < n; i++) {
            if (i) ck_assert(t[i] >= t[i - 1]); /* ascending */
            if (t[i] < 20) {
                in_a++;
                cls_a[c[i]]++;
            } else if (t[i] < 30) {
                in_quiet++;
            } else {
                ck_assert(t[i] < 40);
                in_b++;
                cls_b[c[i]]++;
            }
        }
        /* Poisson counts: mean = var = rate x length; 4 standard deviations hold for any seed
         * with overwhelming probability (and these seeds are fixed). */
        ck_assert_msg(fabs((double)in_a - 1000) < 4 * sqrt(1000), "seed %lu: %zu in a", (unsigned long)seed, in_a);
        ck_assert_msg(fabs((double)in_b - 2000) < 4 * sqrt(2000), "seed %lu: %zu in b", (unsigned long)seed, in_b);
        ck_assert_uint_eq(in_quiet, 0);
        /* Mix: binomial proportions within 4 standard deviations. */
        const double want_a[3] = {0.25, 0.25, 0.5}, want_b[3] = {0.9, 0.1, 0};
        for (int k = 0; k < 3; k++) {
            double pa = (double)cls_a[k] / (double)in_a, pb = (double)cls_b[k] / (double)in_b;
            ck_assert_msg(fabs(pa - want_a[k]) < 4 * sqrt(want_a[k] * (1 - want_a[k]) / (double)in_a),
                          "phase a class %d: %f", k, pa);
            ck_assert_msg(fabs(pb - want_b[k]) <= 4 * sqrt(want_b[k] * (1 - want_b[k]) / (double)in_b),
                          "phase b class %d: %f", k, pb);
        }
        ck_assert_uint_eq(cls_b[2], 0); /* weight 0 is never drawn */
    }
    free(t);
    free(c);
}
END_TEST

START_TEST(test_sampling_deterministic_and_capped) {
    char err[256];
    wf_workload_profile p;
    ck_assert_int_eq(wf_workload_profile_parse(PHASES, "det", &p, err, sizeof err), WF_OK);
    double t1[500], t2[500], t3[500];
    int c1[500], c2[500], c3[500];
    size_t n1 = wf_workload_profile_sample(&p, 42, 500, t1, c1);
    size_t n2 = wf_workload_profile_sample(&p, 42, 500, t2, c2);
    size_t n3 = wf_workload_profile_sample(&p, 43, 500, t3, c3);
    ck_assert_uint_eq(n1, 500); /* capped */
    ck_assert_uint_eq(n1, n2);
    ck_assert(memcmp(t1, t2, sizeof t1) == 0 && memcmp(c1, c2, sizeof c1) == 0);
    ck_assert_uint_eq(n3, 500);
    ck_assert(memcmp(t1, t3, sizeof t1) != 0);
    /* the first arrival of a seed is pinned: the generator is ours, the same everywhere */
    double first = t1[0];
    ck_assert(first > 0 && first < 1);
    ck_assert_double_eq(wf_workload_profile_sample(&p, 42, 1, t2, c2), 1);
    ck_assert_double_eq(t2[0], first);
}
END_TEST

START_TEST(test_scaling_and_offered_load) {
    char err[256];
    wf_workload_profile p;
    ck_assert_int_eq(wf_workload_profile_parse(PHASES, "load", &p, err, sizeof err), WF_OK);
    ck_assert(isnan(wf_workload_profile_offered_load(&p, 1))); /* no T_single yet */
    p.classes[0].t_single_ms = 100;
    p.classes[1].t_single_ms = 200;
    p.classes[2].t_single_ms = 400;
    /* work: a: 1000 x (0.25 x 0.1 + 0.25 x 0.2 + 0.5 x 0.4) = 275 s; b: 2000 x (0.9 x 0.1 + 0.1 x
     * 0.2) = 220 s; window 0..40 s (the quiet phase inside it counts, nothing trails). */
    double want = (275.0 + 220.0) / 40.0;
    ck_assert_double_eq_tol(wf_workload_profile_offered_load(&p, 1), want, 1e-9);
    ck_assert_double_eq_tol(wf_workload_profile_offered_load(&p, 4), want / 4, 1e-9);
    /* --target-load: one factor on every rate */
    wf_workload_profile_scale_rate(&p, 0.8 / wf_workload_profile_offered_load(&p, 2));
    ck_assert_double_eq_tol(wf_workload_profile_offered_load(&p, 2), 0.8, 1e-9);
    ck_assert_double_eq_tol(p.phases[0].rate / p.phases[2].rate, 0.25, 1e-12); /* shape kept */
    /* --profile-duration: the clock, not the rates */
    double r0 = p.phases[0].rate;
    wf_workload_profile_scale_time(&p, 0.5);
    ck_assert_double_eq_tol(wf_workload_profile_end_s(&p), 20, 1e-12);
    ck_assert_double_eq_tol(p.phases[2].start_s, 15, 1e-12);
    ck_assert_double_eq(p.phases[0].rate, r0);
    /* a single Poisson phase for --rate with a mix */
    double mix[WF_WORKLOAD_MAX_CLASSES] = {1, 0, 3};
    wf_workload_profile_set_poisson(&p, 5, 60, mix);
    ck_assert_uint_eq(p.n_phases, 1);
    ck_assert_double_eq_tol(wf_workload_profile_expected_requests(&p), 300, 1e-9);
}
END_TEST

START_TEST(test_deadlines) {
    wf_workload_class c = {.name = "L", .alpha = 6, .t_single_ms = 250};
    ck_assert_double_eq_tol(wf_workload_class_deadline_ms(&c), 1500, 1e-12);
    c.alpha = 1.5;
    c.t_single_ms = 80;
    ck_assert_double_eq_tol(wf_workload_class_deadline_ms(&c), 120, 1e-12);
    c.t_single_ms = 0;
    ck_assert(isnan(wf_workload_class_deadline_ms(&c)));
}
END_TEST

static Suite *profile_suite(void) {
    Suite *s = suite_create("loadgen_profile");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_builtin_profiles);
    tcase_add_test(tc, test_parse_and_errors);
    tcase_add_test(tc, test_class_flag_and_mix);
    tcase_add_test(tc, test_piecewise_poisson_statistics);
    tcase_add_test(tc, test_sampling_deterministic_and_capped);
    tcase_add_test(tc, test_scaling_and_offered_load);
    tcase_add_test(tc, test_deadlines);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(profile_suite)
