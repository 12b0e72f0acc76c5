/* The KV codec pipeline (rotation -> absmax quantisation -> zstd) and its frame: the encoder
 * walks a store's blocks layer by layer; the decoder validates the whole frame first and only
 * then writes KV. The row kernels live in codec_kernels.c and its SIMD variants. */
#include "kv/codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "kv/codec_impl.h"

#define FLAG_ZSTD 1u
#define FLAG_ROT_K 2u
#define FLAG_ROT_V 4u
#define FLAGS_KNOWN (FLAG_ZSTD | FLAG_ROT_K | FLAG_ROT_V)
/* Bounds that keep every size computed from a header far from overflow. */
#define FRAME_MAX_TOKENS (1u << 24)
#define FRAME_MAX_ROW (1u << 24) /* n_layers * n_kv_heads * head_dim */

typedef struct rank_entry {
    float score;
    int index;
} rank_entry;

/* Per-worker scratch: one set per layer chunk a parallel encode or decode may run at once. */
typedef struct scratch {
    float *rows;      /* max_tokens * d: a key group of one head */
    float *vec, *vec2; /* d each */
    uint8_t *codes;   /* d */
} scratch;

struct wf_kv_codec {
    wf_kv_geometry g;
    int max_tokens, n_heads_total; /* n_layers * n_kv_heads */
    const wf__kvc_kernels *kern;
    wf_kv_profile prof;
    bool have_profile;
    uint64_t seed;
    uint8_t *k_bits, *v_bits; /* [layer][head] */
    rank_entry *rank;         /* scratch for set_profile */
    bool signs_valid;
    uint64_t signs_seed;
    float *signs, *signs_inv; /* [layer][head][K,V][d]: +-1, and +-1/d for the inverse */
    scratch *ws;              /* n_ws sets; ws[0] always exists */
    int n_ws;
    wf_kv_parallel_fn par_run;
    void *par_pool;
    size_t *layer_off;        /* n_layers + 1: where each layer's payload starts */
    int n_par;                /* layer chunks per encode/decode (1: serial) */
    uint8_t *raw;             /* the payload before the lossless stage (worst case size) */
    size_t raw_cap;
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
};

/* ---- little-endian fields and the checksum ------------------------------------------------ */

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static inline uint64_t rotl64(uint64_t x, int r) { return x << r | x >> (64 - r); }
static inline uint64_t mix_lane(uint64_t h, uint64_t w) {
    return rotl64(h ^ (w * 0x9E3779B97F4A7C15ull), 31) * 0xC2B2AE3D27D4EB4Full;
}

/* A 64-bit checksum over several spans, four independent lanes so it runs at memory speed.
 * It catches corruption (not an attacker: the link is trusted, the bytes may not be). */
typedef struct csum {
    uint64_t lane[4], total;
    uint8_t tail[32];
    int n_tail;
} csum;

static void csum_init(csum *c) {
    for (int i = 0; i < 4; i++) c->lane[i] = 0x243F6A8885A308D3ull * (uint64_t)(i + 1);
    c->total = 0;
    c->n_tail = 0;
}

static void csum_block(csum *c, const uint8_t *p) {
    for (int i = 0; i < 4; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        c->lane[i] = mix_lane(c->lane[i], w);
    }
}

static void csum_add(csum *c, const void *data, size_t n) {
    const uint8_t *p = data;
    c->total += n;
    if (c->n_tail) {
        size_t take = 32 - (size_t)c->n_tail < n ? 32 - (size_t)c->n_tail : n;
        memcpy(c->tail + c->n_tail, p, take);
        c->n_tail += (int)take;
        p += take;
        n -= take;
        if (c->n_tail < 32) return;
        csum_block(c, c->tail);
        c->n_tail = 0;
    }
    for (; n >= 32; p += 32, n -= 32) csum_block(c, p);
    memcpy(c->tail, p, n);
    c->n_tail = (int)n;
}

static uint64_t csum_final(csum *c) {
    memset(c->tail + c->n_tail, 0, 32 - (size_t)c->n_tail);
    csum_block(c, c->tail);
    uint64_t h = c->total;
    for (int i = 0; i < 4; i++) h = mix_lane(h, c->lane[i]);
    return h ^ (h >> 29);
}

static uint64_t frame_checksum(const uint8_t *p, size_t len) {
    static const uint8_t zero[8]; /* the checksum field itself counts as zero */
    csum cs;
    csum_init(&cs);
    csum_add(&cs, p, 48);
    csum_add(&cs, zero, 8);
    csum_add(&cs, p + WF_KV_FRAME_HEADER_BYTES, len - WF_KV_FRAME_HEADER_BYTES);
    return csum_final(&cs);
}

/* ---- stages --------------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void wf_kv_hadamard_signs(uint64_t seed, int layer, int head, bool is_value, int n, float *signs) {
    uint64_t s = seed ^ ((uint64_t)(uint32_t)layer << 32 | (uint64_t)(uint32_t)head << 1 |
                         (is_value ? 1u : 0u)) * 0xD1B54A32D192ED03ull;
    uint64_t bits = 0;
    for (int i = 0; i < n; i++) {
        if ((i & 63) == 0) bits = splitmix64(&s);
        signs[i] = (bits >> (i & 63)) & 1u ? -1.0f : 1.0f;
    }
}

void wf_kv_hadamard_forward(float *x, int n, const float *signs) {
    const wf__kvc_kernels *k = wf__kvc_kernels_best();
    k->mul(x, signs, n);
    k->fwht(x, n);
}

void wf_kv_hadamard_inverse(float *x, int n, const float *signs) {
    wf__kvc_kernels_best()->fwht(x, n);
    float inv_n = 1.0f / (float)n;
    for (int i = 0; i < n; i++) x[i] *= signs[i] * inv_n;
}

/* Scales travel as bf16, rounded up so that absmax / scale never exceeds qmax. */
static uint16_t bf16_up(float s) {
    uint32_t b;
    memcpy(&b, &s, sizeof b);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    if ((b & 0x7f800000u) != 0x7f800000u && (b & 0xffffu)) b += 0x10000u;
    return (uint16_t)(b >> 16);
}

