/* The whole front end (routes, auth, generation, SSE, errors, metrics, shutdown) through
 * loopback connections, with a byte-level fake tokenizer and a fake scheduler whose events the
 * test sends by hand. */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "server/server.h"

/* ---- fake model: token id = byte + 2; 0 = BOS, 1 = EOS -------------------------------- */
#define N_VOCAB 258

static wf_status fm_tokenize(void *ctx, const char *text, size_t len, bool add_special,
                             bool parse_special, int32_t *out, int cap, int *n_out) {
    int n = 0;
    if (add_special) {
        if (n < cap) out[n] = 0;
        n++;
    }
    for (size_t i = 0; i < len; i++, n++)
        if (n < cap) out[n] = (unsigned char)text[i] + 2;
    *n_out = n;
    return WF_OK;
}

static int fm_piece(void *ctx, int32_t tok, char *buf, int cap) {
    if (tok < 2) return 0;
    if (cap < 1) return -1;
    buf[0] = (char)(tok - 2);
    return 1;
}

static wf_status fm_chat(void *ctx, const wf_openai_message *m, size_t n, char **out, char *err,
                         size_t errlen) {
    size_t total = 16;
    for (size_t i = 0; i < n; i++) total += strlen(m[i].role) + strlen(m[i].content) + 4;
    char *s = malloc(total);
    s[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (strcmp(m[i].content, "REJECT") == 0) {
            snprintf(err, errlen, "template refuses this");
            free(s);
            return WF_EINVAL;
        }
        strcat(s, m[i].role);
        strcat(s, ": ");
        strcat(s, m[i].content);
        strcat(s, "\n");
    }
    strcat(s, "assistant:");
    *out = s;
    return WF_OK;
}

static void fm_detok_init(void *ctx, void *st) { memset(st, 0, 8); }
static int fm_detok_push(void *ctx, void *st, int32_t tok, char *out, int cap) {
    return fm_piece(ctx, tok, out, cap);
}
static int fm_detok_flush(void *ctx, void *st, char *out, int cap) { return 0; }

static wf_server_model fake_model(void) {
    wf_server_model m = {.id = "fake-model", .n_vocab = N_VOCAB, .n_ctx = 64, .tokenize = fm_tokenize,
                         .piece = fm_piece, .chat = fm_chat, .detok_size = 8,
                         .detok_init = fm_detok_init, .detok_push = fm_detok_push,
                         .detok_flush = fm_detok_flush};
    return m;
}

/* ---- fake scheduler --------------------------------------------------------------------- */
struct wf_request {
    wf_request_spec spec;
    int32_t prompt[128];
    wf_handoff *events;
    void *user;
    int cancelled, released;
    bool finished[8];
};

typedef struct fake_sched {
    wf_status next_status;
    double retry_after;
    wf_request *reqs[16];
    int n_reqs;
    int cancels, releases, drains;
    wf_request_spec last_spec;
} fake_sched;

static fake_sched F;

static wf_status fs_submit(void *ctx, const wf_request_spec *spec, wf_handoff *events, void *user,
                           wf_request **out, wf_sched_reject *why) {
    F.last_spec = *spec;
    if (F.next_status != WF_OK) {
        why->retry_after_s = F.retry_after;
        snprintf(why->message, sizeof why->message, "fake says %s", wf_status_name(F.next_status));
        return F.next_status;
    }
    wf_request *r = calloc(1, sizeof *r);
    r->spec = *spec;
    ck_assert_int_le(spec->n_prompt, 128);
    memcpy(r->prompt, spec->prompt, (size_t)spec->n_prompt * sizeof(int32_t));
    r->events = events;
    r->user = user;
    F.reqs[F.n_reqs++] = r;
    *out = r;
    return WF_OK;
}

static void push_event(wf_request *r, wf_request_event_kind kind, int choice, int32_t tok,
                       wf_finish_reason fin, wf_status st) {
    wf_request_event *ev = calloc(1, sizeof *ev);
    ev->request = r;
    ev->user = r->user;
    ev->kind = kind;
    ev->choice = choice;
    ev->token.token = tok;
    ev->token.logprob = -0.5f;
    ev->token.n_top = r->spec.sampling.top_logprobs;
    for (int i = 0; i < ev->token.n_top; i++) {
        ev->token.top[i].token = tok + i;
        ev->token.top[i].logprob = -0.5f - (float)i;
    }
    ev->finish = fin;
    ev->status = st;
    ev->usage.prompt_tokens = r->spec.n_prompt;
    if (st != WF_OK) snprintf(ev->message, sizeof ev->message, "engine exploded");
    if (kind == WF_EVENT_FINISHED) r->finished[choice] = true;
    ck_assert_int_eq(wf_handoff_push(r->events, &ev->link), WF_OK);
}

