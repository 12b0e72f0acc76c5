/* The body of one attention work unit (batch item, head, tile of queries), LayerNorm rows and
 * GELU, included by dit_attn.c, dit_attn_avx2.c and dit_attn_avx512.c so the same source is
 * compiled once per ISA. The including file defines WF__ATTN_UNIT, WF__GELU_UNIT and
 * WF__LN_UNIT (the functions' names), WF__ATTN_VW (floats per vector: 4, 8, 16) and WF__ATTN_R
 * (query rows per register tile). Online softmax over key tiles: the scores of one tile of keys
 * at a time, a running max and sum per query, the output rescaled when the max grows; both
 * products are register-tiled (tile_mac below). */
#if !defined(WF__ATTN_VW) || !defined(WF__ATTN_R)
#error "define WF__ATTN_VW and WF__ATTN_R before including dit_attn_impl.h"
#endif
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* GCC/clang vector extensions: 8 floats (GELU) and WF__ATTN_VW floats (the attention tiles),
 * lowered to this file's ISA. */
typedef float wf__v8f __attribute__((vector_size(32)));
typedef float wf__vwf __attribute__((vector_size(WF__ATTN_VW * 4)));
typedef int32_t wf__vwi __attribute__((vector_size(WF__ATTN_VW * 4)));

#include "engine/dit/dit_attn_unit.h"
#include "engine/dit/dit_kernels.h"

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

/* Fully unrolled tile loops, so GCC keeps the accumulator array in registers (left rolled at -O2,
 * it lives on the stack and every multiply-add loads and stores). */
#define WF__UNROLL _Pragma("GCC unroll 4")

/* Register tiles: WF__ATTN_R rows x nv vectors (nv <= 4, a compile-time constant once inlined,
 * so the accumulators stay in registers). Both products of attention are such tiles:
 *   scores  S[i][j]  = sum_d Q[i][d] * Kt[d][j]   (rows = queries, vectors = keys)
 *   output  A[i][d] = corr[i] * A[i][d] + sum_j S[i][j] * V[j][d]   (vectors = head columns)
 * Each step loads nv vectors once and reuses them across WF__ATTN_R broadcast rows, as the GEMM
 * micro-kernel does, instead of one load per multiply-add. */
static inline __attribute__((always_inline)) void tile_mac(const float *a, int lda, const float *b, int ldb,
                                                           int n, float *c, int ldc, const float *corr,
                                                           const int nv) {
    wf__vwf acc[WF__ATTN_R][4];
    WF__UNROLL
    for (int r = 0; r < WF__ATTN_R; r++)
        WF__UNROLL
        for (int v = 0; v < nv; v++) {
            if (corr) {
                memcpy(&acc[r][v], c + (size_t)r * ldc + v * WF__ATTN_VW, sizeof acc[r][v]);
                acc[r][v] *= corr[r];
            } else {
                acc[r][v] = (wf__vwf){0};
            }
        }
    for (int t = 0; t < n; t++) {
        wf__vwf bv[4];
        WF__UNROLL
        for (int v = 0; v < nv; v++) memcpy(&bv[v], b + (size_t)t * ldb + v * WF__ATTN_VW, sizeof bv[v]);
        WF__UNROLL
        for (int r = 0; r < WF__ATTN_R; r++) {
            const float ar = a[(size_t)r * lda + t]; /* vector * scalar broadcasts it */
            WF__UNROLL
            for (int v = 0; v < nv; v++) acc[r][v] += bv[v] * ar;
        }
    }
    WF__UNROLL
    for (int r = 0; r < WF__ATTN_R; r++)
        WF__UNROLL
        for (int v = 0; v < nv; v++) memcpy(c + (size_t)r * ldc + v * WF__ATTN_VW, &acc[r][v], sizeof acc[r][v]);
}

/* c[rows][ncols] (+)= a[rows][n] b[n][ncols] over WF__ATTN_R-row tiles; ncols a multiple of
 * WF__ATTN_VW, rows a multiple of WF__ATTN_R. */
