/* Artifact transfer frame codecs (proto/frame_artifact.h). */
#include "proto/frame_artifact.h"

#include <string.h>

#include "proto/frame_impl.h"

#define RANGE_SIZE (4u + 4u + 4u + 1u + 8u + 8u + 8u + 8u)

wf_status wf_frame_encode_artifact_transfer(const wf_frame_artifact_transfer *m, void *buf,
                                            size_t cap, size_t *len, char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    if (m->src.kind != m->dst.kind)
        wf__fw_fail(&w, "source kind %d differs from destination kind %d", (int)m->src.kind,
                    (int)m->dst.kind);
    if (m->n_ranges < 0 || m->n_ranges > WF_FRAME_MAX_RANGES || (m->n_ranges && !m->ranges))
        wf__fw_fail(&w, "n_ranges = %d outside [0, %d]", m->n_ranges, WF_FRAME_MAX_RANGES);
    wf__fw_u64(&w, m->transfer_id);
    wf__fw_artifact(&w, &m->src, "src");
    wf__fw_artifact(&w, &m->dst, "dst");
    wf__fw_u32(&w, m->codec_profile);
    wf__fw_u64(&w, m->total_bytes);
    wf__fw_u32(&w, (uint32_t)m->n_ranges);
    uint64_t sum = 0;
    for (int i = 0; i < m->n_ranges && w.st == WF_OK; i++) {
        const wf_frame_transfer_range *g = &m->ranges[i];
        if (g->src_rank < 0 || g->dst_rank < 0 || g->shard < -1 ||
            (unsigned)g->method >= WF_FRAME_TRANSFER_METHOD_COUNT ||
            g->length > UINT64_MAX - sum) {
            wf__fw_fail(&w, "ranges[%d]: ranks %d -> %d, shard %d, method %d or length invalid",
                        i, g->src_rank, g->dst_rank, g->shard, (int)g->method);
            break;
        }
        sum += g->length;
        wf__fw_i32(&w, g->src_rank);
        wf__fw_i32(&w, g->dst_rank);
        wf__fw_i32(&w, g->shard);
        wf__fw_u8(&w, (uint8_t)g->method);
        wf__fw_u64(&w, g->src_offset);
        wf__fw_u64(&w, g->length);
        wf__fw_u64(&w, g->dst_offset);
        wf__fw_u64(&w, g->tag);
    }
    if (w.st == WF_OK && sum != m->total_bytes)
        wf__fw_fail(&w, "ranges sum to %llu bytes, total_bytes is %llu",
                    (unsigned long long)sum, (unsigned long long)m->total_bytes);
    return wf__fw_finish(&w, WF_FRAME_ARTIFACT_TRANSFER, len);
}

wf_status wf_frame_decode_artifact_transfer(const wf_frame_view *f, wf_frame_arena *arena,
                                            wf_frame_artifact_transfer *out, char *err,
                                            size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_ARTIFACT_TRANSFER, arena, err, errlen);
    memset(out, 0, sizeof *out);
    out->transfer_id = wf__fr_u64(&r, "transfer_id");
    wf__fr_artifact(&r, &out->src, "src");
    wf__fr_artifact(&r, &out->dst, "dst");
    if (r.st == WF_OK && out->src.kind != out->dst.kind)
        wf__fr_fail(&r, WF_EPROTO, "source kind %u differs from destination kind %u",
                    (unsigned)out->src.kind, (unsigned)out->dst.kind);
    out->codec_profile = wf__fr_u32(&r, "codec_profile");
    out->total_bytes = wf__fr_u64(&r, "total_bytes");
    uint32_t n = wf__fr_count(&r, WF_FRAME_MAX_RANGES, RANGE_SIZE, "n_ranges");
    wf_frame_transfer_range *g =
        n ? wf__fr_alloc(&r, n * sizeof *g, _Alignof(wf_frame_transfer_range), "ranges") : NULL;
    uint64_t sum = 0;
    for (uint32_t i = 0; g && i < n && r.st == WF_OK; i++) {
        g[i].src_rank = wf__fr_i32_range(&r, 0, INT32_MAX, "range.src_rank");
        g[i].dst_rank = wf__fr_i32_range(&r, 0, INT32_MAX, "range.dst_rank");
        g[i].shard = wf__fr_i32_range(&r, -1, INT32_MAX, "range.shard");
        unsigned method = wf__fr_u8(&r, "range.method");
        if (r.st == WF_OK && method >= WF_FRAME_TRANSFER_METHOD_COUNT)
            wf__fr_fail(&r, WF_EPROTO, "ranges[%u]: invalid transfer method %u", i, method);
        g[i].method = (wf_frame_transfer_method)method;
        g[i].src_offset = wf__fr_u64(&r, "range.src_offset");
        g[i].length = wf__fr_u64(&r, "range.length");
        g[i].dst_offset = wf__fr_u64(&r, "range.dst_offset");
        g[i].tag = wf__fr_u64(&r, "range.tag");
        if (r.st == WF_OK && g[i].length > UINT64_MAX - sum)
            wf__fr_fail(&r, WF_ERANGE, "ranges[%u]: lengths overflow 64 bits", i);
        sum += g[i].length;
    }
    if (r.st == WF_OK && sum != out->total_bytes)
        wf__fr_fail(&r, WF_ERANGE, "ranges sum to %llu bytes, total_bytes is %llu",
                    (unsigned long long)sum, (unsigned long long)out->total_bytes);
    out->ranges = g;
    out->n_ranges = g ? (int)n : 0;
    return wf__fr_end(&r);
}

wf_status wf_frame_encode_transfer_done(const wf_frame_transfer_done *m, void *buf, size_t cap,
                                        size_t *len, char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    if (m->rank < 0) wf__fw_fail(&w, "rank = %d is negative", m->rank);
    wf__fw_u64(&w, m->transfer_id);
    wf__fw_i32(&w, m->rank);
    wf__fw_status(&w, m->status, "status");
    wf__fw_u64(&w, m->bytes);
    wf__fw_u64(&w, m->elapsed_ns);
    wf__fw_str(&w, m->message, WF_FRAME_MESSAGE_MAX, "message");
    return wf__fw_finish(&w, WF_FRAME_TRANSFER_DONE, len);
}

wf_status wf_frame_decode_transfer_done(const wf_frame_view *f, wf_frame_transfer_done *out,
                                        char *err, size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_TRANSFER_DONE, NULL, err, errlen);
    out->transfer_id = wf__fr_u64(&r, "transfer_id");
    out->rank = wf__fr_i32_range(&r, 0, INT32_MAX, "rank");
    out->status = wf__fr_status(&r, "status");
    out->bytes = wf__fr_u64(&r, "bytes");
    out->elapsed_ns = wf__fr_u64(&r, "elapsed_ns");
    wf__fr_str_fixed(&r, out->message, WF_FRAME_MESSAGE_MAX, "message");
    return wf__fr_end(&r);
}
