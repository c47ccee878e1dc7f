// Tensor-parallel building blocks (Megatron-core tensor_parallel/layers.py + cross_entropy.py),
// written on raw pointers like the rest of the model: the weights live in the model's flat
// parameter buffer, kernels come from the device (Dev: CpuDevice in cpu_device.hpp, CudaDevice
// in cuda/cuda_device.hpp), communication from the TP mappings (tp_mappings.hpp).
// Every layer with an inactive TpContext (no TP) is exactly its unsharded self.
//
// Shapes (rows = B*T of the micro-batch; with sequence parallel a rank holds rows/tp of the
// activations outside the linears, "local rows" below):
//   ColumnParallelLinear  W [N/tp, K]  x [local rows, K]   -> y [rows, N/tp]
//   RowParallelLinear     W [N, K/tp]  x [rows, K/tp]      -> y [local rows, N]
//   VocabParallelEmbedding wte [Vp/tp, C] (rows [r*Vp/tp, (r+1)*Vp/tp) of the padded vocab)
//                          tokens [B*T] -> out [local rows, C]
//   vocab-parallel cross-entropy: logits [rows, Vp/tp] (this rank's vocab columns) -> per-row
//                          loss and logsumexp over the real vocabulary, logits never gathered.
#pragma once
#include <algorithm>
#include <cstdint>

#include "mpitron/core/error.hpp"
#include "mpitron/model/fp8_recipe.hpp"
#include "mpitron/model/tensor_parallel/tp_mappings.hpp"

namespace mpitron {

// A linear layer's GEMMs: in FP8 when the layer has a recipe (train.precision = "fp8",
// fp8_recipe.hpp) on a device that casts (Dev::kFp8Linears), else the device's own precision.
template <class Dev, class A, class Wt>
void linear_gemm_forward(Dev& dev, Fp8Recipe* fp8, A* y, const A* x, const Wt* w, const Wt* b, int64_t M, int64_t K,
                         int64_t N, A* gelu_pre = nullptr) {
  if constexpr (Dev::kFp8Linears) {
    if (fp8) return dev.fp8_matmul_forward(*fp8, y, x, w, b, M, K, N, gelu_pre);
  }
  dev.matmul_forward(y, x, w, b, M, K, N, gelu_pre);
}
template <class Dev, class A, class Wt>
void linear_gemm_backward(Dev& dev, Fp8Recipe* fp8, A* dx, float* dw, float* db, const A* dy, const A* x, const Wt* w,
                          int64_t M, int64_t K, int64_t N, const A* gelu_pre = nullptr) {
  if constexpr (Dev::kFp8Linears) {
    if (fp8) return dev.fp8_matmul_backward(*fp8, dx, dw, db, dy, x, w, M, K, N, gelu_pre);
  }
  dev.matmul_backward(dx, dw, db, dy, x, w, M, K, N, gelu_pre);
}

// Output features split over TP (a fused QKV splits each of its q, k, v parts; the layer does
// not care: its local weight is [N/tp, K] either way). Forward: f (identity, or the SP
// all-gather of the input rows), local GEMM + local bias. Backward: local dW, db; the partial
// dx goes through f's backward (all-reduce, or reduce-scatter back to local rows with SP).
// Dev: the device (CpuDevice in cpu_device.hpp, CudaDevice for the GPU): A its activations'
// element type, Wt its weights'; gradients are fp32.
template <class Dev>
class ColumnParallelLinear {
 public:
  using A = typename Dev::act_t;
  using Wt = typename Dev::weight_t;
  ColumnParallelLinear(Dev& dev, TpContext tp, int64_t in_features, int64_t out_features)
      : dev_(dev), tp_(tp), k_(in_features), n_local_(out_features / tp.size()) {
    check(out_features % tp.size() == 0, "ColumnParallelLinear: {} output features do not divide by tp {}",
          out_features, tp.size());
  }
  int64_t out_local() const { return n_local_; }
  void set_fp8(Fp8Recipe* r) { fp8_ = r; }  // its GEMMs in FP8 (nullptr: not)
  // x: [local rows, K]. x_full: where the gathered input [rows, K] goes with SP (kept for the
  // backward); without SP pass x itself (or nullptr). Returns the input the GEMM used. gelu_pre:
  // the GEMM's output when y is to be its GELU (one fused call on the GPU).
  const A* forward(A* y, const A* x, A* x_full, const Wt* w, const Wt* b, int64_t rows, A* gelu_pre = nullptr) {
    const A* in = x;
    if (tp_.sp()) {  // f with SP: all-gather the input rows
      check(x_full != nullptr, "ColumnParallelLinear: sequence parallel needs a buffer for the gathered input");
      TpCommTimer timer(tp_);
      gather_from_sequence_forward(*tp_.comm, x, x_full, static_cast<size_t>(sequence_local_rows(tp_, rows) * k_));
      in = x_full;
    }
    linear_gemm_forward(dev_, fp8_, y, in, w, b, rows, k_, n_local_, gelu_pre);
    return in;
  }
  // x_full: the input the forward returned. dx: [local rows, K], overwritten. scratch: [rows, K],
  // only with SP (dx of all rows before the reduce-scatter). dw, db accumulate (either may be
  // nullptr).
  void backward(A* dx, float* dw, float* db, const A* dy, const A* x_full, const Wt* w, int64_t rows, A* scratch) {
    if (tp_.sp()) {  // partial dx of all rows, reduce-scattered back to this rank's rows
      check(scratch != nullptr, "ColumnParallelLinear: sequence parallel backward needs a [rows, K] scratch");
      linear_gemm_backward(dev_, fp8_, scratch, dw, db, dy, x_full, w, rows, k_, n_local_);
      TpCommTimer timer(tp_);
      gather_from_sequence_backward(*tp_.comm, scratch, dx, static_cast<size_t>(sequence_local_rows(tp_, rows) * k_));
      return;
    }
    linear_gemm_backward(dev_, fp8_, dx, dw, db, dy, x_full, w, rows, k_, n_local_);
    if (tp_.active()) {
      TpCommTimer timer(tp_);
      copy_to_tp_region_backward(*tp_.comm, dx, static_cast<size_t>(rows * k_));
    }
  }

