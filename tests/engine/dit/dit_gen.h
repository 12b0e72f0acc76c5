/* Test and benchmark support for the DiT: the counter-based weight generator shared with
 * scripts/make_dit_fixtures.py (same names, same values, bit for bit) and a small safetensors
 * writer, so large random-weight models are rebuilt here instead of committed.
 *
 * Value i of tensor `name`: z = splitmix64((fnv1a(name) ^ seed) + (i + 1) * golden);
 * k = (z >> 56) - 128; value = k / 128 * 2^-e, e = floor(log4(fan_in)) (16 for biases). */
#ifndef WF_TESTS_DIT_GEN_H
#define WF_TESTS_DIT_GEN_H

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dit_gen_cfg {
    int hidden, heads, depth, in_channels, out_channels, patch, sample, num_classes;
} dit_gen_cfg;

static inline uint64_t dit_gen_fnv1a(const char *s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
    return h;
}

static inline void dit_gen_values(const char *name, size_t n, int e, uint64_t seed, float *out) {
    uint64_t key = dit_gen_fnv1a(name) ^ seed;
    for (size_t i = 0; i < n; i++) {
        uint64_t z = key + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        int k = (int)(z >> 56) - 128;
        out[i] = (float)ldexp((double)k / 128.0, -e);
    }
}

static inline int dit_gen_fan_exp(long fan_in) {
    int e = 0;
    while ((1L << (2 * (e + 1))) <= fan_in) e++;
    return e;
}

/* ---- safetensors writer (F32 only) --------------------------------------------------------- */

typedef struct dit_st_writer {
    json_t *hdr;
    float **data;
    size_t *n;
    int count, cap;
    size_t off;
} dit_st_writer;

static inline void dit_st_init(dit_st_writer *w) {
    memset(w, 0, sizeof *w);
    w->hdr = json_object();
}

/* Takes ownership of data (malloc'd, n floats). */
static inline void dit_st_add(dit_st_writer *w, const char *name, int nd, const long *shape, float *data,
                              size_t n) {
    json_t *t = json_object(), *sh = json_array(), *off = json_array();
    for (int i = 0; i < nd; i++) json_array_append_new(sh, json_integer(shape[i]));
    json_array_append_new(off, json_integer((json_int_t)w->off));
    json_array_append_new(off, json_integer((json_int_t)(w->off + n * 4)));
    json_object_set_new(t, "dtype", json_string("F32"));
    json_object_set_new(t, "shape", sh);
    json_object_set_new(t, "data_offsets", off);
    json_object_set_new(w->hdr, name, t);
    if (w->count == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->data = realloc(w->data, (size_t)w->cap * sizeof *w->data);
        w->n = realloc(w->n, (size_t)w->cap * sizeof *w->n);
    }
    w->data[w->count] = data;
    w->n[w->count++] = n;
    w->off += n * 4;
}

/* Writes and frees. Returns 0 on success. */
static inline int dit_st_finish(dit_st_writer *w, const char *path) {
    char *js = json_dumps(w->hdr, JSON_COMPACT);
    size_t hl = strlen(js), pad = (8 - hl % 8) % 8;
    FILE *f = fopen(path, "wb");
    int rc = -1;
    if (f) {
        uint64_t len = hl + pad;
        fwrite(&len, 8, 1, f);
        fwrite(js, 1, hl, f);
        for (size_t i = 0; i < pad; i++) fputc(' ', f);
        for (int i = 0; i < w->count; i++) fwrite(w->data[i], 4, w->n[i], f);
        rc = fclose(f) == 0 ? 0 : -1;
    }
    free(js);
    for (int i = 0; i < w->count; i++) free(w->data[i]);
    free(w->data);
    free(w->n);
    json_decref(w->hdr);
    return rc;
}

static inline void dit_gen_put(dit_st_writer *w, uint64_t seed, const char *name, int nd, const long *shape,
                               long fan_in) {
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)shape[i];
    float *d = malloc(n * sizeof *d);
    dit_gen_values(name, n, dit_gen_fan_exp(fan_in), seed, d);
    dit_st_add(w, name, nd, shape, d, n);
}

/* Writes the original-layout model of make_dit_fixtures.py's original_weights(cfg, seed). */
static inline int dit_gen_write_original(const dit_gen_cfg *c, uint64_t seed, const char *path) {
    dit_st_writer w;
    dit_st_init(&w);
    long D = c->hidden, p = c->patch, C = c->in_channels, oc = c->out_channels;
    char n[128];
#define PUT1(name, a, fan) dit_gen_put(&w, seed, name, 1, (long[]){a}, fan)
#define PUT2(name, a, b, fan) dit_gen_put(&w, seed, name, 2, (long[]){a, b}, fan)
    dit_gen_put(&w, seed, "x_embedder.proj.weight", 4, (long[]){D, C, p, p}, C * p * p);
    PUT1("x_embedder.proj.bias", D, 16);
    PUT2("t_embedder.mlp.0.weight", D, 256, 256);
    PUT1("t_embedder.mlp.0.bias", D, 16);
    PUT2("t_embedder.mlp.2.weight", D, D, D);
    PUT1("t_embedder.mlp.2.bias", D, 16);
    PUT2("y_embedder.embedding_table.weight", (long)c->num_classes + 1, D, 1);
    for (int b = 0; b < c->depth; b++) {
#define BN(s) (snprintf(n, sizeof n, "blocks.%d.%s", b, s), n)
        PUT2(BN("attn.qkv.weight"), 3 * D, D, D);
        PUT1(BN("attn.qkv.bias"), 3 * D, 16);
        PUT2(BN("attn.proj.weight"), D, D, D);
        PUT1(BN("attn.proj.bias"), D, 16);
        PUT2(BN("mlp.fc1.weight"), 4 * D, D, D);
        PUT1(BN("mlp.fc1.bias"), 4 * D, 16);
        PUT2(BN("mlp.fc2.weight"), D, 4 * D, 4 * D);
        PUT1(BN("mlp.fc2.bias"), D, 16);
        PUT2(BN("adaLN_modulation.1.weight"), 6 * D, D, D);
        PUT1(BN("adaLN_modulation.1.bias"), 6 * D, 16);
#undef BN
    }
    PUT2("final_layer.adaLN_modulation.1.weight", 2 * D, D, D);
    PUT1("final_layer.adaLN_modulation.1.bias", 2 * D, 16);
    PUT2("final_layer.linear.weight", p * p * oc, D, D);
    PUT1("final_layer.linear.bias", p * p * oc, 16);
#undef PUT1
#undef PUT2
    return dit_st_finish(&w, path);
}

#endif
