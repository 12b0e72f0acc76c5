/* Compressed KV transfers between workers: see kv_xfer.h. */
#include "server/workers/kv_xfer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kv/codec.h"
#include "proto/request.h"
#include "proto/base/clock.h"
#include "proto/base/log.h"

#define HDR_MAGIC 0x324b4657u          /* "WFK2": the layer-sliced protocol */
#define HDR_FIXED 20u                  /* u32 magic, n_blocks, n_tokens, n_slices, transfer id */
#define HDR_MAX_BLOCKS 16384           /* 256k tokens of 16: far beyond any context */
#define HDR_CAP (HDR_FIXED + 4u * HDR_MAX_BLOCKS)
/* A transfer is cut into at most this many layer slices: enough that the pipeline's fill (one
 * slice through every stage) is an eighth of the serial time, few enough that per-message
 * costs (a rendezvous per slice over TCP) stay small. */
#define MAX_SLICES 8

typedef struct xfer_ack {
    int32_t status;                    /* wf_status of the decode */
    uint32_t pad;
    uint64_t tail_ns;                  /* decode of the last slice: after the wire was done (the
                                        * sender's B excludes it) */
    uint64_t decode_ns;                /* decode of every slice */
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
    int n_slices;                      /* layer slices per transfer */
    uint16_t next_id;                  /* the next transfer's id (never 0) */
    uint8_t *buf;                      /* frames, both directions */
    size_t cap;
    wf_world_op ops[MAX_SLICES + 2];   /* a send: header, slices, ack */
    peer_rx rx[WF_KV_XFER_MAX_PEERS];
    wf_kv_xfer_stats st;
    int efd;                           /* the encoder thread's "slice ready" (-1: none) */
};

static void slice_range(int L, int n, int i, int *l0, int *l1);

/* A send's encoder: a thread encodes the slices one after the other while the worker's thread
 * posts each one as soon as it is ready and keeps progressing the world, so that slice i
 * really is on the wire while slice i+1 is encoded (UCX over TCP moves a posted message only
 * while someone progresses the sender's worker: with encode and progress on one thread the wire
 * idled during every encode, measured as total = encode + wire). */
typedef struct enc_job {
    wf_kv_xfer *x;
    const wf_kv_store *store;
    const int32_t *blocks;
    int n_blocks, n_tokens, ns;
    size_t total;
    size_t off[MAX_SLICES + 1];        /* slice i is buf[off[i], off[i + 1]) */
    atomic_int ready;                  /* slices encoded (off[] written before the increment) */
    wf_status st;
    char err[256];
    uint64_t enc_ns;
    int efd;
} enc_job;

static void *enc_main(void *arg) {
    enc_job *j = arg;
    wf_kv_xfer *x = j->x;
    for (int i = 0; i < j->ns; i++) {
        int l0, l1;
        slice_range(x->geo.n_layers, j->ns, i, &l0, &l1);
        size_t len = 0;
        if (j->st == WF_OK) {
            uint64_t te = wf_clock_now_ns();
            j->st = wf_kv_codec_encode_layers(x->codec, j->store, j->blocks, j->n_blocks,
                                              j->n_tokens, l0, l1, x->buf + j->off[i],
                                              j->total - j->off[i], &len, j->err, sizeof j->err);
            /* A failed slice still goes, empty: the peer expects ns slices, refuses the empty
             * one and answers, so both sides end the transfer cleanly. */
            if (j->st != WF_OK) len = 0;
            j->enc_ns += wf_clock_now_ns() - te;
        }
        j->off[i + 1] = j->off[i] + len;
        atomic_store_explicit(&j->ready, i + 1, memory_order_release);
        if (j->efd >= 0) {
            uint64_t one = 1;
            ssize_t r = write(j->efd, &one, sizeof one);
            (void)r;
        }
    }
    return NULL;
}