 private:
  Dev& dev_;
  TpContext tp_;
  int64_t k_, n_local_;
  Fp8Recipe* fp8_ = nullptr;
};

// Input features split over TP. Forward: local GEMM on this rank's input columns, then g
// (all-reduce, or reduce-scatter to local rows with SP); the bias is added once (by TP rank 0
// before the reduction). Backward: g's backward (identity, or all-gather of dy with SP), then
// local dW and dx; db from the full dy, so it is identical (replicated) on every TP rank.
template <class Dev>
class RowParallelLinear {
 public:
  using A = typename Dev::act_t;
  using Wt = typename Dev::weight_t;
  RowParallelLinear(Dev& dev, TpContext tp, int64_t in_features, int64_t out_features)
      : dev_(dev), tp_(tp), k_local_(in_features / tp.size()), n_(out_features) {
    check(in_features % tp.size() == 0, "RowParallelLinear: {} input features do not divide by tp {}", in_features,
          tp.size());
  }
  int64_t in_local() const { return k_local_; }
  void set_fp8(Fp8Recipe* r) { fp8_ = r; }  // its GEMMs in FP8 (nullptr: not)
  // x: [rows, K/tp]; y: [local rows, N]; scratch: [rows, N] with SP (else unused).
  void forward(A* y, const A* x, const Wt* w, const Wt* b, int64_t rows, A* scratch) {
    const Wt* bias = tp_.rank() == 0 ? b : nullptr;  // added once, before the sum
    if (tp_.sp()) {  // g with SP: reduce-scatter the partial sums to this rank's rows
      check(scratch != nullptr, "RowParallelLinear: sequence parallel needs a [rows, N] scratch");
      linear_gemm_forward(dev_, fp8_, scratch, x, w, bias, rows, k_local_, n_);
      TpCommTimer timer(tp_);
      reduce_scatter_to_sequence_forward(*tp_.comm, scratch, y, static_cast<size_t>(sequence_local_rows(tp_, rows) * n_));
      return;
    }
    linear_gemm_forward(dev_, fp8_, y, x, w, bias, rows, k_local_, n_);
    if (tp_.active()) {
      TpCommTimer timer(tp_);
      reduce_from_tp_region_forward(*tp_.comm, y, static_cast<size_t>(rows * n_));
    }
  }
  // dy: [local rows, N]; dy_full: [rows, N] scratch with SP (else unused; dy is used directly).
  // dx: [rows, K/tp] overwritten; times gelu'(gelu_pre) when given (the GELU before this layer:
  // one fused call on the GPU).
  void backward(A* dx, float* dw, float* db, const A* dy, A* dy_full, const A* x, const Wt* w, int64_t rows,
                const A* gelu_pre = nullptr) {
    const A* g = dy;
    if (tp_.sp()) {  // g's backward with SP: all-gather dy's rows
      check(dy_full != nullptr, "RowParallelLinear: sequence parallel backward needs a [rows, N] buffer");
      {
        TpCommTimer timer(tp_);
        reduce_scatter_to_sequence_backward(*tp_.comm, dy, dy_full, static_cast<size_t>(sequence_local_rows(tp_, rows) * n_));
      }
      g = dy_full;
    }
    linear_gemm_backward(dev_, fp8_, dx, dw, db, g, x, w, rows, k_local_, n_, gelu_pre);
  }

