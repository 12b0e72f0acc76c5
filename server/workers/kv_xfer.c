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
/* Up to 16: the pipeline's fill and drain (the first slice's encode, the last one's decode)
 * are a slice's share of the codec's time each; with 8 they were about a tenth of a 1 Gbit/s
 * transfer. */
#define MAX_SLICES 16

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

/* The send in progress (one at a time). Its slices are encoded by the encoder thread, which
 * lives as long as the object: it waits for a job, then for each slice's layers to be stored
 * (wf_kv_xfer_send_layers: the prefill hands layer l over while layer l+1 computes), encodes
 * the slice and signals the wake descriptor; the owner's thread posts each slice as soon as it
 * is ready and progresses the world (UCX over TCP moves a posted message only while someone
 * progresses the sender's worker: with encode and progress on one thread the wire idled during
 * every encode, measured as total = encode + wire). */
typedef struct tx_state {
    bool on;                           /* a send between begin and end */
    wf_kv_decision d;
    int peer, ns, n_tokens, n_blocks;
    uint16_t id;
    const wf_kv_store *store;
    const int32_t *blocks;
    size_t total, sent;
    size_t off[MAX_SLICES + 1];        /* slice i is buf[off[i], off[i + 1]) */
    int posted, n_sl;                  /* ops posted; slices posted */
    uint64_t t0, t_first;
    /* shared with the encoder thread: mu guards layers, abort, job; ready and the slices'
     * off[] are published by the release store of ready */
    int layers;                        /* layers stored so far */
    uint64_t t_layers;                 /* when every layer was (0: not yet) */
    bool overlapped;                   /* begun before every layer was stored */
    bool abort, job;                   /* job: the encoder has work (or is at it) */
    atomic_int ready;                  /* slices encoded */
    wf_status st;                      /* the encoder's (read after it is done) */
    char err[256];
    uint64_t enc_ns;
    xfer_ack ack;
} tx_state;

/* The receive in progress (one at a time: other peers' HEADERs wait in their posted receives).
 * The owner's thread takes the slices off the wire; the decoder thread, which lives as long as
 * the object, decodes each into the reserved blocks as soon as it is received, so the owner's
 * thread keeps its heartbeats and other work while KV arrives (and a prefill that ships layer
 * slices as it computes them never holds the decode worker's loop). */
typedef struct rx_state {
    int peer;                          /* -1: none */
    uint16_t id;
    uint32_t nb, n_tokens, ns;
    int32_t *dst;                      /* HDR_MAX_BLOCKS: the destination blocks */
    wf_kv_store *store;
    size_t slot;                       /* bytes per slice buffer (0: nothing posted) */
    uint32_t received;                 /* slices received (in order: one tag) */
    uint64_t deadline_ns;              /* the next slice must arrive by then */
    bool acking;
    wf_world_op ops[MAX_SLICES], ack_op;
    xfer_ack reply;
    /* shared with the decoder thread (mu): avail slices may be decoded; the decoder's own
     * results are read once done == ns (acquire) */
    uint32_t avail;
    bool abort, busy;
    atomic_uint done;                  /* slices decoded (or skipped after a failure) */
    wf_status status;
    char err[256];
    uint64_t dec_ns, tail_ns;
} rx_state;

struct wf_kv_xfer {
    wf_kv_geometry geo;
    int max_tokens;
    wf_kv_codec *codec;                /* the sender's (the encoder thread's) */
    wf_kv_codec *dcodec;               /* the receiver's (the decoder thread's) */
    wf_kv_profile_lib lib;             /* a copy (items, importance) */
    int force;                         /* -2: controller, -1: never compress, >= 0: that profile */
    int current;                       /* the profile the codec is set to (-1: none) */
    wf_kv_controller *ctl;
    double default_accuracy;
    int n_slices;                      /* layer slices per transfer */
    uint16_t next_id;                  /* the next transfer's id (never 0) */
    uint8_t *buf, *rbuf;               /* frames sent, frames received */
    size_t cap, rcap;
    wf_world_op ops[MAX_SLICES + 2];   /* a send: header, slices, ack */
    peer_rx rx[WF_KV_XFER_MAX_PEERS];
    wf_kv_xfer_stats st;
    int efd;                           /* wakes the owner: a slice encoded or decoded */
    int slice_wait_ms;                 /* options' (0: the world's bound) */
    bool own_efd;
    pthread_mutex_t mu;
    pthread_cond_t cv;                 /* the codec threads wait on it (jobs, layers, slices) */
    pthread_t enc_th, dec_th;
    bool enc_on, dec_on, quit;
    tx_state tx;
    rx_state rxs;
};

