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

/* A panel (wf_quant_ops.panel_pack) holds WF_QUANT_PANEL_ROWS activation rows block by block,
 * laid out for the AVX-512 panel kernels: two rows' quants in one 64-byte load, and for each
 * pair of rows the 16 lane scales of the register that holds them, so that a kernel forms a
 * register's dx * dy with one multiply. Per 32-element block: */
typedef struct {
    int8_t qs[WF_QUANT_PANEL_ROWS][WF_QK]; /* the rows' quants */
    /* pair j: row 2j's d in lanes 0-7, row 2j+1's in lanes 8-15 (floats, exact); divided by
     * 16 in lanes 4-7 and 12-15 where the kernel keeps high nibbles in place (see
     * quant_panel_avx512.c), which leaves every product dx * dy exact */
    float scale[WF_QUANT_PANEL_ROWS / 2][16];
    /* Q8_1: d * sum(qs) as stored (fp16 -> float); Q8_0: each row's d, from which the Q8_0
     * kernel forms one weight block's 16 products dx * dy with one multiply */
    float s[WF_QUANT_PANEL_ROWS];
} wf_panel_block;
/* followed, for weight types whose quants carry an offset (Q4_0: 8, Q5_0: 16, Q8_0 stored with
 * +128 to make it unsigned), by the starting value of each int32 lane of pair j (lanes as in
 * scale): -offset * (sum of the 4 activation quants the lane multiplies), 16 times that where
 * high nibbles are kept in place. Accumulating the unsigned-by-signed dot product onto it
 * gives ggml's signed int32 lanes. */
typedef struct {
    int32_t start[WF_QUANT_PANEL_ROWS / 2][16];
} wf_panel_offsets;
_Static_assert(sizeof(wf_panel_block) % 64 == 0, "panel blocks keep 64-byte alignment");

/* The K-quants' panel (Q4_K, Q6_K weights against Q8_K activations): WF_QUANT_PANEL_ROWS
 * activation rows per 256-element super-block, laid out so that the kernel
 * (quant_kpanel_avx512.c) reads each pair of rows' operands with one 64-byte or 32-byte load,
 * nothing joined or summed at run time. Per super-block: */
typedef struct {
    /* chunk t (elements 32t..32t+31), pair p: row 2p's 32 quants, then row 2p+1's */
    int8_t qs[WF_QK_K / WF_QK][WF_QUANT_PANEL_ROWS / 2][2 * WF_QK];
    int16_t bsums[WF_QUANT_PANEL_ROWS / 2][2 * WF_QK_K / 16]; /* pair p: 2p's 16, 2p+1's 16 */
    /* pair p: 2p's bsums summed in pairs (one per 32 elements, ggml's hadd), then 2p+1's */
    int16_t bsums32[WF_QUANT_PANEL_ROWS / 2][2 * WF_QK_K / 32];
    float d4[WF_QUANT_PANEL_ROWS / 2][8];  /* pair p: 2p's d x 4, 2p+1's d x 4 */
    float d8[WF_QUANT_PANEL_ROWS / 2][16]; /* pair p: 2p's d x 8, 2p+1's d x 8 */
} wf_kpanel_block;
_Static_assert(sizeof(wf_kpanel_block) % 64 == 0, "K panel blocks keep 64-byte alignment");

/* Packs nrows <= WF_QUANT_PANEL_ROWS Q8_K rows of k elements (row i at xq + i * xq_row) into
 * one K panel of k / 256 wf_kpanel_blocks; missing rows are zeros. */
void wf_quant_kpanel_pack(const void *xq, size_t xq_row, int nrows, int k, void *panel);

/* The offset of wtype's quants as above (0: none; -1: wtype has no panel layout). */
int wf_quant_panel_offset(wf_ggml_type wtype);

/* Packs nrows <= WF_QUANT_PANEL_ROWS activation rows, already quantised to wtype's vec_dot type
 * (row i at xq + i * xq_row), into one panel (wf_quant_panel_size bytes, 64-byte aligned);
 * missing rows are zeros. high_nibbles_in_place: the layout of the Q4_0/Q4_1 VNNI kernels. */
void wf_quant_panel_pack_layout(wf_ggml_type wtype, bool high_nibbles_in_place, const void *xq,
                                size_t xq_row, int nrows, int k, void *panel);

void wf_quant_fill_scalar(wf_quant_ops ops[WF_GGML_TYPE_COUNT]);
void wf_quant_fill_scalar_k(wf_quant_ops ops[WF_GGML_TYPE_COUNT]); /* K-quants */
void wf_quant_fill_avx2(wf_quant_ops ops[WF_GGML_TYPE_COUNT]);
void wf_quant_fill_avx512(wf_quant_ops ops[WF_GGML_TYPE_COUNT]);
void wf_quant_fill_panel_avx512(wf_quant_ops ops[WF_GGML_TYPE_COUNT], bool vnni);
void wf_quant_fill_kpanel_avx512(wf_quant_ops ops[WF_GGML_TYPE_COUNT], bool vnni); /* Q4_K, Q6_K */

#endif
