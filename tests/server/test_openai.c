/* server/openai.c (JSON decoding of every parameter and error, the JSON writer and response
 * pieces), server/stop.c (stop strings across token boundaries) and server/metrics.c (the
 * Prometheus text format). */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/stop.h"

static wf_openai_request R;
static wf_openai_error E;

static wf_status chat(const char *body) { return wf_openai_decode(WF_OPENAI_CHAT, body, strlen(body), &R, &E); }
static wf_status cmpl(const char *body) {
    return wf_openai_decode(WF_OPENAI_COMPLETION, body, strlen(body), &R, &E);
}

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

START_TEST(chat_every_parameter) {
    const char *body = "{\"model\":\"m\"," MSGS ",\"max_tokens\":10,\"max_completion_tokens\":12,"
                       "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.1,"
                       "\"presence_penalty\":0.25,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.2,"
                       "\"seed\":-3,\"n\":2,\"stop\":[\"x\",\"yy\"],\"logit_bias\":{\"5\":-100,\"7\":2.5},"
                       "\"logprobs\":true,\"top_logprobs\":4,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"user\":\"u\",\"ignore_eos\":true,"
                       "\"min_tokens\":3,\"priority\":-2,\"slo\":{\"ttft_ms\":250,\"tpot_ms\":40.5},"
                       "\"tools\":[],\"response_format\":{\"type\":\"text\"},\"unknown_extra\":1}";
    ck_assert_int_eq(chat(body), WF_OK);
    const wf_request_spec *s = &R.spec;
    ck_assert_str_eq(R.model, "m");
    ck_assert_int_eq(R.n_messages, 1);
    ck_assert_str_eq(R.messages[0].role, "user");
    ck_assert_str_eq(R.messages[0].content, "hi");
    ck_assert_int_eq(s->max_tokens, 12); /* max_completion_tokens wins */
    ck_assert(R.max_tokens_set);
    ck_assert(s->sampling.temperature == 0.5f && s->sampling.top_p == 0.9f);
    ck_assert_int_eq(s->sampling.top_k, 40);
    ck_assert(s->sampling.min_p == 0.1f);
    ck_assert(s->sampling.presence_penalty == 0.25f && s->sampling.frequency_penalty == -0.5f);
    ck_assert(s->sampling.repetition_penalty == 1.2f);
    ck_assert(s->sampling.has_seed && s->sampling.seed == (uint64_t)-3);
    ck_assert_int_eq(s->n, 2);
    ck_assert_int_eq(R.n_stop, 2);
    ck_assert_str_eq(R.stop[1], "yy");
    ck_assert_int_eq(s->sampling.n_logit_bias, 2);
    ck_assert(s->sampling.logit_bias[0].token == 5 && s->sampling.logit_bias[0].bias == -100);
    ck_assert(s->sampling.logit_bias[1].token == 7 && s->sampling.logit_bias[1].bias == 2.5f);
    ck_assert(s->sampling.logprobs);
    ck_assert_int_eq(s->sampling.top_logprobs, 4);
    ck_assert(R.stream && R.include_usage);
    ck_assert_str_eq(R.user, "u");
    ck_assert(s->ignore_eos);
    ck_assert_int_eq(s->min_tokens, 3);
    ck_assert_int_eq(s->priority, -2);
    ck_assert(s->slo.ttft_ms == 250 && s->slo.tpot_ms == 40.5);
    wf_openai_request_free(&R);
}
END_TEST

