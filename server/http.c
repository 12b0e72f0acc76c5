/* HTTP/1.1 connections: bytes in through llhttp, one request handled at a time per connection
 * (pipelined requests wait, unparsed, until the previous response is complete), responses out
 * through a double buffer (one uv_write in flight, the next batch accumulating), so streaming a
 * token costs no allocation once the buffers have grown. */
#include "server/http.h"

#include <ctype.h>
#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#if defined(__linux__)
#include <linux/sockios.h> /* SIOCOUTQ */
#endif

#include "proto/base/log.h"

typedef struct buf {
    char *data;
    size_t len, cap;
} buf;

static int buf_reserve(buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

static int buf_append(buf *b, const char *data, size_t len) {
    if (buf_reserve(b, len) < 0) return -1;
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

static void buf_free(buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

#define MAX_HEADERS 128

typedef struct header_ref {
    size_t name, value; /* offsets into request.head, NUL-terminated strings */
} header_ref;

struct wf_http_request {
    wf_http_conn *conn;
    buf head;            /* url, then header names and values, each NUL-terminated */
    size_t url_len;      /* bytes of the url while it is being received */
    bool url_done;
    size_t path_off, query_off;
    header_ref headers[MAX_HEADERS];
    int n_headers;
    bool in_value;       /* the last header bytes received were a value */
    size_t header_bytes;
    buf body;
    char method[24];
    bool keep_alive;
    bool chunked_response; /* HTTP/1.1: stream with chunked encoding; 1.0: close-delimited */
    bool head_only;
    bool streaming;
    wf_http_abort_fn abort_fn;
    void *abort_user;
};

typedef enum conn_state { CONN_READING = 0, CONN_HANDLING, CONN_CLOSED } conn_state;

struct wf_http_conn {
    wf_http_server *srv;
    wf_http_conn *prev, *next;
    uv_tcp_t tcp;
    bool loopback;
    llhttp_t parser;
    buf in;
    size_t in_off;
    conn_state state;
    bool request_started;
    uint64_t request_start_ms, last_activity_ms;
    int err_status;
    const char *err_msg;
    wf_http_request req;
    bool busy;               /* process() is on the stack */
    bool close_requested;    /* carry out at the next safe point */
    bool close_after_flush;
    bool linger;             /* after the flush: half-close, then read and discard a while */
    bool lingering;          /* the write side is shut: input is discarded until EOF or limits */
    bool peer_eof;           /* the client half-closed: answer what arrived, then close */
    uint64_t linger_start_ms, write_start_ms;
    size_t linger_bytes;
    uv_shutdown_t sreq;
    bool reading;
    buf out_pending, out_inflight;
    bool writing;
    uv_write_t wreq;
    buf captured;            /* loopback output */
    char peer[64];
};

struct wf_http_server {
    uv_loop_t *loop;
    wf_http_limits lim;
    wf_http_handler_fn handler;
    void *user;
    wf_http_error_fn error_fn;
    void *error_user;
    uv_tcp_t listener;
    bool listening;
    uv_timer_t timer;
    bool timer_on;
    wf_http_conn *conns;
    int n_conns;
    int active_requests;
    bool stopping;
    bool freeing;
    int open_handles;        /* listener + timer + connections still closing */
    uint64_t manual_now;
    uint64_t refused_log_ms;  /* rate limit of the "refused" warning */
    unsigned refused_quiet;   /* refusals not logged since */
    llhttp_settings_t settings;
};

static void conn_close(wf_http_conn *c);
static void process(wf_http_conn *c);

void wf_http_limits_init(wf_http_limits *lim) {
    lim->max_header_bytes = 64 << 10;
    lim->max_body_bytes = 8 << 20;
    lim->idle_timeout_ms = 30000;
    lim->request_timeout_ms = 60000;
    lim->max_connections = 4096;
    lim->max_pipeline_bytes = 1 << 20;
    lim->max_output_bytes = 4 << 20;
    lim->write_timeout_ms = 30000;
    lim->linger_ms = 5000;
    lim->linger_bytes = 16 << 20;
}

static uint64_t now_ms(const wf_http_server *srv) {
    return srv->loop ? uv_now(srv->loop) : srv->manual_now;
}

const char *wf_http_status_text(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    }
    return "Unknown";
}

/* ---- output --------------------------------------------------------------------------- */

static void on_write(uv_write_t *w, int status);
static void finish_close(wf_http_conn *c);
static void update_reading(wf_http_conn *c);

static void flush(wf_http_conn *c) {
    if (c->writing || c->out_pending.len == 0 || c->state == CONN_CLOSED) return;
    buf tmp = c->out_inflight;
    c->out_inflight = c->out_pending;
    c->out_pending = tmp;
    c->out_pending.len = 0;
    uv_buf_t b = uv_buf_init(c->out_inflight.data, (unsigned)c->out_inflight.len);
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
        c->out_inflight.len = 0;
        conn_close(c);
        return;
    }
    c->writing = true;
    c->write_start_ms = now_ms(c->srv);
}

static void on_write(uv_write_t *w, int status) {
    wf_http_conn *c = w->data;
    c->writing = false;
    c->out_inflight.len = 0;
    if (c->state == CONN_CLOSED) return;
    if (status < 0) {
        conn_close(c); /* the peer is gone: aborts the request under way */
        return;
    }
    if (c->out_pending.len) flush(c);
    else if (c->close_after_flush) finish_close(c);
}

static void conn_write(wf_http_conn *c, const char *data, size_t len) {
    if (c->state == CONN_CLOSED || len == 0) return;
    if (c->loopback) {
        if (buf_append(&c->captured, data, len) < 0) conn_close(c);
        return;
    }
    /* A client that stops reading must not make the server buffer without bound: past the
     * limit the connection is closed, which aborts (cancels) the request under way. */
    if (c->state == CONN_HANDLING && c->req.streaming &&
        c->out_pending.len + c->out_inflight.len + len > c->srv->lim.max_output_bytes) {
        WF_LOG_WARN("http", NULL, "%s: closing: client not reading (%zu bytes unsent, limit %zu)",
                    c->peer, c->out_pending.len + c->out_inflight.len, c->srv->lim.max_output_bytes);
        conn_close(c);
        return;
    }
    if (buf_append(&c->out_pending, data, len) < 0) {
        conn_close(c);
        return;
    }
    flush(c);
}

static void on_shutdown(uv_shutdown_t *sr, int status) {
    wf_http_conn *c = sr->data;
    if (c->state == CONN_CLOSED) return;
    if (status < 0) conn_close(c);
}

/* Everything is written and the connection must end. A plain close() with unread request bytes
 * in the kernel makes it send a reset, and the client may lose the response it has not read yet
 * (a 413 while it is still uploading). So, like nginx's lingering close: shut the write side
 * (the client reads the response, then EOF), keep reading and discarding until the client
 * closes, for at most linger_ms and linger_bytes. */
static void finish_close(wf_http_conn *c) {
    if (!c->linger || c->loopback || c->peer_eof || c->srv->lim.linger_ms <= 0) {
        conn_close(c);
        return;
    }
    c->lingering = true;
    c->linger_start_ms = now_ms(c->srv);
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        conn_close(c);
        return;
    }
    update_reading(c);
}

