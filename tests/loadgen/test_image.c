/* Unit tests of loadgen/image.c: base64 and PNG checks, reply and stream-event checks, image
 * request bodies, and the per-class report math (latency, normalised latency, SLO attainment,
 * refused apart from failed) on hand-made records with known timings. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "loadgen/image.h"

static uint32_t crc32_png(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    return ~c;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* The head of a PNG (signature + IHDR) of w x h; the checker reads no further. */
static size_t png_head(uint8_t *buf, uint32_t w, uint32_t h) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(buf, sig, 8);
    put32(buf + 8, 13);
    memcpy(buf + 12, "IHDR", 4);
    put32(buf + 16, w);
    put32(buf + 20, h);
    buf[24] = 8, buf[25] = 0, buf[26] = 0, buf[27] = 0, buf[28] = 0;
    put32(buf + 29, crc32_png(buf + 12, 17));
    return 33;
}

static char *b64(const uint8_t *p, size_t n) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = a[v >> 18 & 63];
        *o++ = a[v >> 12 & 63];
        *o++ = i + 1 < n ? a[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? a[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

START_TEST(test_base64) {
    size_t n;
    uint8_t *d = wf_loadgen_base64_decode("aGVsbG8=", 8, &n);
    ck_assert_uint_eq(n, 5);
    ck_assert(memcmp(d, "hello", 5) == 0);
    free(d);
    d = wf_loadgen_base64_decode("aGVsbG8", 7, &n); /* padding optional */
    ck_assert_uint_eq(n, 5);
    free(d);
    d = wf_loadgen_base64_decode("", 0, &n);
    ck_assert_uint_eq(n, 0);
    free(d);
    ck_assert_ptr_null(wf_loadgen_base64_decode("aGV sbG8=", 9, &n));
    ck_assert_ptr_null(wf_loadgen_base64_decode("aGVsb", 5, &n)); /* 4k+1 characters */
}
END_TEST

START_TEST(test_png_check) {
    char err[160];
    uint8_t buf[64];
    size_t n = png_head(buf, 32, 24);
    ck_assert_int_eq(wf_loadgen_png_check(buf, n, 32, 24, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_loadgen_png_check(buf, n, 24, 32, err, sizeof err), WF_EFORMAT);
    ck_assert_str_eq(err, "PNG is 32x24, asked 24x32");
    ck_assert_int_eq(wf_loadgen_png_check(buf, 20, 32, 24, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "IHDR"));
    buf[20] ^= 1; /* height changed, CRC not */
    ck_assert_int_eq(wf_loadgen_png_check(buf, n, 32, 24, err, sizeof err), WF_EFORMAT);
    ck_assert_str_eq(err, "PNG IHDR chunk has a bad CRC");
    buf[20] ^= 1;
    buf[1] = 'X';
    ck_assert_int_eq(wf_loadgen_png_check(buf, n, 32, 24, err, sizeof err), WF_EFORMAT);
    ck_assert_str_eq(err, "not a PNG (bad signature)");
    const uint8_t jpeg[] = {0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 'J', 'F', 'I', 'F', 0, 1};
    ck_assert_int_eq(wf_loadgen_png_check(jpeg, sizeof jpeg, 32, 24, err, sizeof err), WF_EFORMAT);
}
END_TEST

START_TEST(test_reply_and_events) {
    char err[160];
    uint8_t buf[64];
    char *good = b64(buf, png_head(buf, 16, 16));
    char *small = b64(buf, png_head(buf, 8, 8));
    char text[1024];
    snprintf(text, sizeof text, "{\"created\":1,\"data\":[{\"b64_json\":\"%s\"},{\"b64_json\":\"%s\"}]}",
             good, good);
    json_t *j = json_loads(text, 0, NULL);
    ck_assert_int_eq(wf_loadgen_image_check_reply(j, 16, 16, err, sizeof err), 2);
    ck_assert_int_eq(wf_loadgen_image_check_reply(j, 32, 32, err, sizeof err), -1);
    ck_assert_str_eq(err, "data[0]: PNG is 16x16, asked 32x32");
    json_decref(j);
    snprintf(text, sizeof text, "{\"data\":[{\"b64_json\":\"%s\"},{\"b64_json\":\"%s\"}]}", good, small);
    j = json_loads(text, 0, NULL);
    ck_assert_int_eq(wf_loadgen_image_check_reply(j, 16, 16, err, sizeof err), -1);
    ck_assert_str_eq(err, "data[1]: PNG is 8x8, asked 16x16");
    json_decref(j);
    j = json_loads("{\"data\":[{\"url\":\"http://x\"}]}", 0, NULL);
    ck_assert_int_eq(wf_loadgen_image_check_reply(j, 16, 16, err, sizeof err), -1);
    ck_assert_str_eq(err, "data[0] has no b64_json string");
    json_decref(j);
    j = json_loads("{\"data\":[{\"b64_json\":\"!!!!\"}]}", 0, NULL);
    ck_assert_int_eq(wf_loadgen_image_check_reply(j, 16, 16, err, sizeof err), -1);
    ck_assert_str_eq(err, "data[0]: b64_json is not valid base64");
    json_decref(j);
    j = json_loads("{\"error\":{\"message\":\"size: 7x7 is not supported\"}}", 0, NULL);
    ck_assert_int_eq(wf_loadgen_image_check_reply(j, 16, 16, err, sizeof err), -1);
    ck_assert_str_eq(err, "size: 7x7 is not supported");
    json_decref(j);
    j = json_loads("{\"created\":1}", 0, NULL);
    ck_assert_int_eq(wf_loadgen_image_check_reply(j, 16, 16, err, sizeof err), -1);
    json_decref(j);

    bool progress;
    j = json_loads("{\"type\":\"image_generation.progress\",\"step\":3,\"total_steps\":10}", 0, NULL);
    ck_assert_int_eq(wf_loadgen_image_check_event(j, 16, 16, &progress, err, sizeof err), 0);
    ck_assert(progress);
    json_decref(j);
    snprintf(text, sizeof text, "{\"type\":\"image_generation.partial_image\",\"b64_json\":\"%s\"}", small);
    j = json_loads(text, 0, NULL); /* a preview may have any size */
    ck_assert_int_eq(wf_loadgen_image_check_event(j, 16, 16, &progress, err, sizeof err), 0);
    ck_assert(progress);
    json_decref(j);
    snprintf(text, sizeof text, "{\"type\":\"image_generation.completed\",\"b64_json\":\"%s\"}", good);
    j = json_loads(text, 0, NULL);
    ck_assert_int_eq(wf_loadgen_image_check_event(j, 16, 16, &progress, err, sizeof err), 1);
    ck_assert(!progress);
    json_decref(j);
    snprintf(text, sizeof text, "{\"data\":[{\"b64_json\":\"%s\"}]}", good);
    j = json_loads(text, 0, NULL);
    ck_assert_int_eq(wf_loadgen_image_check_event(j, 16, 16, &progress, err, sizeof err), 1);
    json_decref(j);
    j = json_loads("{\"error\":{\"message\":\"cancelled\"}}", 0, NULL);
    ck_assert_int_eq(wf_loadgen_image_check_event(j, 16, 16, &progress, err, sizeof err), -1);
    ck_assert_str_eq(err, "cancelled");
    json_decref(j);
    free(good);
    free(small);
}
END_TEST

START_TEST(test_request_body) {
    wf_workload_class cls[2] = {
        {.name = "S", .width = 32, .height = 16, .steps = 5, .alpha = 1.5, .has_priority = true,
         .priority = 100, .t_single_ms = 80},
        {.name = "L", .width = 64, .height = 64, .steps = 45, .alpha = 6},
    };
    wf_loadgen_image_opts io = {.classes = cls, .n_classes = 2, .n = 2, .class_labels = 10,
                                .guidance = 4.0, .send_seed = true};
    wf_loadgen_prompt item = {.text_seed = 0x123456789abcdefULL, .slo_class = 0};
    char *s = wf_loadgen_image_build_body(&io, "weft-dit-fmnist", &item, 119.6, true, false,
                                          "{\"user\":\"bench\"}");
    json_t *j = json_loads(s, 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "weft-dit-fmnist");
    ck_assert_str_eq(json_string_value(json_object_get(j, "size")), "32x16");
    ck_assert_str_eq(json_string_value(json_object_get(j, "response_format")), "b64_json");
    ck_assert_str_eq(json_string_value(json_object_get(j, "prompt")), "a photo");
    ck_assert_str_eq(json_string_value(json_object_get(j, "user")), "bench");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "n")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "num_inference_steps")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "priority")), 100);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "slo"), "deadline_ms")), 119);
    ck_assert_double_eq(json_real_value(json_object_get(j, "guidance_scale")), 4.0);
    json_int_t label = json_integer_value(json_object_get(j, "class_label"));
    ck_assert(label >= 0 && label < 10);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "seed")), (json_int_t)(item.text_seed >> 33));
    ck_assert_ptr_null(json_object_get(j, "stream"));
    json_decref(j);
    free(s);
    /* peers: no SLO extension; a late request still carries a positive deadline */
    io.class_labels = 0;
    io.send_seed = false;
    io.guidance = -1;
    io.prompt = "a red fox";
    item.slo_class = 1;
    s = wf_loadgen_image_build_body(&io, NULL, &item, 500, false, true, NULL);
    j = json_loads(s, 0, NULL);
    ck_assert_ptr_null(json_object_get(j, "slo"));
    ck_assert_ptr_null(json_object_get(j, "priority"));
    ck_assert_ptr_null(json_object_get(j, "model"));
    ck_assert_ptr_null(json_object_get(j, "seed"));
    ck_assert_ptr_null(json_object_get(j, "class_label"));
    ck_assert_ptr_null(json_object_get(j, "guidance_scale"));
    ck_assert(json_is_true(json_object_get(j, "stream")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "prompt")), "a red fox");
    ck_assert_str_eq(json_string_value(json_object_get(j, "size")), "64x64");
    json_decref(j);
    free(s);
    item.slo_class = 0;
    s = wf_loadgen_image_build_body(&io, NULL, &item, 0.2, true, false, NULL);
    j = json_loads(s, 0, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "slo"), "deadline_ms")), 1);
    json_decref(j);
    free(s);
    item.slo_class = 2; /* no such class */
    ck_assert_ptr_null(wf_loadgen_image_build_body(&io, NULL, &item, 1, true, false, NULL));
}
END_TEST

