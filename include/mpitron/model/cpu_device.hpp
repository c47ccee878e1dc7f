// The CPU as the shared model code (parallel_layers.hpp, transformer_block.hpp) sees a device:
// fp32 activations and weights on Ops (the GEMMs may round their inputs to bf16, Ops'
// choice), and the GPU's fused kernels as the two CPU ops they fuse. Its GPU twin is
// model/cuda/cuda_device.hpp; both offer the same calls with the same meaning.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mpitron/model/device_vector.hpp"
#include "mpitron/model/fp8_recipe.hpp"
#include "mpitron/model/shard_geometry.hpp"
#include "mpitron/ops/ops.hpp"

namespace mpitron {

struct CpuDevice {
  using act_t = float;
  static constexpr bool kDeviceRouter = false;  // MoeMlp routes on the host (moe_routing.hpp), the reference
  using weight_t = float;
  explicit CpuDevice(Ops& o) : ops(o) {}
  Ops& ops;

  // out = inp W^T + b; with gelu_pre: gelu_pre = inp W^T + b, out = gelu(gelu_pre).
  void matmul_forward(float* out, const float* inp, const float* w, const float* b, int64_t M, int64_t K, int64_t N,
                      float* gelu_pre = nullptr) {
    if (!gelu_pre) return ops.matmul_forward(out, inp, w, b, M, K, N);
    ops.matmul_forward(gelu_pre, inp, w, b, M, K, N);
    ops.gelu_forward(out, gelu_pre, static_cast<size_t>(M * N));
  }
  // dinp = dout W (times gelu'(gelu_pre) when given); dW += dout^T inp; db += column sums.
  void matmul_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                       int64_t M, int64_t K, int64_t N, const float* gelu_pre = nullptr) {
    ops.matmul_backward(dinp, dw, db, dout, inp, w, M, K, N);
    if (gelu_pre) ops.gelu_backward(dinp, gelu_pre, dinp, static_cast<size_t>(M * K));
  }
  // The same two under train.precision = "fp8" (fp8_recipe.hpp; cpu_fp8_linear.cpp): each operand
  // cast into a workspace copy as an FP8 GEMM reads it (E4M3 inp and w, E5M2 dout: the codes'
  // values, exact in bf16), the GEMM in the Ops' precision, its result times the two operands'
  // 1 / scale, then the bias (cuBLASLt's order); db from dout itself.
  static constexpr bool kFp8Linears = true;
  void fp8_matmul_forward(Fp8Recipe& r, float* out, const float* inp, const float* w, const float* b, int64_t M,
                          int64_t K, int64_t N, float* gelu_pre = nullptr);
  void fp8_matmul_backward(Fp8Recipe& r, float* dinp, float* dw, float* db, const float* dout, const float* inp,
                           const float* w, int64_t M, int64_t K, int64_t N, const float* gelu_pre = nullptr);
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t rows, int64_t C) {
    ops.layernorm_forward(out, mean, rstd, inp, w, b, rows, C);
  }
  // residual = a + b, out = LayerNorm(residual).
  void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd, const float* a, const float* b,
                                  const float* w, const float* bias, int64_t rows, int64_t C) {
    ops.residual_forward(residual, a, b, static_cast<size_t>(rows * C));
    ops.layernorm_forward(out, mean, rstd, residual, w, bias, rows, C);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t rows, int64_t C) {
    ops.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, rows, C);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t rows, int64_t C, float eps) {
    ops.rmsnorm_forward(out, rstd, inp, w, rows, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                        int64_t rows, int64_t C) {
    ops.rmsnorm_backward(dinp, dw, dout, inp, w, rstd, rows, C);
  }
  // att: the probabilities [B, H, T, T]; the backward reads them (not the output).
  // docs.start: document masking ([B, T] host; Ops::attention_forward), nullptr: causal.
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int H, int hd, int KV,
                         const DocumentRows& docs = {}) {
    ops.attention_forward(out, att, qkv, B, T, H, hd, KV, docs.start);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* /*out*/, const float* att,
                          int B, int T, int H, int hd, int KV, const DocumentRows& docs = {}) {
    ops.attention_backward(dqkv, dout, qkv, att, B, T, H, hd, KV, docs.start);
  }
  void swiglu_forward(float* out, const float* gate_up, int64_t rows, int64_t F) {
    ops.swiglu_forward(out, gate_up, rows, F);
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t rows, int64_t F) {
    ops.swiglu_backward(dgate_up, gate_up, dout, rows, F);
  }
  // out[b, t] = wte[token - vocab_begin] (0 outside [vocab_begin, vocab_end)) + wpe[positions[t]]
  // (positions nullptr: t; per_row: positions[b T + t], document masking's); the backward scatters
  // dout into dwte's rows and dwpe's.
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                         int64_t vocab_begin, int64_t vocab_end, const int32_t* positions, bool per_row = false) {
    ops.embedding_forward(out, tokens, wte, positions ? nullptr : wpe, B, T, C, vocab_begin, vocab_end);
    if (positions && wpe)
      for (int64_t r = 0; r < int64_t{B} * T; ++r)
        ops.add_inplace(out + r * C, wpe + int64_t{positions[per_row ? r : r % T]} * C, static_cast<size_t>(C));
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                          int64_t vocab_begin, int64_t vocab_end, const int32_t* positions, bool per_row = false) {
    ops.embedding_backward(dwte, positions ? nullptr : dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end);
    if (positions && dwpe)
      for (int64_t r = 0; r < int64_t{B} * T; ++r)
        ops.add_inplace(dwpe + int64_t{positions[per_row ? r : r % T]} * C, dout + r * C, static_cast<size_t>(C));
  }
  void residual_forward(float* out, const float* a, const float* b, size_t n) { ops.residual_forward(out, a, b, n); }

  // ---- softmax cross-entropy over logits [rows, Vp] (V real columns; CudaOps' meaning) ----
  void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t rows,
                            int64_t Vp, int64_t V) {
    ops.crossentropy_forward(losses, lse, logits, targets, rows, Vp, V);
  }
  void crossentropy_backward(float* logits, const float* lse, const int32_t* targets, int64_t rows, int64_t Vp,
                             int64_t V, float scale) {
    ops.crossentropy_backward(logits, lse, targets, rows, Vp, V, scale);
  }
  void crossentropy_fused(float* losses, float* lse, float* logits, const int32_t* targets, int64_t rows, int64_t Vp,
                          int64_t V, float scale) {
    ops.crossentropy_forward(losses, lse, logits, targets, rows, Vp, V);
    ops.crossentropy_backward(logits, lse, targets, rows, Vp, V, scale);
  }
  // The vocab-parallel pieces (cpu_device.cpp), for a slice of global columns [vocab_begin,
  // vocab_begin + Vp) whose first V are real: this slice's softmax statistics, stated as a max
  // and a sum of exp(x - max) (here: the slice's log-sum-exp and 1), and the target's logit
  // where the slice owns it (else 0) ...
  void crossentropy_partial(float* max, float* sumexp, float* target_logit, const float* logits,
                            const int32_t* targets, int64_t rows, int64_t Vp, int64_t V, int64_t vocab_begin);
  // ... sumexp *= exp(local max - global max) ...
  void crossentropy_rescale(float* sumexp, const float* local_max, const float* global_max, int64_t rows);
  // ... lse = max + log(sum), loss = lse - target logit (0 where target < 0).
  void crossentropy_combine(float* losses, float* lse, const float* global_max, const float* sumexp,
                            const float* target_logit, const int32_t* targets, int64_t rows);
  // logits <- scale * (softmax - onehot) on the slice (padded columns, ignored rows: 0).
  void crossentropy_backward_shard(float* logits, const float* lse, const int32_t* targets, int64_t rows, int64_t Vp,
                                   int64_t V, float scale, int64_t vocab_begin);
  void copy_f32(float* dst, const float* src, size_t n) { std::memcpy(dst, src, n * sizeof(float)); }

  // ---- the MoE MLP (moe_mlp.hpp): its token-copy rows, and its arrays' memory (host) ----
  void moe_gather_rows(float* dst, const float* src, const int64_t* idx, int64_t n, int64_t C) {
    ops.moe_gather_rows(dst, src, idx, n, C);
  }
  void moe_scatter_rows(float* dst, const float* src, const int64_t* idx, int64_t n, int64_t C) {
    ops.moe_scatter_rows(dst, src, idx, n, C);
  }
  void moe_combine(float* out, const float* ys, const int64_t* pos, const float* weight, int64_t R, int k, int64_t C) {
    ops.moe_combine(out, ys, pos, weight, R, k, C);
  }
  void moe_combine_backward(float* dys, float* dweight, const float* dout, const float* ys, const int64_t* pos,
                            const float* weight, int64_t R, int k, int64_t C) {
    ops.moe_combine_backward(dys, dweight, dout, ys, pos, weight, R, k, C);
  }
  void moe_uncombine_add(float* dx, const float* dxs, const int64_t* pos, int64_t R, int k, int64_t C) {
    ops.moe_uncombine_add(dx, dxs, pos, R, k, C);
  }
  DeviceAllocator* allocator() const { return nullptr; }  // host memory
  // A host array for the device's kernels: here they read it where it is.
  template <class T>
  const T* stage(DeviceVector<T>& /*device copy*/, const std::vector<T>& host) {
    return host.data();
  }
  // (n may be 0 with empty arrays, whose data() is null: no call then.)
  void to_host(float* host, const float* dev, size_t n) { copy(host, dev, n); }
  void from_host(float* dev, const float* host, size_t n) { copy(dev, host, n); }
  void copy(float* dst, const float* src, size_t n) {
    if (n) std::memcpy(dst, src, n * sizeof(float));
  }
  // rows rows of width floats from src (leading dimension sld) to dst (dld).
  void copy_rows(float* dst, int64_t dld, const float* src, int64_t sld, int64_t width, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dld, src + r * sld, static_cast<size_t>(width) * sizeof(float));
  }
  void zero(float* x, size_t n) {
    if (n) std::memset(x, 0, n * sizeof(float));
  }

  // fp8_matmul_*'s operand copies (activation, weight, gradient) and its weight-gradient
  // product before scaling: workspace.
  DeviceVector<float> fp8_ops_[kFp8Operands], fp8_dw_;

  std::vector<int32_t> ce_targets_;  // crossentropy_partial's scratch: targets shifted into the slice
  std::vector<float> ce_losses_;
  void add_grad(float* g, const float* x, size_t n) { ops.add_inplace(g, x, n); }  // fp32 gradients
  void zero_grad(float* g, size_t n) { std::memset(g, 0, n * sizeof(float)); }
};

}  // namespace mpitron
