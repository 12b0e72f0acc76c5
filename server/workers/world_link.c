#include "server/workers/world_link.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame_control.h"
#include "proto/frame_task.h"

void wf_link_init(wf_link *l, int peer) {
    memset(l, 0, sizeof *l);
    l->peer = peer;
}

wf_status wf_link_post(wf_world *w, wf_link *l) {
    if (!l->rbuf && !(l->rbuf = malloc(WF_LINK_MAX_FRAME))) return WF_ENOMEM;
    l->recv = (wf_world_op){.kind = WF_WORLD_RECV, .peer = l->peer,
                            .tag = {.kind = WF_WORLD_TAG_USER}, .buf = l->rbuf,
                            .len = WF_LINK_MAX_FRAME};
    wf_status st = wf_world_post(w, &l->recv, 1);
    l->posted = st == WF_OK;
    return st;
}

wf_status wf_link_open(wf_link *l, wf_frame_view *f, char *err, size_t errlen) {
    l->posted = 0;
    if (l->recv.status != WF_OK) {
        snprintf(err, errlen, "receive from rank %d: %s", l->peer, wf_status_str(l->recv.status));
        return l->recv.status;
    }
    l->frames_in++;
    return wf_frame_open(l->rbuf, l->recv.received, WF_LINK_MAX_FRAME, f, err, errlen);
}

void wf_link_free(wf_world *w, wf_link *l) {
    if (l->posted && w) wf_world_cancel(w, &l->recv, 1);
    free(l->rbuf);
    free(l->sbuf);
    memset(l, 0, sizeof *l);
    l->peer = -1;
}

wf_status wf_link_send(wf_world *w, wf_link *l, wf_link_encode_fn encode, const void *msg,
                       char *err, size_t errlen) {
    size_t len = 0;
    wf_status st = encode(msg, l->sbuf, l->scap, &len, err, errlen);
    if (st == WF_ERANGE && len > l->scap) {
        size_t cap = len < 4096 ? 4096 : len + len / 2;
        uint8_t *p = realloc(l->sbuf, cap);
        if (!p) return WF_ENOMEM;
        l->sbuf = p;
        l->scap = cap;
        st = encode(msg, l->sbuf, l->scap, &len, err, errlen);
    }
    if (st != WF_OK) return st;
    if (len > WF_LINK_MAX_FRAME) {
        snprintf(err, errlen, "frame of %zu bytes exceeds the link's %u", len, WF_LINK_MAX_FRAME);
        return WF_ERANGE;
    }
    wf_world_op op = {.kind = WF_WORLD_SEND, .peer = l->peer, .tag = {.kind = WF_WORLD_TAG_USER},
                      .buf = l->sbuf, .len = len};
    st = wf_world_run(w, &op, 1);
    if (st != WF_OK) snprintf(err, errlen, "%s", wf_world_error(w));
    else l->frames_out++;
    return st;
}

/* wf_frame_encode_status_msg takes the frame type first: adapt it to wf_link_encode_fn. */
typedef struct status_frame {
    wf_frame_type type;
    wf_frame_status_msg m;
} status_frame;

static wf_status encode_status(const void *msg, void *buf, size_t cap, size_t *len, char *err,
                               size_t errlen) {
    const status_frame *s = msg;
    return wf_frame_encode_status_msg(s->type, &s->m, buf, cap, len, err, errlen);
}

wf_status wf_link_send_status(wf_world *w, wf_link *l, wf_frame_type type, wf_status status,
                              const char *message) {
    status_frame s = {.type = type, .m = {.status = status}};
    snprintf(s.m.message, sizeof s.m.message, "%s", message ? message : "");
    char err[256];
    return wf_link_send(w, l, encode_status, &s, err, sizeof err);
}

size_t wf_link_arena_bound(size_t payload_len) {
    size_t a = wf_frame_task_dispatch_arena_bound(payload_len);
    size_t b = wf_frame_task_event_arena_bound(payload_len);
    return (a > b ? a : b) + 64;
}
