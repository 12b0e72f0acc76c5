/* The load engine of weft-bench: arrival scheduling, request bodies, response parsing (SSE and
 * plain JSON), bounds and timeouts (see runner.h). */
#include "loadgen/runner.h"

#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#include "loadgen/arrival.h"
#include "loadgen/http.h"
#include "loadgen/sse.h"
#include "weft_version.h"

#define TICK_MS 50
#define MAX_ERROR_BODY (1u << 20)
#define MAX_PLAIN_BODY (64u << 20)

typedef struct run run;

typedef struct req {
    wf_loadgen_call call;
    run *run;
    size_t idx;
    char *bytes;
    wf_loadgen_sse sse;
    char *body;
    size_t body_len, body_cap;
    int status;
    bool event_stream;
    bool stream_error;
    uint64_t t_now;
    uint64_t deadline_ns;
    uv_timer_t retry_timer;    /* --retry-after: waiting out a Retry-After */
    bool retry_timer_on;
    struct req *prev, *next;
} req;

struct run {
    const wf_loadgen_run_opts *o;
    const wf_loadgen_dataset *ds;
    wf_loadgen_run_result *res;
    uv_loop_t loop;
    wf_loadgen_client client;
    uv_timer_t arrival_timer, tick;
    uv_signal_t sigint;
    wf_loadgen_arrival arr;
    uint64_t t0, t_last_end, stop_ns, grace_ns;
    double next_arrival_s;
    size_t n_arrived, issued, inflight, failed;
    unsigned ticks;
    req *head;
    bool stopping, finished, in_issue, issue_again;
    wf_status fatal;
    char *err;
    size_t errlen;
    int progress_width;
};

void wf_loadgen_run_opts_default(wf_loadgen_run_opts *o) {
    memset(o, 0, sizeof *o);
    o->stream = true;
    o->ignore_eos = true;
    o->slo_ext = true;
    o->temperature = -1;
    o->mode = WF_LOADGEN_CLOSED;
    o->concurrency = 1;
    o->rate = INFINITY;
    o->burstiness = 1.0;
    o->num_requests = 100;
    o->duration_s = 120;
    o->timeout_s = 600;
    o->grace_s = 30;
    o->seed = 0;
    snprintf(o->target.path, sizeof o->target.path, "/v1/completions");
}

wf_status wf_loadgen_target_resolve(const char *host, int port, wf_loadgen_target *t, char *err,
                                    size_t errlen) {
    if (!host || !*host || strlen(host) >= sizeof t->host) {
        wf_errorf(err, errlen, "bad host '%s'", host ? host : "");
        return WF_EINVAL;
    }
    if (port < 1 || port > 65535) {
        wf_errorf(err, errlen, "bad port %d", port);
        return WF_EINVAL;
    }
    char h[256];
    snprintf(h, sizeof h, "%s", host);
    size_t hl = strlen(h);
    if (h[0] == '[' && hl > 2 && h[hl - 1] == ']') { /* [::1] */
        memmove(h, h + 1, hl - 2);
        h[hl - 2] = '\0';
    }
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(h, ps, &hints, &ai);
    if (rc != 0 || !ai) {
        wf_errorf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return WF_ENOTFOUND;
    }
    memset(&t->addr, 0, sizeof t->addr);
    memcpy(&t->addr, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    snprintf(t->host, sizeof t->host, "%s", host);
    t->port = port;
    if (strchr(h, ':')) snprintf(t->host_header, sizeof t->host_header, "[%s]:%d", h, port);
    else snprintf(t->host_header, sizeof t->host_header, "%s:%d", h, port);
    return WF_OK;
}

/* ---- request bodies ------------------------------------------------------------------------ */

char *wf_loadgen_build_body(const wf_loadgen_run_opts *o, const wf_loadgen_prompt *p) {
    char *text = wf_loadgen_prompt_text(p);
    json_t *b = text ? json_object() : NULL;
    if (!b) {
        free(text);
        return NULL;
    }
    if (o->model) json_object_set_new(b, "model", json_string(o->model));
    if (o->chat) {
        json_t *msgs = json_array(), *m = json_object();
        json_object_set_new(m, "role", json_string("user"));
        json_object_set_new(m, "content", json_string(text));
        json_array_append_new(msgs, m);
        json_object_set_new(b, "messages", msgs);
    } else {
        json_object_set_new(b, "prompt", json_string(text));
    }
    json_object_set_new(b, "max_tokens", json_integer(p->output_tokens));
    json_object_set_new(b, "stream", json_boolean(o->stream));
    if (o->stream) {
        json_t *so = json_object();
        json_object_set_new(so, "include_usage", json_true());
        json_object_set_new(b, "stream_options", so);
    }
    if (o->ignore_eos) json_object_set_new(b, "ignore_eos", json_true());
    if (o->temperature >= 0) json_object_set_new(b, "temperature", json_real(o->temperature));
    if (o->slo_ext && p->slo_class >= 0 && (size_t)p->slo_class < o->n_classes) {
        const wf_loadgen_slo_class *c = &o->classes[p->slo_class];
        json_t *slo = json_object();
        if (c->ttft_ms > 0) json_object_set_new(slo, "ttft_ms", json_real(c->ttft_ms));
        if (c->tpot_ms > 0) json_object_set_new(slo, "tpot_ms", json_real(c->tpot_ms));
        json_object_set_new(b, "slo", slo);
    }
    if (o->extra_body) {
        json_t *extra = json_loads(o->extra_body, 0, NULL);
        if (json_is_object(extra)) json_object_update(b, extra);
        json_decref(extra);
    }
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    free(text);
    return s;
}

static char *build_request(const wf_loadgen_run_opts *o, const char *method, const char *path,
                           const char *body, size_t *len_out) {
    size_t blen = body ? strlen(body) : 0;
    char auth[600] = "";
    if (o->api_key) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", o->api_key);
    char head[1400];
    int hl = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: weft-bench/%s\r\n%s"
                      "Accept: %s\r\nConnection: keep-alive\r\n%s%s%zu\r\n\r\n",
                      method, path, o->target.host_header, WEFT_VERSION, auth,
                      o->stream && body ? "text/event-stream" : "application/json",
                      body ? "Content-Type: application/json\r\n" : "", "Content-Length: ", blen);
    if (hl < 0 || (size_t)hl >= sizeof head) return NULL;
    char *out = malloc((size_t)hl + blen + 1);
    if (!out) return NULL;
    memcpy(out, head, (size_t)hl);
    if (blen) memcpy(out + hl, body, blen);
    out[hl + blen] = '\0';
    *len_out = (size_t)hl + blen;
    return out;
}

