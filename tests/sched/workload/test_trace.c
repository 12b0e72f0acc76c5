/* Unit tests of sched/workload/trace.c: GF-DiT's workload JSON written and read back (requests
 * sorted by arrival, classes and seeds kept, a request without a seed read as -1), and bad
 * traces refused with the request and the field named.
 * weft-test: labels=unit */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "sched/workload/workload.h"

START_TEST(test_trace_round_trip) {
    char err[256], path[] = "/tmp/wf_trace_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    wf_workload_profile p;
    ck_assert_int_eq(wf_workload_profile_parse("class S 16x8 steps=4 alpha=1.5 priority=7\n"
                                               "phase a 0 10 3/s S=1 L=1\n", "t", &p, err,
                                               sizeof err), WF_OK);
    p.classes[0].t_single_ms = 40;
    p.classes[2].t_single_ms = 300;
    double arr[3] = {2.0, 0.5, 1.25};
    int cls[3] = {2, 0, 2};
    int64_t seeds[3] = {11, -1, 2147483647};
    wf_workload_trace w = {.n = 3, .arrival_s = arr, .class_idx = cls, .seed = seeds};
    ck_assert_int_eq(wf_workload_trace_write(path, &p, 1.0, 3, &w, err, sizeof err), WF_OK);
    wf_workload_profile q;
    wf_workload_profile_default_classes(&q);
    wf_workload_trace t;
    ck_assert_int_eq(wf_workload_trace_read(path, &q, &t, err, sizeof err), WF_OK);
    unlink(path);
    ck_assert_uint_eq(t.n, 3);
    static const size_t order[3] = {1, 2, 0}; /* by arrival */
    for (size_t i = 0; i < 3; i++) {
        size_t k = order[i];
        ck_assert_double_eq_tol(t.arrival_s[i], arr[k], 1e-9);
        ck_assert_int_eq(t.seed[i], seeds[k]);
        ck_assert_str_eq(q.classes[t.class_idx[i]].name, p.classes[cls[k]].name);
    }
    int s = wf_workload_profile_class_index(&q, "S");
    ck_assert_int_eq(q.classes[s].width, 16);
    ck_assert_int_eq(q.classes[s].priority, 7);
    ck_assert_double_eq_tol(q.classes[s].alpha, 1.5, 1e-9);
    wf_workload_trace_free(&t);
    ck_assert(t.arrival_s == NULL && t.n == 0);
    wf_workload_trace_free(&t); /* a zeroed trace: no-op */
    ck_assert_int_eq(wf_workload_trace_read("/nonexistent/t.json", &q, &t, err, sizeof err),
                     WF_ENOTFOUND);
}
END_TEST

/* Bad traces get an error naming the request and the field (cases found by
 * tests/fuzz/fuzz_trace.c: a width the classes refuse was reported as "more than 8 classes",
 * an infinite alpha likewise, and a priority beyond int was cut silently). */
START_TEST(test_trace_errors) {
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"requests\": [{\"request_class\": \"Q\", \"arrival_ms\": 0, \"width\": 20000, "
         "\"height\": 8, \"num_steps\": 2}]}", "request 0 needs request_class"},
        {"{\"requests\": [{\"request_class\": \"S\", \"arrival_ms\": 1, \"width\": 8, "
         "\"height\": 8, \"num_steps\": 5, \"deadline_ms\": 1e300, "
         "\"profiled_optimal_latency_ms\": 1e-300}]}", "request 0: (deadline_ms - arrival_ms)"},
        {"{\"requests\": [{\"request_class\": \"S\", \"arrival_ms\": 1, \"width\": 8, "
         "\"height\": 8, \"num_steps\": 5, \"priority\": 4294967396}]}",
         "request 0: priority must be an integer"},
        {"{\"requests\": [{\"request_class\": \"S\", \"arrival_ms\": 1, \"width\": 8, "
         "\"height\": 8, \"num_steps\": 5, \"priority\": \"high\"}]}",
         "request 0: priority must be an integer"},
        {"{\"requests\": []}", "no \"requests\" array"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "", path[] = "/tmp/wf_trace_XXXXXX";
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, bad[i].json, strlen(bad[i].json)), (ssize_t)strlen(bad[i].json));
        close(fd);
        wf_workload_profile q;
        wf_workload_profile_default_classes(&q);
        wf_workload_trace t;
        ck_assert_int_eq(wf_workload_trace_read(path, &q, &t, err, sizeof err), WF_EFORMAT);
        unlink(path);
        ck_assert_msg(strstr(err, bad[i].want), "case %zu: '%s' lacks '%s'", i, err, bad[i].want);
        ck_assert(t.arrival_s == NULL && t.class_idx == NULL && t.seed == NULL && t.n == 0);
    }
}
END_TEST

static Suite *trace_suite(void) {
    Suite *s = suite_create("workload_trace");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_trace_round_trip);
    tcase_add_test(tc, test_trace_errors);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(trace_suite)
