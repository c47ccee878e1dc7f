// The plain attention path (model.attention = "naive"), used to cross-check cuDNN on the GPU.
// Forward:  q,k,v <- permute(qkv); S = scale Q K^T (fp32); P = causal softmax(S) (bf16), stats;
//           O = P V; out <- unpermute(O).
// Backward: S recomputed, P = exp(S - stats); dP = dO V^T (fp32); dS = P (dP - rowsum(P dP));
//           dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO (fp32); dqkv <- unpermute(dQ), and
//           dK, dV summed over each group of query heads (in order: deterministic) into bf16.
// Grouped-query attention (KV < H kv heads) copies each kv head to its H / KV query heads in the
// permute, so every product stays one strided-batched GEMM over B*H; simple rather than lean
// (the naive path exists to cross-check cuDNN).
// Row-major X[T, hd] is column-major X^T, so every product below is written for cuBLAS as the
// transpose of the row-major one (C^T = B^T A^T).
#include <cublas_v2.h>

#include <cmath>

#include "attention.hpp"
#include "common.cuh"

namespace mpitron::cuda {
namespace {

// bhtd[B,H,T,hd] <-> rows of width W holding head slices at column off + (h / group)*hd (qkv: W =
// (H + 2 KV) hd). group > 1 (kv heads read for query heads) only with to_bhtd.
__global__ void permute_kernel(bf* bhtd, bf* rows, int B, int T, int H, int hd, int64_t W, int64_t off, int group,
                               bool to_bhtd) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t n = static_cast<int64_t>(B) * H * T * hd;
  if (i >= n) return;
  int d = static_cast<int>(i % hd);
  int64_t r = i / hd;
  int t = static_cast<int>(r % T);
  r /= T;
  int h = static_cast<int>(r % H);
  int b = static_cast<int>(r / H);
  int64_t j = (static_cast<int64_t>(b) * T + t) * W + off + static_cast<int64_t>(h / group) * hd + d;
  if (to_bhtd)
    bhtd[i] = rows[j];
  else
    rows[j] = bhtd[i];
}

// rows[b, t, off + kh*hd + d] = sum over the group's query heads g of bhtd[b, kh*group + g, t, d]
// (fp32, in order), rounded once to bf16.
__global__ void group_sum_kernel(bf* rows, const float* bhtd, int B, int T, int KV, int group, int hd, int64_t W,
                                 int64_t off) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t n = static_cast<int64_t>(B) * KV * T * hd;
  if (i >= n) return;
  int d = static_cast<int>(i % hd);
  int64_t r = i / hd;
  int t = static_cast<int>(r % T);
  r /= T;
  int kh = static_cast<int>(r % KV);
  int b = static_cast<int>(r / KV);
  const int64_t head = static_cast<int64_t>(T) * hd;
  const float* src = bhtd + (static_cast<int64_t>(b) * KV * group + static_cast<int64_t>(kh) * group) * head +
                     static_cast<int64_t>(t) * hd + d;
  float acc = 0.f;
  for (int g = 0; g < group; ++g) acc += src[g * head];
  rows[(static_cast<int64_t>(b) * T + t) * W + off + static_cast<int64_t>(kh) * hd + d] = __float2bfloat16_rn(acc);
}

// The first key row i of (b, h) sees: its document's start (doc_start [B, T], document masking), else 0.
__device__ __forceinline__ int first_key(const int32_t* doc_start, int64_t row, int T, int H) {
  return doc_start ? doc_start[row / (static_cast<int64_t>(H) * T) * T + row % T] : 0;
}

// One warp per row i of one (b,h): stats = logsumexp(S[i, lo..i]); P = exp(S - stats), 0 elsewhere
// (lo = first_key: 0, or the row's document start).
__global__ void softmax_fwd_kernel(bf* P, float* stats, const float* S, int64_t rows, int T, int H,
                                   const int32_t* doc_start) {
  int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = static_cast<int>(row % T), lo = first_key(doc_start, row, T, H);
  const float* s = S + row * T;
  float m = -INFINITY;
  for (int j = lo + lane; j <= i; j += 32) m = fmaxf(m, s[j]);
  m = warp_max(m);
  float sum = 0.f;
  for (int j = lo + lane; j <= i; j += 32) sum += __expf(s[j] - m);
  float lse = m + logf(warp_sum(sum));
  bf* p = P + row * T;
  for (int j = lane; j < T; j += 32) p[j] = __float2bfloat16_rn(j >= lo && j <= i ? __expf(s[j] - lse) : 0.f);
  if (lane == 0) stats[row] = lse;
}