static void fs_cancel(void *ctx, wf_request *r) {
    F.cancels++;
    if (r->cancelled++) return;
    for (int c = 0; c < r->spec.n; c++)
        if (!r->finished[c]) push_event(r, WF_EVENT_FINISHED, c, 0, WF_FINISH_CANCELLED, WF_OK);
}
static void fs_release(void *ctx, wf_request *r) {
    F.releases++;
    for (int i = 0; i < F.n_reqs; i++)
        if (F.reqs[i] == r) F.reqs[i] = NULL;
    free(r);
}
static void fs_event_free(void *ctx, wf_request_event *ev) { free(ev); }
static void fs_stats(void *ctx, wf_sched_stats *st) {
    memset(st, 0, sizeof *st);
    st->running = 3;
    st->waiting = 2;
    st->kv_usage = 0.25;
}
static void fs_foreach(void *ctx, void (*fn)(const wf_request_snapshot *, void *), void *user) {
    wf_request_snapshot snap = {.id = "snap-1", .state = WF_REQUEST_RUNNING, .prompt_tokens = 5};
    fn(&snap, user);
}
static void fs_drain(void *ctx, int deadline) { F.drains++; }

static wf_server_backend fake_backend(void) {
    wf_server_backend b = {.submit = fs_submit, .cancel = fs_cancel, .release = fs_release,
                           .event_free = fs_event_free, .stats = fs_stats,
                           .foreach_request = fs_foreach, .drain = fs_drain};
    return b;
}

/* ---- helpers ---------------------------------------------------------------------------- */
static wf_server *make_server(bool ready, char **keys, size_t n_keys, bool metrics_open) {
    memset(&F, 0, sizeof F);
    wf_server_options o;
    wf_server_options_init(&o);
    o.api_keys = keys;
    o.n_api_keys = n_keys;
    o.metrics_open = metrics_open;
    wf_server *s = wf_server_new(NULL, &o);
    ck_assert_ptr_nonnull(s);
    if (ready) {
        wf_server_model m = fake_model();
        wf_server_backend b = fake_backend();
        wf_server_set_ready(s, &m, &b);
    }
    return s;
}

typedef struct resp {
    int status;
    char head[2048];
    char *body; /* de-chunked */
    size_t body_len;
} resp;

/* Parses the first response in the connection's output. */
static resp parse_resp(wf_http_conn *c) {
    size_t n;
    const char *out = wf_http_loopback_output(c, &n);
    resp r;
    memset(&r, 0, sizeof r);
    const char *end = strstr(out, "\r\n\r\n");
    ck_assert_msg(end != NULL, "no complete head in: %s", out);
    size_t hl = (size_t)(end - out);
    ck_assert_uint_lt(hl, sizeof r.head);
    memcpy(r.head, out, hl);
    r.head[hl] = '\0';
    ck_assert_int_eq(sscanf(out, "HTTP/1.1 %d", &r.status), 1);
    const char *p = end + 4;
    r.body = calloc(1, n + 1);
    if (strstr(r.head, "Transfer-Encoding: chunked")) {
        for (;;) {
            unsigned long len = strtoul(p, NULL, 16);
            p = strstr(p, "\r\n") + 2;
            if (len == 0) break;
            memcpy(r.body + r.body_len, p, len);
            r.body_len += len;
            p += len + 2;
        }
    } else {
        const char *cl = strstr(r.head, "Content-Length: ");
        ck_assert_ptr_nonnull(cl);
        r.body_len = strtoul(cl + 16, NULL, 10);
        memcpy(r.body, p, r.body_len);
    }
    return r;
}

static wf_http_conn *send_req(wf_server *s, const char *method, const char *path,
                              const char *headers, const char *body) {
    wf_http_conn *c = wf_http_loopback_open(wf_server_http(s));
    char buf[8192];
    int n = snprintf(buf, sizeof buf, "%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %zu\r\n\r\n%s",
                     method, path, headers ? headers : "", body ? strlen(body) : 0, body ? body : "");
    wf_http_loopback_feed(c, buf, (size_t)n);
    return c;
}

