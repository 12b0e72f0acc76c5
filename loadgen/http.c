/* Keep-alive HTTP/1.1 client connections for weft-bench (see http.h). */
#include "loadgen/http.h"

#include <llhttp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define READ_BUF_BYTES 65536

typedef enum conn_state { CONN_CONNECTING, CONN_BUSY, CONN_IDLE, CONN_CLOSING } conn_state;

struct wf_loadgen_conn {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    llhttp_t parser;
    wf_loadgen_client *client;
    wf_loadgen_call *call;
    conn_state state;
    bool reused;          /* carried a call before the current one */
    bool message_done;    /* p_on_message_complete fired for the current call */
    bool hdr_is_ctype;    /* the header being parsed is Content-Type */
    bool hdr_is_retry;    /* ... Retry-After */
    bool event_stream;
    char ctype[64];
    size_t ctype_len;
    wf_loadgen_conn *next_idle;
    wf_loadgen_conn *prev_all, *next_all;
    char rbuf[READ_BUF_BYTES];
    uint64_t t_read;
};

static llhttp_settings_t g_settings;
static bool g_settings_ready;

static void conn_close(wf_loadgen_conn *c);
static void conn_dispatch(wf_loadgen_client *cl);

/* ---- call completion ---------------------------------------------------------------------- */

static void finish_call(wf_loadgen_conn *c, wf_status st, const char *msg) {
    wf_loadgen_call *call = c->call;
    if (!call) return;
    c->call = NULL;
    call->conn = NULL;
    call->on_done(call, st, msg);
}

static void idle_remove(wf_loadgen_client *cl, wf_loadgen_conn *c) {
    for (wf_loadgen_conn **p = &cl->idle; *p; p = &(*p)->next_idle) {
        if (*p == c) {
            *p = c->next_idle;
            c->next_idle = NULL;
            return;
        }
    }
}

/* A call failed on connection c (which is being closed). Retry once when a reused keep-alive
 * connection died before answering; otherwise report. */
static void fail_call(wf_loadgen_conn *c, wf_status st, const char *msg) {
    wf_loadgen_call *call = c->call;
    if (!call) return;
    if (c->reused && !call->got_response && !call->retried && st != WF_ETIMEDOUT &&
        st != WF_ECANCELLED && !c->client->closing) {
        c->call = NULL;
        call->conn = NULL;
        call->retried = true;
        /* Go to the head of the queue: it was already admitted once. */
        call->waiting = true;
        call->next_wait = c->client->wait_head;
        c->client->wait_head = call;
        if (!c->client->wait_tail) c->client->wait_tail = call;
        return;
    }
    finish_call(c, st, msg);
}

/* ---- llhttp callbacks -------------------------------------------------------------------- */

/* Appends a piece of a header name or value to c->ctype, truncating at its size (a name or
 * value longer than that is not one we compare). */
static void append_header_piece(wf_loadgen_conn *c, const char *at, size_t len) {
    size_t k = len;
    if (c->ctype_len + k > sizeof c->ctype - 1) k = sizeof c->ctype - 1 - c->ctype_len;
    memcpy(c->ctype + c->ctype_len, at, k);
    c->ctype_len += k;
    c->ctype[c->ctype_len] = '\0';
}

static int p_on_header_value(llhttp_t *p, const char *at, size_t len) {
    wf_loadgen_conn *c = p->data;
    if (!c->hdr_is_ctype && !c->hdr_is_retry) return 0;
    append_header_piece(c, at, len);
    return 0;
}

static int p_on_header_value_complete(llhttp_t *p) {
    wf_loadgen_conn *c = p->data;
    if (c->hdr_is_ctype && strncasecmp(c->ctype, "text/event-stream", 17) == 0)
        c->event_stream = true;
    if (c->hdr_is_retry && c->call) { /* delta-seconds; an HTTP-date is ignored */
        char *end = NULL;
        double v = strtod(c->ctype, &end);
        if (end != c->ctype && v >= 0) c->call->retry_after_s = v;
    }
    c->hdr_is_retry = false;
    c->hdr_is_ctype = false;
    c->ctype_len = 0;
    c->ctype[0] = '\0';
    return 0;
}