/* Closes once everything written so far has reached the socket. */
static void close_when_flushed(wf_http_conn *c) {
    if (c->loopback || (!c->writing && c->out_pending.len == 0)) finish_close(c);
    else c->close_after_flush = true;
}

/* ---- errors the layer answers itself ---------------------------------------------------- */

static void send_layer_error(wf_http_conn *c, int status, const char *message) {
    char body[512];
    const char *ctype = "text/plain; charset=utf-8";
    size_t n;
    if (c->srv->error_fn) n = c->srv->error_fn(status, message, body, sizeof body, &ctype, c->srv->error_user);
    else n = (size_t)snprintf(body, sizeof body, "%s\n", message);
    if (n >= sizeof body) n = sizeof body - 1;
    char head[512];
    int h = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     status, wf_http_status_text(status), ctype, n,
                     status == 503 ? "Retry-After: 1\r\n" : "");
    conn_write(c, head, (size_t)h);
    conn_write(c, body, n);
    c->linger = true; /* the client may still be sending the rest of the request */
    close_when_flushed(c);
}

/* ---- llhttp callbacks ------------------------------------------------------------------- */

static int fail_with(wf_http_conn *c, int status, const char *msg) {
    c->err_status = status;
    c->err_msg = msg;
    return HPE_USER;
}

static int count_header_bytes(wf_http_conn *c, size_t len) {
    c->req.header_bytes += len;
    if (c->req.header_bytes > c->srv->lim.max_header_bytes)
        return fail_with(c, 431, "request header fields too large");
    return 0;
}

