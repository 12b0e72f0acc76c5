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
 * pair, never on the batch: the forward pass is batch-invariant. Rows whose probability rounds
 * to 0 are not skipped (nor are they in llama.cpp); with finite V their fma leaves the slot
 * unchanged, since no slot is ever -0.
 *
 * The same arithmetic runs in portable C (fmaf), with AVX2/FMA intrinsics and with AVX-512
 * (lane-wise the same operations, so the same bits; tests compare all three). The SIMD paths
 * process the query heads of one kv head together (each K/V row widened once for all of them),
 * keep the 64 V slot sums in registers instead of a cleared [64][head_dim] block, and reduce
 * eight score rows at once with shuffles that pair the same operands as the scalar tree. */
#ifndef WF_ENGINE_ATTENTION_H
#define WF_ENGINE_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

/* ggml_v_expf's polynomial, evaluated in scalar with the same fused operations. */
float wf_attn_expf(float x);
/* x / (1 + expf_ggml(-x)) */
float wf_attn_silu(float x);

/* Rows of K and V of one kv head: element (p, d) at k_rows[p][d] / v_rows[p][d] (F16).
 * Positions below `first` are masked (sliding-window attention): their rows must still be
 * readable and finite (the caller points them at a zero row, their blocks may be gone); they
 * get score -inf and probability 0, so they add exact zeros in llama.cpp's order, where the
 * masked cells sit in the same places. */
typedef struct wf_attn_kv_view {
    const uint16_t *const *k_rows;
    const uint16_t *const *v_rows;
    int first;
} wf_attn_kv_view;

/* Most query heads one call processes together (a larger group is done in chunks). */
#define WF_ATTN_MAX_HEADS 4

/* Per-thread scratch for one (token, kv head) computation at context length up to max_ctx. */
typedef struct wf_attn_scratch {
    float *scores;  /* [WF_ATTN_MAX_HEADS][max_ctx] */
    uint16_t *prob; /* [max_ctx] (portable path) */
    float *acc;     /* [64 * head_dim] accumulators, [slot][d] (portable path) */
    int max_ctx;
} wf_attn_scratch;

size_t wf_attn_scratch_bytes(int max_ctx, int head_dim);
void wf_attn_scratch_init(wf_attn_scratch *s, void *mem, int max_ctx, int head_dim);

/* out[hd] = attention of query q[hd] (hd <= 256) over positions [0, n_pos) of one kv head.
 * The same as wf_attn_group with n_q = 1. */
void wf_attn_one(const float *q, int head_dim, float scale, const wf_attn_kv_view *kv, int n_pos,
                 wf_attn_scratch *s, float *out);

/* Attention of n_q >= 1 query heads that share one kv head (grouped-query attention): query j
 * is q[j * head_dim ..], its output goes to out[j * head_dim ..]. Each K and V row is loaded
 * and converted once for all of them; every head's result has exactly the bits wf_attn_one
 * gives it alone (which heads are grouped never changes the arithmetic). Not thread-safe on
 * one scratch. */
void wf_attn_group(const float *q, int n_q, int head_dim, float scale, const wf_attn_kv_view *kv,
                   int n_pos, wf_attn_scratch *s, float *out);

/* ggml_vec_dot_f16 semantics for contiguous halves (exposed for tests). */
float wf_attn_f16dot(int n, const uint16_t *x, const uint16_t *y);

/* 0 = portable C, 1 = AVX2/FMA path, 2 = AVX-512 path (the highest of these the CPU, capped by
 * WEFT_CPU_ISA, allows). Returns the path in effect. Process-wide; for tests and benchmarks.
 * The default is the best path available. */
int wf_attn_set_simd(int on);

/* gate[i] = silu(gate[i]) * up[i] for i < n (ggml_vec_swiglu_f32's arithmetic). */
void wf_attn_swiglu(size_t n, float *gate, const float *up);

/* gate[i] = gelu(gate[i]) * up[i] for i < n with ggml_vec_geglu_f32's lookup: tab holds GELU
 * (tanh approximation) at every F16 value, as F16 (65536 entries, indexed by F16 bits); inputs
 * at or below -10 give 0, at or above 10 give x * up. */
void wf_attn_geglu(const uint16_t *tab, size_t n, float *gate, const float *up);

