// The GPU as the shared model code (parallel_layers.hpp, transformer_block.hpp) sees a device:
// bf16 activations and weights, fp32 gradients and statistics, on CudaOps (every call enqueued
// on its stream), with the fused kernels where the CPU twin (model/cpu_device.hpp) runs two ops.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/model/device_vector.hpp"
#include "mpitron/model/fp8_recipe.hpp"
#include "mpitron/model/gpu_activations.hpp"
#include "mpitron/model/shard_geometry.hpp"
#include "mpitron/ops/cuda/check.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"

namespace mpitron {

struct CudaDevice {
  using act_t = bf16;
  static constexpr bool kDeviceRouter = true;  // MoeMlp routes with the device's kernels
  static constexpr bool kFp8Linears = true;    // train.precision = "fp8": fp8_matmul_* (cuda_fp8_linear.cpp)
  using weight_t = bf16;
  CudaOps& ops;
  DeviceAllocator* alloc = nullptr;  // the model's arrays sized per call (MoE): stream-ordered on ops' stream
  GpuFp8Bufs fp8{};                  // train.precision = "fp8": the operands' codes (gpu_activations.hpp)

  // out = inp W^T + b; with gelu_pre: gelu_pre = inp W^T + b and out = gelu(gelu_pre) in one
  // cuBLASLt call (GELU_AUX_BIAS epilogue).
  void matmul_forward(bf16* out, const bf16* inp, const bf16* w, const bf16* b, int64_t M, int64_t K, int64_t N,
                      bf16* gelu_pre = nullptr) {
    ops.matmul_forward(out, inp, w, b, M, K, N, gelu_pre);
  }
  // dinp = dout W (times gelu'(gelu_pre) in the same call: DGELU epilogue); dW, db += (fp32).
  void matmul_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w, int64_t M,
                       int64_t K, int64_t N, const bf16* gelu_pre = nullptr) {
    ops.matmul_backward(dinp, dw, db, dout, inp, w, M, K, N, false, gelu_pre);
  }
  // The same two in FP8 (train.precision = "fp8", fp8_recipe.hpp; cuda_fp8_linear.cpp): each
  // operand's amax (over the tp / cp group when split), its cast, with the transposed copy where
  // the GEMM contracts over rows, then cuBLASLt's FP8 GEMM; GELU and its derivative as separate
  // kernels; db from dout itself. The CPU twin computes the same recipe (cpu_fp8_linear.cpp).
  void fp8_matmul_forward(Fp8Recipe& r, bf16* out, const bf16* inp, const bf16* w, const bf16* b, int64_t M, int64_t K,
                          int64_t N, bf16* gelu_pre = nullptr);
  void fp8_matmul_backward(Fp8Recipe& r, bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp,
                           const bf16* w, int64_t M, int64_t K, int64_t N, const bf16* gelu_pre = nullptr);
  // The casts' statistics since the last take: the recipe's counts with the device's figures (syncs).
  Fp8Stats take_fp8_stats(Fp8Recipe& r);
  void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b,
                         int64_t rows, int64_t C) {
    ops.layernorm_forward(out, mean, rstd, inp, w, b, rows, C);
  }
  void residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a, const bf16* b,
                                  const bf16* w, const bf16* bias, int64_t rows, int64_t C) {
    ops.residual_layernorm_forward(residual, out, mean, rstd, a, b, w, bias, rows, C);
  }
  void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w,
                          const float* mean, const float* rstd, int64_t rows, int64_t C) {
    ops.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, rows, C);
  }
  void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* w, int64_t rows, int64_t C, float eps) {
    ops.rmsnorm_forward(out, rstd, inp, w, rows, C, eps);
  }
  void rmsnorm_backward(bf16* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w, const float* rstd,
                        int64_t rows, int64_t C) {
    ops.rmsnorm_backward(dinp, dw, dout, inp, w, rstd, rows, C);
  }
  // att: the log-sum-exp statistics [B, H, T]; the backward reads them and the output.
  // Document masking: docs.segments (cuDNN: the documents as segments of the fused qkv rows) or
  // docs.start (device [B, T]: the naive path masks each row's keys before it); neither: causal.
  void attention_forward(bf16* out, float* att, const bf16* qkv, int B, int T, int H, int hd, int KV,
                         const DocumentRows& docs = {}) {
    if (!docs.segments) return ops.attention_forward(out, att, qkv, B, T, H, hd, KV, docs.start);
    const int64_t W = int64_t{H + 2 * KV} * hd;
    ops.attention_segments_forward(out, att, qkv, W, qkv + int64_t{H} * hd, qkv + int64_t{H + KV} * hd, W, H, KV, hd,
                                   *docs.segments);
  }
  void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* att, int B,
                          int T, int H, int hd, int KV, const DocumentRows& docs = {}) {
    if (!docs.segments) return ops.attention_backward(dqkv, dout, qkv, out, att, B, T, H, hd, KV, docs.start);
    const int64_t W = int64_t{H + 2 * KV} * hd, k = int64_t{H} * hd, v = int64_t{H + KV} * hd;
    ops.attention_segments_backward(dqkv, dqkv + k, dqkv + v, dout, qkv, W, qkv + k, qkv + v, W, out, att, H, KV, hd,
                                    *docs.segments);
  }
  void swiglu_forward(bf16* out, const bf16* gate_up, int64_t rows, int64_t F) { ops.swiglu_forward(out, gate_up, rows, F); }
  void swiglu_backward(bf16* dgate_up, const bf16* gate_up, const bf16* dout, int64_t rows, int64_t F) {
    ops.swiglu_backward(dgate_up, gate_up, dout, rows, F);
  }
  // positions: device [T] (nullptr: 0 .. T-1), or with per_row [B, T] (document masking).
  void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int T, int C,
                         int64_t vocab_begin, int64_t vocab_end, const int32_t* positions, bool per_row = false) {
    ops.embedding_forward(out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end, positions, per_row);
  }
  void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B, int T, int C,
                          int64_t vocab_begin, int64_t vocab_end, const int32_t* positions, bool per_row = false) {
    ops.embedding_backward(dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end, positions, per_row);
  }
  // Softmax cross-entropy over bf16 logits (CudaOps'; the vocab-parallel pieces as there).
  void crossentropy_forward(float* losses, float* lse, const bf16* logits, const int32_t* targets, int64_t rows,
                            int64_t Vp, int64_t V) {
    ops.crossentropy_forward(losses, lse, logits, targets, rows, Vp, V);
  }
  void crossentropy_backward(bf16* logits, const float* lse, const int32_t* targets, int64_t rows, int64_t Vp,
                             int64_t V, float scale) {
    ops.crossentropy_backward(logits, lse, targets, rows, Vp, V, scale);
  }
  void crossentropy_fused(float* losses, float* lse, bf16* logits, const int32_t* targets, int64_t rows, int64_t Vp,
                          int64_t V, float scale) {
    ops.crossentropy_fused(losses, lse, logits, targets, rows, Vp, V, scale);
  }
  void crossentropy_partial(float* max, float* sumexp, float* target_logit, const bf16* logits,
                            const int32_t* targets, int64_t rows, int64_t Vp, int64_t V, int64_t vocab_begin) {
    ops.crossentropy_partial(max, sumexp, target_logit, logits, targets, rows, Vp, V, vocab_begin);
  }
  void crossentropy_rescale(float* sumexp, const float* local_max, const float* global_max, int64_t rows) {
    ops.crossentropy_rescale(sumexp, local_max, global_max, rows);
  }
  void crossentropy_combine(float* losses, float* lse, const float* global_max, const float* sumexp,
                            const float* target_logit, const int32_t* targets, int64_t rows) {
    ops.crossentropy_combine(losses, lse, global_max, sumexp, target_logit, targets, rows);
  }
  void crossentropy_backward_shard(bf16* logits, const float* lse, const int32_t* targets, int64_t rows, int64_t Vp,
                                   int64_t V, float scale, int64_t vocab_begin) {
    ops.crossentropy_backward_shard(logits, lse, targets, rows, Vp, V, scale, vocab_begin);
  }
  void copy_f32(float* dst, const float* src, size_t n) {
    cuda::cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, ops.stream()),
                     "cudaMemcpyAsync(fp32)");
  }
  // ---- the MoE MLP (moe_mlp.hpp): its token-copy rows, and its arrays' memory (device) ----
  void moe_gather_rows(bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C) {
    ops.moe_gather_rows(dst, src, idx, n, C);
  }
  void moe_scatter_rows(bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C) {
    ops.moe_scatter_rows(dst, src, idx, n, C);
  }
  void moe_combine(bf16* out, const bf16* ys, const int64_t* pos, const float* weight, int64_t R, int k, int64_t C) {
    ops.moe_combine(out, ys, pos, weight, R, k, C);
  }
  void moe_combine_backward(bf16* dys, float* dweight, const bf16* dout, const bf16* ys, const int64_t* pos,
                            const float* weight, int64_t R, int k, int64_t C) {
    ops.moe_combine_backward(dys, dweight, dout, ys, pos, weight, R, k, C);
  }
  void moe_uncombine_add(bf16* dx, const bf16* dxs, const int64_t* pos, int64_t R, int k, int64_t C) {
    ops.moe_uncombine_add(dx, dxs, pos, R, k, C);
  }
  void moe_router_select(const bf16* logits, const MoeRouterShape& s, const MoeRouterArrays& a) {
    ops.moe_router_select(logits, s, a);
  }
  void moe_router_place(const MoeRouterShape& s, const MoeRouterArrays& a) { ops.moe_router_place(s, a); }
  void moe_router_backward(bf16* dlogits, const float* dweight, double aux_scale, double z_scale,
                           const MoeRouterShape& s, const MoeRouterArrays& a) {
    ops.moe_router_backward(dlogits, dweight, aux_scale, z_scale, s, a);
  }
  DeviceAllocator* allocator() const { return alloc; }
  // n elements to the host, bit for bit (the MoE router's counts and, under context parallel, its
  // per-sequence sums); syncs.
  template <class T>
  void download(T* host, const T* dev, size_t n) {
    if (n == 0) return;
    cuda::cuda_check(cudaMemcpyAsync(host, dev, n * sizeof(T), cudaMemcpyDeviceToHost, ops.stream()),
                     "cudaMemcpyAsync(MoE routing to the host)");
    cuda::cuda_check(cudaStreamSynchronize(ops.stream()), "cudaStreamSynchronize(MoE routing to the host)");
  }
  // A host array for the kernels: copied into `dev` (from pageable memory: the host array may
  // change once this returns).
  template <class T>
  const T* stage(DeviceVector<T>& dev, const std::vector<T>& host) {
    dev.resize(host.size());
    if (!host.empty())
      cuda::cuda_check(cudaMemcpyAsync(dev.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice,
                                       ops.stream()),
                       "cudaMemcpyAsync(MoE indices)");
    return dev.data();
  }
  void copy(bf16* dst, const bf16* src, size_t n) {
    cuda::cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(bf16), cudaMemcpyDeviceToDevice, ops.stream()),
                     "cudaMemcpyAsync(bf16)");
  }
  void copy_rows(bf16* dst, int64_t dld, const bf16* src, int64_t sld, int64_t width, int64_t rows) {
    if (rows > 0)
      cuda::cuda_check(cudaMemcpy2DAsync(dst, dld * sizeof(bf16), src, sld * sizeof(bf16), width * sizeof(bf16), rows,
                                         cudaMemcpyDeviceToDevice, ops.stream()),
                       "cudaMemcpy2DAsync(bf16 rows)");
  }
  void zero(bf16* x, size_t n) {
    cuda::cuda_check(cudaMemsetAsync(x, 0, n * sizeof(bf16), ops.stream()), "cudaMemsetAsync(bf16)");
  }
  void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n) { ops.residual_forward(out, a, b, n); }
  void add_grad(float* g, const float* x, size_t n) { ops.add_inplace(g, x, n); }
  void zero_grad(float* g, size_t n) {
    cuda::cuda_check(cudaMemsetAsync(g, 0, n * sizeof(float), ops.stream()), "cudaMemsetAsync(gradient)");
  }
};

}  // namespace mpitron