/* llhttp hands header names in pieces; we only need to know whether it is Content-Type, so
 * collect the name into ctype (reset per header) and compare when the name is complete. */
static int p_on_header_field_data(llhttp_t *p, const char *at, size_t len) {
    wf_loadgen_conn *c = p->data;
    append_header_piece(c, at, len);
    return 0;
}

static int p_on_header_field_done(llhttp_t *p) {
    wf_loadgen_conn *c = p->data;
    c->hdr_is_ctype = strcasecmp(c->ctype, "content-type") == 0;
    c->hdr_is_retry = strcasecmp(c->ctype, "retry-after") == 0;
    c->ctype_len = 0;
    c->ctype[0] = '\0';
    return 0;
}

static int p_on_message_begin(llhttp_t *p) {
    wf_loadgen_conn *c = p->data;
    c->event_stream = false;
    c->hdr_is_ctype = false;
    c->hdr_is_retry = false;
    if (c->call) c->call->retry_after_s = -1;
    c->ctype_len = 0;
    c->ctype[0] = '\0';
    return 0;
}

static int p_on_headers_complete(llhttp_t *p) {
    wf_loadgen_conn *c = p->data;
    if (c->call && c->call->on_headers)
        c->call->on_headers(c->call, (int)p->status_code, c->event_stream);
    return 0;
}

static int p_on_body(llhttp_t *p, const char *at, size_t len) {
    wf_loadgen_conn *c = p->data;
    if (c->call && c->call->on_body) c->call->on_body(c->call, at, len, c->t_read);
    return 0;
}

static int p_on_message_complete(llhttp_t *p) {
    wf_loadgen_conn *c = p->data;
    c->message_done = true;
    return HPE_PAUSED; /* finish the call after llhttp_execute returns, never inside it */
}

static void settings_init(void) {
    if (g_settings_ready) return;
    llhttp_settings_init(&g_settings);
    g_settings.on_message_begin = p_on_message_begin;
    g_settings.on_header_field = p_on_header_field_data;
    g_settings.on_header_field_complete = p_on_header_field_done;
    g_settings.on_header_value = p_on_header_value;
    g_settings.on_header_value_complete = p_on_header_value_complete;
    g_settings.on_headers_complete = p_on_headers_complete;
    g_settings.on_body = p_on_body;
    g_settings.on_message_complete = p_on_message_complete;
    g_settings_ready = true;
}

/* ---- connection life cycle ----------------------------------------------------------------- */

static void on_close(uv_handle_t *h) {
    wf_loadgen_conn *c = h->data;
    wf_loadgen_client *cl = c->client;
    if (c->prev_all) c->prev_all->next_all = c->next_all;
    else cl->all = c->next_all;
    if (c->next_all) c->next_all->prev_all = c->prev_all;
    cl->n_conns--;
    free(c);
    conn_dispatch(cl); /* a slot opened up */
}

