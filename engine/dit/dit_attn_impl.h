/* The body of one attention work unit (batch item, head, tile of queries), included by
 * dit_attn.c, dit_attn_avx2.c and dit_attn_avx512.c so the same source is compiled once per
 * ISA (the compiler vectorises the j- and d-loops with that file's flags). Defines
 * WF__ATTN_UNIT(name). Online softmax over key tiles: the scores of one tile of keys at a time,
 * a running max and sum per query, the output rescaled when the max grows. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* GCC/clang vector extension: 8 floats, lowered to this file's ISA. */
typedef float wf__v8f __attribute__((vector_size(32)));

#include "engine/dit/dit_attn_unit.h"
#include "engine/dit/dit_kernels.h"

void WF__ATTN_UNIT(const float *qkv, float *o, int tokens, int heads, int hd, int b, int h, int q0,
                   float *scratch) {
    const int D = heads * hd, ld = 3 * D;
    const int nq = tokens - q0 < WF__ATTN_QT ? tokens - q0 : WF__ATTN_QT;
    float *Q = scratch;                     /* [QT][hd], pre-scaled */
    float *Kt = Q + WF__ATTN_QT * hd;       /* [hd][KT] */
    float *S = Kt + (size_t)hd * WF__ATTN_KT; /* [QT][KT] */
    float *A = S + WF__ATTN_QT * WF__ATTN_KT; /* [QT][hd] */
    float *M = A + WF__ATTN_QT * hd, *L = M + WF__ATTN_QT;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *base = qkv + (size_t)b * tokens * ld;
    for (int i = 0; i < nq; i++) {
        const float *q = base + (size_t)(q0 + i) * ld + h * hd;
        for (int d = 0; d < hd; d++) {
            Q[i * hd + d] = q[d] * scale;
            A[i * hd + d] = 0.0f;
        }
        M[i] = -INFINITY;
        L[i] = 0.0f;
    }
    for (int j0 = 0; j0 < tokens; j0 += WF__ATTN_KT) {
        const int nk = tokens - j0 < WF__ATTN_KT ? tokens - j0 : WF__ATTN_KT;
        /* K tile transposed, zero-padded to a full tile: the score loops have a fixed trip
         * count the compiler keeps in vector registers */
        for (int j = 0; j < WF__ATTN_KT; j++) {
            if (j < nk) {
                const float *k = base + (size_t)(j0 + j) * ld + D + h * hd;
                for (int d = 0; d < hd; d++) Kt[d * WF__ATTN_KT + j] = k[d];
            } else {
                for (int d = 0; d < hd; d++) Kt[d * WF__ATTN_KT + j] = 0.0f;
            }
        }
        for (int i = 0; i < nq; i++) {
            wf__v8f av[WF__ATTN_KT / 8];
            for (int c = 0; c < WF__ATTN_KT / 8; c++) av[c] = (wf__v8f){0};
            for (int d = 0; d < hd; d++) {
                const float q = Q[i * hd + d];
                const wf__v8f qd = {q, q, q, q, q, q, q, q};
                const float *kt = Kt + d * WF__ATTN_KT;
                for (int c = 0; c < WF__ATTN_KT / 8; c++) {
                    wf__v8f k;
                    memcpy(&k, kt + 8 * c, sizeof k);
                    av[c] += qd * k;
                }
            }
            float acc[WF__ATTN_KT];
            memcpy(acc, av, sizeof acc);
            float *s = S + i * WF__ATTN_KT;
            float mx = M[i];
            for (int j = 0; j < nk; j++) mx = acc[j] > mx ? acc[j] : mx;
            const float corr = wf__dit_expf(M[i] - mx);
            /* exp in its own loop: a float sum in the same loop would stop vectorisation */
            for (int j = 0; j < WF__ATTN_KT; j++) s[j] = wf__dit_expf(acc[j] - mx);
            for (int j = nk; j < WF__ATTN_KT; j++) s[j] = 0.0f;
            float sum = 0.0f;
            for (int j = 0; j < nk; j++) sum += s[j];
            L[i] = L[i] * corr + sum;
            M[i] = mx;
            float *restrict a = A + i * hd;
            for (int d = 0; d < hd; d++) a[d] *= corr;
            /* 8-wide vector-extension chunks (GCC's -O2 cost model leaves the plain loop
             * scalar); head widths are multiples of 8 in every DiT, the tail loop is the rest */
            const int hd8 = hd & ~7;
            for (int j = 0; j < nk; j++) {
                const wf__v8f p = {s[j], s[j], s[j], s[j], s[j], s[j], s[j], s[j]};
                const float *restrict v = base + (size_t)(j0 + j) * ld + 2 * D + h * hd;
                for (int d0 = 0; d0 < hd8; d0 += 8) {
                    wf__v8f va, vv;
                    memcpy(&va, a + d0, sizeof va);
                    memcpy(&vv, v + d0, sizeof vv);
                    va += p * vv;
                    memcpy(a + d0, &va, sizeof va);
                }
                for (int d = hd8; d < hd; d++) a[d] += s[j] * v[d];
            }
        }
    }
    for (int i = 0; i < nq; i++) {
        float *dst = o + ((size_t)b * tokens + q0 + i) * D + h * hd;
        const float inv = 1.0f / L[i];
        for (int d = 0; d < hd; d++) dst[d] = A[i * hd + d] * inv;
    }
}

typedef int32_t wf__v8i __attribute__((vector_size(32)));

/* wf__dit_expf on 8 lanes, in place (same reduction and polynomial; floor by truncate-and-fix). */
static inline __attribute__((always_inline)) void expf_v8(wf__v8f *io) {
    wf__v8f x = *io;
    const wf__v8f lo = {-87, -87, -87, -87, -87, -87, -87, -87}, hi = {88, 88, 88, 88, 88, 88, 88, 88};
    wf__v8i m = x < lo;
    x = (wf__v8f)((m & (wf__v8i)lo) | (~m & (wf__v8i)x));
    m = x > hi;
    x = (wf__v8f)((m & (wf__v8i)hi) | (~m & (wf__v8i)x));
    wf__v8f y = x * 1.44269504088896341f + 0.5f;
    wf__v8i n = __builtin_convertvector(y, wf__v8i);
    n += (wf__v8i)(__builtin_convertvector(n, wf__v8f) > y); /* -1 where truncation rounded up */
    wf__v8f nf = __builtin_convertvector(n, wf__v8f);
    wf__v8f r = x - nf * 0.693359375f;
    r = r + nf * 2.12194440e-4f;
    wf__v8f p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    wf__v8f e = p * r * r + r + 1.0f;
    *io = e * (wf__v8f)((n + 127) << 23);
}

static inline float gelu1(float v) {
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    /* 1 + tanh(u) = 2 - 2 / (exp(2u) + 1) */
    return 0.5f * v * (2.0f - 2.0f / (wf__dit_expf(2.0f * u) + 1.0f));
}

/* GELU (tanh form) over n floats, 8 lanes at a time. */
void WF__GELU_UNIT(float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        wf__v8f v;
        memcpy(&v, x + i, sizeof v);
        wf__v8f u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        wf__v8f e = 2.0f * u;
        expf_v8(&e); /* by pointer: no vector-typed arguments across the ABI */
        v = 0.5f * v * (2.0f - 2.0f / (e + 1.0f));
        memcpy(x + i, &v, sizeof v);
    }
    for (; i < n; i++) x[i] = gelu1(x[i]);
}