 private:
  Dev& dev_;
  TpContext tp_;
  int64_t k_local_, n_;
  Fp8Recipe* fp8_ = nullptr;
};

// Token (+ position) embedding with the padded vocabulary split over TP. Forward: rows of this
// rank's vocab slice (other tokens give 0) plus wpe on TP rank 0 only, then g (all-reduce, or
// reduce-scatter to local rows with SP). Backward: g's backward, then this rank's wte rows and the
// full dwpe (replicated, identical on every rank). positions (the device's memory; nullptr:
// 0 .. T-1): the global position of each of the T local positions, wpe's row for it (context
// parallel); per_row: one per row [B*T] instead (document masking).
template <class Dev>
class VocabParallelEmbedding {
 public:
  using A = typename Dev::act_t;
  using Wt = typename Dev::weight_t;
  VocabParallelEmbedding(Dev& dev, TpContext tp, int64_t padded_vocab, int64_t C) : dev_(dev), tp_(tp), c_(C) {
    check(padded_vocab % tp.size() == 0, "VocabParallelEmbedding: padded vocab {} does not divide by tp {}",
          padded_vocab, tp.size());
    const int64_t vl = padded_vocab / tp.size();
    vb_ = tp.rank() * vl;
    ve_ = vb_ + vl;
  }
  int64_t vocab_begin() const { return vb_; }
  int64_t vocab_end() const { return ve_; }
  // out: [local rows, C]; scratch: [B*T, C] with SP (else unused). wpe may be nullptr.
  void forward(A* out, const int32_t* tokens, const Wt* wte, const Wt* wpe, int B, int T, A* scratch,
               const int32_t* positions = nullptr, bool per_row = false) {
    const int64_t rows = int64_t{B} * T;
    const Wt* pos = tp_.rank() == 0 ? wpe : nullptr;  // positions added once, before the sum
    if (tp_.sp()) {
      check(scratch != nullptr, "VocabParallelEmbedding: sequence parallel needs a [B*T, C] scratch");
      dev_.embedding_forward(scratch, tokens, wte, pos, B, T, static_cast<int>(c_), vb_, ve_, positions, per_row);
      TpCommTimer timer(tp_);
      reduce_scatter_to_sequence_forward(*tp_.comm, scratch, out, static_cast<size_t>(sequence_local_rows(tp_, rows) * c_));
      return;
    }
    dev_.embedding_forward(out, tokens, wte, pos, B, T, static_cast<int>(c_), vb_, ve_, positions, per_row);
    if (tp_.active()) {
      TpCommTimer timer(tp_);
      reduce_from_tp_region_forward(*tp_.comm, out, static_cast<size_t>(rows * c_));
    }
  }
  // dout: [local rows, C]; dout_full: [B*T, C] scratch with SP (else unused). dwpe may be nullptr.
  void backward(float* dwte, float* dwpe, const A* dout, A* dout_full, const int32_t* tokens, int B, int T,
                const int32_t* positions = nullptr, bool per_row = false) {
    const A* g = dout;
    if (tp_.sp()) {
      check(dout_full != nullptr, "VocabParallelEmbedding: sequence parallel backward needs a [B*T, C] buffer");
      TpCommTimer timer(tp_);
      reduce_scatter_to_sequence_backward(*tp_.comm, dout, dout_full,
                                          static_cast<size_t>(sequence_local_rows(tp_, int64_t{B} * T) * c_));
      g = dout_full;
    }
    dev_.embedding_backward(dwte, dwpe, g, tokens, B, T, static_cast<int>(c_), vb_, ve_, positions, per_row);
  }

