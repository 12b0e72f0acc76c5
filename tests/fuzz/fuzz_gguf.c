/* libFuzzer target for the GGUF reader: open any bytes with wf_gguf_open_memory and, when that
 * succeeds, walk every key with every getter, every string-array element and every tensor's
 * first and last data byte (ASan catches anything outside the input).
 * weft-fuzz: covers=engine/gguf.c */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void walk_key(const wf_gguf *g, const char *key) {
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f;
    double d;
    bool b;
    wf_gguf_str s;
    if (wf_gguf_get_u32(g, key, &u32)) sink += u32;
    if (wf_gguf_get_i32(g, key, &i32)) sink += (uint64_t)i32;
    if (wf_gguf_get_u64(g, key, &u64)) sink += u64;
    if (wf_gguf_get_i64(g, key, &i64)) sink += (uint64_t)i64;
    if (wf_gguf_get_f32(g, key, &f)) sink += (uint64_t)(f == f);
    if (wf_gguf_get_f64(g, key, &d)) sink += (uint64_t)(d == d);
    if (wf_gguf_get_bool(g, key, &b)) sink += b;
    if (wf_gguf_get_str(g, key, &s) && s.len)
        sink += (uint8_t)s.data[0] + (uint8_t)s.data[s.len - 1];
    wf_gguf_value_type et;
    uint64_t n;
    const void *arr;
    if (!wf_gguf_get_array(g, key, &et, &n, &arr)) return;
    if (arr && n) {
        uint8_t first, last;
        size_t es = et == WF_GGUF_UINT8 || et == WF_GGUF_INT8 || et == WF_GGUF_BOOL ? 1
                    : et == WF_GGUF_UINT16 || et == WF_GGUF_INT16                    ? 2
                    : et == WF_GGUF_UINT64 || et == WF_GGUF_INT64 || et == WF_GGUF_FLOAT64 ? 8
                                                                                            : 4;
        memcpy(&first, arr, 1);
        memcpy(&last, (const uint8_t *)arr + n * es - 1, 1);
        sink += first + last;
    }
    for (uint64_t i = 0; i < n && i < 4096; i++)
        if (wf_gguf_get_array_str(g, key, i, &s) && s.len)
            sink += (uint8_t)s.data[0] + (uint8_t)s.data[s.len - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy: a read one byte past the input is an ASan error even when the fuzzer's
     * own buffer has slack. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    wf_gguf *g = NULL;
    char err[256];
    if (wf_gguf_open_memory(copy, size, &g, err, sizeof err) == WF_OK) {
        for (int64_t i = 0; i < wf_gguf_n_kv(g); i++) {
            const char *key = wf_gguf_key_at(g, i);
            sink += (uint64_t)wf_gguf_type_at(g, i) + strlen(key);
            walk_key(g, key);
        }
        for (int64_t i = 0; i < wf_gguf_n_tensors(g); i++) {
            const wf_gguf_tensor *t = wf_gguf_tensor_at(g, i);
            if (wf_gguf_find_tensor(g, t->name) != t) abort();
            const uint8_t *p = t->data;
            if (t->size) sink += p[0] + p[t->size - 1];
            sink += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        }
        sink += wf_gguf_version(g) + wf_gguf_alignment(g) + wf_gguf_data_offset(g);
        wf_gguf_close(g);
    } else if (g != NULL || err[0] == '\0') {
        abort(); /* a failure must leave *out NULL and say why */
    }
    free(copy);
    return 0;
}
