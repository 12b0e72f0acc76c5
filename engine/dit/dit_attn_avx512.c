/* The attention unit and GELU of dit_attn_impl.h compiled with AVX-512. */
#define WF__ATTN_UNIT wf__dit_attn_unit_avx512
#define WF__GELU_UNIT wf__dit_gelu_unit_avx512
#include "engine/dit/dit_attn_impl.h"
