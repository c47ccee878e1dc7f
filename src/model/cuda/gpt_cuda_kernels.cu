// GptCuda's own kernel (gpt_cuda_kernels.hpp); the shared device helpers come from the ops.
#include "../../ops/cuda/common.cuh"
#include "gpt_cuda_kernels.hpp"

namespace mpitron::cuda {
namespace {

__global__ void scale_bf16_kernel(bf* x, float scale, size_t n) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * scale);
}

}  // namespace

void scale_bf16(cudaStream_t s, bf16* x, float scale, size_t n) {
  if (!n) return;
  scale_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(as_bf(x), scale, n);
  launch_check("scale_bf16_kernel");
}

}  // namespace mpitron::cuda
