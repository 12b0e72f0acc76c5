/* Control frame codecs (proto/frame_control.h): join, world table, heartbeat, steering. */
#include "proto/frame_control.h"

#include <string.h>

#include "proto/frame_impl.h"

const char *wf_frame_role_str(wf_frame_role role) {
    switch (role) {
    case WF_FRAME_ROLE_WORKER: return "worker";
    case WF_FRAME_ROLE_PREFILL: return "prefill";
    case WF_FRAME_ROLE_DECODE: return "decode";
    case WF_FRAME_ROLE_DIT: return "dit";
    case WF_FRAME_ROLE_COUNT: break;
    }
    return "unknown";
}

bool wf_frame_model_fingerprint_equal(const wf_frame_model_fingerprint *a,
                                      const wf_frame_model_fingerprint *b) {
    return a->file_size == b->file_size && memcmp(a->digest, b->digest, sizeof a->digest) == 0 &&
           strncmp(a->name, b->name, sizeof a->name) == 0;
}

static void fw_role(wf__fw *w, wf_frame_role role) {
    if ((unsigned)role >= WF_FRAME_ROLE_COUNT) {
        wf__fw_fail(w, "role %d is not a wf_frame_role", (int)role);
        return;
    }
    wf__fw_u8(w, (uint8_t)role);
}

static wf_frame_role fr_role(wf__fr *r) {
    unsigned v = wf__fr_u8(r, "role");
    if (r->st == WF_OK && v >= WF_FRAME_ROLE_COUNT)
        wf__fr_fail(r, WF_EPROTO, "role %u is not a wf_frame_role", v);
    return (wf_frame_role)v;
}

/* ---- HELLO -------------------------------------------------------------------------------------- */

wf_status wf_frame_encode_hello(const wf_frame_hello *m, void *buf, size_t cap, size_t *len,
                                char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    if (m->requested_rank < WF_FRAME_RANK_ANY)
        wf__fw_fail(&w, "requested_rank = %d (want >= 0 or WF_FRAME_RANK_ANY)",
                    m->requested_rank);
    wf__fw_u16(&w, m->version_min);
    wf__fw_u16(&w, m->version_max);
    fw_role(&w, m->role);
    wf__fw_i32(&w, m->requested_rank);
    wf__fw_u32(&w, m->pid);
    wf__fw_str(&w, m->host, WF_FRAME_HOST_MAX, "host");
    wf__fw_u32(&w, m->n_cores);
    /* Trailing zero words are dropped, so each core set has exactly one encoding. */
    int words = WF_FRAME_MAX_CORE_WORDS;
    while (words > 0 && m->core_mask[words - 1] == 0) words--;
    wf__fw_u8(&w, (uint8_t)words);
    for (int i = 0; i < words; i++) wf__fw_u64(&w, m->core_mask[i]);
    wf__fw_u64(&w, m->model.file_size);
    wf__fw_bytes(&w, m->model.digest, WF_FRAME_DIGEST_SIZE);
    wf__fw_str(&w, m->model.name, WF_FRAME_NAME_MAX, "model.name");
    wf__fw_blob(&w, m->ucx_address, m->ucx_address_len, WF_FRAME_UCX_ADDRESS_MAX, "ucx_address");
    wf__fw_blob(&w, m->rkey, m->rkey_len, WF_FRAME_RKEY_MAX, "rkey");
    wf__fw_u64(&w, m->buffer_addr);
    wf__fw_u64(&w, m->buffer_size);
    wf__fw_u64(&w, m->incarnation);
    return wf__fw_finish(&w, WF_FRAME_HELLO, len);
}

