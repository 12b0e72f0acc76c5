/* Control frames between the coordinator and worker ranks: joining (HELLO, WELCOME or REJECT,
 * WORLD_TABLE), liveness and load (HEARTBEAT), what a worker is (WORKER_INFO), virtual models
 * added and removed at run time (VMODEL, VMODEL_ACK), and steering (CANCEL, DRAIN, SHUTDOWN,
 * ERROR).
 * Wire layouts: the tables in proto/frame.h.
 *
 *     // worker
 *     wf_frame_hello h = {.version_min = WF_FRAME_VERSION, .version_max = WF_FRAME_VERSION,
 *                         .role = WF_FRAME_ROLE_DECODE, .requested_rank = WF_FRAME_RANK_ANY,
 *                         .pid = getpid(), .ucx_address = addr, .ucx_address_len = addr_len};
 *     wf_frame_encode_hello(&h, buf, cap, &len, err, sizeof err);
 *     // coordinator
 *     wf_frame_decode_hello(&f, &arena, &h, err, sizeof err);
 *     if (wf_frame_negotiate_version(WF_FRAME_VERSION, WF_FRAME_VERSION, h.version_min,
 *                                    h.version_max, &v, err, sizeof err) != WF_OK)
 *         send a REJECT with err as the reason;
 *
 * Ownership and statuses as in proto/frame.h: encoders write into the caller's buffer; decoders
 * put blobs and the peer table into the arena (fixed-size strings land in the structs). All
 * functions are reentrant. */
#ifndef WF_PROTO_FRAME_CONTROL_H
#define WF_PROTO_FRAME_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"

typedef enum wf_frame_role {
    WF_FRAME_ROLE_WORKER = 0, /* LLM prefill and decode */
    WF_FRAME_ROLE_PREFILL,
    WF_FRAME_ROLE_DECODE,
    WF_FRAME_ROLE_DIT,
    WF_FRAME_ROLE_COUNT
} wf_frame_role;

const char *wf_frame_role_str(wf_frame_role role);

#define WF_FRAME_RANK_ANY (-1)
#define WF_FRAME_DIGEST_SIZE 32

/* What a worker loaded, so the coordinator can refuse a mismatched worker. */
typedef struct wf_frame_model_fingerprint {
    uint64_t file_size;
    uint8_t digest[WF_FRAME_DIGEST_SIZE]; /* the loader's hash of the file; zeros: none */
    char name[WF_FRAME_NAME_MAX];         /* GGUF general.name or the file name */
} wf_frame_model_fingerprint;

typedef struct wf_frame_hello {
    uint16_t version_min, version_max;    /* (major << 8) | minor */
    wf_frame_role role;
    int32_t requested_rank;               /* WF_FRAME_RANK_ANY or >= 0 */
    uint32_t pid;
    char host[WF_FRAME_HOST_MAX];
    uint32_t n_cores;                     /* cores the worker will use */
    uint64_t core_mask[WF_FRAME_MAX_CORE_WORDS]; /* bit c of word c/64: core c */
    wf_frame_model_fingerprint model;
    const uint8_t *ucx_address;           /* opaque UCX worker address */
    uint32_t ucx_address_len;             /* <= WF_FRAME_UCX_ADDRESS_MAX */
    const uint8_t *rkey;                  /* packed remote key of the symmetric buffer */
    uint32_t rkey_len;                    /* <= WF_FRAME_RKEY_MAX */
    uint64_t buffer_addr, buffer_size;    /* the symmetric buffer in the worker's space */
    uint64_t incarnation;                 /* grows each time the worker process restarts */
} wf_frame_hello;

/* One rank of the world as every other rank needs it to connect. */
typedef struct wf_frame_peer {
    int32_t rank;
    wf_frame_role role;
    uint32_t pid;
    char host[WF_FRAME_HOST_MAX];
    const uint8_t *ucx_address;
    uint32_t ucx_address_len;
    const uint8_t *rkey;
    uint32_t rkey_len;
    uint64_t buffer_addr, buffer_size;
    uint64_t incarnation;
} wf_frame_peer;

