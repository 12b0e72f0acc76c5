/* Compressed KV transfers between workers: see kv_xfer.h. */
#include "server/workers/kv_xfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/codec.h"
#include "proto/request.h"
#include "proto/base/clock.h"
#include "proto/base/log.h"

#define HDR_MAGIC 0x584b4657u          /* "WFKX" */
#define HDR_FIXED 16u                  /* u32 magic, u32 n_blocks, u64 frame length */
#define HDR_MAX_BLOCKS 16384           /* 256k tokens of 16: far beyond any context */
#define HDR_CAP (HDR_FIXED + 4u * HDR_MAX_BLOCKS)

typedef struct xfer_ack {
    int32_t status;                    /* wf_status of the decode */
    uint32_t pad;
    uint64_t decode_ns;                /* how long the decode took (the sender's B excludes it) */
} xfer_ack;

typedef struct peer_rx {
    wf_world_op op;                    /* the posted HEADER receive */
    uint8_t *hdr;                      /* HDR_CAP bytes */
    int posted;
} peer_rx;

struct wf_kv_xfer {
    wf_kv_geometry geo;
    int max_tokens;
    wf_kv_codec *codec;
    wf_kv_profile_lib lib;             /* a copy (items, importance) */
    int force;                         /* -2: controller, -1: never compress, >= 0: that profile */
    int current;                       /* the profile the codec is set to (-1: none) */
    wf_kv_controller *ctl;
    double default_accuracy;
    uint8_t *buf;                      /* frames, both directions */
    size_t cap;
    peer_rx rx[WF_KV_XFER_MAX_PEERS];
    wf_kv_xfer_stats st;
};

void wf_kv_xfer_options_init(wf_kv_xfer_options *o) {
    memset(o, 0, sizeof *o);
    o->default_accuracy = 0.9;
    o->init_bandwidth_gbps = 10;
}

static wf_status copy_lib(wf_kv_profile_lib *dst, const wf_kv_profile_lib *src) {
    memset(dst, 0, sizeof *dst);
    if (!src) return WF_OK;
    *dst = *src;
    dst->items = NULL;
    dst->importance = NULL;
    if (src->n > 0) {
        if (!(dst->items = malloc((size_t)src->n * sizeof *dst->items))) return WF_ENOMEM;
        memcpy(dst->items, src->items, (size_t)src->n * sizeof *dst->items);
    }
    if (src->importance) {
        size_t n = (size_t)src->n_layers * (size_t)src->n_kv_heads;
        if (!(dst->importance = malloc(n * sizeof *dst->importance))) return WF_ENOMEM;
        memcpy(dst->importance, src->importance, n * sizeof *dst->importance);
    }
    return WF_OK;
}

wf_status wf_kv_xfer_new(const wf_kv_geometry *g, int max_tokens, const wf_kv_profile_lib *lib,
                         const wf_kv_xfer_options *o, wf_kv_xfer **out, char *err, size_t errlen) {
    *out = NULL;
    wf_kv_xfer *x = calloc(1, sizeof *x);
    if (!x) return WF_ENOMEM;
    x->geo = *g;
    x->max_tokens = max_tokens;
    x->current = -1;
    x->force = -2;
    x->default_accuracy = o->default_accuracy;
    wf_status st = copy_lib(&x->lib, lib);
    if (st != WF_OK) goto fail;
    if (x->lib.n > 0 && (x->lib.n_layers != g->n_layers || x->lib.n_kv_heads != g->n_kv_heads ||
                         x->lib.head_dim != g->head_dim)) {
        st = WF_EINVAL;
        snprintf(err, errlen, "the KV profile library is for %d layers x %d heads x %d, the model has "
                 "%d x %d x %d", x->lib.n_layers, x->lib.n_kv_heads, x->lib.head_dim, g->n_layers,
                 g->n_kv_heads, g->head_dim);
        goto fail;
    }
    if (o->force_profile && strcmp(o->force_profile, "auto") != 0) {
        if (strcmp(o->force_profile, "off") == 0) {
            x->force = -1;
        } else {
            for (int i = 0; i < x->lib.n; i++)
                if (strcmp(x->lib.items[i].profile.name, o->force_profile) == 0) x->force = i;
            if (x->force < 0) {
                st = WF_EINVAL;
                snprintf(err, errlen, "--kv-codec '%s': no such profile in the KV profile library",
                         o->force_profile);
                goto fail;
            }
        }
    }
    if ((st = wf_kv_codec_new(g, max_tokens, &x->codec)) != WF_OK) {
        snprintf(err, errlen, "KV codec: %s", wf_status_str(st));
        goto fail;
    }
    wf_kv_controller_options co;
    wf_kv_controller_options_init(&co);
    co.default_accuracy = o->default_accuracy;
    if (o->init_bandwidth_gbps > 0) co.init_bandwidth_gbps = o->init_bandwidth_gbps;
    if ((st = wf_kv_controller_new(&co, x->lib.items, x->lib.n, &x->ctl)) != WF_OK) {
        snprintf(err, errlen, "KV controller: %s", wf_status_str(st));
        goto fail;
    }
    for (int r = 0; r < WF_KV_XFER_MAX_PEERS; r++) x->rx[r].op.peer = -1;
    *out = x;
    return WF_OK;
fail:
    wf_kv_xfer_free(x, NULL);
    return st;
}