/* ---- response parsing ----------------------------------------------------------------------- */

static void set_error(wf_loadgen_record *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(wf_loadgen_record *r, const char *fmt, ...) {
    if (r->error[0]) return; /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
}

static void take_usage(wf_loadgen_record *rec, json_t *usage) {
    if (!json_is_object(usage)) return;
    json_t *pt = json_object_get(usage, "prompt_tokens");
    json_t *ct = json_object_get(usage, "completion_tokens");
    if (json_is_integer(pt)) rec->input_tokens = json_integer_value(pt);
    if (json_is_integer(ct)) {
        rec->output_tokens = json_integer_value(ct);
        rec->tokens_estimated = false;
    }
}

/* The generated text of choices[0] in a chunk or body, or NULL. */
static const char *choice_text(json_t *msg, bool chat_delta) {
    json_t *choices = json_object_get(msg, "choices");
    json_t *c0 = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
    if (!json_is_object(c0)) return NULL;
    json_t *t = json_object_get(c0, "text");
    if (json_is_string(t)) return json_string_value(t);
    json_t *m = json_object_get(c0, chat_delta ? "delta" : "message");
    if (!json_is_object(m)) m = json_object_get(c0, chat_delta ? "message" : "delta");
    if (!json_is_object(m)) return NULL;
    t = json_object_get(m, "content");
    if (json_is_string(t) && json_string_length(t) > 0) return json_string_value(t);
    t = json_object_get(m, "reasoning_content");
    if (json_is_string(t)) return json_string_value(t);
    return NULL;
}

static void error_message(json_t *root, char *buf, size_t len) {
    json_t *e = json_object_get(root, "error");
    json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
    if (json_is_string(m)) snprintf(buf, len, "%s", json_string_value(m));
    else snprintf(buf, len, "error object in response");
}

/* The image class of a record (its slo_class), or NULL. */
static const wf_workload_class *image_class(const run *r, const wf_loadgen_record *rec) {
    const wf_loadgen_image_opts *io = r->o->image;
    if (!io || rec->slo_class < 0 || (size_t)rec->slo_class >= io->n_classes) return NULL;
    return &io->classes[rec->slo_class];
}

/* One event of a streamed image reply: progress (the first one's time is kept) or images. */
static void on_image_event(req *q, wf_loadgen_record *rec, const char *event, json_t *msg) {
    const wf_workload_class *c = image_class(q->run, rec);
    char m[160];
    bool progress = false;
    int got = -1;
    if (event && strcmp(event, "error") == 0) error_message(msg, m, sizeof m);
    else if (c) got = wf_loadgen_image_check_event(msg, c->width, c->height, &progress, m, sizeof m);
    else snprintf(m, sizeof m, "no image class");
    if (got < 0) {
        q->stream_error = true;
        set_error(rec, "stream: %s", m);
        return;
    }
    if (rec->t_first_ns == 0) rec->t_first_ns = q->t_now;
    rec->images += (uint32_t)got;
}

static void on_sse_event(void *ud, const char *event, const char *data, size_t len) {
    req *q = ud;
    wf_loadgen_record *rec = &q->run->res->records[q->idx];
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) return;
    json_error_t jerr;
    json_t *msg = json_loadb(data, len, 0, &jerr);
    if (!json_is_object(msg)) {
        q->stream_error = true;
        set_error(rec, "bad JSON in stream: %s", jerr.text);
        json_decref(msg);
        return;
    }
    if (q->run->o->image) {
        on_image_event(q, rec, event, msg);
        json_decref(msg);
        return;
    }
    if ((event && strcmp(event, "error") == 0) || json_object_get(msg, "error")) {
        char m[140];
        error_message(msg, m, sizeof m);
        q->stream_error = true;
        set_error(rec, "stream error: %s", m);
        json_decref(msg);
        return;
    }
    const char *text = choice_text(msg, true);
    if (text && *text) {
        if (rec->t_first_ns == 0) rec->t_first_ns = q->t_now;
        if (wf_loadgen_record_add_chunk(rec, q->t_now) != WF_OK) {
            q->stream_error = true;
            set_error(rec, "out of memory recording chunks");
        }
    }
    take_usage(rec, json_object_get(msg, "usage"));
    json_decref(msg);
}