static inline int qmax_of(int bits) { return (1 << (bits - 1)) - 1; }

static float scale_of(float absmax, int qmax) { return wf_bf16_to_fp32(bf16_up(absmax / (float)qmax)); }

float wf_kv_quantize_row(const float *x, int n, int bits, uint8_t *codes) {
    const wf__kvc_kernels *k = wf__kvc_kernels_best();
    int qmax = qmax_of(bits);
    float s = scale_of(k->absmax(x, n), qmax), inv = s > 0 ? 1.0f / s : 0.0f;
    for (int i = 0; i < n; i++) k->quantize(x + i, &inv, qmax, codes + i, 1);
    return s;
}

void wf_kv_quantize_channels(const float *x, int rows, int n, int bits, float *scales,
                             uint8_t *codes) {
    const wf__kvc_kernels *k = wf__kvc_kernels_best();
    int qmax = qmax_of(bits);
    for (int i = 0; i < n; i++) scales[i] = 0.0f;
    for (int r = 0; r < rows; r++) k->absmax_acc(x + (size_t)r * n, scales, n);
    for (int i = 0; i < n; i++) scales[i] = scale_of(scales[i], qmax);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n; i++) {
            float inv = scales[i] > 0 ? 1.0f / scales[i] : 0.0f;
            k->quantize(x + (size_t)r * n + i, &inv, qmax, codes + (size_t)r * n + i, 1);
        }
}

void wf_kv_dequantize(const uint8_t *codes, int n, int bits, const float *scales,
                      int scale_stride, float *x) {
    int qmax = qmax_of(bits);
    for (int i = 0; i < n; i++) x[i] = (float)((int)codes[i] - qmax) * scales[scale_stride * i];
}

size_t wf_kv_pack_bits(const uint8_t *codes, int n, int bits, uint8_t *out) {
    switch (bits) {
    case 8: memcpy(out, codes, (size_t)n); return (size_t)n;
    case 4:
        for (int i = 0; i < n; i += 2) out[i >> 1] = (uint8_t)(codes[i] | codes[i + 1] << 4);
        return (size_t)n / 2;
    case 2:
        for (int i = 0; i < n; i += 4)
            out[i >> 2] = (uint8_t)(codes[i] | codes[i + 1] << 2 | codes[i + 2] << 4 |
                                    codes[i + 3] << 6);
        return (size_t)n / 4;
    default: {
        uint64_t acc = 0;
        int have = 0;
        size_t o = 0;
        for (int i = 0; i < n; i++) {
            acc |= (uint64_t)codes[i] << have;
            for (have += bits; have >= 8; have -= 8, acc >>= 8) out[o++] = (uint8_t)acc;
        }
        return o;
    }
    }
}

size_t wf_kv_unpack_bits(const uint8_t *in, int n, int bits, uint8_t *codes) {
    switch (bits) {
    case 8: memcpy(codes, in, (size_t)n); return (size_t)n;
    case 4:
        for (int i = 0; i < n; i += 2) {
            codes[i] = in[i >> 1] & 15u;
            codes[i + 1] = in[i >> 1] >> 4;
        }
        return (size_t)n / 2;
    case 2:
        for (int i = 0; i < n; i += 4)
            for (int j = 0; j < 4; j++) codes[i + j] = (in[i >> 2] >> (2 * j)) & 3u;
        return (size_t)n / 4;
    default: {
        uint64_t acc = 0;
        int have = 0;
        size_t o = 0;
        uint8_t mask = (uint8_t)((1u << bits) - 1);
        for (int i = 0; i < n; i++) {
            while (have < bits) {
                acc |= (uint64_t)in[o++] << have;
                have += 8;
            }
            codes[i] = (uint8_t)acc & mask;
            acc >>= bits;
            have -= bits;
        }
        return o;
    }
    }
}

const char *wf_kv_codec_isa(void) { return wf__kvc_kernels_best()->name; }

/* ---- profiles ------------------------------------------------------------------------------ */

void wf_kv_profile_init(wf_kv_profile *p, const char *name, int k_bits, int v_bits) {
    memset(p, 0, sizeof *p);
    if (name) snprintf(p->name, sizeof p->name, "%s", name);
    p->k_bits = p->low_k_bits = (uint8_t)k_bits;
    p->v_bits = p->low_v_bits = (uint8_t)v_bits;
    p->rotate_v = true;
    p->k_group = 64;
    p->zstd_level = 1;
}

static bool bits_ok(int b) { return (b >= 2 && b <= 8) || b == 16; }

wf_status wf_kv_profile_check(const wf_kv_profile *p, char *err, size_t errlen) {
    if (!bits_ok(p->k_bits) || !bits_ok(p->v_bits) || !bits_ok(p->low_k_bits) ||
        !bits_ok(p->low_v_bits))
        return wf_status_errorf(err, errlen, WF_EINVAL,
                                "profile '%s': bit widths must be 2..8 or 16 (k %d v %d low %d/%d)",
                                p->name, p->k_bits, p->v_bits, p->low_k_bits, p->low_v_bits);
    if (!(p->low_share >= 0.0f && p->low_share <= 1.0f))
        return wf_status_errorf(err, errlen, WF_EINVAL, "profile '%s': low_share %g not in [0, 1]",
                                p->name, (double)p->low_share);
    if (p->k_group == 0)
        return wf_status_errorf(err, errlen, WF_EINVAL, "profile '%s': k_group must be > 0",
                                p->name);
    if (p->zstd_level < -7 || p->zstd_level > 19)
        return wf_status_errorf(err, errlen, WF_EINVAL, "profile '%s': zstd level %d not in -7..19",
                                p->name, p->zstd_level);
    return WF_OK;
}