void wf_kv_xfer_free(wf_kv_xfer *x, wf_world *w) {
    if (!x) return;
    for (int r = 0; r < WF_KV_XFER_MAX_PEERS; r++) {
        if (x->rx[r].posted && w) wf_world_cancel(w, &x->rx[r].op, 1);
        free(x->rx[r].hdr);
    }
    wf_kv_controller_free(x->ctl);
    wf_kv_codec_free(x->codec);
    wf_kv_profile_lib_free(&x->lib);
    free(x->buf);
    free(x);
}

static wf_status ensure_buf(wf_kv_xfer *x, size_t n) {
    if (n <= x->cap) return WF_OK;
    uint8_t *p = realloc(x->buf, n);
    if (!p) return WF_ENOMEM;
    x->buf = p;
    x->cap = n;
    return WF_OK;
}

int wf_kv_xfer_timeout_ms(int base_ms, size_t bytes) {
    double ms = (double)base_ms + (double)bytes / 1e3;
    return ms > 2e9 ? 2000000000 : (int)ms;
}

/* Runs ops with the wait bound widened for bytes, then restores it. */
static wf_status run_sized(wf_world *w, wf_world_op *ops, int n, size_t bytes) {
    int base = wf_world_timeout_ms(w);
    wf_world_set_timeout_ms(w, wf_kv_xfer_timeout_ms(base, bytes));
    wf_status st = wf_world_run(w, ops, n);
    wf_world_set_timeout_ms(w, base);
    return st;
}

static wf_world_tag tag(uint8_t step) {
    return (wf_world_tag){.kind = WF_WORLD_TAG_USER, .seq = WF_KV_XFER_SEQ, .step = step};
}

void wf_kv_xfer_decide(wf_kv_xfer *x, size_t raw_bytes, double accuracy, uint32_t codec,
                       wf_kv_decision *d) {
    wf_kv_transfer_req r = {.bytes = raw_bytes, .accuracy = accuracy};
    wf_kv_controller_decide(x->ctl, &r, wf_clock_now_ns(), d);
    int force = x->force;
    if (codec == WF_KV_CODEC_OFF) {
        force = -1;
    } else if (codec != WF_KV_CODEC_AUTO) {
        force = -1;
        for (int i = 0; i < x->lib.n; i++)
            if (x->lib.items[i].profile.id == codec) force = i;
    }
    if (force == -1 && (codec != WF_KV_CODEC_AUTO || x->force == -1)) {
        d->profile = -1; /* chosen by the request or the deployment, not by the link: counted
                          * as no_profile (like a budget of 1) */
        d->reason = WF_KV_REASON_NO_PROFILE;
    } else if (force >= 0) {
        d->profile = force;
        d->reason = WF_KV_REASON_COMPRESS;
    }
    x->st.reasons[d->reason]++;
}

void wf_kv_xfer_observe_raw(wf_kv_xfer *x, const wf_kv_decision *d, size_t bytes, uint64_t ns) {
    wf_kv_controller_observe(x->ctl, d, bytes, ns, ns, wf_clock_now_ns());
    x->st.raw++;
    x->st.raw_bytes += bytes;
    x->st.wire_bytes += bytes;
}