static void conn_close(wf_loadgen_conn *c) {
    if (c->state == CONN_CLOSING) return;
    if (c->state == CONN_IDLE) idle_remove(c->client, c);
    c->state = CONN_CLOSING;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

/* The response ended: report it, then keep the connection or close it. */
static void complete_message(wf_loadgen_conn *c) {
    bool keep = llhttp_should_keep_alive(&c->parser) && !c->client->closing;
    c->message_done = false;
    if (!keep) conn_close(c);
    else {
        c->state = CONN_IDLE;
        c->reused = true;
        c->next_idle = c->client->idle;
        c->client->idle = c;
    }
    finish_call(c, WF_OK, "ok");
    conn_dispatch(c->client);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    wf_loadgen_conn *c = h->data;
    (void)suggested;
    buf->base = c->rbuf;
    buf->len = sizeof c->rbuf;
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
    wf_loadgen_conn *c = s->data;
    if (n == 0) return;
    if (n < 0) {
        if (c->call && n == UV_EOF) {
            /* A response delimited by the close of the connection ends here. */
            llhttp_errno_t fe = llhttp_finish(&c->parser);
            if ((fe == HPE_OK || fe == HPE_PAUSED) && c->message_done) {
                c->message_done = false;
                conn_close(c);
                finish_call(c, WF_OK, "ok");
                return;
            }
        }
        conn_close(c);
        fail_call(c, n == UV_EOF ? WF_ECLOSED : WF_EIO,
                  n == UV_EOF ? "server closed the connection" : uv_strerror((int)n));
        return;
    }
    if (c->state != CONN_BUSY || !c->call) { /* bytes nobody asked for: drop the connection */
        conn_close(c);
        return;
    }
    c->call->got_response = true;
    c->t_read = uv_hrtime();
    llhttp_errno_t e = llhttp_execute(&c->parser, buf->base, (size_t)n);
    if (e == HPE_PAUSED && c->message_done) {
        llhttp_resume(&c->parser);
        complete_message(c);
        return;
    }
    if (e != HPE_OK) {
        char msg[160];
        snprintf(msg, sizeof msg, "bad HTTP response: %s", llhttp_get_error_reason(&c->parser));
        conn_close(c);
        finish_call(c, WF_EPROTO, msg);
    }
}

static void write_cb(uv_write_t *w, int status) {
    /* Closing a stream cancels its writes before close_cb, so c is still alive here. */
    wf_loadgen_conn *c = w->data;
    free(w);
    if (status < 0 && c->state != CONN_CLOSING) {
        conn_close(c);
        fail_call(c, WF_EIO, uv_strerror(status));
    }
}

static void conn_send(wf_loadgen_conn *c, wf_loadgen_call *call) {
    c->call = call;
    call->conn = c;
    c->state = CONN_BUSY;
    c->message_done = false;
    llhttp_init(&c->parser, HTTP_RESPONSE, &g_settings);
    c->parser.data = c;
    uv_buf_t b = uv_buf_init((char *)call->data, (unsigned)call->len);
    /* One write request per send: the previous one's callback may still be queued when the
     * response to it has already arrived. */
    uv_write_t *w = malloc(sizeof *w);
    if (!w) {
        conn_close(c);
        finish_call(c, WF_ENOMEM, "out of memory for a write");
        return;
    }
    w->data = c;
    int rc = uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, write_cb);
    if (rc < 0) {
        free(w);
        conn_close(c);
        fail_call(c, WF_EIO, uv_strerror(rc));
    }
}

static void connect_cb(uv_connect_t *req, int status) {
    wf_loadgen_conn *c = req->data;
    if (c->state == CONN_CLOSING) return;
    if (status < 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "connect: %s", uv_strerror(status));
        conn_close(c);
        finish_call(c, WF_EIO, msg);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    int rc = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    if (rc < 0) {
        conn_close(c);
        finish_call(c, WF_EIO, uv_strerror(rc));
        return;
    }
    conn_send(c, c->call);
}

/* Opens a new connection for call. */
static void conn_open(wf_loadgen_client *cl, wf_loadgen_call *call) {
    wf_loadgen_conn *c = calloc(1, sizeof *c);
    if (!c) {
        call->on_done(call, WF_ENOMEM, "out of memory for a connection");
        return;
    }
    c->client = cl;
    c->tcp.data = c;
    c->connect_req.data = c;
    int rc = uv_tcp_init(cl->loop, &c->tcp);
    if (rc < 0) {
        free(c);
        call->on_done(call, WF_EIO, uv_strerror(rc));
        return;
    }
    c->next_all = cl->all;
    if (cl->all) cl->all->prev_all = c;
    cl->all = c;
    cl->n_conns++;
    cl->n_connects++;
    c->state = CONN_CONNECTING;
    c->call = call;
    call->conn = c;
    rc = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&cl->addr, connect_cb);
    if (rc < 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "connect: %s", uv_strerror(rc));
        conn_close(c);
        finish_call(c, WF_EIO, msg);
    }
}

