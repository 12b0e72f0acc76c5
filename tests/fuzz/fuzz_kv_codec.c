/* libFuzzer target for the KV codec frame decoder (kv/codec.h). The first input byte picks a
 * mode: even bytes decode the rest as is (the checksum refuses almost everything), odd bytes
 * first re-seal the checksum so the checks behind it (bit tables, lengths, zstd stream, payload
 * walk) see forged frames. A frame whose header parses gets a codec and a store of its own
 * (small geometries only); a decoded frame is encoded again and must decode to the same KV. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0];
    size_t len = size - 1;
    uint8_t *f = malloc(len ? len : 1);
    if (!f) return 0;
    memcpy(f, data + 1, len);
    if (mode & 1) wf_kv_frame_seal(f, len);
    wf_kv_frame_info fi;
    char err[256];
    if (wf_kv_frame_parse(f, len, &fi, err, sizeof err) != WF_OK || fi.n_tokens > 256 ||
        fi.n_layers * fi.n_kv_heads * fi.head_dim > 4096) {
        /* Still run the full decoder against a fixed small model. */
        wf_kv_geometry g = {2, 2, 16, 16, WF_KV_DTYPE_F16, 0, 0};
        wf_kv_store s;
        wf_kv_codec *c;
        if (wf_kv_store_init(&s, &g, wf_kv_geometry_block_bytes(&g) * 4) == WF_OK) {
            if (wf_kv_codec_new(&g, 64, &c) == WF_OK) {
                int32_t blocks[4] = {0, 1, 2, 3};
                int n;
                if (wf_kv_codec_decode(c, f, len, &s, blocks, 4, &n, err, sizeof err) == WF_OK &&
                    n <= 0)
                    abort();
                wf_kv_codec_free(c);
            }
            wf_kv_store_free(&s);
        }
        free(f);
        return 0;
    }
    wf_kv_geometry g = {fi.n_layers, fi.n_kv_heads, fi.head_dim, 16, WF_KV_DTYPE_F16, 0, 0};
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
        if (wf_kv_codec_decode(c, f, len, &s, blocks, n_blocks, &n, err, sizeof err) == WF_OK) {
            if (n != fi.n_tokens) abort();
            /* Whatever decoded (even NaN or inf halves) must survive a lossless round trip. */
            wf_kv_profile p;
            wf_kv_profile_init(&p, "raw", 16, 16);
            p.rotate_v = false;
            size_t cap = wf_kv_codec_max_frame_bytes(c, n), out_len;
            uint8_t *buf = malloc(cap);
            wf_kv_store s2;
            if (buf && wf_kv_codec_set_profile(c, &p, NULL, fi.seed) == WF_OK &&
                wf_kv_codec_encode(c, &s, blocks, n_blocks, n, buf, cap, &out_len, err,
                                   sizeof err) == WF_OK &&
                wf_kv_store_init(&s2, &g, wf_kv_geometry_block_bytes(&g) * (size_t)n_blocks) ==
                    WF_OK) {
                int n2;
                if (wf_kv_codec_decode(c, buf, out_len, &s2, blocks, n_blocks, &n2, err,
                                       sizeof err) != WF_OK || n2 != n)
                    abort();
                for (int t = 0; t < n; t++)
                    for (int l = 0; l < g.n_layers; l++) {
                        size_t off = (size_t)(t % 16) * s.row_elems * 2;
                        const uint8_t *a = (const uint8_t *)wf_kv_store_k(&s, l, blocks[t / 16]) + off;
                        const uint8_t *b = (const uint8_t *)wf_kv_store_k(&s2, l, blocks[t / 16]) + off;
                        const uint8_t *av = (const uint8_t *)wf_kv_store_v(&s, l, blocks[t / 16]) + off;
                        const uint8_t *bv = (const uint8_t *)wf_kv_store_v(&s2, l, blocks[t / 16]) + off;
                        if (memcmp(a, b, s.row_elems * 2) || memcmp(av, bv, s.row_elems * 2))
                            abort();
                    }
                wf_kv_store_free(&s2);
            }
            free(buf);
        }
        wf_kv_codec_free(c);
    }
    wf_kv_store_free(&s);
    free(f);
    return 0;
}