START_TEST(defaults_and_content_parts) {
    ck_assert_int_eq(chat("{\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                          "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null},"
                          "{\"role\":\"user\",\"content\":\"q\"}]}"), WF_OK);
    ck_assert_str_eq(R.messages[0].role, "system");
    ck_assert_str_eq(R.messages[0].content, "ab");
    ck_assert_str_eq(R.messages[1].content, "");
    ck_assert_ptr_null(R.model);
    ck_assert(!R.max_tokens_set && !R.stream);
    ck_assert(R.spec.sampling.temperature == 1.0f && R.spec.sampling.top_p == 1.0f);
    ck_assert_int_eq(R.spec.n, 1);
    ck_assert_int_eq(R.n_stop, 0);
    wf_openai_request_free(&R);
    /* integers written as 16.0 are integers; -1 top_k means off; a single stop string */
    ck_assert_int_eq(cmpl("{\"prompt\":\"p\",\"max_tokens\":16.0,\"top_k\":-1,\"stop\":\"END\",\"logprobs\":0}"), WF_OK);
    ck_assert_int_eq(R.spec.max_tokens, 16);
    ck_assert_int_eq(R.spec.sampling.top_k, 0);
    ck_assert_int_eq(R.n_stop, 1);
    ck_assert(R.spec.sampling.logprobs);
    ck_assert_int_eq(R.spec.sampling.top_logprobs, 0);
    wf_openai_request_free(&R);
}
END_TEST

START_TEST(prompt_forms) {
    ck_assert_int_eq(cmpl("{\"prompt\":\"one\"}"), WF_OK);
    ck_assert_int_eq(R.n_prompts, 1);
    ck_assert_str_eq(R.prompts[0].text, "one");
    wf_openai_request_free(&R);
    ck_assert_int_eq(cmpl("{\"prompt\":[\"a\",\"b\",\"c\"]}"), WF_OK);
    ck_assert_int_eq(R.n_prompts, 3);
    ck_assert_str_eq(R.prompts[2].text, "c");
    wf_openai_request_free(&R);
    ck_assert_int_eq(cmpl("{\"prompt\":[1,2,3]}"), WF_OK);
    ck_assert_int_eq(R.n_prompts, 1);
    ck_assert_int_eq(R.prompts[0].n_tokens, 3);
    ck_assert_int_eq(R.prompts[0].tokens[2], 3);
    wf_openai_request_free(&R);
    ck_assert_int_eq(cmpl("{\"prompt\":[[1,2],[3]]}"), WF_OK);
    ck_assert_int_eq(R.n_prompts, 2);
    ck_assert_int_eq(R.prompts[1].tokens[0], 3);
    ck_assert_ptr_null(R.prompts[1].text);
    wf_openai_request_free(&R);
}
END_TEST

typedef struct bad_case {
    wf_openai_kind kind;
    const char *body;
    const char *param;   /* expected param ("" = none) */
    const char *needle;  /* in the message */
} bad_case;

