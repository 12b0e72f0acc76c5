/* Block geometry of GGUF tensor types (values from the GGUF specification). */
#include "engine/ggml_types.h"

#define QK_K 256

static const wf_ggml_type_info type_infos[WF_GGML_TYPE_COUNT] = {
    [WF_GGML_TYPE_F32] = {"f32", 1, 4, true},
    [WF_GGML_TYPE_F16] = {"f16", 1, 2, true},
    [WF_GGML_TYPE_Q4_0] = {"q4_0", 32, 2 + 16, true},
    [WF_GGML_TYPE_Q4_1] = {"q4_1", 32, 2 + 2 + 16, true},
    [WF_GGML_TYPE_Q5_0] = {"q5_0", 32, 2 + 4 + 16, true},
    [WF_GGML_TYPE_Q5_1] = {"q5_1", 32, 2 + 2 + 4 + 16, true},
    [WF_GGML_TYPE_Q8_0] = {"q8_0", 32, 2 + 32, true},
    [WF_GGML_TYPE_Q8_1] = {"q8_1", 32, 2 + 2 + 32, true},
    [WF_GGML_TYPE_Q2_K] = {"q2_k", QK_K, QK_K / 16 + QK_K / 4 + 2 + 2, false},
    [WF_GGML_TYPE_Q3_K] = {"q3_k", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2, false},
    [WF_GGML_TYPE_Q4_K] = {"q4_k", QK_K, 2 + 2 + 12 + QK_K / 2, true},
    [WF_GGML_TYPE_Q5_K] = {"q5_k", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2, false},
    [WF_GGML_TYPE_Q6_K] = {"q6_k", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, true},
    [WF_GGML_TYPE_Q8_K] = {"q8_k", QK_K, 4 + QK_K + QK_K / 16 * 2, true},
    [WF_GGML_TYPE_BF16] = {"bf16", 1, 2, true},
};

const wf_ggml_type_info *wf_ggml_type_info_get(uint32_t type) {
    if (type >= WF_GGML_TYPE_COUNT || type_infos[type].name == NULL) return NULL;
    return &type_infos[type];
}
