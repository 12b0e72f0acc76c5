/* Versioned binary frames: everything that crosses a process boundary (coordinator <-> worker
 * ranks, over UCX or a TCP bootstrap link) is one frame: a fixed 24-byte little-endian header
 * and a payload whose layout depends on the frame type. This header has the envelope, the
 * bounded decode arena, the streaming reader and the layout tables of every frame type; the
 * encoders and decoders live in one header per family: proto/frame_control.h (HELLO, WELCOME,
 * REJECT, WORLD_TABLE, HEARTBEAT, CANCEL, DRAIN, SHUTDOWN, ERROR), proto/frame_task.h
 * (TASK_DISPATCH, TASK_EVENT, BATCH_DONE) and proto/frame_artifact.h (ARTIFACT_TRANSFER,
 * TRANSFER_DONE).
 *
 *     // sender: encode into a caller buffer; WF_ERANGE says how much room it needs
 *     size_t len;
 *     wf_status st = wf_frame_encode_task_dispatch(&batch, buf, cap, &len, err, sizeof err);
 *     if (st == WF_ERANGE) { grow buf to len bytes and encode again }
 *
 *     // receiver: open (envelope + checksum), then decode by type into a bounded arena
 *     wf_frame_view f;
 *     st = wf_frame_open(bytes, n, max_payload, &f, err, sizeof err);
 *     wf_frame_arena arena;
 *     wf_frame_arena_init(&arena, arena_mem, sizeof arena_mem);
 *     if (st == WF_OK && f.hdr.type == WF_FRAME_TASK_DISPATCH)
 *         st = wf_frame_decode_task_dispatch(&f, &arena, &batch, err, sizeof err);
 *     // batch's pointers point into arena_mem: valid until the arena is reset or freed
 *
 *     // byte streams (TCP bootstrap): feed bytes, take complete frames
 *     wf_frame_stream s;
 *     wf_frame_stream_init(&s, sbuf, sizeof sbuf, max_payload);
 *     while (have bytes) {
 *         size_t used;
 *         wf_frame_stream_feed(&s, p, n, &used);  p += used; n -= used;
 *         while ((st = wf_frame_stream_next(&s, &f, err, sizeof err)) == WF_OK) handle(&f);
 *         if (st != WF_IN_PROGRESS) close the link: the stream is corrupt (err says why)
 *     }
 *
 * Ownership: encoders write only into the caller's buffer; decoders never allocate: arrays and
 * strings land in the caller's wf_frame_arena (fixed capacity), so a hostile count or length
 * can at most exhaust that arena (WF_ERANGE), never the heap. Decoded pointers point into the
 * arena, never into the frame bytes. Thread-safety: every function is reentrant; one arena or
 * stream must not be used by two threads at once.
 *
 * Statuses. Encoders: WF_OK; WF_ERANGE when cap is too small (*len receives the size needed and
 * nothing useful is in buf); WF_EINVAL when the message cannot be encoded (a field outside the
 * range its decoder accepts; err names it). Decoders: WF_OK, or
 *   WF_EFORMAT       truncated header or payload, wrong magic, checksum mismatch, a count that
 *                    needs more bytes than are left, trailing bytes, a string with a NUL;
 *   WF_EUNSUPPORTED  unknown major version (the message names both), unknown type or flags;
 *   WF_ERANGE        payload over the caller's limit, arena exhausted, a field out of range
 *                    (n_ranks > WF_MAX_GROUP_RANKS, a negative length, step_end > num_steps..);
 *   WF_EPROTO        an invalid enum value, or a decoder called on a frame of another type.
 * Every error writes a message naming the field into err (when err != NULL). After an error
 * the output struct and the arena hold partial data: reset the arena, drop the output.
 *
 * ---- Envelope (24 bytes, every integer little-endian) --------------------------------------
 *   off size field
 *     0    4 magic "WFRM" (0x57 0x46 0x52 0x4d)
 *     4    1 version major   (WF_FRAME_VERSION_MAJOR; another major is refused, except for
 *     5    1 version minor    HELLO and REJECT whose layouts are frozen so that a peer of any
 *                             version can be told why it is refused)
 *     6    2 type (wf_frame_type)
 *     8    4 flags (none defined: must be 0)
 *    12    4 payload length in bytes (the receiver's max_payload bounds it)
 *    16    4 CRC32C of the payload
 *    20    4 CRC32C of header bytes 0..19 (a corrupt length never makes a stream wait forever)
 *    24    n payload
 * A later minor version may append fields to a payload; a decoder ignores trailing bytes only in
 * frames of a newer version than its own, and refuses them otherwise.
 *
 * ---- Payload building blocks ---------------------------------------------------------------
 *   bool: u8 0 or 1.  enum: u8.  int: i32.  float: IEEE-754 binary32 bits, u32.
 *   str<M>:   u16 len (< M), len bytes, no NUL; decoded NUL-terminated.
 *   blob<M>:  u32 len (<= M), len bytes.
 *   i32s<M>:  u32 n (<= M), n x i32.
 *   group:    u64 id, u8 n_ranks (<= WF_MAX_GROUP_RANKS), n_ranks x i32 rank (>= 0).
 *   placement: u8 kind (wf_placement_kind), i32 shard_dim, group holders.
 *   artifact: u64 id, u8 kind (wf_artifact_kind), placement, then by kind:
 *             NONE: nothing; KV: i32s block_table (blocks >= 0); LATENT: i32 channels, height,
 *             width, step; IMAGE: i32 channels, height, width (all >= 0).
 *   sampling: f32 temperature, i32 top_k (>= 0), f32 top_p, f32 min_p, f32 repetition_penalty,
 *             f32 frequency_penalty, f32 presence_penalty, bool has_seed, u64 seed,
 *             bool logprobs, u8 top_logprobs (<= WF_MAX_TOP_LOGPROBS),
 *             u32 n_logit_bias, n x (i32 token >= 0, f32 bias).
 *   gen_token: i32 token, f32 logprob, u8 n_top (<= WF_MAX_TOP_LOGPROBS), n_top x (i32, f32).
 *
 * ---- Control frames (proto/frame_control.h) ------------------------------------------------
 * HELLO (1), worker -> coordinator:
 *   u16 version_min, u16 version_max ((major << 8) | minor), u8 role (wf_frame_role),
 *   i32 requested_rank (-1: any), u32 pid, str<64> host, u32 n_cores,
 *   u8 n_core_words (<= 16; last word non-zero), n x u64 core mask words,
 *   model: u64 file_size, 32 bytes digest, str<128> name,
 *   blob<8192> ucx_address, blob<4096> rkey, u64 buffer_addr, u64 buffer_size,
 *   u64 incarnation.
 * WELCOME (2), coordinator -> worker:
 *   u16 version (negotiated), i32 rank, i32 world_size (1..WF_FRAME_MAX_WORLD),
 *   u32 heartbeat_ms, u64 epoch, peer table.
 * WORLD_TABLE (4), coordinator -> workers: u64 epoch, i32 world_size, peer table.
 *   peer table: u32 n_peers (<= world_size), per peer: i32 rank (< world_size), u8 role,
 *   u32 pid, str<64> host, blob<8192> ucx_address, blob<4096> rkey, u64 buffer_addr,
 *   u64 buffer_size, u64 incarnation.
 * REJECT (3), coordinator -> peer: u16 version_min, u16 version_max (the coordinator's),
 *   i32 status (a wf_status), str<256> reason.
 * HEARTBEAT (5): u64 seq, u64 time_ns, u32 kv_blocks_used (<= total), u32 kv_blocks_total,
 *   u32 queued_batches; since 1.3: u32 kv_swa_blocks_total (the sliding-window layers' blocks
 *   of a store split by layer kind, kv/kv_store.h; 0: not split, and for older frames);
 *   since 1.4: u64 prefix_queries, u64 prefix_hits (<= queries: prompt tokens of a prefill
 *   worker's prefix cache), u64 kv_layers_early (layers of KV on their way to a decode worker
 *   before the prefill that computed them ended); 0 in older frames.
 * CANCEL (6): u8 scope (wf_frame_cancel_scope), u64 id (request seq or batch iteration).
 * DRAIN (7): u64 deadline_ns (0: none).
 * SHUTDOWN (8), ERROR (9): i32 status, str<256> message.
 * WORKER_INFO (10), worker -> coordinator, once, after its model loaded and before its first
 *   HEARTBEAT: u8 role (wf_frame_role), u32 n_codecs (<= WF_FRAME_MAX_CODECS), per codec
 *   profile: str<32> name, f32 cr, f32 enc_gbps, f32 dec_gbps (each finite and > 0: measured
 *   on the worker at start-up).
 * VMODEL (11, since 1.2), coordinator -> worker: u8 op (wf_frame_vmodel_op: 0 add, 1 remove),
 *   u32 num (the number its tasks carry, != 0), str<16384> spec (add: the virtual model in the
 *   JSON form of server/vmodels.h; remove: empty).
 * VMODEL_ACK (12, since 1.2), worker -> coordinator, one per VMODEL: u8 op, u32 num,
 *   i32 status (a wf_status: WF_OK once its adapters are bound / unbound), str<256> message.
 *
 * ---- Task frames (proto/frame_task.h) ------------------------------------------------------
 * TASK_DISPATCH (16), coordinator -> ranks of a group: u64 iteration, group, u32 n_tasks
 *   (<= WF_FRAME_MAX_TASKS), n x task.
 *   task: u64 id, u8 kind (wf_task_kind), u64 request_seq, u32 vmodel, group, u64 deadline_ns,
 *   then by kind:
 *     PREFILL, DECODE: i32s tokens, i32 pos (>= 0), artifact kv, u32 n_samples
 *       (<= WF_FRAME_MAX_SAMPLES), n x sample.
 *       sample (1.2): sampling, u64 rng_state, u64 seq, i32 history_base
 *       (0..WF_FRAME_MAX_TOKENS), i32s history (the tokens from history_base on: n_history =
 *       history_base + count <= WF_FRAME_MAX_TOKENS), i32 n_prompt (0..n_history), bool
 *       suppress_eos. The receiver keeps each sequence's history (seq != 0) and holds its
 *       first history_base tokens from earlier dispatches, so a decode step carries one token
 *       of history instead of all of them (a frame with long histories used to pass the link's
 *       16 MiB bound).
 *       sample (1.0, 1.1): sampling, u64 rng_state, i32s history (whole), i32 n_prompt
 *       (0..n_history), bool suppress_eos (decoded with seq and history_base 0).
 *     ENCODE, DENOISE, DECODE_IMAGE: i32 class_label, i32 negative_label, f32 guidance_scale,
 *       i32 sampler, i32 num_steps (>= 0), i32 step_begin, i32 step_end
 *       (0 <= begin <= end <= num_steps), u64 seed, artifact latent, artifact image.
 *       (wf_task_dit.pixels is an in-process output and never crosses: decoded NULL / 0.)
 *     FINISH: artifact.
 *   Since 1.1, after the tasks: u32 n (= n_tasks), n x (f32 kv_accuracy (0..1), u32 kv_codec
 *   (0 auto, 0xffffffff off, else a KV profile id), u32 noise_index (DiT tasks: which image of
 *   its request)); each field 0 for tasks of the other kinds. A 1.0 frame ends after the tasks
 *   (kv_accuracy, kv_codec and noise_index are then 0).
 *   Since 1.2, after that: bool history_reset (forget every kept history first), u32 n_drop
 *   (<= WF_FRAME_MAX_HISTORY_DROP), n_drop x u64 seq (histories to forget), applied before
 *   the tasks.
 *   Since 1.3, after that: u32 n (= n_tasks), n x (i32 swa_lo (-1..WF_FRAME_MAX_BLOCKS),
 *   i32s swa_blocks): an LLM task's sliding-window layers' block table (a KV store split by
 *   layer kind, kv/kv_store.h), indexed like its kv block table: entries [0, swa_lo) were
 *   released behind the window (decoded as -1), the count is n_blocks - swa_lo and each entry
 *   >= 0. swa_lo -1 with no entries: no local table (an unsplit store, every task of another
 *   kind, and every task of a 1.0-1.2 frame).
 *   Task outputs (status, times, sample outputs) travel back in TASK_EVENT.
 * TASK_EVENT (17), rank -> coordinator: u64 iteration, u32 n_results (<= WF_FRAME_MAX_TASKS),
 *   per result: u64 task_id, u8 kind, i32 status, str<1024> message, u64 t_begin_ns,
 *   u64 t_end_ns, then PREFILL/DECODE: u32 n_samples, per sample: u64 rng_state (advanced),
 *   bool out_is_eog, gen_token; ENCODE/DENOISE/DECODE_IMAGE: i32 step_reached; FINISH: nothing.
 * BATCH_DONE (18), rank -> coordinator: u64 iteration, i32 status, str<1024> message.
 *
 * ---- Artifact frames (proto/frame_artifact.h) ----------------------------------------------
 * ARTIFACT_TRANSFER (32): u64 transfer_id, artifact src (with its source placement),
 *   artifact dst (destination placement and, for KV, the destination's blocks),
 *   u32 codec_profile (0: raw bytes; else a kv/ codec profile id), u64 total_bytes,
 *   u32 n_ranges (<= WF_FRAME_MAX_RANGES), per range: i32 src_rank, i32 dst_rank, i32 shard
 *   (-1: whole), u8 method (wf_frame_transfer_method), u64 src_offset, u64 length,
 *   u64 dst_offset (RMA: offset in the destination's symmetric buffer), u64 tag (tagged send).
 * TRANSFER_DONE (33), the receiving (or sending) rank -> coordinator: u64 transfer_id,
 *   i32 rank, i32 status, u64 bytes, u64 elapsed_ns, str<256> message.
 */
