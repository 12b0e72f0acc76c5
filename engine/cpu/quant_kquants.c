/* Portable reference kernels for the K-quants weft supports (Q4_K, Q6_K) and their activation
 * type Q8_K. Quantisers follow ggml's reference search (make_qkx2_quants / make_qx_quants)
 * so GGUF files written with them dequantise as llama.cpp's; dot products keep ggml's
 * generic accumulation (8 integer lanes per super-block, 8 float lanes across super-blocks). */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "engine/cpu/quant_impl.h"

#define GROUP_MAX_EPS 1e-15f
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Round to nearest (half to even) for |f| < 2^22, by the add-magic-constant trick ggml uses;
 * its exact behaviour at .5 matters for bit-identical files. */
static inline int nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

/* Q4_K packs 8 six-bit scales and 8 six-bit mins into 12 bytes. */
static inline void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Weighted least-squares fit of scale and min for one group, searching nstep+1 scales
 * (ggml's make_qkx2_quants, use_mad = false). Returns the scale, *the_min = -min. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MAX(0, MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = MAX(0, MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += w[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Symmetric scale search for one group of signed quants in [-nmax, nmax-1] weighted by x^2
 * (ggml's make_qx_quants with rmse_type 1 and no importance weights). L gets q + nmax. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = MAX(-nmax, MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + MAX(-nmax, MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ---- Q4_K: 8 groups of 32, x = d*sc*q - dmin*m ------------------------------------------ */

static void q4_K_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q4_K *y = vy;
    uint8_t L[WF_QK_K], Laux[32];
    float weights[32], mins[WF_QK_K / 32], scales[WF_QK_K / 32];
    for (int64_t i = 0; i < n / WF_QK_K; i++, x += WF_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < WF_QK_K / 32; j++) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = fit_scale_min(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                      -1.f, 0.1f, 20);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        memset(y[i].scales, 0, sizeof(y[i].scales));
        for (int j = 0; j < WF_QK_K / 32; j++) {
            uint8_t ls = (uint8_t)MIN(63, (uint8_t)nearest_int(inv_scale * scales[j]));
            uint8_t lm = (uint8_t)MIN(63, (uint8_t)nearest_int(inv_min * mins[j]));
            if (j < 4) {
                y[i].scales[j] = ls;
                y[i].scales[j + 4] = lm;
            } else {
                y[i].scales[j + 4] = (uint8_t)((ls & 0x0f) | ((lm & 0x0f) << 4));
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y[i].d = wf_fp32_to_fp16(max_scale / 63.f);
        y[i].dmin = wf_fp32_to_fp16(max_min / 63.f);
        for (int j = 0; j < WF_QK_K / 32; j++) {
            uint8_t sc, m;
            get_scale_min_k4(j, y[i].scales, &sc, &m);
            const float d = wf_fp16_to_fp32(y[i].d) * sc;
            if (d == 0.0f) continue;
            const float dm = wf_fp16_to_fp32(y[i].dmin) * m;
            for (int l = 0; l < 32; l++) {
                int q = nearest_int((x[32 * j + l] + dm) / d);
                L[32 * j + l] = (uint8_t)MAX(0, MIN(15, q));
            }
        }
        uint8_t *q = y[i].qs;
        for (int j = 0; j < WF_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void q4_K_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q4_K *x = vx;
    for (int64_t i = 0; i < n / WF_QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = wf_fp16_to_fp32(x[i].d), min = wf_fp16_to_fp32(x[i].dmin);
        for (int j = 0, is = 0; j < WF_QK_K; j += 64, q += 32, is += 2) {
            uint8_t sc, m;
            get_scale_min_k4(is, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void q4_K_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const wf_block_q4_K *x = vx;
    const wf_block_q8_K *y = vy;
    float sums[8] = {0};
    float sumf = 0;
    for (int i = 0; i < n / WF_QK_K; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) get_scale_min_k4(j, x[i].scales, &sc[j], &mn[j]);
        int summ = 0;
        for (int j = 0; j < WF_QK_K / 16; j++) summ += y[i].bsums[j] * mn[j / 2];
        int32_t aux32[8] = {0};
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        for (int j = 0; j < WF_QK_K / 32; j++, q8 += 32) {
            const int shift = (j & 1) * 4;
            for (int l = 0; l < 32; l++)
                aux32[l & 7] += sc[j] * (((q4[l] >> shift) & 0x0f) * q8[l]);
            if (j & 1) q4 += 32;
        }
        const float d = wf_fp16_to_fp32(x[i].d) * y[i].d;
        for (int l = 0; l < 8; l++) sums[l] += d * (float)aux32[l];
        const float dmin = wf_fp16_to_fp32(x[i].dmin) * y[i].d;
        sumf -= dmin * (float)summ;
    }
    for (int l = 0; l < 8; l++) sumf += sums[l];
    *s = sumf;
}

/* ---- Q6_K: 16 groups of 16, x = d*sc*(q - 32) ------------------------------------------- */

static void q6_K_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q6_K *y = vy;
    int8_t L[WF_QK_K];
    float scales[WF_QK_K / 16];
    for (int64_t i = 0; i < n / WF_QK_K; i++, x += WF_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < WF_QK_K / 16; ib++) {
            scales[ib] = fit_scale_sym(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = wf_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < WF_QK_K / 16; ib++)
            y[i].scales[ib] = (int8_t)MIN(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < WF_QK_K / 16; j++) {
            float d = wf_fp16_to_fp32(y[i].d) * y[i].scales[j];
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++) {
                int q = nearest_int(x[16 * j + l] / d);
                L[16 * j + l] = (int8_t)(MAX(-32, MIN(31, q)) + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < WF_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l] & 0xf, q2 = L[j + l + 32] & 0xf;
                const uint8_t q3 = L[j + l + 64] & 0xf, q4 = L[j + l + 96] & 0xf;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

/* The 256 signed 6-bit quants of one block, in element order. */
static void q6_K_unpack(const wf_block_q6_K *b, int8_t *a) {
    const uint8_t *ql = b->ql, *qh = b->qh;
    for (int j = 0; j < WF_QK_K; j += 128, a += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            a[l] = (int8_t)(((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32);
            a[l + 32] = (int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
            a[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            a[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

static void q6_K_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q6_K *x = vx;
    int8_t a[WF_QK_K];
    for (int64_t i = 0; i < n / WF_QK_K; i++, y += WF_QK_K) {
        const float d = wf_fp16_to_fp32(x[i].d);
        q6_K_unpack(&x[i], a);
        /* ggml evaluates d * sc * q left to right in float */
        for (int l = 0; l < WF_QK_K; l++) y[l] = d * (float)x[i].scales[l / 16] * (float)a[l];
    }
}

static void q6_K_vec_dot(int n, float *s, const void *vx, const void *vy) {
    const wf_block_q6_K *x = vx;
    const wf_block_q8_K *y = vy;
    int8_t a[WF_QK_K];
    float sums[8] = {0};
    float sumf = 0;
    for (int i = 0; i < n / WF_QK_K; i++) {
        q6_K_unpack(&x[i], a);
        int32_t aux32[8] = {0};
        for (int l = 0; l < WF_QK_K; l++) aux32[l & 7] += x[i].scales[l / 16] * (a[l] * y[i].qs[l]);
        const float d = wf_fp16_to_fp32(x[i].d) * y[i].d;
        for (int l = 0; l < 8; l++) sums[l] += d * (float)aux32[l];
    }
    for (int l = 0; l < 8; l++) sumf += sums[l];
    *s = sumf;
}

/* ---- Q8_K: activation type of the K-quants ---------------------------------------------- */

static void q8_K_from_float(const float *x, void *vy, int64_t n) {
    wf_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / WF_QK_K; i++, x += WF_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < WF_QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            y[i].d = 0;
            memset(y[i].qs, 0, sizeof(y[i].qs));
            memset(y[i].bsums, 0, sizeof(y[i].bsums)); /* ggml leaves them stale; d = 0 anyway */
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < WF_QK_K; j++) y[i].qs[j] = (int8_t)MIN(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < WF_QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[j * 16 + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

static void q8_K_to_float(const void *vx, float *y, int64_t n) {
    const wf_block_q8_K *x = vx;
    for (int64_t i = 0; i < n / WF_QK_K; i++)
        for (int j = 0; j < WF_QK_K; j++) *y++ = x[i].d * (float)x[i].qs[j];
}

void wf_quant_fill_scalar_k(wf_quant_ops ops[WF_GGML_TYPE_COUNT]) {
    ops[WF_GGML_TYPE_Q4_K] = (wf_quant_ops){.vec_dot_type = WF_GGML_TYPE_Q8_K,
                                            .to_float = q4_K_to_float,
                                            .from_float = q4_K_from_float,
                                            .vec_dot = q4_K_vec_dot,
                                            .from_float_ref = q4_K_from_float};
    ops[WF_GGML_TYPE_Q6_K] = (wf_quant_ops){.vec_dot_type = WF_GGML_TYPE_Q8_K,
                                            .to_float = q6_K_to_float,
                                            .from_float = q6_K_from_float,
                                            .vec_dot = q6_K_vec_dot,
                                            .from_float_ref = q6_K_from_float};
    /* activation type only, like Q8_1: no vec_dot with it as the left operand */
    ops[WF_GGML_TYPE_Q8_K] = (wf_quant_ops){.vec_dot_type = WF_GGML_TYPE_Q8_K,
                                            .to_float = q8_K_to_float,
                                            .from_float = q8_K_from_float,
                                            .from_float_ref = q8_K_from_float};
}
