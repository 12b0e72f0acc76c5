/* Bit-for-bit parity with the ggml that llama.cpp runs on this machine: loads the
 * libggml-base/libggml-cpu shared libraries of an installed llama-cpp-python (or
 * $WEFT_GGML_LIB_DIR) and compares, on random rows of many lengths, weft's activation
 * quantisers (Q8_0, Q8_1, Q8_K) byte for byte, its dot products (every ISA path this CPU has,
 * against ggml's best path) bit for bit where weft reproduces ggml's lane order, its
 * dequantisers, and its reference quantisers. Without the libraries the suite reports that
 * it skipped; tests/engine/cpu/data fixtures cover the reference rounding in that case. */
#include <dlfcn.h>
#include <glob.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/cpu/features.h"
#include "engine/cpu/quant.h"

typedef void (*ggml_to_float_t)(const void *x, float *y, int64_t k);
typedef void (*ggml_from_float_t)(const float *x, void *y, int64_t k);
typedef void (*ggml_vec_dot_t)(int n, float *s, size_t bs, const void *x, size_t bx,
                               const void *y, size_t by, int nrc);
struct ggml_type_traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    ggml_to_float_t to_float;
    ggml_from_float_t from_float_ref;
};
struct ggml_type_traits_cpu {
    ggml_from_float_t from_float;
    ggml_vec_dot_t vec_dot;
    int vec_dot_type;
    int64_t nrows;
};

static const struct ggml_type_traits *(*get_traits)(int);
static const struct ggml_type_traits_cpu *(*get_traits_cpu)(int);

static bool load_ggml(void) {
    char dir[1024] = "";
    const char *env = getenv("WEFT_GGML_LIB_DIR");
    if (env) snprintf(dir, sizeof(dir), "%s", env);
    else {
        glob_t g;
        if (glob("/root/.pyenv/versions/*/lib/python3*/site-packages/llama_cpp/lib/libggml-cpu.so", 0, NULL, &g) == 0 ||
            glob("/usr/local/lib/python3*/*-packages/llama_cpp/lib/libggml-cpu.so", 0, NULL, &g) == 0 ||
            glob("/usr/lib/python3*/*-packages/llama_cpp/lib/libggml-cpu.so", 0, NULL, &g) == 0) {
            snprintf(dir, sizeof(dir), "%s", g.gl_pathv[0]);
            char *slash = strrchr(dir, '/');
            if (slash) *slash = '\0';
        }
        globfree(&g);
    }
    if (!dir[0]) return false;
    char path[1100];
    snprintf(path, sizeof(path), "%s/libggml-base.so", dir);
    void *base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    snprintf(path, sizeof(path), "%s/libggml-cpu.so", dir);
    void *cpu = base ? dlopen(path, RTLD_NOW | RTLD_GLOBAL) : NULL;
    if (!cpu) return false;
    void (*cpu_init)(void) = (void (*)(void))dlsym(cpu, "ggml_cpu_init");
    *(void **)&get_traits = dlsym(base, "ggml_get_type_traits");
    *(void **)&get_traits_cpu = dlsym(cpu, "ggml_get_type_traits_cpu");
    if (!cpu_init || !get_traits || !get_traits_cpu) return false;
    cpu_init(); /* fp16 tables */
    return true;
}

/* A llama-cpp-python built with -march=native on another machine may use instructions this
 * CPU lacks: a SIGILL inside ggml means "no usable reference here", not a weft failure. */
static sigjmp_buf sigill_env;
static void on_sigill(int sig) {
    (void)sig;
    siglongjmp(sigill_env, 1);
}

