/* Unit tests of sched/workload/rng.c, the workloads' seeded generator: the same seed gives the
 * same numbers (weft-bench and the simulators must see the same requests), uniform draws stay
 * in [0, 1), ranges in [lo, hi] hitting every value, gamma deviates have the mean asked, and
 * weighted picks follow their weights. */
#include <check.h>
#include <math.h>

#include "check_main.h"
#include "sched/workload/workload.h"

START_TEST(test_seeded_and_bounded) {
    wf_workload_rng a, b, c;
    wf_workload_rng_seed(&a, 42);
    wf_workload_rng_seed(&b, 42);
    wf_workload_rng_seed(&c, 43);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = wf_workload_rng_next(&a);
        ck_assert_uint_eq(x, wf_workload_rng_next(&b));
        differ += x != wf_workload_rng_next(&c);
    }
    ck_assert_int_gt(differ, 990);
    int seen[4] = {0};
    for (int i = 0; i < 4000; i++) {
        double u = wf_workload_rng_uniform(&a);
        ck_assert(u >= 0.0 && u < 1.0);
        int64_t v = wf_workload_rng_range(&a, 3, 6);
        ck_assert(v >= 3 && v <= 6);
        seen[v - 3]++;
    }
    for (int k = 0; k < 4; k++) ck_assert_int_gt(seen[k], 800); /* ~1000 each */
    ck_assert_int_eq(wf_workload_rng_range(&a, 5, 5), 5);
    ck_assert_int_eq(wf_workload_rng_range(&a, 5, 2), 5);
}
END_TEST

START_TEST(test_gamma_mean) {
    wf_workload_rng r;
    wf_workload_rng_seed(&r, 7);
    const double shapes[] = {0.5, 1.0, 4.0};
    for (int s = 0; s < 3; s++) {
        double sum = 0;
        const int n = 20000;
        for (int i = 0; i < n; i++) {
            double g = wf_workload_rng_gamma(&r, shapes[s], 2.0);
            ck_assert(g >= 0 && isfinite(g));
            sum += g;
        }
        /* mean shape x scale; the standard error is sqrt(shape) x 2 / sqrt(n) < 0.03 */
        ck_assert_double_eq_tol(sum / n, shapes[s] * 2.0, 0.15);
    }
}
END_TEST

START_TEST(test_pick) {
    wf_workload_rng r;
    wf_workload_rng_seed(&r, 9);
    const double w[4] = {0, 1, -2, 3};
    int seen[4] = {0};
    for (int i = 0; i < 8000; i++) {
        int k = wf_workload_rng_pick(&r, w, 4, 4.0);
        ck_assert(k >= 0 && k < 4);
        seen[k]++;
    }
    ck_assert_int_eq(seen[0], 0); /* weight 0 and negative weights are never drawn */
    ck_assert_int_eq(seen[2], 0);
    ck_assert_int_gt(seen[1], 1700); /* 2000 expected (sd ~39) */
    ck_assert_int_lt(seen[1], 2300);
    ck_assert_int_eq(seen[1] + seen[3], 8000);
}
END_TEST

static Suite *rng_suite(void) {
    Suite *s = suite_create("workload_rng");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_seeded_and_bounded);
    tcase_add_test(tc, test_gamma_mean);
    tcase_add_test(tc, test_pick);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(rng_suite)
