/* HTTP/1.1 server on libuv + llhttp: keep-alive, pipelining (requests are handled one at a time
 * per connection, so responses go out in request order), chunked request bodies, size limits,
 * idle and slow-client timeouts, a connection cap, and graceful shutdown. It knows nothing of
 * JSON or OpenAI: a handler gets a parsed request and answers it now or later.
 *
 *     static void handle(wf_http_request *req, void *user) {
 *         if (strcmp(wf_http_request_path(req), "/health") == 0)
 *             wf_http_respond(req, 200, "application/json", NULL, "{}", 2);
 *         else {                                  // answer later (e.g. from a uv_async)
 *             wf_http_request_set_abort(req, on_abort, ctx);   // connection lost meanwhile
 *             wf_http_stream_begin(req, 200, "text/event-stream", NULL);
 *             wf_http_stream_write(req, "data: x\n\n", 9);
 *             wf_http_stream_end(req);
 *         }
 *     }
 *     wf_http_limits lim; wf_http_limits_init(&lim);
 *     wf_http_server *srv = wf_http_server_new(loop, &lim, handle, app);
 *     wf_http_server_listen(srv, "127.0.0.1", 8080, &port);
 *
 * Tests drive the same code without sockets (after h2o's loopback connection):
 *     wf_http_conn *c = wf_http_loopback_open(srv);
 *     wf_http_loopback_feed(c, "GET / HTTP/1.1\r\n\r\n", 18);
 *     const char *out = wf_http_loopback_output(c, &len);   // bytes the server wrote
 *
 * Threading: everything runs on the loop thread (not thread-safe). Lifetimes: a request handle
 * is valid from the handler call until the response is complete (wf_http_respond or
 * wf_http_stream_end) or until its abort callback ran, whichever comes first. Connections and
 * requests are freed only at safe points: a close requested inside a callback is carried out
 * after the callback chain returns (uv_close's callback, or the loopback's free). */
#ifndef WF_SERVER_HTTP_H
#define WF_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/base/status.h"

typedef struct wf_http_server wf_http_server;
typedef struct wf_http_conn wf_http_conn;
typedef struct wf_http_request wf_http_request;

typedef struct wf_http_limits {
    size_t max_header_bytes;  /* request line + headers; above: 431 (default 64 KiB) */
    size_t max_body_bytes;    /* decoded body; above: 413 (default 8 MiB) */
    int idle_timeout_ms;      /* keep-alive connection without a request: closed (30 s) */
    int request_timeout_ms;   /* a request must arrive whole within this: else 408 (60 s) */
    int max_connections;      /* open connections; above: 503 and close (4096) */
    size_t max_pipeline_bytes;/* unparsed bytes buffered while a request runs (1 MiB) */
    size_t max_output_bytes;  /* streamed bytes not yet taken by a slow reader (ours plus the
                               * kernel's send queue); above: the connection is closed and its
                               * request aborted, so the app cancels it (4 MiB) */
    int write_timeout_ms;     /* a write (one batch) not done in this long: closed, aborted (30 s) */
    int linger_ms;            /* lingering close after an error: read and discard (5 s) */
    size_t linger_bytes;      /* ... at most this many bytes (16 MiB) */
} wf_http_limits;

void wf_http_limits_init(wf_http_limits *lim);

/* Called once per complete request, on the loop thread. The handler must eventually answer
 * (respond / stream_end) unless the abort callback runs first. */
typedef void (*wf_http_handler_fn)(wf_http_request *req, void *user);
/* The connection of a request under way was lost: the request handle dies when this returns. */
typedef void (*wf_http_abort_fn)(wf_http_request *req, void *user);
/* Formats the body of an error the HTTP layer answers by itself (400, 408, 413, 431, 503).
 * Writes at most cap bytes into buf and returns the length; sets *content_type. */
typedef size_t (*wf_http_error_fn)(int status, const char *message, char *buf, size_t cap,
                                   const char **content_type, void *user);

/* loop may be NULL for a socket-less server used only through loopback connections. */
wf_http_server *wf_http_server_new(uv_loop_t *loop, const wf_http_limits *lim,
                                   wf_http_handler_fn handler, void *user);
