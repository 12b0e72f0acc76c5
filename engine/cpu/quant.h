/* Tensor element types on the CPU: fp16/bf16 conversion, and per type a vtable to dequantise,
 * quantise and take dot products, bit-compatible with ggml (GGUF block layouts, ggml's
 * reference rounding, ggml's accumulation structure), so weft's logits match llama.cpp's.
 *
 *     const wf_quant_ops *w = wf_quant_ops_get(WF_GGML_TYPE_Q4_1);   // best ISA of this CPU
 *     const wf_quant_ops *a = wf_quant_ops_get(w->vec_dot_type);      // Q8_1
 *     a->from_float(x, xq, k);                // activations quantised once per row
 *     for (int r = 0; r < n_out; r++)
 *         w->vec_dot(k, &y[r], (const char *)W + r * row_bytes, xq);
 *
 * All functions are thread-safe and allocate nothing. Element counts n must be multiples of
 * the type's block size (wf_ggml_type_info_get(t)->block_size). Block data must be aligned to
 * its scale field (2 bytes; 4 for Q8_K and F32), as it always is inside GGUF tensors.
 *
 * Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K (weights) and Q8_1, Q8_K
 * (activations only: vec_dot is NULL). Every slot has a scalar reference; the AVX2 and
 * AVX-512 paths specialise what pays (see quant_avx2.c / quant_avx512.c), the rest falls back.
 * On x86 the SIMD dot products of the block types, and all activation quantisers, reproduce
 * llama.cpp's ggml bit for bit (tests/engine/cpu/test_ggml_parity.c); the scalar dot products
 * follow ggml's generic code and agree to ~1e-6 relative. */
#ifndef WF_ENGINE_CPU_QUANT_H
#define WF_ENGINE_CPU_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/cpu/features.h"
#include "engine/ggml_types.h"
#include "proto/base/half.h" /* wf_fp16_to_fp32 and friends */

typedef struct wf_quant_ops {
    /* the type activations are quantised to for vec_dot (as ggml: Q4_0/Q5_0/Q8_0 -> Q8_0,
     * Q4_1/Q5_1 -> Q8_1, K-quants -> Q8_K, F16 -> F16, BF16 -> BF16, F32 -> F32) */
    wf_ggml_type vec_dot_type;
    /* dequantise n elements (multiple of block size) */
    void (*to_float)(const void *src, float *dst, int64_t n);
    /* quantise n elements exactly as ggml's CPU backend does on x86 when it quantises
     * activations for vec_dot: for Q8_0/Q8_1 that is its AVX2 routine (d = amax/127, scale by
     * 127/amax, round half to even), for every other type the reference quantiser. Every ISA
     * path gives identical bytes. */
    void (*from_float)(const float *src, void *dst, int64_t n);
    /* *s = dot(row x of this type, row y of vec_dot_type), n elements. NULL for Q8_1/Q8_K. */
    void (*vec_dot)(int n, float *s, const void *x, const void *y);
    /* ggml's quantize_row_<type>_ref: what GGUF converters (and gguf-py) write. Equals
     * from_float except for Q8_0/Q8_1, whose reference rounds half away from zero with 1/d. */
    void (*from_float_ref)(const float *src, void *dst, int64_t n);
    /* Optional (NULL: call vec_dot per pair). A register tile of nr <= WF_QUANT_TILE_NR rows
     * of this type (row r at x + r*bx bytes) times nc <= WF_QUANT_TILE_NC rows of vec_dot_type
     * (row c at y + c*by): s[c*ss + r] = dot(x row r, y row c), each bit-identical to vec_dot.
     * What makes batched matmul compute-efficient; wf_matmul uses it. */
    void (*vec_dot_tile)(int n, float *s, size_t ss, const void *x, size_t bx, const void *y,
                         size_t by, int nr, int nc);
    /* Optional (NULL: no panel path). nr rows of this type (row r at x + r*bx) times the
     * nc <= WF_QUANT_PANEL_ROWS activation rows of one panel packed by
     * panel_pack: s[c*ss + r] = dot(x row r, activation row c), each bit-identical to vec_dot.
     * The fastest batched path where it exists (AVX-512). */
    void (*panel_dot)(int n, float *s, size_t ss, const void *x, size_t bx, const void *panel,
                      int nr, int nc);
    /* Set with panel_dot: packs nrows <= WF_QUANT_PANEL_ROWS activation rows of n elements,
     * already quantised to vec_dot_type (row i at xq + i*xq_row), into one panel of
     * wf_quant_panel_size bytes at a 64-byte aligned address; missing rows are zeros. */
    void (*panel_pack)(const void *xq, size_t xq_row, int nrows, int n, void *panel);
    /* Optional (NULL: vec_dot_tile or vec_dot per row). nr rows of this type, nr a multiple of
     * WF_QUANT_MATVEC_ROWS (row r at x + r*bx), times one row y of vec_dot_type:
     * s[r] = dot(x row r, y), each bit-identical to vec_dot. The decode (m = 1) path. */
    void (*matvec)(int n, float *s, const void *x, size_t bx, const void *y, int nr);
} wf_quant_ops;

#define WF_QUANT_TILE_NR 4      /* weight rows per tile */
#define WF_QUANT_TILE_NC 4      /* activation rows per tile */
#define WF_QUANT_PANEL_ROWS 16  /* activation rows per packed panel */
#define WF_QUANT_MATVEC_ROWS 16 /* weight rows per matvec tile */

/* Bytes of one panel of WF_QUANT_PANEL_ROWS activation rows of k elements, packed for weights
 * of type wtype; 0 if wtype has no panel layout (the 32-element block types and Q4_K/Q6_K have
 * one; the K-quants' holds Q8_K rows, wf_kpanel_block in quant_impl.h). */
size_t wf_quant_panel_size(wf_ggml_type wtype, int k);

/* Best ISA path for this CPU (after the WEFT_CPU_ISA cap); NULL if the type is unsupported. */
const wf_quant_ops *wf_quant_ops_get(wf_ggml_type t);

/* A specific path, for tests and benchmarks. Where `isa` has no specialisation for a type the
 * next lower path is returned; the scalar path always exists for supported types. The caller
 * must not ask for an ISA the CPU lacks (see wf_cpu_features_get()). NULL if unsupported. */
const wf_quant_ops *wf_quant_ops_for_isa(wf_ggml_type t, wf_cpu_isa isa);

/* Bytes of one row of n elements of type t (n a multiple of the block size); 0 if unknown. */
size_t wf_quant_row_size(wf_ggml_type t, int64_t n);

#endif
