/* server/http.c through loopback connections: bytes in, bytes out, no sockets. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "server/http.h"

typedef struct app {
    int calls;
    bool defer;                 /* answer later, from the test */
    wf_http_request *pending;
    int aborts;
    char last_path[256], last_query[256], last_body[4096], last_hdr[256];
} app;

static void on_abort(wf_http_request *req, void *user) {
    app *a = user;
    (void)req;
    a->aborts++;
    a->pending = NULL;
}

static void handler(wf_http_request *req, void *user) {
    app *a = user;
    a->calls++;
    snprintf(a->last_path, sizeof a->last_path, "%s", wf_http_request_path(req));
    snprintf(a->last_query, sizeof a->last_query, "%s", wf_http_request_query(req));
    size_t n;
    const char *body = wf_http_request_body(req, &n);
    snprintf(a->last_body, sizeof a->last_body, "%s", body);
    const char *h = wf_http_request_header(req, "x-test");
    snprintf(a->last_hdr, sizeof a->last_hdr, "%s", h ? h : "(none)");
    if (a->defer) {
        a->pending = req;
        wf_http_request_set_abort(req, on_abort, a);
        return;
    }
    char out[512];
    int len = snprintf(out, sizeof out, "%s#%d", wf_http_request_path(req), a->calls);
    wf_http_respond(req, 200, "text/plain", NULL, out, (size_t)len);
}

static wf_http_server *make(app *a, wf_http_limits *lim) {
    wf_http_limits d;
    if (!lim) {
        wf_http_limits_init(&d);
        lim = &d;
    }
    memset(a, 0, sizeof *a);
    wf_http_server *srv = wf_http_server_new(NULL, lim, handler, a);
    ck_assert_ptr_nonnull(srv);
    return srv;
}

static const char *out(wf_http_conn *c) { return wf_http_loopback_output(c, NULL); }

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