static inline void tiles_mac(const float *a, int lda, const float *b, int ldb, int n, float *c, int ldc,
                             const float *corr, int rows, int ncols) {
    const int nvec = ncols / WF__ATTN_VW;
    for (int i = 0; i < rows; i += WF__ATTN_R) {
        const float *ai = a + (size_t)i * lda, *ci_corr = corr ? corr + i : NULL;
        float *ci = c + (size_t)i * ldc;
        int v = 0;
        for (; v + 4 <= nvec; v += 4)
            tile_mac(ai, lda, b + v * WF__ATTN_VW, ldb, n, ci + v * WF__ATTN_VW, ldc, ci_corr, 4);
        const float *bv = b + v * WF__ATTN_VW;
        float *cv = ci + v * WF__ATTN_VW;
        switch (nvec - v) {
        case 3: tile_mac(ai, lda, bv, ldb, n, cv, ldc, ci_corr, 3); break;
        case 2: tile_mac(ai, lda, bv, ldb, n, cv, ldc, ci_corr, 2); break;
        case 1: tile_mac(ai, lda, bv, ldb, n, cv, ldc, ci_corr, 1); break;
        default: break;
        }
    }
}

/* dst[0..n) = src[0..n) * k in 8-lane chunks (GCC's -O2 leaves the plain loop scalar); used for
 * the pre-scaled queries and the final 1/L normalisation. */
static inline void scale_row(float *dst, const float *src, int n, float k) {
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        wf__v8f v;
        memcpy(&v, src + d, sizeof v);
        v *= k;
        memcpy(dst + d, &v, sizeof v);
    }
    for (; d < n; d++) dst[d] = src[d] * k;
}

