/* Tests proto/log.c: level filtering, level names, context passed to the callback. */
#include "check_main.h"
#include "proto/base/log.h"

#include <stdio.h>
#include <string.h>

struct captured {
    int calls;
    wf_log_level level;
    char module[32];
    char request_id[32];
    char message[256];
};

static void capture(wf_log_level level, const wf_log_context *ctx, const char *message,
                    void *user) {
    struct captured *c = user;
    c->calls++;
    c->level = level;
    snprintf(c->module, sizeof c->module, "%s", ctx->module);
    snprintf(c->request_id, sizeof c->request_id, "%s", ctx->request_id ? ctx->request_id : "");
    snprintf(c->message, sizeof c->message, "%s", message);
}

START_TEST(filters_by_level_and_passes_context) {
    struct captured c = {0};
    wf_log_set_callback(capture, &c);
    wf_log_set_level(WF_LOG_LEVEL_WARN);
    WF_LOG_INFO("engine", NULL, "dropped %d", 1);
    ck_assert_int_eq(c.calls, 0);
    WF_LOG_ERROR("server", "req-7", "bad %s at %d", "thing", 42);
    ck_assert_int_eq(c.calls, 1);
    ck_assert_int_eq(c.level, WF_LOG_LEVEL_ERROR);
    ck_assert_str_eq(c.module, "server");
    ck_assert_str_eq(c.request_id, "req-7");
    ck_assert_str_eq(c.message, "bad thing at 42");
    wf_log_set_level(WF_LOG_LEVEL_OFF);
    WF_LOG_ERROR("server", NULL, "silenced");
    ck_assert_int_eq(c.calls, 1);
    wf_log_set_callback(NULL, NULL);
}
END_TEST

START_TEST(parses_level_names) {
    wf_log_level level = WF_LOG_LEVEL_INFO;
    ck_assert_int_eq(wf_log_level_parse("DEBUG", &level), 0);
    ck_assert_int_eq(level, WF_LOG_LEVEL_DEBUG);
    ck_assert_int_eq(wf_log_level_parse("warning", &level), 0);
    ck_assert_int_eq(level, WF_LOG_LEVEL_WARN);
    ck_assert_int_eq(wf_log_level_parse("loud", &level), -1);
    ck_assert_int_eq(level, WF_LOG_LEVEL_WARN);
    ck_assert_int_eq(wf_log_level_parse(NULL, &level), -1);
    ck_assert_str_eq(wf_log_level_name(WF_LOG_LEVEL_TRACE), "trace");
}
END_TEST

START_TEST(long_messages_are_truncated_not_overflowed) {
    struct captured c = {0};
    char big[4000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    wf_log_set_callback(capture, &c);
    wf_log_set_level(WF_LOG_LEVEL_TRACE);
    WF_LOG_INFO("t", NULL, "%s", big);
    ck_assert_int_eq(c.calls, 1);
    ck_assert_uint_eq(strlen(c.message), sizeof c.message - 1);
    wf_log_set_callback(NULL, NULL);
    WF_LOG_INFO("t", "r", "%s", big); /* default stderr writer: must not overflow either */
}
END_TEST

static Suite *log_suite(void) {
    Suite *s = suite_create("proto/log");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, filters_by_level_and_passes_context);
    tcase_add_test(tc, parses_level_names);
    tcase_add_test(tc, long_messages_are_truncated_not_overflowed);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(log_suite)