/* ---- the codec object ---------------------------------------------------------------------- */

size_t wf_kv_codec_input_bytes(const wf_kv_codec *c, int n_tokens) {
    return (size_t)n_tokens * (size_t)c->g.n_layers * 2u * (size_t)c->g.n_kv_heads *
           (size_t)c->g.head_dim * 2u;
}

/* The largest payload any profile can produce: per token and head, keys at 8 bits with a key
 * group of one token carry d bf16 scales + d codes (3d bytes, more than the 2d of F16), values
 * at most 2d. 5d per token and head, i.e. 1.25x the F16 input. */
static size_t payload_worst(const wf_kv_codec *c, int n_tokens, int n_layers) {
    return (size_t)n_tokens * (size_t)n_layers * (size_t)c->g.n_kv_heads * 5u * (size_t)c->g.head_dim;
}

size_t wf_kv_codec_max_layers_bytes(const wf_kv_codec *c, int n_tokens, int n_layers) {
    return WF_KV_FRAME_HEADER_BYTES + 2u * (size_t)n_layers * (size_t)c->g.n_kv_heads +
           ZSTD_compressBound(payload_worst(c, n_tokens, n_layers));
}

size_t wf_kv_codec_max_frame_bytes(const wf_kv_codec *c, int n_tokens) {
    return wf_kv_codec_max_layers_bytes(c, n_tokens, c->g.n_layers);
}

static bool scratch_alloc(scratch *w, size_t max_tokens, size_t d) {
    w->rows = malloc(max_tokens * d * sizeof(float));
    w->vec = malloc(d * sizeof(float));
    w->vec2 = malloc(d * sizeof(float));
    w->codes = malloc(d);
    return w->rows && w->vec && w->vec2 && w->codes;
}

static void scratch_free(scratch *w) {
    free(w->rows);
    free(w->vec);
    free(w->vec2);
    free(w->codes);
    memset(w, 0, sizeof *w);
}

wf_status wf_kv_codec_set_parallel(wf_kv_codec *c, wf_kv_parallel_fn run, void *pool,
                                   int n_workers) {
    if (n_workers < 1 || n_workers > 1024) return WF_EINVAL;
    int want = run ? n_workers : 1;
    if (want > c->n_ws) {
        scratch *ws = realloc(c->ws, (size_t)want * sizeof *ws);
        if (!ws) return WF_ENOMEM;
        c->ws = ws;
        for (int i = c->n_ws; i < want; i++) {
            memset(&ws[i], 0, sizeof ws[i]);
            if (!scratch_alloc(&ws[i], (size_t)c->max_tokens, (size_t)c->g.head_dim)) {
                scratch_free(&ws[i]);
                return WF_ENOMEM; /* the sets made so far stay: they are freed with the codec */
            }
            c->n_ws = i + 1;
        }
    }
    c->par_run = run;
    c->par_pool = pool;
    c->n_par = want;
    return WF_OK;
}

wf_status wf_kv_codec_new(const wf_kv_geometry *g, int max_tokens, wf_kv_codec **out) {
    *out = NULL;
    if (!g || g->n_layers <= 0 || g->n_kv_heads <= 0 || g->head_dim <= 0 || g->block_size <= 0 ||
        g->n_layers > 65535 || g->n_kv_heads > 65535 || g->head_dim > 65535 ||
        g->head_dim % 8 != 0 || max_tokens <= 0 || (unsigned)max_tokens > FRAME_MAX_TOKENS ||
        (uint64_t)g->n_layers * (uint64_t)g->n_kv_heads * (uint64_t)g->head_dim > FRAME_MAX_ROW)
        return WF_EINVAL;
    if (g->dtype != WF_KV_DTYPE_F16) return WF_EUNSUPPORTED;
    wf_kv_codec *c = calloc(1, sizeof *c);
    if (!c) return WF_ENOMEM;
    c->g = *g;
    c->max_tokens = max_tokens;
    c->n_heads_total = g->n_layers * g->n_kv_heads;
    c->kern = wf__kvc_kernels_best();
    c->n_par = 1;
    size_t nh = (size_t)c->n_heads_total, d = (size_t)g->head_dim;
    c->k_bits = malloc(nh);
    c->v_bits = malloc(nh);
    c->rank = malloc(nh * sizeof *c->rank);
    c->signs = malloc(nh * 2 * d * sizeof(float));
    c->signs_inv = malloc(nh * 2 * d * sizeof(float));
    c->ws = calloc(1, sizeof *c->ws);
    c->layer_off = malloc(((size_t)g->n_layers + 1) * sizeof *c->layer_off);
    c->raw_cap = payload_worst(c, max_tokens, g->n_layers);
    c->raw = malloc(c->raw_cap);
    c->cctx = ZSTD_createCCtx();
    c->dctx = ZSTD_createDCtx();
    if (c->ws) c->n_ws = scratch_alloc(&c->ws[0], (size_t)max_tokens, d) ? 1 : 0;
    if (!c->k_bits || !c->v_bits || !c->rank || !c->signs || !c->signs_inv || !c->n_ws ||
        !c->layer_off || !c->raw || !c->cctx || !c->dctx) {
        wf_kv_codec_free(c);
        return WF_ENOMEM;
    }
    *out = c;
    return WF_OK;
}

void wf_kv_codec_free(wf_kv_codec *c) {
    if (!c) return;
    ZSTD_freeCCtx(c->cctx);
    ZSTD_freeDCtx(c->dctx);
    free(c->k_bits);
    free(c->v_bits);
    free(c->rank);
    free(c->signs);
    free(c->signs_inv);
    for (int i = 0; i < c->n_ws; i++) scratch_free(&c->ws[i]);
    free(c->ws);
    free(c->layer_off);
    free(c->raw);
    free(c);
}

