/* Compressed KV transfers between worker processes (prefill -> decode), the codec half of
 * prefill/decode disaggregation. Raw KV goes by RMA put straight into the decode worker's
 * registered store (worker.c); when the prefill worker's controller (kv/kv_controller.h)
 * predicts that a profile is faster over the link it measures, the blocks are encoded and sent
 * as tagged messages instead, and the decode worker decodes them into the blocks the scheduler
 * reserved. A transfer is a pipeline of layer slices (at most 16, of equal layer counts: 15 of
 * 2 layers for 30; kv/codec.h's wf_kv_codec_encode_layers), so prefill, encode, wire and decode overlap. Two threads live as
 * long as the object: the encoder encodes each slice as soon as its layers are stored (the
 * prefill hands them over with wf_kv_xfer_send_layers while it computes the next ones) while
 * the caller's thread posts each slice as soon as it is ready and progresses the world (UCX over
 * TCP moves a posted message only while the sender progresses); the decoder decodes each slice
 * received into the reserved blocks while the caller's thread only moves messages (its loop
 * keeps its heartbeats and batches). Encode and decode of a slice may also be split over a pool
 * (options par_run):
 *
 *     prefill rank                                  decode rank
 *     HEADER (magic, tokens, slices, id, blocks) ─▶ checks the blocks, posts a receive per slice
 *     encode slice 0; SLICE 0                  ──▶  receive slice 0
 *     encode slice 1; SLICE 1                  ──▶  receive slice 1 while decoding slice 0
 *     ...                                           ...
 *                                              ◀──  ACK (status, decode times): only then does
 *                                                   the prefill worker answer its batch
 *
 *     // both sides, once the store exists:
 *     wf_kv_xfer *x;
 *     wf_kv_xfer_new(&store.geometry, max_tokens, lib_or_NULL, &opts, &x, err, sizeof err);
 *     // decode side, in its loop:
 *     wf_kv_xfer_post(x, world);              // a HEADER receive from every other worker
 *     wf_kv_xfer_poll(x, world, &store);      // handles what arrived (slices, decode, ACK)
 *     // prefill side, per sequence:
 *     wf_kv_decision d;
 *     wf_kv_xfer_decide(x, raw_bytes, accuracy, &d);     // d.profile < 0: put raw
 *     wf_kv_xfer_send(x, world, &d, &store, blocks, n, n_tokens, peer, dst_blocks, &st, ...);
 *     // or overlapped with the prefill that computes the blocks:
 *     wf_kv_xfer_send_begin(x, world, &d, &store, blocks, n, n_tokens, peer, dst, n, 0, ...);
 *     //   engine's layer hook (any thread): wf_kv_xfer_send_layers(x, l + 1);
 *     //   caller's loop while the prefill runs: wf_kv_xfer_send_pump(x, world);
 *     wf_kv_xfer_send_end(x, world, &wire, err, sizeof err);   // after the prefill
 *
 * Tags: WF_WORLD_TAG_USER with seq WF_KV_XFER_SEQ and step 0 (header, group 0), 1 (slices), 2
 * (ack); slices and ACK carry the transfer's id as their group, so what is left of a transfer
 * the sender gave up never matches a later one. They never match the coordinator's frames
 * (seq 0). Not thread-safe: the worker's thread, but for wf_kv_xfer_send_layers. */
#ifndef WF_SERVER_WORKERS_KV_XFER_H
#define WF_SERVER_WORKERS_KV_XFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/world/world.h"
#include "kv/kv_controller.h"
#include "kv/kv_store.h"

#define WF_KV_XFER_SEQ 0x4b56u /* "KV" */

/* The wait bound of moving `bytes` to a peer: the world's bound (for a peer that is stuck) plus
 * the time at 1 MB/s, the slowest link a transfer is allowed (a 184 MB prompt on 100 Mbit/s
 * takes 15 s, beyond a fixed 10 s bound). Dead peers are still seen at once. */
int wf_kv_xfer_timeout_ms(int base_ms, size_t bytes);
#define WF_KV_XFER_MAX_PEERS WF_WORLD_MAX_RANKS
/* Layer slices a compressed transfer of a model with n_layers is pipelined over (one per layer
 * up to 16; beyond, the fewest layers per slice that keep 16 slices or fewer, all slices the
 * same: 15 of 2 for 30 layers); the controller's time model and B* use it. */
int wf_kv_xfer_slices(int n_layers);

typedef struct wf_kv_xfer_options {
    double default_accuracy;   /* kv_accuracy of requests that state none (0..1) */
    const char *force_profile; /* a profile name: always that one; "off": never compress; NULL
                                  or "auto": the controller decides */
    double init_bandwidth_gbps;/* the controller's B before its first sample */
    double compress_margin;    /* the controller's (kv_controller.h): 0.2 by default */
    /* Encode and decode of each layer slice split over a pool (wf_kv_codec_set_parallel; the
     * frames are byte-identical): run NULL or par_workers <= 1 keeps them serial. The pool is
     * the caller's, used only by this object's thread, and must outlive it. */
    wf_kv_parallel_fn par_run;
    void *par_pool;
    int par_workers;
    /* An eventfd the codec threads write when a slice is encoded or decoded, so the owner's
     * loop waits on it (with the world's events); > 0, else the object makes its own. */
    int wake_fd;
    /* How long the decode side waits for a transfer's next slice beyond the time its bytes
     * take: a sender that begins during its prefill sends a slice per eighth of the prefill.
     * Dead senders are seen at once whatever this is; 0: the world's wait bound. */
    int slice_wait_ms;
} wf_kv_xfer_options;