typedef struct wf_frame_welcome {
    uint16_t version;          /* negotiated */
    int32_t rank;              /* assigned, in [0, world_size) */
    int32_t world_size;        /* 1..WF_FRAME_MAX_WORLD */
    uint32_t heartbeat_ms;
    uint64_t epoch;            /* of the world table below */
    const wf_frame_peer *peers;
    int n_peers;               /* <= world_size, ranks < world_size */
} wf_frame_welcome;

/* An update of the table after a rank joins, leaves or restarts. */
typedef struct wf_frame_world_table {
    uint64_t epoch;
    int32_t world_size;
    const wf_frame_peer *peers;
    int n_peers;
} wf_frame_world_table;

typedef struct wf_frame_reject {
    uint16_t version_min, version_max; /* the coordinator's supported range */
    wf_status status;                  /* e.g. WF_EUNSUPPORTED (version), WF_EINVAL (model) */
    char reason[WF_FRAME_MESSAGE_MAX];
} wf_frame_reject;

typedef struct wf_frame_heartbeat {
    uint64_t seq;
    uint64_t time_ns;                  /* sender's CLOCK_MONOTONIC */
    uint32_t kv_blocks_used, kv_blocks_total;
    uint32_t queued_batches;
    /* 1.3: the sliding-window layers' blocks of a KV store split by layer kind
     * (kv/kv_store.h; kv_blocks_* then count the global layers' blocks); 0: not split (and in
     * 1.0-1.2 frames) */
    uint32_t kv_swa_blocks_total;
    /* 1.4 (0 in older frames), counters since the worker started: prompt tokens its prefix
     * cache was asked for and found (a prefill worker's, prefill/decode disaggregation), and
     * the layers of KV it had on their way to a decode worker before the prefill that computed
     * them ended (what the layer overlap did; raw puts and compressed slices alike) */
    uint64_t prefix_queries, prefix_hits;
    uint64_t kv_layers_early;
} wf_frame_heartbeat;

typedef enum wf_frame_cancel_scope {
    WF_FRAME_CANCEL_REQUEST = 0,       /* id: a request_seq: drop its tasks and state */
    WF_FRAME_CANCEL_BATCH,             /* id: a batch iteration: stop it early */
} wf_frame_cancel_scope;

typedef struct wf_frame_cancel {
    wf_frame_cancel_scope scope;
    uint64_t id;
} wf_frame_cancel;

typedef struct wf_frame_drain {
    uint64_t deadline_ns;              /* finish queued work by then; 0: no deadline */
} wf_frame_drain;

/* SHUTDOWN (reason) and ERROR (what went wrong) share this shape. */
typedef struct wf_frame_status_msg {
    wf_status status;
    char message[WF_FRAME_MESSAGE_MAX];
} wf_frame_status_msg;

/* A KV codec profile as a worker measured it at start-up. */
typedef struct wf_frame_codec_speed {
    char name[WF_FRAME_CODEC_NAME_MAX];
    float cr, enc_gbps, dec_gbps;      /* compression ratio, GB/s of F16 KV in / out */
} wf_frame_codec_speed;

/* What a worker is, once it loaded: the role it declares (a worker joined from another host
 * says whether it prefills or decodes) and its KV codec speeds. */
typedef struct wf_frame_worker_info {
    wf_frame_role role;
    int n_codecs;                      /* <= WF_FRAME_MAX_CODECS */
    wf_frame_codec_speed codecs[WF_FRAME_MAX_CODECS];
} wf_frame_worker_info;

typedef enum wf_frame_vmodel_op {
    WF_FRAME_VMODEL_ADD = 0,           /* load spec's adapters, bind them to num */
    WF_FRAME_VMODEL_REMOVE,            /* unbind num, free its adapters */
} wf_frame_vmodel_op;

/* A virtual model added or removed at run time (server/workers/pool.h). */
typedef struct wf_frame_vmodel {
    wf_frame_vmodel_op op;
    uint32_t num;                      /* != 0 (0 is the bare backbone) */
    const char *spec;                  /* add: JSON (server/vmodels.h), < WF_FRAME_VMODEL_SPEC_MAX
                                          bytes; remove: "" or NULL. Decoded into the arena. */
} wf_frame_vmodel;

/* The worker's answer to one VMODEL. */
typedef struct wf_frame_vmodel_ack {
    wf_frame_vmodel_op op;
    uint32_t num;
    wf_status status;
    char message[WF_FRAME_MESSAGE_MAX];
} wf_frame_vmodel_ack;

