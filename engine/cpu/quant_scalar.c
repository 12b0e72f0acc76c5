/* Portable reference kernels for the float and legacy 32-element block types. The quantisers
 * reproduce ggml's rounding bit for bit and the dot products follow ggml's generic
 * accumulation order (per-block integer sums, float accumulation in block order; double
 * accumulation for the float types). SIMD paths are tested against these. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "engine/cpu/quant_impl.h"

#define H2F(h) wf_fp16_to_fp32(h)
#define F2H(f) wf_fp32_to_fp16(f)
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* (int8_t)v as x86 code generated from ggml's C computes it: truncation through a 32-bit
 * integer, where NaN and out-of-range values (from 1/d overflowing on denormal blocks) give
 * INT32_MIN, whose low byte is 0. Without the UB of a direct out-of-range conversion. */
static inline int8_t trunc_i8(float v) {
    if (!(v > -2147483648.0f && v < 2147483648.0f)) return 0;
    return (int8_t)(uint8_t)((uint32_t)(int32_t)v & 0xff);
}

/* CVTPS2DQ: round to nearest even; NaN and out-of-range give INT32_MIN. */
static inline int32_t cvtps_i32(float v) {
    float r = nearbyintf(v);
    if (!(r >= -2147483648.0f && r < 2147483648.0f)) return INT32_MIN;
    return (int32_t)r;
}

/* ---- float types ------------------------------------------------------------------------ */

static void f32_to_float(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f32_from_float(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f32_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++) dst[i] = H2F(x[i]);
}

static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *y = dst;
    for (int64_t i = 0; i < n; i++) y[i] = F2H(src[i]);
}

static void f16_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(H2F(x[i]) * H2F(y[i]));
    *s = (float)sum;
}

static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++) dst[i] = wf_bf16_to_fp32(x[i]);
}

static void bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *y = dst;
    for (int64_t i = 0; i < n; i++) y[i] = wf_fp32_to_bf16(src[i]);
}

static void bf16_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(wf_bf16_to_fp32(x[i]) * wf_bf16_to_fp32(y[i]));
    *s = (float)sum;
}

/* ---- Q4_0: d * (q - 8) ------------------------------------------------------------------ */