static void slice_range(int L, int n, int i, int *l0, int *l1);

static void wake(wf_kv_xfer *x) {
    if (x->efd < 0) return;
    uint64_t one = 1;
    ssize_t r = write(x->efd, &one, sizeof one);
    (void)r;
}

/* Encodes the send's slices in order, each once its layers are stored; after an abort or a
 * failed slice the rest go empty (the peer expects ns slices, refuses an empty one and
 * answers, so both sides end the transfer cleanly). Called with mu held; returns with it. */
static void encode_job(wf_kv_xfer *x) {
    tx_state *t = &x->tx;
    for (int i = 0; i < t->ns; i++) {
        int l0, l1;
        slice_range(x->geo.n_layers, t->ns, i, &l0, &l1);
        while (t->layers < l1 && !t->abort && !x->quit) pthread_cond_wait(&x->cv, &x->mu);
        bool skip = t->abort || x->quit || t->st != WF_OK;
        pthread_mutex_unlock(&x->mu);
        size_t len = 0;
        if (!skip) {
            uint64_t te = wf_clock_now_ns();
            t->st = wf_kv_codec_encode_layers(x->codec, t->store, t->blocks, t->n_blocks, t->n_tokens,
                                              l0, l1, x->buf + t->off[i], t->total - t->off[i], &len,
                                              t->err, sizeof t->err);
            if (t->st != WF_OK) len = 0;
            t->enc_ns += wf_clock_now_ns() - te;
        }
        t->off[i + 1] = t->off[i] + len;
        atomic_store_explicit(&t->ready, i + 1, memory_order_release);
        wake(x);
        pthread_mutex_lock(&x->mu);
    }
    t->job = false;
    pthread_cond_broadcast(&x->cv);
}