static void rq_on_headers(wf_loadgen_call *call, int status, bool event_stream) {
    req *q = call->ud;
    q->status = status;
    q->event_stream = event_stream && status >= 200 && status < 300;
    q->run->res->records[q->idx].http_status = status;
    q->run->res->records[q->idx].streamed = q->event_stream;
}

static void rq_on_body(wf_loadgen_call *call, const char *p, size_t n, uint64_t t_ns) {
    req *q = call->ud;
    if (q->event_stream) {
        q->t_now = t_ns;
        wf_status st = wf_loadgen_sse_feed(&q->sse, p, n);
        if (st != WF_OK && !q->stream_error) {
            q->stream_error = true;
            set_error(&q->run->res->records[q->idx], "SSE: %s", wf_status_str(st));
        }
        return;
    }
    size_t cap_max = q->status >= 200 && q->status < 300 ? MAX_PLAIN_BODY : MAX_ERROR_BODY;
    if (q->body_len + n > cap_max) n = cap_max - q->body_len;
    if (q->body_len + n + 1 > q->body_cap) {
        size_t ncap = q->body_cap ? q->body_cap : 4096;
        while (ncap < q->body_len + n + 1) ncap *= 2;
        char *nb = realloc(q->body, ncap);
        if (!nb) return;
        q->body = nb;
        q->body_cap = ncap;
    }
    memcpy(q->body + q->body_len, p, n);
    q->body_len += n;
    q->body[q->body_len] = '\0';
}

/* Completes the record of a response that was not an event stream. */
static void finish_plain(req *q, wf_loadgen_record *rec) {
    json_t *root = q->body_len ? json_loadb(q->body, q->body_len, 0, NULL) : NULL;
    if (q->status < 200 || q->status >= 300) {
        rec->outcome = WF_LOADGEN_HTTP_ERROR;
        char m[140] = "";
        if (json_is_object(root)) error_message(root, m, sizeof m);
        else if (q->body_len) snprintf(m, sizeof m, "%.*s", (int)(q->body_len < 120 ? q->body_len : 120), q->body);
        set_error(rec, "HTTP %d: %s", q->status, m);
        json_decref(root);
        return;
    }
    if (q->run->o->image) {
        const wf_workload_class *c = image_class(q->run, rec);
        char m[160] = "no image class";
        int got = c ? wf_loadgen_image_check_reply(root, c->width, c->height, m, sizeof m) : -1;
        json_decref(root);
        if (got < 0 || got != q->run->o->image->n) {
            rec->outcome = WF_LOADGEN_STREAM_ERROR;
            if (got < 0) set_error(rec, "%s", m);
            else set_error(rec, "reply has %d images, asked %d", got, q->run->o->image->n);
            return;
        }
        rec->outcome = WF_LOADGEN_OK;
        rec->images = (uint32_t)got;
        rec->t_first_ns = rec->t_end_ns;
        return;
    }
    if (!json_is_object(root) || json_object_get(root, "error") ||
        !json_is_array(json_object_get(root, "choices"))) {
        rec->outcome = WF_LOADGEN_STREAM_ERROR;
        char m[140] = "response is not a completion object";
        if (json_is_object(root) && json_object_get(root, "error")) error_message(root, m, sizeof m);
        set_error(rec, "%s", m);
        json_decref(root);
        return;
    }
    rec->outcome = WF_LOADGEN_OK;
    rec->t_first_ns = rec->t_end_ns;
    const char *text = choice_text(root, false);
    take_usage(rec, json_object_get(root, "usage"));
    if (rec->tokens_estimated) /* no usage: estimate from the text */
        rec->output_tokens = text ? wf_loadgen_estimate_tokens(text) : 0;
    json_decref(root);
}

