/* Tests kv/codec.c and its kernels: each stage alone (half conversions, Hadamard rotation,
 * quantisation error bounds per width, bit packing), every SIMD level against the scalar one,
 * the whole pipeline over scattered blocks for every kind of profile, and a decoder that
 * rejects truncated, corrupt and oversized frames without touching the destination. */
#include "check_main.h"
#include "kv/codec.h"
#include "kv/codec_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x1234567;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}
static float frand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }
static float gauss(void) {
    float s = 0;
    for (int i = 0; i < 4; i++) s += frand();
    return s * 0.9f;
}

START_TEST(f16_round_trip_every_half) {
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue; /* NaN: payload quieted */
        float f = wf_fp16_to_fp32((uint16_t)h);
        ck_assert_uint_eq(wf_fp32_to_fp16(f), h);
    }
    ck_assert_uint_eq(wf_fp32_to_fp16(65504.0f), 0x7bffu);
    ck_assert_uint_eq(wf_fp32_to_fp16(65520.0f), 0x7c00u);  /* ties to even: infinity */
    ck_assert_uint_eq(wf_fp32_to_fp16(5.9604645e-8f), 1u);  /* smallest subnormal */
    ck_assert_uint_eq(wf_fp32_to_fp16(2.9802322e-8f), 0u);  /* half of it: ties to even */
    ck_assert_uint_eq(wf_fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00u);
    ck_assert_uint_eq(wf_fp32_to_fp16(1.0f + 3.0f / 2048), 0x3c02u);
}
END_TEST

/* Every SIMD level this CPU runs gives bit-identical results to the scalar kernels. */
START_TEST(simd_levels_match_scalar) {
    const wf__kvc_kernels *s = &wf__kvc_kernels_scalar;
    const char *names[] = {"avx2", "avx512"};
    int tested = 0;
    for (int li = 0; li < 2; li++) {
        const wf__kvc_kernels *k = wf__kvc_kernels_by_name(names[li]);
        if (!k) continue;
        tested++;
        for (int trial = 0; trial < 200; trial++) {
            int n = trial % 3 == 0 ? 128 : trial % 3 == 1 ? 64 : 8 << (trial % 4);
            float x[256], a[256], b[256], inv[256], m1[256], m2[256];
            uint16_t h[256], h1[256], h2[256];
            uint8_t c1[256], c2[256];
            for (int i = 0; i < n; i++) {
                uint32_t e = rnd() % 40; /* magnitudes from subnormal halves to large */
                x[i] = frand() * ldexpf(1.0f, (int)e - 26);
                h[i] = (uint16_t)(rnd() & 0xffff);
                if ((h[i] & 0x7c00u) == 0x7c00u) h[i] &= 0xbfffu; /* no inf/NaN */
                inv[i] = 1.0f + frand() * 0.5f;
                m1[i] = m2[i] = fabsf(frand()) * 0.5f;
            }
            s->f16_to_f32(h, a, n);
            k->f16_to_f32(h, b, n);
            ck_assert_mem_eq(a, b, (size_t)n * 4);
            s->f32_to_f16(x, h1, n);
            k->f32_to_f16(x, h2, n);
            ck_assert_mem_eq(h1, h2, (size_t)n * 2);
            memcpy(a, x, (size_t)n * 4);
            memcpy(b, x, (size_t)n * 4);
            s->fwht(a, n);
            k->fwht(b, n);
            ck_assert_mem_eq(a, b, (size_t)n * 4);
            ck_assert(s->absmax(x, n) == k->absmax(x, n));
            memcpy(a, x, (size_t)n * 4);
            memcpy(b, x, (size_t)n * 4);
            s->mul(a, inv, n);
            k->mul(b, inv, n);
            ck_assert_mem_eq(a, b, (size_t)n * 4);
            s->fill(a, x[0], n);
            k->fill(b, x[0], n);
            ck_assert_mem_eq(a, b, (size_t)n * 4);
            s->absmax_acc(x, m1, n);
            k->absmax_acc(x, m2, n);
            ck_assert_mem_eq(m1, m2, (size_t)n * 4);
            for (int bits = 2; bits <= 8; bits++) {
                int qmax = (1 << (bits - 1)) - 1;
                float sc[256];
                for (int i = 0; i < n; i++) {
                    a[i] = frand() * (float)qmax * 1.3f; /* some values clamp */
                    sc[i] = 1.0f;
                }
                s->quantize(a, sc, qmax, c1, n);
                k->quantize(a, sc, qmax, c2, n);
                ck_assert_mem_eq(c1, c2, (size_t)n);
                for (int i = 0; i < n; i++) sc[i] = inv[i];
                s->dequantize(c1, sc, qmax, a, n);
                k->dequantize(c1, sc, qmax, b, n);
                ck_assert_mem_eq(a, b, (size_t)n * 4);
                if (bits == 4) { /* the fused 4-bit paths */
                    uint8_t p1[128], p2[128];
                    for (int i = 0; i < n; i++) a[i] = frand() * 9.0f;
                    s->quantize4(a, inv, p1, n);
                    k->quantize4(a, inv, p2, n);
                    ck_assert_mem_eq(p1, p2, (size_t)n / 2);
                    s->quantize(a, inv, 7, c1, n);
                    for (int i = 0; i < n; i += 2) ck_assert_uint_eq(p1[i / 2], c1[i] | c1[i + 1] << 4);
                    s->dequantize4(p1, sc, a, n);
                    k->dequantize4(p1, sc, b, n);
                    ck_assert_mem_eq(a, b, (size_t)n * 4);
                }
            }
        }
    }
    /* The machines CI runs on have AVX2; say so if this one does not. */
    if (!tested) fprintf(stderr, "note: no SIMD level on this CPU; scalar only\n");
}
END_TEST