#ifndef WF_PROTO_FRAME_H
#define WF_PROTO_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

#define WF_FRAME_MAGIC "WFRM"
#define WF_FRAME_HEADER_SIZE 24
#define WF_FRAME_VERSION_MAJOR 1
#define WF_FRAME_VERSION_MINOR 4
/* A version as one number, (major << 8) | minor, as HELLO/WELCOME/REJECT carry it. */
#define WF_FRAME_VERSION ((uint16_t)((WF_FRAME_VERSION_MAJOR << 8) | WF_FRAME_VERSION_MINOR))
/* The largest payload length field a frame can carry (u32). Receivers pass a smaller limit. */
#define WF_FRAME_PAYLOAD_MAX UINT32_MAX

/* Bounds every decoder enforces (and every encoder checks, so what encodes also decodes). */
#define WF_FRAME_MAX_WORLD 1024          /* world size, peer table entries */
#define WF_FRAME_MAX_TASKS 4096          /* tasks per dispatch, results per event */
#define WF_FRAME_MAX_SAMPLES 256         /* samples per LLM task */
#define WF_FRAME_MAX_TOKENS (1 << 24)    /* tokens, history per task */
#define WF_FRAME_MAX_HISTORY_DROP 65536  /* sequence histories forgotten per dispatch */
#define WF_FRAME_MAX_BLOCKS (1 << 22)    /* KV block table entries */
#define WF_FRAME_MAX_LOGIT_BIAS 4096     /* logit_bias entries per sampling */
#define WF_FRAME_MAX_RANGES 4096         /* byte ranges per transfer */
#define WF_FRAME_MAX_CORE_WORDS 16       /* core mask: 1024 cores */
#define WF_FRAME_MAX_CODECS 64           /* KV codec profiles per WORKER_INFO */
#define WF_FRAME_CODEC_NAME_MAX 32       /* a KV codec profile's name incl. NUL */
#define WF_FRAME_UCX_ADDRESS_MAX 8192    /* bytes of a UCX worker address */
#define WF_FRAME_RKEY_MAX 4096           /* bytes of a packed remote key */
#define WF_FRAME_HOST_MAX 64             /* host name incl. NUL */
#define WF_FRAME_NAME_MAX 128            /* model name incl. NUL */
#define WF_FRAME_MESSAGE_MAX 256         /* control messages and reasons incl. NUL */
#define WF_FRAME_TASK_MESSAGE_MAX 1024   /* per-task / batch messages incl. NUL */
#define WF_FRAME_VMODEL_SPEC_MAX 16384   /* a virtual model's JSON declaration incl. NUL */