static int on_message_begin(llhttp_t *p) {
    wf_http_conn *c = p->data;
    if (!c->request_started) {
        c->request_started = true;
        c->request_start_ms = now_ms(c->srv);
    }
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len) {
    wf_http_conn *c = p->data;
    if (count_header_bytes(c, len)) return HPE_USER;
    if (buf_append(&c->req.head, at, len) < 0) return fail_with(c, 503, "out of memory");
    c->req.url_len += len;
    return 0;
}

static int on_url_complete(llhttp_t *p) {
    wf_http_conn *c = p->data;
    wf_http_request *r = &c->req;
    if (buf_append(&r->head, "", 1) < 0) return fail_with(c, 503, "out of memory");
    r->url_done = true;
    /* Split path and query in place: "path\0query\0" (query_off points at "" when absent). */
    char *url = r->head.data;
    char *q = memchr(url, '?', r->url_len);
    r->path_off = 0;
    if (q) {
        *q = '\0';
        r->query_off = (size_t)(q - url) + 1;
    } else {
        r->query_off = r->url_len; /* the NUL just appended */
    }
    return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
    wf_http_conn *c = p->data;
    wf_http_request *r = &c->req;
    if (count_header_bytes(c, len)) return HPE_USER;
    if (r->in_value || r->n_headers == 0 || r->headers[r->n_headers - 1].value != (size_t)-1) {
        /* a new header starts */
        if (r->n_headers == MAX_HEADERS) return fail_with(c, 431, "too many header fields");
        r->headers[r->n_headers].name = r->head.len;
        r->headers[r->n_headers].value = (size_t)-1;
        r->n_headers++;
        r->in_value = false;
    }
    if (buf_append(&r->head, at, len) < 0) return fail_with(c, 503, "out of memory");
    return 0;
}

static int on_header_field_complete(llhttp_t *p) {
    wf_http_conn *c = p->data;
    wf_http_request *r = &c->req;
    if (r->n_headers == 0) { /* an empty field name: llhttp rejects it before, but be safe */
        return fail_with(c, 400, "empty header name");
    }
    if (buf_append(&r->head, "", 1) < 0) return fail_with(c, 503, "out of memory");
    r->headers[r->n_headers - 1].value = r->head.len;
    r->in_value = true;
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
    wf_http_conn *c = p->data;
    if (count_header_bytes(c, len)) return HPE_USER;
    if (buf_append(&c->req.head, at, len) < 0) return fail_with(c, 503, "out of memory");
    return 0;
}

static int on_header_value_complete(llhttp_t *p) {
    wf_http_conn *c = p->data;
    if (buf_append(&c->req.head, "", 1) < 0) return fail_with(c, 503, "out of memory");
    return 0;
}

static int on_headers_complete(llhttp_t *p) {
    wf_http_conn *c = p->data;
    wf_http_request *r = &c->req;
    /* A header whose value never came (field without ':' is rejected by llhttp) gets "". */
    if (r->n_headers && r->headers[r->n_headers - 1].value == (size_t)-1) {
        if (buf_append(&r->head, "", 1) < 0) return fail_with(c, 503, "out of memory");
        r->headers[r->n_headers - 1].value = r->head.len - 1;
    }
    if (!r->url_done) return fail_with(c, 400, "missing request target");
    if (p->http_major != 1) return fail_with(c, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
    if (p->method == HTTP_CONNECT) return fail_with(c, 501, "method CONNECT is not implemented");
    /* RFC 9112 3.2: an HTTP/1.1 request without exactly one Host is a 400. Two Authorization
     * headers are ambiguous (which one was checked?): refused too. */
    int hosts = 0, auths = 0;
    for (int i = 0; i < r->n_headers; i++) {
        const char *name = r->head.data + r->headers[i].name;
        hosts += strcasecmp(name, "Host") == 0;
        auths += strcasecmp(name, "Authorization") == 0;
    }
    if (hosts > 1 || (hosts == 0 && p->http_minor >= 1))
        return fail_with(c, 400, hosts ? "more than one Host header" : "HTTP/1.1 request without Host");
    if (auths > 1) return fail_with(c, 400, "more than one Authorization header");
    snprintf(r->method, sizeof r->method, "%s", llhttp_method_name((llhttp_method_t)p->method));
    r->keep_alive = llhttp_should_keep_alive(p) != 0;
    r->chunked_response = p->http_major == 1 && p->http_minor >= 1;
    r->head_only = p->method == HTTP_HEAD;
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > c->srv->lim.max_body_bytes)
        return fail_with(c, 413, "request body too large");
    const char *expect = wf_http_request_header(r, "Expect");
    if (expect && strcasecmp(expect, "100-continue") == 0)
        conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
    wf_http_conn *c = p->data;
    if (c->req.body.len + len > c->srv->lim.max_body_bytes)
        return fail_with(c, 413, "request body too large");
    if (buf_append(&c->req.body, at, len) < 0) return fail_with(c, 503, "out of memory");
    return 0;
}

