/* Virtual-model declarations: the --vmodel grammar, its JSON form, errors naming the key, the
 * prefix-cache salt (equal for equal adapter lists only), and default sampling parameters
 * (checked as a request's; a request's own values win). */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "server/vmodels.h"

START_TEST(test_parse_flag) {
    wf_vmodel_spec v;
    char err[256];
    ck_assert_int_eq(wf_vmodel_spec_parse("id=sql,adapter=/a/x.gguf:0.5,adapter=/b/peft,weight=2,"
                                          "system=Be terse, use SQL.", &v, err, sizeof err),
                     WF_OK);
    ck_assert_str_eq(v.id, "sql");
    ck_assert_int_eq(v.n_adapters, 2);
    ck_assert_str_eq(v.paths[0], "/a/x.gguf");
    ck_assert(v.scales[0] == 0.5f);
    ck_assert_str_eq(v.paths[1], "/b/peft");
    ck_assert(v.scales[1] == 1.0f);
    ck_assert(v.weight == 2.0);
    ck_assert_str_eq(v.system, "Be terse, use SQL.");
    wf_vmodel_spec_free(&v);
    /* a colon that is not followed by a number belongs to the path */
    ck_assert_int_eq(wf_vmodel_spec_parse("id=a,adapter=/x:y/z,ttft_ms=250,tpot_ms=40", &v, err,
                                          sizeof err), WF_OK);
    ck_assert_str_eq(v.paths[0], "/x:y/z");
    ck_assert(v.ttft_ms == 250 && v.tpot_ms == 40);
    ck_assert_int_eq(v.max_running + v.max_queued + v.max_in_flight, 0);
    wf_vmodel_spec_free(&v);
    ck_assert_int_eq(wf_vmodel_spec_parse("id=a,adapter=/x,max_running=2,max_queued=5,"
                                          "max_in_flight=9", &v, err, sizeof err), WF_OK);
    ck_assert_int_eq(v.max_running, 2);
    ck_assert_int_eq(v.max_queued, 5);
    ck_assert_int_eq(v.max_in_flight, 9);
    wf_vmodel_spec_free(&v);
    json_t *o = json_loads("{\"id\":\"a\",\"adapter\":\"/x\",\"max_running\":3,"
                           "\"max_queued\":4}", 0, NULL);
    ck_assert_int_eq(wf_vmodel_spec_from_json(o, &v, err, sizeof err), WF_OK);
    json_decref(o);
    ck_assert_int_eq(v.max_running, 3);
    ck_assert_int_eq(v.max_queued, 4);
    wf_vmodel_spec_free(&v);
    o = json_loads("{\"id\":\"a\",\"adapter\":\"/x\",\"max_queued\":-1}", 0, NULL);
    ck_assert_int_eq(wf_vmodel_spec_from_json(o, &v, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "'max_queued'"), "%s", err);
    json_decref(o);
}
END_TEST

