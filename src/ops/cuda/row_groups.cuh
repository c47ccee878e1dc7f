// The shape of the norm backward kernels (LayerNorm in layernorm.cu, RMSNorm in llama.cu): one block
// per chunk of rows, split into R row groups of G threads (C/8 rounded up to whole warps; thread i of
// a group owns columns 8i..8i+7). Group g takes the chunk's rows g, g + R, ..., so R rows are in
// flight per block step: with one row at a time the loads of a 768-wide row left the memory system
// mostly idle (gpt2-124m's LayerNorm backward ran at 822 GB/s on an H200). A thread's column sums
// (dweight, dbias) stay in registers over its rows; the block adds its groups' sums in group order
// and writes one partial row per chunk, and column_sum adds the chunks' partials in a fixed order. No
// float atomics: the result does not depend on scheduling.
#pragma once
#include <algorithm>

#include "common.cuh"

namespace mpitron::cuda {

constexpr unsigned kMaxRowGroups = 8;
constexpr unsigned kRowGroupThreads = 512;  // R * G where R > 1: two such blocks fill an SM's registers

struct RowGroupShape {
  unsigned group_threads = 0, groups = 0;  // G, R
  int64_t chunks = 0, rows_per_chunk = 0;  // the grid; rows of one block
  // The dynamic shared memory combine_groups<N> needs.
  size_t combine_bytes(int N) const { return size_t{groups - 1} * group_threads * N * sizeof(float); }
};

inline RowGroupShape row_group_shape(int64_t rows, int64_t C) {
  RowGroupShape s;
  s.group_threads = static_cast<unsigned>((C / 8 + 31) / 32 * 32);
  s.groups = std::clamp(kRowGroupThreads / s.group_threads, 1u, kMaxRowGroups);
  s.chunks = std::min<int64_t>((rows + s.groups - 1) / s.groups, 2 * static_cast<int64_t>(sm_count()));
  s.rows_per_chunk = (rows + s.chunks - 1) / s.chunks;
  s.chunks = (rows + s.rows_per_chunk - 1) / s.rows_per_chunk;
  return s;
}

// Each v[k] summed over the threads of this thread's row group (gw warps from warp g * gw); every
// thread of the block calls it with its own group. sh: kMaxRowGroups * N * 32 floats.
template <int N>
__device__ __forceinline__ void group_sum(float (&v)[N], float* sh, int g, int gw) {
  const int lane = threadIdx.x & 31, w = static_cast<int>(threadIdx.x >> 5) - g * gw;
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = warp_sum(v[k]);
  __syncthreads();  // the previous step's readers are done with sh
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < N; ++k) sh[(g * N + k) * 32 + w] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = warp_sum(lane < gw ? sh[(g * N + k) * 32 + lane] : 0.f);
}

// Group 0's threads get acc summed over the groups, in group order (the other groups' acc are left
// as they were). buf: (R - 1) * G * N floats of dynamic shared memory.
template <int N>
__device__ __forceinline__ void combine_groups(float (&acc)[N], float* buf, int g, int R, int G) {
  if (R == 1) return;
  const int t = static_cast<int>(threadIdx.x) - g * G;
  if (g > 0) {
#pragma unroll
    for (int k = 0; k < N; ++k) buf[((g - 1) * N + k) * G + t] = acc[k];
  }
  __syncthreads();
  if (g == 0)
    for (int h = 1; h < R; ++h) {
#pragma unroll
      for (int k = 0; k < N; ++k) acc[k] += buf[((h - 1) * N + k) * G + t];
    }
}

namespace {

constexpr int kColumnLanes = 16;

// out[c] += sum over i < chunks of partial[i * stride + c], c < n. Block (32, kColumnLanes): lane j of
// a column adds chunks j, j + kColumnLanes, ... (16 loads in flight per column, not one chain), then
// the lanes' sums are added in lane order.
__global__ void column_sum_kernel(float* out, const float* partial, int chunks, int64_t stride, int n) {
  __shared__ float sh[kColumnLanes][33];
  const int c = static_cast<int>(blockIdx.x) * 32 + static_cast<int>(threadIdx.x);
  float s = 0.f;
  if (c < n)
    for (int i = static_cast<int>(threadIdx.y); i < chunks; i += kColumnLanes) s += partial[i * stride + c];
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    float t = 0.f;
    for (int j = 0; j < kColumnLanes; ++j) t += sh[j][threadIdx.x];
    out[c] += t;
  }
}

}  // namespace

inline void column_sum(cudaStream_t s, float* out, const float* partial, int64_t chunks, int64_t stride, int64_t n) {
  column_sum_kernel<<<static_cast<unsigned>((n + 31) / 32), dim3(32, kColumnLanes), 0, s>>>(
      out, partial, static_cast<int>(chunks), stride, static_cast<int>(n));
  launch_check("column_sum_kernel");
}

}  // namespace mpitron::cuda
