/* A small HTTP/1.1 client on libuv + llhttp for weft-bench: one client per target holds a pool
 * of keep-alive connections; a call is one request/response exchange on one of them.
 *
 *     wf_loadgen_client cl;
 *     wf_loadgen_client_init(&cl, loop, (struct sockaddr *)&addr, 64);
 *     call->data = bytes; call->len = n;           // a complete request: head + body
 *     call->on_headers = ...; call->on_body = ...; call->on_done = ...; call->ud = me;
 *     wf_loadgen_client_start(&cl, call);          // on_done fires exactly once, later
 *     ...
 *     wf_loadgen_client_close(&cl);                // then let the loop run until it is empty
 *
 * The call is caller-owned and must stay alive until on_done; call->data too. Requests are not
 * pipelined: a connection carries one call at a time and goes back to the pool when the
 * response ends and both sides keep it alive. At most max_conns connections are open; calls
 * beyond that wait in FIFO order. A call that fails on a reused connection before any response
 * byte arrived (the server closed an idle keep-alive connection) is retried once on a new one.
 * Body bytes come with the uv_hrtime() of the read that delivered them. Loop thread only. */
#ifndef WF_LOADGEN_HTTP_H
#define WF_LOADGEN_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "proto/base/status.h"

typedef struct wf_loadgen_conn wf_loadgen_conn;
typedef struct wf_loadgen_call wf_loadgen_call;

struct wf_loadgen_call {
    const char *data; /* request bytes, caller-owned */
    size_t len;
    /* Status line and headers are in. event_stream: Content-Type is text/event-stream. */
    void (*on_headers)(wf_loadgen_call *call, int status, bool event_stream);
    void (*on_body)(wf_loadgen_call *call, const char *p, size_t n, uint64_t t_ns);
    /* WF_OK (response complete), WF_ETIMEDOUT/WF_ECANCELLED (aborted), WF_EIO, WF_ECLOSED,
     * WF_EPROTO; msg says what happened. The client no longer touches the call after this. */
    void (*on_done)(wf_loadgen_call *call, wf_status st, const char *msg);
    void *ud;
    double retry_after_s; /* the response's Retry-After in seconds (delta form), -1 if none */
    /* private to the client */
    wf_loadgen_conn *conn;
    wf_loadgen_call *next_wait;
    bool got_response;
    bool retried;
    bool waiting;
};

typedef struct wf_loadgen_client {
    uv_loop_t *loop;
    struct sockaddr_storage addr;
    size_t max_conns, n_conns;
    wf_loadgen_conn *idle;      /* stack of idle connections */
    wf_loadgen_conn *all;       /* every open connection */
    wf_loadgen_call *wait_head, *wait_tail;
    bool closing;
    uint64_t n_connects;        /* connections opened in all */
} wf_loadgen_client;

/* max_conns >= 1. WF_OK or WF_EINVAL (unsupported address family). */
wf_status wf_loadgen_client_init(wf_loadgen_client *cl, uv_loop_t *loop,
                                 const struct sockaddr *addr, size_t max_conns);
/* Starts (or queues) a call. Never fails synchronously: failures arrive through on_done. */
void wf_loadgen_client_start(wf_loadgen_client *cl, wf_loadgen_call *call);
/* Aborts a started, unfinished call: its connection (if any) is closed and on_done(why) fires now. */
void wf_loadgen_client_abort(wf_loadgen_client *cl, wf_loadgen_call *call, wf_status why);
/* Closes every connection; calls still running finish with WF_ECANCELLED. The loop must run
 * afterwards so that the handles close. */
void wf_loadgen_client_close(wf_loadgen_client *cl);

#endif