START_TEST(hadamard_is_orthogonal_and_inverts) {
    int sizes[] = {8, 16, 64, 128};
    for (int si = 0; si < 4; si++) {
        int n = sizes[si];
        float signs[128], rows[128][128];
        wf_kv_hadamard_signs(99, 3, 1, false, n, signs);
        int neg = 0;
        for (int i = 0; i < n; i++) {
            ck_assert(signs[i] == 1.0f || signs[i] == -1.0f);
            neg += signs[i] < 0;
        }
        ck_assert_int_gt(neg, 0);
        ck_assert_int_lt(neg, n);
        for (int i = 0; i < n; i++) {
            memset(rows[i], 0, sizeof rows[i]);
            rows[i][i] = 1.0f;
            wf_kv_hadamard_forward(rows[i], n, signs);
        }
        /* (H D)(H D)^T = n I: the images of the basis are orthogonal with norm sqrt(n). */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                float dot = 0;
                for (int t = 0; t < n; t++) dot += rows[i][t] * rows[j][t];
                ck_assert_float_eq_tol(dot, i == j ? (float)n : 0.0f, 1e-4f);
            }
        float x[128], y[128];
        for (int i = 0; i < n; i++) x[i] = y[i] = gauss();
        wf_kv_hadamard_forward(y, n, signs);
        wf_kv_hadamard_inverse(y, n, signs);
        for (int i = 0; i < n; i++) ck_assert_float_eq_tol(y[i], x[i], 1e-5f);
    }
    /* Signs are a pure function of (seed, layer, head, K/V) and differ between heads. */
    float a[64], b[64], c[64];
    wf_kv_hadamard_signs(7, 2, 0, true, 64, a);
    wf_kv_hadamard_signs(7, 2, 0, true, 64, b);
    wf_kv_hadamard_signs(7, 2, 1, true, 64, c);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert(memcmp(a, c, sizeof a) != 0);
}
END_TEST

START_TEST(quantisation_error_bounds_per_width) {
    for (int bits = 2; bits <= 8; bits++) {
        int qmax = (1 << (bits - 1)) - 1;
        for (int trial = 0; trial < 50; trial++) {
            float x[64], y[64];
            uint8_t codes[64];
            for (int i = 0; i < 64; i++) x[i] = gauss() * (trial + 1);
            float s = wf_kv_quantize_row(x, 64, bits, codes);
            float amax = 0;
            for (int i = 0; i < 64; i++) amax = fmaxf(amax, fabsf(x[i]));
            ck_assert(s >= amax / qmax);                  /* rounded up */
            ck_assert(s <= amax / qmax * (1 + 1.0f / 64)); /* by at most a bf16 step */
            wf_kv_dequantize(codes, 64, bits, &s, 0, y);
            for (int i = 0; i < 64; i++) {
                ck_assert_int_le(codes[i], 2 * qmax);
                ck_assert_msg(fabsf(x[i] - y[i]) <= s * 0.5f * (1 + 1e-5f), "bits %d: |%g - %g| > %g/2",
                              bits, (double)x[i], (double)y[i], (double)s);
            }
            /* Per channel: 16 rows x 32 columns, column 5 an outlier channel. */
            float m[16 * 32], scales[32], back[32];
            uint8_t mc[16 * 32];
            for (int i = 0; i < 16 * 32; i++) m[i] = gauss() * (i % 32 == 5 ? 40.0f : 1.0f);
            wf_kv_quantize_channels(m, 16, 32, bits, scales, mc);
            for (int r = 0; r < 16; r++) {
                wf_kv_dequantize(mc + r * 32, 32, bits, scales, 1, back);
                for (int i = 0; i < 32; i++)
                    ck_assert(fabsf(m[r * 32 + i] - back[i]) <= scales[i] * 0.5f * (1 + 1e-5f));
            }
            ck_assert(scales[5] > scales[4] * 4); /* the outlier did not widen other channels */
        }
    }
    /* An all-zero row has scale 0 and decodes to zeros. */
    float z[16] = {0}, zb[16];
    uint8_t zc[16];
    float s = wf_kv_quantize_row(z, 16, 4, zc);
    ck_assert(s == 0.0f);
    wf_kv_dequantize(zc, 16, 4, &s, 0, zb);
    for (int i = 0; i < 16; i++) ck_assert(zb[i] == 0.0f);
}
END_TEST

START_TEST(bit_packing_round_trips) {
    for (int bits = 1; bits <= 8; bits++) {
        uint8_t codes[64], back[64], packed[64];
        for (int i = 0; i < 64; i++) codes[i] = (uint8_t)(rnd() & ((1u << bits) - 1));
        size_t n = wf_kv_pack_bits(codes, 64, bits, packed);
        ck_assert_uint_eq(n, (size_t)(64 * bits / 8));
        ck_assert_uint_eq(wf_kv_unpack_bits(packed, 64, bits, back), n);
        ck_assert_mem_eq(codes, back, 64);
    }
}
END_TEST

/* ---- the pipeline over a store ---- */

typedef struct rig {
    wf_kv_store a, b;
    int32_t blocks_a[64], blocks_b[64];
    int n_tokens, n_blocks;
} rig;