static int status_of(wf_http_conn *c) {
    resp r = parse_resp(c);
    free(r.body);
    return r.status;
}

static json_t *json_of(const resp *r) {
    json_error_t e;
    json_t *j = json_loadb(r->body, r->body_len, 0, &e);
    ck_assert_msg(j != NULL, "bad JSON (%s): %.*s", e.text, (int)r->body_len, r->body);
    return j;
}

static void check_error(wf_http_conn *c, int status, const char *needle) {
    resp r = parse_resp(c);
    ck_assert_msg(r.status == status, "status %d, want %d: %s", r.status, status, r.body);
    json_t *j = json_of(&r);
    json_t *e = json_object_get(j, "error");
    ck_assert(json_is_object(e));
    ck_assert(json_is_string(json_object_get(e, "message")));
    ck_assert(json_is_string(json_object_get(e, "type")));
    ck_assert_ptr_nonnull(json_object_get(e, "param"));
    ck_assert_ptr_nonnull(json_object_get(e, "code"));
    if (needle)
        ck_assert_msg(strstr(json_string_value(json_object_get(e, "message")), needle) != NULL,
                      "message '%s' lacks '%s'", json_string_value(json_object_get(e, "message")), needle);
    json_decref(j);
    free(r.body);
}

static void send_text(wf_request *r, int choice, const char *text) {
    for (const char *p = text; *p; p++) push_event(r, WF_EVENT_TOKEN, choice, (unsigned char)*p + 2, 0, WF_OK);
}

/* ---- tests ------------------------------------------------------------------------------ */

START_TEST(health_loading_then_ready) {
    wf_server *s = make_server(false, NULL, 0, false);
    wf_http_conn *c = send_req(s, "GET", "/health", NULL, NULL);
    resp r = parse_resp(c);
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strstr(r.body, "loading"));
    free(r.body);
    wf_http_loopback_free(c);
    c = send_req(s, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\"}");
    check_error(c, 503, "loading");
    wf_http_loopback_free(c);
    wf_server_model m = fake_model();
    wf_server_backend b = fake_backend();
    wf_server_set_ready(s, &m, &b);
    c = send_req(s, "GET", "/health", NULL, NULL);
    r = parse_resp(c);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"status\":\"ok\"}");
    free(r.body);
    wf_http_loopback_free(c);
    wf_server_free(s);
}
END_TEST

START_TEST(models_and_routing_errors) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "GET", "/v1/models", NULL, NULL);
    resp r = parse_resp(c);
    ck_assert_int_eq(r.status, 200);
    json_t *j = json_of(&r);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "list");
    json_t *m0 = json_array_get(json_object_get(j, "data"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(m0, "id")), "fake-model");
    ck_assert_str_eq(json_string_value(json_object_get(m0, "object")), "model");
    ck_assert(json_is_integer(json_object_get(m0, "created")));
    ck_assert_str_eq(json_string_value(json_object_get(m0, "owned_by")), "weft");
    json_decref(j);
    free(r.body);
    wf_http_loopback_free(c);
    c = send_req(s, "GET", "/v1/models/fake-model", NULL, NULL);
    ck_assert_int_eq(status_of(c), 200);
    wf_http_loopback_free(c);
    c = send_req(s, "GET", "/v1/models/other", NULL, NULL);
    check_error(c, 404, "other");
    wf_http_loopback_free(c);
    c = send_req(s, "GET", "/nope", NULL, NULL);
    check_error(c, 404, "/nope");
    wf_http_loopback_free(c);
    c = send_req(s, "GET", "/v1/chat/completions", NULL, NULL);
    check_error(c, 405, "POST");
    ck_assert_ptr_nonnull(strstr(wf_http_loopback_output(c, NULL), "Allow: POST\r\n"));
    wf_http_loopback_free(c);
    wf_server_free(s);
}
END_TEST