#define MS 1000000ull

static wf_loadgen_record rec(int cls, wf_loadgen_outcome out, int status, uint64_t arrival_ms,
                             uint64_t start_ms, uint64_t end_ms, uint32_t images) {
    wf_loadgen_record r = {0};
    r.slo_class = cls;
    r.outcome = out;
    r.http_status = status;
    r.t_arrival_ns = 1000 * MS + arrival_ms * MS;
    r.t_start_ns = 1000 * MS + start_ms * MS;
    r.t_end_ns = 1000 * MS + end_ms * MS;
    r.images = images;
    return r;
}

START_TEST(test_summary_math) {
    wf_workload_class cls[2] = {
        {.name = "S", .width = 8, .height = 8, .steps = 5, .alpha = 1.5, .t_single_ms = 100},
        {.name = "L", .width = 8, .height = 8, .steps = 45, .alpha = 6, .t_single_ms = 400},
    };
    /* S deadline 150 ms after arrival, L 2400 ms. */
    wf_loadgen_record r[] = {
        rec(0, WF_LOADGEN_OK, 200, 0, 0, 100, 1),         /* S 100 ms: met (norm 1) */
        rec(0, WF_LOADGEN_OK, 200, 10, 10, 160, 1),       /* S 150 ms: met exactly */
        rec(0, WF_LOADGEN_OK, 200, 20, 50, 200, 1),       /* S sent 30 ms late, 150 ms: 180 > 150, missed */
        rec(0, WF_LOADGEN_HTTP_ERROR, 429, 30, 30, 31, 0), /* S refused */
        rec(1, WF_LOADGEN_OK, 200, 0, 0, 800, 2),         /* L 800 ms: met (norm 2) */
        rec(1, WF_LOADGEN_OK, 200, 0, 0, 3000, 2),        /* L 3000 ms: missed (norm 7.5) */
        rec(1, WF_LOADGEN_HTTP_ERROR, 500, 0, 0, 5, 0),    /* L failed */
        rec(1, WF_LOADGEN_TIMEOUT, 0, 0, 0, 9000, 0),      /* L failed */
        {0},                                              /* never sent: not counted */
    };
    size_t n = sizeof r / sizeof r[0];
    wf_loadgen_image_summary s;
    ck_assert_int_eq(wf_loadgen_image_summarize(r, n, cls, 2, 4.0, &s), WF_OK);
    ck_assert_uint_eq(s.issued, 8);
    ck_assert_uint_eq(s.completed, 5);
    ck_assert_uint_eq(s.refused, 1);
    ck_assert_uint_eq(s.failed, 2);
    ck_assert_uint_eq(s.met, 3);
    ck_assert_uint_eq(s.images, 7);
    ck_assert_double_eq_tol(s.attainment, 3.0 / 8, 1e-12);
    ck_assert_double_eq_tol(s.image_throughput, 7.0 / 4, 1e-12);
    ck_assert_double_eq_tol(s.request_throughput, 5.0 / 4, 1e-12);
    /* latencies 100, 150, 150, 800, 3000: numpy-style percentiles */
    ck_assert_double_eq_tol(s.latency.mean, 840, 1e-9);
    ck_assert_double_eq_tol(s.latency.median, 150, 1e-9);
    ck_assert_double_eq_tol(s.latency.p95, 800 + 0.8 * 2200, 1e-9);
    ck_assert_double_eq_tol(s.latency.p99, 800 + 0.96 * 2200, 1e-9);
    /* normalised: 1, 1.5, 1.5, 2, 7.5 */
    ck_assert_double_eq_tol(s.normalized.mean, 13.5 / 5, 1e-9);
    ck_assert_double_eq_tol(s.normalized.max, 7.5, 1e-9);
    const wf_loadgen_image_class_stats *S = &s.classes[0], *L = &s.classes[1];
    ck_assert_uint_eq(S->issued, 4);
    ck_assert_uint_eq(S->met, 2);
    ck_assert_uint_eq(S->refused, 1);
    ck_assert_uint_eq(S->failed, 0);
    ck_assert_double_eq_tol(S->attainment, 0.5, 1e-12);
    ck_assert_double_eq_tol(S->latency.mean, 400.0 / 3, 1e-9);
    ck_assert_double_eq_tol(S->normalized.median, 1.5, 1e-12);
    ck_assert_uint_eq(L->issued, 4);
    ck_assert_uint_eq(L->completed, 2);
    ck_assert_uint_eq(L->failed, 2);
    ck_assert_uint_eq(L->met, 1);
    ck_assert_uint_eq(L->images, 4);
    ck_assert_double_eq_tol(L->attainment, 0.25, 1e-12);
    ck_assert_double_eq_tol(L->normalized.mean, (2 + 7.5) / 2, 1e-12);
    ck_assert_uint_eq(s.n_errors, 3);
    /* The JSON carries the same numbers. */
    json_t *j = wf_loadgen_image_summary_json(&s);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "refused")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "errors"), "http_429")), 1);
    ck_assert_double_eq_tol(json_real_value(json_object_get(j, "slo_attainment")), 0.375, 1e-12);
    json_t *jl = json_array_get(json_object_get(j, "classes"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(jl, "name")), "L");
    ck_assert_double_eq_tol(json_real_value(json_object_get(jl, "deadline_ms")), 2400, 1e-9);
    ck_assert_double_eq_tol(json_real_value(json_object_get(jl, "mean_normalized_latency")), 4.75, 1e-9);
    json_decref(j);
    /* Met or not, one record at a time (a closed loop has no arrival: the send time counts). */
    wf_loadgen_record c = rec(0, WF_LOADGEN_OK, 200, 0, 0, 140, 1);
    c.t_arrival_ns = 0;
    ck_assert(wf_loadgen_image_record_met(&c, &cls[0]));
    c.t_end_ns += 20 * MS;
    ck_assert(!wf_loadgen_image_record_met(&c, &cls[0]));
    wf_workload_class unknown = cls[0];
    unknown.t_single_ms = 0;
    ck_assert(!wf_loadgen_image_record_met(&r[0], &unknown));
    /* Nothing issued: attainment undefined, not 0 or 1. */
    ck_assert_int_eq(wf_loadgen_image_summarize(r, 0, cls, 2, 1.0, &s), WF_OK);
    ck_assert(isnan(s.attainment) && isnan(s.classes[0].attainment));
}
END_TEST

