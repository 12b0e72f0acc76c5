// CUDA backend, first piece: device discovery and a kernel that converts F16 to F32, compiled
// by nvcc whenever the toolkit is present so the GPU build never rots. The CUDA backend of the
// engine seam grows from here.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "engine/cuda/device.h"

__global__ static void f16_to_f32_kernel(const __half *src, float *dst, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __half2float(src[i]);
}

extern "C" int wf_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

extern "C" int wf_cuda_f16_to_f32(const void *src_device, float *dst_device, size_t n,
                                  void *stream) {
    if (n == 0) return 0;
    const unsigned threads = 256;
    unsigned blocks = (unsigned)((n + threads - 1) / threads);
    f16_to_f32_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(
        (const __half *)src_device, dst_device, n);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
