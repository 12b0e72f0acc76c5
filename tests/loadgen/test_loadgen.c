/* Unit tests of weft-bench's pieces that need no network: arrival statistics, metric
 * arithmetic on known timings, SSE framing, dataset parsing, request bodies.
 * weft-bench's sources are a program, not a library, so the modules under test are compiled
 * into this test directly. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "loadgen/arrival.h"
#include "loadgen/dataset.h"
#include "loadgen/http.h"
#include "loadgen/metrics.h"
#include "loadgen/runner.h"
#include "loadgen/sse.h"

#define DATA WEFT_SOURCE_DIR "/tests/loadgen/data/"

/* ---- arrivals --------------------------------------------------------------------------- */

static void gap_stats(double rate, double burstiness, uint64_t seed, size_t n, double *mean,
                      double *var) {
    wf_loadgen_arrival a;
    wf_loadgen_arrival_init(&a, rate, burstiness, seed);
    double s = 0, ss = 0;
    for (size_t i = 0; i < n; i++) {
        double g = wf_loadgen_arrival_next_gap(&a);
        ck_assert(g >= 0);
        s += g;
        ss += g * g;
    }
    *mean = s / (double)n;
    *var = ss / (double)n - *mean * *mean;
}

START_TEST(test_poisson_gaps) {
    /* Exponential gaps: mean 1/rate, variance 1/rate^2. Over 20,000 samples the standard
     * error of the mean is 0.7%, of the variance ~2%: 4% and 10% bounds hold for any seed. */
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double mean, var;
        gap_stats(10.0, 1.0, seed, 20000, &mean, &var);
        ck_assert_msg(fabs(mean - 0.1) < 0.004, "mean %f", mean);
        ck_assert_msg(fabs(var - 0.01) < 0.001, "var %f", var);
    }
}
END_TEST

START_TEST(test_gamma_burstiness) {
    /* vLLM: shape = burstiness, scale = 1/(rate*burstiness): mean 1/rate, var 1/(rate^2 b). */
    const double bs[] = {0.25, 0.5, 2.0, 8.0};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
        double mean, var, b = bs[i];
        gap_stats(4.0, b, 7, 20000, &mean, &var);
        double want_var = 1.0 / (16.0 * b);
        ck_assert_msg(fabs(mean - 0.25) < 0.25 * (b < 1 ? 0.06 : 0.03), "b=%g mean %f", b, mean);
        ck_assert_msg(fabs(var - want_var) < want_var * (b < 1 ? 0.2 : 0.1), "b=%g var %f want %f",
                      b, var, want_var);
    }
}
END_TEST

START_TEST(test_arrival_deterministic_and_inf) {
    wf_loadgen_arrival a, b;
    wf_loadgen_arrival_init(&a, 3.0, 0.5, 99);
    wf_loadgen_arrival_init(&b, 3.0, 0.5, 99);
    for (int i = 0; i < 100; i++)
        ck_assert(wf_loadgen_arrival_next_gap(&a) == wf_loadgen_arrival_next_gap(&b));
    wf_loadgen_arrival_init(&a, INFINITY, 1.0, 1);
    ck_assert(wf_loadgen_arrival_next_gap(&a) == 0.0);
    wf_workload_rng r;
    wf_workload_rng_seed(&r, 5);
    int seen[4] = {0};
    for (int i = 0; i < 4000; i++) {
        int64_t v = wf_workload_rng_range(&r, 3, 6);
        ck_assert(v >= 3 && v <= 6);
        seen[v - 3]++;
        double u = wf_workload_rng_uniform(&r);
        ck_assert(u >= 0 && u < 1);
    }
    for (int i = 0; i < 4; i++) ck_assert_int_gt(seen[i], 800);
}
END_TEST

/* ---- metrics ------------------------------------------------------------------------------ */

#define MS 1000000ULL

static void mk(wf_loadgen_record *r, int cls, uint64_t start_ms, const uint64_t *chunks_ms,
               int n, uint64_t end_ms, int64_t out_tokens) {
    memset(r, 0, sizeof *r);
    r->slo_class = cls;
    r->outcome = WF_LOADGEN_OK;
    r->http_status = 200;
    r->streamed = true;
    r->t_start_ns = start_ms * MS;
    r->t_end_ns = end_ms * MS;
    for (int i = 0; i < n; i++) ck_assert_int_eq(wf_loadgen_record_add_chunk(r, chunks_ms[i] * MS), WF_OK);
    r->t_first_ns = n ? chunks_ms[0] * MS : 0;
    r->input_tokens = 10;
    r->output_tokens = out_tokens;
}