wf_status wf_kv_xfer_send(wf_kv_xfer *x, wf_world *w, const wf_kv_decision *d, const wf_kv_store *store,
                          const int32_t *blocks, int n_blocks, int n_tokens, int peer,
                          const int32_t *dst, int n_dst, size_t *wire_bytes, char *err, size_t errlen) {
    uint64_t t0 = wf_clock_now_ns();
    *wire_bytes = 0;
    if (d->profile < 0 || d->profile >= x->lib.n) return WF_EINVAL;
    if (n_dst > HDR_MAX_BLOCKS || n_dst < n_blocks) {
        snprintf(err, errlen, "%d destination blocks for %d", n_dst, n_blocks);
        return WF_EINVAL;
    }
    wf_status st;
    if (x->current != d->profile) {
        st = wf_kv_codec_set_profile(x->codec, &x->lib.items[d->profile].profile, x->lib.importance,
                                     0x5746u /* both sides read the seed from the frame */);
        if (st != WF_OK) {
            snprintf(err, errlen, "profile %s: %s", x->lib.items[d->profile].profile.name, wf_status_str(st));
            return st;
        }
        x->current = d->profile;
    }
    size_t hdr_len = HDR_FIXED + 4u * (size_t)n_dst;
    size_t fcap = wf_kv_codec_max_frame_bytes(x->codec, n_tokens);
    if ((st = ensure_buf(x, hdr_len + fcap)) != WF_OK) return st;
    uint8_t *frame = x->buf + hdr_len;
    size_t flen = 0;
    st = wf_kv_codec_encode(x->codec, store, blocks, n_blocks, n_tokens, frame, fcap, &flen, err, errlen);
    if (st != WF_OK) return st;
    uint64_t t_enc = wf_clock_now_ns();
    uint32_t magic = HDR_MAGIC, nb = (uint32_t)n_dst;
    uint64_t fl = flen;
    memcpy(x->buf, &magic, 4);
    memcpy(x->buf + 4, &nb, 4);
    memcpy(x->buf + 8, &fl, 8);
    memcpy(x->buf + HDR_FIXED, dst, 4u * (size_t)n_dst);
    xfer_ack ack = {.status = -1};
    wf_world_op ops[3] = {
        {.kind = WF_WORLD_SEND, .peer = peer, .tag = tag(0), .buf = x->buf, .len = hdr_len},
        {.kind = WF_WORLD_SEND, .peer = peer, .tag = tag(1), .buf = frame, .len = flen},
        {.kind = WF_WORLD_RECV, .peer = peer, .tag = tag(2), .buf = &ack, .len = sizeof ack},
    };
    st = run_sized(w, ops, 3, hdr_len + flen);
    uint64_t t1 = wf_clock_now_ns();
    if (st != WF_OK) {
        snprintf(err, errlen, "compressed KV to rank %d: %s", peer, wf_world_error(w));
        return st;
    }
    if (ack.status != WF_OK) {
        snprintf(err, errlen, "rank %d could not decode the KV frame: %s", peer,
                 wf_status_str((wf_status)ack.status));
        return (wf_status)ack.status;
    }
    *wire_bytes = hdr_len + flen;
    /* The peer answers after decoding and says how long that took: the rest is the wire. */
    uint64_t wire_ns = t1 - t_enc > ack.decode_ns ? t1 - t_enc - ack.decode_ns : 1;
    wf_kv_controller_observe(x->ctl, d, *wire_bytes, wire_ns, t1 - t0, t1);
    x->st.compressed++;
    x->st.raw_bytes += wf_kv_codec_input_bytes(x->codec, n_tokens);
    x->st.wire_bytes += *wire_bytes;
    snprintf(x->st.last_profile, sizeof x->st.last_profile, "%s", x->lib.items[d->profile].profile.name);
    return WF_OK;
}

wf_status wf_kv_xfer_post(wf_kv_xfer *x, wf_world *w) {
    int me = wf_world_rank(w);
    for (int r = 1; r < wf_world_size(w) && r < WF_KV_XFER_MAX_PEERS; r++) {
        peer_rx *p = &x->rx[r];
        if (r == me || p->posted || wf_world_peer_failed(w, r)) continue;
        if (!p->hdr && !(p->hdr = malloc(HDR_CAP))) return WF_ENOMEM;
        p->op = (wf_world_op){.kind = WF_WORLD_RECV, .peer = r, .tag = tag(0), .buf = p->hdr, .len = HDR_CAP};
        if (wf_world_post(w, &p->op, 1) == WF_OK) p->posted = 1;
    }
    return WF_OK;
}