#define GUARD_GGML()                                                                           \
    do {                                                                                       \
        signal(SIGILL, on_sigill);                                                             \
        if (sigsetjmp(sigill_env, 1)) {                                                        \
            fprintf(stderr, "test_ggml_parity: ggml hit an illegal instruction: skipped\n");  \
            return;                                                                            \
        }                                                                                      \
    } while (0)

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void fill(float *x, int n, int pattern) {
    for (int i = 0; i < n; i++) {
        float u = uniform();
        switch (pattern % 4) {
        case 0: x[i] = u; break;
        case 1: x[i] = (u + uniform() + uniform()) * (i % 61 == 0 ? 12.0f : 0.7f); break;
        case 2: x[i] = (float)(int)(u * 20.0f) * 0.25f; break; /* many exact ties after scaling */
        default: x[i] = u * (i % 64 < 32 ? 1e-3f : 30.0f); break;
        }
    }
}

static const int lengths[] = {32, 96, 256, 576, 1536, 4096};

START_TEST(test_activation_quantisers) {
    GUARD_GGML(); /* ggml_cpu_init may already use them */
    if (!load_ggml()) {
        fprintf(stderr, "test_ggml_parity: no libggml-cpu.so found: skipped\n");
        return;
    }
    const wf_ggml_type types[] = {WF_GGML_TYPE_Q8_0, WF_GGML_TYPE_Q8_1, WF_GGML_TYPE_Q8_K};
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); li++)
            for (int p = 0; p < 8; p++) {
                wf_ggml_type t = types[ti];
                int n = lengths[li];
                if (n % wf_ggml_type_info_get(t)->block_size) continue;
                size_t rb = wf_quant_row_size(t, n);
                float *x = malloc(sizeof(float) * (size_t)n);
                unsigned char *a = malloc(rb), *b = malloc(rb);
                fill(x, n, p);
                get_traits_cpu(t)->from_float(x, a, n);
                for (int isa = 0; isa <= (int)wf_cpu_features_get()->isa; isa++) {
                    memset(b, 0, rb);
                    wf_quant_ops_for_isa(t, (wf_cpu_isa)isa)->from_float(x, b, n);
                    for (size_t i = 0; i < rb; i++)
                        ck_assert_msg(a[i] == b[i], "%s %s n=%d p=%d byte %zu: weft %02x ggml %02x",
                                      wf_ggml_type_info_get(t)->name, wf_cpu_isa_name((wf_cpu_isa)isa), n, p, i,
                                      b[i], a[i]);
                }
                free(x); free(a); free(b);
            }
}
END_TEST