/* Hands waiting calls to idle connections or new ones while there is room. */
static void conn_dispatch(wf_loadgen_client *cl) {
    while (cl->wait_head && !cl->closing) {
        wf_loadgen_call *call = cl->wait_head;
        bool fresh = call->retried; /* a retry never goes back to a reused connection */
        if (cl->idle && !fresh) {
            wf_loadgen_conn *c = cl->idle;
            cl->idle = c->next_idle;
            c->next_idle = NULL;
            cl->wait_head = call->next_wait;
            if (!cl->wait_head) cl->wait_tail = NULL;
            call->waiting = false;
            conn_send(c, call);
            continue;
        }
        if (cl->n_conns >= cl->max_conns) {
            if (!cl->idle) return;
            conn_close(cl->idle); /* make room for the fresh connection a retry needs */
            return;
        }
        cl->wait_head = call->next_wait;
        if (!cl->wait_head) cl->wait_tail = NULL;
        call->waiting = false;
        conn_open(cl, call);
    }
}

/* ---- public API ----------------------------------------------------------------------------- */

wf_status wf_loadgen_client_init(wf_loadgen_client *cl, uv_loop_t *loop,
                                 const struct sockaddr *addr, size_t max_conns) {
    memset(cl, 0, sizeof *cl);
    settings_init();
    if (addr->sa_family == AF_INET) memcpy(&cl->addr, addr, sizeof(struct sockaddr_in));
    else if (addr->sa_family == AF_INET6) memcpy(&cl->addr, addr, sizeof(struct sockaddr_in6));
    else return WF_EINVAL;
    cl->loop = loop;
    cl->max_conns = max_conns ? max_conns : 1;
    return WF_OK;
}

void wf_loadgen_client_start(wf_loadgen_client *cl, wf_loadgen_call *call) {
    call->conn = NULL;
    call->retry_after_s = -1;
    call->got_response = false;
    call->retried = false;
    call->next_wait = NULL;
    if (cl->closing) {
        call->on_done(call, WF_ECANCELLED, "client closed");
        return;
    }
    call->waiting = true;
    if (cl->wait_tail) cl->wait_tail->next_wait = call;
    else cl->wait_head = call;
    cl->wait_tail = call;
    conn_dispatch(cl);
}

void wf_loadgen_client_abort(wf_loadgen_client *cl, wf_loadgen_call *call, wf_status why) {
    const char *msg = why == WF_ETIMEDOUT ? "request timed out" : "request cancelled";
    if (call->waiting) {
        wf_loadgen_call *prev = NULL;
        for (wf_loadgen_call *w = cl->wait_head; w; prev = w, w = w->next_wait) {
            if (w != call) continue;
            if (prev) prev->next_wait = w->next_wait;
            else cl->wait_head = w->next_wait;
            if (cl->wait_tail == w) cl->wait_tail = prev;
            break;
        }
        call->waiting = false;
        call->on_done(call, why, msg);
        return;
    }
    wf_loadgen_conn *c = call->conn;
    if (!c) { /* started, neither waiting nor on a connection: only between retries */
        call->on_done(call, why, msg);
        return;
    }
    conn_close(c);
    finish_call(c, why, msg);
}

void wf_loadgen_client_close(wf_loadgen_client *cl) {
    cl->closing = true;
    while (cl->wait_head) {
        wf_loadgen_call *call = cl->wait_head;
        cl->wait_head = call->next_wait;
        call->waiting = false;
        call->on_done(call, WF_ECANCELLED, "client closed");
    }
    cl->wait_tail = NULL;
    for (wf_loadgen_conn *c = cl->all; c; c = c->next_all) {
        if (c->state == CONN_CLOSING) continue;
        conn_close(c);
        finish_call(c, WF_ECANCELLED, "client closed");
    }
}
