/* libFuzzer target for the KV codec frame decoders (kv/codec.h): the whole-frame decoder and
 * the layer-slice decoder. The first input byte picks a mode:
 *   bit 0     re-seal the checksum first, so the checks behind it (bit tables, lengths, zstd
 *             stream, payload walk) see forged frames (without it the checksum refuses almost
 *             everything);
 *   bit 1     decode as a layer slice (wf_kv_codec_decode_layers) instead of a whole frame;
 *   bits 2-4  the slice's first layer (see below);
 *   bit 5     with a slice: the model has one more layer after it (not the last slice).
 * A frame whose header parses gets a codec and a store of its own (small geometries only; a
 * slice's model has l0 layers before it, l0 = bits 2-3); a decoded frame is encoded again
 * (losslessly, the same layers) and must decode to the same KV. A frame that does not parse
 * still goes through the decoder of a fixed small model (4 layers), a slice starting at
 * bits 2-4 minus 2 (-2..5, so bad ranges too), which must refuse it.
 * weft-fuzz: covers=kv/codec.c */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MODE_SEAL 1
#define MODE_SLICE 2

static wf_status decode(wf_kv_codec *c, int mode, const void *f, size_t len, int l0,
                        wf_kv_store *s, const int32_t *blocks, int n_blocks, int *n, char *err,
                        size_t errlen) {
    if (mode & MODE_SLICE)
        return wf_kv_codec_decode_layers(c, f, len, l0, s, blocks, n_blocks, n, err, errlen);
    return wf_kv_codec_decode(c, f, len, s, blocks, n_blocks, n, err, errlen);
}

/* A frame that does not parse (or is too large to give its own model): a fixed small model's
 * decoder must refuse it, whatever the slice range. */
static void decode_fixed(int mode, const uint8_t *f, size_t len) {
    wf_kv_geometry g = {4, 2, 16, 16, WF_KV_DTYPE_F16, 0, 0};
    wf_kv_store s;
    wf_kv_codec *c;
    char err[256];
    if (wf_kv_store_init(&s, &g, wf_kv_geometry_block_bytes(&g) * 4) != WF_OK) return;
    if (wf_kv_codec_new(&g, 64, &c) == WF_OK) {
        int32_t blocks[4] = {0, 1, 2, 3};
        int n;
        int l0 = ((mode >> 2) & 7) - 2;
        if (decode(c, mode, f, len, l0, &s, blocks, 4, &n, err, sizeof err) == WF_OK && n <= 0)
            abort();
        wf_kv_codec_free(c);
    }
    wf_kv_store_free(&s);
}

/* Layers [l0, l1) of positions [0, n) agree bit for bit in both stores. */
static void check_same(const wf_kv_store *a, const wf_kv_store *b, const int32_t *blocks, int n,
                       int l0, int l1) {
    size_t row = a->row_elems * 2;
    for (int t = 0; t < n; t++)
        for (int l = l0; l < l1; l++) {
            size_t off = (size_t)(t % 16) * row;
            int blk = blocks[t / 16];
            if (memcmp((const uint8_t *)wf_kv_store_k(a, l, blk) + off,
                       (const uint8_t *)wf_kv_store_k(b, l, blk) + off, row) ||
                memcmp((const uint8_t *)wf_kv_store_v(a, l, blk) + off,
                       (const uint8_t *)wf_kv_store_v(b, l, blk) + off, row))
                abort();
        }
}

/* Whatever decoded (even NaN or inf halves) must survive a lossless round trip of the same
 * layers, through the same decoder. */
static void round_trip(wf_kv_codec *c, int mode, const wf_kv_geometry *g,
                       const wf_kv_frame_info *fi, const wf_kv_store *s, const int32_t *blocks,
                       int n_blocks, int n, int l0) {
    char err[256];
    int l1 = l0 + fi->n_layers;
    wf_kv_profile p;
    wf_kv_profile_init(&p, "raw", 16, 16);
    p.rotate_v = false;
    size_t cap = wf_kv_codec_max_layers_bytes(c, n, fi->n_layers), out_len;
    uint8_t *buf = malloc(cap);
    wf_kv_store s2;
    if (buf && wf_kv_codec_set_profile(c, &p, NULL, fi->seed) == WF_OK &&
        wf_kv_codec_encode_layers(c, s, blocks, n_blocks, n, l0, l1, buf, cap, &out_len, err,
                                  sizeof err) == WF_OK &&
        wf_kv_store_init(&s2, g, wf_kv_geometry_block_bytes(g) * (size_t)n_blocks) == WF_OK) {
        int n2;
        if (decode(c, mode, buf, out_len, l0, &s2, blocks, n_blocks, &n2, err, sizeof err) !=
                WF_OK ||
            n2 != n)
            abort();
        check_same(s, &s2, blocks, n, l0, l1);
        wf_kv_store_free(&s2);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0];
    size_t len = size - 1;
    uint8_t *f = malloc(len ? len : 1);
    if (!f) return 0;
    memcpy(f, data + 1, len);
    if (mode & MODE_SEAL) wf_kv_frame_seal(f, len);
    wf_kv_frame_info fi;
    char err[256];
    int l0 = (mode & MODE_SLICE) ? (mode >> 2) & 3 : 0;
    int extra = (mode & MODE_SLICE) ? (mode >> 5) & 1 : 0;
    if (wf_kv_frame_parse(f, len, &fi, err, sizeof err) != WF_OK || fi.n_tokens > 256 ||
        (fi.n_layers + l0 + extra) * fi.n_kv_heads * fi.head_dim > 4096) {
        decode_fixed(mode, f, len);
        free(f);
        return 0;
    }
    wf_kv_geometry g = {fi.n_layers + l0 + extra, fi.n_kv_heads, fi.head_dim, 16,
                        WF_KV_DTYPE_F16, 0, 0};
    int n_blocks = (fi.n_tokens + 15) / 16;
    wf_kv_store s;
    wf_kv_codec *c = NULL;
    int32_t blocks[16];
    for (int i = 0; i < n_blocks; i++) blocks[i] = n_blocks - 1 - i;
    if (wf_kv_store_init(&s, &g, wf_kv_geometry_block_bytes(&g) * (size_t)n_blocks) != WF_OK) {
        free(f);
        return 0;
    }
    if (wf_kv_codec_new(&g, fi.n_tokens, &c) == WF_OK) {
        int n = 0;
        if (decode(c, mode, f, len, l0, &s, blocks, n_blocks, &n, err, sizeof err) == WF_OK) {
            if (n != fi.n_tokens) abort();
            round_trip(c, mode, &g, &fi, &s, blocks, n_blocks, n, l0);
        }
        wf_kv_codec_free(c);
    }
    wf_kv_store_free(&s);
    free(f);
    return 0;
}
