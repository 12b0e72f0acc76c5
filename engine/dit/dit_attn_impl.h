/* The body of one attention work unit (batch item, head, tile of queries), included by
 * dit_attn.c, dit_attn_avx2.c and dit_attn_avx512.c so the same source is compiled once per
 * ISA (the compiler vectorises the j- and d-loops with that file's flags). Defines
 * WF__ATTN_UNIT(name). Online softmax over key tiles: the scores of one tile of keys at a time,
 * a running max and sum per query, the output rescaled when the max grows. */
#include <math.h>
#include <stddef.h>

#include "engine/dit/dit_attn_unit.h"

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
        for (int j = 0; j < nk; j++) {
            const float *k = base + (size_t)(j0 + j) * ld + D + h * hd;
            for (int d = 0; d < hd; d++) Kt[d * WF__ATTN_KT + j] = k[d];
        }
        for (int i = 0; i < nq; i++) {
            float *s = S + i * WF__ATTN_KT;
            for (int j = 0; j < nk; j++) s[j] = 0.0f;
            for (int d = 0; d < hd; d++) {
                const float qd = Q[i * hd + d];
                const float *kt = Kt + d * WF__ATTN_KT;
                for (int j = 0; j < nk; j++) s[j] += qd * kt[j];
            }
            float mx = M[i];
            for (int j = 0; j < nk; j++) mx = s[j] > mx ? s[j] : mx;
            const float corr = expf(M[i] - mx);
            float sum = 0.0f;
            for (int j = 0; j < nk; j++) {
                s[j] = expf(s[j] - mx);
                sum += s[j];
            }
            L[i] = L[i] * corr + sum;
            M[i] = mx;
            float *a = A + i * hd;
            for (int d = 0; d < hd; d++) a[d] *= corr;
            for (int j = 0; j < nk; j++) {
                const float p = s[j];
                const float *v = base + (size_t)(j0 + j) * ld + 2 * D + h * hd;
                for (int d = 0; d < hd; d++) a[d] += p * v[d];
            }
        }
    }
    for (int i = 0; i < nq; i++) {
        float *dst = o + ((size_t)b * tokens + q0 + i) * D + h * hd;
        const float inv = 1.0f / L[i];
        for (int d = 0; d < hd; d++) dst[d] = A[i * hd + d] * inv;
    }
}
