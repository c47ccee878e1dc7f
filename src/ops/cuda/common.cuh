// Device helpers shared by the kernels: the bf16 type, 16-byte packs (8 bf16 / 4 fp32 per load),
// warp and block reductions. Included by .cu files only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "mpitron/ops/cuda/check.hpp"
#include "kernels.hpp"

namespace mpitron::cuda {

using bf = __nv_bfloat16;
inline bf* as_bf(bf16* p) { return reinterpret_cast<bf*>(p); }
inline const bf* as_bf(const bf16* p) { return reinterpret_cast<const bf*>(p); }

struct alignas(16) Bf8 {
  bf v[8];
};
struct alignas(16) F4 {
  float v[4];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Row kernels reading 16-byte packs: C a multiple of 8 and every (non-null) pointer 16-byte aligned.
inline void require_packable(int64_t C, const char* what, std::initializer_list<const void*> ptrs) {
  if (C % 8 != 0)
    throw_error(std::string(what) + ": C = " + std::to_string(C) + " must be a multiple of 8 (16-byte bf16 packs)");
  for (const void* p : ptrs)
    if (p && !aligned16(p)) throw_error(std::string(what) + ": a pointer is not 16-byte aligned");
}

// Grid size for a grid-stride loop over `work` items with `threads` per block.
inline unsigned grid_for(size_t work, unsigned threads) {
  size_t blocks = (work + threads - 1) / threads;
  size_t cap = static_cast<size_t>(sm_count()) * 32;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks ? blocks : 1);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `sh` holds 32 floats; safe to call repeatedly (syncs before reuse).
__device__ __forceinline__ float block_sum(float v, float* sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace mpitron::cuda