/* K with a few outlier channels (as real keys have), V plain; blocks scattered. */
static void rig_init(rig *r, int n_layers, int n_heads, int head_dim, int n_tokens) {
    wf_kv_geometry g = {.n_layers = n_layers, .n_kv_heads = n_heads, .head_dim = head_dim,
                        .block_size = 16, .dtype = WF_KV_DTYPE_F16};
    size_t budget = wf_kv_geometry_block_bytes(&g) * 40;
    ck_assert_int_eq(wf_kv_store_init(&r->a, &g, budget), WF_OK);
    ck_assert_int_eq(wf_kv_store_init(&r->b, &g, budget), WF_OK);
    r->n_tokens = n_tokens;
    r->n_blocks = (n_tokens + 15) / 16;
    ck_assert_int_le(r->n_blocks, 20);
    for (int i = 0; i < r->n_blocks; i++) {
        r->blocks_a[i] = (i * 7 + 3) % r->a.n_blocks;
        r->blocks_b[i] = r->b.n_blocks - 1 - i;
    }
    for (int l = 0; l < n_layers; l++)
        for (int blk = 0; blk < r->a.n_blocks; blk++) {
            uint16_t *k = wf_kv_store_k(&r->a, l, blk), *v = wf_kv_store_v(&r->a, l, blk);
            for (size_t i = 0; i < 16 * r->a.row_elems; i++) {
                int ch = (int)(i % (size_t)head_dim);
                float kk = gauss() * (ch == 3 || ch == 17 ? 12.0f : 1.0f) + (ch == 9 ? 4.0f : 0);
                k[i] = wf_fp32_to_fp16(kk);
                v[i] = wf_fp32_to_fp16(gauss() * 0.5f);
            }
        }
    memset(r->b.k, 0xAB, r->b.block_bytes * (size_t)r->b.n_blocks * (size_t)n_layers);
    memset(r->b.v, 0xAB, r->b.block_bytes * (size_t)r->b.n_blocks * (size_t)n_layers);
}

static void rig_free(rig *r) {
    wf_kv_store_free(&r->a);
    wf_kv_store_free(&r->b);
}

static const uint16_t *rig_row(const wf_kv_store *s, const int32_t *blocks, bool v, int l, int t) {
    const uint16_t *base = v ? wf_kv_store_v(s, l, blocks[t / 16]) : wf_kv_store_k(s, l, blocks[t / 16]);
    return base + (size_t)(t % 16) * s->row_elems;
}

/* Round trip with profile p; returns the frame size. Checks the error bound of every row. */
static size_t round_trip(rig *r, const wf_kv_profile *p, const float *importance) {
    const wf_kv_geometry *g = &r->a.geometry;
    wf_kv_codec *enc, *dec;
    ck_assert_int_eq(wf_kv_codec_new(g, 512, &enc), WF_OK);
    ck_assert_int_eq(wf_kv_codec_new(g, 512, &dec), WF_OK);
    ck_assert_int_eq(wf_kv_codec_set_profile(enc, p, importance, 0xfeed), WF_OK);
    size_t cap = wf_kv_codec_max_frame_bytes(enc, r->n_tokens), len;
    uint8_t *buf = malloc(cap);
    char err[256] = "";
    ck_assert_int_eq(wf_kv_codec_encode(enc, &r->a, r->blocks_a, r->n_blocks, r->n_tokens, buf,
                                        cap, &len, err, sizeof err), WF_OK);
    int n = 0;
    ck_assert_msg(wf_kv_codec_decode(dec, buf, len, &r->b, r->blocks_b, r->n_blocks, &n, err,
                                     sizeof err) == WF_OK, "%s", err);
    ck_assert_int_eq(n, r->n_tokens);
    int H = g->n_kv_heads, d = g->head_dim;
    const uint8_t *kb = wf_kv_codec_k_bits(enc), *vb = wf_kv_codec_v_bits(enc);
    for (int l = 0; l < g->n_layers; l++)
        for (int h = 0; h < H; h++) {
            /* Keys: per channel over a group; bound each element by its channel's step. */
            int kbits = kb[l * H + h], vbits = vb[l * H + h];
            for (int g0 = 0; g0 < r->n_tokens; g0 += p->k_group) {
                int T = r->n_tokens - g0 < p->k_group ? r->n_tokens - g0 : p->k_group;
                float cmax[128] = {0}, rows[64][128];
                float sg[128];
                wf_kv_hadamard_signs(0xfeed, l, h, false, d, sg);
                for (int t = 0; t < T; t++) {
                    const uint16_t *x = rig_row(&r->a, r->blocks_a, false, l, g0 + t) + h * d;
                    for (int i = 0; i < d; i++) rows[t][i] = wf_fp16_to_fp32(x[i]);
                    if (p->rotate_k) wf_kv_hadamard_forward(rows[t], d, sg);
                    for (int i = 0; i < d; i++) cmax[i] = fmaxf(cmax[i], fabsf(rows[t][i]));
                }
                float half2 = 0; /* rotated: |e|2 <= sqrt(mean(step_i^2)) / 2 */
                for (int i = 0; i < d; i++) {
                    float step = cmax[i] / (float)((1 << (kbits - 1)) - 1) * (1 + 1.0f / 64);
                    half2 += step * step / 4 / (float)d;
                }
                for (int t = 0; t < T; t++) {
                    const uint16_t *x = rig_row(&r->a, r->blocks_a, false, l, g0 + t) + h * d;
                    const uint16_t *y = rig_row(&r->b, r->blocks_b, false, l, g0 + t) + h * d;
                    float e2 = 0, n2 = 0;
                    for (int i = 0; i < d; i++) {
                        if (kbits == 16) {
                            ck_assert_uint_eq(x[i], y[i]);
                            continue;
                        }
                        float xf = wf_fp16_to_fp32(x[i]), yf = wf_fp16_to_fp32(y[i]);
                        e2 += (xf - yf) * (xf - yf);
                        n2 += xf * xf;
                        float step = cmax[i] / (float)((1 << (kbits - 1)) - 1) * (1 + 1.0f / 64);
                        if (!p->rotate_k)
                            ck_assert_msg(fabsf(xf - yf) <= step * 0.5f + fabsf(xf) / 1024 + 1e-7f,
                                          "K l%d h%d t%d c%d bits %d: %g vs %g", l, h, g0 + t, i,
                                          kbits, (double)xf, (double)yf);
                    }
                    if (p->rotate_k && kbits != 16)
                        ck_assert_msg(sqrtf(e2) <= sqrtf(half2) * 1.001f + sqrtf(n2) / 1024 + 1e-6f,
                                      "K l%d h%d t%d bits %d: |e| %g > %g", l, h, g0 + t, kbits,
                                      (double)sqrtf(e2), (double)sqrtf(half2));
                }
            }
            /* Values: per token; rotated rows are bounded in L2 by the rotated step. */
            for (int t = 0; t < r->n_tokens; t++) {
                const uint16_t *x = rig_row(&r->a, r->blocks_a, true, l, t) + h * d;
                const uint16_t *y = rig_row(&r->b, r->blocks_b, true, l, t) + h * d;
                if (vbits == 16) {
                    ck_assert_mem_eq(x, y, (size_t)d * 2);
                    continue;
                }
                float xr[128], e2 = 0, n2 = 0;
                for (int i = 0; i < d; i++) xr[i] = wf_fp16_to_fp32(x[i]);
                if (p->rotate_v) {
                    float sg[128];
                    wf_kv_hadamard_signs(0xfeed, l, h, true, d, sg);
                    wf_kv_hadamard_forward(xr, d, sg);
                }
                float amax = 0;
                for (int i = 0; i < d; i++) amax = fmaxf(amax, fabsf(xr[i]));
                float step = amax / (float)((1 << (vbits - 1)) - 1) * (1 + 1.0f / 64);
                for (int i = 0; i < d; i++) {
                    float xf = wf_fp16_to_fp32(x[i]), yf = wf_fp16_to_fp32(y[i]);
                    e2 += (xf - yf) * (xf - yf);
                    n2 += xf * xf;
                    if (!p->rotate_v)
                        ck_assert(fabsf(xf - yf) <= step * 0.5f + fabsf(xf) / 1024 + 1e-7f);
                }
                if (p->rotate_v)
                    ck_assert_msg(sqrtf(e2) <= step * 0.5f * 1.001f + sqrtf(n2) / 1024 + 1e-6f,
                                  "V l%d h%d t%d bits %d: |e| %g > %g", l, h, t, vbits,
                                  (double)sqrtf(e2), (double)(step * 0.5f));
            }
        }
    free(buf);
    wf_kv_codec_free(enc);
    wf_kv_codec_free(dec);
    return len;
}