/* ---- scheduling ------------------------------------------------------------------------------ */

static void try_issue(run *r);
static void maybe_finish(run *r);

static double now_s(run *r) { return (double)(uv_hrtime() - r->t0) / 1e9; }

static void req_free_cb(uv_handle_t *h) { free(h->data); }

static void req_free(req *q) {
    wf_loadgen_sse_free(&q->sse);
    free(q->body);
    free(q->bytes);
    if (q->retry_timer_on) { /* freed once libuv let go of the timer */
        q->retry_timer.data = q;
        uv_close((uv_handle_t *)&q->retry_timer, req_free_cb);
        return;
    }
    free(q);
}

static void finish_req(req *q, wf_status st, const char *msg);

static char *request_bytes(run *r, size_t idx, uint64_t now_ns, size_t *len);

static void on_retry(uv_timer_t *t) {
    req *q = t->data;
    run *r = q->run;
    if (r->stopping) { /* the run ended while we waited: the refusal stands */
        finish_req(q, WF_OK, NULL);
        return;
    }
    q->status = 0;
    q->event_stream = q->stream_error = false;
    q->body_len = 0;
    r->res->records[q->idx].images = 0;
    r->res->records[q->idx].t_first_ns = 0;
    if (r->o->image && r->o->slo_ext) { /* the deadline left is smaller now */
        size_t len = 0;
        char *bytes = request_bytes(r, q->idx, uv_hrtime(), &len);
        if (bytes) {
            free(q->bytes);
            q->bytes = bytes;
            q->call.data = bytes;
            q->call.len = len;
        }
    }
    wf_loadgen_sse_free(&q->sse);
    wf_loadgen_sse_init(&q->sse, on_sse_event, q);
    q->next = r->head;
    q->prev = NULL;
    if (r->head) r->head->prev = q;
    r->head = q;
    wf_loadgen_client_start(&r->client, &q->call);
}

/* --retry-after: a 429/503 that names a delay is sent again after it, if the request's
 * timeout and the run's duration leave room; meanwhile it stays in flight but off the list
 * the timeout sweep aborts (the client no longer holds it). */
static bool maybe_retry(req *q, wf_status st) {
    run *r = q->run;
    if (!r->o->retry_after || st != WF_OK || r->stopping || (q->status != 429 && q->status != 503) ||
        q->call.retry_after_s < 0)
        return false;
    uint64_t now = uv_hrtime(), delay = (uint64_t)(q->call.retry_after_s * 1e9);
    if (now + delay >= q->deadline_ns || now + delay >= r->stop_ns) return false;
    /* An image request whose SLO deadline will have passed by then has missed it: sent with
     * weft's extension it would only be refused again, so the refusal stands. */
    const wf_loadgen_record *rec = &r->res->records[q->idx];
    const wf_workload_class *c = r->o->image && r->o->slo_ext ? image_class(r, rec) : NULL;
    if (c && isfinite(wf_workload_class_deadline_ms(c)) &&
        (double)(now + delay - rec->t_arrival_ns) / 1e6 >= wf_workload_class_deadline_ms(c))
        return false;
    if (!q->retry_timer_on) {
        if (uv_timer_init(&r->loop, &q->retry_timer) != 0) return false;
        q->retry_timer_on = true;
    }
    q->retry_timer.data = q;
    r->res->records[q->idx].retries++;
    if (q->prev) q->prev->next = q->next;
    else r->head = q->next;
    if (q->next) q->next->prev = q->prev;
    q->prev = q->next = NULL;
    /* libuv counts in whole milliseconds of a cached loop time: refresh it and wait one
     * millisecond more, so the request is never re-sent before its Retry-After has passed. */
    uv_update_time(&r->loop);
    uv_timer_start(&q->retry_timer, on_retry, (delay + 999999) / 1000000 + 1, 0);
    return true;
}

static void rq_on_done(wf_loadgen_call *call, wf_status st, const char *msg) {
    req *q = call->ud;
    if (maybe_retry(q, st)) return;
    finish_req(q, st, msg);
}