void wf_kv_xfer_options_init(wf_kv_xfer_options *o) {
    memset(o, 0, sizeof *o);
    o->default_accuracy = 0.9;
    o->init_bandwidth_gbps = 10;
    /* Measured (BENCHMARKS.md, bench/pd): the same compressed transfer varies by 2x and more
     * between runs on a loaded host while a raw one varies less; a profile predicted within
     * 20 % of raw is as likely to lose as to win. */
    o->compress_margin = 0.2;
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
    x->n_slices = wf_kv_xfer_slices(g->n_layers);
    x->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); /* -1: the posting loop polls instead */
    /* Ids start where a restarted sender's earlier incarnation is unlikely to have been. */
    x->next_id = (uint16_t)(wf_clock_now_ns() >> 10 ^ (uint64_t)getpid());
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
    if (o->par_run && o->par_workers > 1 &&
        (st = wf_kv_codec_set_parallel(x->codec, o->par_run, o->par_pool, o->par_workers)) != WF_OK) {
        snprintf(err, errlen, "KV codec on %d threads: %s", o->par_workers, wf_status_str(st));
        goto fail;
    }
    wf_kv_controller_options co;
    wf_kv_controller_options_init(&co);
    co.default_accuracy = o->default_accuracy;
    if (o->init_bandwidth_gbps > 0) co.init_bandwidth_gbps = o->init_bandwidth_gbps;
    co.pipeline_slices = x->n_slices;
    co.compress_margin = o->compress_margin;
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
    if (x->efd >= 0) close(x->efd);
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

/* The HEADER's tag has id 0 (a receive for it is always posted); the slices and the ACK carry
 * the transfer's id, so that what is left of a transfer the sender gave up (a time-out, a peer
 * replaced meanwhile) never matches a later transfer's receives. */
