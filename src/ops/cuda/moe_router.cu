// The MoE router on the device (CudaOps::moe_router_*): each kernel a loop of GPU threads over the
// per-thread steps of include/mpitron/ops/moe_router.hpp, which the CPU emulation runs in plain
// loops. No floating-point atomics; the kept copies per expert are integer atomics (the same sum in
// any order), so the routing does not depend on scheduling.
#include <algorithm>

#include "common.cuh"
#include "mpitron/ops/moe_router.hpp"

namespace mpitron::cuda {
namespace {

using namespace moe_router;
constexpr unsigned kThreads = 128;

struct LogitBf {
  const bf* p;
  __host__ __device__ float operator()(int64_t i) const { return __bfloat162float(p[i]); }
};
struct StoreBf {
  bf* p;
  __host__ __device__ void operator()(int64_t i, float v) const { p[i] = __float2bfloat16(v); }
};

__global__ void select_kernel(MoeRouterShape s, LogitBf logit, MoeRouterArrays a) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < s.rows; t += int64_t{gridDim.x} * blockDim.x)
    select_row(s, logit, t, a);
}
// grid (S, G): thread e of block (sq, g).
__global__ void seq_partial_kernel(MoeRouterShape s, MoeRouterArrays a) {
  for (int e = threadIdx.x; e < s.n_experts; e += blockDim.x) seq_partial(s, blockIdx.x, blockIdx.y, e, a);
}
__global__ void seq_sum_kernel(MoeRouterShape s, MoeRouterArrays a) {
  for (int e = threadIdx.x; e < s.n_experts; e += blockDim.x) seq_sum(s, blockIdx.x, e, a);
}
// Block c: the chunk's counts per expert; then one block scans each expert over the chunks.
__global__ void chunk_count_kernel(MoeRouterShape s, MoeRouterArrays a) {
  const RouterScratch sc(s, a.scratch);
  for (int e = threadIdx.x; e < s.n_experts; e += blockDim.x)
    sc.chunk[blockIdx.x * int64_t{s.n_experts} + e] = chunk_count(s, blockIdx.x, e, a);
}
__global__ void chunk_scan_kernel(MoeRouterShape s, MoeRouterArrays a) {
  const RouterScratch sc(s, a.scratch);
  for (int e = threadIdx.x; e < s.n_experts; e += blockDim.x) {
    chunk_scan(s, e, sc);
    sc.counts[e] = 0;
  }
}
__global__ void rank_kernel(MoeRouterShape s, MoeRouterArrays a) {
  const RouterScratch sc(s, a.scratch);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < s.copies(); i += int64_t{gridDim.x} * blockDim.x)
    if (rank_copy(s, i, a, sc))
      atomicAdd(reinterpret_cast<unsigned long long*>(sc.counts + a.expert[i]), 1ull);
}
__global__ void offsets_kernel(MoeRouterShape s, MoeRouterArrays a) { offsets(s, a, RouterScratch(s, a.scratch)); }
__global__ void place_kernel(MoeRouterShape s, MoeRouterArrays a) {
  const RouterScratch sc(s, a.scratch);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < s.copies(); i += int64_t{gridDim.x} * blockDim.x)
    place_copy(s, i, a, sc);
}
__global__ void loss_kernel(MoeRouterShape s, MoeRouterArrays a) {
  loss_partial(s, threadIdx.x, a);
  __syncthreads();
  if (threadIdx.x == 0) loss_total(s, a);
}
__global__ void backward_kernel(MoeRouterShape s, StoreBf dl, const float* dweight, double aux_scale, double z_scale,
                                MoeRouterArrays a) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < s.rows; t += int64_t{gridDim.x} * blockDim.x)
    backward_row(s, t, dweight, aux_scale, z_scale, a, dl);
}

}  // namespace

void moe_router_select(cudaStream_t st, const bf16* logits, const MoeRouterShape& s, const MoeRouterArrays& a) {
  if (s.rows <= 0) return;
  select_kernel<<<grid_for(static_cast<size_t>(s.rows), kThreads), kThreads, 0, st>>>(s, LogitBf{as_bf(logits)}, a);
  launch_check("moe_router select_kernel");
  const unsigned et = static_cast<unsigned>(std::min(s.n_experts, 256));
  seq_partial_kernel<<<dim3(static_cast<unsigned>(s.seqs()), kRouterPsumGroups), et, 0, st>>>(s, a);
  launch_check("moe_router seq_partial_kernel");
  seq_sum_kernel<<<static_cast<unsigned>(s.seqs()), et, 0, st>>>(s, a);
  launch_check("moe_router seq_sum_kernel");
}

void moe_router_place(cudaStream_t st, const MoeRouterShape& s, const MoeRouterArrays& a) {
  if (s.rows <= 0) return;
  const unsigned et = static_cast<unsigned>(std::min(s.n_experts, 256));
  chunk_count_kernel<<<static_cast<unsigned>(s.chunks()), et, 0, st>>>(s, a);
  launch_check("moe_router chunk_count_kernel");
  chunk_scan_kernel<<<1, et, 0, st>>>(s, a);
  launch_check("moe_router chunk_scan_kernel");
  rank_kernel<<<static_cast<unsigned>(s.chunks()), static_cast<unsigned>(kRouterChunk), 0, st>>>(s, a);
  launch_check("moe_router rank_kernel");
  offsets_kernel<<<1, 1, 0, st>>>(s, a);
  launch_check("moe_router offsets_kernel");
  place_kernel<<<grid_for(static_cast<size_t>(s.copies()), kThreads), kThreads, 0, st>>>(s, a);
  launch_check("moe_router place_kernel");
  loss_kernel<<<1, kRouterReduceThreads, 0, st>>>(s, a);
  launch_check("moe_router loss_kernel");
}

void moe_router_backward(cudaStream_t st, bf16* dlogits, const float* dweight, double aux_scale, double z_scale,
                         const MoeRouterShape& s, const MoeRouterArrays& a) {
  if (s.rows <= 0) return;
  backward_kernel<<<grid_for(static_cast<size_t>(s.rows), kThreads), kThreads, 0, st>>>(s, StoreBf{as_bf(dlogits)}, dweight, aux_scale,
                                                                      z_scale, a);
  launch_check("moe_router backward_kernel");
}

}  // namespace mpitron::cuda
