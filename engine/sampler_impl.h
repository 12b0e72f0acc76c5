/* Internal to engine/sampler*.c: the softmax-weight kernel, written once with GCC/Clang vector
 * extensions and instantiated per vector width (4 lanes in sampler.c for any x86-64/ARM CPU,
 * 8 lanes in sampler_avx2.c, compiled with AVX2/FMA and chosen at run time).
 *
 * e^x for x <= 0: x = n ln2 + r, |r| <= ln2/2, degree-6 Taylor polynomial (relative error
 * < 3e-7), 2^n through the exponent bits; x < -87 (and -inf) gives exactly 0. */
#ifndef WF_ENGINE_SAMPLER_IMPL_H
#define WF_ENGINE_SAMPLER_IMPL_H

#include <stdint.h>
#include <string.h>

/* y[i] = exp((x[i] - sub) * scale), each <= 1 (y may be NULL); returns the sum (partial sums
 * per 256 elements in float, then double). */
typedef double (*wf_sampler_exp_sum_fn)(const float *x, float *y, int n, float sub, float scale);

double wf_sampler_exp_sum_avx2(const float *x, float *y, int n, float sub, float scale);

#define WF_SAMPLER_DEFINE_EXP_SUM(STORAGE, NAME, LANES)                                        \
    typedef float NAME##_vf __attribute__((vector_size(4 * (LANES))));                        \
    typedef int32_t NAME##_vi __attribute__((vector_size(4 * (LANES))));                      \
    static inline NAME##_vf NAME##_exp(NAME##_vf x) {                                          \
        NAME##_vi dead = x < -87.0f;                                                           \
        x = (NAME##_vf)((NAME##_vi)x & ~dead); /* -inf / huge negatives: masked below */       \
        NAME##_vf n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round */     \
        NAME##_vf r = x - n * 0.693145751953125f - n * 1.428606765330187045e-06f;              \
        NAME##_vf p = r * (1.0f / 720.0f) + 1.0f / 120.0f;                                     \
        p = p * r + 1.0f / 24.0f;                                                              \
        p = p * r + 1.0f / 6.0f;                                                               \
        p = p * r + 0.5f;                                                                      \
        p = p * r + 1.0f;                                                                      \
        p = p * r + 1.0f;                                                                      \
        NAME##_vi e = (__builtin_convertvector(n, NAME##_vi) + 127) << 23;                     \
        return (NAME##_vf)((NAME##_vi)(p * (NAME##_vf)e) & ~dead);                             \
    }                                                                                          \
    STORAGE double NAME(const float *x, float *y, int n, float sub, float scale) {             \
        double total = 0;                                                                      \
        int i = 0;                                                                             \
        while (i < n) {                                                                        \
            int end = n - i > 256 ? i + 256 : n;                                               \
            NAME##_vf acc = {0};                                                               \
            for (; i + (LANES) <= end; i += (LANES)) {                                         \
                NAME##_vf v;                                                                   \
                memcpy(&v, x + i, sizeof v);                                                   \
                NAME##_vf e = NAME##_exp((v - sub) * scale);                                   \
                if (y) memcpy(y + i, &e, sizeof e);                                            \
                acc += e;                                                                      \
            }                                                                                  \
            float part = 0;                                                                    \
            for (int k = 0; k < (LANES); k++) part += acc[k];                                  \
            for (; i < end; i++) {                                                             \
                NAME##_vf v = {0};                                                             \
                v[0] = (x[i] - sub) * scale;                                                   \
                float e = NAME##_exp(v)[0];                                                    \
                if (y) y[i] = e;                                                               \
                part += e;                                                                     \
            }                                                                                  \
            total += part;                                                                     \
        }                                                                                      \
        return total;                                                                          \
    }

#endif
