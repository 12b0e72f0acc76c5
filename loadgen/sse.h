/* Incremental Server-Sent Events parser (the text/event-stream framing of streamed OpenAI
 * responses). Feed body bytes as they arrive, split anywhere; each complete event's data (its
 * "data:" lines joined with '\n') is handed to the callback.
 *
 *     static void on_event(void *ud, const char *event, const char *data, size_t len) {...}
 *     wf_loadgen_sse sse;
 *     wf_loadgen_sse_init(&sse, on_event, ud);
 *     wf_loadgen_sse_feed(&sse, buf, n);   // any number of times
 *     wf_loadgen_sse_reset(&sse);          // before reusing it for the next response
 *     wf_loadgen_sse_free(&sse);
 *
 * Lines end with LF, CRLF or CR; lines starting with ':' are comments; "event:" names the
 * event (NULL when absent, i.e. "message"); id/retry fields are ignored. An event is dispatched
 * at the blank line that ends it, and only if it had a data field. Not thread-safe. */
#ifndef WF_LOADGEN_SSE_H
#define WF_LOADGEN_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/base/status.h"

typedef void (*wf_loadgen_sse_cb)(void *ud, const char *event, const char *data, size_t len);

typedef struct wf_loadgen_sse {
    wf_loadgen_sse_cb cb;
    void *ud;
    char *line;      /* the current, unfinished line */
    size_t line_len, line_cap;
    char *data;      /* data of the current event */
    size_t data_len, data_cap;
    bool has_data;
    bool after_cr;   /* the last byte was CR: a following LF belongs to it */
    char event[64];
    size_t max_bytes; /* a line or event larger than this is a protocol error */
} wf_loadgen_sse;

void wf_loadgen_sse_init(wf_loadgen_sse *sse, wf_loadgen_sse_cb cb, void *ud);
/* Parses n bytes. WF_OK, WF_ENOMEM, or WF_EPROTO when an event grows past 16 MiB. */
wf_status wf_loadgen_sse_feed(wf_loadgen_sse *sse, const char *buf, size_t n);
/* Forgets any partial line/event; keeps the buffers for reuse. */
void wf_loadgen_sse_reset(wf_loadgen_sse *sse);
void wf_loadgen_sse_free(wf_loadgen_sse *sse);

#endif