static void finish_req(req *q, wf_status st, const char *msg) {
    run *r = q->run;
    wf_loadgen_record *rec = &r->res->records[q->idx];
    rec->t_end_ns = uv_hrtime();
    if (st == WF_OK) {
        if (q->event_stream) {
            if (q->stream_error) rec->outcome = WF_LOADGEN_STREAM_ERROR;
            else rec->outcome = WF_LOADGEN_OK;
            if (r->o->image && rec->outcome == WF_LOADGEN_OK &&
                rec->images != (uint32_t)r->o->image->n) {
                rec->outcome = WF_LOADGEN_STREAM_ERROR;
                set_error(rec, "stream ended with %u images, asked %d", rec->images, r->o->image->n);
            }
            if (rec->tokens_estimated) rec->output_tokens = rec->n_chunks;
        } else {
            finish_plain(q, rec);
        }
    } else {
        rec->outcome = st == WF_ETIMEDOUT ? WF_LOADGEN_TIMEOUT
                       : st == WF_ECANCELLED ? WF_LOADGEN_CANCELLED
                                             : WF_LOADGEN_TRANSPORT;
        set_error(rec, "%s", msg);
    }
    if (rec->outcome != WF_LOADGEN_OK) r->failed++;
    if (rec->t_end_ns > r->t_last_end) r->t_last_end = rec->t_end_ns;
    if (q->prev) q->prev->next = q->next;
    else if (r->head == q) r->head = q->next; /* a request waiting to retry is off the list */
    if (q->next) q->next->prev = q->prev;
    r->inflight--;
    req_free(q);
    try_issue(r);
    maybe_finish(r);
}

/* The request bytes of item idx sent at now_ns. An image request gets what is left of its
 * deadline then: one held back by --max-concurrency or waiting out a Retry-After has already
 * spent part of it. NULL on ENOMEM. */
static char *request_bytes(run *r, size_t idx, uint64_t now_ns, size_t *len) {
    const wf_loadgen_prompt *p = &r->ds->items[idx];
    const wf_loadgen_record *rec = &r->res->records[idx];
    char *body;
    if (r->o->image) {
        const wf_workload_class *c = image_class(r, rec);
        double deadline = c ? wf_workload_class_deadline_ms(c) : NAN;
        /* Sent late (a slow timer, a busy loop): the deadline is still sent, at its minimum,
         * and the server may refuse at once; leaving it out would mean "no deadline". */
        if (isfinite(deadline)) deadline -= (double)(now_ns - rec->t_arrival_ns) / 1e6;
        if (isfinite(deadline) && deadline < 1) deadline = 1;
        body = wf_loadgen_image_build_body(r->o->image, r->o->model, p,
                                           isfinite(deadline) ? deadline : 0, r->o->slo_ext,
                                           r->o->stream, r->o->extra_body);
    } else {
        body = wf_loadgen_build_body(r->o, p);
    }
    char *bytes = body ? build_request(r->o, "POST", r->o->target.path, body, len) : NULL;
    free(body);
    return bytes;
}

static void issue(run *r, size_t idx) {
    const wf_loadgen_prompt *p = &r->ds->items[idx];
    wf_loadgen_record *rec = &r->res->records[idx];
    rec->index = (uint32_t)idx;
    rec->slo_class = p->slo_class;
    rec->expected_input = p->input_tokens;
    rec->expected_output = p->output_tokens;
    rec->input_tokens = p->input_tokens;
    rec->tokens_estimated = true;
    r->issued++;
    rec->t_start_ns = uv_hrtime();
    if (rec->t_arrival_ns == 0 || rec->t_arrival_ns > rec->t_start_ns)
        rec->t_arrival_ns = rec->t_start_ns;
    req *q = calloc(1, sizeof *q);
    size_t len = 0;
    if (q) q->bytes = request_bytes(r, idx, rec->t_start_ns, &len);
    if (!q || !q->bytes) {
        rec->outcome = WF_LOADGEN_TRANSPORT;
        rec->t_end_ns = rec->t_start_ns;
        set_error(rec, "out of memory building the request");
        r->failed++;
        if (q) req_free(q);
        return;
    }
    q->run = r;
    q->idx = idx;
    wf_loadgen_sse_init(&q->sse, on_sse_event, q);
    q->deadline_ns = rec->t_start_ns + (uint64_t)(r->o->timeout_s * 1e9);
    q->call.data = q->bytes;
    q->call.len = len;
    q->call.on_headers = rq_on_headers;
    q->call.on_body = rq_on_body;
    q->call.on_done = rq_on_done;
    q->call.ud = q;
    q->next = r->head;
    if (r->head) r->head->prev = q;
    r->head = q;
    r->inflight++;
    wf_loadgen_client_start(&r->client, &q->call);
}

