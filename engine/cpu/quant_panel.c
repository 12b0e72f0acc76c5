/* Packing of quantised activation rows into the panels of the batched kernels (layout in
 * quant_impl.h). Plain C: packing touches each activation byte once per matmul, the kernels
 * touch it once per weight row tile. */
#include <string.h>

#include "engine/cpu/quant_impl.h"

int wf_quant_panel_offset(wf_ggml_type wtype) {
    switch (wtype) {
    case WF_GGML_TYPE_Q4_0: return 8;
    case WF_GGML_TYPE_Q5_0: return 16;
    case WF_GGML_TYPE_Q8_0: return 128;
    case WF_GGML_TYPE_Q4_1:
    case WF_GGML_TYPE_Q5_1: return 0;
    default: return -1;
    }
}

size_t wf_quant_panel_size(wf_ggml_type wtype, int k) {
    if (wtype == WF_GGML_TYPE_Q4_K || wtype == WF_GGML_TYPE_Q6_K)
        return k > 0 && k % WF_QK_K == 0 ? (size_t)(k / WF_QK_K) * sizeof(wf_kpanel_block) : 0;
    int offset = wf_quant_panel_offset(wtype);
    if (offset < 0 || k <= 0 || k % WF_QK != 0) return 0;
    size_t per_block = sizeof(wf_panel_block) + (offset ? sizeof(wf_panel_offsets) : 0);
    return (size_t)(k / WF_QK) * per_block;
}

void wf_quant_panel_pack_layout(wf_ggml_type wtype, bool high_nibbles_in_place, const void *xq,
                                size_t xq_row, int nrows, int k, void *panel) {
    const int offset = wf_quant_panel_offset(wtype);
    const bool q8_1 = wtype == WF_GGML_TYPE_Q4_1 || wtype == WF_GGML_TYPE_Q5_1;
    const size_t in_block = q8_1 ? sizeof(wf_block_q8_1) : sizeof(wf_block_q8_0);
    unsigned char *out = panel;
    for (int i = 0; i < k / WF_QK; i++) {
        wf_panel_block *pb = (wf_panel_block *)(void *)out;
        memset(pb, 0, sizeof *pb);
        for (int r = 0; r < nrows; r++) {
            const unsigned char *blk = (const unsigned char *)xq + (size_t)r * xq_row + (size_t)i * in_block;
            float d;
            if (q8_1) {
                const wf_block_q8_1 *b = (const void *)blk;
                memcpy(pb->qs[r], b->qs, WF_QK);
                d = wf_fp16_to_fp32(b->d);
                pb->s[r] = wf_fp16_to_fp32(b->s);
            } else {
                const wf_block_q8_0 *b = (const void *)blk;
                memcpy(pb->qs[r], b->qs, WF_QK);
                d = wf_fp16_to_fp32(b->d);
                pb->s[r] = d;
            }
            for (int lane = 0; lane < 8; lane++)
                pb->scale[r / 2][8 * (r % 2) + lane] = high_nibbles_in_place && lane >= 4 ? d / 16 : d;
        }
        out += sizeof *pb;
        if (offset) {
            wf_panel_offsets *po = (wf_panel_offsets *)(void *)out;
            for (int r = 0; r < WF_QUANT_PANEL_ROWS; r++)
                for (int lane = 0; lane < 8; lane++) {
                    const int8_t *q = pb->qs[r] + 4 * lane;
                    const int scaled = high_nibbles_in_place && lane >= 4 ? 16 * offset : offset;
                    po->start[r / 2][8 * (r % 2) + lane] = -scaled * (q[0] + q[1] + q[2] + q[3]);
                }
            out += sizeof *po;
        }
    }
}

void wf_quant_kpanel_pack(const void *xq, size_t xq_row, int nrows, int k, void *panel) {
    wf_kpanel_block *out = panel;
    for (int i = 0; i < k / WF_QK_K; i++, out++) {
        memset(out, 0, sizeof *out);
        for (int r = 0; r < nrows; r++) {
            const wf_block_q8_K *b =
                (const void *)((const char *)xq + (size_t)r * xq_row + (size_t)i * sizeof *b);
            const int p = r / 2, h = r % 2;
            for (int t = 0; t < WF_QK_K / WF_QK; t++)
                memcpy(out->qs[t][p] + WF_QK * h, b->qs + WF_QK * t, WF_QK);
            for (int g = 0; g < WF_QK_K / 16; g++) out->bsums[p][16 * h + g] = b->bsums[g];
            for (int g = 0; g < WF_QK_K / 32; g++)
                out->bsums32[p][8 * h + g] = (int16_t)(b->bsums[2 * g] + b->bsums[2 * g + 1]);
            for (int l = 0; l < 4; l++) out->d4[p][4 * h + l] = b->d;
            for (int l = 0; l < 8; l++) out->d8[p][8 * h + l] = b->d;
        }
    }
}