wf_status wf_frame_decode_hello(const wf_frame_view *f, wf_frame_arena *arena,
                                wf_frame_hello *out, char *err, size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_HELLO, arena, err, errlen);
    memset(out, 0, sizeof *out);
    out->version_min = wf__fr_u16(&r, "version_min");
    out->version_max = wf__fr_u16(&r, "version_max");
    out->role = fr_role(&r);
    out->requested_rank = wf__fr_i32_range(&r, WF_FRAME_RANK_ANY, INT32_MAX, "requested_rank");
    out->pid = wf__fr_u32(&r, "pid");
    wf__fr_str_fixed(&r, out->host, WF_FRAME_HOST_MAX, "host");
    out->n_cores = wf__fr_u32(&r, "n_cores");
    unsigned words = wf__fr_u8(&r, "n_core_words");
    if (r.st == WF_OK && words > WF_FRAME_MAX_CORE_WORDS)
        wf__fr_fail(&r, WF_ERANGE, "n_core_words = %u exceeds %d", words,
                    WF_FRAME_MAX_CORE_WORDS);
    for (unsigned i = 0; i < words && r.st == WF_OK; i++)
        out->core_mask[i] = wf__fr_u64(&r, "core_mask");
    if (r.st == WF_OK && words && out->core_mask[words - 1] == 0)
        wf__fr_fail(&r, WF_EFORMAT, "core_mask: last of %u words is zero", words);
    out->model.file_size = wf__fr_u64(&r, "model.file_size");
    if (wf__fr_need(&r, WF_FRAME_DIGEST_SIZE, "model.digest")) {
        memcpy(out->model.digest, r.p + r.off, WF_FRAME_DIGEST_SIZE);
        r.off += WF_FRAME_DIGEST_SIZE;
    }
    wf__fr_str_fixed(&r, out->model.name, WF_FRAME_NAME_MAX, "model.name");
    out->ucx_address =
        wf__fr_blob(&r, &out->ucx_address_len, WF_FRAME_UCX_ADDRESS_MAX, "ucx_address");
    out->rkey = wf__fr_blob(&r, &out->rkey_len, WF_FRAME_RKEY_MAX, "rkey");
    out->buffer_addr = wf__fr_u64(&r, "buffer_addr");
    out->buffer_size = wf__fr_u64(&r, "buffer_size");
    out->incarnation = wf__fr_u64(&r, "incarnation");
    return wf__fr_end(&r);
}

/* ---- peer table (WELCOME, WORLD_TABLE) ------------------------------------------------------ */

#define PEER_MIN (4u + 1u + 4u + 2u + 4u + 4u + 8u + 8u + 8u)

static void fw_world(wf__fw *w, int32_t world_size, const wf_frame_peer *peers, int n_peers) {
    if (world_size < 1 || world_size > WF_FRAME_MAX_WORLD || n_peers < 0 ||
        n_peers > world_size || (n_peers && !peers)) {
        wf__fw_fail(w, "world_size %d / n_peers %d out of range (world 1..%d)", world_size,
                    n_peers, WF_FRAME_MAX_WORLD);
        return;
    }
    wf__fw_u32(w, (uint32_t)n_peers);
    for (int i = 0; i < n_peers; i++) {
        const wf_frame_peer *p = &peers[i];
        if (p->rank < 0 || p->rank >= world_size) {
            wf__fw_fail(w, "peers[%d].rank = %d outside [0, %d)", i, p->rank, world_size);
            return;
        }
        wf__fw_i32(w, p->rank);
        fw_role(w, p->role);
        wf__fw_u32(w, p->pid);
        wf__fw_str(w, p->host, WF_FRAME_HOST_MAX, "peer.host");
        wf__fw_blob(w, p->ucx_address, p->ucx_address_len, WF_FRAME_UCX_ADDRESS_MAX,
                    "peer.ucx_address");
        wf__fw_blob(w, p->rkey, p->rkey_len, WF_FRAME_RKEY_MAX, "peer.rkey");
        wf__fw_u64(w, p->buffer_addr);
        wf__fw_u64(w, p->buffer_size);
        wf__fw_u64(w, p->incarnation);
    }
}