static void q4_0_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float amax = 0.0f, max = 0.0f; /* the signed value of largest magnitude */
        for (int j = 0; j < WF_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = F2H(d);
        for (int j = 0; j < WF_QK / 2; j++) {
            uint8_t lo = (uint8_t)MIN(15, trunc_i8(x[j] * id + 8.5f));
            uint8_t hi = (uint8_t)MIN(15, trunc_i8(x[WF_QK / 2 + j] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void q4_0_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const float d = H2F(x[i].d);
        for (int j = 0; j < WF_QK / 2; j++) {
            y[j] = (float)((x[i].qs[j] & 0x0f) - 8) * d;
            y[j + WF_QK / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void q4_0_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const wf_block_q4_0 *x = vx;
    const wf_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / WF_QK; i++) {
        int s0 = 0, s1 = 0;
        for (int j = 0; j < WF_QK / 2; j++) {
            s0 += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j];
            s1 += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + WF_QK / 2];
        }
        sum += (float)(s0 + s1) * H2F(x[i].d) * H2F(y[i].d);
    }
    *s = sum;
}

/* ---- Q4_1: d * q + m -------------------------------------------------------------------- */

static void q4_1_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < WF_QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = F2H(d);
        y[i].m = F2H(min);
        for (int j = 0; j < WF_QK / 2; j++) {
            uint8_t lo = (uint8_t)MIN(15, trunc_i8((x[j] - min) * id + 0.5f));
            uint8_t hi = (uint8_t)MIN(15, trunc_i8((x[WF_QK / 2 + j] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void q4_1_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const float d = H2F(x[i].d), m = H2F(x[i].m);
        for (int j = 0; j < WF_QK / 2; j++) {
            y[j] = (float)(x[i].qs[j] & 0x0f) * d + m;
            y[j + WF_QK / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

static void q4_1_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const wf_block_q4_1 *x = vx;
    const wf_block_q8_1 *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / WF_QK; i++) {
        int s0 = 0, s1 = 0;
        for (int j = 0; j < WF_QK / 2; j++) {
            s0 += (x[i].qs[j] & 0x0f) * y[i].qs[j];
            s1 += (x[i].qs[j] >> 4) * y[i].qs[j + WF_QK / 2];
        }
        sum += (H2F(x[i].d) * H2F(y[i].d)) * (float)(s0 + s1) + H2F(x[i].m) * H2F(y[i].s);
    }
    *s = sum;
}

/* ---- Q5_0: d * (q - 16), the fifth bits packed in qh ----------------------------------- */

static void q5_0_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < WF_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = F2H(d);
        uint32_t qh = 0;
        for (int j = 0; j < WF_QK / 2; j++) {
            uint8_t lo = (uint8_t)MIN(31, trunc_i8(x[j] * id + 16.5f));
            uint8_t hi = (uint8_t)MIN(31, trunc_i8(x[WF_QK / 2 + j] * id + 16.5f));
            y[i].qs[j] = (uint8_t)((lo & 0x0f) | ((hi & 0x0f) << 4));
            qh |= ((lo & 0x10u) >> 4) << j;
            qh |= ((hi & 0x10u) >> 4) << (j + WF_QK / 2);
        }
        memcpy(y[i].qh, &qh, sizeof(qh));
    }
}

static void q5_0_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const float d = H2F(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        for (int j = 0; j < WF_QK / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)(((x[i].qs[j] & 0x0f) | h0) - 16) * d;
            y[j + WF_QK / 2] = (float)(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void q5_0_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const wf_block_q5_0 *x = vx;
    const wf_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / WF_QK; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        int s0 = 0, s1 = 0;
        for (int j = 0; j < WF_QK / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
            s0 += (((x[i].qs[j] & 0x0f) | h0) - 16) * y[i].qs[j];
            s1 += (((x[i].qs[j] >> 4) | h1) - 16) * y[i].qs[j + WF_QK / 2];
        }
        sum += (H2F(x[i].d) * H2F(y[i].d)) * (float)(s0 + s1);
    }
    *s = sum;
}

/* ---- Q5_1: d * q + m, five bits --------------------------------------------------------- */

static void q5_1_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < WF_QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = F2H(d);
        y[i].m = F2H(min);
        uint32_t qh = 0;
        for (int j = 0; j < WF_QK / 2; j++) {
            /* ggml clamps nothing here: (x - min) * id + 0.5 stays below 32 */
            uint8_t lo = (uint8_t)trunc_i8((x[j] - min) * id + 0.5f);
            uint8_t hi = (uint8_t)trunc_i8((x[WF_QK / 2 + j] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((lo & 0x0f) | ((hi & 0x0f) << 4));
            qh |= ((lo & 0x10u) >> 4) << j;
            qh |= ((hi & 0x10u) >> 4) << (j + WF_QK / 2);
        }
        memcpy(y[i].qh, &qh, sizeof(qh));
    }
}

static void q5_1_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const float d = H2F(x[i].d), m = H2F(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        for (int j = 0; j < WF_QK / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)((x[i].qs[j] & 0x0f) | h0) * d + m;
            y[j + WF_QK / 2] = (float)((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

static void q5_1_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const wf_block_q5_1 *x = vx;
    const wf_block_q8_1 *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / WF_QK; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        int s0 = 0, s1 = 0;
        for (int j = 0; j < WF_QK / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
            s0 += ((x[i].qs[j] & 0x0f) | h0) * y[i].qs[j];
            s1 += ((x[i].qs[j] >> 4) | h1) * y[i].qs[j + WF_QK / 2];
        }
        sum += (H2F(x[i].d) * H2F(y[i].d)) * (float)(s0 + s1) + H2F(x[i].m) * H2F(y[i].s);
    }
    *s = sum;
}

/* ---- Q8_0 / Q8_1 ------------------------------------------------------------------------ */

/* The activation quantiser of ggml's x86 CPU backend (its AVX2 quantize_row_q8_0/q8_1):
 * d = amax/127 stored as half, values scaled by 127/amax and rounded half to even. Returns
 * the sum of the quants (for Q8_1's s). */
static int q8_block_x86(const float *x, float *d_out, int8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < WF_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    uint32_t sum = 0; /* wraps like the SIMD lanes if a denormal block overflowed 127/amax */
    for (int j = 0; j < WF_QK; j++) {
        int32_t q = cvtps_i32(x[j] * id); /* default rounding mode: half to even */
        qs[j] = (int8_t)(q > 127 ? 127 : q < -128 ? -128 : q);
        sum += (uint32_t)q;
    }
    *d_out = d;
    return (int)sum;
}

/* ggml's quantize_row_q8_{0,1}_ref: scale by 1/d, round half away from zero. */
static int q8_block_ref(const float *x, float *d_out, int8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < WF_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < WF_QK; j++) {
        qs[j] = trunc_i8(roundf(x[j] * id));
        sum += qs[j];
    }
    *d_out = d;
    return sum;
}

static void q8_0_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float d;
        q8_block_x86(x, &d, y[i].qs);
        y[i].d = F2H(d);
    }
}

static void q8_0_from_float_ref(const float *x, void *vy, int64_t n) {
    wf_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float d;
        q8_block_ref(x, &d, y[i].qs);
        y[i].d = F2H(d);
    }
}

static void q8_0_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const float d = H2F(x[i].d);
        for (int j = 0; j < WF_QK; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

static void q8_0_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const wf_block_q8_0 *x = vx, *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / WF_QK; i++) {
        int si = 0;
        for (int j = 0; j < WF_QK; j++) si += x[i].qs[j] * y[i].qs[j];
        sum += (float)si * (H2F(x[i].d) * H2F(y[i].d));
    }
    *s = sum;
}

