// The mixture-of-experts row kernels, twins of src/ops/cpu/moe_rows.cpp (CudaOps::moe_*): rows of
// C bf16 moved by index between token order and the experts' sorted order, and the
// routing-weighted combine of each token's expert outputs with its backward. One block per row
// (grid-stride), each thread owning 16-byte packs of 8 columns; sums in fp32 in the copies' order,
// one rounding to bf16; the routing weights' gradient a block reduction in a fixed order
// (deterministic, no atomics). C must be a multiple of 8.
#include <algorithm>

#include "common.cuh"

namespace mpitron::cuda {
namespace {

constexpr unsigned kThreads = 128;

unsigned row_grid(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 20)); }

__device__ __forceinline__ Bf8 load8(const bf* p) { return *reinterpret_cast<const Bf8*>(p); }
__device__ __forceinline__ void store8(bf* p, const Bf8& v) { *reinterpret_cast<Bf8*>(p) = v; }

__global__ void gather_kernel(bf* dst, const bf* src, const int64_t* idx, int64_t n, int64_t C) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const bf* s = src + idx[i] * C;
    bf* d = dst + i * C;
    for (int64_t c = threadIdx.x * 8; c < C; c += blockDim.x * 8) store8(d + c, load8(s + c));
  }
}

__global__ void scatter_kernel(bf* dst, const bf* src, const int64_t* idx, int64_t n, int64_t C) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const bf* s = src + i * C;
    bf* d = dst + idx[i] * C;
    for (int64_t c = threadIdx.x * 8; c < C; c += blockDim.x * 8) store8(d + c, load8(s + c));
  }
}

__global__ void combine_kernel(bf* out, const bf* ys, const int64_t* pos, const float* weight, int64_t R, int k,
                               int64_t C) {
  for (int64_t t = blockIdx.x; t < R; t += gridDim.x)
    for (int64_t c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
      float acc[8] = {};
      for (int j = 0; j < k; ++j) {
        const int64_t p = pos[t * k + j];
        if (p < 0) continue;
        const float w = weight[t * k + j];
        const Bf8 y = load8(ys + p * C + c);
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[q] += w * __bfloat162float(y.v[q]);
      }
      Bf8 o;
#pragma unroll
      for (int q = 0; q < 8; ++q) o.v[q] = __float2bfloat16(acc[q]);
      store8(out + t * C + c, o);
    }
}

// One block per token: for each of its copies, dys = w dout (bf16) and dweight = dout . ys.
__global__ void combine_backward_kernel(bf* dys, float* dweight, const bf* dout, const bf* ys, const int64_t* pos,
                                        const float* weight, int64_t R, int k, int64_t C) {
  __shared__ float sh[32];
  for (int64_t t = blockIdx.x; t < R; t += gridDim.x)
    for (int j = 0; j < k; ++j) {
      const int64_t p = pos[t * k + j];  // the same for the whole block: no divergence at the reduction
      if (p < 0) {
        if (threadIdx.x == 0) dweight[t * k + j] = 0.f;
        continue;
      }
      const float w = weight[t * k + j];
      float dot = 0.f;
      for (int64_t c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
        const Bf8 d = load8(dout + t * C + c), y = load8(ys + p * C + c);
        Bf8 dy;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const float dv = __bfloat162float(d.v[q]);
          dot += dv * __bfloat162float(y.v[q]);
          dy.v[q] = __float2bfloat16(w * dv);
        }
        store8(dys + p * C + c, dy);
      }
      dot = block_sum(dot, sh);
      if (threadIdx.x == 0) dweight[t * k + j] = dot;
    }
}

__global__ void uncombine_add_kernel(bf* dx, const bf* dxs, const int64_t* pos, int64_t R, int k, int64_t C) {
  for (int64_t t = blockIdx.x; t < R; t += gridDim.x)
    for (int64_t c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
      const Bf8 x = load8(dx + t * C + c);
      float acc[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[q] = __bfloat162float(x.v[q]);
      bool any = false;
      for (int j = 0; j < k; ++j) {
        const int64_t p = pos[t * k + j];
        if (p < 0) continue;
        any = true;
        const Bf8 s = load8(dxs + p * C + c);
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[q] += __bfloat162float(s.v[q]);
      }
      if (!any) continue;
      Bf8 o;
#pragma unroll
      for (int q = 0; q < 8; ++q) o.v[q] = __float2bfloat16(acc[q]);
      store8(dx + t * C + c, o);
    }
}

}  // namespace

void moe_gather_rows(cudaStream_t s, bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C) {
  require_packable(C, "moe_gather_rows", {dst, src});
  if (n <= 0) return;
  gather_kernel<<<row_grid(n), kThreads, 0, s>>>(as_bf(dst), as_bf(src), idx, n, C);
  launch_check("moe gather_kernel");
}

void moe_scatter_rows(cudaStream_t s, bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C) {
  require_packable(C, "moe_scatter_rows", {dst, src});
  if (n <= 0) return;
  scatter_kernel<<<row_grid(n), kThreads, 0, s>>>(as_bf(dst), as_bf(src), idx, n, C);
  launch_check("moe scatter_kernel");
}

void moe_combine(cudaStream_t s, bf16* out, const bf16* ys, const int64_t* pos, const float* weight, int64_t R, int k,
                 int64_t C) {
  require_packable(C, "moe_combine", {out, ys});
  if (R <= 0) return;
  combine_kernel<<<row_grid(R), kThreads, 0, s>>>(as_bf(out), as_bf(ys), pos, weight, R, k, C);
  launch_check("moe combine_kernel");
}

void moe_combine_backward(cudaStream_t s, bf16* dys, float* dweight, const bf16* dout, const bf16* ys,
                          const int64_t* pos, const float* weight, int64_t R, int k, int64_t C) {
  require_packable(C, "moe_combine_backward", {dys, dout, ys});
  if (R <= 0) return;
  combine_backward_kernel<<<row_grid(R), kThreads, 0, s>>>(as_bf(dys), dweight, as_bf(dout), as_bf(ys), pos, weight, R,
                                                            k, C);
  launch_check("moe combine_backward_kernel");
}

void moe_uncombine_add(cudaStream_t s, bf16* dx, const bf16* dxs, const int64_t* pos, int64_t R, int k, int64_t C) {
  require_packable(C, "moe_uncombine_add", {dx, dxs});
  if (R <= 0) return;
  uncombine_add_kernel<<<row_grid(R), kThreads, 0, s>>>(as_bf(dx), as_bf(dxs), pos, R, k, C);
  launch_check("moe uncombine_add_kernel");
}

}  // namespace mpitron::cuda