static void fr_world(wf__fr *r, int32_t world_size, const wf_frame_peer **peers, int *n_peers) {
    *peers = NULL;
    *n_peers = 0;
    uint32_t n = wf__fr_count(r, (uint32_t)world_size, PEER_MIN, "n_peers");
    if (r->st != WF_OK || n == 0) return;
    wf_frame_peer *p = wf__fr_alloc(r, n * sizeof *p, _Alignof(wf_frame_peer), "peers");
    if (!p) return;
    memset(p, 0, n * sizeof *p);
    for (uint32_t i = 0; i < n && r->st == WF_OK; i++) {
        p[i].rank = wf__fr_i32_range(r, 0, world_size - 1, "peer.rank");
        p[i].role = fr_role(r);
        p[i].pid = wf__fr_u32(r, "peer.pid");
        wf__fr_str_fixed(r, p[i].host, WF_FRAME_HOST_MAX, "peer.host");
        p[i].ucx_address = wf__fr_blob(r, &p[i].ucx_address_len, WF_FRAME_UCX_ADDRESS_MAX,
                                       "peer.ucx_address");
        p[i].rkey = wf__fr_blob(r, &p[i].rkey_len, WF_FRAME_RKEY_MAX, "peer.rkey");
        p[i].buffer_addr = wf__fr_u64(r, "peer.buffer_addr");
        p[i].buffer_size = wf__fr_u64(r, "peer.buffer_size");
        p[i].incarnation = wf__fr_u64(r, "peer.incarnation");
    }
    *peers = p;
    *n_peers = (int)n;
}

wf_status wf_frame_encode_welcome(const wf_frame_welcome *m, void *buf, size_t cap, size_t *len,
                                  char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    if (m->rank < 0 || m->rank >= m->world_size)
        wf__fw_fail(&w, "rank = %d outside [0, world_size %d)", m->rank, m->world_size);
    wf__fw_u16(&w, m->version);
    wf__fw_i32(&w, m->rank);
    wf__fw_i32(&w, m->world_size);
    wf__fw_u32(&w, m->heartbeat_ms);
    wf__fw_u64(&w, m->epoch);
    fw_world(&w, m->world_size, m->peers, m->n_peers);
    return wf__fw_finish(&w, WF_FRAME_WELCOME, len);
}

wf_status wf_frame_decode_welcome(const wf_frame_view *f, wf_frame_arena *arena,
                                  wf_frame_welcome *out, char *err, size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_WELCOME, arena, err, errlen);
    memset(out, 0, sizeof *out);
    out->version = wf__fr_u16(&r, "version");
    int32_t rank = wf__fr_i32(&r, "rank");
    out->world_size = wf__fr_i32_range(&r, 1, WF_FRAME_MAX_WORLD, "world_size");
    if (r.st == WF_OK && (rank < 0 || rank >= out->world_size))
        wf__fr_fail(&r, WF_ERANGE, "rank = %d outside [0, world_size %d)", rank,
                    out->world_size);
    out->rank = rank;
    out->heartbeat_ms = wf__fr_u32(&r, "heartbeat_ms");
    out->epoch = wf__fr_u64(&r, "epoch");
    if (r.st == WF_OK) fr_world(&r, out->world_size, &out->peers, &out->n_peers);
    return wf__fr_end(&r);
}

wf_status wf_frame_encode_world_table(const wf_frame_world_table *m, void *buf, size_t cap,
                                      size_t *len, char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    wf__fw_u64(&w, m->epoch);
    wf__fw_i32(&w, m->world_size);
    fw_world(&w, m->world_size, m->peers, m->n_peers);
    return wf__fw_finish(&w, WF_FRAME_WORLD_TABLE, len);
}

wf_status wf_frame_decode_world_table(const wf_frame_view *f, wf_frame_arena *arena,
                                      wf_frame_world_table *out, char *err, size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_WORLD_TABLE, arena, err, errlen);
    memset(out, 0, sizeof *out);
    out->epoch = wf__fr_u64(&r, "epoch");
    out->world_size = wf__fr_i32_range(&r, 1, WF_FRAME_MAX_WORLD, "world_size");
    if (r.st == WF_OK) fr_world(&r, out->world_size, &out->peers, &out->n_peers);
    return wf__fr_end(&r);
}

/* ---- REJECT, HEARTBEAT, CANCEL, DRAIN, SHUTDOWN, ERROR ---------------------------------------- */

wf_status wf_frame_encode_reject(const wf_frame_reject *m, void *buf, size_t cap, size_t *len,
                                 char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    wf__fw_u16(&w, m->version_min);
    wf__fw_u16(&w, m->version_max);
    wf__fw_status(&w, m->status, "status");
    wf__fw_str(&w, m->reason, WF_FRAME_MESSAGE_MAX, "reason");
    return wf__fw_finish(&w, WF_FRAME_REJECT, len);
}

