/* Shared main() for Check unit tests: fork mode (a crash fails one test, not the run), the
 * suite's counts printed, exit status for ctest.
 *
 *     static Suite *status_suite(void) { ... }
 *     WF_CHECK_MAIN(status_suite)
 */
#ifndef WF_TESTS_CHECK_MAIN_H
#define WF_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

#define WF_CHECK_MAIN(make_suite)                               \
    int main(void) {                                            \
        SRunner *runner = srunner_create(make_suite());         \
        srunner_set_fork_status(runner, CK_FORK);               \
        srunner_run_all(runner, CK_NORMAL);                     \
        int failed = srunner_ntests_failed(runner);             \
        srunner_free(runner);                                   \
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;       \
    }

#endif