START_TEST(auth_keys) {
    char *keys[] = {"k-one", "k-two", NULL};
    wf_server *s = make_server(true, keys, 2, false);
    wf_http_conn *c = send_req(s, "GET", "/v1/models", NULL, NULL);
    check_error(c, 401, "API key");
    ck_assert_ptr_nonnull(strstr(wf_http_loopback_output(c, NULL), "WWW-Authenticate: Bearer"));
    wf_http_loopback_free(c);
    c = send_req(s, "GET", "/v1/models", "Authorization: Bearer k-on\r\n", NULL);
    check_error(c, 401, "Incorrect");
    wf_http_loopback_free(c);
    c = send_req(s, "GET", "/v1/models", "Authorization: Bearer k-two\r\n", NULL);
    ck_assert_int_eq(status_of(c), 200);
    wf_http_loopback_free(c);
    c = send_req(s, "GET", "/health", NULL, NULL);
    ck_assert_int_eq(status_of(c), 200);
    wf_http_loopback_free(c);
    c = send_req(s, "GET", "/metrics", NULL, NULL);
    ck_assert_int_eq(status_of(c), 401);
    wf_http_loopback_free(c);
    c = send_req(s, "GET", "/admin", NULL, NULL);
    ck_assert_int_eq(status_of(c), 401);
    wf_http_loopback_free(c);
    wf_server_free(s);
    s = make_server(true, keys, 2, true);
    c = send_req(s, "GET", "/metrics", NULL, NULL);
    ck_assert_int_eq(status_of(c), 200);
    wf_http_loopback_free(c);
    wf_server_free(s);
    ck_assert(wf_server_auth_ok(keys, 2, "Bearer k-one"));
    ck_assert(wf_server_auth_ok(keys, 2, "bearer  k-one "));
    ck_assert(!wf_server_auth_ok(keys, 2, "Basic k-one"));
    ck_assert(!wf_server_auth_ok(keys, 2, "Bearer k-one-more"));
    ck_assert(!wf_server_auth_ok(keys, 2, "Bearer "));
    ck_assert(wf_server_auth_ok(NULL, 0, NULL));
}
END_TEST

START_TEST(chat_non_streaming) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "POST", "/v1/chat/completions", "Content-Type: application/json\r\n",
                               "{\"model\":\"fake-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hey\"}],"
                               "\"temperature\":0,\"seed\":7,\"max_tokens\":8,\"top_k\":5,\"priority\":3,"
                               "\"slo\":{\"ttft_ms\":100,\"tpot_ms\":20}}");
    ck_assert_int_eq(F.n_reqs, 1);
    wf_request *rq = F.reqs[0];
    /* BOS + "user: hey\nassistant:" */
    ck_assert_int_eq(rq->spec.n_prompt, 1 + (int)strlen("user: hey\nassistant:"));
    ck_assert_int_eq(rq->prompt[0], 0);
    ck_assert_int_eq(rq->spec.max_tokens, 8);
    ck_assert(rq->spec.sampling.has_seed && rq->spec.sampling.seed == 7);
    ck_assert_int_eq(rq->spec.sampling.top_k, 5);
    ck_assert_int_eq(rq->spec.priority, 3);
    ck_assert(rq->spec.slo.ttft_ms == 100 && rq->spec.slo.tpot_ms == 20);
    ck_assert_str_eq(rq->spec.model, "fake-model");
    ck_assert_str_eq(wf_http_loopback_output(c, NULL), ""); /* nothing before the end */
    send_text(rq, 0, "Hi \"you\"");
    push_event(rq, WF_EVENT_FINISHED, 0, 0, WF_FINISH_STOP, WF_OK);
    wf_server_poll(s);
    ck_assert_int_eq(F.releases, 1);
    resp r = parse_resp(c);
    ck_assert_int_eq(r.status, 200);
    json_t *j = json_of(&r);
    ck_assert(strncmp(json_string_value(json_object_get(j, "id")), "chatcmpl-", 9) == 0);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), "Hi \"you\"");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ch, "message"), "role")), "assistant");
    ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    ck_assert(json_is_null(json_object_get(ch, "logprobs")));
    json_t *u = json_object_get(j, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(u, "prompt_tokens")), 21);
    ck_assert_int_eq(json_integer_value(json_object_get(u, "completion_tokens")), 8);
    ck_assert_int_eq(json_integer_value(json_object_get(u, "total_tokens")), 29);
    json_decref(j);
    free(r.body);
    wf_http_loopback_free(c);
    wf_server_free(s);
}
END_TEST