wf_status wf_frame_decode_reject(const wf_frame_view *f, wf_frame_reject *out, char *err,
                                 size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_REJECT, NULL, err, errlen);
    memset(out, 0, sizeof *out);
    out->version_min = wf__fr_u16(&r, "version_min");
    out->version_max = wf__fr_u16(&r, "version_max");
    out->status = wf__fr_status(&r, "status");
    wf__fr_str_fixed(&r, out->reason, WF_FRAME_MESSAGE_MAX, "reason");
    return wf__fr_end(&r);
}

wf_status wf_frame_encode_heartbeat(const wf_frame_heartbeat *m, void *buf, size_t cap,
                                    size_t *len, char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    if (m->kv_blocks_used > m->kv_blocks_total)
        wf__fw_fail(&w, "kv_blocks_used %u > kv_blocks_total %u", m->kv_blocks_used,
                    m->kv_blocks_total);
    wf__fw_u64(&w, m->seq);
    wf__fw_u64(&w, m->time_ns);
    wf__fw_u32(&w, m->kv_blocks_used);
    wf__fw_u32(&w, m->kv_blocks_total);
    wf__fw_u32(&w, m->queued_batches);
    wf__fw_u32(&w, m->kv_swa_blocks_total); /* 1.3 */
    if (m->prefix_hits > m->prefix_queries)
        wf__fw_fail(&w, "prefix_hits %llu > prefix_queries %llu", (unsigned long long)m->prefix_hits,
                    (unsigned long long)m->prefix_queries);
    wf__fw_u64(&w, m->prefix_queries); /* 1.4 */
    wf__fw_u64(&w, m->prefix_hits);
    wf__fw_u64(&w, m->kv_layers_early);
    return wf__fw_finish(&w, WF_FRAME_HEARTBEAT, len);
}

wf_status wf_frame_decode_heartbeat(const wf_frame_view *f, wf_frame_heartbeat *out, char *err,
                                    size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_HEARTBEAT, NULL, err, errlen);
    out->seq = wf__fr_u64(&r, "seq");
    out->time_ns = wf__fr_u64(&r, "time_ns");
    out->kv_blocks_used = wf__fr_u32(&r, "kv_blocks_used");
    out->kv_blocks_total = wf__fr_u32(&r, "kv_blocks_total");
    out->queued_batches = wf__fr_u32(&r, "queued_batches");
    out->kv_swa_blocks_total = r.major > 1 || r.minor >= 3 ? wf__fr_u32(&r, "kv_swa_blocks_total") : 0;
    bool v14 = r.major > 1 || r.minor >= 4;
    out->prefix_queries = v14 ? wf__fr_u64(&r, "prefix_queries") : 0;
    out->prefix_hits = v14 ? wf__fr_u64(&r, "prefix_hits") : 0;
    out->kv_layers_early = v14 ? wf__fr_u64(&r, "kv_layers_early") : 0;
    if (r.st == WF_OK && out->prefix_hits > out->prefix_queries)
        wf__fr_fail(&r, WF_ERANGE, "prefix_hits %llu > prefix_queries %llu",
                    (unsigned long long)out->prefix_hits, (unsigned long long)out->prefix_queries);
    if (r.st == WF_OK && out->kv_blocks_used > out->kv_blocks_total)
        wf__fr_fail(&r, WF_ERANGE, "kv_blocks_used %u > kv_blocks_total %u", out->kv_blocks_used,
                    out->kv_blocks_total);
    return wf__fr_end(&r);
}

wf_status wf_frame_encode_cancel(const wf_frame_cancel *m, void *buf, size_t cap, size_t *len,
                                 char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    if ((unsigned)m->scope > WF_FRAME_CANCEL_BATCH)
        wf__fw_fail(&w, "cancel scope %d", (int)m->scope);
    wf__fw_u8(&w, (uint8_t)m->scope);
    wf__fw_u64(&w, m->id);
    return wf__fw_finish(&w, WF_FRAME_CANCEL, len);
}

wf_status wf_frame_decode_cancel(const wf_frame_view *f, wf_frame_cancel *out, char *err,
                                 size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_CANCEL, NULL, err, errlen);
    unsigned scope = wf__fr_u8(&r, "scope");
    if (r.st == WF_OK && scope > WF_FRAME_CANCEL_BATCH)
        wf__fr_fail(&r, WF_EPROTO, "invalid cancel scope %u", scope);
    out->scope = (wf_frame_cancel_scope)scope;
    out->id = wf__fr_u64(&r, "id");
    return wf__fr_end(&r);
}