START_TEST(test_parse_errors) {
    wf_vmodel_spec v;
    char err[256];
    const struct { const char *text, *want; } bad[] = {
        {"adapter=/x", "'id' is required"},
        {"id=a", "at least one 'adapter'"},
        {"id=a,adapter=/x,weight=0", "'weight'"},
        {"id=a,adapter=/x,weight=abc", "'weight'"},
        {"id=a,adaptor=/x", "unknown key 'adaptor'"},
        {"id=a,adapter=/x,max_in_flight=1.5", "'max_in_flight'"},
        /* found by tests/fuzz/fuzz_vmodel.c: NaN reached an (int) cast (undefined) */
        {"id=a,adapter=/x,max_in_flight=nan", "'max_in_flight'"},
        {"id=a,adapter=/x,max_in_flight=-nan", "'max_in_flight'"},
        {"id=a,adapter=/x,max_running=-1", "'max_running'"},
        {"id=a,adapter=/x,max_queued=x", "'max_queued'"},
        {"id=a,adapter=/x,ttft_ms=0", "'ttft_ms'"},
        {"id=a,adapter=/x,tpot_ms=x", "'tpot_ms'"},
        {"id=a b,adapter=/x", "'id'"},
        {"id=a,adapter=", "path is empty"},
        {"id=a,adapter", "not key=value"},
        {"id=a,adapter=/1,adapter=/2,adapter=/3,adapter=/4,adapter=/5,adapter=/6,adapter=/7,"
         "adapter=/8,adapter=/9", "more than 8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(wf_vmodel_spec_parse(bad[i].text, &v, err, sizeof err), WF_EINVAL);
        ck_assert_msg(strstr(err, bad[i].want), "%s -> %s", bad[i].text, err);
    }
}
END_TEST

START_TEST(test_json_and_salt) {
    wf_vmodel_spec a, b, c;
    char err[256];
    json_t *o = json_loads("{\"id\":\"a\",\"adapters\":[{\"path\":\"/x.gguf\",\"scale\":0.5}],"
                           "\"weight\":3,\"system\":\"hi\"}", 0, NULL);
    ck_assert_int_eq(wf_vmodel_spec_from_json(o, &a, err, sizeof err), WF_OK);
    json_decref(o);
    ck_assert(a.weight == 3.0 && a.scales[0] == 0.5f);
    ck_assert_int_eq(wf_vmodel_spec_parse("id=b,adapter=/x.gguf:0.5", &b, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_vmodel_spec_parse("id=c,adapter=/x.gguf:0.6", &c, err, sizeof err), WF_OK);
    /* same adapters and scales: one prefix-cache namespace; another scale: another */
    ck_assert_uint_eq(wf_vmodel_spec_salt(&a), wf_vmodel_spec_salt(&b));
    ck_assert_uint_ne(wf_vmodel_spec_salt(&a), wf_vmodel_spec_salt(&c));
    ck_assert_uint_ne(wf_vmodel_spec_salt(&a), 0);
    wf_vmodel_spec_free(&a);
    wf_vmodel_spec_free(&b);
    wf_vmodel_spec_free(&c);
    o = json_loads("{\"id\":\"a\",\"adapter\":\"/x\",\"wieght\":1}", 0, NULL);
    ck_assert_int_eq(wf_vmodel_spec_from_json(o, &a, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "wieght"), "%s", err);
    json_decref(o);
    o = json_loads("{\"id\":\"a\",\"adapters\":[{\"scale\":1}]}", 0, NULL);
    ck_assert_int_eq(wf_vmodel_spec_from_json(o, &a, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "adapters[0]"), "%s", err);
    json_decref(o);
}
END_TEST

/* Found by tests/fuzz/fuzz_vmodel.c: a NUL inside a JSON string cut the path (or the system
 * prompt) there, so another file than the one named would have been loaded. */
START_TEST(test_json_nul_refused) {
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"id\":\"a\",\"adapter\":\"/x\\u0000.gguf\"}", "'adapter' path contains a NUL"},
        {"{\"id\":\"a\",\"adapters\":[{\"path\":\"/x\\u0000y\"}]}", "contains a NUL"},
        {"{\"id\":\"a\",\"adapter\":\"/x\",\"system\":\"hi\\u0000there\"}",
         "'system' must be a string without NUL"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wf_vmodel_spec v;
        char err[256] = "";
        json_t *o = json_loads(bad[i].json, JSON_ALLOW_NUL, NULL);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(wf_vmodel_spec_from_json(o, &v, err, sizeof err), WF_EINVAL);
        ck_assert_msg(strstr(err, bad[i].want), "case %zu: '%s' lacks '%s'", i, err, bad[i].want);
        ck_assert_int_eq(v.n_adapters, 0);
        json_decref(o);
    }
}
END_TEST

/* The JSON form sent to worker processes reads back into the same spec (and the same number:
 * the workers bind what the coordinator's tasks carry). */
START_TEST(test_to_json_round_trip) {
    wf_vmodel_spec v, w;
    char err[256];
    ck_assert_msg(wf_vmodel_spec_parse("id=sql,adapter=/a/x.gguf:0.7,adapter=/b/y:0.5,weight=2,"
                                       "max_running=3,max_queued=4,max_in_flight=9,ttft_ms=1500,"
                                       "temperature=0.25,stop=END,system=Answer, in SQL.",
                                       &v, err, sizeof err) == WF_OK, "%s", err);
    char *text = wf_vmodel_spec_to_json(&v);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(wf_vmodel_spec_from_text(text, &w, err, sizeof err) == WF_OK, "%s: %s", text,
                  err);
    ck_assert_str_eq(w.id, "sql");
    ck_assert_int_eq(w.n_adapters, 2);
    ck_assert_str_eq(w.paths[1], "/b/y");
    ck_assert(w.scales[0] == v.scales[0] && w.scales[1] == v.scales[1]);
    ck_assert(w.weight == 2.0 && w.ttft_ms == 1500.0 && w.tpot_ms == 0);
    ck_assert_int_eq(w.max_running, 3);
    ck_assert_int_eq(w.max_queued, 4);
    ck_assert_int_eq(w.max_in_flight, 9);
    ck_assert_str_eq(w.system, "Answer, in SQL.");
    ck_assert(json_equal(w.defaults, v.defaults));
    ck_assert_uint_eq(wf_vmodel_spec_num(&w), wf_vmodel_spec_num(&v));
    ck_assert_uint_eq(wf_vmodel_spec_salt(&w), wf_vmodel_spec_salt(&v));
    free(text);
    wf_vmodel_spec_free(&v);
    wf_vmodel_spec_free(&w);
}
END_TEST

START_TEST(test_defaults) {
    wf_vmodel_spec v, w;
    char err[512];
    ck_assert_int_eq(wf_vmodel_spec_parse("id=d,adapter=/x,temperature=0.3,top_k=5,max_tokens=7,"
                                          "stop=END,stop=;;,seed=42", &v, err, sizeof err), WF_OK);
    json_t *d = v.defaults;
    ck_assert_ptr_nonnull(d);
    ck_assert(json_real_value(json_object_get(d, "temperature")) == 0.3);
    ck_assert_int_eq(json_integer_value(json_object_get(d, "top_k")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(d, "max_tokens")), 7);
    ck_assert_int_eq(json_integer_value(json_object_get(d, "seed")), 42);
    ck_assert_int_eq(json_array_size(json_object_get(d, "stop")), 2);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(d, "stop"), 1)), ";;");
    /* the request's own values win; absent or null fields take the defaults */
    const char *body = "{\"prompt\":\"hi\",\"temperature\":1.5,\"top_k\":null}";
    char *out;
    size_t n;
    ck_assert_int_eq(wf_vmodel_spec_apply_defaults(&v, body, strlen(body), &out, &n), WF_OK);
    ck_assert_ptr_nonnull(out);
    json_t *m = json_loadb(out, n, 0, NULL);
    ck_assert(json_real_value(json_object_get(m, "temperature")) == 1.5);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "top_k")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "max_tokens")), 7);
    ck_assert_int_eq(json_array_size(json_object_get(m, "stop")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(m, "prompt")), "hi");
    json_decref(m);
    free(out);
    /* max_completion_tokens is the request's max_tokens */
    body = "{\"messages\":[],\"max_completion_tokens\":3,\"temperature\":0,\"top_k\":1,"
           "\"stop\":[],\"seed\":1}";
    ck_assert_int_eq(wf_vmodel_spec_apply_defaults(&v, body, strlen(body), &out, &n), WF_OK);
    ck_assert_ptr_null(out); /* everything set: nothing added */
    /* not an object: left to the decoder's error */
    ck_assert_int_eq(wf_vmodel_spec_apply_defaults(&v, "[1]", 3, &out, &n), WF_OK);
    ck_assert_ptr_null(out);
    /* a deep copy keeps them */
    ck_assert_int_eq(wf_vmodel_spec_copy(&w, &v), WF_OK);
    wf_vmodel_spec_free(&v);
    ck_assert_int_eq(json_integer_value(json_object_get(w.defaults, "top_k")), 5);
    wf_vmodel_spec_free(&w);

    /* JSON form, and the API's range checks applied to the defaults */
    json_t *o = json_loads("{\"id\":\"j\",\"adapter\":\"/x\",\"defaults\":{\"top_p\":0.9,"
                           "\"stop\":[\"a,b\"],\"frequency_penalty\":0.5}}", 0, NULL);
    ck_assert_int_eq(wf_vmodel_spec_from_json(o, &v, err, sizeof err), WF_OK);
    json_decref(o);
    ck_assert(json_real_value(json_object_get(v.defaults, "top_p")) == 0.9);
    wf_vmodel_spec_free(&v);
    const struct { const char *text, *want; } bad[] = {
        {"{\"id\":\"j\",\"adapter\":\"/x\",\"defaults\":{\"temperature\":3}}", "temperature"},
        {"{\"id\":\"j\",\"adapter\":\"/x\",\"defaults\":{\"top_p\":\"x\"}}", "top_p"},
        {"{\"id\":\"j\",\"adapter\":\"/x\",\"defaults\":{\"n\":2}}", "'defaults.n'"},
        {"{\"id\":\"j\",\"adapter\":\"/x\",\"defaults\":[1]}", "'defaults' must be"},
        {"{\"id\":\"j\",\"adapter\":\"/x\",\"defaults\":{\"stop\":[1]}}", "stop"},
        {"{\"id\":\"j\",\"adapter\":\"/x\",\"defaults\":{\"max_tokens\":0}}", "max_tokens"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o = json_loads(bad[i].text, 0, NULL);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(wf_vmodel_spec_from_json(o, &v, err, sizeof err), WF_EINVAL);
        ck_assert_msg(strstr(err, bad[i].want), "%s -> %s", bad[i].text, err);
        json_decref(o);
    }
    ck_assert_int_eq(wf_vmodel_spec_parse("id=a,adapter=/x,top_k=1.5", &v, err, sizeof err),
                     WF_EINVAL);
    ck_assert_msg(strstr(err, "'top_k' must be an integer"), "%s", err);
    /* strtod's nan, inf and huge values: a clear error naming the key (not "out of memory",
     * and no out-of-range cast) */
    const struct { const char *text, *want; } bad_text[] = {
        {"id=a,adapter=/x,temperature=nan", "'temperature' must be a finite number"},
        {"id=a,adapter=/x,top_p=inf", "'top_p' must be a finite number"},
        {"id=a,adapter=/x,seed=1e300", "'seed' must be an integer"},
        {"id=a,adapter=/x,max_tokens=-inf", "'max_tokens' must be an integer"},
        {"id=a,adapter=/x,top_k=nan", "'top_k' must be an integer"},
    };
    for (size_t i = 0; i < sizeof bad_text / sizeof bad_text[0]; i++) {
        ck_assert_int_eq(wf_vmodel_spec_parse(bad_text[i].text, &v, err, sizeof err), WF_EINVAL);
        ck_assert_msg(strstr(err, bad_text[i].want), "%s -> %s", bad_text[i].text, err);
    }
    ck_assert_int_eq(wf_vmodel_spec_parse("id=a,adapter=/x,min_p=2", &v, err, sizeof err),
                     WF_EINVAL);
    ck_assert_msg(strstr(err, "vmodel 'a': default") && strstr(err, "min_p"), "%s", err);
}
END_TEST

static Suite *vmodels_suite(void) {
    Suite *s = suite_create("server_vmodels");
    TCase *tc = tcase_create("spec");
    tcase_add_test(tc, test_parse_flag);
    tcase_add_test(tc, test_parse_errors);
    tcase_add_test(tc, test_json_and_salt);
    tcase_add_test(tc, test_json_nul_refused);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_to_json_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(vmodels_suite)