static int on_message_complete(llhttp_t *p) {
    (void)p;
    return HPE_PAUSED; /* process() hands the request over once llhttp returns */
}

/* ---- request lifecycle ------------------------------------------------------------------ */

static void request_reset(wf_http_request *r) {
    /* keep the buffers' memory for the next request on this connection */
    r->head.len = 0;
    if (r->head.data) r->head.data[0] = '\0';
    r->body.len = 0;
    if (r->body.data) r->body.data[0] = '\0';
    if (r->body.cap > (64u << 10)) buf_free(&r->body); /* don't pin a big upload */
    r->url_len = 0;
    r->url_done = false;
    r->path_off = r->query_off = 0;
    r->n_headers = 0;
    r->in_value = false;
    r->header_bytes = 0;
    r->method[0] = '\0';
    r->keep_alive = false;
    r->streaming = false;
    r->abort_fn = NULL;
    r->abort_user = NULL;
}

static void dispatch(wf_http_conn *c) {
    wf_http_request *r = &c->req;
    if (buf_reserve(&r->body, 0) < 0) {
        send_layer_error(c, 503, "out of memory");
        return;
    }
    r->body.data[r->body.len] = '\0';
    c->state = CONN_HANDLING;
    c->request_started = false;
    c->srv->active_requests++;
    c->srv->handler(r, c->srv->user);
}

static void complete_request(wf_http_request *r) {
    wf_http_conn *c = r->conn;
    if (c->state != CONN_HANDLING) return;
    bool keep = r->keep_alive && !c->srv->stopping;
    c->srv->active_requests--;
    c->state = CONN_READING;
    c->last_activity_ms = now_ms(c->srv);
    request_reset(r);
    if (!keep) {
        close_when_flushed(c);
        return;
    }
    process(c); /* the next pipelined request, if any (no-op when process is on the stack) */
}

static void process(wf_http_conn *c) {
    if (c->busy || c->state == CONN_CLOSED) return;
    c->busy = true;
    while (c->state == CONN_READING && !c->close_requested && !c->close_after_flush &&
           c->in_off < c->in.len) {
        const char *p = c->in.data + c->in_off;
        size_t n = c->in.len - c->in_off;
        llhttp_errno_t e = llhttp_execute(&c->parser, p, n);
        if (e == HPE_OK) {
            c->in_off = c->in.len;
            break;
        }
        if (e == HPE_PAUSED) {
            c->in_off = (size_t)(llhttp_get_error_pos(&c->parser) - c->in.data);
            llhttp_resume(&c->parser);
            dispatch(c);
            continue;
        }
        int status = c->err_status ? c->err_status : 400;
        const char *msg = c->err_msg ? c->err_msg : llhttp_get_error_reason(&c->parser);
        if (!c->err_status && e == HPE_INVALID_VERSION) status = 505;
        if (!c->err_status && e == HPE_INVALID_METHOD) {
            status = 501;
            msg = "method not implemented";
        }
        WF_LOG_DEBUG("http", NULL, "%s: %d %s (%s)", c->peer, status, msg ? msg : "",
                     llhttp_errno_name(e));
        c->in_off = c->in.len;
        send_layer_error(c, status, msg && *msg ? msg : "malformed HTTP request");
        break;
    }
    if (c->in_off == c->in.len) {
        c->in.len = c->in_off = 0;
        if (c->in.cap > (256u << 10)) buf_free(&c->in);
    } else if (c->in_off > c->in.len / 2) {
        memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
    }
    c->busy = false;
    if (c->close_requested) conn_close(c);
    else if (c->peer_eof && c->state == CONN_READING) close_when_flushed(c); /* all answered */
    else update_reading(c);
}

