/* Half and bfloat16 conversions in portable C, bit-identical to the F16C instructions
 * (VCVTPH2PS, VCVTPS2PH with round-to-nearest-even and MXCSR at its default: no DAZ/FTZ).
 * Scalar kernels use these; SIMD kernels use the instructions themselves. */
#include <string.h>

#include "proto/base/half.h"

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float wf_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) /* inf, or NaN: quieted with its payload kept (as VCVTPH2PS) */
        return bits_f32(sign | 0x7f800000 | (mant ? 0x400000 | (mant << 13) : 0));
    if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return bits_f32(sign);
    /* subnormal half: exact as mant * 2^-24 */
    float v = (float)mant * 0x1p-24f;
    return bits_f32(sign | f32_bits(v));
}

uint16_t wf_fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffff;
    if (x > 0x7f800000) /* NaN: quieted, top mantissa bits kept (as VCVTPS2PH) */
        return (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff));
    if (x >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* >= 65520 rounds to inf */
    uint32_t e = x >> 23;
    if (e >= 113) { /* normal half */
        uint32_t h = ((e - 112) << 10) | ((x >> 13) & 0x3ff);
        uint32_t rem = x & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* carry may bump the exponent */
        return (uint16_t)(sign | h);
    }
    if (e < 102) return sign; /* below half the smallest subnormal (2^-25): zero */
    uint32_t mant = (x & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

float wf_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t wf_fp32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}
