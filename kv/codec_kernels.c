/* The KV codec's row kernels: the scalar reference every SIMD level is checked against, and the
 * run-time choice of level. */
#include "kv/codec_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static void scalar_f16_to_f32(const uint16_t *src, float *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = wf_fp16_to_fp32(src[i]);
}

static void scalar_f32_to_f16(const float *src, uint16_t *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = wf_fp32_to_fp16(src[i]);
}

static void scalar_mul(float *x, const float *s, int n) {
    for (int i = 0; i < n; i++) x[i] *= s[i];
}

static void scalar_fill(float *x, float v, int n) {
    for (int i = 0; i < n; i++) x[i] = v;
}

static void scalar_fwht(float *x, int n) {
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += h << 1)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

static float scalar_absmax(const float *x, int n) {
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > m) m = a;
    }
    return m;
}

static void scalar_absmax_acc(const float *x, float *m, int n) {
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > m[i]) m[i] = a;
    }
}

static void scalar_quantize(const float *x, const float *inv, int qmax, uint8_t *codes, int n) {
    float q = (float)qmax;
    for (int i = 0; i < n; i++) {
        float v = x[i] * inv[i];
        if (!(v >= -q)) v = -q; /* NaN too */
        if (v > q) v = q;
        codes[i] = (uint8_t)(lrintf(v) + qmax);
    }
}

static void scalar_dequantize(const uint8_t *codes, const float *scale, int qmax, float *x,
                              int n) {
    for (int i = 0; i < n; i++) x[i] = (float)((int)codes[i] - qmax) * scale[i];
}

static void scalar_quantize4(const float *x, const float *inv, uint8_t *packed, int n) {
    uint8_t c[2];
    for (int i = 0; i < n; i += 2) {
        scalar_quantize(x + i, inv + i, 7, c, 2);
        packed[i >> 1] = (uint8_t)(c[0] | c[1] << 4);
    }
}

static void scalar_dequantize4(const uint8_t *packed, const float *scale, float *x, int n) {
    for (int i = 0; i < n; i += 2) {
        uint8_t c[2] = {(uint8_t)(packed[i >> 1] & 15u), (uint8_t)(packed[i >> 1] >> 4)};
        scalar_dequantize(c, scale + i, 7, x + i, 2);
    }
}

const wf__kvc_kernels wf__kvc_kernels_scalar = {
    .name = "scalar",
    .f16_to_f32 = scalar_f16_to_f32,
    .f32_to_f16 = scalar_f32_to_f16,
    .mul = scalar_mul,
    .fill = scalar_fill,
    .fwht = scalar_fwht,
    .absmax = scalar_absmax,
    .absmax_acc = scalar_absmax_acc,
    .quantize = scalar_quantize,
    .dequantize = scalar_dequantize,
    .quantize4 = scalar_quantize4,
    .dequantize4 = scalar_dequantize4,
};

#if defined(__x86_64__) || defined(__i386__)
/* F16C has no __builtin_cpu_supports name in every compiler we build with: ask CPUID. */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c >> 29) & 1u;
}

static int cpu_level(void) {
    __builtin_cpu_init();
    int level = 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
        level = 1;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
            level = 2;
    }
    return level;
}
#else
static int cpu_level(void) { return 0; }
#endif

static int cap_level(void) {
    const char *cap = getenv("WEFT_CPU_ISA");
    if (!cap || !*cap) return 2;
    if (!strcmp(cap, "scalar")) return 0;
    if (!strcmp(cap, "avx2")) return 1;
    return 2;
}

static const wf__kvc_kernels *level_kernels(int level) {
#if defined(__x86_64__) || defined(__i386__)
    if (level >= 2) return &wf__kvc_kernels_avx512;
    if (level == 1) return &wf__kvc_kernels_avx2;
#endif
    (void)level;
    return &wf__kvc_kernels_scalar;
}

const wf__kvc_kernels *wf__kvc_kernels_best(void) {
    int level = cpu_level(), cap = cap_level();
    return level_kernels(level < cap ? level : cap);
}

const wf__kvc_kernels *wf__kvc_kernels_by_name(const char *name) {
    int want = !strcmp(name, "scalar") ? 0 : !strcmp(name, "avx2") ? 1
             : !strcmp(name, "avx512") ? 2 : -1;
    if (want < 0 || want > cpu_level()) return NULL;
    return level_kernels(want);
}