START_TEST(pipeline_round_trip_every_profile_kind) {
    rig r;
    rig_init(&r, 3, 2, 64, 16 * 5 + 7); /* partial last block, partial last key group */
    size_t in = 87u * 3 * 2 * 2 * 64 * 2;
    struct { int kb, vb; bool rk, rv; int zl; } cases[] = {
        {16, 16, false, false, 0}, {16, 16, false, false, 1}, {8, 8, false, false, 0},
        {8, 8, true, true, 3},     {4, 4, false, true, 1},    {4, 2, false, true, 0},
        {2, 2, true, false, 1},    {3, 5, false, true, 1},    {6, 7, true, true, 0},
        {8, 4, true, false, 1},    {8, 8, false, false, 0}, /* k_group 1: more bytes than F16 */
    };
    size_t prev_k4 = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wf_kv_profile p;
        wf_kv_profile_init(&p, "t", cases[i].kb, cases[i].vb);
        p.rotate_k = cases[i].rk;
        p.rotate_v = cases[i].rv;
        p.zstd_level = cases[i].zl;
        p.k_group = i >= 9 ? 1 : i % 2 ? 64 : 32;
        size_t len = round_trip(&r, &p, NULL);
        if (cases[i].kb == 16 && cases[i].zl == 0) ck_assert_uint_ge(len, in);
        if (i == 10) ck_assert_uint_gt(len, in); /* 8-bit keys with a scale per element */
        if (cases[i].kb == 4 && cases[i].vb == 4) prev_k4 = len;
        if (cases[i].kb == 4 && cases[i].vb == 2) ck_assert_uint_lt(len, prev_k4);
        if (cases[i].kb == 2 && cases[i].vb == 2) ck_assert_uint_lt(len, in / 5);
    }
    rig_free(&r);
}
END_TEST

