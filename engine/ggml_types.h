/* Tensor element types, numbered as in GGUF files (ggml's enum), with their block geometry.
 * Shared by the GGUF reader (to validate tensor sizes) and the CPU kernels (to dispatch).
 *
 *     const wf_ggml_type_info *ti = wf_ggml_type_info_get(WF_GGML_TYPE_Q4_1);
 *     size_t row_bytes = (size_t)(n / ti->block_size) * ti->type_size;   // n % block_size == 0
 *
 * Thread-safe; no allocation. */
#ifndef WF_ENGINE_GGML_TYPES_H
#define WF_ENGINE_GGML_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum wf_ggml_type {
    WF_GGML_TYPE_F32 = 0,
    WF_GGML_TYPE_F16 = 1,
    WF_GGML_TYPE_Q4_0 = 2,
    WF_GGML_TYPE_Q4_1 = 3,
    WF_GGML_TYPE_Q5_0 = 6,
    WF_GGML_TYPE_Q5_1 = 7,
    WF_GGML_TYPE_Q8_0 = 8,
    WF_GGML_TYPE_Q8_1 = 9,
    WF_GGML_TYPE_Q2_K = 10,
    WF_GGML_TYPE_Q3_K = 11,
    WF_GGML_TYPE_Q4_K = 12,
    WF_GGML_TYPE_Q5_K = 13,
    WF_GGML_TYPE_Q6_K = 14,
    WF_GGML_TYPE_Q8_K = 15,
    WF_GGML_TYPE_BF16 = 30,
    WF_GGML_TYPE_COUNT = 40, /* bound for tables; not every value below it is a type */
} wf_ggml_type;

typedef struct wf_ggml_type_info {
    const char *name;  /* "q4_1" */
    int block_size;    /* elements per block (1 for F32/F16/BF16) */
    size_t type_size;  /* bytes per block */
    bool supported;    /* weft has kernels for it (dequantise + dot product) */
} wf_ggml_type_info;

/* NULL for a value that is not a known type (a corrupt or newer file). */
const wf_ggml_type_info *wf_ggml_type_info_get(uint32_t type);

#endif
