/* Attention for one (token, head) pair with llama.cpp's CPU arithmetic (see attention.h for
 * the recipe). This is the portable reference; attention_avx2.c performs the same operations
 * lane by lane with intrinsics. No expression here may be contracted into an FMA other than
 * the explicit fmaf calls (the file is built without FMA code generation). */
#include "engine/attention.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "engine/cpu/features.h"
#include "engine/cpu/quant.h"

float wf_attn_expf(float x) {
    /* ggml_v_expf (AVX-512 variant): 2^n * p(b) with n = round(x / ln2), b the reduced
     * argument, every step one fused multiply-add exactly as the vector code. */
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r);
    float n = z - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                        fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                   u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (!(fabsf(n) <= 192.0f)) return isnan(n) ? n : n <= 0.0f ? 0.0f : INFINITY;
    return ldexpf(j, (int)n);
}

float wf_attn_silu(float x) {
    return x / (1.0f + wf_attn_expf(0.0f - x));
}

/* GGML_F32Cx16_REDUCE + _mm512_reduce_add_ps over 64 slots at stride `stride`. */
static float reduce64(const float *slot, size_t stride) {
    float a[16];
    for (int l = 0; l < 16; l++) {
        float x0 = slot[(size_t)l * stride] + slot[(size_t)(l + 32) * stride];
        float x1 = slot[(size_t)(l + 16) * stride] + slot[(size_t)(l + 48) * stride];
        a[l] = x0 + x1;
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) a[l] = a[l] + a[l + w];
    return a[0];
}

float wf_attn_f16dot(int n, const uint16_t *x, const uint16_t *y) {
    int np = n & ~63;
    double sumf = 0.0;
    if (np > 0) {
        float acc[64];
        for (int i = 0; i < 64; i++) acc[i] = 0.0f;
        for (int i = 0; i < np; i++)
            acc[i & 63] = fmaf(wf_fp16_to_fp32(x[i]), wf_fp16_to_fp32(y[i]), acc[i & 63]);
        sumf = (double)reduce64(acc, 1);
    }
    for (int i = np; i < n; i++)
        sumf += (double)(wf_fp16_to_fp32(x[i]) * wf_fp16_to_fp32(y[i]));
    return (float)sumf;
}

/* -1: not decided yet. Worker threads may decide it concurrently (to the same value), hence
 * relaxed atomic accesses. */
static int g_simd = -1;

int wf_attn_set_simd(int on) {
    const wf_cpu_features *f = wf_cpu_features_get();
    int best = f->isa >= WF_CPU_ISA_AVX512 ? 2 : f->isa >= WF_CPU_ISA_AVX2 ? 1 : 0;
    int v = on < 0 ? 0 : on < best ? on : best;
    __atomic_store_n(&g_simd, v, __ATOMIC_RELAXED);
    return v;
}

static int simd_level(void) {
    int v = __atomic_load_n(&g_simd, __ATOMIC_RELAXED);
    return v >= 0 ? v : wf_attn_set_simd(2);
}

size_t wf_attn_scratch_bytes(int max_ctx, int head_dim) {
    size_t a = ((size_t)WF_ATTN_MAX_HEADS * (size_t)max_ctx * sizeof(float) + 63) & ~(size_t)63;
    size_t b = ((size_t)max_ctx * sizeof(uint16_t) + 63) & ~(size_t)63;
    size_t c = ((size_t)head_dim * 64 * sizeof(float) + 63) & ~(size_t)63;
    return a + b + c;
}

void wf_attn_scratch_init(wf_attn_scratch *s, void *mem, int max_ctx, int head_dim) {
    unsigned char *p = mem;
    s->scores = (float *)(void *)p;
    p += ((size_t)WF_ATTN_MAX_HEADS * (size_t)max_ctx * sizeof(float) + 63) & ~(size_t)63;
    s->prob = (uint16_t *)(void *)p;
    p += ((size_t)max_ctx * sizeof(uint16_t) + 63) & ~(size_t)63;
    s->acc = (float *)(void *)p;
    s->max_ctx = max_ctx;
    (void)head_dim;
}

void wf__attn_mask_prefix(float *sc, int first, int n_pos, float *mx) {
    float m = -INFINITY;
    for (int p = 0; p < first && p < n_pos; p++) sc[p] = -INFINITY;
    for (int p = first; p < n_pos; p++) m = sc[p] > m ? sc[p] : m;
    *mx = m;
}