START_TEST(hybrid_profile_lowers_least_important_heads) {
    rig r;
    rig_init(&r, 4, 2, 64, 40);
    wf_kv_profile p;
    wf_kv_profile_init(&p, "hyb", 4, 4);
    p.low_k_bits = 2;
    p.low_v_bits = 2;
    p.low_share = 0.25f; /* 2 of 8 heads */
    float imp[8] = {5, 1, 9, 8, 0.5f, 7, 6, 4};
    round_trip(&r, &p, imp);
    wf_kv_codec *c;
    ck_assert_int_eq(wf_kv_codec_new(&r.a.geometry, 64, &c), WF_OK);
    ck_assert_int_eq(wf_kv_codec_set_profile(c, &p, imp, 1), WF_OK);
    const uint8_t *kb = wf_kv_codec_k_bits(c), *vb = wf_kv_codec_v_bits(c);
    for (int i = 0; i < 8; i++) {
        int want = (i == 1 || i == 4) ? 2 : 4;
        ck_assert_int_eq(kb[i], want);
        ck_assert_int_eq(vb[i], want);
    }
    /* No scores: the last layers give way first. */
    ck_assert_int_eq(wf_kv_codec_set_profile(c, &p, NULL, 1), WF_OK);
    ck_assert_int_eq(kb[7], 2);
    ck_assert_int_eq(kb[6], 2);
    ck_assert_int_eq(kb[0], 4);
    /* Bad profiles are refused. */
    p.k_bits = 1;
    ck_assert_int_eq(wf_kv_codec_set_profile(c, &p, NULL, 1), WF_EINVAL);
    char err[128];
    ck_assert_int_eq(wf_kv_profile_check(&p, err, sizeof err), WF_EINVAL);
    ck_assert(strstr(err, "bit widths") != NULL);
    wf_kv_codec_free(c);
    rig_free(&r);
}
END_TEST

/* Encodes a small frame for the rejection tests. */
static uint8_t *make_frame(rig *r, int zstd_level, size_t *len, wf_kv_codec **codec) {
    rig_init(r, 2, 2, 16, 21);
    wf_kv_profile p;
    wf_kv_profile_init(&p, "k4v4", 4, 4);
    p.zstd_level = zstd_level;
    ck_assert_int_eq(wf_kv_codec_new(&r->a.geometry, 64, codec), WF_OK);
    ck_assert_int_eq(wf_kv_codec_set_profile(*codec, &p, NULL, 3), WF_OK);
    size_t cap = wf_kv_codec_max_frame_bytes(*codec, r->n_tokens);
    uint8_t *buf = malloc(cap);
    ck_assert_int_eq(wf_kv_codec_encode(*codec, &r->a, r->blocks_a, r->n_blocks, r->n_tokens,
                                        buf, cap, len, NULL, 0), WF_OK);
    return buf;
}

static bool dest_untouched(const rig *r) {
    size_t n = r->b.block_bytes * (size_t)r->b.n_blocks * (size_t)r->b.geometry.n_layers;
    for (size_t i = 0; i < n; i++)
        if (r->b.k[i] != 0xAB || r->b.v[i] != 0xAB) return false;
    return true;
}

START_TEST(decoder_rejects_truncated_and_corrupt_frames) {
    for (int zl = 0; zl <= 1; zl++) {
        rig r;
        wf_kv_codec *c;
        size_t len;
        uint8_t *f = make_frame(&r, zl, &len, &c);
        char err[256];
        int n;
        /* Every truncation. */
        for (size_t cut = 0; cut < len; cut++) {
            err[0] = 0;
            wf_status st = wf_kv_codec_decode(c, f, cut, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                              sizeof err);
            ck_assert_int_eq(st, WF_EFORMAT);
            ck_assert(err[0] != 0);
        }
        /* Every single-bit flip in a sample of positions (all header bytes). */
        for (size_t pos = 0; pos < len; pos += pos < 80 ? 1 : 13) {
            f[pos] ^= (uint8_t)(1u << (pos % 8));
            wf_status st = wf_kv_codec_decode(c, f, len, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                              sizeof err);
            ck_assert_msg(st != WF_OK, "flip at %zu accepted", pos);
            f[pos] ^= (uint8_t)(1u << (pos % 8));
        }
        ck_assert(dest_untouched(&r));
        /* Trailing bytes. */
        uint8_t *g = malloc(len + 1);
        memcpy(g, f, len);
        g[len] = 0;
        ck_assert_int_eq(wf_kv_codec_decode(c, g, len + 1, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                            sizeof err), WF_EFORMAT);
        ck_assert(strstr(err, "trailing") != NULL);
        free(g);
        /* Named errors. */
        f[0] = 'X';
        ck_assert_int_eq(wf_kv_codec_decode(c, f, len, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                            sizeof err), WF_EFORMAT);
        ck_assert(strstr(err, "magic") != NULL);
        f[0] = 'W';
        f[4] = 9;
        ck_assert_int_eq(wf_kv_codec_decode(c, f, len, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                            sizeof err), WF_EFORMAT);
        ck_assert(strstr(err, "version 9") != NULL);
        f[4] = 1;
        f[len - 1] ^= 1; /* a payload byte: the checksum says so */
        ck_assert_int_eq(wf_kv_codec_decode(c, f, len, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                            sizeof err), WF_EFORMAT);
        ck_assert(strstr(err, "checksum") != NULL);
        f[len - 1] ^= 1;
        /* Oversized: 2^25 tokens, sealed so only the size check can refuse it. */
        uint8_t save[4];
        memcpy(save, f + 20, 4);
        f[20] = 0, f[21] = 0, f[22] = 0, f[23] = 2;
        wf_kv_frame_seal(f, len);
        ck_assert_int_eq(wf_kv_codec_decode(c, f, len, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                            sizeof err), WF_ERANGE);
        ck_assert(strstr(err, "oversized") != NULL);
        /* More tokens than the codec holds (64) but a consistent header otherwise. */
        f[20] = 100, f[21] = 0, f[22] = 0, f[23] = 0;
        wf_kv_frame_seal(f, len);
        ck_assert_int_ne(wf_kv_codec_decode(c, f, len, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                            sizeof err), WF_OK);
        memcpy(f + 20, save, 4);
        wf_kv_frame_seal(f, len);
        /* Too few destination blocks. */
        ck_assert_int_eq(wf_kv_codec_decode(c, f, len, &r.b, r.blocks_b, 1, &n, err, sizeof err),
                         WF_ERANGE);
        /* Another model's geometry. */
        wf_kv_geometry other = r.a.geometry;
        other.n_layers = 3;
        wf_kv_codec *c3;
        ck_assert_int_eq(wf_kv_codec_new(&other, 64, &c3), WF_OK);
        ck_assert_int_eq(wf_kv_codec_decode(c3, f, len, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                            sizeof err), WF_EFORMAT);
        ck_assert(strstr(err, "geometry") != NULL);
        wf_kv_codec_free(c3);
        ck_assert(dest_untouched(&r));
        /* And the untouched frame still decodes. */
        ck_assert_int_eq(wf_kv_codec_decode(c, f, len, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                            sizeof err), WF_OK);
        ck_assert_int_eq(n, r.n_tokens);
        free(f);
        wf_kv_codec_free(c);
        rig_free(&r);
    }
}
END_TEST