typedef enum wf_frame_type {
    WF_FRAME_HELLO = 1,
    WF_FRAME_WELCOME = 2,
    WF_FRAME_REJECT = 3,
    WF_FRAME_WORLD_TABLE = 4,
    WF_FRAME_HEARTBEAT = 5,
    WF_FRAME_CANCEL = 6,
    WF_FRAME_DRAIN = 7,
    WF_FRAME_SHUTDOWN = 8,
    WF_FRAME_ERROR = 9,
    WF_FRAME_WORKER_INFO = 10,
    WF_FRAME_VMODEL = 11,        /* since 1.2 */
    WF_FRAME_VMODEL_ACK = 12,    /* since 1.2 */
    WF_FRAME_TASK_DISPATCH = 16,
    WF_FRAME_TASK_EVENT = 17,
    WF_FRAME_BATCH_DONE = 18,
    WF_FRAME_ARTIFACT_TRANSFER = 32,
    WF_FRAME_TRANSFER_DONE = 33,
} wf_frame_type;

/* "task_dispatch", ...; "unknown" for a value outside the enum. */
const char *wf_frame_type_str(unsigned type);
bool wf_frame_type_known(unsigned type);

typedef struct wf_frame_header {
    uint8_t major, minor;
    uint16_t type;
    uint32_t flags;
    uint32_t payload_len;
    uint32_t payload_crc;
} wf_frame_header;

