/* Run-time CPU feature detection with cpuid and xgetbv (the OS must save the wider registers). */
#include "engine/cpu/features.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long read_xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static void detect(wf_cpu_features *f) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = c & bit_OSXSAVE;
    bool avx = c & bit_AVX;
    f->fma = c & bit_FMA;
    f->f16c = c & bit_F16C;
    unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
    bool ymm_ok = (xcr0 & 0x6) == 0x6;     /* SSE and AVX state */
    bool zmm_ok = (xcr0 & 0xe6) == 0xe6;   /* plus opmask and ZMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    f->avx2 = avx && ymm_ok && (b & bit_AVX2);
    f->avx512f = zmm_ok && (b & bit_AVX512F);
    f->avx512bw = zmm_ok && (b & bit_AVX512BW);
    f->avx512vl = zmm_ok && (b & bit_AVX512VL);
    f->avx512dq = zmm_ok && (b & bit_AVX512DQ);
    f->avx512vnni = zmm_ok && (c & bit_AVX512VNNI);
    /* AVX512_BF16 (vdpbf16ps) is leaf 7 subleaf 1, EAX bit 5. */
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f->avx512bf16 = zmm_ok && f->avx512f && (a & (1u << 5));
}
#else
static void detect(wf_cpu_features *f) { (void)f; }
#endif

static wf_cpu_features features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void init_features(void) {
    detect(&features);
    wf_cpu_isa best = WF_CPU_ISA_SCALAR;
    if (features.avx2 && features.fma && features.f16c) best = WF_CPU_ISA_AVX2;
    if (best == WF_CPU_ISA_AVX2 && features.avx512f && features.avx512bw && features.avx512vl &&
        features.avx512dq)
        best = WF_CPU_ISA_AVX512;
    const char *cap = getenv("WEFT_CPU_ISA");
    if (cap && strcmp(cap, "scalar") == 0) best = WF_CPU_ISA_SCALAR;
    else if (cap && strcmp(cap, "avx2") == 0 && best > WF_CPU_ISA_AVX2) best = WF_CPU_ISA_AVX2;
    features.isa = best;
}

const wf_cpu_features *wf_cpu_features_get(void) {
    pthread_once(&features_once, init_features);
    return &features;
}

const char *wf_cpu_isa_name(wf_cpu_isa isa) {
    switch (isa) {
    case WF_CPU_ISA_SCALAR: return "scalar";
    case WF_CPU_ISA_AVX2: return "avx2";
    case WF_CPU_ISA_AVX512: return "avx512";
    }
    return "?";
}
