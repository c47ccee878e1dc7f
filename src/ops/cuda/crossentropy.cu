// Softmax + cross-entropy over rows of bf16 logits [rows, Vp], one block per row, fp32 math.
// Each thread keeps an online (max, sum of exp) pair over its columns (16-byte packs when
// Vp % 8 == 0 and the buffer is aligned); the block combines the pairs. Columns >= V never count.
// Vocab-parallel (TP): every shard computes its partial (max, sumexp, target logit), the caller
// all-reduces max, rescales, all-reduces the sums, and combines; the backward then uses the
// global lse on each shard.
#include <cfloat>

#include "common.cuh"

namespace mpitron::cuda {
namespace {

constexpr unsigned kThreads = 512;

struct RowArgs {
  int64_t Vp, V;
  bool vec;
};

// Calls f(col, value) for every column < V of the row this block owns, split over the threads.
template <class F>
__device__ __forceinline__ void for_cols(const bf* row, const RowArgs& a, F f) {
  if (a.vec) {
    for (int64_t p = threadIdx.x; p * 8 < a.V; p += blockDim.x) {
      Bf8 v = reinterpret_cast<const Bf8*>(row)[p];
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (p * 8 + k < a.V) f(p * 8 + k, __bfloat162float(v.v[k]));
    }
  } else {
    for (int64_t c = threadIdx.x; c < a.V; c += blockDim.x) f(c, __bfloat162float(row[c]));
  }
}

// Block-wide (max, sum exp(x - max)) over the row's real columns.
__device__ __forceinline__ void row_stats(const bf* row, const RowArgs& a, float* sh, float* out_max, float* out_sum) {
  float m = -INFINITY, s = 0.f;
  for_cols(row, a, [&](int64_t, float x) {
    if (x > m) {
      s = s * __expf(m - x) + 1.f;
      m = x;
    } else {
      s += __expf(x - m);
    }
  });
  float M = block_max(m, sh);
  s = (m == -INFINITY) ? 0.f : s * __expf(m - M);
  *out_sum = block_sum(s, sh);
  *out_max = M;
}

// Writes scale * (exp(x - lse) - onehot(t_local)) over [0, V), 0 over [V, Vp); zero row if !valid.
__device__ __forceinline__ void write_grad(bf* row, const RowArgs& a, float lse, int64_t t_local, bool valid,
                                           float scale) {
  if (a.vec) {
    for (int64_t p = threadIdx.x; p * 8 < a.Vp; p += blockDim.x) {
      Bf8 v = reinterpret_cast<const Bf8*>(row)[p], o;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        int64_t c = p * 8 + k;
        float g = 0.f;
        if (valid && c < a.V) g = scale * (__expf(__bfloat162float(v.v[k]) - lse) - (c == t_local ? 1.f : 0.f));
        o.v[k] = __float2bfloat16_rn(g);
      }
      reinterpret_cast<Bf8*>(row)[p] = o;
    }
  } else {
    for (int64_t c = threadIdx.x; c < a.Vp; c += blockDim.x) {
      float g = 0.f;
      if (valid && c < a.V) g = scale * (__expf(__bfloat162float(row[c]) - lse) - (c == t_local ? 1.f : 0.f));
      row[c] = __float2bfloat16_rn(g);
    }
  }
}

__global__ void ce_forward_kernel(float* losses, float* lse, bf* logits, const int32_t* targets, RowArgs a,
                                  bool backward, float scale) {
  __shared__ float sh[32];
  int64_t r = blockIdx.x;
  bf* row = logits + r * a.Vp;
  float M, S;
  row_stats(row, a, sh, &M, &S);
  float l = M + logf(S);
  int32_t t = targets ? targets[r] : -1;
  bool valid = t >= 0 && t < a.V;
  if (threadIdx.x == 0) {
    lse[r] = l;
    losses[r] = valid ? l - __bfloat162float(row[valid ? t : 0]) : 0.f;
  }
  if (backward) {
    __syncthreads();  // thread 0 read row[t] before anyone overwrites it
    write_grad(row, a, l, t, valid, scale);
  }
}

__global__ void ce_backward_kernel(bf* logits, const float* lse, const int32_t* targets, RowArgs a, float scale,
                                   int64_t vocab_begin, bool shard) {
  int64_t r = blockIdx.x;
  int32_t t = targets[r];
  bool valid = shard ? t >= 0 : (t >= 0 && t < a.V);
  write_grad(logits + r * a.Vp, a, lse[r], static_cast<int64_t>(t) - vocab_begin, valid, scale);
}

__global__ void ce_partial_kernel(float* max, float* sumexp, float* target_logit, const bf* logits,
                                  const int32_t* targets, RowArgs a, int64_t vocab_begin) {
  __shared__ float sh[32];
  int64_t r = blockIdx.x;
  const bf* row = logits + r * a.Vp;
  float M, S;
  row_stats(row, a, sh, &M, &S);
  if (threadIdx.x == 0) {
    int64_t tl = targets ? static_cast<int64_t>(targets[r]) - vocab_begin : -1;
    bool own = targets && targets[r] >= 0 && tl >= 0 && tl < a.V;
    max[r] = M;
    sumexp[r] = S;
    target_logit[r] = own ? __bfloat162float(row[own ? tl : 0]) : 0.f;
  }
}

__global__ void ce_rescale_kernel(float* sumexp, const float* local_max, const float* global_max, int64_t rows) {
  int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r < rows && sumexp[r] > 0.f) sumexp[r] *= __expf(local_max[r] - global_max[r]);
}