/* A checked frame: header plus its payload (pointing into the bytes given to wf_frame_open or
 * into the stream's buffer). */
typedef struct wf_frame_view {
    wf_frame_header hdr;
    const uint8_t *payload;
    size_t frame_len; /* WF_FRAME_HEADER_SIZE + hdr.payload_len */
} wf_frame_view;

/* CRC32C (Castagnoli) of n bytes, continuing from crc (0 to start). */
uint32_t wf_frame_crc32c(uint32_t crc, const void *data, size_t n);

/* Writes the 24 header bytes for hdr (magic and header CRC added; payload_crc is taken from
 * hdr as given). Never fails. */
void wf_frame_write_header(const wf_frame_header *hdr, uint8_t out[WF_FRAME_HEADER_SIZE]);

/* Checks the first WF_FRAME_HEADER_SIZE bytes of data: length, magic, header CRC, major
 * version, flags, type and payload length <= max_payload. Does not look at the payload. */
wf_status wf_frame_decode_header(const void *data, size_t len, size_t max_payload,
                                 wf_frame_header *out, char *err, size_t errlen);

/* Checks a whole frame at the start of data (len may extend past it: out->frame_len says where
 * the next one starts): the header as above, the payload present and its CRC. */
wf_status wf_frame_open(const void *data, size_t len, size_t max_payload, wf_frame_view *out,
                        char *err, size_t errlen);