wf_status wf_frame_encode_drain(const wf_frame_drain *m, void *buf, size_t cap, size_t *len,
                                char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    wf__fw_u64(&w, m->deadline_ns);
    return wf__fw_finish(&w, WF_FRAME_DRAIN, len);
}

wf_status wf_frame_decode_drain(const wf_frame_view *f, wf_frame_drain *out, char *err,
                                size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_DRAIN, NULL, err, errlen);
    out->deadline_ns = wf__fr_u64(&r, "deadline_ns");
    return wf__fr_end(&r);
}

wf_status wf_frame_encode_status_msg(wf_frame_type type, const wf_frame_status_msg *m, void *buf,
                                     size_t cap, size_t *len, char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    if (type != WF_FRAME_SHUTDOWN && type != WF_FRAME_ERROR)
        wf__fw_fail(&w, "a status message is a shutdown or error frame, not %s",
                    wf_frame_type_str(type));
    wf__fw_status(&w, m->status, "status");
    wf__fw_str(&w, m->message, WF_FRAME_MESSAGE_MAX, "message");
    return wf__fw_finish(&w, type, len);
}

wf_status wf_frame_decode_status_msg(const wf_frame_view *f, wf_frame_status_msg *out, char *err,
                                     size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, f->hdr.type == WF_FRAME_ERROR ? WF_FRAME_ERROR : WF_FRAME_SHUTDOWN, NULL,
                err, errlen);
    out->status = wf__fr_status(&r, "status");
    wf__fr_str_fixed(&r, out->message, WF_FRAME_MESSAGE_MAX, "message");
    return wf__fr_end(&r);
}

/* ---- WORKER_INFO ---------------------------------------------------------------------------- */

static bool speed_ok(float v) { return v > 0 && v < 1e9f; } /* finite and positive (NaN fails) */

wf_status wf_frame_encode_worker_info(const wf_frame_worker_info *m, void *buf, size_t cap,
                                      size_t *len, char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    if ((unsigned)m->role >= WF_FRAME_ROLE_COUNT) wf__fw_fail(&w, "role %d out of range", (int)m->role);
    if (m->n_codecs < 0 || m->n_codecs > WF_FRAME_MAX_CODECS)
        wf__fw_fail(&w, "n_codecs %d out of 0..%d", m->n_codecs, WF_FRAME_MAX_CODECS);
    int n = m->n_codecs < 0 ? 0 : m->n_codecs > WF_FRAME_MAX_CODECS ? WF_FRAME_MAX_CODECS : m->n_codecs;
    for (int i = 0; i < n; i++) {
        const wf_frame_codec_speed *c = &m->codecs[i];
        if (!speed_ok(c->cr) || !speed_ok(c->enc_gbps) || !speed_ok(c->dec_gbps))
            wf__fw_fail(&w, "codec %d (%.32s): cr, enc_gbps and dec_gbps must be finite and > 0", i,
                        c->name);
    }
    wf__fw_u8(&w, (uint8_t)m->role);
    wf__fw_u32(&w, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        const wf_frame_codec_speed *c = &m->codecs[i];
        wf__fw_str(&w, c->name, WF_FRAME_CODEC_NAME_MAX, "codec name");
        wf__fw_f32(&w, c->cr);
        wf__fw_f32(&w, c->enc_gbps);
        wf__fw_f32(&w, c->dec_gbps);
    }
    return wf__fw_finish(&w, WF_FRAME_WORKER_INFO, len);
}

