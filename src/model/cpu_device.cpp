// CpuDevice's vocab-parallel cross-entropy pieces (cpu_device.hpp): the slice's statistics come
// from Ops' cross-entropy kernel over the slice's real columns (vectorised), the rest is per row.
#include "mpitron/model/cpu_device.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mpitron {

void CpuDevice::crossentropy_partial(float* max, float* sumexp, float* target_logit, const float* logits,
                                     const int32_t* targets, int64_t rows, int64_t Vp, int64_t V,
                                     int64_t vocab_begin) {
  // The slice's log-sum-exp is a max for which the slice's sum of exp(x - max) is 1; a slice
  // without real columns has max -inf and sum 0.
  ce_targets_.resize(static_cast<size_t>(rows));
  ce_losses_.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = targets[r] - vocab_begin;
    ce_targets_[r] = t >= 0 && t < V ? static_cast<int32_t>(t) : -1;
    target_logit[r] = ce_targets_[r] >= 0 ? logits[r * Vp + t] : 0.f;
  }
  if (V > 0) ops.crossentropy_forward(ce_losses_.data(), max, logits, ce_targets_.data(), rows, Vp, V);
  else std::fill(max, max + rows, -std::numeric_limits<float>::infinity());
  std::fill(sumexp, sumexp + rows, V > 0 ? 1.f : 0.f);
}

void CpuDevice::crossentropy_rescale(float* sumexp, const float* local_max, const float* global_max, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) sumexp[r] *= std::exp(local_max[r] - global_max[r]);
}

void CpuDevice::crossentropy_combine(float* losses, float* lse, const float* global_max, const float* sumexp,
                                     const float* target_logit, const int32_t* targets, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    lse[r] = global_max[r] + std::log(sumexp[r]);
    losses[r] = targets[r] >= 0 ? lse[r] - target_logit[r] : 0.f;
  }
}

void CpuDevice::crossentropy_backward_shard(float* logits, const float* lse, const int32_t* targets, int64_t rows,
                                            int64_t Vp, int64_t V, float scale, int64_t vocab_begin) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* x = logits + r * Vp;
    const int64_t t = targets[r];
    if (t < 0) {
      std::fill(x, x + Vp, 0.f);
      continue;
    }
    const float l = lse[r];
    for (int64_t j = 0; j < V; ++j) x[j] = scale * std::exp(x[j] - l);
    std::fill(x + V, x + Vp, 0.f);
    if (t >= vocab_begin && t < vocab_begin + V) x[t - vocab_begin] -= scale;
  }
}

}  // namespace mpitron
