/* server/metrics.h: the image series per model and SLO class (priority), the "other" class past
 * WF_SLO_CLASSES priorities, and the exposition's labels. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "server/metrics.h"

static bool has(const wf_jbuf *b, const char *line) {
    return b->data && strstr(b->data, line) != NULL;
}

START_TEST(image_classes_claimed_then_other) {
    static wf_metrics m; /* large: not on the stack */
    wf_metrics_init(&m);
    ck_assert_ptr_null(wf_metrics_image_class(&m, -1, 0));
    ck_assert_ptr_null(wf_metrics_image_class(&m, WF_METRICS_MAX_IMAGE_MODELS, 0));
    wf_image_class_metrics *first = wf_metrics_image_class(&m, 1, 7);
    ck_assert_ptr_eq(wf_metrics_image_class(&m, 1, 7), first); /* found again */
    ck_assert_ptr_ne(wf_metrics_image_class(&m, 0, 7), first);  /* per model */
    for (int p = 0; p < WF_SLO_CLASSES - 1; p++) ck_assert_ptr_nonnull(wf_metrics_image_class(&m, 1, 100 + p));
    wf_image_class_metrics *other = wf_metrics_image_class(&m, 1, 999);
    ck_assert_ptr_eq(other, &m.image[1][WF_SLO_CLASSES]);
    ck_assert_ptr_eq(wf_metrics_image_class(&m, 1, 998), other); /* every later priority */
    ck_assert_ptr_eq(wf_metrics_image_class(&m, 1, 7), first);   /* earlier ones keep theirs */
}
END_TEST

START_TEST(image_series_render) {
    static wf_metrics m;
    wf_metrics_init(&m);
    wf_image_class_metrics *c = wf_metrics_image_class(&m, 0, 5);
    c->success = 3;
    c->error = 1;
    c->rejected = 2;
    c->deadline_total = 4;
    c->deadline_met = 3;
    wf_histogram_observe(&c->e2e, 0.3);
    wf_histogram_observe(&c->queue, 0.002);
    wf_image_class_metrics *d = wf_metrics_image_class(&m, 1, -2);
    d->cancelled = 1;
    wf_image_sched_stats st[2];
    memset(st, 0, sizeof st);
    st[0].images = 9;
    st[0].steps = 40;
    st[0].running = 2;
    st[0].step_ms_hist[3] = 40; /* <= 10 ms */
    st[0].step_ms_sum = 200;
    const char *names[2] = {"dit-a", "dit\"b"};
    wf_jbuf b = {0};
    wf_metrics_render_images(&m, names, st, 2, &b);
    wf_jbuf_raw(&b, "", 1);
    ck_assert(has(&b, "weft:image_requests_total{model_name=\"dit-a\",priority=\"5\",status=\"success\"} 3\n"));
    ck_assert(has(&b, "weft:image_requests_total{model_name=\"dit-a\",priority=\"5\",status=\"error\"} 1\n"));
    ck_assert(has(&b, "weft:image_requests_total{model_name=\"dit\\\"b\",priority=\"-2\",status=\"cancelled\"} 1\n"));
    ck_assert(has(&b, "weft:image_requests_rejected_total{model_name=\"dit-a\",priority=\"5\"} 2\n"));
    ck_assert(has(&b, "weft:image_e2e_request_latency_seconds_bucket{le=\"0.25\",model_name=\"dit-a\",priority=\"5\"} 0\n"));
    ck_assert(has(&b, "weft:image_e2e_request_latency_seconds_bucket{le=\"0.5\",model_name=\"dit-a\",priority=\"5\"} 1\n"));
    ck_assert(has(&b, "weft:image_e2e_request_latency_seconds_count{model_name=\"dit-a\",priority=\"5\"} 1\n"));
    ck_assert(has(&b, "weft:image_queue_time_seconds_bucket{le=\"0.005\",model_name=\"dit-a\",priority=\"5\"} 1\n"));
    ck_assert(has(&b, "weft:image_slo_requests_total{model_name=\"dit-a\",priority=\"5\"} 4\n"));
    ck_assert(has(&b, "weft:image_slo_met_total{model_name=\"dit-a\",priority=\"5\"} 3\n"));
    ck_assert(has(&b, "weft:image_slo_attainment{model_name=\"dit-a\",priority=\"5\"} 0.75\n"));
    ck_assert(has(&b, "weft:image_slo_attainment{model_name=\"dit-a\",priority=\"all\"} 0.75\n"));
    ck_assert(has(&b, "weft:image_slo_attainment{model_name=\"dit\\\"b\",priority=\"all\"} 1\n"));
    ck_assert(has(&b, "weft:images_generated_total{model_name=\"dit-a\"} 9\n"));
    ck_assert(has(&b, "weft:image_denoise_steps_total{model_name=\"dit-a\"} 40\n"));
    ck_assert(has(&b, "weft:image_requests_running{model_name=\"dit-a\"} 2\n"));
    ck_assert(has(&b, "weft:image_step_seconds_bucket{le=\"0.01\",model_name=\"dit-a\"} 40\n"));
    ck_assert(has(&b, "weft:image_step_seconds_count{model_name=\"dit\\\"b\"} 0\n"));
    /* one HELP/TYPE per family, however many models and classes */
    const char *p = b.data;
    int n = 0;
    while ((p = strstr(p, "# TYPE weft:image_requests_total ")) != NULL) n++, p++;
    ck_assert_int_eq(n, 1);
    /* the "other" class is labelled so */
    for (int k = 0; k < WF_SLO_CLASSES + 2; k++) wf_metrics_image_class(&m, 0, 1000 + k)->success++;
    wf_jbuf_free(&b);
    memset(&b, 0, sizeof b);
    wf_metrics_render_images(&m, names, st, 2, &b);
    wf_jbuf_raw(&b, "", 1);
    ck_assert(has(&b, "weft:image_requests_total{model_name=\"dit-a\",priority=\"other\",status=\"success\"} 3\n"));
    wf_jbuf_free(&b);
}
END_TEST

static Suite *metrics_suite(void) {
    Suite *s = suite_create("server/metrics");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, image_classes_claimed_then_other);
    tcase_add_test(tc, image_series_render);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(metrics_suite)
