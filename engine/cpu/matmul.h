/* Matrix multiplication of float activations by a (quantised) GGUF weight matrix, the
 * operation that dominates every transformer layer on the CPU.
 *
 *     size_t need = wf_matmul_scratch_size(WF_GGML_TYPE_Q4_1, k, m);   // reserve once, worst case
 *     void *scratch = aligned_alloc(64, round_up(need, 64));
 *     wf_matmul(pool, w->data, w->type, n_out, k, x, m, y, scratch);   // y[m][n_out]
 *
 * Activations are quantised once to the weight type's vec_dot type (wf_quant_ops), rows of W
 * are split across the pool, and for m > 1 each weight row is dotted against a tile of
 * activation rows while it is in cache. Results equal, bit for bit, m separate vec_dot calls
 * per output (ggml's ordering), whatever the thread count. No allocation. */
#ifndef WF_ENGINE_CPU_MATMUL_H
#define WF_ENGINE_CPU_MATMUL_H

#include <stddef.h>

#include "engine/cpu/threadpool.h"
#include "engine/ggml_types.h"

/* Bytes of scratch wf_matmul needs for these shapes (0 is possible: F32 weights use x as is).
 * k must be a multiple of wtype's block size. */
size_t wf_matmul_scratch_size(wf_ggml_type wtype, int k, int m);

/* y[i][j] = sum_t x[i][t] * W[j][t] for i < m, j < n_out; W is n_out rows of k elements of
 * wtype laid out as in GGUF (row j at w + j * row_bytes). x is m rows of k floats; y is m rows
 * of n_out floats (must not alias x). scratch holds wf_matmul_scratch_size(wtype, k, m) bytes
 * (any alignment). pool may be NULL (runs on the caller). Aborts on an unsupported wtype or a k
 * that is not a multiple of its block size (callers validate tensors at load). */
void wf_matmul(wf_threadpool *pool, const void *w, wf_ggml_type wtype, int n_out, int k,
               const float *x, int m, float *y, void *scratch);

/* One weight matrix of a wf_matmul_multi call: n_out rows (layout as in wf_matmul) and its
 * output y[m][n_out]. */
typedef struct wf_matmul_out {
    const void *w;
    int n_out;
    float *y;
} wf_matmul_out;

/* wf_matmul for 1..4 matrices of the same type and row length that share the input x (a
 * layer's q/k/v or gate/up projections): x is quantised once and all their rows are split
 * across the pool in one hand-off. Same results, bit for bit, as separate wf_matmul calls;
 * same scratch size as one wf_matmul with this wtype, k and m. */
void wf_matmul_multi(wf_threadpool *pool, wf_ggml_type wtype, int k, const float *x, int m,
                     const wf_matmul_out *outs, int n_outs, void *scratch);

#endif
