/* Internal to engine/cpu: GGUF block layouts (byte-identical to ggml's) and the per-ISA tables
 * behind wf_quant_ops. Each quant_<isa>.c fills the slots it specialises; quant.c stacks them
 * (scalar, then avx2, then avx512) so a missing slot falls back to the next lower path. */
#ifndef WF_ENGINE_CPU_QUANT_IMPL_H
#define WF_ENGINE_CPU_QUANT_IMPL_H

#include <assert.h>
#include <stdint.h>

#include "engine/cpu/quant.h"

#define WF_QK 32    /* block size of the legacy types */
#define WF_QK_K 256 /* super-block size of the K-quants */
#define WF_K_SCALE_SIZE 12

typedef uint16_t wf_half;

typedef struct { wf_half d; uint8_t qs[WF_QK / 2]; } wf_block_q4_0;
typedef struct { wf_half d, m; uint8_t qs[WF_QK / 2]; } wf_block_q4_1;
typedef struct { wf_half d; uint8_t qh[4]; uint8_t qs[WF_QK / 2]; } wf_block_q5_0;
typedef struct { wf_half d, m; uint8_t qh[4]; uint8_t qs[WF_QK / 2]; } wf_block_q5_1;
typedef struct { wf_half d; int8_t qs[WF_QK]; } wf_block_q8_0;
typedef struct { wf_half d, s; int8_t qs[WF_QK]; } wf_block_q8_1; /* s = d * sum(qs) */
typedef struct {
    wf_half d, dmin;                 /* super-block scales for the 6-bit scales and mins */
    uint8_t scales[WF_K_SCALE_SIZE]; /* 8 scales + 8 mins, 6 bits each */
    uint8_t qs[WF_QK_K / 2];
} wf_block_q4_K;
typedef struct {
    uint8_t ql[WF_QK_K / 2];     /* low 4 bits */
    uint8_t qh[WF_QK_K / 4];     /* high 2 bits */
    int8_t scales[WF_QK_K / 16]; /* 8-bit scales */
    wf_half d;
} wf_block_q6_K;
typedef struct {
    float d;
    int8_t qs[WF_QK_K];
    int16_t bsums[WF_QK_K / 16]; /* sums of groups of 16 quants */
} wf_block_q8_K;

_Static_assert(sizeof(wf_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(wf_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(wf_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(wf_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(wf_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(wf_block_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(wf_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(wf_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(wf_block_q8_K) == 292, "q8_K layout");

void wf_quant_fill_scalar(wf_quant_ops ops[WF_GGML_TYPE_COUNT]);
void wf_quant_fill_scalar_k(wf_quant_ops ops[WF_GGML_TYPE_COUNT]); /* K-quants */
void wf_quant_fill_avx2(wf_quant_ops ops[WF_GGML_TYPE_COUNT]);
void wf_quant_fill_avx512(wf_quant_ops ops[WF_GGML_TYPE_COUNT]);

#endif