static void try_issue(run *r) {
    if (r->in_issue) { /* rq_on_done fired inside issue(): the outer loop goes on */
        r->issue_again = true;
        return;
    }
    r->in_issue = true;
    do {
        r->issue_again = false;
        const wf_loadgen_run_opts *o = r->o;
        while (!r->stopping && r->issued < o->num_requests) {
            if (o->mode == WF_LOADGEN_CLOSED) {
                if (r->inflight >= (size_t)o->concurrency) break;
            } else {
                if (r->issued >= r->n_arrived) break;
                if (o->max_concurrency > 0 && r->inflight >= (size_t)o->max_concurrency) break;
            }
            issue(r, r->issued);
        }
    } while (r->issue_again);
    r->in_issue = false;
    if (r->issued >= r->o->num_requests && !r->res->stop_reason) r->res->stop_reason = "count";
}

static void close_cb(uv_handle_t *h) { (void)h; }

static void maybe_finish(run *r) {
    if (r->finished || r->in_issue) return;
    bool no_more = r->stopping || r->issued >= r->o->num_requests;
    if (!no_more || r->inflight > 0) return;
    r->finished = true;
    if (r->o->progress) {
        printf("\r%*s\r", r->progress_width, "");
        fflush(stdout);
    }
    uv_timer_stop(&r->arrival_timer);
    uv_timer_stop(&r->tick);
    uv_signal_stop(&r->sigint);
    wf_loadgen_client_close(&r->client);
    uv_close((uv_handle_t *)&r->arrival_timer, close_cb);
    uv_close((uv_handle_t *)&r->tick, close_cb);
    uv_close((uv_handle_t *)&r->sigint, close_cb);
}

static void schedule_arrival(run *r);

/* Request n_arrived arrives now (at next_arrival_s); the time of the one after it is drawn. */
static void arrive(run *r) {
    r->res->records[r->n_arrived].t_arrival_ns = r->t0 + (uint64_t)(r->next_arrival_s * 1e9);
    r->n_arrived++;
    if (!r->o->schedule) r->next_arrival_s += wf_loadgen_arrival_next_gap(&r->arr);
    else if (r->n_arrived < r->o->num_requests) r->next_arrival_s = r->o->schedule[r->n_arrived];
}

static void on_arrival(uv_timer_t *t) {
    run *r = t->data;
    double now = now_s(r);
    while (r->n_arrived < r->o->num_requests && r->next_arrival_s <= now) arrive(r);
    try_issue(r);
    schedule_arrival(r);
    maybe_finish(r);
}

static void schedule_arrival(run *r) {
    if (r->stopping || r->n_arrived >= r->o->num_requests) return;
    double wait = r->next_arrival_s - now_s(r);
    uint64_t ms = wait > 0 ? (uint64_t)ceil(wait * 1000.0) : 0;
    uv_timer_start(&r->arrival_timer, on_arrival, ms, 0);
}

static void stop_issuing(run *r, const char *why) {
    if (r->stopping) return;
    r->stopping = true;
    if (!r->res->stop_reason || r->issued < r->o->num_requests) r->res->stop_reason = why;
    uv_timer_stop(&r->arrival_timer);
    r->grace_ns = uv_hrtime() + (uint64_t)(r->o->grace_s * 1e9);
}

static void draw_progress(run *r) {
    size_t n = r->o->num_requests, done = r->issued - r->inflight;
    int width = 30;
    int fill = n ? (int)((double)done / (double)n * width) : 0;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    int w = printf("\r[%s] %zu/%zu done, %zu in flight, %zu failed, %.1f/%.0f s", bar, done, n,
                   r->inflight, r->failed, now_s(r), r->o->duration_s);
    if (w > r->progress_width) r->progress_width = w;
    fflush(stdout);
}

static void on_tick(uv_timer_t *t) {
    run *r = t->data;
    uint64_t now = uv_hrtime();
    if (!r->stopping && now >= r->stop_ns) stop_issuing(r, "duration");
    if (r->stopping && now >= r->grace_ns) {
        while (r->head) wf_loadgen_client_abort(&r->client, &r->head->call, WF_ECANCELLED);
    }
    /* Per-request timeouts; abort() unlinks the request, so restart the scan after each. */
    for (req *q = r->head; q;) {
        if (now >= q->deadline_ns) {
            wf_loadgen_client_abort(&r->client, &q->call, WF_ETIMEDOUT);
            q = r->head;
            continue;
        }
        q = q->next;
    }
    if (!r->finished && r->o->progress && ++r->ticks % 4 == 0) draw_progress(r);
    maybe_finish(r);
}

static void on_sigint(uv_signal_t *s, int signum) {
    run *r = s->data;
    (void)signum;
    stop_issuing(r, "interrupted");
    r->grace_ns = uv_hrtime(); /* a second of patience is not what ^C means */
    while (r->head) wf_loadgen_client_abort(&r->client, &r->head->call, WF_ECANCELLED);
    maybe_finish(r);
}

