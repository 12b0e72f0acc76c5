/* The KV codec: turns the F16 keys and values of some blocks of a wf_kv_store into one
 * self-describing frame small enough to cross a slow link, and back. After KVServe, a pipeline
 * of stages, each usable alone:
 *   1. rotation: per head, a randomized Hadamard transform (x -> H·D·x, D = random signs derived
 *      from a seed both sides know) spreads outlier channels over the whole head;
 *   2. quantisation: symmetric absmax, per channel over groups of k_group tokens for keys, per
 *      token for values, with a bit width per (layer, head) for K and V. A profile gives the
 *      widths; hybrid profiles put a share of heads, the least important by a score measured
 *      once per model (weft-kvprof), at lower widths. Width 16 keeps that head's F16 as is;
 *   3. lossless: zstd over the packed payload (skipped when it would not shrink it).
 *
 *     wf_kv_codec *c;
 *     wf_kv_codec_new(&store.geometry, 4096, &c);              // scratch for 4096 tokens
 *     wf_kv_profile p;
 *     wf_kv_profile_init(&p, "k4v4", 4, 4);
 *     wf_kv_codec_set_profile(c, &p, importance_or_NULL, seed);
 *     size_t cap = wf_kv_codec_max_frame_bytes(c, n_tokens), len;
 *     wf_kv_codec_encode(c, &store, blocks, n_blocks, n_tokens, buf, cap, &len, err, sizeof err);
 *     // ... buf[0..len) crosses the link; the peer, with its own codec of the same geometry:
 *     wf_kv_codec_decode(c2, buf, len, &store2, blocks2, n_blocks2, &n_tokens, err, sizeof err);
 *     wf_kv_codec_free(c);
 *
 * Frame (little endian; version 1):
 *     0  "WFKV"           4  u16 version      6  u16 flags (1 zstd, 2 rotate K, 4 rotate V)
 *     8  u32 profile id  12  u16 n_layers    14  u16 n_kv_heads   16  u16 head_dim
 *    18  u16 k_group     20  u32 n_tokens    24  u64 seed         32  u64 raw payload bytes
 *    40  u64 stored payload bytes            48  u64 checksum of everything else
 *    56  u8 K bits[n_layers][n_kv_heads], u8 V bits[n_layers][n_kv_heads], then the payload.
 * Payload, per layer: keys by group of k_group tokens, per head: d bf16 channel scales then the
 * group's rows of d codes packed LSB first (or the raw F16 rows at width 16); then values, per
 * token, per head: a bf16 scale then d packed codes (or the raw F16 row).
 * The decoder checks every field against the codec's geometry and limits, the payload length
 * against the one the header implies, and the checksum, before writing a byte of KV.
 *
 * Errors: a bound on the error is stated per stage below (tests check them).
 * Ownership: the codec owns its scratch (allocated in wf_kv_codec_new; encode and decode do
 * not allocate, but zstd allocates its context's tables on first use). The caller owns stores,
 * block lists and buffers.
 * Thread-safety: a codec is used by one thread at a time; separate codecs are independent.
 * The stage functions are thread-safe. */
#ifndef WF_KV_CODEC_H
#define WF_KV_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv_store.h"
#include "proto/base/status.h"

#define WF_KV_FRAME_VERSION 1
#define WF_KV_FRAME_HEADER_BYTES 56
#define WF_KV_PROFILE_NAME_MAX 32

typedef struct wf_kv_profile {
    uint32_t id;                       /* carried in frames; unique within a profile library */
    char name[WF_KV_PROFILE_NAME_MAX]; /* "k4v4", "k4v2-h25" ... */
    uint8_t k_bits, v_bits;            /* 2..8, or 16 (F16 kept) */
    uint8_t low_k_bits, low_v_bits;    /* widths of the low-precision share of heads */
    float low_share;                   /* 0..1: share of (layer, head) pairs at the low widths */
    bool rotate_k, rotate_v;           /* randomized Hadamard per head before quantising */
    uint16_t k_group;                  /* tokens per key scale group (per channel) */
    int zstd_level;                    /* 0: no lossless stage; else a zstd level (1..19) */
} wf_kv_profile;