/* ---- connections ------------------------------------------------------------------------ */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
    wf_http_conn *c = h->data;
    (void)suggested;
    if (buf_reserve(&c->in, 16 << 10) < 0) {
        *b = uv_buf_init(NULL, 0);
        return;
    }
    *b = uv_buf_init(c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len - 1));
}

static void conn_input(wf_http_conn *c, ssize_t n) {
    if (c->lingering || c->close_after_flush) { /* the request was answered: discard */
        c->linger_bytes += (size_t)n;
        c->in.len = c->in_off;
        if (c->lingering && c->linger_bytes > c->srv->lim.linger_bytes) conn_close(c);
        return;
    }
    c->in.len += (size_t)n;
    c->last_activity_ms = now_ms(c->srv);
    process(c);
}

static void conn_peer_eof(wf_http_conn *c);

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
    wf_http_conn *c = s->data;
    (void)b;
    if (n > 0) {
        conn_input(c, n);
    } else if (n == UV_EOF) {
        conn_peer_eof(c);
    } else if (n < 0) {
        conn_close(c); /* error: the client is gone; a request under way is aborted */
    }
}

/* The client shut its write side. A request already received is still answered (HTTP/1.0 or
 * "Connection: close" clients may half-close after sending, as h2o allows); a partial or no
 * request ends the connection. A client that closed completely is noticed when a write fails. */
static void conn_peer_eof(wf_http_conn *c) {
    if (c->state == CONN_CLOSED) return;
    if (c->lingering || c->close_after_flush || c->state != CONN_HANDLING) {
        conn_close(c);
        return;
    }
    c->peer_eof = true;
    c->req.keep_alive = false;
    if (c->reading && !c->loopback) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

static void update_reading(wf_http_conn *c) {
    if (c->loopback || c->state == CONN_CLOSED) return;
    /* While the last response is flushed and during a lingering close, input is read and
     * discarded (so the client is never reset while it sends). */
    bool want = !c->peer_eof &&
                (c->close_after_flush || c->lingering || c->state == CONN_READING ||
                 c->in.len - c->in_off < c->srv->lim.max_pipeline_bytes);
    /* Keep reading while a request runs (a disconnect must be noticed), but stop buffering
     * pipelined bytes beyond the limit. */
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

static void conn_init(wf_http_server *srv, wf_http_conn *c) {
    c->srv = srv;
    llhttp_init(&c->parser, HTTP_REQUEST, &srv->settings);
    c->parser.data = c;
    c->req.conn = c;
    c->last_activity_ms = now_ms(srv);
    c->next = srv->conns;
    if (srv->conns) srv->conns->prev = c;
    srv->conns = c;
    srv->n_conns++;
}

static void conn_free_memory(wf_http_conn *c) {
    buf_free(&c->in);
    buf_free(&c->req.head);
    buf_free(&c->req.body);
    buf_free(&c->out_pending);
    buf_free(&c->out_inflight);
    buf_free(&c->captured);
    free(c);
}

static void maybe_finish_free(wf_http_server *srv);

static void on_conn_closed(uv_handle_t *h) {
    wf_http_conn *c = h->data;
    wf_http_server *srv = c->srv;
    conn_free_memory(c);
    srv->open_handles--;
    maybe_finish_free(srv);
}

/* Safe to call from anywhere: inside process() it only marks the connection; the abort
 * callback runs, then the handle closes and is freed from libuv's close callback. */
static void conn_close(wf_http_conn *c) {
    if (c->state == CONN_CLOSED) return;
    if (c->busy) {
        c->close_requested = true;
        return;
    }
    wf_http_server *srv = c->srv;
    bool was_handling = c->state == CONN_HANDLING;
    c->state = CONN_CLOSED;
    if (was_handling) {
        srv->active_requests--;
        if (c->req.abort_fn) c->req.abort_fn(&c->req, c->req.abort_user);
        c->req.abort_fn = NULL;
    }
    if (c->prev) c->prev->next = c->next;
    else srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    srv->n_conns--;
    if (!c->loopback) uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_connection(uv_stream_t *listener, int status) {
    wf_http_server *srv = listener->data;
    if (status < 0) {
        WF_LOG_WARN("http", NULL, "accept: %s", uv_strerror(status));
        return;
    }
    wf_http_conn *c = calloc(1, sizeof *c);
    if (!c) return;
    uv_tcp_init(srv->loop, &c->tcp);
    c->tcp.data = c;
    srv->open_handles++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        c->srv = srv;
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    struct sockaddr_storage ss;
    int len = sizeof ss;
    snprintf(c->peer, sizeof c->peer, "?");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) uv_ip4_name((struct sockaddr_in *)&ss, c->peer, sizeof c->peer);
        else if (ss.ss_family == AF_INET6) uv_ip6_name((struct sockaddr_in6 *)&ss, c->peer, sizeof c->peer);
    }
    bool over = srv->n_conns >= srv->lim.max_connections;
    conn_init(srv, c);
    if (over) {
        /* One line per second at most: a burst would otherwise write thousands. */
        uint64_t t = now_ms(srv);
        if (srv->refused_log_ms == 0 || t - srv->refused_log_ms >= 1000) {
            WF_LOG_WARN("http", NULL, "%s: refused, %d connections open (%u more refused since the last report)",
                        c->peer, srv->n_conns - 1, srv->refused_quiet);
            srv->refused_log_ms = t ? t : 1;
            srv->refused_quiet = 0;
        } else {
            srv->refused_quiet++;
        }
        send_layer_error(c, 503, "too many connections");
        return;
    }
    update_reading(c);
}

/* ---- the server ------------------------------------------------------------------------- */

static void on_timer(uv_timer_t *t) {
    wf_http_server *srv = t->data;
    wf_http_server_sweep(srv, uv_now(srv->loop));
}

wf_http_server *wf_http_server_new(uv_loop_t *loop, const wf_http_limits *lim,
                                   wf_http_handler_fn handler, void *user) {
    wf_http_server *srv = calloc(1, sizeof *srv);
    if (!srv) return NULL;
    srv->loop = loop;
    srv->lim = *lim;
    srv->handler = handler;
    srv->user = user;
    llhttp_settings_init(&srv->settings);
    srv->settings.on_message_begin = on_message_begin;
    srv->settings.on_url = on_url;
    srv->settings.on_url_complete = on_url_complete;
    srv->settings.on_header_field = on_header_field;
    srv->settings.on_header_field_complete = on_header_field_complete;
    srv->settings.on_header_value = on_header_value;
    srv->settings.on_header_value_complete = on_header_value_complete;
    srv->settings.on_headers_complete = on_headers_complete;
    srv->settings.on_body = on_body;
    srv->settings.on_message_complete = on_message_complete;
    if (loop) {
        uv_timer_init(loop, &srv->timer);
        srv->timer.data = srv;
        srv->open_handles++;
        srv->timer_on = true;
        /* a quarter of the shortest timeout, at most a second */
        const int timeouts[] = {lim->idle_timeout_ms, lim->request_timeout_ms, lim->write_timeout_ms,
                                lim->linger_ms};
        int period = 1000;
        for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++)
            if (timeouts[i] > 0 && timeouts[i] / 4 + 1 < period) period = timeouts[i] / 4 + 1;
        uv_timer_start(&srv->timer, on_timer, (uint64_t)period, (uint64_t)period);
        uv_unref((uv_handle_t *)&srv->timer);
    }
    return srv;
}

