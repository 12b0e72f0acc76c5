/* libFuzzer target: arbitrary bytes through the HTTP request path (llhttp, limits, pipelining,
 * chunked bodies, responses) over a loopback connection. The first byte picks how the input is
 * split into reads and how the handler answers, so partial reads and streamed responses get
 * exercised too. Small limits make 413/431 reachable.
 * weft-fuzz: covers=server/http.c */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"

static void handler(wf_http_request *req, void *user) {
    unsigned mode = *(unsigned *)user;
    size_t len;
    const char *body = wf_http_request_body(req, &len);
    const char *h = wf_http_request_header(req, "content-type");
    size_t hl = h ? strlen(h) : 0;
    if (mode & 1) {
        wf_http_stream_begin(req, 200, "text/event-stream", "X-A: b\r\n");
        wf_http_stream_write(req, body, len);
        wf_http_stream_write(req, wf_http_request_path(req), strlen(wf_http_request_path(req)));
        wf_http_stream_end(req);
    } else {
        wf_http_respond(req, (mode & 2) ? 404 : 200, "text/plain", NULL, body, len > hl ? hl : len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned mode = data[0];
    data++;
    size--;
    wf_http_limits lim;
    wf_http_limits_init(&lim);
    lim.max_body_bytes = 4096;
    lim.max_header_bytes = 2048;
    lim.max_pipeline_bytes = 8192;
    wf_http_server *srv = wf_http_server_new(NULL, &lim, handler, &mode);
    wf_http_conn *c = wf_http_loopback_open(srv);
    size_t step = (mode >> 2) ? (mode >> 2) : size;
    for (size_t off = 0; off < size && !wf_http_loopback_closed(c); off += step)
        wf_http_loopback_feed(c, (const char *)data + off, size - off < step ? size - off : step);
    wf_http_server_sweep(srv, 1000000); /* timeouts on whatever is left */
    size_t out_len;
    const char *out = wf_http_loopback_output(c, &out_len);
    if (out_len && strncmp(out, "HTTP/1.1 ", 9) != 0) abort(); /* every answer is a status line */
    wf_http_loopback_free(c);
    wf_http_server_free(srv);
    return 0;
}
