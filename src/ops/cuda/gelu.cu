// GELU, tanh approximation (torch approximate='tanh'), bf16 in/out, fp32 math, 16-byte packs.
#include "common.cuh"

namespace mpitron::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr float kS2Pi = 0.7978845608028654f;  // sqrt(2/pi)

__device__ __forceinline__ float gelu(float x) {
  float u = kS2Pi * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad(float x) {
  float x2 = x * x;
  float t = tanhf(kS2Pi * (x + 0.044715f * x2 * x));
  float sech2 = 1.f - t * t;
  return 0.5f * (1.f + t) + 0.5f * x * sech2 * kS2Pi * (1.f + 3.f * 0.044715f * x2);
}

__global__ void gelu_fwd_kernel(bf* out, const bf* inp, size_t n, bool vec) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x, i0 = blockIdx.x * blockDim.x + threadIdx.x;
  size_t head = 0;
  if (vec) {
    for (size_t i = i0; i < n / 8; i += stride) {
      Bf8 x = reinterpret_cast<const Bf8*>(inp)[i], y;
#pragma unroll
      for (int k = 0; k < 8; ++k) y.v[k] = __float2bfloat16_rn(gelu(__bfloat162float(x.v[k])));
      reinterpret_cast<Bf8*>(out)[i] = y;
    }
    head = n / 8 * 8;
  }
  for (size_t i = head + i0; i < n; i += stride) out[i] = __float2bfloat16_rn(gelu(__bfloat162float(inp[i])));
}

__global__ void gelu_bwd_kernel(bf* dinp, const bf* inp, const bf* dout, size_t n, bool vec) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x, i0 = blockIdx.x * blockDim.x + threadIdx.x;
  size_t head = 0;
  if (vec) {
    for (size_t i = i0; i < n / 8; i += stride) {
      Bf8 x = reinterpret_cast<const Bf8*>(inp)[i], d = reinterpret_cast<const Bf8*>(dout)[i], y;
#pragma unroll
      for (int k = 0; k < 8; ++k)
        y.v[k] = __float2bfloat16_rn(gelu_grad(__bfloat162float(x.v[k])) * __bfloat162float(d.v[k]));
      reinterpret_cast<Bf8*>(dinp)[i] = y;
    }
    head = n / 8 * 8;
  }
  for (size_t i = head + i0; i < n; i += stride)
    dinp[i] = __float2bfloat16_rn(gelu_grad(__bfloat162float(inp[i])) * __bfloat162float(dout[i]));
}

}  // namespace

void gelu_forward(cudaStream_t s, bf16* out, const bf16* inp, size_t n) {
  if (!n) return;
  bool vec = aligned16(out) && aligned16(inp);
  gelu_fwd_kernel<<<grid_for(vec ? n / 8 + 1 : n, kThreads), kThreads, 0, s>>>(as_bf(out), as_bf(inp), n, vec);
  launch_check("gelu_fwd_kernel");
}

void gelu_backward(cudaStream_t s, bf16* dinp, const bf16* inp, const bf16* dout, size_t n) {
  if (!n) return;
  bool vec = aligned16(dinp) && aligned16(inp) && aligned16(dout);
  gelu_bwd_kernel<<<grid_for(vec ? n / 8 + 1 : n, kThreads), kThreads, 0, s>>>(as_bf(dinp), as_bf(inp), as_bf(dout),
                                                                                n, vec);
  launch_check("gelu_bwd_kernel");
}

}  // namespace mpitron::cuda