static void mk_fail(wf_loadgen_record *r, int cls, int status) {
    memset(r, 0, sizeof *r);
    r->slo_class = cls;
    r->outcome = WF_LOADGEN_HTTP_ERROR;
    r->http_status = status;
}

#define EQ(a, b) ck_assert_msg(fabs((a) - (b)) < 1e-9, "%s = %.12g, want %.12g", #a, (double)(a), (double)(b))

START_TEST(test_metrics_arithmetic) {
    wf_loadgen_record r[6];
    const uint64_t a[] = {100, 110, 130, 160}; /* TTFT 100, ITL 10 20 30, TPOT 60/3 = 20 */
    const uint64_t b[] = {1050, 1055};         /* TTFT 50, ITL 5, TPOT 10/1 = 10 */
    const uint64_t e[] = {30};                 /* one token: TTFT 30, no TPOT */
    mk(&r[0], 0, 0, a, 4, 160, 4);
    mk(&r[1], 0, 1000, b, 2, 1060, 2);
    mk_fail(&r[2], 0, 429);
    mk_fail(&r[3], 1, 500);
    mk(&r[4], 1, 0, e, 1, 40, 1);
    memset(&r[5], 0, sizeof r[5]);
    r[5].outcome = WF_LOADGEN_NOT_SENT; /* never counted */
    wf_loadgen_slo_class cls[2] = {{"tight", 60, 15, 1}, {"tpot-only", 0, 5, 1}};
    wf_loadgen_summary s;
    ck_assert_int_eq(wf_loadgen_summarize(r, 6, cls, 2, 2.0, &s), WF_OK);
    ck_assert_int_eq(s.issued, 5);
    ck_assert_int_eq(s.completed, 3);
    ck_assert_int_eq(s.failed, 1);  /* the 500 */
    ck_assert_int_eq(s.refused, 1); /* the 429: load shedding, counted apart */
    EQ(s.request_throughput, 1.5);
    ck_assert_int_eq(s.input_tokens, 30);
    ck_assert_int_eq(s.output_tokens, 7);
    EQ(s.output_throughput, 3.5);
    EQ(s.input_throughput, 15.0);
    EQ(s.total_token_throughput, 18.5);
    /* TTFT {30, 50, 100}: numpy percentiles with linear interpolation. */
    ck_assert_int_eq(s.ttft.n, 3);
    EQ(s.ttft.mean, 60);
    EQ(s.ttft.median, 50);
    EQ(s.ttft.p90, 90);
    EQ(s.ttft.p99, 99);
    EQ(s.ttft.min, 30);
    EQ(s.ttft.max, 100);
    EQ(s.ttft.std, sqrt(((30 - 60) * (30 - 60) + (50 - 60) * (50 - 60) + 40 * 40) / 3.0));
    /* TPOT {10, 20} */
    ck_assert_int_eq(s.tpot.n, 2);
    EQ(s.tpot.mean, 15);
    EQ(s.tpot.median, 15);
    EQ(s.tpot.p99, 19.9);
    /* ITL {5, 10, 20, 30} */
    ck_assert_int_eq(s.itl.n, 4);
    EQ(s.itl.mean, 16.25);
    EQ(s.itl.median, 15);
    EQ(s.itl.p90, 27);
    /* e2e {40, 60, 160} */
    EQ(s.e2e.mean, 260.0 / 3);
    EQ(s.e2e.median, 60);
    /* Goodput: r1 (50 <= 60, 10 <= 15) and r4 (no TTFT target, no TPOT) are good. */
    ck_assert(s.has_slo);
    ck_assert_int_eq(s.good, 2);
    EQ(s.goodput, 1.0);
    ck_assert_int_eq(s.classes[0].issued, 3);
    ck_assert_int_eq(s.classes[0].good, 1);
    EQ(s.classes[0].attainment, 1.0 / 3);
    ck_assert_int_eq(s.classes[1].issued, 2);
    ck_assert_int_eq(s.classes[1].good, 1);
    EQ(s.classes[1].attainment, 0.5);
    EQ(s.classes[1].goodput, 0.5);
    /* Errors by status. */
    ck_assert_int_eq(s.n_errors, 2);
    int found = 0;
    for (size_t i = 0; i < s.n_errors; i++) {
        if (strcmp(s.errors[i].key, "http_429") == 0 && s.errors[i].count == 1) found++;
        if (strcmp(s.errors[i].key, "http_500") == 0 && s.errors[i].count == 1) found++;
    }
    ck_assert_int_eq(found, 2);
    for (int i = 0; i < 6; i++) wf_loadgen_record_free(&r[i]);
}
END_TEST