static wf_world_tag tag(uint8_t step, uint16_t id) {
    return (wf_world_tag){.kind = WF_WORLD_TAG_USER, .group = id, .seq = WF_KV_XFER_SEQ, .step = step};
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

void wf_kv_xfer_observe_raw_paced(wf_kv_xfer *x, const wf_kv_decision *d, size_t bytes,
                                  uint64_t span_ns, uint64_t compute_ns) {
    /* Link-bound, the puts fall behind from the first layer on and the link is busy the whole
     * span: bytes / span is B. Paced by the prefill, the span ends about one layer's worth of
     * wire after the last layer: the sample then only bounds B from below. */
    wf_kv_controller_stats cs;
    wf_kv_controller_get_stats(x->ctl, &cs);
    double layer_ns = cs.bandwidth_gbps > 0 ? (double)bytes / x->geo.n_layers * 8.0 / cs.bandwidth_gbps : 0;
    uint64_t pace = compute_ns + (uint64_t)(2 * layer_ns);
    wf_kv_controller_observe_pipelined(x->ctl, d, bytes, span_ns, span_ns > pace ? 0 : span_ns, span_ns,
                                       wf_clock_now_ns());
    x->st.raw++;
    x->st.raw_bytes += bytes;
    x->st.wire_bytes += bytes;
}

int wf_kv_xfer_slices(int n_layers) { return n_layers < MAX_SLICES ? n_layers : MAX_SLICES; }

/* Slice i of n over L layers: layers [l0, l1). */
static void slice_range(int L, int n, int i, int *l0, int *l1) {
    *l0 = (int)((long)L * i / n);
    *l1 = (int)((long)L * (i + 1) / n);
}

/* Waits for ops posted earlier, the bound widened for bytes. */
static wf_status wait_sized(wf_world *w, wf_world_op *ops, int n, size_t bytes) {
    int base = wf_world_timeout_ms(w);
    wf_world_set_timeout_ms(w, wf_kv_xfer_timeout_ms(base, bytes));
    wf_status st = wf_world_wait(w, ops, n);
    wf_world_set_timeout_ms(w, base);
    return st;
}

/* The pipeline, sender side: the header goes first, then each layer slice is encoded and
 * posted at once, so that slice i is on the wire (and being decoded by the peer) while slice
 * i+1 is encoded; between slices the world is progressed so that posted sends keep moving.
 * Every slice occupies its own part of the buffer: a posted send's bytes are never rewritten. */
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
    int L = x->geo.n_layers, ns = x->n_slices;
    size_t hdr_len = HDR_FIXED + 4u * (size_t)n_dst, total = hdr_len;
    for (int i = 0; i < ns; i++) {
        int l0, l1;
        slice_range(L, ns, i, &l0, &l1);
        total += wf_kv_codec_max_layers_bytes(x->codec, n_tokens, l1 - l0);
    }
    if ((st = ensure_buf(x, total)) != WF_OK) return st;
    if (++x->next_id == 0) x->next_id = 1;
    uint16_t id = x->next_id;
    uint32_t hdr[5] = {HDR_MAGIC, (uint32_t)n_dst, (uint32_t)n_tokens, (uint32_t)ns, id};
    memcpy(x->buf, hdr, HDR_FIXED);
    memcpy(x->buf + HDR_FIXED, dst, 4u * (size_t)n_dst);
    xfer_ack ack = {.status = -1};
    wf_world_op *ops = x->ops;
    ops[0] = (wf_world_op){.kind = WF_WORLD_SEND, .peer = peer, .tag = tag(0, 0), .buf = x->buf, .len = hdr_len};
    int posted = 0;
    if ((st = wf_world_post(w, ops, 1)) != WF_OK) goto fail_post;
    posted = 1;
    size_t sent = hdr_len;
    uint64_t t_first = 0;
    enc_job job = {.x = x, .store = store, .blocks = blocks, .n_blocks = n_blocks,
                    .n_tokens = n_tokens, .ns = ns, .total = total, .st = WF_OK, .efd = x->efd};
    job.off[0] = hdr_len;
    atomic_init(&job.ready, 0);
    pthread_t th;
    bool threaded = pthread_create(&th, NULL, enc_main, &job) == 0;
    if (!threaded) enc_main(&job); /* no thread: encode first, then send (still correct) */
    int n_sl = 0;                  /* slices posted */
    while (n_sl < ns) {
        int ready = atomic_load_explicit(&job.ready, memory_order_acquire);
        for (; n_sl < ready; n_sl++) {
            if (n_sl == 0) t_first = wf_clock_now_ns();
            size_t len = job.off[n_sl + 1] - job.off[n_sl];
            ops[1 + n_sl] = (wf_world_op){.kind = WF_WORLD_SEND, .peer = peer, .tag = tag(1, id),
                                          .buf = x->buf + job.off[n_sl], .len = len};
            if ((st = wf_world_post(w, &ops[1 + n_sl], 1)) != WF_OK) break;
            posted++;
            sent += len;
        }
        if (st != WF_OK || n_sl == ns) break;
        wf_world_test(w, ops, posted); /* keeps the posted slices moving */
        /* Sleeps until UCX has work or the encoder signals a slice (at most 1 ms). */
        if (x->efd >= 0) {
            wf_world_wait_event(w, x->efd, 1);
            uint64_t drained;
            ssize_t r = read(x->efd, &drained, sizeof drained);
            (void)r;
        }
    }
    if (threaded) pthread_join(th, NULL); /* the encoder writes x->buf: joined before any exit */
    if (st != WF_OK) goto fail_post;
    wf_status enc_st = job.st;
    uint64_t enc_ns = job.enc_ns;
    if (enc_st != WF_OK) snprintf(err, errlen, "%s", job.err);
    ops[1 + ns] = (wf_world_op){.kind = WF_WORLD_RECV, .peer = peer, .tag = tag(2, id), .buf = &ack,
                                .len = sizeof ack};
    if ((st = wf_world_post(w, &ops[1 + ns], 1)) != WF_OK) goto fail_post;
    posted++;
    st = wait_sized(w, ops, posted, sent);
    uint64_t t1 = wf_clock_now_ns();
    if (st != WF_OK) {
        snprintf(err, errlen, "compressed KV to rank %d: %s", peer, wf_world_error(w));
        return st;
    }
    if (enc_st != WF_OK) return enc_st; /* err says why */
    if (ack.status != WF_OK) {
        snprintf(err, errlen, "rank %d could not decode the KV frame: %s", peer,
                 wf_status_str((wf_status)ack.status));
        return (wf_status)ack.status;
    }
    *wire_bytes = sent;
    /* The wire's share of the pipeline: from the first slice ready to the last one decoded,
     * less the last slice's decode. While the codec is the slowest stage this is longer than
     * the wire needs: the controller then takes it as a lower bound on B only. */
    uint64_t span = t1 - t_first;
    uint64_t wire_ns = span > ack.tail_ns ? span - ack.tail_ns : 1;
    uint64_t codec_ns = enc_ns > ack.decode_ns ? enc_ns : ack.decode_ns;
    /* The codec's real speed on this transfer first (the residual is then judged with it). */
    wf_kv_controller_observe_codec(x->ctl, d->profile, wf_kv_codec_input_bytes(x->codec, n_tokens),
                                   enc_ns, ack.decode_ns, t1);
    wf_kv_controller_observe_pipelined(x->ctl, d, *wire_bytes, wire_ns, codec_ns, t1 - t0, t1);
    /* Where the time went, per transfer: what explains a slow one afterwards. */
    WF_LOG_INFO("worker", NULL, "KV to rank %d: %s, %zu -> %zu bytes, encode %.1f ms, decode %.1f "
                 "ms (last slice %.1f), first slice ready %.1f ms, wire %.1f ms, total %.1f ms", peer,
                 x->lib.items[d->profile].profile.name, wf_kv_codec_input_bytes(x->codec, n_tokens),
                 *wire_bytes, (double)enc_ns / 1e6, (double)ack.decode_ns / 1e6,
                 (double)ack.tail_ns / 1e6, (double)(t_first - t0) / 1e6, (double)wire_ns / 1e6,
                 (double)(t1 - t0) / 1e6);
    x->st.compressed++;
    x->st.raw_bytes += wf_kv_codec_input_bytes(x->codec, n_tokens);
    x->st.wire_bytes += *wire_bytes;
    snprintf(x->st.last_profile, sizeof x->st.last_profile, "%s", x->lib.items[d->profile].profile.name);
    return WF_OK;
fail_post:
    snprintf(err, errlen, "compressed KV to rank %d: %s", peer, wf_world_error(w));
    if (posted > 0) wf_world_cancel(w, ops, posted);
    return st;
}

