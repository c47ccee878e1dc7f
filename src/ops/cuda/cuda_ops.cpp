// CudaOps: the GPU backend behind include/mpitron/ops/cuda/cuda_ops.hpp. Owns the stream, the
// cuBLASLt / cuBLAS / cuDNN handles, the cuBLASLt workspace and one stream-ordered scratch buffer;
// the kernels live in one .cu file per family (kernels.hpp), attention in attention_*.
//
// Row-major linear layers through column-major cuBLASLt (row-major X[r,c] is column-major X^T):
//   forward  out[M,N] = inp W^T      ->  out^T = W inp^T: m=N n=M k=K, A=W (T), B=inp (N)
//   dinp     dinp[M,K] = dout W      ->  m=K n=M k=N, A=W (N), B=dout (N)
//   dweight  dW[N,K] += dout^T inp   ->  m=K n=N k=M, A=inp (N), B=dout (T), D fp32, beta 1
#include <cublas_v2.h>
#include <cudnn.h>

#include "attention.hpp"
#include "mpitron/ops/cuda/check.hpp"
#include "kernels.hpp"
#include "matmul_lt.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"

namespace mpitron {
namespace {

using namespace mpitron::cuda;

class DeviceScratch final : public Scratch {
 public:
  explicit DeviceScratch(cudaStream_t s) : s_(s) {}
  ~DeviceScratch() override {
    if (p_) cudaFreeAsync(p_, s_);
  }
  void* get(size_t bytes) override {
    if (bytes <= cap_ && p_) return p_;
    size_t want = std::max(bytes, cap_ + cap_ / 2);
    if (p_) cuda_check(cudaFreeAsync(p_, s_), "cudaFreeAsync(scratch)");
    p_ = nullptr;
    cap_ = 0;
    cuda_check(cudaMallocAsync(&p_, want, s_), "cudaMallocAsync(scratch)");
    cap_ = want;
    return p_;
  }

 private:
  cudaStream_t s_;
  void* p_ = nullptr;
  size_t cap_ = 0;
};

// Ops' convention: 0 kv heads = H (plain multi-head attention); otherwise KV must divide H.
int kv_heads_of(int H, int kv_heads) {
  const int kv = kv_heads == 0 ? H : kv_heads;
  check(kv > 0 && H % kv == 0, "attention: {} kv heads do not divide {} query heads", kv, H);
  return kv;
}

class CudaOpsImpl final : public CudaOps {
 public:
  explicit CudaOpsImpl(const CudaOpsOptions& o) : attention_kind_(o.attention) {
    usage_check(o.attention == "cudnn" || o.attention == "naive",
                "model.attention = '{}' is not one of: cudnn, naive", o.attention);
    if (o.device >= 0) cuda_check(cudaSetDevice(o.device), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    scratch_ = std::make_unique<DeviceScratch>(stream_);
    lt_ = std::make_unique<LtMatmul>(o.lt_workspace_bytes);
    cublas_check(cublasCreate(&cublas_), "cublasCreate");
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&norm_), sizeof(double)), "cudaMalloc(norm)");
    if (attention_kind_ == "cudnn") {
      cudnn_check(cudnnCreate(&cudnn_), "cudnnCreate");
      attention_ = make_cudnn_attention(cudnn_, *scratch_);
      segments_ = make_cudnn_segment_attention(cudnn_, *scratch_);
    } else {
      attention_ = make_naive_attention(cublas_, *scratch_);
    }
  }
  ~CudaOpsImpl() override {
    if (stream_) cudaStreamSynchronize(stream_);
    attention_.reset();
    segments_.reset();
    scratch_.reset();
    lt_.reset();
    if (norm_) cudaFree(norm_);
    if (cudnn_) cudnnDestroy(cudnn_);
    if (cublas_) cublasDestroy(cublas_);
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }

  const char* name() const override { return "cuda"; }
  cudaStream_t stream() const override { return stream_; }
  const std::string& attention_kind() const override { return attention_kind_; }
  void synchronize() override { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int64_t M, int64_t K,
                      int64_t N, bf16* gelu_pre) override {
    LtGemm g;
    g.trans_a = true;
    g.m = N, g.n = M, g.k = K;
    g.A = weight, g.lda = K;
    g.B = inp, g.ldb = K;
    if (gelu_pre) {
      g.D = out, g.ldd = N;
      g.aux = gelu_pre, g.aux_ld = N;
      g.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    } else {
      g.D = out, g.ldd = N;
      g.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
    g.bias = bias;
    lt_->run(g, stream_);
  }

  void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                       const bf16* weight, int64_t M, int64_t K, int64_t N, bool accumulate_dinp,
                       const bf16* gelu_pre) override {
    usage_check(!(gelu_pre && accumulate_dinp), "matmul_backward: gelu_pre and accumulate_dinp exclude each other");
    if (dinp) {
      LtGemm g;
      g.m = K, g.n = M, g.k = N;
      g.A = weight, g.lda = K;
      g.B = dout, g.ldb = N;
      g.D = dinp, g.ldd = K;
      g.beta = accumulate_dinp ? 1.f : 0.f;
      if (gelu_pre) {
        g.epilogue = CUBLASLT_EPILOGUE_DGELU;
        g.aux = const_cast<bf16*>(gelu_pre), g.aux_ld = K;
      }
      lt_->run(g, stream_);
    }
    if (dweight) {
      LtGemm g;
      g.trans_b = true;
      g.m = K, g.n = N, g.k = M;
      g.A = inp, g.lda = K;
      g.B = dout, g.ldb = N;
      g.D = dweight, g.ldd = K, g.d_f32 = true;
      g.beta = 1.f;
      lt_->run(g, stream_);
    }
    if (dbias) column_sums(stream_, *scratch_, dbias, dout, M, N);
  }