START_TEST(completion_streaming_with_usage) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "POST", "/v1/completions", NULL,
                               "{\"prompt\":\"abc\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                               "\"max_tokens\":5}");
    ck_assert_int_eq(F.n_reqs, 1);
    send_text(F.reqs[0], 0, "xy");
    wf_server_poll(s);
    ck_assert_ptr_nonnull(strstr(wf_http_loopback_output(c, NULL), "\"text\":\"x\""));
    push_event(F.reqs[0], WF_EVENT_FINISHED, 0, 0, WF_FINISH_LENGTH, WF_OK);
    wf_server_poll(s);
    resp r = parse_resp(c);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.head, "Content-Type: text/event-stream"));
    /* every event is "data: <json>\n\n"; the last is [DONE]; one before carries usage */
    char *p = r.body;
    int events = 0, usage = 0;
    bool done = false, finish_len = false;
    while (*p) {
        ck_assert_msg(strncmp(p, "data: ", 6) == 0, "bad SSE framing at: %s", p);
        char *end = strstr(p, "\n\n");
        ck_assert_ptr_nonnull(end);
        *end = '\0';
        const char *data = p + 6;
        if (strcmp(data, "[DONE]") == 0) {
            done = true;
            ck_assert_str_eq(end + 2, "");
        } else {
            json_error_t e;
            json_t *j = json_loads(data, 0, &e);
            ck_assert_msg(j != NULL, "bad chunk %s", data);
            ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "text_completion");
            if (json_object_get(j, "usage")) {
                usage++;
                ck_assert_int_eq(json_array_size(json_object_get(j, "choices")), 0);
                ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 2);
                ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 4);
            } else {
                json_t *fr = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "finish_reason");
                if (json_is_string(fr)) finish_len = strcmp(json_string_value(fr), "length") == 0;
            }
            json_decref(j);
        }
        events++;
        p = end + 2;
    }
    ck_assert(done && finish_len);
    ck_assert_int_eq(usage, 1);
    ck_assert_int_ge(events, 4);
    free(r.body);
    wf_http_loopback_free(c);
    wf_server_free(s);
}
END_TEST

START_TEST(stop_string_across_tokens_cancels) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "POST", "/v1/completions", NULL,
                               "{\"prompt\":\"q\",\"stop\":[\"END\",\"zz\"],\"max_tokens\":20}");
    wf_request *rq = F.reqs[0];
    send_text(rq, 0, "abEN");
    wf_server_poll(s);
    ck_assert_int_eq(F.cancels, 0);
    send_text(rq, 0, "D and more");
    wf_server_poll(s); /* the stop matched: cancel -> FINISHED(cancelled) -> response */
    ck_assert_int_ge(F.cancels, 1);
    wf_server_poll(s);
    resp r = parse_resp(c);
    ck_assert_int_eq(r.status, 200);
    json_t *j = json_of(&r);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(ch, "text")), "ab");
    ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 5);
    json_decref(j);
    free(r.body);
    wf_http_loopback_free(c);
    ck_assert_int_eq(F.releases, 1);
    wf_server_free(s);
}
END_TEST

START_TEST(n_choices_and_multiple_prompts) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "POST", "/v1/completions", NULL,
                               "{\"prompt\":[\"a\",[5,6,7]],\"n\":2,\"max_tokens\":3}");
    ck_assert_int_eq(F.n_reqs, 2);
    ck_assert_int_eq(F.reqs[1]->spec.n_prompt, 3);
    ck_assert_int_eq(F.reqs[1]->prompt[2], 7);
    for (int q = 0; q < 2; q++)
        for (int k = 0; k < 2; k++) {
            char t[8];
            snprintf(t, sizeof t, "%c%c", 'A' + q, '0' + k);
            send_text(F.reqs[q], k, t);
            push_event(F.reqs[q], WF_EVENT_FINISHED, k, 0, WF_FINISH_LENGTH, WF_OK);
        }
    wf_server_poll(s);
    resp r = parse_resp(c);
    json_t *j = json_of(&r);
    json_t *chs = json_object_get(j, "choices");
    ck_assert_int_eq(json_array_size(chs), 4);
    const char *want[] = {"A0", "A1", "B0", "B1"};
    for (int i = 0; i < 4; i++) {
        json_t *ch = json_array_get(chs, (size_t)i);
        ck_assert_int_eq(json_integer_value(json_object_get(ch, "index")), i);
        ck_assert_str_eq(json_string_value(json_object_get(ch, "text")), want[i]);
    }
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 2 + 3);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 8);
    json_decref(j);
    free(r.body);
    wf_http_loopback_free(c);
    wf_server_free(s);
}
END_TEST

