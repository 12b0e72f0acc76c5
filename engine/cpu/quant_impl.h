/* Internal to engine/cpu: GGUF block layouts (byte-identical to ggml's) and the per-ISA tables
 * behind wf_quant_ops. Each quant_<isa>.c fills the slots it specialises; quant.c stacks them
 * (scalar, then avx2, then avx512) so a missing slot falls back to the next lower path. */
#ifndef WF_ENGINE_CPU_QUANT_IMPL_H
#define WF_ENGINE_CPU_QUANT_IMPL_H

#include <assert.h>
#include <stdbool.h>
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

/* A panel (wf_quant_panel_pack) holds WF_QUANT_PANEL_ROWS activation rows block by block, so
 * that the AVX-512 kernels read two rows' quants with one 64-byte load and all rows' scales
 * with one vector load. Per 32-element block: */
typedef struct {
    int8_t qs[WF_QUANT_PANEL_ROWS][WF_QK]; /* the rows' quants */
    float d[WF_QUANT_PANEL_ROWS];          /* their scales, as floats (exact) */
    float s[WF_QUANT_PANEL_ROWS];          /* Q8_1: d * sum(qs) as stored (fp16 -> float); Q8_0: 0 */
} wf_panel_block;
/* followed, for weight types whose quants carry an offset (Q4_0: 8, Q5_0: 16, Q8_0 stored with
 * +128 to make it unsigned), by int32 offset * (sum of quants 4j..4j+3) for each row and j < 8:
 * subtracting it from the unsigned-by-signed dot product gives ggml's signed int32 lanes. */
typedef struct {
    int32_t lanes[WF_QUANT_PANEL_ROWS][8];
} wf_panel_offsets;
_Static_assert(sizeof(wf_panel_block) % 64 == 0, "panel blocks keep 64-byte alignment");

/* The offset of wtype's quants as above (0: none; -1: wtype has no panel layout). */
int wf_quant_panel_offset(wf_ggml_type wtype);

void wf_quant_fill_scalar(wf_quant_ops ops[WF_GGML_TYPE_COUNT]);
void wf_quant_fill_scalar_k(wf_quant_ops ops[WF_GGML_TYPE_COUNT]); /* K-quants */
void wf_quant_fill_avx2(wf_quant_ops ops[WF_GGML_TYPE_COUNT]);
void wf_quant_fill_avx512(wf_quant_ops ops[WF_GGML_TYPE_COUNT]);
void wf_quant_fill_panel_avx512(wf_quant_ops ops[WF_GGML_TYPE_COUNT], bool vnni);

#endif