START_TEST(sealed_corrupt_zstd_payload_rejected) {
    rig r;
    wf_kv_codec *c;
    size_t len;
    uint8_t *f = make_frame(&r, 3, &len, &c);
    wf_kv_frame_info fi;
    ck_assert_int_eq(wf_kv_frame_parse(f, len, &fi, NULL, 0), WF_OK);
    ck_assert(fi.flags & 1u); /* the test data compresses */
    char err[256];
    int n, rejected = 0;
    size_t off = len - fi.stored_bytes;
    for (size_t pos = off; pos < len; pos++) {
        uint8_t *g = malloc(len);
        memcpy(g, f, len);
        g[pos] ^= 0x5A;
        wf_kv_frame_seal(g, len);
        wf_status st = wf_kv_codec_decode(c, g, len, &r.b, r.blocks_b, r.n_blocks, &n, err,
                                          sizeof err);
        if (st != WF_OK) {
            ck_assert_int_eq(st, WF_EFORMAT);
            rejected++;
        }
        free(g);
    }
    /* zstd's own structure catches most forged payloads (entropy-coded bytes may not). */
    ck_assert_int_gt(rejected, 0);
    free(f);
    wf_kv_codec_free(c);
    rig_free(&r);
}
END_TEST

START_TEST(encoder_argument_errors) {
    rig r;
    rig_init(&r, 2, 2, 16, 20);
    wf_kv_codec *c;
    ck_assert_int_eq(wf_kv_codec_new(&r.a.geometry, 32, &c), WF_OK);
    uint8_t buf[64];
    size_t len;
    char err[128];
    ck_assert_int_eq(wf_kv_codec_encode(c, &r.a, r.blocks_a, 2, 20, buf, sizeof buf, &len, err,
                                        sizeof err), WF_EINVAL); /* no profile */
    wf_kv_profile p;
    wf_kv_profile_init(&p, "k8v8", 8, 8);
    ck_assert_int_eq(wf_kv_codec_set_profile(c, &p, NULL, 0), WF_OK);
    ck_assert_int_eq(wf_kv_codec_encode(c, &r.a, r.blocks_a, 2, 20, buf, sizeof buf, &len, err,
                                        sizeof err), WF_ERANGE); /* small buffer */
    ck_assert_int_eq(wf_kv_codec_encode(c, &r.a, r.blocks_a, 1, 20, buf, sizeof buf, &len, err,
                                        sizeof err), WF_ERANGE); /* too few blocks */
    ck_assert_int_eq(wf_kv_codec_encode(c, &r.a, r.blocks_a, 2, 33, buf, sizeof buf, &len, err,
                                        sizeof err), WF_ERANGE); /* beyond max_tokens */
    wf_kv_codec_free(c);
    wf_kv_geometry bad = r.a.geometry;
    bad.head_dim = 12;
    ck_assert_int_eq(wf_kv_codec_new(&bad, 8, &c), WF_EINVAL);
    bad.head_dim = 24; /* not a power of two: no rotation */
    ck_assert_int_eq(wf_kv_codec_new(&bad, 8, &c), WF_OK);
    ck_assert_int_eq(wf_kv_codec_set_profile(c, &p, NULL, 0), WF_EUNSUPPORTED);
    p.rotate_v = false;
    ck_assert_int_eq(wf_kv_codec_set_profile(c, &p, NULL, 0), WF_OK);
    wf_kv_codec_free(c);
    bad.dtype = WF_KV_DTYPE_F32;
    ck_assert_int_eq(wf_kv_codec_new(&bad, 8, &c), WF_EUNSUPPORTED);
    rig_free(&r);
}
END_TEST

/* A fork-join runner on fresh pthreads (the server would pass its worker pool). */
typedef struct thr_arg {
    void (*fn)(void *ctx, int ith, int nth);
    void *ctx;
    int ith, nth;
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    a->fn(a->ctx, a->ith, a->nth);
    return NULL;
}

static void pthread_run(void *pool, void (*fn)(void *ctx, int ith, int nth), void *ctx) {
    int nth = *(const int *)pool;
    pthread_t t[8];
    thr_arg a[8];
    for (int i = 1; i < nth; i++) {
        a[i] = (thr_arg){fn, ctx, i, nth};
        ck_assert_int_eq(pthread_create(&t[i], NULL, thr_main, &a[i]), 0);
    }
    fn(ctx, 0, nth);
    for (int i = 1; i < nth; i++) pthread_join(t[i], NULL);
}