void wf_http_server_set_error_fn(wf_http_server *srv, wf_http_error_fn fn, void *user) {
    srv->error_fn = fn;
    srv->error_user = user;
}

wf_status wf_http_server_listen(wf_http_server *srv, const char *host, int port, int *bound_port) {
    if (!srv->loop) return WF_EINVAL;
    struct sockaddr_storage addr;
    int rc;
    if (strchr(host, ':')) rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
    else rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc != 0) {
        WF_LOG_ERROR("http", NULL, "bad listen address %s: %s", host, uv_strerror(rc));
        return WF_EINVAL;
    }
    uv_tcp_init(srv->loop, &srv->listener);
    srv->listener.data = srv;
    srv->open_handles++;
    srv->listening = true;
    rc = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&srv->listener, 1024, on_connection);
    if (rc != 0) {
        WF_LOG_ERROR("http", NULL, "listen on %s:%d: %s", host, port, uv_strerror(rc));
        return WF_EIO;
    }
    struct sockaddr_storage bound;
    int len = sizeof bound;
    if (bound_port && uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&bound, &len) == 0)
        *bound_port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    return WF_OK;
}

static void on_server_handle_closed(uv_handle_t *h) {
    wf_http_server *srv = h->data;
    srv->open_handles--;
    maybe_finish_free(srv);
}

static void maybe_finish_free(wf_http_server *srv) {
    if (srv->freeing && srv->open_handles == 0) free(srv);
}