void wf_loadgen_run_result_free(wf_loadgen_run_result *res) {
    for (size_t i = 0; i < res->n; i++) wf_loadgen_record_free(&res->records[i]);
    free(res->records);
    memset(res, 0, sizeof *res);
}

wf_status wf_loadgen_run(const wf_loadgen_run_opts *o, const wf_loadgen_dataset *ds,
                         wf_loadgen_run_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    if (o->num_requests == 0 || o->num_requests > WF_LOADGEN_MAX_REQUESTS) {
        wf_errorf(err, errlen, "number of requests must be 1..%d", WF_LOADGEN_MAX_REQUESTS);
        return WF_EINVAL;
    }
    if (!(o->duration_s > 0) || o->duration_s > WF_LOADGEN_MAX_DURATION_S) {
        wf_errorf(err, errlen, "duration must be > 0 and <= %.0f s", WF_LOADGEN_MAX_DURATION_S);
        return WF_EINVAL;
    }
    if (!(o->timeout_s > 0) || !(o->grace_s >= 0) || o->grace_s > WF_LOADGEN_MAX_DURATION_S ||
        o->timeout_s > WF_LOADGEN_MAX_DURATION_S) {
        wf_errorf(err, errlen, "timeout must be > 0 and grace >= 0 (both <= %.0f s)",
                WF_LOADGEN_MAX_DURATION_S);
        return WF_EINVAL;
    }
    if (o->mode == WF_LOADGEN_CLOSED && (o->concurrency < 1 || o->concurrency > WF_LOADGEN_MAX_CONNS)) {
        wf_errorf(err, errlen, "concurrency must be 1..%d", WF_LOADGEN_MAX_CONNS);
        return WF_EINVAL;
    }
    if (o->mode == WF_LOADGEN_OPEN && !(o->rate > 0)) {
        wf_errorf(err, errlen, "rate must be > 0 (or inf)");
        return WF_EINVAL;
    }
    if (!ds || ds->n < o->num_requests) {
        wf_errorf(err, errlen, "dataset has fewer items than requests");
        return WF_EINVAL;
    }
    res->records = calloc(o->num_requests, sizeof *res->records);
    if (!res->records) {
        wf_errorf(err, errlen, "out of memory for %zu records", o->num_requests);
        return WF_ENOMEM;
    }
    res->n = o->num_requests; /* all NOT_SENT (0) until issued */
    run *r = calloc(1, sizeof *r);
    if (!r) {
        wf_loadgen_run_result_free(res);
        return WF_ENOMEM;
    }
    r->o = o;
    r->ds = ds;
    r->res = res;
    r->err = err;
    r->errlen = errlen;
    wf_status st = WF_OK;
    if (uv_loop_init(&r->loop) != 0) {
        wf_errorf(err, errlen, "uv_loop_init failed");
        st = WF_EIO;
        goto fail_loop;
    }
    size_t max_conns = o->max_conns;
    if (max_conns == 0) {
        max_conns = o->mode == WF_LOADGEN_CLOSED ? (size_t)o->concurrency
                    : o->max_concurrency > 0     ? (size_t)o->max_concurrency
                                                 : WF_LOADGEN_MAX_CONNS;
    }
    if (max_conns > WF_LOADGEN_MAX_CONNS) max_conns = WF_LOADGEN_MAX_CONNS;
    /* Stay inside the descriptor limit (raised to the hard limit when allowed): past it every
     * connect would fail with EMFILE and be counted against the server. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max && rl.rlim_cur < max_conns + 64) {
            rlim_t want = max_conns + 64 < rl.rlim_max ? max_conns + 64 : rl.rlim_max;
            struct rlimit nl = {want, rl.rlim_max};
            if (setrlimit(RLIMIT_NOFILE, &nl) == 0) rl.rlim_cur = want;
        }
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max_conns + 32)
            max_conns = rl.rlim_cur > 64 ? (size_t)rl.rlim_cur - 32 : 32;
    }
    st = wf_loadgen_client_init(&r->client, &r->loop, (const struct sockaddr *)&o->target.addr,
                                max_conns);
    if (st != WF_OK) {
        wf_errorf(err, errlen, "unsupported address family");
        goto fail_client;
    }
    uv_timer_init(&r->loop, &r->arrival_timer);
    uv_timer_init(&r->loop, &r->tick);
    uv_signal_init(&r->loop, &r->sigint);
    r->arrival_timer.data = r->tick.data = r->sigint.data = r;
    wf_loadgen_arrival_init(&r->arr, o->rate, o->burstiness, o->seed ^ 0x61727269766cULL);
    r->t0 = uv_hrtime();
    res->t0_ns = r->t0;
    r->stop_ns = r->t0 + (uint64_t)(o->duration_s * 1e9);
    r->grace_ns = UINT64_MAX;
    uv_signal_start(&r->sigint, on_sigint, SIGINT);
    uv_timer_start(&r->tick, on_tick, TICK_MS, TICK_MS);
    if (o->mode == WF_LOADGEN_OPEN && o->schedule) {
        r->next_arrival_s = o->schedule[0]; /* a profile's clock starts with the run */
        while (r->n_arrived < o->num_requests && r->next_arrival_s <= 0) arrive(r);
        try_issue(r);
        schedule_arrival(r);
    } else if (o->mode == WF_LOADGEN_OPEN) {
        arrive(r); /* the first request goes out at once, as in vLLM */
        try_issue(r);
        schedule_arrival(r);
    } else {
        try_issue(r);
    }
    maybe_finish(r);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    res->issued = r->issued;
    res->connections = r->client.n_connects;
    uint64_t end = r->t_last_end > r->t0 ? r->t_last_end : uv_hrtime();
    res->duration_s = (double)(end - r->t0) / 1e9;
    if (!res->stop_reason) res->stop_reason = r->stopping ? "duration" : "count";
    if (uv_loop_close(&r->loop) != 0) { /* a handle leaked: a bug, but the data is good */
        fprintf(stderr, "weft-bench: warning: event loop did not close cleanly\n");
    }
    free(r);
    return WF_OK;