/* Version negotiation: the highest version both ranges [a_min, a_max] and [b_min, b_max]
 * contain. WF_OK with *out, or WF_EUNSUPPORTED (no common version; err names both ranges). */
wf_status wf_frame_negotiate_version(uint16_t a_min, uint16_t a_max, uint16_t b_min,
                                     uint16_t b_max, uint16_t *out, char *err, size_t errlen);

/* ---- decode arena: where decoded arrays and strings land ------------------------------------ */

typedef struct wf_frame_arena {
    uint8_t *base;
    size_t cap;
    size_t used;
} wf_frame_arena;

/* mem (any alignment; cap bytes) stays the caller's; decoded pointers point into it. */
void wf_frame_arena_init(wf_frame_arena *arena, void *mem, size_t cap);
/* Forgets everything decoded into it (their pointers become invalid). */
void wf_frame_arena_reset(wf_frame_arena *arena);

/* ---- streaming reader for byte streams -------------------------------------------------------- */

typedef struct wf_frame_stream {
    uint8_t *buf;
    size_t cap;
    size_t max_payload;
    size_t len;        /* bytes buffered */
    size_t consumed;   /* bytes of the frame returned last; dropped on the next call */
    wf_status error;   /* sticky: once corrupt, the stream stays corrupt */
    bool header_ok;    /* the header of the frame at buf[0] was checked */
} wf_frame_stream;

/* buf (cap bytes, caller-owned) must hold one whole frame: cap >= WF_FRAME_HEADER_SIZE +
 * max_payload, else WF_EINVAL. */
wf_status wf_frame_stream_init(wf_frame_stream *s, void *buf, size_t cap, size_t max_payload);
/* Copies as many of the n bytes as fit into the stream (*used receives how many; the caller
 * feeds the rest after taking frames with wf_frame_stream_next). WF_OK, or the stream's sticky
 * error. The frame returned by the previous next() is invalidated. */
wf_status wf_frame_stream_feed(wf_frame_stream *s, const void *data, size_t n, size_t *used);
/* The next complete frame: WF_OK with *out (valid until the next feed or next call);
 * WF_IN_PROGRESS when more bytes are needed; or an error (the header is refused as soon as its
 * 24 bytes arrive, before the payload is buffered; a payload CRC mismatch once it is complete).
 * Errors are sticky: the caller closes the link. */
wf_status wf_frame_stream_next(wf_frame_stream *s, wf_frame_view *out, char *err, size_t errlen);

#endif