static void *enc_main(void *arg) {
    wf_kv_xfer *x = arg;
    pthread_mutex_lock(&x->mu);
    while (!x->quit) {
        if (!x->tx.job) {
            pthread_cond_wait(&x->cv, &x->mu);
            continue;
        }
        encode_job(x);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* Decodes slice i of the receive (owner's thread or decoder thread; mu not held). */
static void decode_slice(wf_kv_xfer *x, uint32_t i) {
    rx_state *r = &x->rxs;
    wf_world_op *op = &r->ops[i];
    if (r->status == WF_OK) {
        int l0, l1, n = 0;
        slice_range(x->geo.n_layers, (int)r->ns, (int)i, &l0, &l1);
        uint64_t t = wf_clock_now_ns();
        /* The slice must be the one the header announced before a byte is written. */
        wf_kv_frame_info fi;
        wf_status st = wf_kv_frame_parse(op->buf, op->received, &fi, r->err, sizeof r->err);
        if (st == WF_OK && (fi.n_layers != l1 - l0 || fi.n_tokens != (int)r->n_tokens)) {
            st = WF_EFORMAT;
            snprintf(r->err, sizeof r->err, "slice %u holds %d layers of %d tokens, the header "
                     "announced %d of %u", i, fi.n_layers, fi.n_tokens, l1 - l0, r->n_tokens);
        }
        if (st == WF_OK)
            st = wf_kv_codec_decode_layers(x->dcodec, op->buf, op->received, l0, r->store, r->dst,
                                           (int)r->nb, &n, r->err, sizeof r->err);
        r->status = st;
        uint64_t dt = wf_clock_now_ns() - t;
        r->dec_ns += dt;
        if (i + 1 == r->ns) r->tail_ns = dt;
    }
    atomic_store_explicit(&r->done, i + 1, memory_order_release);
}

static void *dec_main(void *arg) {
    wf_kv_xfer *x = arg;
    rx_state *r = &x->rxs;
    pthread_mutex_lock(&x->mu);
    while (!x->quit) {
        uint32_t next = atomic_load_explicit(&r->done, memory_order_relaxed);
        if (r->abort || next >= r->avail) {
            r->busy = false;
            pthread_cond_broadcast(&x->cv);
            pthread_cond_wait(&x->cv, &x->mu);
            continue;
        }
        r->busy = true;
        pthread_mutex_unlock(&x->mu);
        decode_slice(x, next);
        wake(x);
        pthread_mutex_lock(&x->mu);
    }
    r->busy = false;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
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

/* The codec pool is not reentrant (engine/cpu/threadpool.h): the encoder and decoder threads
 * take turns on it. */
typedef struct par_gate {
    pthread_mutex_t mu;
    wf_kv_parallel_fn run;
    void *pool;
} par_gate;

static void gated_run(void *gate, void (*fn)(void *ctx, int ith, int nth), void *ctx) {
    par_gate *g = gate;
    pthread_mutex_lock(&g->mu);
    g->run(g->pool, fn, ctx);
    pthread_mutex_unlock(&g->mu);
}

static par_gate *gate_of(wf_kv_xfer *x);

wf_status wf_kv_xfer_new(const wf_kv_geometry *g, int max_tokens, const wf_kv_profile_lib *lib,
                         const wf_kv_xfer_options *o, wf_kv_xfer **out, char *err, size_t errlen) {
    *out = NULL;
    wf_kv_xfer *x = calloc(1, sizeof *x + sizeof(par_gate));
    if (!x) return WF_ENOMEM;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    pthread_mutex_init(&gate_of(x)->mu, NULL);
    x->rxs.peer = -1;
    atomic_init(&x->tx.ready, 0);
    atomic_init(&x->rxs.done, 0);
    x->geo = *g;
    x->max_tokens = max_tokens;
    x->current = -1;
    x->force = -2;
    x->default_accuracy = o->default_accuracy;
    x->n_slices = wf_kv_xfer_slices(g->n_layers);
    x->slice_wait_ms = o->slice_wait_ms;
    if (o->wake_fd > 0) {
        x->efd = o->wake_fd;
    } else {
        x->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); /* -1: the loops poll instead */
        x->own_efd = x->efd >= 0;
    }
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
    if ((st = wf_kv_codec_new(g, max_tokens, &x->codec)) != WF_OK ||
        (st = wf_kv_codec_new(g, max_tokens, &x->dcodec)) != WF_OK) {
        snprintf(err, errlen, "KV codec: %s", wf_status_str(st));
        goto fail;
    }
    if (o->par_run && o->par_workers > 1) {
        par_gate *pg = gate_of(x);
        pg->run = o->par_run;
        pg->pool = o->par_pool;
        if ((st = wf_kv_codec_set_parallel(x->codec, gated_run, pg, o->par_workers)) != WF_OK ||
            (st = wf_kv_codec_set_parallel(x->dcodec, gated_run, pg, o->par_workers)) != WF_OK) {
            snprintf(err, errlen, "KV codec on %d threads: %s", o->par_workers, wf_status_str(st));
            goto fail;
        }
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
    if (!(x->rxs.dst = malloc(4u * HDR_MAX_BLOCKS))) {
        st = WF_ENOMEM;
        goto fail;
    }
    /* The codec threads live as long as the object (a thread per transfer cost its creation on
     * every transfer); without profiles nothing is ever coded. One that cannot start leaves its
     * stage on the owner's thread (still correct, not overlapped). */
    if (x->lib.n > 0) {
        x->enc_on = pthread_create(&x->enc_th, NULL, enc_main, x) == 0;
        x->dec_on = pthread_create(&x->dec_th, NULL, dec_main, x) == 0;
    }
    for (int r = 0; r < WF_KV_XFER_MAX_PEERS; r++) x->rx[r].op.peer = -1;
    *out = x;
    return WF_OK;
fail:
    wf_kv_xfer_free(x, NULL);
    return st;
}

static par_gate *gate_of(wf_kv_xfer *x) { return (par_gate *)(void *)(x + 1); }

static void rx_drop(wf_kv_xfer *x, wf_world *w);

void wf_kv_xfer_free(wf_kv_xfer *x, wf_world *w) {
    if (!x) return;
    if (w && x->tx.on) {
        wf_kv_xfer_send_layers(x, -1);
        size_t wire;
        char err[64];
        wf_kv_xfer_send_end(x, w, &wire, err, sizeof err);
    }
    if (w) rx_drop(x, w);
    pthread_mutex_lock(&x->mu);
    x->quit = true;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    if (x->enc_on) pthread_join(x->enc_th, NULL);
    if (x->dec_on) pthread_join(x->dec_th, NULL);
    for (int r = 0; r < WF_KV_XFER_MAX_PEERS; r++) {
        if (x->rx[r].posted && w) wf_world_cancel(w, &x->rx[r].op, 1);
        free(x->rx[r].hdr);
    }
    wf_kv_controller_free(x->ctl);
    wf_kv_codec_free(x->codec);
    wf_kv_codec_free(x->dcodec);
    if (x->own_efd) close(x->efd);
    wf_kv_profile_lib_free(&x->lib);
    free(x->rxs.dst);
    free(x->buf);
    free(x->rbuf);
    pthread_mutex_destroy(&gate_of(x)->mu);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

static wf_status ensure_buf(uint8_t **buf, size_t *cap, size_t n) {
    if (n <= *cap) return WF_OK;
    uint8_t *p = realloc(*buf, n);
    if (!p) return WF_ENOMEM;
    *buf = p;
    *cap = n;
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

/* A transfer overlapped with the prefill that produced its data kept up with it when it ended
 * within about two parts' wire time (at the current B) plus the codec's share of the last part
 * after the last part was handed over: the prefill then set its pace. */
static bool paced_by_prefill(const wf_kv_xfer *x, size_t wire_bytes, int parts, uint64_t tail_ns,
                             uint64_t codec_tail_ns) {
    wf_kv_controller_stats cs;
    wf_kv_controller_get_stats(x->ctl, &cs);
    double part_ns = cs.bandwidth_gbps > 0 ? (double)wire_bytes / parts * 8.0 / cs.bandwidth_gbps : 0;
    return (double)tail_ns <= 2 * part_ns + (double)codec_tail_ns;
}

void wf_kv_xfer_observe_raw_paced(wf_kv_xfer *x, const wf_kv_decision *d, size_t bytes,
                                  uint64_t span_ns, uint64_t tail_ns) {
    /* Link-bound, the puts fall behind from the first layer on and the link is busy the whole
     * span: bytes / span is B, and the span the transfer's time. */
    if (paced_by_prefill(x, bytes, x->geo.n_layers, tail_ns, 0))
        wf_kv_controller_observe_paced(x->ctl, d, bytes, span_ns, wf_clock_now_ns());
    else
        wf_kv_controller_observe(x->ctl, d, bytes, span_ns, span_ns, wf_clock_now_ns());
    x->st.raw++;
    x->st.raw_bytes += bytes;
    x->st.wire_bytes += bytes;
}

int wf_kv_xfer_slices(int n_layers) {
    if (n_layers <= MAX_SLICES) return n_layers;
    /* Slices of equal layer counts (30 layers: 15 of 2): the codec pool splits a slice by
     * layers, so a slice of one layer among slices of two would run on one thread. */
    int per = (n_layers + MAX_SLICES - 1) / MAX_SLICES;
    return (n_layers + per - 1) / per;
}

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

/* The pipeline, sender side: the header goes first, then each layer slice is posted as soon as
 * the encoder thread has it, so that slice i is on the wire (and being decoded by the peer)
 * while slice i+1 is encoded (and, with layers handed over during the prefill, while its layers
 * are computed). Every slice occupies its own part of the buffer: a posted send's bytes are
 * never rewritten. */
wf_status wf_kv_xfer_send_begin(wf_kv_xfer *x, wf_world *w, const wf_kv_decision *d,
                                const wf_kv_store *store, const int32_t *blocks, int n_blocks,
                                int n_tokens, int peer, const int32_t *dst, int n_dst, int layers,
                                char *err, size_t errlen) {
    tx_state *t = &x->tx;
    if (t->on || d->profile < 0 || d->profile >= x->lib.n) return WF_EINVAL;
    if (n_dst > HDR_MAX_BLOCKS || n_dst < n_blocks) {
        snprintf(err, errlen, "%d destination blocks for %d", n_dst, n_blocks);
        return WF_EINVAL;
    }
    uint64_t t0 = wf_clock_now_ns();
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
    if ((st = ensure_buf(&x->buf, &x->cap, total)) != WF_OK) return st;
    if (++x->next_id == 0) x->next_id = 1;
    uint16_t id = x->next_id;
    uint32_t hdr[5] = {HDR_MAGIC, (uint32_t)n_dst, (uint32_t)n_tokens, (uint32_t)ns, id};
    memcpy(x->buf, hdr, HDR_FIXED);
    memcpy(x->buf + HDR_FIXED, dst, 4u * (size_t)n_dst);
    x->ops[0] = (wf_world_op){.kind = WF_WORLD_SEND, .peer = peer, .tag = tag(0, 0), .buf = x->buf, .len = hdr_len};
    if ((st = wf_world_post(w, x->ops, 1)) != WF_OK) {
        snprintf(err, errlen, "compressed KV to rank %d: %s", peer, wf_world_error(w));
        wf_world_cancel(w, x->ops, 1);
        return st;
    }
    pthread_mutex_lock(&x->mu);
    *t = (tx_state){.on = true, .d = *d, .peer = peer, .ns = ns, .n_tokens = n_tokens,
                    .n_blocks = n_blocks, .id = id, .store = store, .blocks = blocks, .total = total,
                    .sent = hdr_len, .posted = 1, .t0 = t0, .layers = layers < 0 ? L : layers,
                    .job = x->enc_on, .st = WF_OK, .ack = {.status = -1},
                    .t_layers = layers < 0 || layers >= L ? t0 : 0, .overlapped = layers >= 0 && layers < L};
    t->off[0] = hdr_len;
    atomic_init(&t->ready, 0);
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    return WF_OK;
}

void wf_kv_xfer_send_layers(wf_kv_xfer *x, int layers) {
    pthread_mutex_lock(&x->mu);
    if (layers < 0) {
        x->tx.abort = true;
        layers = x->geo.n_layers;
    }
    if (layers > x->tx.layers) x->tx.layers = layers;
    if (x->tx.layers >= x->geo.n_layers && !x->tx.t_layers) x->tx.t_layers = wf_clock_now_ns();
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

bool wf_kv_xfer_sending(const wf_kv_xfer *x) { return x->tx.on; }

/* Posts the slices the encoder has ready and progresses the posted ones. */
static wf_status tx_pump(wf_kv_xfer *x, wf_world *w) {
    tx_state *t = &x->tx;
    int ready = atomic_load_explicit(&t->ready, memory_order_acquire);
    for (; t->n_sl < ready; t->n_sl++) {
        if (t->n_sl == 0) t->t_first = wf_clock_now_ns();
        size_t len = t->off[t->n_sl + 1] - t->off[t->n_sl];
        wf_world_op *op = &x->ops[1 + t->n_sl];
        *op = (wf_world_op){.kind = WF_WORLD_SEND, .peer = t->peer, .tag = tag(1, t->id),
                            .buf = x->buf + t->off[t->n_sl], .len = len};
        wf_status st = wf_world_post(w, op, 1);
        if (st != WF_OK) return st;
        t->posted++;
        t->sent += len;
    }
    wf_world_test(w, x->ops, t->posted); /* keeps the posted slices moving */
    return WF_OK;
}

void wf_kv_xfer_send_pump(wf_kv_xfer *x, wf_world *w) {
    if (x->tx.on) (void)tx_pump(x, w); /* a failed post is seen again by send_end */
}

wf_status wf_kv_xfer_send_end(wf_kv_xfer *x, wf_world *w, size_t *wire_bytes, char *err, size_t errlen) {
    tx_state *t = &x->tx;
    *wire_bytes = 0;
    if (!t->on) return WF_EINVAL;
    if (t->n_sl > 0) { /* slices already on the wire: the prefill that computed them still ran */
        int l0, l1;
        slice_range(x->geo.n_layers, t->ns, t->n_sl - 1, &l0, &l1);
        x->st.early_layers += (uint64_t)l1;
    }
    wf_kv_xfer_send_layers(x, x->geo.n_layers); /* whatever the caller has not handed over yet */
    pthread_mutex_lock(&x->mu);
    if (!x->enc_on) {
        t->job = true;
        encode_job(x); /* no thread: encode here, then send (still correct) */
    }
    pthread_mutex_unlock(&x->mu);
    wf_status st = WF_OK;
    while (t->n_sl < t->ns) {
        if ((st = tx_pump(x, w)) != WF_OK) break;
        if (t->n_sl == t->ns) break;
        /* Sleeps until UCX has work or the encoder signals a slice (at most 1 ms). */
        if (x->efd >= 0) {
            wf_world_wait_event(w, x->efd, 1);
            uint64_t drained;
            ssize_t r = read(x->efd, &drained, sizeof drained);
            (void)r;
        }
    }
    /* The encoder reads the store and writes x->buf: it is done before any exit. */
    pthread_mutex_lock(&x->mu);
    if (st != WF_OK) t->abort = true;
    pthread_cond_broadcast(&x->cv);
    while (t->job) pthread_cond_wait(&x->cv, &x->mu);
    pthread_mutex_unlock(&x->mu);
    wf_world_op *ops = x->ops;
    int ns = t->ns, peer = t->peer;
    t->on = false;
    if (st != WF_OK) goto fail_post;
    wf_status enc_st = t->st;
    uint64_t enc_ns = t->enc_ns;
    if (enc_st != WF_OK) snprintf(err, errlen, "%s", t->err);
    ops[1 + ns] = (wf_world_op){.kind = WF_WORLD_RECV, .peer = peer, .tag = tag(2, t->id), .buf = &t->ack,
                                .len = sizeof t->ack};
    if ((st = wf_world_post(w, &ops[1 + ns], 1)) != WF_OK) goto fail_post;
    t->posted++;
    st = wait_sized(w, ops, t->posted, t->sent);
    uint64_t t1 = wf_clock_now_ns();
    if (st != WF_OK) {
        snprintf(err, errlen, "compressed KV to rank %d: %s", peer, wf_world_error(w));
        return st;
    }
    if (enc_st != WF_OK) return enc_st; /* err says why */
    if (t->abort) {
        snprintf(err, errlen, "compressed KV to rank %d: abandoned (the prefill failed)", peer);
        return WF_ECANCELLED;
    }
    if (t->ack.status != WF_OK) {
        snprintf(err, errlen, "rank %d could not decode the KV frame: %s", peer,
                 wf_status_str((wf_status)t->ack.status));
        return (wf_status)t->ack.status;
    }
    *wire_bytes = t->sent;
    const wf_kv_decision *d = &t->d;
    /* The wire's share of the pipeline: from the first slice ready to the last one decoded,
     * less the last slice's decode. While the codec (or the prefill handing layers over) is
     * the slowest stage this is longer than the wire needs: the controller then takes it as a
     * lower bound on B only. */
    uint64_t span = t1 - t->t_first;
    uint64_t wire_ns = span > t->ack.tail_ns ? span - t->ack.tail_ns : 1;
    uint64_t codec_ns = enc_ns > t->ack.decode_ns ? enc_ns : t->ack.decode_ns;
    /* The codec's real speed on this transfer first (the residual is then judged with it). */
    wf_kv_controller_observe_codec(x->ctl, d->profile, wf_kv_codec_input_bytes(x->codec, t->n_tokens),
                                   enc_ns, t->ack.decode_ns, t1);
    /* Begun during the prefill: its slices came at the prefill's pace when it ended about a
     * slice after the last layer was stored; its time then was the prefill's. */
    uint64_t t_layers = t->t_layers ? t->t_layers : t1;
    bool paced = t->overlapped && paced_by_prefill(x, *wire_bytes, ns, t1 - t_layers,
                                                   enc_ns / (uint64_t)ns + t->ack.tail_ns);
    if (paced)
        wf_kv_controller_observe_paced(x->ctl, d, *wire_bytes, wire_ns, t1);
    else
        wf_kv_controller_observe_pipelined(x->ctl, d, *wire_bytes, wire_ns, codec_ns,
                                           t->overlapped ? t1 - t->t_first : t1 - t->t0, t1);
    /* Where the time went, per transfer: what explains a slow one afterwards. */
    WF_LOG_INFO("worker", NULL, "KV to rank %d: %s, %zu -> %zu bytes, encode %.1f ms, decode %.1f "
                 "ms (last slice %.1f), first slice ready %.1f ms, wire %.1f ms, total %.1f ms, "
                 "%.1f ms after the last layer%s", peer,
                 x->lib.items[d->profile].profile.name, wf_kv_codec_input_bytes(x->codec, t->n_tokens),
                 *wire_bytes, (double)enc_ns / 1e6, (double)t->ack.decode_ns / 1e6,
                 (double)t->ack.tail_ns / 1e6, (double)(t->t_first - t->t0) / 1e6, (double)wire_ns / 1e6,
                 (double)(t1 - t->t0) / 1e6, (double)(t1 - t_layers) / 1e6,
                 t->overlapped ? (paced ? " (overlapped, paced by the prefill)" : " (overlapped)") : "");
    x->st.compressed++;
    x->st.raw_bytes += wf_kv_codec_input_bytes(x->codec, t->n_tokens);
    x->st.wire_bytes += *wire_bytes;
    snprintf(x->st.last_profile, sizeof x->st.last_profile, "%s", x->lib.items[d->profile].profile.name);
    return WF_OK;
fail_post:
    snprintf(err, errlen, "compressed KV to rank %d: %s", peer, wf_world_error(w));
    if (t->posted > 0) wf_world_cancel(w, ops, t->posted);
    return st;
}

wf_status wf_kv_xfer_send(wf_kv_xfer *x, wf_world *w, const wf_kv_decision *d, const wf_kv_store *store,
                          const int32_t *blocks, int n_blocks, int n_tokens, int peer,
                          const int32_t *dst, int n_dst, size_t *wire_bytes, char *err, size_t errlen) {
    *wire_bytes = 0;
    wf_status st = wf_kv_xfer_send_begin(x, w, d, store, blocks, n_blocks, n_tokens, peer, dst, n_dst,
                                         -1, err, errlen);
    return st != WF_OK ? st : wf_kv_xfer_send_end(x, w, wire_bytes, err, errlen);
}

/* The wait bound of a transfer's next slice of `bytes`. */
static int slice_wait(const wf_kv_xfer *x, wf_world *w, size_t bytes) {
    int base = wf_world_timeout_ms(w);
    return wf_kv_xfer_timeout_ms(x->slice_wait_ms > base ? x->slice_wait_ms : base, bytes);
}

/* Hands the slices received so far to the decoder thread (or decodes them here without one). */
static void rx_hand(wf_kv_xfer *x) {
    rx_state *r = &x->rxs;
    if (!x->dec_on) {
        for (uint32_t i = atomic_load_explicit(&r->done, memory_order_relaxed); i < r->received; i++)
            decode_slice(x, i);
        return;
    }
    pthread_mutex_lock(&x->mu);
    r->avail = r->received;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

/* Stops the decoder on the receive (it finishes the slice it is at: the buffer is then free). */
static void rx_quiesce(wf_kv_xfer *x) {
    rx_state *r = &x->rxs;
    pthread_mutex_lock(&x->mu);
    r->abort = true;
    pthread_cond_broadcast(&x->cv);
    while (r->busy) pthread_cond_wait(&x->cv, &x->mu);
    pthread_mutex_unlock(&x->mu);
}

/* The receive is lost (the peer is gone or stuck: nobody waits for the ACK): the receives not
 * completed are cancelled, so the buffer is free. */
static void rx_drop(wf_kv_xfer *x, wf_world *w) {
    rx_state *r = &x->rxs;
    if (r->peer < 0) return;
    rx_quiesce(x);
    if (r->acking) wf_world_cancel(w, &r->ack_op, 1);
    else if (r->slot > 0 && r->received < r->ns)
        wf_world_cancel(w, r->ops + r->received, (int)(r->ns - r->received));
    r->peer = -1;
}

/* The pipeline, receiver side. A HEADER from peer `from` arrived: check it, post a receive for
 * every slice at once (matched in order: same tag), each into its own part of the buffer, so the
 * sender's rendezvous for slice i+1 proceeds while slice i is decoded, instead of waiting for a
 * receive posted after it. A refused header still takes its slices off the wire (a bad one
 * cannot say how many: it is answered at once), so that the sender's wait ends with an answer. */
static void rx_start(wf_kv_xfer *x, wf_world *w, wf_kv_store *store, int from) {
    peer_rx *p = &x->rx[from];
    rx_state *r = &x->rxs;
    wf_status status = WF_OK;
    char err[256] = "";
    uint32_t hdr[5];
    size_t got = p->op.received;
    memcpy(hdr, p->hdr, HDR_FIXED);
    uint32_t nb = hdr[1], n_tokens = hdr[2], ns = hdr[3];
    int L = x->geo.n_layers;
    if (got < HDR_FIXED || hdr[0] != HDR_MAGIC || nb > HDR_MAX_BLOCKS ||
        got != HDR_FIXED + 4u * (size_t)nb || ns < 1 || ns > MAX_SLICES || ns > (uint32_t)L ||
        hdr[4] == 0 || hdr[4] > 0xffffu) {
        status = WF_EPROTO;
        snprintf(err, sizeof err, "bad KV header from rank %d (%zu bytes)", from, got);
    } else if (n_tokens < 1 || n_tokens > (uint32_t)x->max_tokens) {
        status = WF_ERANGE;
        snprintf(err, sizeof err, "KV of %u tokens from rank %d (this worker holds 1..%d)", n_tokens,
                 from, x->max_tokens);
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
            size_t b = wf_kv_codec_max_layers_bytes(x->dcodec, bound_tokens, l1 - l0);
            if (b > slot) slot = b;
        }
        if (ensure_buf(&x->rbuf, &x->rcap, (size_t)ns * slot) != WF_OK) {
            status = WF_ENOMEM;
            slot = 0;
        }
    }
    pthread_mutex_lock(&x->mu); /* the decoder is idle (the last receive ended) */
    r->peer = from;
    r->id = (uint16_t)hdr[4];
    r->nb = status == WF_OK ? nb : 0;
    r->n_tokens = n_tokens;
    r->ns = slot > 0 ? ns : 0;
    if (r->nb > 0) memcpy(r->dst, dst, 4u * (size_t)nb);
    r->store = store;
    r->slot = slot;
    r->received = 0;
    r->acking = false;
    r->avail = 0;
    r->abort = false;
    atomic_store_explicit(&r->done, 0, memory_order_relaxed);
    r->status = status;
    snprintf(r->err, sizeof r->err, "%s", err);
    r->dec_ns = r->tail_ns = 0;
    pthread_mutex_unlock(&x->mu);
    r->deadline_ns = wf_clock_now_ns() + (uint64_t)slice_wait(x, w, slot) * 1000000ull;
    if (slot > 0) {
        for (uint32_t i = 0; i < ns; i++)
            r->ops[i] = (wf_world_op){.kind = WF_WORLD_RECV, .peer = from, .tag = tag(1, r->id),
                                      .buf = x->rbuf + (size_t)i * slot, .len = slot};
        if (wf_world_post(w, r->ops, (int)ns) != WF_OK) {
            WF_LOG_WARN("worker", NULL, "KV slices from rank %d: %s", from, wf_world_error(w));
            wf_world_cancel(w, r->ops, (int)ns);
            r->slot = 0;
            r->peer = -1;
            x->st.receive_errors++;
        }
    }
}

/* Moves the receive on: slices that arrived go to the decoder; once every slice is decoded the
 * ACK goes out; once it is sent the receive ends. Never blocks. */
static void rx_progress(wf_kv_xfer *x, wf_world *w) {
    rx_state *r = &x->rxs;
    if (!r->acking) {
        uint32_t before = r->received;
        while (r->received < r->ns && wf_world_test(w, &r->ops[r->received], 1) == 1) {
            if (r->ops[r->received].status != WF_OK) {
                WF_LOG_WARN("worker", NULL, "KV slices from rank %d: %s", r->peer, wf_world_error(w));
                r->received++; /* that one is over (failed): cancel only the later ones */
                x->st.receive_errors++;
                rx_drop(x, w);
                return;
            }
            r->received++;
        }
        uint64_t now = wf_clock_now_ns();
        if (r->received > before) {
            /* The next slice is due within the wait bound of its bytes: a sender that still
             * computes the layers of the next slice sends it well within that. */
            r->deadline_ns = now + (uint64_t)slice_wait(x, w, r->slot) * 1000000ull;
            rx_hand(x);
        } else if (r->received < r->ns && now > r->deadline_ns) {
            WF_LOG_WARN("worker", NULL, "KV slices from rank %d: none for %d ms", r->peer,
                        slice_wait(x, w, r->slot));
            x->st.receive_errors++;
            rx_drop(x, w);
            return;
        }
        if (atomic_load_explicit(&r->done, memory_order_acquire) < r->ns) return;
        /* Every slice decoded (the decoder's results are visible: acquire of done). */
        if (r->status != WF_OK) {
            x->st.receive_errors++;
            WF_LOG_WARN("worker", NULL, "KV from rank %d rejected: %s", r->peer, r->err);
        } else {
            x->st.received++;
        }
        r->reply = (xfer_ack){.status = r->status, .tail_ns = r->tail_ns, .decode_ns = r->dec_ns};
        r->ack_op = (wf_world_op){.kind = WF_WORLD_SEND, .peer = r->peer, .tag = tag(2, r->id),
                                  .buf = &r->reply, .len = sizeof r->reply};
        if (wf_world_post(w, &r->ack_op, 1) != WF_OK) {
            WF_LOG_WARN("worker", NULL, "KV ack to rank %d: %s", r->peer, wf_world_error(w));
            wf_world_cancel(w, &r->ack_op, 1);
            r->peer = -1;
            return;
        }
        r->acking = true;
        r->deadline_ns = wf_clock_now_ns() + (uint64_t)wf_world_timeout_ms(w) * 1000000ull;
    }
    if (wf_world_test(w, &r->ack_op, 1) == 1) {
        if (r->ack_op.status != WF_OK)
            WF_LOG_WARN("worker", NULL, "KV ack to rank %d: %s", r->peer, wf_world_error(w));
        r->peer = -1;
    } else if (wf_clock_now_ns() > r->deadline_ns) {
        WF_LOG_WARN("worker", NULL, "KV ack to rank %d: not taken in %d ms", r->peer, wf_world_timeout_ms(w));
        rx_drop(x, w);
    }
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

int wf_kv_xfer_poll(wf_kv_xfer *x, wf_world *w, wf_kv_store *store) {
    int n = 0;
    if (x->rxs.peer >= 0) rx_progress(x, w);
    /* One receive at a time: other HEADERs wait in their posted receives. */
    for (int r = 1; x->rxs.peer < 0 && r < wf_world_size(w) && r < WF_KV_XFER_MAX_PEERS; r++) {
        peer_rx *p = &x->rx[r];
        if (!p->posted || wf_world_test(w, &p->op, 1) == 0) continue;
        p->posted = 0;
        if (p->op.status == WF_OK) {
            rx_start(x, w, store, r);
            if (x->rxs.peer >= 0) rx_progress(x, w);
            n++;
        }
    }
    wf_kv_xfer_post(x, w);
    return n;
}

bool wf_kv_xfer_receiving(const wf_kv_xfer *x) { return x->rxs.peer >= 0; }

void wf_kv_xfer_get_stats(const wf_kv_xfer *x, wf_kv_xfer_stats *out) {
    *out = x->st;
    wf_kv_controller_stats cs;
    wf_kv_controller_get_stats(x->ctl, &cs);
    out->bandwidth_gbps = cs.bandwidth_gbps;
}
