// FP8 casts with current (per-tensor) scaling (CudaOps::fp8_quantize; ops/fp8_scaling.hpp): the
// tensor's amax (a block max, then an integer atomicMax on the float's bits: non-negative floats
// order as their bits, and a max is the same in any order), then every element cast as
// fp8(x * scale) by core/fp8.hpp's encoder, the same function the CPU runs: the same bytes.
#include <algorithm>

#include "common.cuh"
#include "mpitron/ops/fp8_scaling.hpp"

namespace mpitron::cuda {
namespace {

constexpr unsigned kThreads = 256;

__global__ void amax_kernel(unsigned* amax_bits, const bf* x, int64_t n) {
  __shared__ float sh[32];
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    m = fmaxf(m, fabsf(__bfloat162float(x[i])));
  m = block_max(m, sh);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

__global__ void cast_kernel(uint8_t* q, float* scale_inv, const unsigned* amax_bits, const bf* x, int64_t n,
                            Fp8Format f) {
  const float scale = fp8_scale_for(f, __uint_as_float(*amax_bits));
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.f / scale;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    q[i] = fp8_from_float(f, __bfloat162float(x[i]) * scale);
}

}  // namespace

void fp8_quantize(cudaStream_t s, uint8_t* q, float* scale_inv, float* amax, const bf16* x, int64_t n, Fp8Format f) {
  cuda_check(cudaMemsetAsync(amax, 0, sizeof(float), s), "cudaMemsetAsync(fp8 amax)");
  if (n > 0) {
    amax_kernel<<<grid_for(static_cast<size_t>(n), kThreads), kThreads, 0, s>>>(reinterpret_cast<unsigned*>(amax),
                                                                                as_bf(x), n);
    launch_check("fp8 amax_kernel");
  }
  cast_kernel<<<grid_for(static_cast<size_t>(std::max<int64_t>(n, 1)), kThreads), kThreads, 0, s>>>(
      q, scale_inv, reinterpret_cast<const unsigned*>(amax), as_bf(x), n, f);
  launch_check("fp8 cast_kernel");
}

}  // namespace mpitron::cuda