/* One HEADER from peer r arrived: receive the frame, decode it, answer. */
static void handle(wf_kv_xfer *x, wf_world *w, wf_kv_store *store, int r) {
    peer_rx *p = &x->rx[r];
    int32_t ack = WF_OK;
    uint64_t t0 = 0;
    char err[256] = "";
    uint32_t magic, nb;
    uint64_t flen;
    size_t got = p->op.received;
    memcpy(&magic, p->hdr, 4);
    memcpy(&nb, p->hdr + 4, 4);
    memcpy(&flen, p->hdr + 8, 8);
    bool hdr_ok = got >= HDR_FIXED && magic == HDR_MAGIC && nb <= HDR_MAX_BLOCKS &&
                  got == HDR_FIXED + 4u * (size_t)nb;
    size_t fcap = wf_kv_codec_max_frame_bytes(x->codec, x->max_tokens);
    if (!hdr_ok || flen > fcap || ensure_buf(x, flen > 0 ? flen : 1) != WF_OK) {
        /* Still take the frame off the wire so the sender's ACK wait ends with an answer. */
        ack = hdr_ok && flen > fcap ? WF_ERANGE : WF_EPROTO;
        snprintf(err, sizeof err, "bad KV header from rank %d (%zu bytes)", r, got);
        if (ensure_buf(x, 1 << 16) != WF_OK) return;
    }
    wf_world_op fr = {.kind = WF_WORLD_RECV, .peer = r, .tag = tag(1), .buf = x->buf,
                      .len = ack == WF_OK ? flen : x->cap};
    wf_status st = run_sized(w, &fr, 1, fr.len);
    if (st != WF_OK) {
        WF_LOG_WARN("worker", NULL, "KV frame from rank %d: %s", r, wf_world_error(w));
        x->st.receive_errors++;
        return; /* the peer is gone or stuck: nobody waits for the ACK */
    }
    t0 = wf_clock_now_ns();
    if (ack == WF_OK) {
        const int32_t *dst = (const int32_t *)(const void *)(p->hdr + HDR_FIXED);
        for (uint32_t i = 0; i < nb && ack == WF_OK; i++)
            if (dst[i] < 0 || dst[i] >= store->n_blocks) ack = WF_ERANGE;
        int n_tokens = 0;
        if (ack == WF_OK)
            ack = wf_kv_codec_decode(x->codec, x->buf, fr.received, store, dst, (int)nb, &n_tokens, err,
                                     sizeof err);
    }
    if (ack != WF_OK) {
        x->st.receive_errors++;
        WF_LOG_WARN("worker", NULL, "KV frame from rank %d rejected: %s", r, err);
    } else {
        x->st.received++;
    }
    xfer_ack reply = {.status = ack, .decode_ns = wf_clock_now_ns() - t0};
    wf_world_op a = {.kind = WF_WORLD_SEND, .peer = r, .tag = tag(2), .buf = &reply, .len = sizeof reply};
    if (wf_world_run(w, &a, 1) != WF_OK)
        WF_LOG_WARN("worker", NULL, "KV ack to rank %d: %s", r, wf_world_error(w));
}

int wf_kv_xfer_poll(wf_kv_xfer *x, wf_world *w, wf_kv_store *store) {
    int n = 0;
    for (int r = 1; r < wf_world_size(w) && r < WF_KV_XFER_MAX_PEERS; r++) {
        peer_rx *p = &x->rx[r];
        if (!p->posted || wf_world_test(w, &p->op, 1) == 0) continue;
        p->posted = 0;
        if (p->op.status == WF_OK) {
            handle(x, w, store, r);
            n++;
        }
    }
    wf_kv_xfer_post(x, w);
    return n;
}

void wf_kv_xfer_get_stats(const wf_kv_xfer *x, wf_kv_xfer_stats *out) {
    *out = x->st;
    wf_kv_controller_stats cs;
    wf_kv_controller_get_stats(x->ctl, &cs);
    out->bandwidth_gbps = cs.bandwidth_gbps;
}