 private:
  Dev& dev_;
  TpContext tp_;
  int64_t c_, vb_, ve_;
};

// Cross-entropy over vocab-parallel logits: this rank holds columns [vocab_begin, vocab_begin +
// Vl) of the padded vocabulary (V real entries in all; padded columns never count, not even in
// the max). Per row: the slices' maxima are all-reduced (max), each slice's sum of
// exp(x - max) and the target's logit (owned by one rank) all-reduced (sum):
// loss = log(sum) + max - x_target. Two all-reduces of `rows` and 2 `rows` floats; the logits
// never move. Without TP it is exactly the device's cross-entropy.
template <class Dev>
class VocabParallelCrossEntropy {
 public:
  using A = typename Dev::act_t;
  VocabParallelCrossEntropy(Dev& dev, TpContext tp, int64_t padded_vocab, int64_t V) : dev_(dev), tp_(tp), v_(V) {
    check(padded_vocab % tp.size() == 0 && V <= padded_vocab,
          "VocabParallelCrossEntropy: padded vocab {} (real {}) does not divide by tp {}", padded_vocab, V, tp.size());
    vl_ = padded_vocab / tp.size();
    vb_ = tp.rank() * vl_;
    v_real_local_ = std::clamp<int64_t>(V - vb_, 0, vl_);
  }
  int64_t vocab_begin() const { return vb_; }
  int64_t local_vocab() const { return vl_; }
  // losses, lse: [rows] (identical on every TP rank); targets: global ids, < 0 = ignored (the
  // device's memory). scratch: [4 rows] fp32 with TP (else unused).
  void forward(float* losses, float* lse, const A* logits, const int32_t* targets, int64_t rows, float* scratch) {
    if (!tp_.active()) return dev_.crossentropy_forward(losses, lse, logits, targets, rows, vl_, v_);
    check(scratch != nullptr, "VocabParallelCrossEntropy: tensor parallel needs a [4 rows] scratch");
    float *lmax = scratch, *gmax = scratch + rows, *sum_tgt = scratch + 2 * rows;  // sum_tgt: [sum exp | target logit]
    dev_.crossentropy_partial(lmax, sum_tgt, sum_tgt + rows, logits, targets, rows, vl_, v_real_local_, vb_);
    dev_.copy_f32(gmax, lmax, static_cast<size_t>(rows));
    {
      TpCommTimer timer(tp_);
      vocab_parallel_max(*tp_.comm, gmax, static_cast<size_t>(rows));
    }
    dev_.crossentropy_rescale(sum_tgt, lmax, gmax, rows);
    {
      TpCommTimer timer(tp_);
      vocab_parallel_sums(*tp_.comm, sum_tgt, static_cast<size_t>(rows));
    }
    dev_.crossentropy_combine(losses, lse, gmax, sum_tgt, sum_tgt + rows, targets, rows);
  }
  // In place: logits <- scale * (softmax - onehot) on this rank's columns; padded columns and
  // ignored rows 0. No communication.
  void backward(A* logits_to_dlogits, const float* lse, const int32_t* targets, int64_t rows, float scale) {
    if (!tp_.active()) return dev_.crossentropy_backward(logits_to_dlogits, lse, targets, rows, vl_, v_, scale);
    dev_.crossentropy_backward_shard(logits_to_dlogits, lse, targets, rows, vl_, v_real_local_, scale, vb_);
  }
  // forward, then backward (one pass over the logits without TP).
  void forward_backward(float* losses, float* lse, A* logits, const int32_t* targets, int64_t rows, float* scratch,
                        float scale) {
    if (!tp_.active()) return dev_.crossentropy_fused(losses, lse, logits, targets, rows, vl_, v_, scale);
    forward(losses, lse, logits, targets, rows, scratch);
    backward(logits, lse, targets, rows, scale);
  }

 private:
  Dev& dev_;
  TpContext tp_;
  int64_t vl_, vb_, v_, v_real_local_;  // v_real_local_: real vocab columns in this slice
};

}  // namespace mpitron
