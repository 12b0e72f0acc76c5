/* The sampler's softmax-weight kernel at 8 lanes (this file is compiled with AVX2/FMA; the
 * sampler calls it only when wf_cpu_features_get() reports AVX2). */
#include "engine/sampler_impl.h"

#if defined(__x86_64__) || defined(__i386__)
WF_SAMPLER_DEFINE_EXP_SUM(, wf_sampler_exp_sum_avx2, 8)
#endif
