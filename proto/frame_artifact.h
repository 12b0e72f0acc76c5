/* Artifact transfer frames: the coordinator tells the ranks of a placement which byte ranges of
 * an artifact (KV blocks, a latent) move where and how (ARTIFACT_TRANSFER), and a rank reports
 * the end of its part (TRANSFER_DONE, which doubles as the acknowledgement). The bytes
 * themselves move over UCX (an RMA put into the destination's symmetric buffer, or a tagged
 * send); compressed KV travels as a kv/ codec frame named by codec_profile. Wire layouts: the
 * tables in proto/frame.h.
 *
 *     wf_frame_transfer_range ranges[] = {{.src_rank = 0, .dst_rank = 3, .shard = -1,
 *         .method = WF_FRAME_TRANSFER_RMA_PUT, .length = n, .dst_offset = off}};
 *     wf_frame_artifact_transfer x = {.transfer_id = 7, .src = kv_on_prefill,
 *         .dst = kv_on_decode, .total_bytes = n, .ranges = ranges, .n_ranges = 1};
 *     wf_frame_encode_artifact_transfer(&x, buf, cap, &len, err, sizeof err);
 *
 * Ownership and statuses as in proto/frame.h; decoded block tables and ranges land in the
 * arena. Reentrant. */
#ifndef WF_PROTO_FRAME_ARTIFACT_H
#define WF_PROTO_FRAME_ARTIFACT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"
#include "proto/task.h"

typedef enum wf_frame_transfer_method {
    WF_FRAME_TRANSFER_RMA_PUT = 0,   /* put into the destination's symmetric buffer at dst_offset */
    WF_FRAME_TRANSFER_TAGGED_SEND,   /* tagged send with tag; the receiver posts a matching recv */
    WF_FRAME_TRANSFER_METHOD_COUNT
} wf_frame_transfer_method;

/* One contiguous piece: bytes [src_offset, src_offset + length) of the source rank's copy (or
 * shard) go to dst_rank. */
typedef struct wf_frame_transfer_range {
    int32_t src_rank, dst_rank;      /* >= 0 */
    int32_t shard;                   /* shard index in the source placement; -1: whole */
    wf_frame_transfer_method method;
    uint64_t src_offset, length;
    uint64_t dst_offset;             /* RMA_PUT: offset in the destination's symmetric buffer */
    uint64_t tag;                    /* TAGGED_SEND: the UCX tag */
} wf_frame_transfer_range;

typedef struct wf_frame_artifact_transfer {
    uint64_t transfer_id;
    wf_artifact src;                 /* id, kind, source placement (and blocks, for KV) */
    wf_artifact dst;                 /* destination placement (and the destination's blocks) */
    uint32_t codec_profile;          /* 0: raw bytes; else a kv/ codec profile id */
    uint64_t total_bytes;            /* sum of the ranges' lengths */
    const wf_frame_transfer_range *ranges;
    int n_ranges;                    /* <= WF_FRAME_MAX_RANGES */
} wf_frame_artifact_transfer;

typedef struct wf_frame_transfer_done {
    uint64_t transfer_id;
    int32_t rank;                    /* who reports */
    wf_status status;
    uint64_t bytes;                  /* bytes this rank moved (after the codec, if any) */
    uint64_t elapsed_ns;             /* for the link-bandwidth estimate */
    char message[WF_FRAME_MESSAGE_MAX];
} wf_frame_transfer_done;

/* The encoder checks src and dst kinds agree, ranges' ranks are >= 0, shard >= -1, methods are
 * known and the lengths sum to total_bytes (WF_EINVAL); the decoder checks the same (WF_EPROTO
 * for enums and a kind mismatch, WF_ERANGE for numbers). */
wf_status wf_frame_encode_artifact_transfer(const wf_frame_artifact_transfer *m, void *buf,
                                            size_t cap, size_t *len, char *err, size_t errlen);
wf_status wf_frame_decode_artifact_transfer(const wf_frame_view *f, wf_frame_arena *arena,
                                            wf_frame_artifact_transfer *out, char *err,
                                            size_t errlen);
wf_status wf_frame_encode_transfer_done(const wf_frame_transfer_done *m, void *buf, size_t cap,
                                        size_t *len, char *err, size_t errlen);
wf_status wf_frame_decode_transfer_done(const wf_frame_view *f, wf_frame_transfer_done *out,
                                        char *err, size_t errlen);

#endif