__global__ void ce_combine_kernel(float* losses, float* lse, const float* global_max, const float* sumexp,
                                  const float* target_logit, const int32_t* targets, int64_t rows) {
  int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  float l = global_max[r] + logf(sumexp[r]);
  lse[r] = l;
  losses[r] = (targets && targets[r] >= 0) ? l - target_logit[r] : 0.f;
}

RowArgs row_args(const void* logits, int64_t Vp, int64_t V, const char* what) {
  if (V <= 0 || V > Vp)
    throw_error(std::string(what) + ": need 0 < V <= Vp (V " + std::to_string(V) + ", Vp " + std::to_string(Vp) + ")");
  return RowArgs{Vp, V, Vp % 8 == 0 && aligned16(logits)};
}

unsigned row_blocks(int64_t rows, const char* what) {
  if (rows > 0x7fffffff) throw_error(std::string(what) + ": too many rows for one launch");
  return static_cast<unsigned>(rows);
}

}  // namespace

void crossentropy_forward(cudaStream_t s, float* losses, float* lse, const bf16* logits, const int32_t* targets,
                          int64_t rows, int64_t Vp, int64_t V) {
  if (rows <= 0) return;
  RowArgs a = row_args(logits, Vp, V, "crossentropy_forward");
  ce_forward_kernel<<<row_blocks(rows, "crossentropy_forward"), kThreads, 0, s>>>(
      losses, lse, const_cast<bf*>(as_bf(logits)), targets, a, false, 0.f);
  launch_check("ce_forward_kernel");
}

void crossentropy_fused(cudaStream_t s, float* losses, float* lse, bf16* logits, const int32_t* targets, int64_t rows,
                        int64_t Vp, int64_t V, float scale) {
  if (rows <= 0) return;
  if (!targets) throw_error("crossentropy_fused: targets are required");
  RowArgs a = row_args(logits, Vp, V, "crossentropy_fused");
  ce_forward_kernel<<<row_blocks(rows, "crossentropy_fused"), kThreads, 0, s>>>(losses, lse, as_bf(logits), targets, a,
                                                                                true, scale);
  launch_check("ce_forward_kernel(fused)");
}

void crossentropy_backward(cudaStream_t s, bf16* dlogits, const float* lse, const int32_t* targets, int64_t rows,
                           int64_t Vp, int64_t V, float scale, int64_t vocab_begin, bool shard) {
  if (rows <= 0) return;
  RowArgs a = row_args(dlogits, Vp, V, "crossentropy_backward");
  ce_backward_kernel<<<row_blocks(rows, "crossentropy_backward"), kThreads, 0, s>>>(as_bf(dlogits), lse, targets, a,
                                                                                    scale, vocab_begin, shard);
  launch_check("ce_backward_kernel");
}

void crossentropy_partial(cudaStream_t s, float* max, float* sumexp, float* target_logit, const bf16* logits,
                          const int32_t* targets, int64_t rows, int64_t Vp, int64_t V, int64_t vocab_begin) {
  if (rows <= 0) return;
  RowArgs a = row_args(logits, Vp, V, "crossentropy_partial");
  ce_partial_kernel<<<row_blocks(rows, "crossentropy_partial"), kThreads, 0, s>>>(max, sumexp, target_logit,
                                                                                  as_bf(logits), targets, a,
                                                                                  vocab_begin);
  launch_check("ce_partial_kernel");
}

void crossentropy_rescale(cudaStream_t s, float* sumexp, const float* local_max, const float* global_max,
                          int64_t rows) {
  if (rows <= 0) return;
  ce_rescale_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, s>>>(sumexp, local_max, global_max, rows);
  launch_check("ce_rescale_kernel");
}

void crossentropy_combine(cudaStream_t s, float* losses, float* lse, const float* global_max, const float* sumexp,
                          const float* target_logit, const int32_t* targets, int64_t rows) {
  if (rows <= 0) return;
  ce_combine_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, s>>>(losses, lse, global_max, sumexp,
                                                                              target_logit, targets, rows);
  launch_check("ce_combine_kernel");
}

}  // namespace mpitron::cuda
