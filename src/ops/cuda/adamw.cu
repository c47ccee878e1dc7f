// AdamW on fp32 master weights (torch.optim.AdamW order of operations, as the CPU kernel), writing
// the bf16 copy the forward reads; and the deterministic sum of squares for the global grad norm
// (fixed grid, per-block fp64 partials, one final block summing them in order).
#include <cmath>

#include "common.cuh"

namespace mpitron::cuda {
namespace {

struct AdamArgs {
  float grad_scale, beta1, beta2, step_size, bc2_sqrt, eps, decay;
};

__global__ void adamw_kernel(float* p, bf* p_bf16, const float* g, float* m, float* v, size_t n, AdamArgs a) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float gi = g[i] * a.grad_scale;  // the clipping factor: a pass of its own would read and write g again
    float mi = a.beta1 * m[i] + (1.f - a.beta1) * gi;
    float vi = a.beta2 * v[i] + (1.f - a.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = __fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt) + a.eps;
    float pi = p[i] * a.decay - a.step_size * __fdiv_rn(mi, denom);
    p[i] = pi;
    if (p_bf16) p_bf16[i] = __float2bfloat16_rn(pi);
  }
}

constexpr unsigned kSumThreads = 512;

// Each thread keeps four 16-byte loads in flight (one 4-byte load at a time reached ~1.3 TB/s on an
// H200). The elements before x's first 16-byte boundary and after the last whole pack go one per
// thread. The order depends only on x's alignment, n and the grid: the same every step.
__global__ void sumsq_partial_kernel(double* partial, const float* x, size_t n) {
  __shared__ double sh[kSumThreads / 32];
  const size_t head = min(n, static_cast<size_t>((16 - (reinterpret_cast<uintptr_t>(x) & 15)) & 15) / sizeof(float));
  const size_t packs = (n - head) / 4, rest = n - head - 4 * packs;
  const F4* body = reinterpret_cast<const F4*>(x + head);
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  double acc = 0.0;
  size_t i = tid;
  for (; i + 3 * stride < packs; i += 4 * stride) {
    F4 q[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) q[u] = body[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc += static_cast<double>(q[u].v[k]) * q[u].v[k];
  }
  for (; i < packs; i += stride) {
    const F4 q = body[i];
#pragma unroll
    for (int k = 0; k < 4; ++k) acc += static_cast<double>(q.v[k]) * q.v[k];
  }
  if (tid < head) acc += static_cast<double>(x[tid]) * x[tid];
  if (tid < rest) acc += static_cast<double>(x[head + 4 * packs + tid]) * x[head + 4 * packs + tid];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) s += sh[w];
    partial[blockIdx.x] = s;
  }
}

// One warp: lane j adds the partials j, j + 32, ..., then the lanes' sums meet in a fixed tree.
__global__ void sumsq_finish_kernel(double* dst, const double* partial, unsigned blocks, bool accumulate) {
  double s = 0.0;
  for (unsigned b = threadIdx.x; b < blocks; b += 32) s += partial[b];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x == 0) *dst = accumulate ? *dst + s : s;
}

}  // namespace

void adamw(cudaStream_t s, float* p, bf16* p_bf16, const float* g, float grad_scale, float* m, float* v, size_t n,
           float lr, float beta1, float beta2, float eps, float weight_decay, int step) {
  if (!n) return;
  if (step < 1) throw_error("adamw: step must be >= 1 (got " + std::to_string(step) + ")");
  // torch computes the bias corrections in double (Python floats); the CPU kernel does the same.
  double bc1 = 1.0 - std::pow(static_cast<double>(beta1), step);
  double bc2 = 1.0 - std::pow(static_cast<double>(beta2), step);
  AdamArgs a{grad_scale,
             beta1,
             beta2,
             static_cast<float>(lr / bc1),
             static_cast<float>(std::sqrt(bc2)),
             eps,
             static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay)};
  adamw_kernel<<<grid_for(n, 256), 256, 0, s>>>(p, p_bf16 ? as_bf(p_bf16) : nullptr, g, m, v, n, a);
  launch_check("adamw_kernel");
}

void sum_squares(cudaStream_t s, Scratch& scratch, double* dst, const float* x, size_t n, bool accumulate) {
  // A fixed block count (not derived from n alone): the same n always sums in the same order.
  unsigned blocks = static_cast<unsigned>(2 * sm_count());
  size_t need = (n + kSumThreads - 1) / kSumThreads;
  if (need < blocks) blocks = static_cast<unsigned>(need ? need : 1);
  double* partial = static_cast<double*>(scratch.get(blocks * sizeof(double)));
  sumsq_partial_kernel<<<blocks, kSumThreads, 0, s>>>(partial, x, n);
  launch_check("sumsq_partial_kernel");
  sumsq_finish_kernel<<<1, 32, 0, s>>>(dst, partial, blocks, accumulate);
  launch_check("sumsq_finish_kernel");
}

}  // namespace mpitron::cuda
