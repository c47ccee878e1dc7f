#include <cmath>

#include "kernels.hpp"

namespace mpitron::cpu {

void residual_forward(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* a, const float* b, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

void scale_inplace(float* a, float s, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] *= s;
}

void column_sums(float* sums, const float* x, int64_t M, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < N; c0 += 64) {
    int64_t c1 = c0 + 64 < N ? c0 + 64 : N;
    float acc[64] = {};
    for (int64_t r = 0; r < M; ++r) {
      const float* row = x + r * N;
#pragma omp simd
      for (int64_t i = c0; i < c1; ++i) acc[i - c0] += row[i];
    }
    for (int64_t i = c0; i < c1; ++i) sums[i] += acc[i - c0];
  }
}

// torch.optim.AdamW (foreach=False path), same operation order so fp32 results match closely.
void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
           float weight_decay, int step) {
  // torch computes the bias corrections in Python floats (double).
  double bc1 = 1.0 - std::pow(static_cast<double>(beta1), step);
  double bc2 = 1.0 - std::pow(static_cast<double>(beta2), step);
  float step_size = static_cast<float>(lr / bc1);
  float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  float decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float gi = g[i];
    float mi = beta1 * m[i] + (1.f - beta1) * gi;
    float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * (mi / denom);
  }
}

double sum_squares(const float* x, size_t n) {
  double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s)
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace mpitron::cpu