void wf_http_server_stop_accepting(wf_http_server *srv) {
    if (srv->stopping) return;
    srv->stopping = true;
    /* The listener stays open until wf_http_server_free: during a drain /health must still
     * answer 503 "draining" and new work must get a 503 with Retry-After, not a refused
     * connection. */
    for (wf_http_conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_READING && !c->request_started && c->in_off == c->in.len)
            close_when_flushed(c);
    }
}

bool wf_http_server_is_stopping(const wf_http_server *srv) { return srv->stopping; }

void wf_http_server_free(wf_http_server *srv) {
    if (!srv) return;
    srv->freeing = true;
    if (srv->listening) {
        srv->listening = false;
        uv_close((uv_handle_t *)&srv->listener, on_server_handle_closed);
    }
    if (srv->timer_on) {
        srv->timer_on = false;
        uv_close((uv_handle_t *)&srv->timer, on_server_handle_closed);
    }
    while (srv->conns) {
        wf_http_conn *c = srv->conns;
        c->busy = false;
        conn_close(c);
        if (c->loopback) conn_free_memory(c);
    }
    maybe_finish_free(srv);
}

int wf_http_server_active_requests(const wf_http_server *srv) { return srv->active_requests; }
int wf_http_server_connections(const wf_http_server *srv) { return srv->n_conns; }

void wf_http_server_set_time(wf_http_server *srv, uint64_t t) { srv->manual_now = t; }

/* Bytes the kernel holds for the peer (sent but unacknowledged, or unsent). The socket buffer
 * autotunes up to megabytes, so a stalled reader can hide there long before a uv_write backs up. */
static size_t kernel_queued(wf_http_conn *c) {
#ifdef SIOCOUTQ
    uv_os_fd_t fd;
    int q = 0;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0)
        return (size_t)q;
#else
    (void)c;
#endif
    return 0;
}

void wf_http_server_sweep(wf_http_server *srv, uint64_t now) {
    if (!srv->loop) srv->manual_now = now;
    for (wf_http_conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        if (c->lingering) {
            if (now - c->linger_start_ms >= (uint64_t)srv->lim.linger_ms) conn_close(c);
            continue;
        }
        if (c->writing && srv->lim.write_timeout_ms > 0 &&
            now - c->write_start_ms >= (uint64_t)srv->lim.write_timeout_ms) {
            WF_LOG_WARN("http", NULL, "%s: closing: write timeout (a write not done in %d ms)", c->peer,
                        srv->lim.write_timeout_ms);
            conn_close(c); /* aborts the request under way: its generation is cancelled */
            continue;
        }
        if (c->state == CONN_HANDLING && c->req.streaming && !c->loopback) {
            size_t queued = kernel_queued(c) + c->out_pending.len + c->out_inflight.len;
            if (queued > srv->lim.max_output_bytes) {
                WF_LOG_WARN("http", NULL, "%s: closing: client not reading (%zu bytes unsent, limit %zu)",
                            c->peer, queued, srv->lim.max_output_bytes);
                conn_close(c);
                continue;
            }
        }
        if (c->state != CONN_READING || c->close_after_flush) continue;
        if (c->request_started || c->in_off < c->in.len) {
            uint64_t start = c->request_started ? c->request_start_ms : c->last_activity_ms;
            if (now - start >= (uint64_t)srv->lim.request_timeout_ms) {
                WF_LOG_DEBUG("http", NULL, "%s: request timeout", c->peer);
                send_layer_error(c, 408, "request not received in time");
            }
        } else if (now - c->last_activity_ms >= (uint64_t)srv->lim.idle_timeout_ms) {
            conn_close(c);
        }
    }
}

/* ---- the request API -------------------------------------------------------------------- */

const char *wf_http_request_method(const wf_http_request *r) { return r->method; }
const char *wf_http_request_path(const wf_http_request *r) { return r->head.data + r->path_off; }
const char *wf_http_request_query(const wf_http_request *r) { return r->head.data + r->query_off; }
const char *wf_http_request_peer(const wf_http_request *r) {
    return r->conn->loopback ? "loopback" : r->conn->peer;
}

const char *wf_http_request_header(const wf_http_request *r, const char *name) {
    for (int i = 0; i < r->n_headers; i++) {
        if (r->headers[i].value == (size_t)-1) continue;
        if (strcasecmp(r->head.data + r->headers[i].name, name) == 0)
            return r->head.data + r->headers[i].value;
    }
    return NULL;
}