START_TEST(logprobs_shapes) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "POST", "/v1/chat/completions", NULL,
                               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":2}");
    send_text(F.reqs[0], 0, "ok");
    push_event(F.reqs[0], WF_EVENT_FINISHED, 0, 0, WF_FINISH_STOP, WF_OK);
    wf_server_poll(s);
    resp r = parse_resp(c);
    json_t *j = json_of(&r);
    json_t *content = json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs"), "content");
    ck_assert_int_eq(json_array_size(content), 2);
    json_t *e0 = json_array_get(content, 0);
    ck_assert_str_eq(json_string_value(json_object_get(e0, "token")), "o");
    ck_assert(json_real_value(json_object_get(e0, "logprob")) == -0.5);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(e0, "bytes"), 0)), 'o');
    ck_assert_int_eq(json_array_size(json_object_get(e0, "top_logprobs")), 2);
    json_decref(j);
    free(r.body);
    wf_http_loopback_free(c);

    c = send_req(s, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\",\"logprobs\":2}");
    send_text(F.reqs[1], 0, "hi");
    push_event(F.reqs[1], WF_EVENT_FINISHED, 0, 0, WF_FINISH_LENGTH, WF_OK);
    wf_server_poll(s);
    r = parse_resp(c);
    j = json_of(&r);
    json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(lp, "tokens"), 1)), "i");
    ck_assert(json_real_value(json_array_get(json_object_get(lp, "token_logprobs"), 0)) == -0.5);
    json_t *top1 = json_array_get(json_object_get(lp, "top_logprobs"), 1);
    ck_assert(json_is_object(top1));
    ck_assert_int_eq(json_object_size(top1), 2);
    ck_assert(json_real_value(json_object_get(top1, "i")) == -0.5);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 1)), 1);
    json_decref(j);
    free(r.body);
    wf_http_loopback_free(c);
    wf_server_free(s);
}
END_TEST

START_TEST(request_errors) {
    wf_server *s = make_server(true, NULL, 0, false);
    struct { const char *path, *body; int status; const char *needle; } cases[] = {
        {"/v1/chat/completions", "{not json", 400, "not valid JSON"},
        {"/v1/chat/completions", "[1,2]", 400, "JSON object"},
        {"/v1/chat/completions", "{\"messages\":\"hi\"}", 400, "'messages'"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", 400, "'temperature'"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":-5}", 400, "'max_tokens'"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"REJECT\"}]}", 400, "template"},
        {"/v1/chat/completions", "{\"model\":\"gpt-9\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404, "gpt-9"},
        {"/v1/completions", "{\"prompt\":[1,2,999999]}", 400, "vocabulary"},
        {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":100}", 400, "maximum context length is 64 tokens"},
        {"/v1/completions", "{\"prompt\":\"" "0123456789012345678901234567890123456789012345678901234567890123456789" "\"}", 400, "71 tokens"},
        {"/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"300\":5}}", 400, "logit_bias"},
        {"/v1/completions", "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "'stop'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wf_http_conn *c = send_req(s, "POST", cases[i].path, NULL, cases[i].body);
        check_error(c, cases[i].status, cases[i].needle);
        wf_http_loopback_free(c);
    }
    ck_assert_int_eq(F.n_reqs, 0);
    /* the context message states both numbers */
    wf_http_conn *c = send_req(s, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\",\"max_tokens\":100}");
    check_error(c, 400, "you requested 102 tokens (2 in the prompt, 100 in the completion)");
    wf_http_loopback_free(c);
    wf_server_free(s);
}
END_TEST

START_TEST(backpressure_statuses) {
    wf_server *s = make_server(true, NULL, 0, false);
    F.next_status = WF_EOVERLOAD;
    F.retry_after = 2.2;
    wf_http_conn *c = send_req(s, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\"}");
    check_error(c, 429, "fake says");
    ck_assert_ptr_nonnull(strstr(wf_http_loopback_output(c, NULL), "Retry-After: 3\r\n"));
    wf_http_loopback_free(c);
    F.next_status = WF_EFULL;
    c = send_req(s, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\"}");
    check_error(c, 503, "busy");
    ck_assert_ptr_nonnull(strstr(wf_http_loopback_output(c, NULL), "Retry-After: 3\r\n"));
    wf_http_loopback_free(c);
    F.next_status = WF_EBUSY;
    F.retry_after = 0;
    c = send_req(s, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\"}");
    check_error(c, 503, NULL);
    ck_assert_ptr_nonnull(strstr(wf_http_loopback_output(c, NULL), "Retry-After: 1\r\n"));
    wf_http_loopback_free(c);
    wf_server_free(s);
}
END_TEST

START_TEST(disconnect_cancels_then_frees) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "POST", "/v1/chat/completions", NULL,
                               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true}");
    send_text(F.reqs[0], 0, "a");
    wf_server_poll(s);
    wf_http_loopback_free(c); /* the client hangs up */
    ck_assert_int_eq(F.cancels, 1);
    ck_assert_int_eq(F.releases, 0);
    wf_server_poll(s); /* FINISHED(cancelled) arrives: released, generation freed (ASan checks) */
    ck_assert_int_eq(F.releases, 1);
    wf_server_free(s);
}
END_TEST

