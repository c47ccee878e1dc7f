// Tensor-parallel building blocks (Megatron-core tensor_parallel/layers.py + cross_entropy.py),
// written on raw pointers like the rest of the model: the weights live in the model's flat
// parameter buffer, kernels come from Ops, communication from the TP mappings (tp_mappings.hpp).
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
#include <cstdint>
#include <vector>

#include "mpitron/model/tp_mappings.hpp"
#include "mpitron/ops/ops.hpp"

namespace mpitron {

// Output features split over TP (a fused QKV splits each of its q, k, v parts; the layer does
// not care: its local weight is [N/tp, K] either way). Forward: f (identity, or the SP
// all-gather of the input rows), local GEMM + local bias. Backward: local dW, db; the partial
// dx goes through f's backward (all-reduce, or reduce-scatter back to local rows with SP).
class ColumnParallelLinear {
 public:
  ColumnParallelLinear(Ops& ops, TpContext tp, int64_t in_features, int64_t out_features);
  int64_t out_local() const { return n_local_; }
  // x: [local rows, K]. x_full: where the gathered input [rows, K] goes with SP (kept for the
  // backward); without SP pass x itself (or nullptr). Returns the input the GEMM used.
  const float* forward(float* y, const float* x, float* x_full, const float* w, const float* b, int64_t rows);
  // x_full: the input the forward returned. dx: [local rows, K], overwritten. scratch: [rows, K]
  // floats, only with SP (dx of all rows before the reduce-scatter). dw, db accumulate (either
  // may be nullptr).
  void backward(float* dx, float* dw, float* db, const float* dy, const float* x_full, const float* w, int64_t rows,
                float* scratch);

 private:
  Ops& ops_;
  TpContext tp_;
  int64_t k_, n_local_;
};

// Input features split over TP. Forward: local GEMM on this rank's input columns, then g
// (all-reduce, or reduce-scatter to local rows with SP); the bias is added once (by TP rank 0
// before the reduction). Backward: g's backward (identity, or all-gather of dy with SP), then
// local dW and dx; db from the full dy, so it is identical (replicated) on every TP rank.
class RowParallelLinear {
 public:
  RowParallelLinear(Ops& ops, TpContext tp, int64_t in_features, int64_t out_features);
  int64_t in_local() const { return k_local_; }
  // x: [rows, K/tp]; y: [local rows, N]; scratch: [rows, N] floats with SP (else unused).
  void forward(float* y, const float* x, const float* w, const float* b, int64_t rows, float* scratch);
  // dy: [local rows, N]; dy_full: [rows, N] scratch with SP (else unused; dy is used directly).
  // dx: [rows, K/tp] overwritten.
  void backward(float* dx, float* dw, float* db, const float* dy, float* dy_full, const float* x, const float* w,
                int64_t rows);

 private:
  Ops& ops_;
  TpContext tp_;
  int64_t k_local_, n_;
};

// Token (+ position) embedding with the padded vocabulary split over TP. Forward: rows of this
// rank's vocab slice (other tokens give 0) plus wpe on TP rank 0 only, then g (all-reduce, or
// reduce-scatter to local rows with SP). Backward: g's backward, then this rank's wte rows and the
// full dwpe (replicated, identical on every rank).
class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(Ops& ops, TpContext tp, int64_t padded_vocab, int64_t C);
  int64_t vocab_begin() const { return vb_; }
  int64_t vocab_end() const { return ve_; }
  // out: [local rows, C]; scratch: [B*T, C] with SP (else unused). wpe may be nullptr.
  void forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, float* scratch);
  // dout: [local rows, C]; dout_full: [B*T, C] scratch with SP (else unused). dwpe may be nullptr.
  void backward(float* dwte, float* dwpe, const float* dout, float* dout_full, const int32_t* tokens, int B, int T);

 private:
  Ops& ops_;
  TpContext tp_;
  int64_t c_, vb_, ve_;
};

// Cross-entropy over vocab-parallel logits: this rank holds columns [vocab_begin, vocab_begin +
// Vl) of the padded vocabulary (V real entries in all; padded columns never count, not even in
// the max). Per row: the local max of the real columns is all-reduced (max), the local sum of
// exp(x - max) all-reduced (sum), and the target's logit (owned by one rank) all-reduced (sum):
// loss = log(sum) + max - x_target. Three all-reduces of `rows` floats; the logits never move.
// Without TP it is exactly Ops::crossentropy_forward/backward.
class VocabParallelCrossEntropy {
 public:
  VocabParallelCrossEntropy(Ops& ops, TpContext tp, int64_t padded_vocab, int64_t V);
  int64_t vocab_begin() const { return vb_; }
  int64_t local_vocab() const { return vl_; }
  // losses, lse: [rows] (identical on every TP rank); targets: global ids, < 0 = ignored.
  void forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t rows);
  // In place: logits <- scale * (softmax - onehot) on this rank's columns; padded columns and
  // ignored rows 0. No communication.
  void backward(float* logits_to_dlogits, const float* lse, const int32_t* targets, int64_t rows, float scale);

 private:
  Ops& ops_;
  TpContext tp_;
  int64_t vl_, vb_, v_, v_real_local_;  // v_real_local_: real vocab columns in this slice
  std::vector<float> a_, b_;             // per-row scratch for the reductions
};

}  // namespace mpitron
