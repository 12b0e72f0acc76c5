/* Which SIMD instruction sets this CPU (and OS) supports, detected once at run time. Kernels
 * pick their path from this, never from compile-time flags.
 *
 *     const wf_cpu_features *f = wf_cpu_features_get();
 *     if (f->avx512vnni) dot = dot_q8_avx512vnni; else if (f->avx2) ...
 *
 * WEFT_CPU_ISA=scalar|avx2|avx512 in the environment caps the level (for tests and
 * benchmarks). Thread-safe; the struct is computed on first call and never changes. */
#ifndef WF_ENGINE_CPU_FEATURES_H
#define WF_ENGINE_CPU_FEATURES_H

#include <stdbool.h>

typedef enum wf_cpu_isa {
    WF_CPU_ISA_SCALAR = 0,
    WF_CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    WF_CPU_ISA_AVX512 = 2, /* AVX-512 F/BW/VL/DQ (+ VNNI where avx512vnni is set) */
} wf_cpu_isa;

typedef struct wf_cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni;
    bool avx512bf16; /* vdpbf16ps; used only when isa is WF_CPU_ISA_AVX512 */
    wf_cpu_isa isa; /* best usable level, after the WEFT_CPU_ISA cap */
} wf_cpu_features;

const wf_cpu_features *wf_cpu_features_get(void);
const char *wf_cpu_isa_name(wf_cpu_isa isa);

#endif
