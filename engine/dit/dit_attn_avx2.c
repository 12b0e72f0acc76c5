/* The attention unit and GELU of dit_attn_impl.h compiled with AVX2 + FMA: 8-float vectors,
 * 2-row tiles (8 accumulators of the 16 ymm registers). */
#define WF__ATTN_UNIT wf__dit_attn_unit_avx2
#define WF__GELU_UNIT wf__dit_gelu_unit_avx2
#define WF__LN_UNIT wf__dit_ln_row_avx2
#define WF__ATTN_VW 8
#define WF__ATTN_R 2
#include "engine/dit/dit_attn_impl.h"