void wf_http_server_set_error_fn(wf_http_server *srv, wf_http_error_fn fn, void *user);
/* Binds and listens (port 0: any free port, reported in *bound_port). WF_EIO with errno
 * semantics logged. */
wf_status wf_http_server_listen(wf_http_server *srv, const char *host, int port, int *bound_port);
/* Graceful shutdown step 1: answers later responses with "Connection: close" and closes idle
 * keep-alive connections. Requests under way continue. The listener stays open (new
 * connections get one response each, so the app can answer 503) until wf_http_server_free. */
void wf_http_server_stop_accepting(wf_http_server *srv);
/* Closes every connection (requests under way are aborted) and frees the server once the last
 * handle closed; the loop must run afterwards for libuv's close callbacks. */
void wf_http_server_free(wf_http_server *srv);
/* Requests handed to the handler and not yet answered. */
int wf_http_server_active_requests(const wf_http_server *srv);
int wf_http_server_connections(const wf_http_server *srv);
/* Applies the timeouts at time now_ms (uv_now for a loop server, any clock for loopback
 * tests). A loop server calls it from its own timer. */
void wf_http_server_sweep(wf_http_server *srv, uint64_t now_ms);
/* The clock used for connection timestamps of a loop-less server (tests). */
void wf_http_server_set_time(wf_http_server *srv, uint64_t now_ms);

/* --- the request ------------------------------------------------------------------------- */
const char *wf_http_request_method(const wf_http_request *req); /* "GET", "POST", ... */
const char *wf_http_request_path(const wf_http_request *req);   /* without the query */
const char *wf_http_request_query(const wf_http_request *req);  /* after '?', or "" */
/* Header value by case-insensitive name, NUL-terminated, or NULL. Repeated headers: the first. */
const char *wf_http_request_header(const wf_http_request *req, const char *name);
const char *wf_http_request_body(const wf_http_request *req, size_t *len); /* NUL-terminated */
/* The peer address ("127.0.0.1" / "loopback"), for logs. */
const char *wf_http_request_peer(const wf_http_request *req);
void wf_http_request_set_abort(wf_http_request *req, wf_http_abort_fn fn, void *user);
/* True while the server is shutting down: the app can say so (/health). */
bool wf_http_server_is_stopping(const wf_http_server *srv);

/* --- answering --------------------------------------------------------------------------- */
/* A whole response with Content-Length. extra_headers: "Name: value\r\n" lines or NULL.
 * Completes the request. */
void wf_http_respond(wf_http_request *req, int status, const char *content_type,
                     const char *extra_headers, const char *body, size_t len);
/* A streamed response (Transfer-Encoding: chunked); each write becomes one chunk. */
void wf_http_stream_begin(wf_http_request *req, int status, const char *content_type,
                          const char *extra_headers);
void wf_http_stream_write(wf_http_request *req, const char *data, size_t len);
/* Completes the request. */
void wf_http_stream_end(wf_http_request *req);
/* Bytes written but not yet accepted by the socket (slow readers of long streams). */
size_t wf_http_request_backlog(const wf_http_request *req);

const char *wf_http_status_text(int status);

/* --- loopback connections (tests, fuzzing) ----------------------------------------------- */
wf_http_conn *wf_http_loopback_open(wf_http_server *srv);
/* Feeds bytes as if read from the socket. Ignored once the connection is closed. */
void wf_http_loopback_feed(wf_http_conn *c, const char *data, size_t len);
/* The peer closed its write side (EOF): a request under way is still answered, then the
 * connection closes; without a complete request it closes at once. */
void wf_http_loopback_eof(wf_http_conn *c);
/* Everything the server wrote so far (NUL-terminated); wf_http_loopback_clear forgets it. */
const char *wf_http_loopback_output(const wf_http_conn *c, size_t *len);
void wf_http_loopback_clear(wf_http_conn *c);
bool wf_http_loopback_closed(const wf_http_conn *c);
/* The client hangs up: aborts a request under way, closes, and frees the connection. */
void wf_http_loopback_free(wf_http_conn *c);

#endif
