// train.precision = "fp8": the recipe of the block's four linear layers (fused qkv, attention
// output, fc / gate|up, the MLP's second matrix; ColumnParallelLinear / RowParallelLinear), in all
// three GEMMs each. Current (per-tensor) scaling (ops/fp8_scaling.hpp): every operand is cast with
// the scale of its own amax at the moment it is used; E4M3 for weights and activations, E5M2 (more
// range, less precision) for the output gradients, as TransformerEngine's HYBRID format; fp32
// accumulation. The bias gradient is taken from the unquantised output gradient (TE does the same),
// and the embedding, LM head, norms, attention, MoE router and experts and the optimizer keep their
// precision. Master weights stay fp32: checkpoints are those of any other run.
//
// The golden rule under FP8: an operand split over ranks (tensor parallel's weight shards and
// column-split output gradients, context parallel's sequence chunks) is scaled with the amax of the
// whole tensor, the max over the tp and cp groups (exact in any order), so every layout casts the
// elements the single rank casts with the single rank's scale. What differs between layouts is only
// what differs without FP8: fp32 sums in another order, which can move an element across an FP8
// rounding boundary (the bound in tests/e2e/test_fp8_cpu.sh says how far that carries).
//
// The statistics (metrics.jsonl's "fp8"): per operand kind, the largest amax, and the fractions of
// the cast elements that saturated (none under current scaling) or underflowed to zero; a
// training step's casts only (recomputed forwards included, evaluation not).
#pragma once
#include <array>
#include <cstdint>

#include "mpitron/core/fp8.hpp"
#include "mpitron/distributed/comm.hpp"
#include "mpitron/ops/fp8_scaling.hpp"

namespace mpitron {

enum class Fp8Operand { activation = 0, weight = 1, gradient = 2 };
inline constexpr int kFp8Operands = 3;
inline const char* fp8_operand_name(Fp8Operand k) {
  return k == Fp8Operand::activation ? "act" : k == Fp8Operand::weight ? "weight" : "grad";
}
// The recipe's format for an operand kind: E5M2 for gradients, E4M3 for the rest.
inline Fp8Format fp8_format_for(Fp8Operand k) { return k == Fp8Operand::gradient ? Fp8Format::e5m2 : Fp8Format::e4m3; }

// One operand kind's casts since the last take.
struct Fp8KindStats {
  double amax = 0;  // the largest amax
  int64_t casts = 0, elements = 0, saturated = 0, underflowed = 0;
  void add(const Fp8CastStats& s, int64_t n) { merge({s.amax, 1, n, s.saturated, s.underflowed}); }
  void merge(const Fp8KindStats& o) {
    amax = amax > o.amax ? amax : o.amax;
    casts += o.casts, elements += o.elements, saturated += o.saturated, underflowed += o.underflowed;
  }
};
using Fp8Stats = std::array<Fp8KindStats, kFp8Operands>;

class Fp8Recipe {
 public:
  // tp, cp: the groups that split an operand (nullptr: none).
  Fp8Recipe(Comm* tp, Comm* cp) : tp_(tp), cp_(cp) {}
  // The whole tensor's amax from this rank's part's.
  float group_amax(float local) const {
    double m = local;
    if (tp_) m = tp_->all_reduce_scalar(m, ReduceOp::max);
    if (cp_) m = cp_->all_reduce_scalar(m, ReduceOp::max);
    return static_cast<float>(m);
  }
  // x[0, n) cast as an operand of kind k into out, as the FP8 GEMM reads it: decode(fp8(x s))
  // (the CPU's emulation). Returns 1 / s, the factor the GEMM's result takes for this operand.
  float quantize(Fp8Operand k, const float* x, float* out, int64_t n) {
    const float amax = group_amax(fp8_amax(x, static_cast<size_t>(n)));
    const Fp8CastStats s = fp8_decode_quantized(fp8_format_for(k), x, out, static_cast<size_t>(n), amax);
    if (counting_) stats_[static_cast<int>(k)].add(s, n);
    return 1.f / s.scale;
  }
  // The GPU's form of group_amax: amax[0] (the Comm's memory: device for NCCL) in place.
  void group_amax_inplace(float* amax) const {
    if (tp_) tp_->all_reduce(amax, 1, DType::f32, ReduceOp::max);
    if (cp_) cp_->all_reduce(amax, 1, DType::f32, ReduceOp::max);
  }
  // A cast of n elements where the device keeps the amax, saturated and underflowed counts
  // itself (CudaDevice): counted here, its figures merged in when the stats are taken.
  void count_cast(Fp8Operand k, int64_t n) {
    if (counting_) stats_[static_cast<int>(k)].merge({0, 1, n, 0, 0});
  }
  bool counting() const { return counting_; }
  // Off: casts are made but not counted (evaluation passes, which are not a step's).
  void set_counting(bool on) { counting_ = on; }
  Fp8Stats take_stats() {
    Fp8Stats s = stats_;
    stats_ = {};
    return s;
  }

 private:
  Comm* tp_;
  Comm* cp_;
  Fp8Stats stats_{};
  bool counting_ = true;
};

}  // namespace mpitron
