/* GGUF reader (versions 2 and 3): metadata and tensor directory of a model file, validated
 * completely at open time so that nothing read afterwards can point outside the file.
 *
 *     char err[256];
 *     wf_gguf *g;
 *     if (wf_gguf_open(path, &g, err, sizeof err) != WF_OK) { log(err); return; }
 *     uint32_t n_layers;
 *     if (!wf_gguf_get_u32(g, "llama.block_count", &n_layers)) ...;
 *     const wf_gguf_tensor *t = wf_gguf_find_tensor(g, "token_embd.weight");
 *     // t->data points into the mapping: t->size bytes, t->ne[0] elements per row
 *     wf_gguf_close(g);
 *
 * Ownership: every pointer returned (strings, array data, tensors, tensor data) points into the
 * wf_gguf or the mapped file and stays valid until wf_gguf_close(). Strings returned as
 * wf_gguf_str are NOT NUL-terminated; keys and tensor names are (copies).
 * Thread-safety: a wf_gguf is immutable after open; any number of threads may read it.
 * Errors: open returns WF_EFORMAT for a truncated/corrupt/hostile file, WF_EUNSUPPORTED for an
 * unknown version or tensor type, WF_EIO/WF_ENOTFOUND for file system errors, WF_ENOMEM; err
 * receives a message naming the key/tensor, the field and the bad value. */
#ifndef WF_ENGINE_GGUF_H
#define WF_ENGINE_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ggml_types.h"
#include "proto/base/status.h"

typedef struct wf_gguf wf_gguf;

typedef enum wf_gguf_value_type {
    WF_GGUF_UINT8 = 0,
    WF_GGUF_INT8 = 1,
    WF_GGUF_UINT16 = 2,
    WF_GGUF_INT16 = 3,
    WF_GGUF_UINT32 = 4,
    WF_GGUF_INT32 = 5,
    WF_GGUF_FLOAT32 = 6,
    WF_GGUF_BOOL = 7,
    WF_GGUF_STRING = 8,
    WF_GGUF_ARRAY = 9,
    WF_GGUF_UINT64 = 10,
    WF_GGUF_INT64 = 11,
    WF_GGUF_FLOAT64 = 12,
} wf_gguf_value_type;

typedef struct wf_gguf_str {
    const char *data; /* not NUL-terminated */
    uint64_t len;
} wf_gguf_str;

typedef struct wf_gguf_tensor {
    const char *name; /* NUL-terminated */
    int n_dims;       /* 1..4 */
    int64_t ne[4];    /* ne[0] = row length; unused dimensions are 1 */
    wf_ggml_type type;
    const void *data; /* inside the file, aligned to general.alignment from the file start */
    size_t size;      /* bytes, from the type's block geometry */
} wf_gguf_tensor;

/* Opens and validates a file with a read-only private mapping. */
wf_status wf_gguf_open(const char *path, wf_gguf **out, char *err, size_t errlen);
/* Same over a caller's buffer (no copy: the caller keeps data alive until close). Used by the
 * fuzzer and tests. `data` may have any alignment. */
wf_status wf_gguf_open_memory(const void *data, size_t size, wf_gguf **out, char *err,
                              size_t errlen);
void wf_gguf_close(wf_gguf *g); /* NULL is a no-op */

uint32_t wf_gguf_version(const wf_gguf *g);
uint32_t wf_gguf_alignment(const wf_gguf *g);   /* general.alignment, default 32 */
uint64_t wf_gguf_data_offset(const wf_gguf *g); /* start of the tensor data section */
const void *wf_gguf_base(const wf_gguf *g);     /* the whole file */
size_t wf_gguf_size(const wf_gguf *g);

/* Metadata: each getter returns false if the key is missing or has an incompatible type.
 * Integer getters accept any integer type whose value fits (bool is not an integer). */
bool wf_gguf_get_u32(const wf_gguf *g, const char *key, uint32_t *out);
bool wf_gguf_get_i32(const wf_gguf *g, const char *key, int32_t *out);
bool wf_gguf_get_u64(const wf_gguf *g, const char *key, uint64_t *out);
bool wf_gguf_get_i64(const wf_gguf *g, const char *key, int64_t *out);
bool wf_gguf_get_f32(const wf_gguf *g, const char *key, float *out); /* accepts f32/f64 */
bool wf_gguf_get_f64(const wf_gguf *g, const char *key, double *out); /* accepts f32/f64 */
bool wf_gguf_get_bool(const wf_gguf *g, const char *key, bool *out);
bool wf_gguf_get_str(const wf_gguf *g, const char *key, wf_gguf_str *out);

/* Arrays: element type + count; numeric data pointer (little-endian, may be unaligned: read
 * with memcpy). For arrays of strings or arrays, *data is NULL: use wf_gguf_get_array_str
 * (strings; O(1) per index) or treat nested arrays as opaque (validated, not exposed). */
bool wf_gguf_get_array(const wf_gguf *g, const char *key, wf_gguf_value_type *elem_type,
                       uint64_t *n, const void **data);
bool wf_gguf_get_array_str(const wf_gguf *g, const char *key, uint64_t index, wf_gguf_str *out);

int64_t wf_gguf_n_tensors(const wf_gguf *g);
const wf_gguf_tensor *wf_gguf_tensor_at(const wf_gguf *g, int64_t i); /* NULL if out of range */
const wf_gguf_tensor *wf_gguf_find_tensor(const wf_gguf *g, const char *name); /* NULL: none */

/* Enumerates metadata (for dumps/tests), in file order. */
int64_t wf_gguf_n_kv(const wf_gguf *g);
const char *wf_gguf_key_at(const wf_gguf *g, int64_t i); /* NUL-terminated copy; NULL if OOR */
wf_gguf_value_type wf_gguf_type_at(const wf_gguf *g, int64_t i); /* (wf_gguf_value_type)-1 if OOR */
/* Index of a key, or -1. */
int64_t wf_gguf_find_key(const wf_gguf *g, const char *key);

/* "uint8", "string", "array"...; "?" for an unknown value. */
const char *wf_gguf_type_name(wf_gguf_value_type t);

#endif
