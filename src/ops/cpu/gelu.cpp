#include "kernels.hpp"
#include "vmath.hpp"

namespace mpitron::cpu::MPITRON_CPU_ISA {

namespace {
constexpr float kS2Pi = 0.7978845608028654f;  // sqrt(2/pi)
}  // namespace

#if MPITRON_CPU_AVX512

namespace {

template <class F>
void for_blocks(size_t n, F&& f) {  // 16-float blocks split over threads, masked tail
  int64_t blocks = static_cast<int64_t>((n + 15) / 16);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) f(b * 16, tail_mask(static_cast<int64_t>(n) - b * 16));
}
}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {
  for_blocks(n, [&](int64_t i, __mmask16 k) {
    __m512 x = _mm512_maskz_loadu_ps(k, inp + i);
    __m512 u = _mm512_mul_ps(_mm512_set1_ps(kS2Pi),
                             _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), x), _mm512_mul_ps(x, x), x));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.f), tanh16(u)));
    _mm512_mask_storeu_ps(out + i, k, y);
  });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  for_blocks(n, [&](int64_t i, __mmask16 k) {
    __m512 x = _mm512_maskz_loadu_ps(k, inp + i);
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 u = _mm512_mul_ps(_mm512_set1_ps(kS2Pi), _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), x), x2, x));
    __m512 t = tanh16(u);
    __m512 sech2 = _mm512_fnmadd_ps(t, t, _mm512_set1_ps(1.f));
    // g = 0.5 (1 + t) + 0.5 x sech2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
    __m512 du = _mm512_mul_ps(_mm512_set1_ps(kS2Pi), _mm512_fmadd_ps(_mm512_set1_ps(3.f * 0.044715f), x2, _mm512_set1_ps(1.f)));
    __m512 g = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), sech2), du,
                               _mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_add_ps(_mm512_set1_ps(1.f), t)));
    _mm512_mask_storeu_ps(dinp + i, k, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, dout + i)));
  });
}

#else  // the same operations on one float at a time

void gelu_forward(float* out, const float* inp, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kS2Pi * std::fma(0.044715f * x, x * x, x);
    out[i] = 0.5f * x * (1.f + tanh1(u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i], x2 = x * x;
    const float t = tanh1(kS2Pi * std::fma(0.044715f * x, x2, x));
    const float sech2 = std::fma(-t, t, 1.f);
    const float du = kS2Pi * std::fma(3.f * 0.044715f, x2, 1.f);
    const float g = std::fma(0.5f * x * sech2, du, 0.5f * (1.f + t));
    dinp[i] = g * dout[i];
  }
}

#endif

}  // namespace mpitron::cpu::MPITRON_CPU_ISA