START_TEST(simple_get_keep_alive) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    wf_http_conn *c = wf_http_loopback_open(srv);
    const char *req = "GET /health?x=1&y=2 HTTP/1.1\r\nHost: a\r\nX-Test: hello\r\n\r\n";
    wf_http_loopback_feed(c, req, strlen(req));
    ck_assert_int_eq(a.calls, 1);
    ck_assert_str_eq(a.last_path, "/health");
    ck_assert_str_eq(a.last_query, "x=1&y=2");
    ck_assert_str_eq(a.last_hdr, "hello");
    ck_assert_str_eq(out(c), "HTTP/1.1 200 OK\r\nServer: weft\r\nContent-Type: text/plain\r\n"
                             "Content-Length: 9\r\n\r\n/health#1");
    ck_assert(!wf_http_loopback_closed(c));
    wf_http_loopback_clear(c);
    wf_http_loopback_feed(c, req, strlen(req));
    ck_assert_int_eq(a.calls, 2);
    ck_assert_ptr_nonnull(strstr(out(c), "/health#2"));
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(byte_by_byte_and_post_body) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    wf_http_conn *c = wf_http_loopback_open(srv);
    const char *req = "POST /v1/x HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world";
    for (size_t i = 0; i < strlen(req); i++) wf_http_loopback_feed(c, req + i, 1);
    ck_assert_int_eq(a.calls, 1);
    ck_assert_str_eq(a.last_body, "hello world");
    ck_assert_str_eq(a.last_query, "");
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(pipelined_in_order) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    a.defer = true;
    wf_http_conn *c = wf_http_loopback_open(srv);
    const char *reqs = "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\nGET /c HTTP/1.1\r\nHost: h\r\n\r\n";
    wf_http_loopback_feed(c, reqs, strlen(reqs));
    /* one at a time: /b waits until /a is answered */
    ck_assert_int_eq(a.calls, 1);
    ck_assert_str_eq(a.last_path, "/a");
    ck_assert_int_eq(wf_http_server_active_requests(srv), 1);
    wf_http_request *r = a.pending;
    wf_http_respond(r, 200, "text/plain", NULL, "A", 1);
    ck_assert_int_eq(a.calls, 2);
    ck_assert_str_eq(a.last_path, "/b");
    a.defer = false;
    wf_http_respond(a.pending, 201, NULL, "X-Extra: 1\r\n", "B", 1);
    ck_assert_int_eq(a.calls, 3);
    const char *o = out(c);
    const char *pa = strstr(o, "\r\n\r\nA"), *pb = strstr(o, "\r\n\r\nB"), *pc = strstr(o, "/c#3");
    ck_assert(pa && pb && pc && pa < pb && pb < pc);
    ck_assert_ptr_nonnull(strstr(o, "HTTP/1.1 201 Created\r\n"));
    ck_assert_ptr_nonnull(strstr(o, "X-Extra: 1\r\n"));
    ck_assert_int_eq(wf_http_server_active_requests(srv), 0);
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(chunked_request_body) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    wf_http_conn *c = wf_http_loopback_open(srv);
    const char *req = "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n";
    wf_http_loopback_feed(c, req, strlen(req));
    ck_assert_int_eq(a.calls, 1);
    ck_assert_str_eq(a.last_body, "hello world");
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(body_too_large_413) {
    app a;
    wf_http_limits lim;
    wf_http_limits_init(&lim);
    lim.max_body_bytes = 10;
    wf_http_server *srv = make(&a, &lim);
    wf_http_conn *c = wf_http_loopback_open(srv);
    const char *req = "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n";
    wf_http_loopback_feed(c, req, strlen(req));
    ck_assert_int_eq(a.calls, 0);
    ck_assert(strncmp(out(c), "HTTP/1.1 413 ", 13) == 0);
    ck_assert(wf_http_loopback_closed(c));
    wf_http_loopback_free(c);
    /* chunked: discovered while reading */
    c = wf_http_loopback_open(srv);
    req = "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n";
    wf_http_loopback_feed(c, req, strlen(req));
    ck_assert(strncmp(out(c), "HTTP/1.1 413 ", 13) == 0);
    ck_assert(wf_http_loopback_closed(c));
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(headers_too_large_431) {
    app a;
    wf_http_limits lim;
    wf_http_limits_init(&lim);
    lim.max_header_bytes = 1024;
    wf_http_server *srv = make(&a, &lim);
    wf_http_conn *c = wf_http_loopback_open(srv);
    const char *start = "GET / HTTP/1.1\r\nHost: h\r\nX-Big: ";
    wf_http_loopback_feed(c, start, strlen(start));
    char filler[256];
    memset(filler, 'a', sizeof filler);
    for (int i = 0; i < 8 && !wf_http_loopback_closed(c); i++)
        wf_http_loopback_feed(c, filler, sizeof filler);
    ck_assert(strncmp(out(c), "HTTP/1.1 431 ", 13) == 0);
    ck_assert(wf_http_loopback_closed(c));
    ck_assert_int_eq(a.calls, 0);
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(malformed_400_and_version_505) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    wf_http_conn *c = wf_http_loopback_open(srv);
    wf_http_loopback_feed(c, "GET / HTTP/1.1\r\nHost: a\r\nNo colon here\r\n\r\n", 41);
    ck_assert_msg(strncmp(out(c), "HTTP/1.1 400 ", 13) == 0, "%s", out(c));
    ck_assert(wf_http_loopback_closed(c));
    wf_http_loopback_free(c);
    c = wf_http_loopback_open(srv);
    wf_http_loopback_feed(c, "GET / HTTP/9.9\r\n\r\n", 18);
    ck_assert_msg(strncmp(out(c), "HTTP/1.1 505 ", 13) == 0 || strncmp(out(c), "HTTP/1.1 400 ", 13) == 0,
                  "%s", out(c));
    wf_http_loopback_free(c);
    ck_assert_int_eq(a.calls, 0);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(streaming_chunked_response) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    a.defer = true;
    wf_http_conn *c = wf_http_loopback_open(srv);
    wf_http_loopback_feed(c, "GET /s HTTP/1.1\r\nHost: h\r\n\r\n", 28);
    wf_http_request *r = a.pending;
    wf_http_stream_begin(r, 200, "text/event-stream", "Cache-Control: no-cache\r\n");
    wf_http_stream_write(r, "data: 1\n\n", 9);
    wf_http_stream_write(r, "data: [DONE]\n\n", 14);
    wf_http_stream_end(r);
    ck_assert_str_eq(out(c), "HTTP/1.1 200 OK\r\nServer: weft\r\nContent-Type: text/event-stream\r\n"
                             "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n"
                             "9\r\ndata: 1\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n");
    ck_assert(!wf_http_loopback_closed(c));
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(http10_closes) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    wf_http_conn *c = wf_http_loopback_open(srv);
    wf_http_loopback_feed(c, "GET /x HTTP/1.0\r\n\r\n", 19);
    ck_assert_ptr_nonnull(strstr(out(c), "Connection: close\r\n"));
    ck_assert(wf_http_loopback_closed(c));
    wf_http_loopback_free(c);
    c = wf_http_loopback_open(srv);
    wf_http_loopback_feed(c, "GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 47);
    ck_assert(wf_http_loopback_closed(c));
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(disconnect_aborts_pending) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    a.defer = true;
    wf_http_conn *c = wf_http_loopback_open(srv);
    wf_http_loopback_feed(c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n", 31);
    ck_assert_ptr_nonnull(a.pending);
    wf_http_loopback_free(c); /* the client hangs up */
    ck_assert_int_eq(a.aborts, 1);
    ck_assert_ptr_null(a.pending);
    ck_assert_int_eq(wf_http_server_active_requests(srv), 0);
    wf_http_server_free(srv);
}
END_TEST

/* A client that half-closes after a complete request still gets its answer (h2o's rule);
 * without a complete request the connection just closes. */
START_TEST(half_close_still_answered) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    a.defer = true;
    wf_http_conn *c = wf_http_loopback_open(srv);
    const char *req = "POST /gen HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}";
    wf_http_loopback_feed(c, req, strlen(req));
    ck_assert_ptr_nonnull(a.pending);
    wf_http_loopback_eof(c);
    ck_assert_int_eq(a.aborts, 0);
    ck_assert(!wf_http_loopback_closed(c));
    wf_http_respond(a.pending, 200, "text/plain", NULL, "done", 4);
    ck_assert_ptr_nonnull(strstr(out(c), "HTTP/1.1 200 OK"));
    ck_assert_ptr_nonnull(strstr(out(c), "\r\n\r\ndone"));
    ck_assert(wf_http_loopback_closed(c));
    wf_http_loopback_free(c);

    c = wf_http_loopback_open(srv);
    wf_http_loopback_feed(c, "GET /par", 8);
    wf_http_loopback_eof(c);
    ck_assert(wf_http_loopback_closed(c));
    ck_assert_int_eq(a.calls, 1);
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

static void expect_status(wf_http_server *srv, const char *req, const char *status) {
    wf_http_conn *c = wf_http_loopback_open(srv);
    wf_http_loopback_feed(c, req, strlen(req));
    ck_assert_msg(strncmp(out(c), status, strlen(status)) == 0, "%s -> %s", req, out(c));
    ck_assert(wf_http_loopback_closed(c));
    wf_http_loopback_free(c);
}

START_TEST(protocol_violations) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    expect_status(srv, "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ");                 /* no Host */
    expect_status(srv, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "HTTP/1.1 400 ");
    expect_status(srv, "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer x\r\n"
                       "authorization: Bearer y\r\n\r\n", "HTTP/1.1 400 ");
    expect_status(srv, "GET / HTTP/2.0\r\nHost: a\r\n\r\n", "HTTP/1.1 505 ");
    expect_status(srv, "FROB / HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 501 ");
    expect_status(srv, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", "HTTP/1.1 501 ");
    ck_assert_int_eq(a.calls, 0);
    /* HTTP/1.0 needs no Host */
    wf_http_conn *c = wf_http_loopback_open(srv);
    wf_http_loopback_feed(c, "GET /old HTTP/1.0\r\n\r\n", 22);
    ck_assert(strncmp(out(c), "HTTP/1.1 200 ", 13) == 0);
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(timeouts) {
    app a;
    wf_http_limits lim;
    wf_http_limits_init(&lim);
    lim.idle_timeout_ms = 100;
    lim.request_timeout_ms = 500;
    wf_http_server *srv = make(&a, &lim);
    wf_http_server_set_time(srv, 1000);
    wf_http_conn *idle = wf_http_loopback_open(srv);
    wf_http_conn *slow = wf_http_loopback_open(srv);
    wf_http_loopback_feed(slow, "GET / HTTP/1.1\r\nHost: h\r\nX-A: ", 30);
    wf_http_server_sweep(srv, 1050);
    ck_assert(!wf_http_loopback_closed(idle));
    wf_http_server_sweep(srv, 1200);
    ck_assert(wf_http_loopback_closed(idle));
    ck_assert_str_eq(out(idle), "");
    /* the slowloris client keeps trickling bytes: the request deadline still applies */
    wf_http_loopback_feed(slow, "a", 1);
    ck_assert(!wf_http_loopback_closed(slow));
    wf_http_server_sweep(srv, 1600);
    ck_assert(strncmp(out(slow), "HTTP/1.1 408 ", 13) == 0);
    ck_assert(wf_http_loopback_closed(slow));
    wf_http_loopback_free(idle);
    wf_http_loopback_free(slow);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(max_connections_503) {
    app a;
    wf_http_limits lim;
    wf_http_limits_init(&lim);
    lim.max_connections = 2;
    wf_http_server *srv = make(&a, &lim);
    wf_http_conn *c1 = wf_http_loopback_open(srv), *c2 = wf_http_loopback_open(srv);
    wf_http_conn *c3 = wf_http_loopback_open(srv);
    ck_assert(strncmp(out(c3), "HTTP/1.1 503 ", 13) == 0);
    ck_assert_ptr_nonnull(strstr(out(c3), "Retry-After: 1\r\n"));
    ck_assert(wf_http_loopback_closed(c3));
    ck_assert(!wf_http_loopback_closed(c1) && !wf_http_loopback_closed(c2));
    wf_http_loopback_free(c1);
    wf_http_loopback_free(c2);
    wf_http_loopback_free(c3);
    wf_http_server_free(srv);
}
END_TEST

static size_t json_error(int status, const char *message, char *buf, size_t cap,
                         const char **ctype, void *user) {
    (void)user;
    *ctype = "application/json";
    return (size_t)snprintf(buf, cap, "{\"status\":%d,\"m\":\"%s\"}", status, message);
}

START_TEST(error_formatter_and_stop_accepting) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    wf_http_server_set_error_fn(srv, json_error, NULL);
    wf_http_conn *c = wf_http_loopback_open(srv);
    wf_http_loopback_feed(c, "BAD\r\n\r\n", 7);
    ck_assert_ptr_nonnull(strstr(out(c), "Content-Type: application/json"));
    ck_assert_ptr_nonnull(strstr(out(c), "{\"status\":501")); /* unknown method */
    wf_http_loopback_free(c);
    /* draining: idle keep-alive connections close, busy ones finish with Connection: close */
    a.defer = true;
    wf_http_conn *busy = wf_http_loopback_open(srv), *idle = wf_http_loopback_open(srv);
    wf_http_loopback_feed(busy, "GET /b HTTP/1.1\r\nHost: h\r\n\r\n", 28);
    wf_http_server_stop_accepting(srv);
    ck_assert(wf_http_server_is_stopping(srv));
    ck_assert(wf_http_loopback_closed(idle));
    ck_assert(!wf_http_loopback_closed(busy));
    wf_http_respond(a.pending, 200, NULL, NULL, "ok", 2);
    ck_assert_ptr_nonnull(strstr(out(busy), "Connection: close\r\n"));
    ck_assert(wf_http_loopback_closed(busy));
    wf_http_loopback_free(busy);
    wf_http_loopback_free(idle);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(expect_continue_and_head) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    wf_http_conn *c = wf_http_loopback_open(srv);
    const char *req = "POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
    wf_http_loopback_feed(c, req, strlen(req));
    ck_assert_str_eq(out(c), "HTTP/1.1 100 Continue\r\n\r\n");
    wf_http_loopback_feed(c, "hi", 2);
    ck_assert_str_eq(a.last_body, "hi");
    wf_http_loopback_clear(c);
    wf_http_loopback_feed(c, "HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n", 29);
    ck_assert_ptr_nonnull(strstr(out(c), "Content-Length: 4\r\n\r\n"));
    ck_assert_ptr_null(strstr(out(c), "/h#2"));
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

START_TEST(many_pipelined_requests_at_once) {
    app a;
    wf_http_server *srv = make(&a, NULL);
    wf_http_conn *c = wf_http_loopback_open(srv);
    char big[100 * 40];
    size_t n = 0;
    for (int i = 0; i < 100; i++) n += (size_t)snprintf(big + n, sizeof big - n, "GET /r%d HTTP/1.1\r\nHost: h\r\n\r\n", i);
    wf_http_loopback_feed(c, big, n);
    ck_assert_int_eq(a.calls, 100);
    ck_assert_int_eq(count(out(c), "HTTP/1.1 200 OK"), 100);
    ck_assert_ptr_nonnull(strstr(out(c), "/r99#100"));
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
}
END_TEST

static Suite *http_suite(void) {
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("loopback");
    tcase_add_test(tc, simple_get_keep_alive);
    tcase_add_test(tc, byte_by_byte_and_post_body);
    tcase_add_test(tc, pipelined_in_order);
    tcase_add_test(tc, chunked_request_body);
    tcase_add_test(tc, body_too_large_413);
    tcase_add_test(tc, headers_too_large_431);
    tcase_add_test(tc, malformed_400_and_version_505);
    tcase_add_test(tc, streaming_chunked_response);
    tcase_add_test(tc, http10_closes);
    tcase_add_test(tc, disconnect_aborts_pending);
    tcase_add_test(tc, timeouts);
    tcase_add_test(tc, half_close_still_answered);
    tcase_add_test(tc, protocol_violations);
    tcase_add_test(tc, max_connections_503);
    tcase_add_test(tc, error_formatter_and_stop_accepting);
    tcase_add_test(tc, expect_continue_and_head);
    tcase_add_test(tc, many_pipelined_requests_at_once);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(http_suite)
