/* Attention numerics shared by the forward pass (internal to engine/). weft reproduces the
 * arithmetic of llama.cpp's CPU attention without flash attention (AVX-512 build), so that
 * greedy decoding is token-identical:
 *
 *   scores   s[p] = f16dot(K[p], fp16(q)) * scale                   (ggml_vec_dot_f16)
 *   softmax  e[p] = expf_ggml(s[p] - max), summed per 16-lane chunk in a pairwise tree, chunks
 *            summed in double; prob[p] = e[p] * (float)(1 / sum)     (ggml_vec_soft_max_f32)
 *   output   o[d] = f16dot(V[.][d], fp16(prob))                       (ggml_vec_dot_f16)
 *
 * f16dot(n): elements [0, n & ~63) go to 64 float accumulators (slot = index % 64) by fused
 * multiply-add; slots are combined as s + s+32, s+16 + s+48, then the two, then a pairwise
 * tree over 16 lanes; elements [n & ~63, n) are added in double. Positions beyond the sequence
 * contribute exact zeros (llama.cpp pads the KV view to 256 positions), so only real positions
 * are visited, with slots aligned to position 0. Everything depends only on one (token, head)
 * pair, never on the batch: the forward pass is batch-invariant.
 *
 * The same arithmetic runs in portable C (fmaf) and with AVX2/FMA intrinsics (lane-wise the
 * same operations, so the same bits; tests compare both). */
#ifndef WF_ENGINE_ATTENTION_H
#define WF_ENGINE_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

/* ggml_v_expf's polynomial, evaluated in scalar with the same fused operations. */
float wf_attn_expf(float x);
/* x / (1 + expf_ggml(-x)) */
float wf_attn_silu(float x);

/* Rows of K and V of one kv head: element (p, d) at k_rows[p][d] / v_rows[p][d] (F16). */
typedef struct wf_attn_kv_view {
    const uint16_t *const *k_rows;
    const uint16_t *const *v_rows;
} wf_attn_kv_view;

/* Per-thread scratch for one (token, head) computation at context length up to max_ctx. */
typedef struct wf_attn_scratch {
    float *scores;  /* [max_ctx] */
    uint16_t *prob; /* [max_ctx] */
    float *acc;     /* [64 * head_dim] accumulators, [slot][d] */
} wf_attn_scratch;

size_t wf_attn_scratch_bytes(int max_ctx, int head_dim);
void wf_attn_scratch_init(wf_attn_scratch *s, void *mem, int max_ctx, int head_dim);

/* out[hd] = attention of query q[hd] (hd <= 256) over positions [0, n_pos) of one kv head. */
void wf_attn_one(const float *q, int head_dim, float scale, const wf_attn_kv_view *kv, int n_pos,
                 wf_attn_scratch *s, float *out);

/* ggml_vec_dot_f16 semantics for contiguous halves (exposed for tests). */
float wf_attn_f16dot(int n, const uint16_t *x, const uint16_t *y);

/* 0 = portable C, 1 = AVX2/FMA path (only if the CPU has it). Returns the path in effect.
 * Process-wide; for tests and benchmarks. */
int wf_attn_set_simd(int on);

/* gate[i] = silu(gate[i]) * up[i] for i < n (ggml_vec_swiglu_f32's arithmetic). */
void wf_attn_swiglu(size_t n, float *gate, const float *up);

/* internal: the AVX2 paths (attention_avx2.c) */
void wf_attn_swiglu_avx2(size_t n, float *gate, const float *up);
void wf_attn_one_avx2(const float *q, int head_dim, float scale, const wf_attn_kv_view *kv,
                      int n_pos, wf_attn_scratch *s, float *out);

#endif