static int rank_cmp(const void *a, const void *b) {
    const rank_entry *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return x->index > y->index ? -1 : x->index < y->index; /* ties: later layers first */
}

static bool is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

wf_status wf_kv_codec_set_profile(wf_kv_codec *c, const wf_kv_profile *p,
                                  const float *importance, uint64_t seed) {
    if (wf_kv_profile_check(p, NULL, 0) != WF_OK) return WF_EINVAL;
    if ((p->rotate_k || p->rotate_v) && !is_pow2(c->g.head_dim)) return WF_EUNSUPPORTED;
    int n = c->n_heads_total;
    for (int i = 0; i < n; i++) {
        float s = importance ? importance[i] : 0.0f;
        c->rank[i] = (rank_entry){.score = isnan(s) ? 0.0f : s, .index = i};
        c->k_bits[i] = p->k_bits;
        c->v_bits[i] = p->v_bits;
    }
    qsort(c->rank, (size_t)n, sizeof *c->rank, rank_cmp);
    int n_low = (int)floorf(p->low_share * (float)n + 0.5f);
    for (int i = 0; i < n_low && i < n; i++) {
        c->k_bits[c->rank[i].index] = p->low_k_bits;
        c->v_bits[c->rank[i].index] = p->low_v_bits;
    }
    c->prof = *p;
    c->seed = seed;
    c->have_profile = true;
    return WF_OK;
}

const uint8_t *wf_kv_codec_k_bits(const wf_kv_codec *c) { return c->k_bits; }
const uint8_t *wf_kv_codec_v_bits(const wf_kv_codec *c) { return c->v_bits; }

static void ensure_signs(wf_kv_codec *c, uint64_t seed) {
    if (c->signs_valid && c->signs_seed == seed) return;
    int d = c->g.head_dim;
    float inv_d = 1.0f / (float)d;
    for (int l = 0; l < c->g.n_layers; l++)
        for (int h = 0; h < c->g.n_kv_heads; h++)
            for (int kv = 0; kv < 2; kv++) {
                size_t off = (((size_t)l * (size_t)c->g.n_kv_heads + (size_t)h) * 2 + (size_t)kv) * (size_t)d;
                wf_kv_hadamard_signs(seed, l, h, kv == 1, d, c->signs + off);
                for (int i = 0; i < d; i++) c->signs_inv[off + (size_t)i] = c->signs[off + (size_t)i] * inv_d;
            }
    c->signs_seed = seed;
    c->signs_valid = true;
}

static const float *signs_of(const wf_kv_codec *c, const float *base, int l, int h, int kv) {
    return base + (((size_t)l * (size_t)c->g.n_kv_heads + (size_t)h) * 2 + (size_t)kv) *
                      (size_t)c->g.head_dim;
}

/* Payload bytes of one layer (H heads from k_bits/v_bits), and of a whole frame (the
 * decoder's length check). */
static uint64_t layer_bytes(int H, int d, int k_group, uint64_t n_tokens, const uint8_t *k_bits,
                            const uint8_t *v_bits) {
    uint64_t total = 0, groups = (n_tokens + (uint64_t)k_group - 1) / (uint64_t)k_group;
    for (int i = 0; i < H; i++) {
        total += k_bits[i] == 16 ? n_tokens * (uint64_t)d * 2u
                                 : groups * (uint64_t)d * 2u + n_tokens * (uint64_t)d * k_bits[i] / 8u;
        total += v_bits[i] == 16 ? n_tokens * (uint64_t)d * 2u
                                 : n_tokens * (2u + (uint64_t)d * v_bits[i] / 8u);
    }
    return total;
}

static uint64_t payload_bytes(int L, int H, int d, int k_group, uint64_t n_tokens,
                              const uint8_t *k_bits, const uint8_t *v_bits) {
    uint64_t total = 0;
    for (int l = 0; l < L; l++)
        total += layer_bytes(H, d, k_group, n_tokens, k_bits + l * H, v_bits + l * H);
    return total;
}

/* Offsets of the payloads of layers [l0, l1) from the first one's (layer_off[l0] = 0), so that
 * layer chunks can be coded independently. k_bits/v_bits start at layer l0's row. */
static void layer_offsets(wf_kv_codec *c, int k_group, int n_tokens, const uint8_t *k_bits,
                          const uint8_t *v_bits, int l0, int l1) {
    int H = c->g.n_kv_heads;
    c->layer_off[l0] = 0;
    for (int l = l0; l < l1; l++)
        c->layer_off[l + 1] = c->layer_off[l] + (size_t)layer_bytes(H, c->g.head_dim, k_group,
                                                                    (uint64_t)n_tokens,
                                                                    k_bits + (l - l0) * H,
                                                                    v_bits + (l - l0) * H);
}

/* A job over the layers, cut into c->n_par chunks; chunk j uses scratch j. */
typedef struct layer_job {
    wf_kv_codec *c;
    const wf_kv_store *src;  /* encode */
    wf_kv_store *dst;        /* decode */
    const int32_t *blocks;
    int n_tokens;
    uint8_t *out;            /* encode: payload base */
    const uint8_t *in;       /* decode: payload base */
    const wf_kv_frame_info *fi;
    const uint8_t *kb, *vb;  /* decode: the frame's bit tables (their first row is layer l0) */
    int l0, l1;              /* the layers this job codes */
    void (*chunk)(struct layer_job *job, int j);
} layer_job;

static void layer_job_thread(void *ctx, int ith, int nth) {
    layer_job *job = ctx;
    for (int j = ith; j < job->c->n_par; j += nth) job->chunk(job, j);
}