/* Layer chunks on several threads give the serial frame byte for byte, and decode to the same
 * KV, whether the runner has as many threads as chunks or fewer. */
START_TEST(parallel_layers_match_serial) {
    rig r;
    rig_init(&r, 5, 2, 64, 16 * 3 + 5);
    wf_kv_geometry g = r.a.geometry;
    wf_kv_store serial_out;
    ck_assert_int_eq(wf_kv_store_init(&serial_out, &g, r.b.block_bytes * (size_t)r.b.n_blocks *
                                                           2u * (size_t)g.n_layers), WF_OK);
    wf_kv_profile p;
    wf_kv_profile_init(&p, "k4v4-rk", 4, 4);
    p.rotate_k = true;
    p.low_share = 0.3f;
    p.low_k_bits = 3;
    p.low_v_bits = 8;
    int thread_counts[] = {4, 2};
    for (int zl = 0; zl <= 1; zl++)
        for (int ti = 0; ti < 2; ti++) {
            p.zstd_level = zl;
            wf_kv_codec *s, *m;
            ck_assert_int_eq(wf_kv_codec_new(&g, 128, &s), WF_OK);
            ck_assert_int_eq(wf_kv_codec_new(&g, 128, &m), WF_OK);
            ck_assert_int_eq(wf_kv_codec_set_parallel(m, pthread_run, &thread_counts[ti], 4), WF_OK);
            ck_assert_int_eq(wf_kv_codec_set_profile(s, &p, NULL, 9), WF_OK);
            ck_assert_int_eq(wf_kv_codec_set_profile(m, &p, NULL, 9), WF_OK);
            size_t cap = wf_kv_codec_max_frame_bytes(s, r.n_tokens), la, lb;
            uint8_t *fa = malloc(cap), *fb = malloc(cap);
            ck_assert_int_eq(wf_kv_codec_encode(s, &r.a, r.blocks_a, r.n_blocks, r.n_tokens, fa,
                                                cap, &la, NULL, 0), WF_OK);
            ck_assert_int_eq(wf_kv_codec_encode(m, &r.a, r.blocks_a, r.n_blocks, r.n_tokens, fb,
                                                cap, &lb, NULL, 0), WF_OK);
            ck_assert_uint_eq(la, lb);
            ck_assert_mem_eq(fa, fb, la);
            int n;
            ck_assert_int_eq(wf_kv_codec_decode(m, fb, lb, &r.b, r.blocks_b, r.n_blocks, &n, NULL,
                                                0), WF_OK);
            ck_assert_int_eq(wf_kv_codec_decode(s, fa, la, &serial_out, r.blocks_b, r.n_blocks,
                                                &n, NULL, 0), WF_OK);
            for (int l = 0; l < g.n_layers; l++)
                for (int t = 0; t < r.n_tokens; t++) {
                    ck_assert_mem_eq(rig_row(&r.b, r.blocks_b, false, l, t),
                                     rig_row(&serial_out, r.blocks_b, false, l, t),
                                     r.b.row_elems * 2);
                    ck_assert_mem_eq(rig_row(&r.b, r.blocks_b, true, l, t),
                                     rig_row(&serial_out, r.blocks_b, true, l, t),
                                     r.b.row_elems * 2);
                }
            /* Back to serial. */
            ck_assert_int_eq(wf_kv_codec_set_parallel(m, NULL, NULL, 1), WF_OK);
            ck_assert_int_eq(wf_kv_codec_encode(m, &r.a, r.blocks_a, r.n_blocks, r.n_tokens, fb,
                                                cap, &lb, NULL, 0), WF_OK);
            ck_assert_mem_eq(fa, fb, la);
            ck_assert_int_eq(wf_kv_codec_set_parallel(m, pthread_run, &thread_counts[0], 0),
                             WF_EINVAL);
            free(fa);
            free(fb);
            wf_kv_codec_free(s);
            wf_kv_codec_free(m);
        }
    wf_kv_store_free(&serial_out);
    rig_free(&r);
}
END_TEST

/* A transfer cut into layer slices (the pipelined path) decodes to exactly the KV the whole
 * frame gives, serial or with layer chunks on threads, hybrid widths and rotation included;
 * bad ranges and a slice that reaches beyond the last layer are refused. */