/* NEOX-style rotary embedding of one head (Gemma 3, Qwen): pairs (x[k], x[k + n_rot/2]) turned
 * by cache[2k] (cos) and cache[2k + 1] (sin) as llama.cpp's compiled rotate_pairs does:
 * x0' = fma(x0, cos, -(x1 * sin)), x1' = fma(x0, sin, x1 * cos). The AVX2 path does eight pairs
 * at once with the same fused operations (the portable one calls fmaf per element). */
void wf_attn_rope_neox(const float *cache, int n_rot, float *x);

/* internal: scores of positions below first set to -inf, *mx recomputed over the rest. */
void wf__attn_mask_prefix(float *sc, int first, int n_pos, float *mx);

/* internal: the AVX2 paths (attention_avx2.c) and the AVX-512 one (attention_avx512.c, head
 * sizes that are multiples of 64) */
void wf_attn_softmax_prob_avx2(float *sc, int n_pos, float mx);
void wf_attn_group_avx512(const float *q, int n_q, int head_dim, float scale,
                          const wf_attn_kv_view *kv, int n_pos, wf_attn_scratch *s, float *out);
void wf_attn_swiglu_avx2(size_t n, float *gate, const float *up);
void wf_attn_geglu_avx2(const uint16_t *tab, size_t n, float *gate, const float *up);
void wf_attn_rope_neox_avx2(const float *cache, int n_rot, float *x);
void wf_attn_group_avx2(const float *q, int n_q, int head_dim, float scale,
                        const wf_attn_kv_view *kv, int n_pos, wf_attn_scratch *s, float *out);

/* internal: helpers shared by the x86 paths (files built with AVX2/FMA/F16C or more) */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* K rows this many positions ahead are prefetched: a kv head's rows are strided inside paged
 * blocks scattered in memory, which the hardware prefetchers follow poorly, and at large
 * batches they come from DRAM. */
#define WF_ATTN_PF_AHEAD 16
/* Loops over heads and registers are unrolled so that the accumulators stay in registers
 * (kept in memory, every fma waits on a store-to-load round trip: measured 2.7x slower). */
#define WF_ATTN_UNROLL _Pragma("GCC unroll 4")

/* hint 0: into L1 (read next), otherwise into L2 (read after the score phase) */
static inline void wf_attn_prefetch_row(const uint16_t *r, int hd, int hint) {
    for (int b = 0; b < hd * 2; b += 64) {
        if (hint == 0)
            _mm_prefetch((const char *)r + b, _MM_HINT_T0);
        else
            _mm_prefetch((const char *)r + b, _MM_HINT_T1);
    }
}

static inline __m256 wf_attn_load_h8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* pairwise tree of 8 lanes with the order of _mm512_reduce_add_ps's lower levels:
 * l+4, l+2, l+1 */
static inline float wf_attn_tree8(__m256 t) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    __m128 c = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(c);
}

/* wf_attn_tree8 of eight rows at once: lane i = tree8(r[i]), each sum formed from the same two
 * operands as in tree8 (lanes l + l+4, then l + l+2, then l + l+1), so the same bits. */
static inline __m256 wf_attn_tree8x8(const __m256 *r) {
    __m256 p04 = _mm256_add_ps(_mm256_permute2f128_ps(r[0], r[4], 0x20),
                               _mm256_permute2f128_ps(r[0], r[4], 0x31));
    __m256 p15 = _mm256_add_ps(_mm256_permute2f128_ps(r[1], r[5], 0x20),
                               _mm256_permute2f128_ps(r[1], r[5], 0x31));
    __m256 p26 = _mm256_add_ps(_mm256_permute2f128_ps(r[2], r[6], 0x20),
                               _mm256_permute2f128_ps(r[2], r[6], 0x31));
    __m256 p37 = _mm256_add_ps(_mm256_permute2f128_ps(r[3], r[7], 0x20),
                               _mm256_permute2f128_ps(r[3], r[7], 0x31));
    /* [r0 r0 r1 r1 | r4 r4 r5 r5] and [r2 r2 r3 r3 | r6 r6 r7 r7] */
    __m256 q01 = _mm256_add_ps(_mm256_shuffle_ps(p04, p15, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(p04, p15, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 q23 = _mm256_add_ps(_mm256_shuffle_ps(p26, p37, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(p26, p37, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_add_ps(_mm256_shuffle_ps(q01, q23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(q01, q23, _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

#endif