/* Defaults: id 0, widths k_bits/v_bits for every head (low_share 0), values rotated, keys not
 * (a rotation mixes channels, which defeats per-channel key scales), k_group 64, zstd level 1.
 * name may be NULL. */
void wf_kv_profile_init(wf_kv_profile *p, const char *name, int k_bits, int v_bits);
/* WF_OK, or WF_EINVAL with a message naming the bad field. */
wf_status wf_kv_profile_check(const wf_kv_profile *p, char *err, size_t errlen);

typedef struct wf_kv_codec wf_kv_codec;

/* geometry: F16, head_dim a multiple of 8 (a power of two for rotated profiles), every count
 * below 65536. max_tokens bounds one frame (scratch is sized for it). WF_EINVAL,
 * WF_EUNSUPPORTED (F32 store), WF_ENOMEM. */
wf_status wf_kv_codec_new(const wf_kv_geometry *geometry, int max_tokens, wf_kv_codec **out);
void wf_kv_codec_free(wf_kv_codec *c); /* NULL is a no-op */

/* A fork-join runner the codec may use (the shape of engine/cpu/threadpool.h's run): calls
 * fn(ctx, ith, nth) once for each ith in [0, nth) on nth threads and returns when all have. */
typedef void (*wf_kv_parallel_fn)(void *pool, void (*fn)(void *ctx, int ith, int nth),
                                  void *ctx);
/* Splits later encodes and decodes by layers into n_workers chunks run through run(pool, ...)
 * (run NULL: serial again). Allocates the chunks' scratch now (WF_ENOMEM; WF_EINVAL for
 * n_workers outside 1..1024); encode and decode still allocate nothing. The checksum and zstd
 * stay serial. Frames are byte-identical to serial ones. */
wf_status wf_kv_codec_set_parallel(wf_kv_codec *c, wf_kv_parallel_fn run, void *pool,
                                   int n_workers);

/* Chooses the profile for the following encodes. importance: n_layers * n_kv_heads scores
 * ([layer][head], larger = more important) or NULL (all equal: later layers count as less
 * important). The floor(low_share * n + 0.5) least important heads get the low widths.
 * seed: the rotation signs' seed, written into each frame. WF_EINVAL (bad profile),
 * WF_EUNSUPPORTED (rotation with a head_dim that is not a power of two). */
wf_status wf_kv_codec_set_profile(wf_kv_codec *c, const wf_kv_profile *p,
                                  const float *importance, uint64_t seed);
/* The K and V widths the current profile gives each (layer, head), [layer][head]. */
const uint8_t *wf_kv_codec_k_bits(const wf_kv_codec *c);
const uint8_t *wf_kv_codec_v_bits(const wf_kv_codec *c);

/* F16 bytes of K and V that n_tokens tokens occupy (what encode reads). */
size_t wf_kv_codec_input_bytes(const wf_kv_codec *c, int n_tokens);
/* A capacity that any encode of n_tokens tokens fits in, whatever the profile. */
size_t wf_kv_codec_max_frame_bytes(const wf_kv_codec *c, int n_tokens);

/* Encodes positions [0, n_tokens) of the sequence whose block table is blocks[0..n_blocks)
 * (block i holds positions [i*block_size, (i+1)*block_size)) into out[0..*out_len).
 * store must have the codec's geometry. WF_EINVAL (geometry, counts), WF_ERANGE (n_tokens
 * beyond max_tokens or the blocks; cap below wf_kv_codec_max_frame_bytes), WF_EINTERNAL
 * (zstd failed). err receives a message. */
wf_status wf_kv_codec_encode(wf_kv_codec *c, const wf_kv_store *store, const int32_t *blocks,
                             int n_blocks, int n_tokens, void *out, size_t cap, size_t *out_len,
                             char *err, size_t errlen);

/* Decodes a frame into the blocks of store (positions [0, n_tokens)); *n_tokens receives the
 * count. Rejects, before writing anything: WF_EFORMAT (truncated, bad magic, unknown version
 * or flags, bad widths, geometry other than the codec's, payload length or checksum
 * mismatch, a zstd stream that does not decode to exactly the stated length), WF_ERANGE (more
 * tokens than max_tokens or than the blocks hold, a payload beyond the codec's scratch).
 * err says which. */
