// Softmax + cross-entropy on rows of logits; the model calls it on chunks of rows so the
// full [tokens, vocab] probabilities never exist at once. Padded columns (>= V) never count.
#include <algorithm>
#include <cmath>

#include "kernels.hpp"
#include "vmath.hpp"

namespace mpitron::cpu::MPITRON_CPU_ISA {

void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t rows,
                          int64_t Vp, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * Vp;
    float mx = max_n(x, V);
    float s = exp_shift_n(nullptr, x, V, mx, 1.f);
    float l = mx + std::log(s);
    lse[r] = l;
    int32_t t = targets ? targets[r] : -1;
    losses[r] = (t >= 0 && t < V) ? l - x[t] : 0.f;
  }
}

void crossentropy_backward(float* dlogits, const float* lse, const int32_t* targets, int64_t rows, int64_t Vp,
                           int64_t V, float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* x = dlogits + r * Vp;
    int32_t t = targets[r];
    if (t < 0 || t >= V) {
      std::fill(x, x + Vp, 0.f);
      continue;
    }
    float l = lse[r];
    exp_shift_n(x, x, V, l, scale);
    std::fill(x + V, x + Vp, 0.f);
    x[t] -= scale;
  }
}

}  // namespace mpitron::cpu::MPITRON_CPU_ISA
