/* Run-time choice of kernel paths. Compiled without ISA flags: it only stacks the tables the
 * per-ISA files fill, lower levels first, so a slot an ISA does not specialise keeps the
 * next lower implementation. */
#include <pthread.h>

#include "engine/cpu/quant_impl.h"

#define N_ISA 3

static wf_quant_ops tables[N_ISA][WF_GGML_TYPE_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void overlay(wf_quant_ops *dst, const wf_quant_ops *src) {
    for (int t = 0; t < WF_GGML_TYPE_COUNT; t++) {
        if (src[t].to_float) dst[t].to_float = src[t].to_float;
        if (src[t].from_float) dst[t].from_float = src[t].from_float;
        if (src[t].vec_dot) dst[t].vec_dot = src[t].vec_dot;
        if (src[t].from_float_ref) dst[t].from_float_ref = src[t].from_float_ref;
        if (src[t].vec_dot_tile) dst[t].vec_dot_tile = src[t].vec_dot_tile;
        if (src[t].panel_dot) {
            dst[t].panel_dot = src[t].panel_dot;
            dst[t].panel_pack = src[t].panel_pack;
        }
        if (src[t].matvec) dst[t].matvec = src[t].matvec;
    }
}

static void init_tables(void) {
    wf_quant_fill_scalar(tables[WF_CPU_ISA_SCALAR]);
    /* the fill functions of the SIMD files only store pointers: safe to call on any CPU */
    wf_quant_ops simd[WF_GGML_TYPE_COUNT] = {{0}};
    for (int t = 0; t < WF_GGML_TYPE_COUNT; t++) tables[WF_CPU_ISA_AVX2][t] = tables[0][t];
    wf_quant_fill_avx2(simd);
    overlay(tables[WF_CPU_ISA_AVX2], simd);
    for (int t = 0; t < WF_GGML_TYPE_COUNT; t++) tables[WF_CPU_ISA_AVX512][t] = tables[1][t];
    wf_quant_ops simd512[WF_GGML_TYPE_COUNT] = {{0}};
    wf_quant_fill_avx512(simd512);
    overlay(tables[WF_CPU_ISA_AVX512], simd512);
}

const wf_quant_ops *wf_quant_ops_for_isa(wf_ggml_type t, wf_cpu_isa isa) {
    if ((unsigned)t >= WF_GGML_TYPE_COUNT || (unsigned)isa >= N_ISA) return NULL;
    pthread_once(&tables_once, init_tables);
    const wf_quant_ops *ops = &tables[isa][t];
    return ops->to_float ? ops : NULL;
}

const wf_quant_ops *wf_quant_ops_get(wf_ggml_type t) {
    return wf_quant_ops_for_isa(t, wf_cpu_features_get()->isa);
}

size_t wf_quant_row_size(wf_ggml_type t, int64_t n) {
    const wf_ggml_type_info *ti = wf_ggml_type_info_get((uint32_t)t);
    if (!ti || n < 0 || n % ti->block_size != 0) return 0;
    return (size_t)(n / ti->block_size) * ti->type_size;
}