START_TEST(test_metrics_edge_cases) {
    /* Non-streamed: TTFT = e2e, no TPOT/ITL. No classes: no goodput. */
    wf_loadgen_record r;
    mk(&r, -1, 0, NULL, 0, 500, 50);
    r.streamed = false;
    r.t_first_ns = r.t_end_ns;
    EQ(wf_loadgen_record_ttft_ms(&r), 500);
    ck_assert(isnan(wf_loadgen_record_tpot_ms(&r)));
    wf_loadgen_summary s;
    ck_assert_int_eq(wf_loadgen_summarize(&r, 1, NULL, 0, 1.0, &s), WF_OK);
    ck_assert(!s.has_slo);
    ck_assert_int_eq(s.good, 0);
    ck_assert_int_eq(s.itl.n, 0);
    ck_assert(isnan(s.itl.mean));
    ck_assert_int_eq(s.tpot.n, 0);
    EQ(s.e2e.p99, 500);
    wf_loadgen_record_free(&r);
    /* Empty and single-element percentiles. */
    double one = 7;
    ck_assert(isnan(wf_loadgen_percentile(NULL, 0, 50)));
    EQ(wf_loadgen_percentile(&one, 1, 99), 7);
    /* Timeout, transport, cancel and stream errors have their own keys. */
    wf_loadgen_record f[4];
    memset(f, 0, sizeof f);
    f[0].outcome = WF_LOADGEN_TIMEOUT;
    f[1].outcome = WF_LOADGEN_TRANSPORT;
    f[2].outcome = WF_LOADGEN_CANCELLED;
    f[3].outcome = WF_LOADGEN_STREAM_ERROR;
    for (int i = 0; i < 4; i++) f[i].slo_class = -1;
    ck_assert_int_eq(wf_loadgen_summarize(f, 4, NULL, 0, 1.0, &s), WF_OK);
    ck_assert_int_eq(s.failed, 4);
    ck_assert_int_eq(s.n_errors, 4);
    ck_assert_str_eq(s.errors[0].key, "timeout");
    ck_assert_str_eq(s.errors[3].key, "stream_error");
    ck_assert_int_eq(s.request_throughput, 0);
}
END_TEST

/* ---- SSE ------------------------------------------------------------------------------------ */

typedef struct sse_log {
    char buf[1024];
    int n;
} sse_log;

static void log_event(void *ud, const char *event, const char *data, size_t len) {
    sse_log *l = ud;
    size_t used = strlen(l->buf);
    snprintf(l->buf + used, sizeof l->buf - used, "[%s|%.*s]", event ? event : "-", (int)len, data);
    l->n++;
}

START_TEST(test_sse_framing) {
    const char *in = ": comment\r\ndata: {\"a\":1}\r\n\r\ndata:x\ndata: y\n\nevent: error\ndata: "
                     "bad\n\nid: 3\n\ndata: [DONE]\r\rdata: trailing-no-blank";
    /* Every split point gives the same events. */
    for (size_t split = 0; split <= strlen(in); split++) {
        wf_loadgen_sse sse;
        sse_log l = {{0}, 0};
        wf_loadgen_sse_init(&sse, log_event, &l);
        ck_assert_int_eq(wf_loadgen_sse_feed(&sse, in, split), WF_OK);
        ck_assert_int_eq(wf_loadgen_sse_feed(&sse, in + split, strlen(in) - split), WF_OK);
        ck_assert_int_eq(l.n, 4);
        ck_assert_str_eq(l.buf, "[-|{\"a\":1}][-|x\ny][error|bad][-|[DONE]]");
        wf_loadgen_sse_free(&sse);
    }
    /* Byte by byte. */
    wf_loadgen_sse sse;
    sse_log l = {{0}, 0};
    wf_loadgen_sse_init(&sse, log_event, &l);
    for (size_t i = 0; i < strlen(in); i++) wf_loadgen_sse_feed(&sse, in + i, 1);
    ck_assert_int_eq(l.n, 4);
    wf_loadgen_sse_reset(&sse);
    wf_loadgen_sse_feed(&sse, "\n", 1);
    ck_assert_int_eq(l.n, 4); /* the trailing partial event was dropped by reset */
    wf_loadgen_sse_free(&sse);
}
END_TEST