static const bad_case bad_cases[] = {
    {WF_OPENAI_CHAT, "", "", "not valid JSON"},
    {WF_OPENAI_CHAT, "{\"messages\":[}", "", "not valid JSON"},
    {WF_OPENAI_CHAT, "\"str\"", "", "JSON object"},
    {WF_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", "", "not valid JSON"},
    {WF_OPENAI_CHAT, "{\"a\":1,\"a\":2," MSGS "}", "", "duplicate"},
    {WF_OPENAI_CHAT, "{}", "messages", "required"},
    {WF_OPENAI_CHAT, "{\"messages\":[]}", "messages", "empty"},
    {WF_OPENAI_CHAT, "{\"messages\":[1]}", "messages[0]", "object"},
    {WF_OPENAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role", "string"},
    {WF_OPENAI_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "messages[0].role", "robot"},
    {WF_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "required"},
    {WF_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content", "string"},
    {WF_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages[0].content", "not supported"},
    {WF_OPENAI_CHAT, "{\"model\":5," MSGS "}", "model", "string"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"max_tokens\":0}", "max_tokens", "between"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"max_tokens\":-1}", "max_tokens", "-1"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"max_tokens\":1e300}", "max_tokens", "integer"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"max_tokens\":99999999999999999999}", "", "too big integer"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"max_tokens\":\"10\"}", "max_tokens", "integer"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"max_tokens\":1.5}", "max_tokens", "integer"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"max_completion_tokens\":0}", "max_completion_tokens", "between"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"temperature\":2.5}", "temperature", "between 0 and 2"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"temperature\":true}", "temperature", "number"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"top_p\":0}", "top_p", "(0, 1]"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"top_p\":1.5}", "top_p", "between"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"top_k\":-2}", "top_k", "between"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"min_p\":2}", "min_p", "between"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"presence_penalty\":3}", "presence_penalty", "between"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"frequency_penalty\":-3}", "frequency_penalty", "between"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"repetition_penalty\":0}", "repetition_penalty", "(0, 10]"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"seed\":\"x\"}", "seed", "integer"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"n\":0}", "n", "between 1 and 128"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"n\":1000}", "n", "between 1 and 128"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"stop\":5}", "stop", "string"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"stop\":[\"a\",1]}", "stop", "stop[1]"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", "at most 4"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"logit_bias\":[1]}", "logit_bias", "object"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"logit_bias\":{\"abc\":1}}", "logit_bias", "not a token id"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"logit_bias\":{\"5\":500}}", "logit_bias", "between -100 and 100"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"logit_bias\":{\"5\":\"x\"}}", "logit_bias", "number"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"logprobs\":3}", "logprobs", "true or false"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"top_logprobs\":2}", "top_logprobs", "logprobs"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs", "between 0 and 20"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"stream\":\"yes\"}", "stream", "true or false"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"stream_options\":{\"include_usage\":true}}", "stream_options", "stream"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", "stream_options.include_usage", "true or false"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"user\":1}", "user", "string"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"ignore_eos\":1}", "ignore_eos", "true or false"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"min_tokens\":-1}", "min_tokens", "between"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"min_tokens\":5,\"max_tokens\":2}", "min_tokens", "must not exceed"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"priority\":\"high\"}", "priority", "integer"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"slo\":5}", "slo", "object"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"slo\":{\"ttft_ms\":-1}}", "slo.ttft_ms", "between"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"slo\":{\"tpot_ms\":\"x\"}}", "slo.tpot_ms", "number"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"tools\":[{\"type\":\"function\"}]}", "tools", "not supported"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"functions\":[]}", "functions", "not supported"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"response_format\":{\"type\":\"json_object\"}}", "response_format", "not supported"},
    {WF_OPENAI_CHAT, "{" MSGS ",\"best_of\":3}", "best_of", "not supported"},
    {WF_OPENAI_COMPLETION, "{}", "prompt", "required"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":5}", "prompt", "string"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":[]}", "prompt", "empty"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":[1,-2]}", "prompt", "prompt[1]"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":[1,\"a\"]}", "prompt", "prompt[1]"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":[\"a\",5]}", "prompt[1]", "string or an array"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":[[]]}", "prompt[0]", "empty"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":[[1,3000000000]]}", "prompt[0]", "token id"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs", "integer"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":30}", "logprobs", "between 0 and 20"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", "echo", "not supported"},
    {WF_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix", "not supported"},
};

START_TEST(every_error_names_its_field) {
    const bad_case *c = &bad_cases[_i];
    wf_status st = wf_openai_decode(c->kind, c->body, strlen(c->body), &R, &E);
    ck_assert_msg(st == WF_EINVAL, "case %d (%s): accepted", _i, c->body);
    ck_assert_int_eq(E.status, 400);
    ck_assert_str_eq(E.type, "invalid_request_error");
    ck_assert_msg(strcmp(E.param, c->param) == 0, "case %d: param '%s', want '%s' (%s)", _i, E.param,
                  c->param, E.message);
    ck_assert_msg(strstr(E.message, c->needle) != NULL, "case %d: message '%s' lacks '%s'", _i,
                  E.message, c->needle);
    if (c->param[0]) ck_assert_msg(strstr(E.message, c->param) || strstr(E.message, "prompt"),
                                   "case %d: message '%s' does not name the field", _i, E.message);
}
END_TEST

START_TEST(jbuf_strings_and_numbers) {
    wf_jbuf b = {0};
    wf_jbuf_str(&b, "a\"b\\c\n\t\x01\x7f", 9);
    ck_assert_str_eq(b.data, "\"a\\\"b\\\\c\\n\\t\\u0001\\u007f\"");
    wf_jbuf_reset(&b);
    /* valid multi-byte UTF-8 passes; invalid bytes and a truncated tail become U+FFFD */
    wf_jbuf_str(&b, "h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xff\xc3", 12);
    ck_assert_str_eq(b.data, "\"h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\\ufffd\\ufffd\"");
    wf_jbuf_reset(&b);
    wf_jbuf_str(&b, "\xed\xa0\x80\xc0\xaf", 5); /* surrogate and overlong: invalid */
    json_error_t e;
    json_t *j = json_loads(b.data, JSON_DECODE_ANY, &e);
    ck_assert_ptr_nonnull(j);
    json_decref(j);
    wf_jbuf_reset(&b);
    wf_jbuf_num(&b, -0.25);
    wf_jbuf_raw(&b, " ", 1);
    wf_jbuf_num(&b, -INFINITY);
    ck_assert_str_eq(b.data, "-0.25 -9999");
    wf_jbuf_reset(&b);
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    wf_jbuf_printf(&b, "%s%d", big, 7);
    ck_assert_uint_eq(b.len, 1000);
    wf_jbuf_free(&b);
}
END_TEST

START_TEST(error_envelope) {
    wf_openai_error e;
    wf_openai_error_set(&e, 400, "invalid_request_error", "temperature", "bad \"value\" %d", 5);
    wf_jbuf b = {0};
    wf_openai_write_error(&b, &e);
    ck_assert_str_eq(b.data, "{\"error\":{\"message\":\"bad \\\"value\\\" 5\",\"type\":\"invalid_request_error\","
                             "\"param\":\"temperature\",\"code\":null}}");
    wf_jbuf_reset(&b);
    wf_openai_error_set(&e, 404, "invalid_request_error", NULL, "x");
    snprintf(e.code, sizeof e.code, "model_not_found");
    wf_openai_write_error(&b, &e);
    ck_assert_ptr_nonnull(strstr(b.data, "\"param\":null,\"code\":\"model_not_found\""));
    wf_jbuf_free(&b);
}
END_TEST

static int piece(void *ctx, int32_t tok, char *buf, int cap) {
    const char *texts[] = {"A", " b", "\xe2\x82", "A"};
    const char *t = texts[tok % 4];
    int n = (int)strlen(t);
    if (n > cap) return -n;
    memcpy(buf, t, (size_t)n);
    return n;
}

START_TEST(logprob_shapes) {
    wf_generated_token t[2];
    memset(t, 0, sizeof t);
    t[0].token = 1;
    t[0].logprob = -0.5f;
    t[0].n_top = 3;
    t[0].top[0] = (wf_token_logprob){1, -0.5f};
    t[0].top[1] = (wf_token_logprob){0, -1.0f};
    t[0].top[2] = (wf_token_logprob){3, -2.0f}; /* same text as token 0: skipped in completions */
    t[1].token = 2;
    t[1].logprob = -1.5f;
    wf_jbuf b = {0};
    wf_openai_write_chat_logprob(&b, &t[0], piece, NULL);
    ck_assert_str_eq(b.data, "{\"token\":\" b\",\"logprob\":-0.5,\"bytes\":[32,98],\"top_logprobs\":["
                             "{\"token\":\" b\",\"logprob\":-0.5,\"bytes\":[32,98]},"
                             "{\"token\":\"A\",\"logprob\":-1,\"bytes\":[65]},"
                             "{\"token\":\"A\",\"logprob\":-2,\"bytes\":[65]}]}");
    wf_jbuf_reset(&b);
    int off[2] = {0, 2};
    wf_openai_write_completion_logprobs(&b, t, off, 2, piece, NULL);
    ck_assert_str_eq(b.data, "{\"tokens\":[\" b\",\"\\ufffd\"],\"token_logprobs\":[-0.5,-1.5],"
                             "\"top_logprobs\":[{\" b\":-0.5,\"A\":-1},{}],\"text_offset\":[0,2]}");
    wf_jbuf_reset(&b);
    wf_openai_write_usage(&b, 3, 4, 1);
    ck_assert_str_eq(b.data, "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7,"
                             "\"prompt_tokens_details\":{\"cached_tokens\":1}}");
    wf_jbuf_free(&b);
}
END_TEST

/* Feeds pieces through the matcher; returns the concatenated output and whether it stopped. */
static bool run_stop(char **stops, int n_stops, const char *const *pieces, int n, char *out, size_t cap) {
    wf_stop s;
    wf_stop_init(&s, stops, n_stops);
    out[0] = '\0';
    bool hit = false;
    for (int i = 0; i < n && !hit; i++) {
        const char *e;
        size_t en;
        hit = wf_stop_push(&s, pieces[i], strlen(pieces[i]), &e, &en);
        strncat(out, e, en < cap - strlen(out) - 1 ? en : cap - strlen(out) - 1);
    }
    if (!hit) {
        const char *e;
        size_t en;
        wf_stop_flush(&s, &e, &en);
        strncat(out, e, en);
    }
    wf_stop_free(&s);
    return hit;
}

START_TEST(stop_strings_across_tokens) {
    char out[256];
    char *stops[] = {"</end>", "STOP", "xyz"};
    const char *p1[] = {"hello <", "/e", "nd", "> tail"};
    ck_assert(run_stop(stops, 3, p1, 4, out, sizeof out));
    ck_assert_str_eq(out, "hello ");
    const char *p2[] = {"ST", "ART ", "STO", "P!"};
    ck_assert(run_stop(stops, 3, p2, 4, out, sizeof out));
    ck_assert_str_eq(out, "START ");
    /* a partial match that fails is released, a held prefix at the end is flushed */
    const char *p3[] = {"ab </e", "x", "y", " </en"};
    ck_assert(!run_stop(stops, 3, p3, 4, out, sizeof out));
    ck_assert_str_eq(out, "ab </exy </en");
    /* the earliest match wins when two stops appear in one piece */
    const char *p4[] = {"1 xyz 2 STOP"};
    ck_assert(run_stop(stops, 3, p4, 1, out, sizeof out));
    ck_assert_str_eq(out, "1 ");
    /* the match may start at the very beginning */
    const char *p5[] = {"S", "T", "O", "P", "more"};
    ck_assert(run_stop(stops, 3, p5, 5, out, sizeof out));
    ck_assert_str_eq(out, "");
    /* no stop strings: everything passes straight through */
    const char *p6[] = {"a", "b"};
    ck_assert(!run_stop(NULL, 0, p6, 2, out, sizeof out));
    ck_assert_str_eq(out, "ab");
    /* overlapping prefixes: "aab" inside "aaab" */
    char *st2[] = {"aab"};
    const char *p7[] = {"a", "a", "a", "b", "c"};
    ck_assert(run_stop(st2, 1, p7, 5, out, sizeof out));
    ck_assert_str_eq(out, "a");
    /* multi-byte text is never split: held text is whole characters */
    char *st3[] = {"\xc3\xa9t\xc3\xa9"};
    const char *p8[] = {"caf\xc3\xa9", " \xc3\xa9t", "\xc3\xa9!"};
    ck_assert(run_stop(st3, 1, p8, 3, out, sizeof out));
    ck_assert_str_eq(out, "caf\xc3\xa9 ");
}
END_TEST

START_TEST(stop_emits_incrementally) {
    char *stops[] = {"###"};
    wf_stop s;
    wf_stop_init(&s, stops, 1);
    const char *e;
    size_t n;
    ck_assert(!wf_stop_push(&s, "abc#", 4, &e, &n));
    ck_assert_uint_eq(n, 3); /* "abc" out, "#" held */
    ck_assert(!wf_stop_push(&s, "#x", 2, &e, &n));
    ck_assert_uint_eq(n, 3);
    ck_assert(memcmp(e, "##x", 3) == 0);
    ck_assert(wf_stop_push(&s, "###", 3, &e, &n));
    ck_assert_uint_eq(n, 0);
    ck_assert(wf_stop_push(&s, "more", 4, &e, &n)); /* stays stopped */
    ck_assert_uint_eq(n, 0);
    wf_stop_free(&s);
}
END_TEST

START_TEST(metrics_text_format) {
    wf_metrics m;
    wf_metrics_init(&m);
    wf_histogram_observe(&m.ttft, 0.003);
    wf_histogram_observe(&m.ttft, 0.2);
    wf_histogram_observe(&m.ttft, 1000);
    wf_histogram_observe(&m.ttft, NAN); /* ignored */
    m.prompt_tokens = 42;
    m.success_stop = 2;
    wf_metrics_count_status(&m, 200);
    wf_metrics_count_status(&m, 418);
    wf_sched_stats st;
    memset(&st, 0, sizeof st);
    st.running = 4;
    st.kv_usage = 0.5;
    wf_jbuf b = {0};
    wf_metrics_render(&m, "my\"model", &st, &b);
    const char *t = b.data;
    ck_assert_ptr_nonnull(strstr(t, "# HELP weft:time_to_first_token_seconds "));
    ck_assert_ptr_nonnull(strstr(t, "# TYPE weft:time_to_first_token_seconds histogram\n"));
    ck_assert_ptr_nonnull(strstr(t, "weft:time_to_first_token_seconds_bucket{le=\"0.001\",model_name=\"my\\\"model\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(t, "weft:time_to_first_token_seconds_bucket{le=\"0.005\",model_name=\"my\\\"model\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "weft:time_to_first_token_seconds_bucket{le=\"0.25\",model_name=\"my\\\"model\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "weft:time_to_first_token_seconds_bucket{le=\"80\",model_name=\"my\\\"model\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "weft:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"my\\\"model\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(t, "weft:time_to_first_token_seconds_count{model_name=\"my\\\"model\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(t, "weft:time_to_first_token_seconds_sum{model_name=\"my\\\"model\"} 1000.203"));
    ck_assert_ptr_nonnull(strstr(t, "weft:prompt_tokens_total{model_name=\"my\\\"model\"} 42\n"));
    ck_assert_ptr_nonnull(strstr(t, "weft:num_requests_running{model_name=\"my\\\"model\"} 4\n"));
    ck_assert_ptr_nonnull(strstr(t, "weft:kv_cache_usage_perc{model_name=\"my\\\"model\"} 0.5\n"));
    ck_assert_ptr_nonnull(strstr(t, "finished_reason=\"stop\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "status=\"other\"} 1\n"));
    /* every line is a comment or "name{labels} value" */
    char *copy = strdup(t);
    int samples = 0;
    for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') {
            ck_assert(strncmp(line, "# HELP weft:", 12) == 0 || strncmp(line, "# TYPE weft:", 12) == 0);
            continue;
        }
        ck_assert_msg(strncmp(line, "weft:", 5) == 0, "%s", line);
        char *close = strrchr(line, '}');
        ck_assert_ptr_nonnull(close);
        ck_assert(close[1] == ' ');
        char *end;
        strtod(close + 2, &end);
        ck_assert_msg(*end == '\0', "bad value in %s", line);
        samples++;
    }
    ck_assert_int_gt(samples, 100);
    free(copy);
    wf_jbuf_free(&b);
}
END_TEST

static Suite *openai_suite(void) {
    Suite *s = suite_create("openai");
    TCase *tc = tcase_create("decode");
    tcase_add_test(tc, chat_every_parameter);
    tcase_add_test(tc, defaults_and_content_parts);
    tcase_add_test(tc, prompt_forms);
    tcase_add_loop_test(tc, every_error_names_its_field, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("encode");
    tcase_add_test(tc, jbuf_strings_and_numbers);
    tcase_add_test(tc, error_envelope);
    tcase_add_test(tc, logprob_shapes);
    suite_add_tcase(s, tc);
    tc = tcase_create("stop");
    tcase_add_test(tc, stop_strings_across_tokens);
    tcase_add_test(tc, stop_emits_incrementally);
    suite_add_tcase(s, tc);
    tc = tcase_create("metrics");
    tcase_add_test(tc, metrics_text_format);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(openai_suite)