static void run_layers(layer_job *job) {
    wf_kv_codec *c = job->c;
    if (c->par_run && c->n_par > 1) c->par_run(c->par_pool, layer_job_thread, job);
    else layer_job_thread(job, 0, 1);
}

static void chunk_range(const layer_job *job, int j, int *l0, int *l1) {
    int L = job->l1 - job->l0, n = job->c->n_par;
    *l0 = job->l0 + (int)((long)L * j / n);
    *l1 = job->l0 + (int)((long)L * (j + 1) / n);
}

static inline uint16_t *row_ptr(const wf_kv_store *s, bool value, int layer, const int32_t *blocks,
                                int pos, int head) {
    int bs = s->geometry.block_size;
    uint16_t *base = value ? wf_kv_store_v(s, layer, blocks[pos / bs])
                           : wf_kv_store_k(s, layer, blocks[pos / bs]);
    return base + (size_t)(pos % bs) * s->row_elems + (size_t)head * (size_t)s->geometry.head_dim;
}

static wf_status check_store(const wf_kv_codec *c, const wf_kv_store *s, const int32_t *blocks,
                             int n_blocks, int n_tokens, char *err, size_t errlen) {
    const wf_kv_geometry *g = &s->geometry;
    if (g->n_layers != c->g.n_layers || g->n_kv_heads != c->g.n_kv_heads ||
        g->head_dim != c->g.head_dim || g->dtype != WF_KV_DTYPE_F16)
        return wf_status_errorf(err, errlen, WF_EINVAL,
                                "store geometry %dx%dx%d differs from the codec's %dx%dx%d",
                                g->n_layers, g->n_kv_heads, g->head_dim, c->g.n_layers,
                                c->g.n_kv_heads, c->g.head_dim);
    if (n_tokens <= 0 || n_tokens > c->max_tokens)
        return wf_status_errorf(err, errlen, WF_ERANGE, "%d tokens: the codec holds 1..%d",
                                n_tokens, c->max_tokens);
    int need = (n_tokens + g->block_size - 1) / g->block_size;
    if (n_blocks < need)
        return wf_status_errorf(err, errlen, WF_ERANGE, "%d tokens need %d blocks, %d given",
                                n_tokens, need, n_blocks);
    for (int i = 0; i < need; i++)
        if (blocks[i] < 0 || blocks[i] >= s->n_blocks)
            return wf_status_errorf(err, errlen, WF_EINVAL, "block %d out of range (store has %d)",
                                    blocks[i], s->n_blocks);
    return WF_OK;
}

/* One row's codes into the payload: 4 and 8 bits go straight from floats to packed bytes. */
static uint8_t *put_codes(const wf__kvc_kernels *k, const float *x, const float *inv, int bits,
                          uint8_t *tmp, uint8_t *o, int d) {
    if (bits == 4) {
        k->quantize4(x, inv, o, d);
        return o + d / 2;
    }
    if (bits == 8) {
        k->quantize(x, inv, 127, o, d);
        return o + d;
    }
    k->quantize(x, inv, qmax_of(bits), tmp, d);
    return o + wf_kv_pack_bits(tmp, d, bits, o);
}

static const uint8_t *get_codes(const wf__kvc_kernels *k, const uint8_t *in, const float *scale,
                                int bits, uint8_t *tmp, float *x, int d) {
    if (bits == 4) {
        k->dequantize4(in, scale, x, d);
        return in + d / 2;
    }
    if (bits == 8) {
        k->dequantize(in, scale, 127, x, d);
        return in + d;
    }
    in += wf_kv_unpack_bits(in, d, bits, tmp);
    k->dequantize(tmp, scale, qmax_of(bits), x, d);
    return in;
}

/* ---- encode -------------------------------------------------------------------------------- */

static uint8_t *encode_keys(const wf_kv_codec *c, scratch *w, const wf_kv_store *s,
                            const int32_t *blocks, int l, int n_tokens, uint8_t *o) {
    const wf__kvc_kernels *k = c->kern;
    int H = c->g.n_kv_heads, d = c->g.head_dim, G = c->prof.k_group;
    bool rot = c->prof.rotate_k;
    for (int g0 = 0; g0 < n_tokens; g0 += G) {
        int T = n_tokens - g0 < G ? n_tokens - g0 : G;
        for (int h = 0; h < H; h++) {
            int bits = c->k_bits[l * H + h];
            if (bits == 16) {
                for (int t = 0; t < T; t++, o += (size_t)d * 2)
                    memcpy(o, row_ptr(s, false, l, blocks, g0 + t, h), (size_t)d * 2);
                continue;
            }
            int qmax = qmax_of(bits);
            const float *sg = signs_of(c, c->signs, l, h, 0);
            float *m = w->vec, *inv = w->vec2;
            memset(m, 0, (size_t)d * sizeof *m);
            for (int t = 0; t < T; t++) {
                float *r = w->rows + (size_t)t * (size_t)d;
                k->f16_to_f32(row_ptr(s, false, l, blocks, g0 + t, h), r, d);
                if (rot) {
                    k->mul(r, sg, d);
                    k->fwht(r, d);
                }
                k->absmax_acc(r, m, d);
            }
            for (int i = 0; i < d; i++, o += 2) {
                uint16_t sb = bf16_up(m[i] / (float)qmax);
                float sc = wf_bf16_to_fp32(sb);
                put16(o, sb);
                inv[i] = sc > 0 ? 1.0f / sc : 0.0f;
            }
            for (int t = 0; t < T; t++)
                o = put_codes(k, w->rows + (size_t)t * (size_t)d, inv, bits, w->codes, o, d);
        }
    }
    return o;
}

