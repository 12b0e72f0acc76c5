/* CUDA device helpers, callable from C. Built only when WEFT_HAVE_CUDA. */
#ifndef WF_ENGINE_CUDA_DEVICE_H
#define WF_ENGINE_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible CUDA devices; 0 when there is no driver or no device. */
int wf_cuda_device_count(void);
/* dst[i] = (float)src[i] for n halves on `stream` (a cudaStream_t, NULL = default). 0 or -1. */
int wf_cuda_f16_to_f32(const void *src_device, float *dst_device, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