START_TEST(error_after_stream_began) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "POST", "/v1/chat/completions", NULL,
                               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true}");
    send_text(F.reqs[0], 0, "a");
    push_event(F.reqs[0], WF_EVENT_FINISHED, 0, 0, WF_FINISH_ERROR, WF_EINTERNAL);
    wf_server_poll(s);
    resp r = parse_resp(c);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}"));
    const char *last = strstr(r.body, "data: {\"error\":");
    ck_assert_ptr_nonnull(last);
    ck_assert_ptr_nonnull(strstr(last, "engine exploded"));
    ck_assert_ptr_null(strstr(r.body, "[DONE]"));
    ck_assert_str_eq(last + strlen(last) - 2, "\n\n");
    free(r.body);
    wf_http_loopback_free(c);
    ck_assert_int_eq(F.releases, 1);
    wf_server_free(s);
}
END_TEST

START_TEST(tokenize_detokenize) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "POST", "/tokenize", NULL, "{\"content\":\"AB\",\"add_special\":true}");
    resp r = parse_resp(c);
    ck_assert_str_eq(r.body, "{\"tokens\":[0,67,68]}");
    free(r.body);
    wf_http_loopback_free(c);
    c = send_req(s, "POST", "/tokenize", NULL, "{\"content\":\"A\",\"with_pieces\":true}");
    r = parse_resp(c);
    ck_assert_str_eq(r.body, "{\"tokens\":[{\"id\":67,\"piece\":\"A\"}]}");
    free(r.body);
    wf_http_loopback_free(c);
    c = send_req(s, "POST", "/detokenize", NULL, "{\"tokens\":[0,67,68]}");
    r = parse_resp(c);
    ck_assert_str_eq(r.body, "{\"content\":\"AB\"}");
    free(r.body);
    wf_http_loopback_free(c);
    c = send_req(s, "POST", "/detokenize", NULL, "{\"tokens\":[-1]}");
    check_error(c, 400, "tokens[0]");
    wf_http_loopback_free(c);
    c = send_req(s, "POST", "/tokenize", NULL, "{\"content\":5}");
    check_error(c, 400, "'content'");
    wf_http_loopback_free(c);
    wf_server_free(s);
}
END_TEST