// One warp per row: P = exp(S - stats) (bf16, for dV), dS = P (dP - sum_j P dP) (bf16).
__global__ void softmax_bwd_kernel(bf* P, bf* dS, const float* S, const float* stats, const float* dP, int64_t rows,
                                   int T, int H, const int32_t* doc_start) {
  int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = static_cast<int>(row % T), lo = first_key(doc_start, row, T, H);
  const float *s = S + row * T, *dp = dP + row * T;
  float lse = stats[row];
  float acc = 0.f;
  for (int j = lo + lane; j <= i; j += 32) acc += __expf(s[j] - lse) * dp[j];
  acc = warp_sum(acc);
  for (int j = lane; j < T; j += 32) {
    float p = j >= lo && j <= i ? __expf(s[j] - lse) : 0.f;
    P[row * T + j] = __float2bfloat16_rn(p);
    dS[row * T + j] = __float2bfloat16_rn(p * (dp[j] - acc));
  }
}

void cublas_check_status(cublasStatus_t st, const char* what) { cublas_check(st, what); }

// Column-major strided-batched GEMM, bf16 A/B, fp32 compute, D bf16 or fp32.
void gemm_sb(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, float alpha, const bf* A, int lda, int64_t sA,
             const bf* B, int ldb, int64_t sB, void* D, bool d_f32, int ldd, int64_t sD, int batch, const char* what) {
  const float beta = 0.f;
  cublas_check_status(
      cublasGemmStridedBatchedEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A,
                                 CUDA_R_16BF, lda, sA, B, CUDA_R_16BF, ldb, sB, &beta, D,
                                 d_f32 ? CUDA_R_32F : CUDA_R_16BF, ldd, sD, batch, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT),
      what);
}

class NaiveAttention final : public Attention {
 public:
  NaiveAttention(cublasHandle_t h, Scratch& scratch) : cublas_(h), scratch_(scratch) {}

  void forward(cudaStream_t s, bf16* out, float* stats, const bf16* qkv, int B, int T, int H, int hd, int KV,
               const int32_t* doc_start) override {
    const int64_t BH = static_cast<int64_t>(B) * H, TT = static_cast<int64_t>(T) * T, Thd = static_cast<int64_t>(T) * hd;
    const int64_t C = static_cast<int64_t>(H) * hd, Ckv = static_cast<int64_t>(KV) * hd, W = C + 2 * Ckv;
    const int group = H / KV;
    Carve c(scratch_.get(4 * bytes(BH * Thd, 2) + bytes(BH * TT, 4) + bytes(BH * TT, 2)));
    bf *q = c.take<bf>(BH * Thd), *k = c.take<bf>(BH * Thd), *v = c.take<bf>(BH * Thd), *o = c.take<bf>(BH * Thd);
    float* S = c.take<float>(BH * TT);
    bf* P = c.take<bf>(BH * TT);
    bind(s);
    bf* src = const_cast<bf*>(as_bf(qkv));
    permute(s, q, src, B, T, H, hd, W, 0, 1, true);
    permute(s, k, src, B, T, H, hd, W, C, group, true);
    permute(s, v, src, B, T, H, hd, W, C + Ckv, group, true);
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    // S[T,T] = scale Q K^T  ->  S^T = K Q^T (col-major): A = K (T), B = Q (N).
    gemm_sb(cublas_, true, false, T, T, hd, scale, k, hd, Thd, q, hd, Thd, S, true, T, TT, static_cast<int>(BH),
            "cublasGemmStridedBatchedEx(S = Q K^T)");
    softmax_fwd_kernel<<<blocks_for_rows(BH * T), 256, 0, s>>>(P, stats, S, BH * T, T, H, doc_start);
    launch_check("softmax_fwd_kernel");
    // O[T,hd] = P V  ->  O^T = V^T P^T: A = V (N), B = P (N).
    gemm_sb(cublas_, false, false, hd, T, T, 1.f, v, hd, Thd, P, T, TT, o, false, hd, Thd, static_cast<int>(BH),
            "cublasGemmStridedBatchedEx(O = P V)");
    permute(s, o, as_bf(out), B, T, H, hd, C, 0, 1, false);
  }