void wf_kv_xfer_options_init(wf_kv_xfer_options *o);

typedef struct wf_kv_xfer wf_kv_xfer;

/* lib may be NULL (no profiles: every transfer is raw). The library is copied. WF_EINVAL
 * (force_profile not in the library; err names it), WF_ENOMEM, or the codec's status. */
wf_status wf_kv_xfer_new(const wf_kv_geometry *geometry, int max_tokens, const wf_kv_profile_lib *lib,
                         const wf_kv_xfer_options *o, wf_kv_xfer **out, char *err, size_t errlen);
void wf_kv_xfer_free(wf_kv_xfer *x, wf_world *w);

/* Decides one transfer of raw_bytes F16 KV (accuracy < 0: the default). codec: the request's
 * choice (WF_KV_CODEC_AUTO: the controller, or --kv-codec when set; WF_KV_CODEC_OFF: raw; else
 * that profile id; an id the library lacks: raw). */
void wf_kv_xfer_decide(wf_kv_xfer *x, size_t raw_bytes, double accuracy, uint32_t codec,
                       wf_kv_decision *d);
/* Encodes positions [0, n_tokens) of blocks with d->profile slice by slice, sending each as
 * soon as it is encoded, to peer for its blocks dst[0..n_dst), and waits for the peer's ACK.
 * Reports the outcome to the controller. *wire_bytes receives the bytes sent. WF_OK, or why it failed (the peer's status, WF_EPEER,
 * WF_ETIMEDOUT, the codec's). */
wf_status wf_kv_xfer_send(wf_kv_xfer *x, wf_world *w, const wf_kv_decision *d, const wf_kv_store *store,
                          const int32_t *blocks, int n_blocks, int n_tokens, int peer,
                          const int32_t *dst, int n_dst, size_t *wire_bytes, char *err, size_t errlen);
/* The same in steps, for a send that starts while the prefill still computes the blocks: begin
 * posts the HEADER and hands the job to the encoder, which encodes a slice once its layers are
 * stored (`layers` so far; -1: all). send_layers (thread-safe: the engine's layer hook) says
 * that more are stored, or with -1 that the prefill failed (the rest goes empty: the peer
 * refuses it and answers, send_end then returns WF_ECANCELLED). send_pump (the owner's loop)
 * posts the slices ready and progresses them. send_end hands over every layer, posts the rest,
 * waits for the ACK and reports to the controller, as wf_kv_xfer_send. One send at a time:
 * begin while one is on is WF_EINVAL. */
wf_status wf_kv_xfer_send_begin(wf_kv_xfer *x, wf_world *w, const wf_kv_decision *d,
                                const wf_kv_store *store, const int32_t *blocks, int n_blocks,
                                int n_tokens, int peer, const int32_t *dst, int n_dst, int layers,
                                char *err, size_t errlen);
void wf_kv_xfer_send_layers(wf_kv_xfer *x, int layers);
void wf_kv_xfer_send_pump(wf_kv_xfer *x, wf_world *w);
wf_status wf_kv_xfer_send_end(wf_kv_xfer *x, wf_world *w, size_t *wire_bytes, char *err, size_t errlen);
bool wf_kv_xfer_sending(const wf_kv_xfer *x);

/* A raw transfer's outcome (RMA path), for the controller's bandwidth estimate. */
void wf_kv_xfer_observe_raw(wf_kv_xfer *x, const wf_kv_decision *d, size_t bytes, uint64_t ns);
/* The same for raw puts posted layer by layer as the prefill stored them: span_ns from the first
 * put to the last one complete, tail_ns from the last layer's puts posted to the end. A transfer
 * that ended about a layer's wire time after the last layer kept up with the prefill, which set
 * its pace: bytes / span then only bounds B from below and its time says nothing of the
 * prediction (kv_controller.h wf_kv_controller_observe_paced); else the link was the bottleneck
 * the whole span, a sample as wf_kv_xfer_observe_raw. */
void wf_kv_xfer_observe_raw_paced(wf_kv_xfer *x, const wf_kv_decision *d, size_t bytes,
                                  uint64_t span_ns, uint64_t tail_ns);

/* Decode side: posts a HEADER receive from every other rank but 0 (idempotent). */
wf_status wf_kv_xfer_post(wf_kv_xfer *x, wf_world *w);
/* Decode side, never blocks: moves the receive in progress on (slices received go to the
 * decoder thread, which writes them into store's reserved blocks; once all are decoded the ACK
 * goes out), starts one from a HEADER that arrived if none is, and reposts. A sender that dies
 * fails it at once, one silent beyond the wait bound of a slice's bytes fails it then. Returns
 * the number of receives started. */
int wf_kv_xfer_poll(wf_kv_xfer *x, wf_world *w, wf_kv_store *store);
/* A receive is in progress (its slices keep coming: poll often). */
bool wf_kv_xfer_receiving(const wf_kv_xfer *x);

/* Counters: transfers compressed / raw, and per decision reason (wf_kv_reason). */
typedef struct wf_kv_xfer_stats {
    uint64_t compressed, raw, received, receive_errors;
    uint64_t reasons[WF_KV_REASON_COUNT];
    uint64_t raw_bytes, wire_bytes;
    uint64_t early_layers;     /* layers of the slices on the wire before send_end (the
                                  prefill that computed them still ran) */
    double bandwidth_gbps;     /* the controller's current B */
    char last_profile[WF_KV_PROFILE_NAME_MAX];
} wf_kv_xfer_stats;
void wf_kv_xfer_get_stats(const wf_kv_xfer *x, wf_kv_xfer_stats *out);

#endif
