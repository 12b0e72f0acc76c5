/* safetensors reader: the 8-byte header length, the JSON header (tensor name -> dtype, shape,
 * data_offsets; an optional "__metadata__" object of strings) and the raw data that follows,
 * validated completely at open time so nothing read afterwards can point outside the file.
 *
 *     char err[256];
 *     wf_safetensors *st;
 *     if (wf_safetensors_open(path, &st, err, sizeof err) != WF_OK) { log(err); return; }
 *     const wf_safetensors_tensor *t = wf_safetensors_find(st, "pos_embed.proj.weight");
 *     // t->data: t->size bytes of t->dtype, row-major, t->shape[0..n_dims); any alignment
 *     wf_safetensors_close(st);
 *
 * Accepted dtypes are F32, F16 and BF16; other valid safetensors dtypes (F64, I64, U8, BOOL,
 * F8_E4M3, ...) are rejected by name (WF_EUNSUPPORTED). Rejected as WF_EFORMAT, each with a
 * message naming the tensor and field: a file shorter than 8 bytes, a header length beyond the
 * file, a header that is not one JSON object, duplicate names, a missing or malformed dtype,
 * shape or data_offsets, unknown fields, more than 8 dimensions or a size that overflows,
 * shape x dtype size != data_offsets range, offsets out of the data section, overlapping
 * ranges, and data bytes covered by no tensor (the reference implementation rejects holes too).
 *
 * Ownership: names, metadata strings and tensor data stay valid until wf_safetensors_close().
 * Tensor data points into the file mapping (or the caller's buffer for _open_memory, which must
 * outlive the reader). Thread-safety: immutable after open; any number of threads may read. */
#ifndef WF_ENGINE_DIT_SAFETENSORS_H
#define WF_ENGINE_DIT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

#define WF_SAFETENSORS_MAX_DIMS 8

typedef enum wf_safetensors_dtype {
    WF_SAFETENSORS_F32 = 0,
    WF_SAFETENSORS_F16 = 1,
    WF_SAFETENSORS_BF16 = 2,
} wf_safetensors_dtype;

typedef struct wf_safetensors_tensor {
    const char *name; /* NUL-terminated copy */
    wf_safetensors_dtype dtype;
    int n_dims;       /* 0..WF_SAFETENSORS_MAX_DIMS (0 = a scalar) */
    int64_t shape[WF_SAFETENSORS_MAX_DIMS];
    int64_t n_elements;
    const void *data; /* any alignment: read with memcpy or the converters below */
    size_t size;      /* bytes = n_elements * element size */
} wf_safetensors_tensor;

typedef struct wf_safetensors wf_safetensors;

/* Maps and validates the file. On failure *out is NULL and err says why. WF_ENOTFOUND/WF_EIO for
 * file system errors, WF_EFORMAT/WF_EUNSUPPORTED as above, WF_ENOMEM. */
wf_status wf_safetensors_open(const char *path, wf_safetensors **out, char *err, size_t errlen);

/* As _open, over size bytes the caller keeps alive (and unchanged) until close. */
wf_status wf_safetensors_open_memory(const void *data, size_t size, wf_safetensors **out,
                                     char *err, size_t errlen);

/* Unmaps and frees. NULL is a no-op. */
void wf_safetensors_close(wf_safetensors *st);

/* Tensors in name order. */
int64_t wf_safetensors_n_tensors(const wf_safetensors *st);
const wf_safetensors_tensor *wf_safetensors_tensor_at(const wf_safetensors *st, int64_t i);
/* NULL if absent. O(log n). */
const wf_safetensors_tensor *wf_safetensors_find(const wf_safetensors *st, const char *name);

/* A "__metadata__" value, or NULL if absent. */
const char *wf_safetensors_metadata(const wf_safetensors *st, const char *key);

/* "F32", "F16", "BF16". */
const char *wf_safetensors_dtype_name(wf_safetensors_dtype dtype);

/* Converts n elements of t (n <= t->n_elements, from element 0) to fp32. No allocation. */
void wf_safetensors_to_f32(const wf_safetensors_tensor *t, float *dst, int64_t n);

#endif
