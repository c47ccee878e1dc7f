#include "kernels.hpp"
#include "vmath.hpp"

namespace mpitron::cpu::MPITRON_CPU_ISA {

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

void axpy(float* y, float a, const float* x, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
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
// The gradients times grad_scale, rounded to fp32 before use: what scaling them in place first gave.
void adamw(float* p, const float* g, float grad_scale, float* m, float* v, size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, int step) {
  // torch computes the bias corrections in Python floats (double).
  double bc1 = 1.0 - std::pow(static_cast<double>(beta1), step);
  double bc2 = 1.0 - std::pow(static_cast<double>(beta2), step);
  float step_size = static_cast<float>(lr / bc1);
  float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  float decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
#if MPITRON_CPU_AVX512
  // Intrinsics: with math-errno, std::sqrt keeps GCC from vectorising. sqrt and div are IEEE
  // exact in both forms, so results equal the scalar formula.
  const int64_t blocks = static_cast<int64_t>((n + 15) / 16);
  const __m512 b1 = _mm512_set1_ps(beta1), b1c = _mm512_set1_ps(1.f - beta1), b2 = _mm512_set1_ps(beta2),
               b2c = _mm512_set1_ps(1.f - beta2), ss = _mm512_set1_ps(step_size), bc2s = _mm512_set1_ps(bc2_sqrt),
               ep = _mm512_set1_ps(eps), dec = _mm512_set1_ps(decay), gs = _mm512_set1_ps(grad_scale);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i = b * 16;
    const __mmask16 k = tail_mask(static_cast<int64_t>(n) - i);
    __m512 gi = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, g + i), gs);
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(k, m + i)), _mm512_mul_ps(b1c, gi));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(k, v + i)), _mm512_mul_ps(_mm512_mul_ps(b2c, gi), gi));
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2s), ep);
    __m512 pi = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), dec), _mm512_mul_ps(ss, _mm512_div_ps(mi, denom)));
    _mm512_mask_storeu_ps(p + i, k, pi);
  }
#else
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
    m[i] = mi, v[i] = vi;
    p[i] = p[i] * decay - step_size * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
  }
#endif
}

double sum_squares(const float* x, size_t n) {
  double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s)
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace mpitron::cpu::MPITRON_CPU_ISA