const char *wf_http_request_body(const wf_http_request *r, size_t *len) {
    if (len) *len = r->body.len;
    return r->body.data ? r->body.data : "";
}

void wf_http_request_set_abort(wf_http_request *r, wf_http_abort_fn fn, void *user) {
    r->abort_fn = fn;
    r->abort_user = user;
}

static void write_head(wf_http_request *r, int status, const char *ctype, const char *extra,
                       const char *framing) {
    wf_http_conn *c = r->conn;
    bool keep = r->keep_alive && !c->srv->stopping;
    char head[1024];
    int n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nServer: weft\r\n%s%s%s%s%s",
                     status, wf_http_status_text(status), ctype ? "Content-Type: " : "",
                     ctype ? ctype : "", ctype ? "\r\n" : "", framing,
                     keep ? "" : "Connection: close\r\n");
    if (n < 0 || (size_t)n >= sizeof head) n = (int)strlen(head);
    conn_write(c, head, (size_t)n);
    if (extra) conn_write(c, extra, strlen(extra));
    conn_write(c, "\r\n", 2);
}

void wf_http_respond(wf_http_request *r, int status, const char *ctype, const char *extra,
                     const char *body, size_t len) {
    wf_http_conn *c = r->conn;
    if (c->state != CONN_HANDLING || r->streaming) return;
    char framing[64];
    snprintf(framing, sizeof framing, "Content-Length: %zu\r\n", len);
    write_head(r, status, ctype, extra, framing);
    if (!r->head_only) conn_write(c, body, len);
    complete_request(r);
}

void wf_http_stream_begin(wf_http_request *r, int status, const char *ctype, const char *extra) {
    wf_http_conn *c = r->conn;
    if (c->state != CONN_HANDLING || r->streaming) return;
    r->streaming = true;
    if (!r->chunked_response) r->keep_alive = false; /* HTTP/1.0: the close ends the body */
    write_head(r, status, ctype, extra, r->chunked_response ? "Transfer-Encoding: chunked\r\n" : "");
}

void wf_http_stream_write(wf_http_request *r, const char *data, size_t len) {
    wf_http_conn *c = r->conn;
    if (c->state != CONN_HANDLING || !r->streaming || len == 0 || r->head_only) return;
    if (r->chunked_response) {
        char size[24];
        int n = snprintf(size, sizeof size, "%zx\r\n", len);
        conn_write(c, size, (size_t)n);
        conn_write(c, data, len);
        conn_write(c, "\r\n", 2);
    } else {
        conn_write(c, data, len);
    }
}

void wf_http_stream_end(wf_http_request *r) {
    wf_http_conn *c = r->conn;
    if (c->state != CONN_HANDLING || !r->streaming) return;
    if (r->chunked_response && !r->head_only) conn_write(c, "0\r\n\r\n", 5);
    complete_request(r);
}

size_t wf_http_request_backlog(const wf_http_request *r) {
    return r->conn->out_pending.len + r->conn->out_inflight.len;
}

/* ---- loopback --------------------------------------------------------------------------- */

wf_http_conn *wf_http_loopback_open(wf_http_server *srv) {
    wf_http_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->loopback = true;
    snprintf(c->peer, sizeof c->peer, "loopback");
    bool over = srv->n_conns >= srv->lim.max_connections;
    conn_init(srv, c);
    if (over) send_layer_error(c, 503, "too many connections");
    return c;
}

void wf_http_loopback_feed(wf_http_conn *c, const char *data, size_t len) {
    if (c->state == CONN_CLOSED || c->close_after_flush || len == 0) return;
    if (buf_append(&c->in, data, len) < 0) {
        conn_close(c);
        return;
    }
    c->last_activity_ms = now_ms(c->srv);
    process(c);
}

void wf_http_loopback_eof(wf_http_conn *c) { conn_peer_eof(c); }

const char *wf_http_loopback_output(const wf_http_conn *c, size_t *len) {
    if (len) *len = c->captured.len;
    return c->captured.data ? c->captured.data : "";
}

void wf_http_loopback_clear(wf_http_conn *c) {
    c->captured.len = 0;
    if (c->captured.data) c->captured.data[0] = '\0';
}

bool wf_http_loopback_closed(const wf_http_conn *c) { return c->state == CONN_CLOSED; }

void wf_http_loopback_free(wf_http_conn *c) {
    if (!c) return;
    conn_close(c);
    conn_free_memory(c);
}