fail_client:
    uv_loop_close(&r->loop);
fail_loop:
    free(r);
    wf_loadgen_run_result_free(res);
    return st;
}

/* ---- one-off GET ------------------------------------------------------------------------------ */

typedef struct get_ctx {
    wf_loadgen_call call;
    uv_timer_t timer;
    wf_loadgen_client *client;
    int status;
    char *body;
    size_t len, cap;
    wf_status st;
    bool done;
} get_ctx;

static void get_headers(wf_loadgen_call *call, int status, bool es) {
    get_ctx *g = call->ud;
    (void)es;
    g->status = status;
}

static void get_body(wf_loadgen_call *call, const char *p, size_t n, uint64_t t) {
    get_ctx *g = call->ud;
    (void)t;
    if (g->len + n + 1 > g->cap) {
        size_t ncap = g->cap ? g->cap : 4096;
        while (ncap < g->len + n + 1) ncap *= 2;
        if (ncap > MAX_PLAIN_BODY) return;
        char *nb = realloc(g->body, ncap);
        if (!nb) return;
        g->body = nb;
        g->cap = ncap;
    }
    memcpy(g->body + g->len, p, n);
    g->len += n;
    g->body[g->len] = '\0';
}

static void get_done(wf_loadgen_call *call, wf_status st, const char *msg) {
    get_ctx *g = call->ud;
    (void)msg;
    g->st = st;
    g->done = true;
    uv_timer_stop(&g->timer);
    uv_close((uv_handle_t *)&g->timer, close_cb);
    wf_loadgen_client_close(g->client);
}

static void get_timeout(uv_timer_t *t) {
    get_ctx *g = t->data;
    if (!g->done) wf_loadgen_client_abort(g->client, &g->call, WF_ETIMEDOUT);
}

wf_status wf_loadgen_http_get(const wf_loadgen_target *t, const char *path, const char *api_key,
                              double timeout_s, int *status, char **body, size_t *len) {
    *status = 0;
    *body = NULL;
    *len = 0;
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0) return WF_EIO;
    wf_loadgen_client cl;
    wf_status st = wf_loadgen_client_init(&cl, &loop, (const struct sockaddr *)&t->addr, 1);
    if (st != WF_OK) {
        uv_loop_close(&loop);
        return st;
    }
    wf_loadgen_run_opts o;
    wf_loadgen_run_opts_default(&o);
    o.target = *t;
    o.api_key = api_key;
    o.stream = false;
    size_t n = 0;
    char *bytes = build_request(&o, "GET", path, NULL, &n);
    if (!bytes) {
        uv_loop_close(&loop);
        return WF_ENOMEM;
    }
    get_ctx g = {0};
    g.client = &cl;
    g.st = WF_EIO;
    uv_timer_init(&loop, &g.timer);
    g.timer.data = &g;
    uv_timer_start(&g.timer, get_timeout, (uint64_t)(timeout_s * 1000), 0);
    g.call.data = bytes;
    g.call.len = n;
    g.call.on_headers = get_headers;
    g.call.on_body = get_body;
    g.call.on_done = get_done;
    g.call.ud = &g;
    wf_loadgen_client_start(&cl, &g.call);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    free(bytes);
    *status = g.status;
    *body = g.body;
    *len = g.len;
    return g.st;
}
