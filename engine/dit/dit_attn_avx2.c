/* The attention unit and GELU of dit_attn_impl.h compiled with AVX2 + FMA. */
#define WF__ATTN_UNIT wf__dit_attn_unit_avx2
#define WF__GELU_UNIT wf__dit_gelu_unit_avx2
#include "engine/dit/dit_attn_impl.h"