void WF__ATTN_UNIT(const float *qkv, float *o, int tokens, int heads, int hd, int b, int h, int q0,
                   float *scratch) {
    const int D = heads * hd, ld = 3 * D;
    const int hdp = (hd + WF__ATTN_VW - 1) / WF__ATTN_VW * WF__ATTN_VW; /* V and A rows, zero-padded */
    const int nq = tokens - q0 < WF__ATTN_QT ? tokens - q0 : WF__ATTN_QT;
    const int nqr = (nq + WF__ATTN_R - 1) / WF__ATTN_R * WF__ATTN_R;   /* rows computed (pad rows are 0) */
    float *Q = scratch;                         /* [QT][hd], pre-scaled */
    float *Kt = Q + WF__ATTN_QT * hd;           /* [hd][KT] */
    float *S = Kt + (size_t)hd * WF__ATTN_KT;   /* [QT][KT] */
    float *V = S + WF__ATTN_QT * WF__ATTN_KT;   /* [KT][hdp] */
    float *A = V + (size_t)WF__ATTN_KT * hdp;   /* [QT][hdp] */
    float *M = A + (size_t)WF__ATTN_QT * hdp, *L = M + WF__ATTN_QT, *C = L + WF__ATTN_QT;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *base = qkv + (size_t)b * tokens * ld;
    for (int i = 0; i < nqr; i++) {
        float *qi = Q + (size_t)i * hd;
        if (i < nq) {
            scale_row(qi, base + (size_t)(q0 + i) * ld + h * hd, hd, scale);
        } else {
            memset(qi, 0, (size_t)hd * sizeof *qi);
        }
        memset(A + (size_t)i * hdp, 0, (size_t)hdp * sizeof *A);
        M[i] = -INFINITY;
        L[i] = 0.0f;
    }
    for (int j0 = 0; j0 < tokens; j0 += WF__ATTN_KT) {
        const int nk = tokens - j0 < WF__ATTN_KT ? tokens - j0 : WF__ATTN_KT;
        /* K tile transposed and zero-padded to a full tile; V tile with rows zero-padded to hdp */
        for (int j = 0; j < WF__ATTN_KT; j++) {
            if (j < nk) {
                const float *k = base + (size_t)(j0 + j) * ld + D + h * hd;
                for (int d = 0; d < hd; d++) Kt[d * WF__ATTN_KT + j] = k[d];
            } else {
                for (int d = 0; d < hd; d++) Kt[d * WF__ATTN_KT + j] = 0.0f;
            }
        }
        for (int j = 0; j < nk; j++) {
            memcpy(V + (size_t)j * hdp, base + (size_t)(j0 + j) * ld + 2 * D + h * hd, (size_t)hd * sizeof *V);
            for (int d = hd; d < hdp; d++) V[(size_t)j * hdp + d] = 0.0f;
        }
        tiles_mac(Q, hd, Kt, WF__ATTN_KT, hd, S, WF__ATTN_KT, NULL, nqr, WF__ATTN_KT);
        /* online softmax: running max M and sum L per query; C = the factor the old A takes.
         * Padded keys score -inf, so max, exp and sum run over whole vectors. */
        for (int i = 0; i < nqr; i++) {
            float *s = S + i * WF__ATTN_KT;
            for (int j = nk; j < WF__ATTN_KT; j++) s[j] = -INFINITY;
            wf__vwf vm, x;
            memcpy(&vm, s, sizeof vm);
            for (int j = WF__ATTN_VW; j < WF__ATTN_KT; j += WF__ATTN_VW) {
                memcpy(&x, s + j, sizeof x);
                const wf__vwi gt = x > vm;
                vm = (wf__vwf)((gt & (wf__vwi)x) | (~gt & (wf__vwi)vm));
            }
            float mx = M[i];
            for (int l = 0; l < WF__ATTN_VW; l++) mx = vm[l] > mx ? vm[l] : mx;
            C[i] = wf__dit_expf(M[i] - mx);
            wf__v8f vs = {0};
            for (int j = 0; j < WF__ATTN_KT; j += 8) {
                wf__v8f e;
                memcpy(&e, s + j, sizeof e);
                e -= mx;
                expf_v8(&e);
                memcpy(s + j, &e, sizeof e);
                vs += e;
            }
            /* padded keys add exp(-87) ~ 1e-38 each (expf clamps), against a sum >= 1; the P.V
             * product below reads only the nk real keys */
            float sum = 0.0f;
            for (int l = 0; l < 8; l++) sum += vs[l];
            L[i] = L[i] * C[i] + sum;
            M[i] = mx;
        }
        tiles_mac(S, WF__ATTN_KT, V, hdp, nk, A, hdp, C, nqr, hdp);
    }
    for (int i = 0; i < nq; i++) {
        scale_row(o + ((size_t)b * tokens + q0 + i) * D + h * hd, A + (size_t)i * hdp, hd, 1.0f / L[i]);
    }
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

/* One row of LayerNorm with adaLN modulation (see wf__dit_ln_modulate): mean and variance in
 * double over 8-lane chunks (two passes, as torch's result without its rounding order), the
 * normalise-scale-shift pass in float. */
void WF__LN_UNIT(const float *x, float *y, int d, float eps, const float *g, const float *b, const float *sh,
                 const float *sc) {
    typedef double v8d __attribute__((vector_size(64)));
    const int d8 = d & ~7;
    v8d acc = {0};
    double s = 0.0;
    for (int i = 0; i < d8; i += 8) {
        wf__v8f v;
        memcpy(&v, x + i, sizeof v);
        acc += __builtin_convertvector(v, v8d);
    }
    for (int l = 0; l < 8; l++) s += acc[l];
    for (int i = d8; i < d; i++) s += x[i];
    const double mean = s / d;
    double var = 0.0;
    acc = (v8d){0};
    for (int i = 0; i < d8; i += 8) {
        wf__v8f v;
        memcpy(&v, x + i, sizeof v);
        const v8d c = __builtin_convertvector(v, v8d) - mean;
        acc += c * c;
    }
    for (int l = 0; l < 8; l++) var += acc[l];
    for (int i = d8; i < d; i++) var += (x[i] - mean) * (x[i] - mean);
    const float rstd = (float)(1.0 / sqrt(var / d + eps)), fm = (float)mean;
    int i = 0;
    for (; i < d8; i += 8) {
        wf__v8f v;
        memcpy(&v, x + i, sizeof v);
        v = (v - fm) * rstd;
        if (g) {
            wf__v8f gv, bv = {0};
            memcpy(&gv, g + i, sizeof gv);
            if (b) memcpy(&bv, b + i, sizeof bv);
            v = v * gv + bv;
        }
        if (sc) {
            wf__v8f scv, shv;
            memcpy(&scv, sc + i, sizeof scv);
            memcpy(&shv, sh + i, sizeof shv);
            v = v * (1.0f + scv) + shv;
        }
        memcpy(y + i, &v, sizeof v);
    }
    for (; i < d; i++) {
        float h = (x[i] - fm) * rstd;
        if (g) h = h * g[i] + (b ? b[i] : 0.0f);
        if (sc) h = h * (1.0f + sc[i]) + sh[i];
        y[i] = h;
    }
}