wf_status wf_frame_decode_worker_info(const wf_frame_view *f, wf_frame_worker_info *out, char *err,
                                      size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_WORKER_INFO, NULL, err, errlen);
    memset(out, 0, sizeof *out);
    uint8_t role = wf__fr_u8(&r, "role");
    if (r.st == WF_OK && role >= WF_FRAME_ROLE_COUNT) wf__fr_fail(&r, WF_ERANGE, "role %u out of range", role);
    out->role = (wf_frame_role)role;
    /* Each codec takes at least 14 bytes: an empty name's u16 length and three f32. */
    uint32_t n = wf__fr_count(&r, WF_FRAME_MAX_CODECS, 14, "n_codecs");
    for (uint32_t i = 0; r.st == WF_OK && i < n; i++) {
        wf_frame_codec_speed *c = &out->codecs[i];
        wf__fr_str_fixed(&r, c->name, WF_FRAME_CODEC_NAME_MAX, "codec name");
        c->cr = wf__fr_f32(&r, "cr");
        c->enc_gbps = wf__fr_f32(&r, "enc_gbps");
        c->dec_gbps = wf__fr_f32(&r, "dec_gbps");
        if (r.st == WF_OK && (!speed_ok(c->cr) || !speed_ok(c->enc_gbps) || !speed_ok(c->dec_gbps)))
            wf__fr_fail(&r, WF_ERANGE, "codec %u (%s): cr, enc_gbps and dec_gbps must be finite and > 0", i,
                        c->name);
    }
    out->n_codecs = r.st == WF_OK ? (int)n : 0;
    return wf__fr_end(&r);
}

/* ---- VMODEL, VMODEL_ACK -------------------------------------------------------------------- */

static void fw_vmodel_head(wf__fw *w, wf_frame_vmodel_op op, uint32_t num) {
    if ((unsigned)op > WF_FRAME_VMODEL_REMOVE) wf__fw_fail(w, "vmodel op %d out of range", (int)op);
    if (num == 0) wf__fw_fail(w, "vmodel num 0 (the bare backbone)");
    wf__fw_u8(w, (uint8_t)op);
    wf__fw_u32(w, num);
}

static void fr_vmodel_head(wf__fr *r, wf_frame_vmodel_op *op, uint32_t *num) {
    unsigned v = wf__fr_u8(r, "op");
    if (r->st == WF_OK && v > WF_FRAME_VMODEL_REMOVE)
        wf__fr_fail(r, WF_EPROTO, "vmodel op %u is not a wf_frame_vmodel_op", v);
    *op = (wf_frame_vmodel_op)v;
    *num = wf__fr_u32(r, "num");
    if (r->st == WF_OK && *num == 0) wf__fr_fail(r, WF_ERANGE, "vmodel num 0 (the bare backbone)");
}

wf_status wf_frame_encode_vmodel(const wf_frame_vmodel *m, void *buf, size_t cap, size_t *len,
                                 char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    const char *spec = m->spec ? m->spec : "";
    if (m->op == WF_FRAME_VMODEL_ADD && !spec[0]) wf__fw_fail(&w, "vmodel add without a spec");
    fw_vmodel_head(&w, m->op, m->num);
    wf__fw_str(&w, spec, WF_FRAME_VMODEL_SPEC_MAX, "spec");
    return wf__fw_finish(&w, WF_FRAME_VMODEL, len);
}

wf_status wf_frame_decode_vmodel(const wf_frame_view *f, wf_frame_arena *arena,
                                 wf_frame_vmodel *out, char *err, size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_VMODEL, arena, err, errlen);
    fr_vmodel_head(&r, &out->op, &out->num);
    out->spec = wf__fr_str(&r, WF_FRAME_VMODEL_SPEC_MAX, "spec");
    if (r.st == WF_OK && out->op == WF_FRAME_VMODEL_ADD && !out->spec[0])
        wf__fr_fail(&r, WF_ERANGE, "vmodel add without a spec");
    return wf__fr_end(&r);
}

wf_status wf_frame_encode_vmodel_ack(const wf_frame_vmodel_ack *m, void *buf, size_t cap,
                                     size_t *len, char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    fw_vmodel_head(&w, m->op, m->num);
    wf__fw_status(&w, m->status, "status");
    wf__fw_str(&w, m->message, WF_FRAME_MESSAGE_MAX, "message");
    return wf__fw_finish(&w, WF_FRAME_VMODEL_ACK, len);
}

wf_status wf_frame_decode_vmodel_ack(const wf_frame_view *f, wf_frame_vmodel_ack *out, char *err,
                                     size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_VMODEL_ACK, NULL, err, errlen);
    fr_vmodel_head(&r, &out->op, &out->num);
    out->status = wf__fr_status(&r, "status");
    wf__fr_str_fixed(&r, out->message, WF_FRAME_MESSAGE_MAX, "message");
    return wf__fr_end(&r);
}