START_TEST(test_dot_products_and_dequantisers) {
    GUARD_GGML(); /* ggml_cpu_init may already use them */
    if (!load_ggml()) {
        fprintf(stderr, "test_ggml_parity: no libggml-cpu.so found: skipped\n");
        return;
    }
    bool f16_exact[WF_CPU_ISA_AVX512 + 1] = {true, true, true};
    const wf_ggml_type types[] = {WF_GGML_TYPE_Q4_0, WF_GGML_TYPE_Q4_1, WF_GGML_TYPE_Q5_0,
                                  WF_GGML_TYPE_Q5_1, WF_GGML_TYPE_Q8_0, WF_GGML_TYPE_Q4_K,
                                  WF_GGML_TYPE_Q6_K, WF_GGML_TYPE_F16,  WF_GGML_TYPE_F32};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
        for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); li++)
            for (int p = 0; p < 8; p++) {
                wf_ggml_type t = types[ti];
                int n = lengths[li];
                if (n % wf_ggml_type_info_get(t)->block_size) continue;
                const wf_quant_ops *ops = wf_quant_ops_get(t);
                wf_ggml_type vt = ops->vec_dot_type;
                ck_assert_int_eq((int)vt, get_traits_cpu(t)->vec_dot_type);
                size_t rw = wf_quant_row_size(t, n), ra = wf_quant_row_size(vt, n);
                float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
                float *dx = malloc(sizeof(float) * (size_t)n), *dg = malloc(sizeof(float) * (size_t)n);
                unsigned char *qw = malloc(rw), *qg = malloc(rw), *qa = malloc(ra);
                fill(x, n, p);
                fill(y, n, p + 1);
                /* weights quantised by ggml's reference quantiser, weft's must agree */
                if (get_traits(t)->from_float_ref && t != WF_GGML_TYPE_F32) {
                    get_traits(t)->from_float_ref(x, qg, n);
                    ops->from_float_ref(x, qw, n);
                    /* K-quant searches sum in float and ggml's build may fuse multiply-adds
                     * differently: require equality for the legacy types only */
                    if (t != WF_GGML_TYPE_Q4_K && t != WF_GGML_TYPE_Q6_K)
                        ck_assert_msg(memcmp(qg, qw, rw) == 0, "%s n=%d p=%d: reference quantiser differs",
                                      wf_ggml_type_info_get(t)->name, n, p);
                    memcpy(qw, qg, rw);
                } else {
                    memcpy(qw, x, rw);
                }
                get_traits_cpu(vt)->from_float(y, qa, n);
                if (get_traits(t)->to_float) {
                    get_traits(t)->to_float(qw, dg, n);
                    for (int isa = 0; isa <= (int)wf_cpu_features_get()->isa; isa++) {
                        wf_quant_ops_for_isa(t, (wf_cpu_isa)isa)->to_float(qw, dx, n);
                        for (int i = 0; i < n; i++)
                            ck_assert_msg(fabsf(dx[i] - dg[i]) <= 1e-6f * fabsf(dg[i]), "%s to_float i=%d: %g vs %g",
                                          wf_ggml_type_info_get(t)->name, i, (double)dx[i], (double)dg[i]);
                    }
                }
                float sg, sw;
                get_traits_cpu(t)->vec_dot(n, &sg, 0, qw, 0, qa, 0, 1);
                double mag = 0;
                for (int i = 0; i < n; i++) mag += fabs((double)x[i] * y[i]);
                for (int isa = 0; isa <= (int)wf_cpu_features_get()->isa; isa++) {
                    wf_quant_ops_for_isa(t, (wf_cpu_isa)isa)->vec_dot(n, &sw, qw, qa);
                    /* the SIMD paths of the block types mirror ggml's x86 kernels exactly */
                    bool exact = isa > 0 && t != WF_GGML_TYPE_F16 && t != WF_GGML_TYPE_F32;
                    if (t == WF_GGML_TYPE_F16 && memcmp(&sg, &sw, 4) != 0) f16_exact[isa] = false;
                    if (exact)
                        ck_assert_msg(memcmp(&sg, &sw, 4) == 0, "%s %s n=%d p=%d: weft %.9g ggml %.9g",
                                      wf_ggml_type_info_get(t)->name, wf_cpu_isa_name((wf_cpu_isa)isa), n, p,
                                      (double)sw, (double)sg);
                    else
                        ck_assert_msg(fabs((double)sw - sg) <= 2e-5 * mag + 1e-6, "%s %s n=%d p=%d: %.9g vs %.9g",
                                      wf_ggml_type_info_get(t)->name, wf_cpu_isa_name((wf_cpu_isa)isa), n, p,
                                      (double)sw, (double)sg);
                }
                free(x); free(y); free(dx); free(dg); free(qw); free(qg); free(qa);
            }
    /* F16 (LoRA adapters' A and B): the SIMD path of ggml's width reproduces its lane order and
     * reduction bit for bit (the other width sums in another order) */
    bool any = false;
    for (int isa = 1; isa <= (int)wf_cpu_features_get()->isa; isa++) any = any || f16_exact[isa];
    /* (with WEFT_CPU_ISA capping weft below ggml's own level, the widths cannot agree) */
    if (wf_cpu_features_get()->isa > 0 && !getenv("WEFT_CPU_ISA"))
        ck_assert_msg(any, "no SIMD path of weft's F16 dot product equals ggml's bit for bit");
}
END_TEST

static Suite *parity_suite(void) {
    Suite *s = suite_create("ggml_parity");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_activation_quantisers);
    tcase_add_test(tc, test_dot_products_and_dequantisers);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(parity_suite)