START_TEST(metrics_and_admin) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\"}");
    send_text(F.reqs[0], 0, "abc");
    wf_server_poll(s);
    wf_http_conn *a = send_req(s, "GET", "/admin/stats", NULL, NULL);
    resp r = parse_resp(a);
    json_t *j = json_of(&r);
    json_t *reqs = json_object_get(j, "requests");
    ck_assert_int_eq(json_array_size(reqs), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(reqs, 0), "completion_tokens")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(reqs, 0), "model")), "fake-model");
    ck_assert(json_is_number(json_object_get(json_array_get(reqs, 0), "age_ms")));
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "scheduler"), "running")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "scheduler_requests"), 0), "state")),
                     wf_request_state_str(WF_REQUEST_RUNNING));
    json_decref(j);
    free(r.body);
    wf_http_loopback_free(a);
    push_event(F.reqs[0], WF_EVENT_FINISHED, 0, 0, WF_FINISH_LENGTH, WF_OK);
    wf_server_poll(s);
    wf_http_loopback_free(c);
    a = send_req(s, "GET", "/metrics", NULL, NULL);
    r = parse_resp(a);
    ck_assert_ptr_nonnull(strstr(r.head, "text/plain; version=0.0.4"));
    ck_assert_ptr_nonnull(strstr(r.body, "weft:generation_tokens_total{model_name=\"fake-model\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "weft:prompt_tokens_total{model_name=\"fake-model\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "weft:num_requests_running{model_name=\"fake-model\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "weft:request_success_total{model_name=\"fake-model\",finished_reason=\"length\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "weft:time_to_first_token_seconds_count{model_name=\"fake-model\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "weft:inter_token_latency_seconds_count{model_name=\"fake-model\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "# TYPE weft:e2e_request_latency_seconds histogram\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "weft:http_requests_total{model_name=\"fake-model\",status=\"200\"} 2\n"));
    free(r.body);
    wf_http_loopback_free(a);
    a = send_req(s, "GET", "/admin", NULL, NULL);
    r = parse_resp(a);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "/admin/stats"));
    free(r.body);
    wf_http_loopback_free(a);
    wf_server_free(s);
}
END_TEST


START_TEST(stop_in_one_choice_cancels_when_others_end) {
    wf_server *s = make_server(true, NULL, 0, false);
    wf_http_conn *c = send_req(s, "POST", "/v1/completions", NULL, "{\"prompt\":\"q\",\"n\":2,\"stop\":\"X\",\"max_tokens\":9}");
    wf_request *rq = F.reqs[0];
    send_text(rq, 0, "aX");
    send_text(rq, 1, "bb");
    wf_server_poll(s);
    ck_assert_int_eq(F.cancels, 0); /* choice 1 still runs */
    push_event(rq, WF_EVENT_FINISHED, 1, 0, WF_FINISH_LENGTH, WF_OK);
    wf_server_poll(s); /* every choice is done: the stopped one is cancelled */
    ck_assert_int_eq(F.cancels, 1);
    wf_server_poll(s);
    resp r = parse_resp(c);
    json_t *j = json_of(&r);
    json_t *chs = json_object_get(j, "choices");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(chs, 0), "text")), "a");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(chs, 0), "finish_reason")), "stop");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(chs, 1), "text")), "bb");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(chs, 1), "finish_reason")), "length");
    json_decref(j);
    free(r.body);
    wf_http_loopback_free(c);
    ck_assert_int_eq(F.releases, 1);
    wf_server_free(s);
}
END_TEST

static int done_calls;
static void on_done(void *user) { done_calls++; }

START_TEST(shutdown_drains) {
    wf_server *s = make_server(true, NULL, 0, false);
    done_calls = 0;
    wf_http_conn *c = send_req(s, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\"}");
    wf_server_shutdown(s, on_done, NULL);
    ck_assert_int_eq(F.drains, 1);
    ck_assert_int_eq(done_calls, 0); /* a request is still under way */
    wf_http_conn *h = send_req(s, "GET", "/health", NULL, NULL);
    resp hr = parse_resp(h);
    ck_assert_int_eq(hr.status, 503);
    ck_assert_ptr_nonnull(strstr(hr.body, "draining"));
    free(hr.body);
    wf_http_loopback_free(h);
    send_text(F.reqs[0], 0, "z");
    push_event(F.reqs[0], WF_EVENT_FINISHED, 0, 0, WF_FINISH_LENGTH, WF_OK);
    wf_server_poll(s);
    ck_assert_int_eq(done_calls, 1);
    resp r = parse_resp(c);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.head, "Connection: close"));
    free(r.body);
    wf_http_loopback_free(c);
    wf_server_free(s);
}
END_TEST

static Suite *server_suite(void) {
    Suite *s = suite_create("server");
    TCase *tc = tcase_create("loopback");
    tcase_add_test(tc, health_loading_then_ready);
    tcase_add_test(tc, models_and_routing_errors);
    tcase_add_test(tc, auth_keys);
    tcase_add_test(tc, chat_non_streaming);
    tcase_add_test(tc, completion_streaming_with_usage);
    tcase_add_test(tc, stop_string_across_tokens_cancels);
    tcase_add_test(tc, n_choices_and_multiple_prompts);
    tcase_add_test(tc, stop_in_one_choice_cancels_when_others_end);
    tcase_add_test(tc, logprobs_shapes);
    tcase_add_test(tc, request_errors);
    tcase_add_test(tc, backpressure_statuses);
    tcase_add_test(tc, disconnect_cancels_then_frees);
    tcase_add_test(tc, error_after_stream_began);
    tcase_add_test(tc, tokenize_detokenize);
    tcase_add_test(tc, metrics_and_admin);
    tcase_add_test(tc, shutdown_drains);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(server_suite)