/* ---- datasets --------------------------------------------------------------------------------- */

START_TEST(test_len_specs) {
    char err[256];
    wf_loadgen_len_spec s;
    ck_assert_int_eq(wf_loadgen_len_spec_parse("128", &s, err, sizeof err), WF_OK);
    ck_assert_int_eq(s.kind, WF_LOADGEN_LEN_FIXED);
    ck_assert_int_eq(s.lo, 128);
    ck_assert_int_eq(wf_loadgen_len_spec_parse("8:16", &s, err, sizeof err), WF_OK);
    ck_assert_int_eq(s.kind, WF_LOADGEN_LEN_UNIFORM);
    wf_workload_rng rng;
    wf_workload_rng_seed(&rng, 1);
    for (int i = 0; i < 1000; i++) {
        int32_t v = wf_loadgen_len_spec_sample(&s, &rng);
        ck_assert(v >= 8 && v <= 16);
    }
    const char *bad[] = {"", "0", "-3", "16:8", "12x", "1:2:3", "2000000", "abc"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_int_eq(wf_loadgen_len_spec_parse(bad[i], &s, err, sizeof err), WF_EINVAL);
        ck_assert(strlen(err) > 0);
    }
}
END_TEST

START_TEST(test_histogram_file) {
    char err[256];
    wf_loadgen_len_spec s;
    ck_assert_int_eq(wf_loadgen_len_spec_parse("@" DATA "lengths.hist", &s, err, sizeof err), WF_OK);
    ck_assert_int_eq(s.kind, WF_LOADGEN_LEN_HIST);
    ck_assert_int_eq(s.n_bins, 3);
    EQ(s.cum[2], 4);
    EQ(wf_loadgen_len_spec_mean(&s), (16 * 1 + 47.5 * 2 + 128 * 1) / 4.0);
    wf_workload_rng rng;
    wf_workload_rng_seed(&rng, 3);
    int n16 = 0, nb = 0, n128 = 0;
    for (int i = 0; i < 20000; i++) {
        int32_t v = wf_loadgen_len_spec_sample(&s, &rng);
        if (v == 16) n16++;
        else if (v >= 32 && v <= 63) nb++;
        else if (v == 128) n128++;
        else ck_abort_msg("sample %d outside every bin", v);
    }
    ck_assert_msg(abs(n16 - 5000) < 300 && abs(nb - 10000) < 400 && abs(n128 - 5000) < 300,
                  "%d %d %d", n16, nb, n128);
    wf_loadgen_len_spec_free(&s);
    ck_assert_int_eq(wf_loadgen_len_spec_parse("@" DATA "bad.hist", &s, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, "bad.hist:2") != NULL, "%s", err);
    ck_assert_int_eq(wf_loadgen_len_spec_parse("@" DATA "missing.hist", &s, err, sizeof err),
                     WF_ENOTFOUND);
    ck_assert_msg(strstr(err, "missing.hist") != NULL, "%s", err);
}
END_TEST

static wf_loadgen_dataset_opts base_opts(wf_loadgen_data_kind kind, const char *path, size_t n) {
    wf_loadgen_dataset_opts o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.path = path;
    o.n_requests = n;
    o.seed = 42;
    char err[64];
    wf_loadgen_len_spec_parse("20", &o.input_len, err, sizeof err);
    wf_loadgen_len_spec_parse("7", &o.output_len, err, sizeof err);
    return o;
}