static uint8_t *encode_values(const wf_kv_codec *c, scratch *w, const wf_kv_store *s,
                              const int32_t *blocks, int l, int n_tokens, uint8_t *o) {
    const wf__kvc_kernels *k = c->kern;
    int H = c->g.n_kv_heads, d = c->g.head_dim;
    bool rot = c->prof.rotate_v;
    float *r = w->vec, *inv = w->vec2;
    for (int t = 0; t < n_tokens; t++)
        for (int h = 0; h < H; h++) {
            int bits = c->v_bits[l * H + h];
            const uint16_t *src = row_ptr(s, true, l, blocks, t, h);
            if (bits == 16) {
                memcpy(o, src, (size_t)d * 2);
                o += (size_t)d * 2;
                continue;
            }
            int qmax = qmax_of(bits);
            k->f16_to_f32(src, r, d);
            if (rot) {
                k->mul(r, signs_of(c, c->signs, l, h, 1), d);
                k->fwht(r, d);
            }
            uint16_t sb = bf16_up(k->absmax(r, d) / (float)qmax);
            float sc = wf_bf16_to_fp32(sb), iv = sc > 0 ? 1.0f / sc : 0.0f;
            put16(o, sb);
            o += 2;
            k->fill(inv, iv, d);
            o = put_codes(k, r, inv, bits, w->codes, o, d);
        }
    return o;
}

static void encode_chunk(layer_job *job, int j) {
    wf_kv_codec *c = job->c;
    int l0, l1;
    chunk_range(job, j, &l0, &l1);
    uint8_t *o = job->out + c->layer_off[l0];
    for (int l = l0; l < l1; l++) {
        o = encode_keys(c, &c->ws[j], job->src, job->blocks, l, job->n_tokens, o);
        o = encode_values(c, &c->ws[j], job->src, job->blocks, l, job->n_tokens, o);
    }
}

wf_status wf_kv_codec_encode_layers(wf_kv_codec *c, const wf_kv_store *store,
                                    const int32_t *blocks, int n_blocks, int n_tokens, int l0,
                                    int l1, void *out, size_t cap, size_t *out_len, char *err,
                                    size_t errlen) {
    *out_len = 0;
    if (!c->have_profile)
        return wf_status_errorf(err, errlen, WF_EINVAL, "kv codec: no profile set");
    if (l0 < 0 || l1 <= l0 || l1 > c->g.n_layers)
        return wf_status_errorf(err, errlen, WF_EINVAL, "layers [%d, %d) of a %d-layer codec", l0,
                                l1, c->g.n_layers);
    wf_status st = check_store(c, store, blocks, n_blocks, n_tokens, err, errlen);
    if (st != WF_OK) return st;
    int H = c->g.n_kv_heads, nl = l1 - l0;
    size_t need = wf_kv_codec_max_layers_bytes(c, n_tokens, nl);
    if (cap < need)
        return wf_status_errorf(err, errlen, WF_ERANGE, "output buffer of %zu bytes below %zu",
                                cap, need);
    if (c->prof.rotate_k || c->prof.rotate_v) ensure_signs(c, c->seed);
    size_t nh = (size_t)nl * (size_t)H;
    uint8_t *hdr = out, *payload = hdr + WF_KV_FRAME_HEADER_BYTES + 2 * nh;
    bool zstd = c->prof.zstd_level != 0;
    const uint8_t *kb = c->k_bits + (size_t)l0 * (size_t)H, *vb = c->v_bits + (size_t)l0 * (size_t)H;
    layer_offsets(c, c->prof.k_group, n_tokens, kb, vb, l0, l1);
    layer_job job = {.c = c, .src = store, .blocks = blocks, .n_tokens = n_tokens,
                     .out = zstd ? c->raw : payload, .l0 = l0, .l1 = l1, .chunk = encode_chunk};
    run_layers(&job);
    size_t raw = c->layer_off[l1], stored = raw;
    if (zstd) {
        size_t n = ZSTD_compressCCtx(c->cctx, payload, cap - (size_t)(payload - hdr), c->raw, raw,
                                     c->prof.zstd_level);
        if (ZSTD_isError(n))
            return wf_status_errorf(err, errlen, WF_EINTERNAL, "zstd: %s", ZSTD_getErrorName(n));
        if (n < raw) {
            stored = n;
        } else { /* incompressible: ship the packed payload as is */
            memcpy(payload, c->raw, raw);
            zstd = false;
        }
    }
    uint16_t flags = (uint16_t)((zstd ? FLAG_ZSTD : 0u) | (c->prof.rotate_k ? FLAG_ROT_K : 0u) |
                                (c->prof.rotate_v ? FLAG_ROT_V : 0u));
    memcpy(hdr, "WFKV", 4);
    put16(hdr + 4, WF_KV_FRAME_VERSION);
    put16(hdr + 6, flags);
    put32(hdr + 8, c->prof.id);
    put16(hdr + 12, (uint16_t)nl);
    put16(hdr + 14, (uint16_t)H);
    put16(hdr + 16, (uint16_t)c->g.head_dim);
    put16(hdr + 18, c->prof.k_group);
    put32(hdr + 20, (uint32_t)n_tokens);
    put64(hdr + 24, c->seed);
    put64(hdr + 32, raw);
    put64(hdr + 40, stored);
    put64(hdr + 48, 0);
    memcpy(hdr + WF_KV_FRAME_HEADER_BYTES, kb, nh);
    memcpy(hdr + WF_KV_FRAME_HEADER_BYTES + nh, vb, nh);
    size_t total = (size_t)(payload - hdr) + stored;
    put64(hdr + 48, frame_checksum(hdr, total));
    *out_len = total;
    return WF_OK;
}

wf_status wf_kv_codec_encode(wf_kv_codec *c, const wf_kv_store *store, const int32_t *blocks,
                             int n_blocks, int n_tokens, void *out, size_t cap, size_t *out_len,
                             char *err, size_t errlen) {
    return wf_kv_codec_encode_layers(c, store, blocks, n_blocks, n_tokens, 0, c->g.n_layers, out,
                                     cap, out_len, err, errlen);
}