  void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight, const bf16* bias,
                         int64_t rows, int64_t C) override {
    cuda::layernorm_forward(stream_, nullptr, out, mean, rstd, inp, nullptr, weight, bias, rows, C);
  }
  void residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a, const bf16* b,
                                  const bf16* weight, const bf16* bias, int64_t rows, int64_t C) override {
    check(residual != nullptr, "residual_layernorm_forward: residual output is required");
    cuda::layernorm_forward(stream_, residual, out, mean, rstd, a, b, weight, bias, rows, C);
  }
  void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                          const bf16* weight, const float* mean, const float* rstd, int64_t rows, int64_t C) override {
    cuda::layernorm_backward(stream_, *scratch_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, C);
  }

  void gelu_forward(bf16* out, const bf16* inp, size_t n) override { cuda::gelu_forward(stream_, out, inp, n); }
  void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) override {
    cuda::gelu_backward(stream_, dinp, inp, dout, n);
  }

  void attention_forward(bf16* out, float* stats, const bf16* qkv, int B, int T, int H, int hd, int kv_heads,
                         const int32_t* doc_start) override {
    attention_->forward(stream_, out, stats, qkv, B, T, H, hd, kv_heads_of(H, kv_heads), doc_start);
  }
  void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* stats, int B,
                          int T, int H, int hd, int kv_heads, const int32_t* doc_start) override {
    attention_->backward(stream_, dqkv, dout, qkv, out, stats, B, T, H, hd, kv_heads_of(H, kv_heads), doc_start);
  }

  void attention_segments_forward(bf16* out, float* lse, const bf16* q, int64_t q_stride, const bf16* k, const bf16* v,
                                  int64_t kv_stride, int H, int KV, int hd, const DeviceSegments& seg) override {
    segment_attention().forward(stream_, out, lse, q, q_stride, k, v, kv_stride, H, KV, hd, seg);
  }
  void attention_segments_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, int64_t q_stride,
                                   const bf16* k, const bf16* v, int64_t kv_stride, const bf16* out, const float* lse,
                                   int H, int KV, int hd, const DeviceSegments& seg) override {
    segment_attention().backward(stream_, dq, dk, dv, dout, q, q_stride, k, v, kv_stride, out, lse, H, KV, hd, seg);
  }
  int attention_graphs() const override { return attention_->graphs() + (segments_ ? segments_->graphs() : 0); }
  void attention_segments_merge(float* acc, float* lse_acc, const bf16* out_step, const float* lse_step, int H,
                                int hd, const DeviceSegments& seg, bool first) override {
    cuda::attention_segments_merge(stream_, acc, lse_acc, out_step, lse_step, seg.table, seg.shape.n, seg.count, seg.B,
                                   seg.Tq, H, hd, first);
  }
  void add_bf16_rows(float* dst, int64_t dst_stride, const bf16* src, int64_t src_stride, int64_t rows,
                     int64_t cols) override {
    cuda::add_bf16_rows(stream_, dst, dst_stride, src, src_stride, rows, cols);
  }

  void attention_block_forward(float* o, float* m, float* l, const bf16* q, int64_t q_stride, const bf16* kv, int B,
                               int Tq, int Tk, int H, int KV, int hd, const int32_t* qpos, const int32_t* kpos,
                               const int32_t* qstart, bool first) override {
    cuda::attention_block_forward(stream_, o, m, l, q, q_stride, kv, B, Tq, Tk, H, KV, hd, qpos, kpos, qstart, first);
  }
  void attention_block_finish(bf16* out, float* lse, const float* o, const float* m, const float* l, int B, int T,
                              int H, int hd) override {
    cuda::attention_block_finish(stream_, out, lse, o, m, l, B, T, H, hd);
  }
  void attention_block_dsum(float* dsum, const bf16* dout, const bf16* out, int B, int T, int H, int hd) override {
    cuda::attention_block_dsum(stream_, dsum, dout, out, B, T, H, hd);
  }
  void attention_block_backward(float* dq, float* dkv, const bf16* q, int64_t q_stride, const bf16* kv,
                                const bf16* dout, const float* lse, const float* dsum, int B, int Tq, int Tk, int H,
                                int KV, int hd, const int32_t* qpos, const int32_t* kpos,
                                const int32_t* qstart) override {
    cuda::attention_block_backward(stream_, dq, dkv, q, q_stride, kv, dout, lse, dsum, B, Tq, Tk, H, KV, hd, qpos,
                                   kpos, qstart);
  }
  void attention_block_grads(bf16* dqkv, const float* dq, const float* dkv, int64_t rows, int H, int KV,
                             int hd) override {
    cuda::attention_block_grads(stream_, dqkv, dq, dkv, rows, H, KV, hd);
  }

  void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int64_t rows, int64_t C,
                       float eps) override {
    cuda::rmsnorm_forward(stream_, out, rstd, inp, weight, rows, C, eps);
  }
  void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const bf16* weight,
                        const float* rstd, int64_t rows, int64_t C) override {
    cuda::rmsnorm_backward(stream_, *scratch_, dinp, dweight, dout, inp, weight, rstd, rows, C);
  }
  void rope(bf16* x, int B, int T, int n_heads, int hd, int64_t row_stride, const RopeFreqs& freqs, int pos0,
            bool inverse) override {
    check(freqs.inv_freq.size() == static_cast<size_t>(hd / 2), "rope: head dim {} with a table of {} frequencies",
          hd, freqs.inv_freq.size());
    cuda::rope(stream_, x, B, T, n_heads, hd, row_stride, freqs.inv_freq.data(), freqs.scale, pos0, inverse);
  }
  void swiglu_forward(bf16* out, const bf16* gate_up, int64_t rows, int64_t F) override {
    cuda::swiglu_forward(stream_, out, gate_up, rows, F);
  }
  void swiglu_backward(bf16* dgate_up, const bf16* gate_up, const bf16* dout, int64_t rows, int64_t F) override {
    cuda::swiglu_backward(stream_, dgate_up, gate_up, dout, rows, F);
  }

  void moe_gather_rows(bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C) override {
    cuda::moe_gather_rows(stream_, dst, src, idx, n, C);
  }
  void moe_scatter_rows(bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C) override {
    cuda::moe_scatter_rows(stream_, dst, src, idx, n, C);
  }
  void moe_combine(bf16* out, const bf16* ys, const int64_t* pos, const float* weight, int64_t R, int k,
                   int64_t C) override {
    cuda::moe_combine(stream_, out, ys, pos, weight, R, k, C);
  }
  void moe_combine_backward(bf16* dys, float* dweight, const bf16* dout, const bf16* ys, const int64_t* pos,
                            const float* weight, int64_t R, int k, int64_t C) override {
    cuda::moe_combine_backward(stream_, dys, dweight, dout, ys, pos, weight, R, k, C);
  }
  void moe_uncombine_add(bf16* dx, const bf16* dxs, const int64_t* pos, int64_t R, int k, int64_t C) override {
    cuda::moe_uncombine_add(stream_, dx, dxs, pos, R, k, C);
  }
  void moe_router_select(const bf16* logits, const MoeRouterShape& s, const MoeRouterArrays& a) override {
    cuda::moe_router_select(stream_, logits, s, a);
  }
  void moe_router_place(const MoeRouterShape& s, const MoeRouterArrays& a) override { cuda::moe_router_place(stream_, s, a); }
  void fp8_amax(float* amax, const bf16* x, int64_t n) override { cuda::fp8_amax(stream_, amax, x, n); }
  void fp8_cast(uint8_t* q, uint8_t* qt, float* scale_inv, const float* amax, const bf16* x, int64_t rows,
                int64_t cols, Fp8Format f, Fp8DeviceStats* stats) override {
    cuda::fp8_cast(stream_, q, qt, scale_inv, amax, x, rows, cols, f, stats);
  }
  // Row-major out[M, N] = a b^T is column-major out^T[N, M] = b^T a: cuBLASLt's A is our b (TN).
  void fp8_gemm(const Fp8Gemm& f) override {
    f.check();
    const auto type = [](Fp8Format x) { return x == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; };
    LtGemm g;
    g.trans_a = true;
    g.m = f.N, g.n = f.M, g.k = f.K;
    g.A = f.b, g.lda = f.K, g.a_type = type(f.b_format), g.a_scale = f.b_scale_inv;
    g.B = f.a, g.ldb = f.K, g.b_type = type(f.a_format), g.b_scale = f.a_scale_inv;
    g.ldd = f.N;
    if (f.acc) {
      g.D = f.acc, g.d_f32 = true, g.beta = 1.f;
    } else {
      g.D = f.out, g.bias = f.bias;
      g.epilogue = f.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
    lt_->run(g, stream_);
  }
  void moe_router_backward(bf16* dlogits, const float* dweight, double aux_scale, double z_scale, const MoeRouterShape& s,
                           const MoeRouterArrays& a) override {
    cuda::moe_router_backward(stream_, dlogits, dweight, aux_scale, z_scale, s, a);
  }

  void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int T, int C,
                         int64_t vocab_begin, int64_t vocab_end, const int32_t* positions, bool per_row) override {
    cuda::embedding_forward(stream_, out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end, positions, per_row);
  }
  void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B, int T, int C,
                          int64_t vocab_begin, int64_t vocab_end, const int32_t* positions, bool per_row) override {
    cuda::embedding_backward(stream_, *scratch_, dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end,
                             positions, per_row);
  }

  void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n) override {
    cuda::residual_forward(stream_, out, a, b, n);
  }
  void add_inplace(float* a, const float* b, size_t n) override { cuda::add_inplace(stream_, a, b, n); }
  void scale_inplace(float* a, float s, size_t n) override { cuda::scale_inplace(stream_, a, s, n); }
  void scale_bf16_inplace(bf16* x, float s, size_t n) override { cuda::scale_bf16(stream_, x, s, n); }
  void axpy(float* y, float a, const float* x, size_t n) override { cuda::axpy(stream_, y, a, x, n); }
  void to_bf16(bf16* out, const float* in, size_t n) override { cuda::to_bf16(stream_, out, in, n); }
  void to_f32(float* out, const bf16* in, size_t n) override { cuda::to_f32(stream_, out, in, n); }

  void crossentropy_forward(float* losses, float* lse, const bf16* logits, const int32_t* targets, int64_t rows,
                            int64_t Vp, int64_t V) override {
    cuda::crossentropy_forward(stream_, losses, lse, logits, targets, rows, Vp, V);
  }
  void crossentropy_backward(bf16* dlogits, const float* lse, const int32_t* targets, int64_t rows, int64_t Vp,
                             int64_t V, float scale) override {
    cuda::crossentropy_backward(stream_, dlogits, lse, targets, rows, Vp, V, scale, 0, false);
  }
  void crossentropy_backward_shard(bf16* dlogits, const float* lse, const int32_t* targets, int64_t rows, int64_t Vp,
                                   int64_t V, float scale, int64_t vocab_begin) override {
    cuda::crossentropy_backward(stream_, dlogits, lse, targets, rows, Vp, V, scale, vocab_begin, true);
  }
  void crossentropy_fused(float* losses, float* lse, bf16* logits, const int32_t* targets, int64_t rows, int64_t Vp,
                          int64_t V, float scale) override {
    cuda::crossentropy_fused(stream_, losses, lse, logits, targets, rows, Vp, V, scale);
  }
  void crossentropy_partial(float* max, float* sumexp, float* target_logit, const bf16* logits,
                            const int32_t* targets, int64_t rows, int64_t Vp, int64_t V,
                            int64_t vocab_begin) override {
    cuda::crossentropy_partial(stream_, max, sumexp, target_logit, logits, targets, rows, Vp, V, vocab_begin);
  }
  void crossentropy_rescale(float* sumexp, const float* local_max, const float* global_max, int64_t rows) override {
    cuda::crossentropy_rescale(stream_, sumexp, local_max, global_max, rows);
  }
  void crossentropy_combine(float* losses, float* lse, const float* global_max, const float* sumexp,
                            const float* target_logit, const int32_t* targets, int64_t rows) override {
    cuda::crossentropy_combine(stream_, losses, lse, global_max, sumexp, target_logit, targets, rows);
  }

  void adamw(float* p, bf16* p_bf16, const float* g, float grad_scale, float* m, float* v, size_t n, float lr,
             float beta1, float beta2, float eps, float weight_decay, int step) override {
    cuda::adamw(stream_, p, p_bf16, g, grad_scale, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
  }
  void sum_squares(double* dst, const float* x, size_t n, bool accumulate) override {
    cuda::sum_squares(stream_, *scratch_, dst, x, n, accumulate);
  }
  double sum_squares_host(const float* x, size_t n) override {
    sum_squares(norm_, x, n, false);
    double h = 0;
    cuda_check(cudaMemcpyAsync(&h, norm_, sizeof h, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync(norm)");
    synchronize();
    return h;
  }

 private:
  std::string attention_kind_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DeviceScratch> scratch_;
  std::unique_ptr<LtMatmul> lt_;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::unique_ptr<Attention> attention_;
  std::unique_ptr<SegmentAttention> segments_;  // model.attention = "cudnn" only
  SegmentAttention& segment_attention() {
    if (!segments_)
      fail("attention over segments (packed documents) runs on cuDNN: model.attention = \"{}\" has none",
           attention_kind_);
    return *segments_;
  }
  double* norm_ = nullptr;
};

}  // namespace

std::string cuda_unavailable_reason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("cudaGetDeviceCount failed with error {} ({})", static_cast<int>(e), cudaGetErrorString(e));
  }
  if (n == 0) return "cudaGetDeviceCount found no CUDA devices";
  return "";
}

std::unique_ptr<CudaOps> make_cuda_ops(const CudaOpsOptions& options) {
  std::string why = cuda_unavailable_reason();
  check(why.empty(), "the CUDA backend needs a GPU: {}", why);
  return std::make_unique<CudaOpsImpl>(options);
}

}  // namespace mpitron