wf_status wf_kv_codec_decode(wf_kv_codec *c, const void *frame, size_t len, wf_kv_store *store,
                             const int32_t *blocks, int n_blocks, int *n_tokens, char *err,
                             size_t errlen);

/* Layer slices, so that a transfer can be a pipeline (encode slice i+1 while slice i is on
 * the wire, decode slice i while i+1 arrives): a frame of layers [l0, l1) only, laid out as
 * above with n_layers = l1 - l0 and the bit tables of those layers (layer l0 first). The frame
 * does not say l0: the receiver knows it from its transfer protocol and passes it to decode
 * (rotation signs depend on the global layer, so a wrong l0 decodes to wrong values).
 * wf_kv_codec_encode is the slice [0, n_layers). Same errors as encode/decode, plus WF_EINVAL
 * for a bad range, and WF_EFORMAT for a frame that reaches beyond the last layer. */
size_t wf_kv_codec_max_layers_bytes(const wf_kv_codec *c, int n_tokens, int n_layers);
wf_status wf_kv_codec_encode_layers(wf_kv_codec *c, const wf_kv_store *store,
                                    const int32_t *blocks, int n_blocks, int n_tokens, int l0,
                                    int l1, void *out, size_t cap, size_t *out_len, char *err,
                                    size_t errlen);
wf_status wf_kv_codec_decode_layers(wf_kv_codec *c, const void *frame, size_t len, int l0,
                                    wf_kv_store *store, const int32_t *blocks, int n_blocks,
                                    int *n_tokens, char *err, size_t errlen);

/* The header of a frame, parsed and checked for internal consistency (not the checksum). */
typedef struct wf_kv_frame_info {
    uint16_t version, flags;
    uint32_t profile_id;
    int n_layers, n_kv_heads, head_dim, k_group, n_tokens;
    uint64_t seed, raw_bytes, stored_bytes;
    size_t frame_bytes; /* header + bit tables + stored payload */
} wf_kv_frame_info;
wf_status wf_kv_frame_parse(const void *frame, size_t len, wf_kv_frame_info *info, char *err,
                            size_t errlen);

/* Rewrites the checksum of a frame of len bytes (len >= WF_KV_FRAME_HEADER_BYTES) to match its
 * contents. For fuzzers and tests that forge frames to reach the checks behind the checksum. */
void wf_kv_frame_seal(void *frame, size_t len);

/* ---- the stages, one at a time (the pipeline above is built on them) ---------------------- */

/* The rotation signs (+1/-1) of one head: a pure function of (seed, layer, head, is_value). */
void wf_kv_hadamard_signs(uint64_t seed, int layer, int head, bool is_value, int n, float *signs);
/* x <- H·D·x in place (n a power of two; H unnormalised, so |H·D·x|2 = sqrt(n)·|x|2), and its
 * inverse x <- D·H·x / n. Exact inverses up to float rounding. */
void wf_kv_hadamard_forward(float *x, int n, const float *signs);
void wf_kv_hadamard_inverse(float *x, int n, const float *signs);

/* Symmetric absmax quantisation to `bits` (2..8): qmax = 2^(bits-1) - 1 levels each side;
 * code = round(x / scale) + qmax. Scales are bf16 values rounded up, so |x - x^| <= scale / 2
 * for every finite x. Per row (values): one scale for n elements; returns it. */
float wf_kv_quantize_row(const float *x, int n, int bits, uint8_t *codes);
/* Per channel (keys): rows x n, one scale per column written to scales[n]. */
void wf_kv_quantize_channels(const float *x, int rows, int n, int bits, float *scales,
                             uint8_t *codes);
/* x[i] = (codes[i] - qmax) * scales[scale_stride * i] (stride 0: one scale for the row). */
void wf_kv_dequantize(const uint8_t *codes, int n, int bits, const float *scales,
                      int scale_stride, float *x);

/* Bit packing of codes (each < 2^bits, bits 1..8), LSB first; n * bits a multiple of 8.
 * Returns the bytes written / read: n * bits / 8. */
size_t wf_kv_pack_bits(const uint8_t *codes, int n, int bits, uint8_t *out);
size_t wf_kv_unpack_bits(const uint8_t *in, int n, int bits, uint8_t *codes);

/* Name of the SIMD level the codec runs ("scalar", "avx2", "avx512"). */
const char *wf_kv_codec_isa(void);

#endif
