/* Tests proto/status.c: every status has a distinct name and text; unknown values are safe. */
#include "check_main.h"
#include "proto/base/status.h"

#include <string.h>

START_TEST(every_status_has_name_and_text) {
    for (int s = WF_STATUS_MIN; s <= WF_IN_PROGRESS; s++) {
        ck_assert_str_ne(wf_status_str((wf_status)s), "unknown status");
        ck_assert_str_ne(wf_status_name((wf_status)s), "WF_UNKNOWN");
        ck_assert_int_eq(strncmp(wf_status_name((wf_status)s), "WF_", 3), 0);
    }
}
END_TEST

START_TEST(names_are_distinct) {
    for (int a = WF_STATUS_MIN; a <= WF_IN_PROGRESS; a++)
        for (int b = a + 1; b <= WF_IN_PROGRESS; b++) {
            ck_assert_str_ne(wf_status_name((wf_status)a), wf_status_name((wf_status)b));
            ck_assert_str_ne(wf_status_str((wf_status)a), wf_status_str((wf_status)b));
        }
}
END_TEST

START_TEST(known_values) {
    ck_assert_str_eq(wf_status_str(WF_OK), "ok");
    ck_assert_str_eq(wf_status_name(WF_EINVAL), "WF_EINVAL");
    ck_assert_str_eq(wf_status_str(WF_EFULL), "queue or pool full");
    ck_assert_str_eq(wf_status_name(WF_IN_PROGRESS), "WF_IN_PROGRESS");
    ck_assert_int_gt(WF_IN_PROGRESS, WF_OK); /* in progress is a success */
}
END_TEST

START_TEST(unknown_values_are_safe) {
    ck_assert_str_eq(wf_status_str((wf_status)(WF_STATUS_MIN - 1)), "unknown status");
    ck_assert_str_eq(wf_status_str((wf_status)2), "unknown status");
    ck_assert_str_eq(wf_status_name((wf_status)-1000), "WF_UNKNOWN");
}
END_TEST

START_TEST(errorf_formats_truncates_and_tolerates_null) {
    char err[16] = "untouched";
    ck_assert_int_eq(wf_status_errorf(err, sizeof err, WF_EFORMAT, "bad %s at %d", "key", 7),
                     WF_EFORMAT);
    ck_assert_str_eq(err, "bad key at 7");
    wf_errorf(err, sizeof err, "%s", "a message longer than sixteen bytes");
    ck_assert_uint_eq(strlen(err), sizeof err - 1); /* truncated, still terminated */
    ck_assert_int_eq(wf_status_errorf(NULL, 64, WF_EIO, "ignored %d", 1), WF_EIO);
    wf_errorf(err, 0, "not written");
    ck_assert_int_eq(strncmp(err, "a message", 9), 0);
}
END_TEST

static Suite *status_suite(void) {
    Suite *s = suite_create("proto/status");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, every_status_has_name_and_text);
    tcase_add_test(tc, names_are_distinct);
    tcase_add_test(tc, known_values);
    tcase_add_test(tc, unknown_values_are_safe);
    tcase_add_test(tc, errorf_formats_truncates_and_tolerates_null);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(status_suite)
