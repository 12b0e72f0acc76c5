/* Internal: the per-ISA attention work units (see dit_attn_impl.h) and their tile sizes. */
#ifndef WF_ENGINE_DIT_ATTN_UNIT_H
#define WF_ENGINE_DIT_ATTN_UNIT_H

#define WF__ATTN_QT 64 /* queries per unit: the K and V tile copies are amortised over them */
#define WF__ATTN_KT 64 /* keys per tile */

#define WF__ATTN_UNIT_ARGS                                                                        \
    const float *qkv, float *o, int tokens, int heads, int hd, int b, int h, int q0, float *scratch
void wf__dit_attn_unit_scalar(WF__ATTN_UNIT_ARGS);
void wf__dit_attn_unit_avx2(WF__ATTN_UNIT_ARGS);
void wf__dit_attn_unit_avx512(WF__ATTN_UNIT_ARGS);

#include <stddef.h>
void wf__dit_gelu_unit_scalar(float *x, size_t n);
void wf__dit_gelu_unit_avx2(float *x, size_t n);
void wf__dit_gelu_unit_avx512(float *x, size_t n);

#define WF__LN_ROW_ARGS                                                                           \
    const float *x, float *y, int d, float eps, const float *g, const float *b, const float *sh, const float *sc
void wf__dit_ln_row_scalar(WF__LN_ROW_ARGS);
void wf__dit_ln_row_avx2(WF__LN_ROW_ARGS);
void wf__dit_ln_row_avx512(WF__LN_ROW_ARGS);

#endif
