/* The attention unit and GELU of dit_attn_impl.h compiled with AVX-512: 16-float vectors,
 * 4-row tiles (16 accumulators of the 32 zmm registers). */
#define WF__ATTN_UNIT wf__dit_attn_unit_avx512
#define WF__GELU_UNIT wf__dit_gelu_unit_avx512
#define WF__LN_UNIT wf__dit_ln_row_avx512
#define WF__ATTN_VW 16
#define WF__ATTN_R 4
#include "engine/dit/dit_attn_impl.h"