START_TEST(test_sharegpt) {
    char err[256];
    wf_loadgen_dataset_opts o = base_opts(WF_LOADGEN_DATA_SHAREGPT, DATA "sharegpt_sample.json", 7);
    wf_loadgen_dataset ds;
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_OK);
    ck_assert_int_eq(ds.n, 7);
    ck_assert_int_eq(ds.n_source, 3); /* gpt-first, single-turn and too-short entries skipped */
    int saw_sky = 0;
    for (size_t i = 0; i < ds.n; i++) {
        ck_assert(ds.items[i].text && *ds.items[i].text);
        ck_assert_int_eq(ds.items[i].input_tokens, wf_loadgen_estimate_tokens(ds.items[i].text));
        ck_assert_int_ge(ds.items[i].output_tokens, 4); /* the reply's estimated length */
        ck_assert_int_eq(ds.items[i].slo_class, -1);
        if (strstr(ds.items[i].text, "sky")) saw_sky = 1;
        /* cyclic reuse of the shuffled source */
        if (i >= 3) ck_assert_str_eq(ds.items[i].text, ds.items[i - 3].text);
    }
    ck_assert(saw_sky);
    wf_loadgen_dataset_free(&ds);
    o.set_output = 1; /* --output-len given: it wins over the reply length */
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_OK);
    for (size_t i = 0; i < ds.n; i++) ck_assert_int_eq(ds.items[i].output_tokens, 7);
    wf_loadgen_dataset_free(&ds);

    o.path = DATA "bad_sharegpt.json";
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, "bad_sharegpt.json:") != NULL, "%s", err);
    o.path = DATA "bad_sharegpt_shape.json";
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, "array") != NULL, "%s", err);
    o.path = DATA "prompts.txt"; /* not JSON at all */
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_EFORMAT);
    o.path = DATA "nope.json";
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_ENOTFOUND);
    wf_loadgen_len_spec_free(&o.input_len);
    wf_loadgen_len_spec_free(&o.output_len);
}
END_TEST

START_TEST(test_prompt_list) {
    char err[256];
    wf_loadgen_dataset_opts o = base_opts(WF_LOADGEN_DATA_PROMPTS, DATA "prompts.txt", 3);
    wf_loadgen_dataset ds;
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_OK);
    ck_assert_int_eq(ds.n_source, 3); /* the blank line is skipped */
    int newline = 0, paris = 0;
    for (size_t i = 0; i < 3; i++) {
        if (strchr(ds.items[i].text, '\n')) newline = 1;
        if (strstr(ds.items[i].text, "France")) paris = 1;
        ck_assert_int_eq(ds.items[i].output_tokens, 7);
    }
    ck_assert(newline && paris);
    wf_loadgen_dataset_free(&ds);
    o.path = DATA "bad.hist"; /* any text file is a prompt list... */
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_OK);
    wf_loadgen_dataset_free(&ds);
    /* ...but an empty one or a bad JSON-string line is an error. */
    char tmp[] = "/tmp/weft_prompts_XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("\n\n", f);
    fclose(f);
    o.path = tmp;
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_EFORMAT);
    f = fopen(tmp, "w");
    fputs("ok line\n\"unterminated\n", f);
    fclose(f);
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, ":2:") != NULL, "%s", err);
    f = fopen(tmp, "w");
    fputs("fine\nbad \xff\xfe byte\n", f);
    fclose(f);
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, ":2: not valid UTF-8") != NULL, "%s", err);
    unlink(tmp);
    wf_loadgen_len_spec_free(&o.input_len);
    wf_loadgen_len_spec_free(&o.output_len);
}
END_TEST