START_TEST(layer_slices_match_whole_frame) {
    rig r;
    rig_init(&r, 7, 2, 64, 16 * 2 + 9);
    wf_kv_geometry g = r.a.geometry;
    wf_kv_store whole;
    ck_assert_int_eq(wf_kv_store_init(&whole, &g, r.b.block_bytes * (size_t)r.b.n_blocks * 2u *
                                                      (size_t)g.n_layers), WF_OK);
    wf_kv_profile p;
    wf_kv_profile_init(&p, "k4v4-rk-h", 4, 4);
    p.rotate_k = true;
    p.low_share = 0.3f;
    p.low_k_bits = 2;
    p.low_v_bits = 3;
    int nth = 2;
    /* The serial slices' bytes: the parallel ones (the workers' codec pool) must equal them. */
    uint8_t *serial_slice[3] = {NULL, NULL, NULL};
    size_t serial_len[3] = {0, 0, 0};
    for (int par = 0; par <= 1; par++) {
        wf_kv_codec *enc, *dec;
        ck_assert_int_eq(wf_kv_codec_new(&g, 128, &enc), WF_OK);
        ck_assert_int_eq(wf_kv_codec_new(&g, 128, &dec), WF_OK);
        if (par) {
            ck_assert_int_eq(wf_kv_codec_set_parallel(enc, pthread_run, &nth, 2), WF_OK);
            ck_assert_int_eq(wf_kv_codec_set_parallel(dec, pthread_run, &nth, 2), WF_OK);
        }
        ck_assert_int_eq(wf_kv_codec_set_profile(enc, &p, NULL, 77), WF_OK);
        size_t cap = wf_kv_codec_max_frame_bytes(enc, r.n_tokens), len;
        uint8_t *buf = malloc(cap);
        int n;
        char err[256] = "";
        ck_assert_int_eq(wf_kv_codec_encode(enc, &r.a, r.blocks_a, r.n_blocks, r.n_tokens, buf, cap,
                                            &len, err, sizeof err), WF_OK);
        ck_assert_int_eq(wf_kv_codec_decode(dec, buf, len, &whole, r.blocks_b, r.n_blocks, &n, err,
                                            sizeof err), WF_OK);
        /* slices of 3, 1 and 3 layers */
        int cuts[] = {0, 3, 4, 7};
        for (int i = 0; i < 3; i++) {
            int nl = cuts[i + 1] - cuts[i];
            size_t scap = wf_kv_codec_max_layers_bytes(enc, r.n_tokens, nl);
            ck_assert_uint_lt(scap, cap);
            ck_assert_msg(wf_kv_codec_encode_layers(enc, &r.a, r.blocks_a, r.n_blocks, r.n_tokens,
                                                    cuts[i], cuts[i + 1], buf, scap, &len, err,
                                                    sizeof err) == WF_OK, "%s", err);
            wf_kv_frame_info fi;
            ck_assert_int_eq(wf_kv_frame_parse(buf, len, &fi, NULL, 0), WF_OK);
            ck_assert_int_eq(fi.n_layers, nl);
            if (!par) {
                serial_slice[i] = malloc(len);
                memcpy(serial_slice[i], buf, len);
                serial_len[i] = len;
            } else {
                ck_assert_uint_eq(len, serial_len[i]);
                ck_assert_mem_eq(buf, serial_slice[i], len);
                free(serial_slice[i]);
            }
            /* as a whole frame it is refused: its layer count is not the model's */
            ck_assert_int_eq(wf_kv_codec_decode(dec, buf, len, &r.b, r.blocks_b, r.n_blocks, &n,
                                                err, sizeof err), WF_EFORMAT);
            /* placed past the last layer: refused before writing */
            ck_assert_int_eq(wf_kv_codec_decode_layers(dec, buf, len, 7 - nl + 1, &r.b, r.blocks_b,
                                                       r.n_blocks, &n, err, sizeof err), WF_EFORMAT);
            ck_assert_ptr_nonnull(strstr(err, "from layer"));
            ck_assert_msg(wf_kv_codec_decode_layers(dec, buf, len, cuts[i], &r.b, r.blocks_b,
                                                    r.n_blocks, &n, err, sizeof err) == WF_OK,
                          "%s", err);
            ck_assert_int_eq(n, r.n_tokens);
        }
        for (int l = 0; l < g.n_layers; l++)
            for (int t = 0; t < r.n_tokens; t++) {
                ck_assert_mem_eq(rig_row(&r.b, r.blocks_b, false, l, t),
                                 rig_row(&whole, r.blocks_b, false, l, t), r.b.row_elems * 2);
                ck_assert_mem_eq(rig_row(&r.b, r.blocks_b, true, l, t),
                                 rig_row(&whole, r.blocks_b, true, l, t), r.b.row_elems * 2);
            }
        int bad[][2] = {{-1, 2}, {3, 3}, {5, 8}, {4, 2}};
        for (int i = 0; i < 4; i++)
            ck_assert_int_eq(wf_kv_codec_encode_layers(enc, &r.a, r.blocks_a, r.n_blocks, r.n_tokens,
                                                       bad[i][0], bad[i][1], buf, cap, &len, err,
                                                       sizeof err), WF_EINVAL);
        /* a slice's buffer below its bound */
        ck_assert_int_eq(wf_kv_codec_encode_layers(enc, &r.a, r.blocks_a, r.n_blocks, r.n_tokens, 0,
                                                   2, buf, wf_kv_codec_max_layers_bytes(enc, r.n_tokens, 2) - 1,
                                                   &len, err, sizeof err), WF_ERANGE);
        free(buf);
        wf_kv_codec_free(enc);
        wf_kv_codec_free(dec);
    }
    wf_kv_store_free(&whole);
    rig_free(&r);
}
END_TEST

static Suite *codec_suite(void) {
    Suite *s = suite_create("kv_codec");
    TCase *t = tcase_create("codec");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, f16_round_trip_every_half);
    tcase_add_test(t, simd_levels_match_scalar);
    tcase_add_test(t, hadamard_is_orthogonal_and_inverts);
    tcase_add_test(t, quantisation_error_bounds_per_width);
    tcase_add_test(t, bit_packing_round_trips);
    tcase_add_test(t, pipeline_round_trip_every_profile_kind);
    tcase_add_test(t, hybrid_profile_lowers_least_important_heads);
    tcase_add_test(t, decoder_rejects_truncated_and_corrupt_frames);
    tcase_add_test(t, sealed_corrupt_zstd_payload_rejected);
    tcase_add_test(t, encoder_argument_errors);
    tcase_add_test(t, parallel_layers_match_serial);
    tcase_add_test(t, layer_slices_match_whole_frame);
    suite_add_tcase(s, t);
    return s;
}

WF_CHECK_MAIN(codec_suite)