wf_status wf_kv_xfer_post(wf_kv_xfer *x, wf_world *w) {
    int me = wf_world_rank(w);
    for (int r = 1; r < wf_world_size(w) && r < WF_KV_XFER_MAX_PEERS; r++) {
        peer_rx *p = &x->rx[r];
        if (r == me || p->posted || wf_world_peer_failed(w, r)) continue;
        if (!p->hdr && !(p->hdr = malloc(HDR_CAP))) return WF_ENOMEM;
        p->op = (wf_world_op){.kind = WF_WORLD_RECV, .peer = r, .tag = tag(0, 0), .buf = p->hdr, .len = HDR_CAP};
        if (wf_world_post(w, &p->op, 1) == WF_OK) p->posted = 1;
    }
    return WF_OK;
}

/* The pipeline, receiver side. One HEADER from peer r arrived: receive the slices in turn,
 * each into its own part of the buffer (slice i+1 arrives while slice i is decoded into the
 * blocks), then answer. A slice that fails to decode fails the transfer, but the remaining slices are
 * still taken off the wire so that the sender's wait ends with an answer. */
static void handle(wf_kv_xfer *x, wf_world *w, wf_kv_store *store, int r) {
    peer_rx *p = &x->rx[r];
    int32_t status = WF_OK;
    char err[256] = "";
    uint32_t hdr[5];
    size_t got = p->op.received;
    memcpy(hdr, p->hdr, HDR_FIXED);
    uint32_t nb = hdr[1], n_tokens = hdr[2], ns = hdr[3];
    uint16_t id = (uint16_t)hdr[4];
    int L = x->geo.n_layers;
    if (got < HDR_FIXED || hdr[0] != HDR_MAGIC || nb > HDR_MAX_BLOCKS ||
        got != HDR_FIXED + 4u * (size_t)nb || ns < 1 || ns > MAX_SLICES || ns > (uint32_t)L ||
        id == 0 || hdr[4] > 0xffffu) {
        status = WF_EPROTO;
        snprintf(err, sizeof err, "bad KV header from rank %d (%zu bytes)", r, got);
    } else if (n_tokens < 1 || n_tokens > (uint32_t)x->max_tokens) {
        status = WF_ERANGE;
        snprintf(err, sizeof err, "KV of %u tokens from rank %d (this worker holds 1..%d)", n_tokens,
                 r, x->max_tokens);
    }
    const int32_t *dst = (const int32_t *)(const void *)(p->hdr + HDR_FIXED);
    for (uint32_t i = 0; status == WF_OK && i < nb; i++)
        if (dst[i] < 0 || dst[i] >= store->n_blocks) {
            status = WF_ERANGE;
            snprintf(err, sizeof err, "destination block %d of %d", dst[i], store->n_blocks);
        }
    size_t slot = 0;
    if (status != WF_EPROTO) {
        /* The slice bound for the stated tokens (clamped: a refused header still drains). */
        int bound_tokens = n_tokens > (uint32_t)x->max_tokens ? x->max_tokens : (int)n_tokens;
        for (uint32_t i = 0; i < ns; i++) {
            int l0, l1;
            slice_range(L, (int)ns, (int)i, &l0, &l1);
            size_t b = wf_kv_codec_max_layers_bytes(x->codec, bound_tokens, l1 - l0);
            if (b > slot) slot = b;
        }
        if (ensure_buf(x, (size_t)ns * slot) != WF_OK) {
            status = WF_ENOMEM;
            slot = 0;
        }
    }
    uint64_t dec_ns = 0, tail_ns = 0;
    uint32_t done = 0; /* slices received (the receives of later ones are still posted) */
    wf_world_op *rx = x->ops;
    if (slot > 0) {
        /* Every slice's receive is posted at once (matched in order: same tag), each into its
         * own part of the buffer: the sender's rendezvous for slice i+1 proceeds while slice i
         * is decoded, instead of waiting for a receive posted after it. */
        for (uint32_t i = 0; i < ns; i++)
            rx[i] = (wf_world_op){.kind = WF_WORLD_RECV, .peer = r, .tag = tag(1, id),
                                  .buf = x->buf + (size_t)i * slot, .len = slot};
        if (wf_world_post(w, rx, (int)ns) != WF_OK) {
            wf_world_cancel(w, rx, (int)ns);
            goto lost;
        }
        for (uint32_t i = 0; i < ns; i++) {
            wf_world_op *op = &rx[i];
            if (wait_sized(w, op, 1, slot) != WF_OK) goto lost;
            done = i + 1;
            if (status != WF_OK) continue;
            int l0, l1, n = 0;
            slice_range(L, (int)ns, (int)i, &l0, &l1);
            uint64_t t = wf_clock_now_ns();
            /* The slice must be the one the header announced before a byte is written. */
            wf_kv_frame_info fi;
            status = wf_kv_frame_parse(op->buf, op->received, &fi, err, sizeof err);
            if (status == WF_OK && (fi.n_layers != l1 - l0 || fi.n_tokens != (int)n_tokens)) {
                status = WF_EFORMAT;
                snprintf(err, sizeof err, "slice %u holds %d layers of %d tokens, the header "
                         "announced %d of %u", i, fi.n_layers, fi.n_tokens, l1 - l0, n_tokens);
            }
            if (status == WF_OK)
                status = wf_kv_codec_decode_layers(x->codec, op->buf, op->received, l0, store, dst,
                                                   (int)nb, &n, err, sizeof err);
            uint64_t dt = wf_clock_now_ns() - t;
            dec_ns += dt;
            if (i + 1 == ns) tail_ns = dt;
            wf_world_test(w, rx + done, (int)(ns - done)); /* the next slices keep moving */
        }
    }
    if (status != WF_OK) {
        x->st.receive_errors++;
        WF_LOG_WARN("worker", NULL, "KV from rank %d rejected: %s", r, err);
    } else {
        x->st.received++;
    }
    xfer_ack reply = {.status = status, .tail_ns = tail_ns, .decode_ns = dec_ns};
    wf_world_op a = {.kind = WF_WORLD_SEND, .peer = r, .tag = tag(2, id), .buf = &reply, .len = sizeof reply};
    if (wf_world_run(w, &a, 1) != WF_OK)
        WF_LOG_WARN("worker", NULL, "KV ack to rank %d: %s", r, wf_world_error(w));
    return;
lost:
    /* The peer is gone or stuck: nobody waits for the ACK. A failed wait cancelled the receive
     * it waited for; the later slices' receives are cancelled here, so the buffer is free. */
    WF_LOG_WARN("worker", NULL, "KV slices from rank %d: %s", r, wf_world_error(w));
    if (slot > 0 && done + 1 < ns) wf_world_cancel(w, rx + done + 1, (int)(ns - done - 1));
    x->st.receive_errors++;
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