START_TEST(test_phase_math) {
    wf_workload_profile p;
    char err[160];
    ck_assert_int_eq(wf_workload_profile_parse("phase a 0 1 5/s S=1\nphase b 1 3 5/s L=1\n", "t", &p,
                                              err, sizeof err), WF_OK);
    p.classes[0].t_single_ms = 100; /* S: deadline 150 ms */
    p.classes[2].t_single_ms = 400; /* L: deadline 2400 ms */
    /* t0 is 1 s on the record clock (rec() adds 1000 ms): arrivals 0..999 ms are phase a */
    wf_loadgen_record r[] = {
        rec(0, WF_LOADGEN_OK, 200, 0, 0, 100, 1),           /* a: met */
        rec(0, WF_LOADGEN_OK, 200, 500, 500, 800, 1),       /* a: 300 ms, missed */
        rec(0, WF_LOADGEN_HTTP_ERROR, 503, 900, 900, 901, 0), /* a: refused */
        rec(2, WF_LOADGEN_OK, 200, 1000, 1000, 1400, 1),    /* b: met, norm 1 */
        rec(2, WF_LOADGEN_TRANSPORT, 0, 2500, 2500, 2600, 0), /* b: failed */
        rec(2, WF_LOADGEN_OK, 200, 3500, 3500, 3600, 1),    /* after the last phase: none */
    };
    size_t n = sizeof r / sizeof r[0];
    wf_loadgen_image_summary s;
    ck_assert_int_eq(wf_loadgen_image_summarize(r, n, p.classes, p.n_classes, 4.0, &s), WF_OK);
    ck_assert_int_eq(wf_loadgen_image_summarize_phases(r, n, 1000 * MS, &p, &s), WF_OK);
    ck_assert_uint_eq(s.n_phases, 2);
    const wf_loadgen_image_phase_stats *a = &s.phases[0], *b = &s.phases[1];
    ck_assert_str_eq(a->name, "a");
    ck_assert_uint_eq(a->issued, 3);
    ck_assert_uint_eq(a->completed, 2);
    ck_assert_uint_eq(a->refused, 1);
    ck_assert_uint_eq(a->met, 1);
    ck_assert_double_eq_tol(a->attainment, 1.0 / 3, 1e-12);
    ck_assert_double_eq_tol(a->latency.mean, 200, 1e-9);
    ck_assert_double_eq_tol(a->normalized.mean, 2.0, 1e-9);
    ck_assert_uint_eq(b->issued, 2);
    ck_assert_uint_eq(b->failed, 1);
    ck_assert_uint_eq(b->met, 1);
    ck_assert_double_eq_tol(b->normalized.mean, 1.0, 1e-9);
    json_t *j = wf_loadgen_image_summary_json(&s);
    json_t *jb = json_array_get(json_object_get(j, "phases"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(jb, "name")), "b");
    ck_assert_int_eq(json_integer_value(json_object_get(jb, "failed")), 1);
    json_decref(j);
}
END_TEST