/* Encoders: (message, buf, cap, &len, err, errlen) -> WF_OK / WF_ERANGE / WF_EINVAL. */
wf_status wf_frame_encode_hello(const wf_frame_hello *m, void *buf, size_t cap, size_t *len,
                                char *err, size_t errlen);
wf_status wf_frame_encode_welcome(const wf_frame_welcome *m, void *buf, size_t cap, size_t *len,
                                  char *err, size_t errlen);
wf_status wf_frame_encode_world_table(const wf_frame_world_table *m, void *buf, size_t cap,
                                      size_t *len, char *err, size_t errlen);
wf_status wf_frame_encode_reject(const wf_frame_reject *m, void *buf, size_t cap, size_t *len,
                                 char *err, size_t errlen);
wf_status wf_frame_encode_heartbeat(const wf_frame_heartbeat *m, void *buf, size_t cap,
                                    size_t *len, char *err, size_t errlen);
wf_status wf_frame_encode_cancel(const wf_frame_cancel *m, void *buf, size_t cap, size_t *len,
                                 char *err, size_t errlen);
wf_status wf_frame_encode_drain(const wf_frame_drain *m, void *buf, size_t cap, size_t *len,
                                char *err, size_t errlen);
wf_status wf_frame_encode_worker_info(const wf_frame_worker_info *m, void *buf, size_t cap,
                                      size_t *len, char *err, size_t errlen);
wf_status wf_frame_encode_vmodel(const wf_frame_vmodel *m, void *buf, size_t cap, size_t *len,
                                 char *err, size_t errlen);
wf_status wf_frame_encode_vmodel_ack(const wf_frame_vmodel_ack *m, void *buf, size_t cap,
                                     size_t *len, char *err, size_t errlen);
/* type: WF_FRAME_SHUTDOWN or WF_FRAME_ERROR. */
wf_status wf_frame_encode_status_msg(wf_frame_type type, const wf_frame_status_msg *m, void *buf,
                                     size_t cap, size_t *len, char *err, size_t errlen);

/* Decoders: (opened frame, arena or NULL where nothing needs one, out, err, errlen). */
wf_status wf_frame_decode_hello(const wf_frame_view *f, wf_frame_arena *arena,
                                wf_frame_hello *out, char *err, size_t errlen);
wf_status wf_frame_decode_welcome(const wf_frame_view *f, wf_frame_arena *arena,
                                  wf_frame_welcome *out, char *err, size_t errlen);
wf_status wf_frame_decode_world_table(const wf_frame_view *f, wf_frame_arena *arena,
                                      wf_frame_world_table *out, char *err, size_t errlen);
wf_status wf_frame_decode_reject(const wf_frame_view *f, wf_frame_reject *out, char *err,
                                 size_t errlen);
wf_status wf_frame_decode_heartbeat(const wf_frame_view *f, wf_frame_heartbeat *out, char *err,
                                    size_t errlen);
wf_status wf_frame_decode_cancel(const wf_frame_view *f, wf_frame_cancel *out, char *err,
                                 size_t errlen);
wf_status wf_frame_decode_drain(const wf_frame_view *f, wf_frame_drain *out, char *err,
                                size_t errlen);
wf_status wf_frame_decode_worker_info(const wf_frame_view *f, wf_frame_worker_info *out, char *err,
                                      size_t errlen);
wf_status wf_frame_decode_vmodel(const wf_frame_view *f, wf_frame_arena *arena,
                                 wf_frame_vmodel *out, char *err, size_t errlen);
wf_status wf_frame_decode_vmodel_ack(const wf_frame_view *f, wf_frame_vmodel_ack *out, char *err,
                                     size_t errlen);
/* Accepts a SHUTDOWN or an ERROR frame (f->hdr.type says which). */
wf_status wf_frame_decode_status_msg(const wf_frame_view *f, wf_frame_status_msg *out, char *err,
                                     size_t errlen);

/* Whether two fingerprints name the same model (size, digest and name all equal). */
bool wf_frame_model_fingerprint_equal(const wf_frame_model_fingerprint *a,
                                      const wf_frame_model_fingerprint *b);

#endif
