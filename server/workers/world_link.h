/* Frames over the world: the small plumbing weftd's coordinator (server/workers.c) and its
 * worker processes (server/worker.c) share. A link is one peer's receive slot (a posted UCX
 * receive of up to WF_LINK_MAX_FRAME bytes, tag WF_WORLD_TAG_USER) plus an encode buffer that
 * grows to the largest frame sent.
 *
 *     wf_link l;
 *     wf_link_init(&l, peer);
 *     wf_link_post(w, &l);                          // start receiving from peer
 *     for (;;) {
 *         if (wf_world_test(w, &l.recv, 1) == 1) {  // a frame (or the peer failed)
 *             wf_frame_view f;
 *             if (wf_link_open(&l, &f, err, sizeof err) == WF_OK) handle(&f);
 *             wf_link_post(w, &l);                  // next one
 *         }
 *     }
 *     wf_frame_heartbeat hb = {...};
 *     WF_LINK_SEND(w, &l, wf_frame_encode_heartbeat, &hb);   // blocking, bounded by the world
 *     wf_link_free(w, &l);
 *
 * Sends block until UCX has the bytes (wf_world_run, bounded by the world's time-out); every
 * frame is small next to a forward pass. Not thread-safe: a link belongs to the thread that
 * drives its world. */
#ifndef WF_SERVER_WORLD_LINK_H
#define WF_SERVER_WORLD_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/world/world.h"
#include "proto/frame.h"

#define WF_LINK_MAX_FRAME (16u << 20) /* a dispatch of 64 tasks with long histories fits */

typedef struct wf_link {
    int peer;
    wf_world_op recv;        /* posted receive (status WF_IN_PROGRESS while pending) */
    uint8_t *rbuf;           /* WF_LINK_MAX_FRAME bytes */
    uint8_t *sbuf;           /* encode buffer */
    size_t scap;
    int posted;
    uint64_t frames_in, frames_out;
} wf_link;

void wf_link_init(wf_link *l, int peer);
/* Posts the receive (allocates rbuf on first use). WF_OK, WF_ENOMEM, or the post's status. */
wf_status wf_link_post(wf_world *w, wf_link *l);
/* Checks the completed receive's bytes as a frame (envelope, checksum, size). Returns the
 * receive's own failure (WF_EPEER...) when it did not complete with data. */
wf_status wf_link_open(wf_link *l, wf_frame_view *f, char *err, size_t errlen);
/* Cancels a pending receive and frees the buffers. */
void wf_link_free(wf_world *w, wf_link *l);

/* Encodes with encode(msg, buf, cap, &len, err, errlen), growing the buffer on WF_ERANGE, and
 * sends the frame to the link's peer. */
typedef wf_status (*wf_link_encode_fn)(const void *msg, void *buf, size_t cap, size_t *len,
                                       char *err, size_t errlen);
wf_status wf_link_send(wf_world *w, wf_link *l, wf_link_encode_fn encode, const void *msg,
                       char *err, size_t errlen);
#define WF_LINK_SEND(w, l, encode, msg, err, errlen) \
    wf_link_send((w), (l), (wf_link_encode_fn)(encode), (msg), (err), (errlen))

/* Sends a SHUTDOWN or ERROR frame (status + message). */
wf_status wf_link_send_status(wf_world *w, wf_link *l, wf_frame_type type, wf_status status,
                              const char *message);

/* Bytes a decode arena needs for a frame with this payload length (any type weft sends). */
size_t wf_link_arena_bound(size_t payload_len);

#endif
