// The LM head and its loss, written once for both devices (Dev: CpuDevice or CudaDevice, as
// transformer_block.hpp): logits = lnf W^T over this rank's vocabulary slice (column-parallel,
// the input all-gathered under sequence parallel), the vocab-parallel cross-entropy, and with
// gradients the head's backward at once, unscaled (the loss scale is only known at backward;
// the gradient is linear in it): each chunk's logits become softmax - onehot in place, then
// give dlnf and this micro-batch's head weight gradient. That spares a second logits GEMM.
// Rows go in chunks (chunk_rows) so that the logits of only one chunk exist at a time.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "mpitron/model/config.hpp"
#include "mpitron/model/shard_geometry.hpp"
#include "mpitron/model/tensor_parallel/parallel_layers.hpp"
#include "mpitron/model/tensor_parallel/tp_mappings.hpp"

namespace mpitron {

template <class A>
struct HeadScratch {
  A* logits = nullptr;  // [chunk_rows, Vp/tp]
  A* gath = nullptr;    // SP: [BT, C] the all-gathered lnf
  A* full = nullptr;    // SP: [BT, C] dlnf's partial sums before the reduce-scatter
  float* ce = nullptr;  // TP: [4 chunk_rows] the cross-entropy's statistics
};

template <class Dev>
class LmHead {
 public:
  using A = typename Dev::act_t;
  using Wt = typename Dev::weight_t;
  LmHead(Dev& dev, const ModelConfig& cfg, const ShardGeometry& geo, TpContext tp, int64_t chunk_rows)
      : dev_(dev), geo_(geo), tp_(tp), c_(cfg.d_model), chunk_rows_(chunk_rows),
        ce_(dev, tp, cfg.padded_vocab(tp.size()), cfg.vocab_size) {}

  // lnf: this rank's rows [Rl, C] of the final norm's output; w: the head's [Vp/tp, C] slice;
  // targets [BT] (the device's memory; < 0 ignored). losses, lse: [BT] per row. With grad:
  // dlnf [Rl, C] is overwritten with d(sum of losses)/d lnf, dwte [Vp/tp, C] with the head
  // weight's. last_losses runs once the last chunk's losses are written (before its dW GEMM).
  void forward(const Wt* w, const A* lnf, A* dlnf, float* dwte, float* losses, float* lse, const int32_t* targets,
               int64_t BT, bool grad, const HeadScratch<A>& s, const std::function<void()>& last_losses = {}) {
    const int64_t C = c_, vp = geo_.vp;
    if (grad) dev_.zero_grad(dwte, static_cast<size_t>(vp * C));
    const A* in = lnf;
    if (tp_.sp()) {  // every row's logits on every rank: lnf all-gathered
      TpCommTimer timer(tp_);
      gather_from_sequence_forward(*tp_.comm, lnf, s.gath, static_cast<size_t>(geo_.local_rows(BT) * C));
      in = s.gath;
    }
    A* dall = tp_.sp() ? s.full : dlnf;  // [BT, C] partial sums under SP
    for (int64_t r0 = 0; r0 < BT; r0 += chunk_rows_) {
      const int64_t rows = std::min(chunk_rows_, BT - r0);
      dev_.matmul_forward(s.logits, in + r0 * C, w, nullptr, rows, C, vp);
      if (grad) ce_.forward_backward(losses + r0, lse + r0, s.logits, targets + r0, rows, s.ce, 1.f);
      else ce_.forward(losses + r0, lse + r0, s.logits, targets + r0, rows, s.ce);
      if (r0 + rows == BT && last_losses) last_losses();
      if (grad) dev_.matmul_backward(dall + r0 * C, dwte, nullptr, s.logits, in + r0 * C, w, rows, C, vp);
    }
    if (!grad || !tp_.active()) return;
    // Each rank's vocabulary slice gave a part of dlnf: f's backward sums them.
    TpCommTimer timer(tp_);
    if (tp_.sp()) gather_from_sequence_backward(*tp_.comm, dall, dlnf, static_cast<size_t>(geo_.local_rows(BT) * C));
    else copy_to_tp_region_backward(*tp_.comm, dlnf, static_cast<size_t>(BT * C));
  }

 private:
  Dev& dev_;
  const ShardGeometry& geo_;
  TpContext tp_;
  int64_t c_, chunk_rows_;
  VocabParallelCrossEntropy<Dev> ce_;
};

}  // namespace mpitron
