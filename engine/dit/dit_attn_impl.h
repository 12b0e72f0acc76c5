/* The body of one attention work unit (batch item, head, tile of queries), included by
 * dit_attn.c, dit_attn_avx2.c and dit_attn_avx512.c so the same source is compiled once per
 * ISA (the compiler vectorises the j- and d-loops with that file's flags). Defines
 * WF__ATTN_UNIT(name). Online softmax over key tiles: the scores of one tile of keys at a time,
 * a running max and sum per query, the output rescaled when the max grows. */
#include <math.h>
#include <stddef.h>
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

/* GELU (tanh form) over n floats, in fixed chunks of 16 so it vectorises; see WF__GELU_UNIT. */
void WF__GELU_UNIT(float *x, size_t n) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    size_t n16 = n & ~(size_t)15;
    for (size_t i0 = 0; i0 < n; i0 += 16) {
        const int len = i0 < n16 ? 16 : (int)(n - i0);
        float *restrict p = x + i0;
        if (len == 16) {
            for (int e = 0; e < 16; e++) {
                float v = p[e], u = k0 * (v + k1 * v * v * v);
                /* 1 + tanh(u) = 2 - 2 / (exp(2u) + 1) */
                p[e] = 0.5f * v * (2.0f - 2.0f / (wf__dit_expf(2.0f * u) + 1.0f));
            }
        } else {
            for (int e = 0; e < len; e++) {
                float v = p[e], u = k0 * (v + k1 * v * v * v);
                p[e] = 0.5f * v * (2.0f - 2.0f / (wf__dit_expf(2.0f * u) + 1.0f));
            }
        }
    }
}