START_TEST(test_trace_round_trip) {
    char err[256], path[] = "/tmp/wf_trace_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    wf_workload_profile p;
    ck_assert_int_eq(wf_workload_profile_parse("class S 16x8 steps=4 alpha=1.5 priority=7\n"
                                              "phase a 0 10 3/s S=1 L=1\n", "t", &p, err, sizeof err), WF_OK);
    p.classes[0].t_single_ms = 40;
    p.classes[2].t_single_ms = 300;
    double arr[3] = {0.5, 1.25, 2.0};
    wf_loadgen_prompt items[3] = {{.slo_class = 2, .text_seed = 5ull << 33},
                                  {.slo_class = 0, .text_seed = 6ull << 33},
                                  {.slo_class = 2, .text_seed = 7ull << 33}};
    ck_assert_int_eq(wf_loadgen_image_trace_write(path, &p, 1.0, 3, arr, items, 3, err, sizeof err), WF_OK);
    wf_workload_profile q;
    wf_workload_profile_default_classes(&q);
    double *a = NULL;
    wf_loadgen_prompt *it = NULL;
    size_t n = 0;
    ck_assert_int_eq(wf_loadgen_image_trace_read(path, &q, &a, &it, &n, err, sizeof err), WF_OK);
    unlink(path);
    ck_assert_uint_eq(n, 3);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_double_eq_tol(a[i], arr[i], 1e-9);
        ck_assert_int_eq(wf_loadgen_image_request_seed(&it[i]), wf_loadgen_image_request_seed(&items[i]));
        ck_assert_str_eq(q.classes[it[i].slo_class].name, p.classes[items[i].slo_class].name);
    }
    int s = wf_workload_profile_class_index(&q, "S"), l = wf_workload_profile_class_index(&q, "L");
    ck_assert_int_eq(q.classes[s].width, 16);
    ck_assert_int_eq(q.classes[s].height, 8);
    ck_assert_int_eq(q.classes[s].steps, 4);
    ck_assert_int_eq(q.classes[s].priority, 7);
    ck_assert_double_eq_tol(q.classes[s].alpha, 1.5, 1e-9);
    ck_assert_double_eq_tol(q.classes[s].t_single_ms, 40, 1e-9);
    ck_assert_double_eq_tol(q.classes[l].alpha, 6, 1e-9);
    ck_assert_double_eq_tol(q.classes[l].t_single_ms, 300, 1e-9);
    free(a);
    free(it);
    ck_assert_int_eq(wf_loadgen_image_trace_read("/nonexistent/t.json", &q, &a, &it, &n, err, sizeof err),
                     WF_ENOTFOUND);
}
END_TEST

static Suite *image_suite(void) {
    Suite *s = suite_create("loadgen_image");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_base64);
    tcase_add_test(tc, test_png_check);
    tcase_add_test(tc, test_reply_and_events);
    tcase_add_test(tc, test_request_body);
    tcase_add_test(tc, test_summary_math);
    tcase_add_test(tc, test_phase_math);
    tcase_add_test(tc, test_trace_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(image_suite)