static void attn_one_c(const float *q, int hd, float scale, const wf_attn_kv_view *kv,
                       int n_pos, wf_attn_scratch *s, float *out) {
    uint16_t q16[256];
    for (int i = 0; i < hd; i++) q16[i] = wf_fp32_to_fp16(q[i]);
    float *sc = s->scores;
    float mx = -INFINITY;
    for (int p = 0; p < n_pos; p++) {
        float v = wf_attn_f16dot(hd, kv->k_rows[p], q16) * scale;
        sc[p] = v;
        if (v > mx) mx = v;
    }
    if (kv->first > 0) wf__attn_mask_prefix(sc, kv->first, n_pos, &mx);
    /* softmax: exp per element, 16-lane chunks aligned to position 0 reduced pairwise in
     * float, chunk sums accumulated in double */
    double sum = 0.0;
    for (int c = 0; c < n_pos; c += 16) {
        float lane[16];
        for (int l = 0; l < 16; l++) {
            int p = c + l;
            lane[l] = p < n_pos ? wf_attn_expf(sc[p] - mx) : 0.0f;
            if (p < n_pos) sc[p] = lane[l];
        }
        for (int w = 8; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) lane[l] = lane[l] + lane[l + w];
        sum += (double)lane[0];
    }
    const float inv = (float)(1.0 / sum);
    for (int p = 0; p < n_pos; p++) s->prob[p] = wf_fp32_to_fp16(sc[p] * inv);
    /* output: per dimension a dot product over positions; llama.cpp's view length is a
     * multiple of 256, so every position is in the 64-slot body */
    float *acc = s->acc; /* [slot][d] */
    for (int i = 0; i < 64 * hd; i++) acc[i] = 0.0f;
    /* rows with probability 0 are not skipped (llama.cpp does not skip them either): for
     * finite V the fma leaves the accumulator unchanged, as no accumulator is ever -0 */
    for (int p = 0; p < n_pos; p++) {
        const float pr = wf_fp16_to_fp32(s->prob[p]);
        float *a = acc + (size_t)(p & 63) * (size_t)hd;
        const uint16_t *v = kv->v_rows[p];
        for (int d = 0; d < hd; d++) a[d] = fmaf(wf_fp16_to_fp32(v[d]), pr, a[d]);
    }
    for (int d = 0; d < hd; d++) out[d] = reduce64(acc + d, (size_t)hd);
}

void wf_attn_group(const float *q, int n_q, int hd, float scale, const wf_attn_kv_view *kv,
                   int n_pos, wf_attn_scratch *s, float *out) {
    const int simd = simd_level();
    if (simd == 2 && hd % 64 == 0) {
        wf_attn_group_avx512(q, n_q, hd, scale, kv, n_pos, s, out);
        return;
    }
    if (simd >= 1 && hd % 8 == 0) {
        wf_attn_group_avx2(q, n_q, hd, scale, kv, n_pos, s, out);
        return;
    }
    for (int j = 0; j < n_q; j++)
        attn_one_c(q + (size_t)j * (size_t)hd, hd, scale, kv, n_pos, s,
                   out + (size_t)j * (size_t)hd);
}

void wf_attn_one(const float *q, int hd, float scale, const wf_attn_kv_view *kv, int n_pos,
                 wf_attn_scratch *s, float *out) {
    wf_attn_group(q, 1, hd, scale, kv, n_pos, s, out);
}

void wf_attn_geglu(const uint16_t *tab, size_t n, float *gate, const float *up) {
    if (simd_level() >= 1) {
        wf_attn_geglu_avx2(tab, n, gate, up);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const float x = gate[i];
        if (x <= -10.0f)
            gate[i] = 0.0f;
        else if (x >= 10.0f)
            gate[i] = x * up[i];
        else
            gate[i] = wf_fp16_to_fp32(tab[wf_fp32_to_fp16(x)]) * up[i];
    }
}

void wf_attn_rope_neox(const float *cache, int n_rot, float *x) {
    if (simd_level() >= 1) {
        wf_attn_rope_neox_avx2(cache, n_rot, x);
        return;
    }
    const int h = n_rot / 2;
    for (int k = 0; k < h; k++) {
        const float c = cache[2 * k], s = cache[2 * k + 1];
        const float x0 = x[k], x1 = x[k + h];
        x[k] = fmaf(x0, c, -(x1 * s));
        x[k + h] = fmaf(x0, s, x1 * c);
    }
}

void wf_attn_swiglu(size_t n, float *gate, const float *up) {
    if (simd_level() >= 1) {
        wf_attn_swiglu_avx2(n, gate, up);
        return;
    }
    for (size_t i = 0; i < n; i++) gate[i] = wf_attn_silu(gate[i]) * up[i];
}