START_TEST(test_synthetic_and_classes) {
    char err[256];
    wf_loadgen_slo_class cls[2] = {{"a", 100, 10, 1}, {"b", 1000, 100, 3}};
    wf_loadgen_dataset_opts o = base_opts(WF_LOADGEN_DATA_SYNTHETIC, NULL, 4000);
    wf_loadgen_len_spec_free(&o.input_len);
    wf_loadgen_len_spec_parse("5:50", &o.input_len, err, sizeof err);
    o.classes = cls;
    o.n_classes = 2;
    wf_loadgen_dataset ds, ds2;
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds2, err, sizeof err), WF_OK);
    int nb = 0;
    for (size_t i = 0; i < ds.n; i++) {
        const wf_loadgen_prompt *p = &ds.items[i];
        ck_assert_ptr_null(p->text); /* rendered when sent */
        char *text = wf_loadgen_prompt_text(p), *text2 = wf_loadgen_prompt_text(&ds2.items[i]);
        int words = 1;
        for (const char *c = text; *c; c++) words += *c == ' ';
        ck_assert_int_eq(words, p->input_tokens); /* one word per requested token */
        ck_assert(p->input_tokens >= 5 && p->input_tokens <= 50);
        ck_assert_int_eq(p->output_tokens, 7);
        nb += p->slo_class == 1;
        /* --seed makes the sequence reproducible */
        ck_assert_str_eq(text, text2);
        ck_assert_int_eq(p->slo_class, ds2.items[i].slo_class);
        free(text);
        free(text2);
    }
    ck_assert_msg(abs(nb - 3000) < 120, "class b drawn %d of 4000 times, want ~3000", nb);
    wf_loadgen_dataset_free(&ds2);
    o.seed = 43;
    ck_assert_int_eq(wf_loadgen_dataset_build(&o, &ds2, err, sizeof err), WF_OK);
    char *t1 = wf_loadgen_prompt_text(&ds.items[0]), *t2 = wf_loadgen_prompt_text(&ds2.items[0]);
    ck_assert_str_ne(t1, t2);
    free(t1);
    free(t2);
    wf_loadgen_dataset_free(&ds2);
    wf_loadgen_dataset_free(&ds);
    wf_loadgen_len_spec_free(&o.input_len);
    wf_loadgen_len_spec_free(&o.output_len);
}
END_TEST

/* ---- request bodies ----------------------------------------------------------------------------- */

START_TEST(test_request_body) {
    wf_loadgen_slo_class cls[1] = {{"gold", 250, 40, 1}};
    wf_loadgen_run_opts o;
    wf_loadgen_run_opts_default(&o);
    o.model = "m";
    o.classes = cls;
    o.n_classes = 1;
    o.extra_body = "{\"top_k\": 5}";
    wf_loadgen_prompt p = {.text = "hello there", .input_tokens = 2, .output_tokens = 33,
                           .slo_class = 0};
    char *s = wf_loadgen_build_body(&o, &p);
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    ck_assert(json_is_object(j));
    ck_assert_str_eq(json_string_value(json_object_get(j, "prompt")), "hello there");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "max_tokens")), 33);
    ck_assert(json_is_true(json_object_get(j, "stream")));
    ck_assert(json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage")));
    ck_assert(json_is_true(json_object_get(j, "ignore_eos")));
    json_t *slo = json_object_get(j, "slo");
    EQ(json_number_value(json_object_get(slo, "ttft_ms")), 250);
    EQ(json_number_value(json_object_get(slo, "tpot_ms")), 40);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "top_k")), 5);
    json_decref(j);
    /* chat shape, no SLO extension, no stream */
    o.chat = true;
    o.slo_ext = false;
    o.stream = false;
    o.ignore_eos = false;
    s = wf_loadgen_build_body(&o, &p);
    j = json_loads(s, 0, NULL);
    free(s);
    json_t *m = json_array_get(json_object_get(j, "messages"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(m, "role")), "user");
    ck_assert_str_eq(json_string_value(json_object_get(m, "content")), "hello there");
    ck_assert_ptr_null(json_object_get(j, "slo"));
    ck_assert_ptr_null(json_object_get(j, "stream_options"));
    ck_assert_ptr_null(json_object_get(j, "ignore_eos"));
    ck_assert_ptr_null(json_object_get(j, "prompt"));
    json_decref(j);
}
END_TEST

static Suite *loadgen_suite(void) {
    Suite *s = suite_create("loadgen");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_poisson_gaps);
    tcase_add_test(tc, test_gamma_burstiness);
    tcase_add_test(tc, test_arrival_deterministic_and_inf);
    tcase_add_test(tc, test_metrics_arithmetic);
    tcase_add_test(tc, test_metrics_edge_cases);
    tcase_add_test(tc, test_sse_framing);
    tcase_add_test(tc, test_len_specs);
    tcase_add_test(tc, test_histogram_file);
    tcase_add_test(tc, test_sharegpt);
    tcase_add_test(tc, test_prompt_list);
    tcase_add_test(tc, test_synthetic_and_classes);
    tcase_add_test(tc, test_request_body);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(loadgen_suite)