  void backward(cudaStream_t s, bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16*, const float* stats, int B,
                int T, int H, int hd, int KV, const int32_t* doc_start) override {
    const int64_t BH = static_cast<int64_t>(B) * H, TT = static_cast<int64_t>(T) * T, Thd = static_cast<int64_t>(T) * hd;
    const int64_t C = static_cast<int64_t>(H) * hd, Ckv = static_cast<int64_t>(KV) * hd, W = C + 2 * Ckv;
    const int group = H / KV;
    Carve c(scratch_.get(5 * bytes(BH * Thd, 2) + 2 * bytes(BH * Thd, 4) + 2 * bytes(BH * TT, 4) +
                         2 * bytes(BH * TT, 2)));
    bf *q = c.take<bf>(BH * Thd), *k = c.take<bf>(BH * Thd), *v = c.take<bf>(BH * Thd), *dO = c.take<bf>(BH * Thd);
    bf* dq = c.take<bf>(BH * Thd);
    float *dk = c.take<float>(BH * Thd), *dv = c.take<float>(BH * Thd);  // per query head, summed per group below
    float *S = c.take<float>(BH * TT), *dP = c.take<float>(BH * TT);
    bf *P = c.take<bf>(BH * TT), *dS = c.take<bf>(BH * TT);
    bind(s);
    bf* src = const_cast<bf*>(as_bf(qkv));
    permute(s, q, src, B, T, H, hd, W, 0, 1, true);
    permute(s, k, src, B, T, H, hd, W, C, group, true);
    permute(s, v, src, B, T, H, hd, W, C + Ckv, group, true);
    permute(s, dO, const_cast<bf*>(as_bf(dout)), B, T, H, hd, C, 0, 1, true);
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    const int nb = static_cast<int>(BH);
    gemm_sb(cublas_, true, false, T, T, hd, scale, k, hd, Thd, q, hd, Thd, S, true, T, TT, nb,
            "cublasGemmStridedBatchedEx(S = Q K^T)");
    // dP[T,T] = dO V^T  ->  same form as S with (dO, V).
    gemm_sb(cublas_, true, false, T, T, hd, 1.f, v, hd, Thd, dO, hd, Thd, dP, true, T, TT, nb,
            "cublasGemmStridedBatchedEx(dP = dO V^T)");
    softmax_bwd_kernel<<<blocks_for_rows(BH * T), 256, 0, s>>>(P, dS, S, stats, dP, BH * T, T, H, doc_start);
    launch_check("softmax_bwd_kernel");
    // dQ[T,hd] = scale dS K  ->  dQ^T = K^T dS^T: A = K (N), B = dS (N).
    gemm_sb(cublas_, false, false, hd, T, T, scale, k, hd, Thd, dS, T, TT, dq, false, hd, Thd, nb,
            "cublasGemmStridedBatchedEx(dQ = dS K)");
    // dK[T,hd] = scale dS^T Q  ->  dK^T = Q^T dS: A = Q (N), B = dS (T).
    gemm_sb(cublas_, false, true, hd, T, T, scale, q, hd, Thd, dS, T, TT, dk, true, hd, Thd, nb,
            "cublasGemmStridedBatchedEx(dK = dS^T Q)");
    // dV[T,hd] = P^T dO  ->  dV^T = dO^T P: A = dO (N), B = P (T).
    gemm_sb(cublas_, false, true, hd, T, T, 1.f, dO, hd, Thd, P, T, TT, dv, true, hd, Thd, nb,
            "cublasGemmStridedBatchedEx(dV = P^T dO)");
    bf* dst = as_bf(dqkv);
    permute(s, dq, dst, B, T, H, hd, W, 0, 1, false);
    group_sum(s, dst, dk, B, T, KV, group, hd, W, C);
    group_sum(s, dst, dv, B, T, KV, group, hd, W, C + Ckv);
  }

 private:
  struct Carve {
    explicit Carve(void* p) : p_(static_cast<char*>(p)) {}
    template <class T>
    T* take(int64_t n) {
      T* r = reinterpret_cast<T*>(p_);
      p_ += bytes(n, sizeof(T));
      return r;
    }
    char* p_;
  };
  static size_t bytes(int64_t n, size_t elem) { return (static_cast<size_t>(n) * elem + 255) / 256 * 256; }
  static unsigned blocks_for_rows(int64_t rows) { return static_cast<unsigned>((rows + 7) / 8); }
  void bind(cudaStream_t s) { cublas_check(cublasSetStream(cublas_, s), "cublasSetStream"); }
  static void permute(cudaStream_t s, bf* bhtd, bf* rows, int B, int T, int H, int hd, int64_t W, int64_t off,
                      int group, bool to_bhtd) {
    int64_t n = static_cast<int64_t>(B) * H * T * hd;
    permute_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(bhtd, rows, B, T, H, hd, W, off, group,
                                                                          to_bhtd);
    launch_check("permute_kernel");
  }
  static void group_sum(cudaStream_t s, bf* rows, const float* bhtd, int B, int T, int KV, int group, int hd,
                        int64_t W, int64_t off) {
    int64_t n = static_cast<int64_t>(B) * KV * T * hd;
    group_sum_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(rows, bhtd, B, T, KV, group, hd, W, off);
    launch_check("group_sum_kernel");
  }

  cublasHandle_t cublas_;
  Scratch& scratch_;
};

}  // namespace

std::unique_ptr<Attention> make_naive_attention(cublasHandle_t cublas, Scratch& scratch) {
  return std::make_unique<NaiveAttention>(cublas, scratch);
}

}  // namespace mpitron::cuda
