/* Internals of the KV codec: the row kernels every SIMD level implements (scalar reference in
 * codec_kernels.c, AVX2 in codec_avx2.c, AVX-512 in codec_avx512.c), chosen once at run time.
 * Each kernel works on one row of n floats (n a multiple of 16 for the SIMD paths; the scalar
 * path takes any n). Tests compare every level against the scalar one. */
#ifndef WF_KV_CODEC_IMPL_H
#define WF_KV_CODEC_IMPL_H

#include <stdint.h>

typedef struct wf__kvc_kernels {
    const char *name;
    void (*f16_to_f32)(const uint16_t *src, float *dst, int n);
    /* Round to nearest even, as F16C's vcvtps2ph with imm 0. */
    void (*f32_to_f16)(const float *src, uint16_t *dst, int n);
    /* x[i] *= s[i] (the rotation's signs), and x[i] = v: short loops the compiler leaves
     * scalar at -O2, which made them the encoder's hottest lines. */
    void (*mul)(float *x, const float *s, int n);
    void (*fill)(float *x, float v, int n);
    /* Unnormalised in-place fast Walsh-Hadamard transform; n a power of two. */
    void (*fwht)(float *x, int n);
    /* max |x[i]| (NaN ignored). */
    float (*absmax)(const float *x, int n);
    /* m[i] = max(m[i], |x[i]|) (NaN ignored): per-channel maxima over rows. */
    void (*absmax_acc)(const float *x, float *m, int n);
    /* codes[i] = clamp(rint(x[i] * inv[i]), -qmax, qmax) + qmax (NaN maps to 0). */
    void (*quantize)(const float *x, const float *inv, int qmax, uint8_t *codes, int n);
    /* x[i] = (codes[i] - qmax) * scale[i]. */
    void (*dequantize)(const uint8_t *codes, const float *scale, int qmax, float *x, int n);
    /* 4-bit widths fused with the packing (the common case): quantize with qmax 7 and store
     * two codes a byte, low nibble first; and the inverse. n even. */
    void (*quantize4)(const float *x, const float *inv, uint8_t *packed, int n);
    void (*dequantize4)(const uint8_t *packed, const float *scale, float *x, int n);
} wf__kvc_kernels;

extern const wf__kvc_kernels wf__kvc_kernels_scalar;
#if defined(__x86_64__) || defined(__i386__)
extern const wf__kvc_kernels wf__kvc_kernels_avx2;
extern const wf__kvc_kernels wf__kvc_kernels_avx512;
#endif

/* The best level this CPU supports, capped by WEFT_CPU_ISA=scalar|avx2|avx512. */
const wf__kvc_kernels *wf__kvc_kernels_best(void);
/* A named level ("scalar", "avx2", "avx512") if this CPU runs it, else NULL. For tests. */
const wf__kvc_kernels *wf__kvc_kernels_by_name(const char *name);

/* Scalar conversions shared by every level (tails, scales): proto/base/half.h. */
#include "proto/base/half.h"

#endif