static void q8_1_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float d;
        int sum = q8_block_x86(x, &d, y[i].qs);
        y[i].d = F2H(d);
        y[i].s = F2H(d * (float)sum);
    }
}

static void q8_1_from_float_ref(const float *x, void *vy, int64_t n) {
    wf_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / WF_QK; i++, x += WF_QK) {
        float d;
        int sum = q8_block_ref(x, &d, y[i].qs);
        y[i].d = F2H(d);
        y[i].s = F2H((float)sum * d);
    }
}

static void q8_1_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / WF_QK; i++, y += WF_QK) {
        const float d = H2F(x[i].d);
        for (int j = 0; j < WF_QK; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

void wf_quant_fill_scalar(wf_quant_ops ops[WF_GGML_TYPE_COUNT]) {
#define SET(T, VDT, PFX)                                                                      \
    ops[WF_GGML_TYPE_##T] = (wf_quant_ops){.vec_dot_type = WF_GGML_TYPE_##VDT,                \
                                           .to_float = PFX##_to_float,                         \
                                           .from_float = PFX##_from_float,                     \
                                           .vec_dot = PFX##_vec_dot,                           \
                                           .from_float_ref = PFX##_from_float}
    SET(F32, F32, f32);
    SET(F16, F16, f16);
    SET(BF16, BF16, bf16);
    SET(Q4_0, Q8_0, q4_0);
    SET(Q4_1, Q8_1, q4_1);
    SET(Q5_0, Q8_0, q5_0);
    SET(Q5_1, Q8_1, q5_1);
    SET(Q8_0, Q8_0, q8_0);
#undef SET
    ops[WF_GGML_TYPE_Q8_0].from_float_ref = q8_0_from_float_ref;
    /* Q8_1 is an activation type only: ggml has no dot product with it as the left operand */
    ops[WF_GGML_TYPE_Q8_1] = (wf_quant_ops){.vec_dot_type = WF_GGML_TYPE_Q8_1,
                                            .to_float = q8_1_to_float,
                                            .from_float = q8_1_from_float,
                                            .from_float_ref = q8_1_from_float_ref};
    wf_quant_fill_scalar_k(ops);
}