/* ---- decode -------------------------------------------------------------------------------- */

wf_status wf_kv_frame_parse(const void *frame, size_t len, wf_kv_frame_info *info, char *err,
                            size_t errlen) {
    const uint8_t *p = frame;
    memset(info, 0, sizeof *info);
    if (len < WF_KV_FRAME_HEADER_BYTES)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "kv frame truncated: %zu bytes, header is %d",
                                len, WF_KV_FRAME_HEADER_BYTES);
    if (memcmp(p, "WFKV", 4) != 0)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "not a kv frame (bad magic)");
    info->version = get16(p + 4);
    info->flags = get16(p + 6);
    if (info->version != WF_KV_FRAME_VERSION)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "kv frame version %u (this build reads %d)",
                                info->version, WF_KV_FRAME_VERSION);
    if (info->flags & ~FLAGS_KNOWN)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "kv frame: unknown flags 0x%x",
                                info->flags);
    info->profile_id = get32(p + 8);
    info->n_layers = get16(p + 12);
    info->n_kv_heads = get16(p + 14);
    info->head_dim = get16(p + 16);
    info->k_group = get16(p + 18);
    uint32_t n_tokens = get32(p + 20);
    info->seed = get64(p + 24);
    info->raw_bytes = get64(p + 32);
    info->stored_bytes = get64(p + 40);
    if (!info->n_layers || !info->n_kv_heads || !info->head_dim || info->head_dim % 8 ||
        !info->k_group || !n_tokens)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "kv frame: zero or misaligned field (layers %d heads %d dim %d "
                                "group %d tokens %u)", info->n_layers, info->n_kv_heads,
                                info->head_dim, info->k_group, n_tokens);
    if (n_tokens > FRAME_MAX_TOKENS ||
        (uint64_t)info->n_layers * (uint64_t)info->n_kv_heads * (uint64_t)info->head_dim > FRAME_MAX_ROW)
        return wf_status_errorf(err, errlen, WF_ERANGE, "kv frame oversized: %u tokens of %dx%dx%d",
                                n_tokens, info->n_layers, info->n_kv_heads, info->head_dim);
    if ((info->flags & (FLAG_ROT_K | FLAG_ROT_V)) && !is_pow2(info->head_dim))
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "kv frame: rotation with head_dim %d (not a power of two)",
                                info->head_dim);
    info->n_tokens = (int)n_tokens;
    size_t nh = (size_t)info->n_layers * (size_t)info->n_kv_heads;
    if (len - WF_KV_FRAME_HEADER_BYTES < 2 * nh)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "kv frame truncated in its bit tables");
    const uint8_t *kb = p + WF_KV_FRAME_HEADER_BYTES, *vb = kb + nh;
    for (size_t i = 0; i < 2 * nh; i++)
        if (!bits_ok(kb[i]))
            return wf_status_errorf(err, errlen, WF_EFORMAT, "kv frame: bit width %d at %zu",
                                    kb[i], i);
    uint64_t want = payload_bytes(info->n_layers, info->n_kv_heads, info->head_dim, info->k_group,
                                  n_tokens, kb, vb);
    if (info->raw_bytes != want)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "kv frame: payload of %llu bytes, the layout implies %llu",
                                (unsigned long long)info->raw_bytes, (unsigned long long)want);
    uint64_t have = len - WF_KV_FRAME_HEADER_BYTES - 2 * nh;
    if (info->stored_bytes != have)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "kv frame %s: %llu payload bytes present, header says %llu",
                                have < info->stored_bytes ? "truncated" : "has trailing bytes",
                                (unsigned long long)have, (unsigned long long)info->stored_bytes);
    if (!(info->flags & FLAG_ZSTD) && info->stored_bytes != info->raw_bytes)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "kv frame: uncompressed payload of %llu bytes, expected %llu",
                                (unsigned long long)info->stored_bytes,
                                (unsigned long long)info->raw_bytes);
    info->frame_bytes = len;
    return WF_OK;
}

static const uint8_t *decode_keys(const wf_kv_codec *c, scratch *w, const wf_kv_frame_info *fi,
                                  const uint8_t *kb, wf_kv_store *s, const int32_t *blocks, int l,
                                  const uint8_t *in) {
    const wf__kvc_kernels *k = c->kern;
    int H = c->g.n_kv_heads, d = c->g.head_dim, G = fi->k_group, n_tokens = fi->n_tokens;
    bool rot = fi->flags & FLAG_ROT_K;
    float *sc = w->vec, *r = w->vec2;
    for (int g0 = 0; g0 < n_tokens; g0 += G) {
        int T = n_tokens - g0 < G ? n_tokens - g0 : G;
        for (int h = 0; h < H; h++) {
            int bits = kb[h];
            if (bits == 16) {
                for (int t = 0; t < T; t++, in += (size_t)d * 2)
                    memcpy(row_ptr(s, false, l, blocks, g0 + t, h), in, (size_t)d * 2);
                continue;
            }
            const float *si = signs_of(c, c->signs_inv, l, h, 0);
            for (int i = 0; i < d; i++, in += 2) sc[i] = wf_bf16_to_fp32(get16(in));
            for (int t = 0; t < T; t++) {
                in = get_codes(k, in, sc, bits, w->codes, r, d);
                if (rot) {
                    k->fwht(r, d);
                    k->mul(r, si, d);
                }
                k->f32_to_f16(r, row_ptr(s, false, l, blocks, g0 + t, h), d);
            }
        }
    }
    return in;
}

