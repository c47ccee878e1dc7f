// Vocab-parallel embedding and cross-entropy (parallel_layers.hpp). The padded vocabulary Vp is
// a multiple of 64*tp (ModelConfig::padded_vocab), so every slice is Vp/tp rows, a multiple of 64.
// Example: byte vocab V = 257, tp = 4 -> Vp = 512, slices [0,128) [128,256) [256,384) [384,512):
// rank 2 holds one real entry (256), rank 3 none; neither padding row ever counts.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mpitron/core/error.hpp"
#include "mpitron/model/parallel_layers.hpp"

namespace mpitron {

VocabParallelEmbedding::VocabParallelEmbedding(Ops& ops, TpContext tp, int64_t padded_vocab, int64_t C)
    : ops_(ops), tp_(tp), c_(C) {
  check(padded_vocab % tp.size() == 0, "VocabParallelEmbedding: padded vocab {} does not divide by tp {}",
        padded_vocab, tp.size());
  const int64_t vl = padded_vocab / tp.size();
  vb_ = tp.rank() * vl;
  ve_ = vb_ + vl;
}

void VocabParallelEmbedding::forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                                     int T, float* scratch) {
  const int64_t rows = int64_t{B} * T;
  const float* pos = tp_.rank() == 0 ? wpe : nullptr;  // positions added once, before the sum
  if (tp_.sp()) {
    check(scratch != nullptr, "VocabParallelEmbedding: sequence parallel needs a [B*T, C] scratch");
    ops_.embedding_forward(scratch, tokens, wte, pos, B, T, static_cast<int>(c_), vb_, ve_);
    {
      TpCommTimer timer(tp_);
      reduce_scatter_to_sequence_forward(*tp_.comm, scratch, out, static_cast<size_t>(sequence_local_rows(tp_, rows) * c_));
    }
    return;
  }
  ops_.embedding_forward(out, tokens, wte, pos, B, T, static_cast<int>(c_), vb_, ve_);
  if (tp_.active()) {
    TpCommTimer timer(tp_);
    reduce_from_tp_region_forward(*tp_.comm, out, static_cast<size_t>(rows * c_));
  }
}

void VocabParallelEmbedding::backward(float* dwte, float* dwpe, const float* dout, float* dout_full,
                                      const int32_t* tokens, int B, int T) {
  const float* g = dout;
  if (tp_.sp()) {
    check(dout_full != nullptr, "VocabParallelEmbedding: sequence parallel backward needs a [B*T, C] buffer");
    TpCommTimer timer(tp_);
    reduce_scatter_to_sequence_backward(*tp_.comm, dout, dout_full,
                                        static_cast<size_t>(sequence_local_rows(tp_, int64_t{B} * T) * c_));
    g = dout_full;
  }
  ops_.embedding_backward(dwte, dwpe, g, tokens, B, T, static_cast<int>(c_), vb_, ve_);
}

VocabParallelCrossEntropy::VocabParallelCrossEntropy(Ops& ops, TpContext tp, int64_t padded_vocab, int64_t V)
    : ops_(ops), tp_(tp), v_(V) {
  check(padded_vocab % tp.size() == 0 && V <= padded_vocab,
        "VocabParallelCrossEntropy: padded vocab {} (real {}) does not divide by tp {}", padded_vocab, V, tp.size());
  vl_ = padded_vocab / tp.size();
  vb_ = tp.rank() * vl_;
  v_real_local_ = std::clamp<int64_t>(V - vb_, 0, vl_);
}

void VocabParallelCrossEntropy::forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                        int64_t rows) {
  if (!tp_.active()) {
    ops_.crossentropy_forward(losses, lse, logits, targets, rows, vl_, v_);
    return;
  }
  // Local logsumexp over this slice's real columns (the Ops kernel, targets shifted into the
  // slice; a slice without real columns contributes exp(-inf) = 0).
  std::vector<int32_t> local_t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = targets[r];
    local_t[r] = (t >= vb_ && t < vb_ + v_real_local_) ? static_cast<int32_t>(t - vb_) : -1;
  }
  a_.assign(static_cast<size_t>(rows), -std::numeric_limits<float>::infinity());
  if (v_real_local_ > 0) ops_.crossentropy_forward(losses, a_.data(), logits, local_t.data(), rows, vl_, v_real_local_);
  // max over the group, then [sum of exp(lse_r - max) | target logit] in one all-reduce.
  std::vector<float>& mx = a_;
  std::copy(a_.begin(), a_.end(), lse);  // keep the local lse
  {
    TpCommTimer timer(tp_);
    vocab_parallel_max(*tp_.comm, mx.data(), static_cast<size_t>(rows));
  }
  b_.assign(static_cast<size_t>(2 * rows), 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    b_[r] = std::exp(lse[r] - mx[r]);
    if (local_t[r] >= 0) b_[rows + r] = logits[r * vl_ + local_t[r]];
  }
  {
    TpCommTimer timer(tp_);
    vocab_parallel_sums(*tp_.comm, b_.data(), static_cast<size_t>(rows));
  }
  for (int64_t r = 0; r < rows; ++r) {
    lse[r] = mx[r] + std::log(b_[r]);
    losses[r] = targets[r] >= 0 ? lse[r] - b_[rows + r] : 0.f;
  }
}

void VocabParallelCrossEntropy::backward(float* dlogits, const float* lse, const int32_t* targets, int64_t rows,
                                         float scale) {
  if (!tp_.active()) {
    ops_.crossentropy_backward(dlogits, lse, targets, rows, vl_, v_, scale);
    return;
  }
  const int64_t vreal = v_real_local_;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* x = dlogits + r * vl_;
    const int64_t t = targets[r];
    if (t < 0) {
      std::fill(x, x + vl_, 0.f);
      continue;
    }
    const float l = lse[r];
    for (int64_t j = 0; j < vreal; ++j) x[j] = scale * std::exp(x[j] - l);
    std::fill(x + vreal, x + vl_, 0.f);
    if (t >= vb_ && t < vb_ + vreal) x[t - vb_] -= scale;
  }
}

}  // namespace mpitron