static const uint8_t *decode_values(const wf_kv_codec *c, scratch *w, const wf_kv_frame_info *fi,
                                    const uint8_t *vb, wf_kv_store *s, const int32_t *blocks, int l,
                                    const uint8_t *in) {
    const wf__kvc_kernels *k = c->kern;
    int H = c->g.n_kv_heads, d = c->g.head_dim;
    bool rot = fi->flags & FLAG_ROT_V;
    float *sc = w->vec, *r = w->vec2;
    for (int t = 0; t < fi->n_tokens; t++)
        for (int h = 0; h < H; h++) {
            int bits = vb[h];
            uint16_t *dst = row_ptr(s, true, l, blocks, t, h);
            if (bits == 16) {
                memcpy(dst, in, (size_t)d * 2);
                in += (size_t)d * 2;
                continue;
            }
            float v = wf_bf16_to_fp32(get16(in));
            in += 2;
            k->fill(sc, v, d);
            in = get_codes(k, in, sc, bits, w->codes, r, d);
            if (rot) {
                k->fwht(r, d);
                k->mul(r, signs_of(c, c->signs_inv, l, h, 1), d);
            }
            k->f32_to_f16(r, dst, d);
        }
    return in;
}

static void decode_chunk(layer_job *job, int j) {
    wf_kv_codec *c = job->c;
    int l0, l1;
    chunk_range(job, j, &l0, &l1);
    const uint8_t *in = job->in + c->layer_off[l0];
    size_t H = (size_t)c->g.n_kv_heads;
    for (int l = l0; l < l1; l++) {
        size_t row = (size_t)(l - job->l0) * H;
        in = decode_keys(c, &c->ws[j], job->fi, job->kb + row, job->dst, job->blocks, l, in);
        in = decode_values(c, &c->ws[j], job->fi, job->vb + row, job->dst, job->blocks, l, in);
    }
}

void wf_kv_frame_seal(void *frame, size_t len) {
    if (len >= WF_KV_FRAME_HEADER_BYTES) put64((uint8_t *)frame + 48, frame_checksum(frame, len));
}

/* Decodes a frame of layers [l0, l0 + its n_layers); exact: it must hold every layer. */
static wf_status decode_range(wf_kv_codec *c, const void *frame, size_t len, int l0, bool exact,
                              wf_kv_store *store, const int32_t *blocks, int n_blocks,
                              int *n_tokens, char *err, size_t errlen) {
    *n_tokens = 0;
    wf_kv_frame_info fi;
    wf_status st = wf_kv_frame_parse(frame, len, &fi, err, errlen);
    if (st != WF_OK) return st;
    if ((exact ? fi.n_layers != c->g.n_layers : (l0 < 0 || fi.n_layers > c->g.n_layers - l0)) ||
        fi.n_kv_heads != c->g.n_kv_heads || fi.head_dim != c->g.head_dim)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "kv frame geometry %dx%dx%d (from layer %d) differs from this "
                                "model's %dx%dx%d", fi.n_layers, fi.n_kv_heads, fi.head_dim, l0,
                                c->g.n_layers, c->g.n_kv_heads, c->g.head_dim);
    st = check_store(c, store, blocks, n_blocks, fi.n_tokens, err, errlen);
    if (st != WF_OK) return st;
    if (fi.raw_bytes > c->raw_cap) /* implied by the token bound; checked all the same */
        return wf_status_errorf(err, errlen, WF_ERANGE, "kv frame oversized: %llu payload bytes",
                                (unsigned long long)fi.raw_bytes);
    const uint8_t *p = frame;
    if (frame_checksum(p, len) != get64(p + 48))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "kv frame checksum mismatch (corrupt)");
    size_t nh = (size_t)fi.n_layers * (size_t)fi.n_kv_heads;
    const uint8_t *kb = p + WF_KV_FRAME_HEADER_BYTES, *vb = kb + nh, *in = vb + nh;
    if (fi.flags & FLAG_ZSTD) {
        unsigned long long content = ZSTD_getFrameContentSize(in, (size_t)fi.stored_bytes);
        if (content != fi.raw_bytes)
            return wf_status_errorf(err, errlen, WF_EFORMAT,
                                    "kv frame: zstd stream holds %lld bytes, header says %llu",
                                    (long long)content, (unsigned long long)fi.raw_bytes);
        size_t n = ZSTD_decompressDCtx(c->dctx, c->raw, (size_t)fi.raw_bytes, in,
                                       (size_t)fi.stored_bytes);
        if (ZSTD_isError(n) || n != fi.raw_bytes)
            return wf_status_errorf(err, errlen, WF_EFORMAT, "kv frame: zstd: %s",
                                    ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short output");
        in = c->raw;
    }
    if (fi.flags & (FLAG_ROT_K | FLAG_ROT_V)) ensure_signs(c, fi.seed);
    int l1 = l0 + fi.n_layers;
    layer_offsets(c, fi.k_group, fi.n_tokens, kb, vb, l0, l1);
    layer_job job = {.c = c, .dst = store, .blocks = blocks, .in = in, .fi = &fi, .kb = kb,
                     .vb = vb, .l0 = l0, .l1 = l1, .chunk = decode_chunk};
    run_layers(&job);
    *n_tokens = fi.n_tokens;
    return WF_OK;
}

wf_status wf_kv_codec_decode(wf_kv_codec *c, const void *frame, size_t len, wf_kv_store *store,
                             const int32_t *blocks, int n_blocks, int *n_tokens, char *err,
                             size_t errlen) {
    return decode_range(c, frame, len, 0, true, store, blocks, n_blocks, n_tokens, err, errlen);
}

wf_status wf_kv_codec_decode_layers(wf_kv_codec *c, const void *frame, size_t len, int l0,
                                    wf_kv_store *store, const int32_t *blocks, int n_blocks,
                                    int *n_tokens, char *err, size_t errlen) {
    return decode_range(c, frame, len, l0, false, store, blocks, n_blocks, n_tokens, err, errlen);
}
