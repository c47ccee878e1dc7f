// AVX-512 exp/tanh (GCC does not vectorise libm's expf without -ffast-math, and its simd
// clones of a scalar version did not vectorise either). Cody-Waite range reduction +
// degree-6 polynomial: relative error < 2e-7 over [-87, 88]; inputs below -87 give ~0
// (softmax's masked tails), above 88 are clamped.
#pragma once
#include "avx512.hpp"

#include <cmath>
#include <cstdint>

namespace mpitron::cpu {

inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.f)), _mm512_set1_ps(-87.f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(p, n);  // p * 2^n
}

// tanh(x) = 1 - 2 / (exp(2x) + 1); abs error ~1e-7.
inline __m512 tanh16(__m512 x) {
  __m512 e = exp16(_mm512_add_ps(x, x));
  return _mm512_sub_ps(_mm512_set1_ps(1.f), _mm512_div_ps(_mm512_set1_ps(2.f), _mm512_add_ps(e, _mm512_set1_ps(1.f))));
}

inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << remaining) - 1);
}

// max over x[0, n)
inline float max_n(const float* x, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < n; j += 16) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, tail_mask(n - j), x + j));
  return _mm512_reduce_max_ps(m);
}

// y[j] = exp(x[j] - shift) * mul for j in [0, n) (y may alias x); returns sum of exp(x - shift).
inline float exp_shift_n(float* y, const float* x, int64_t n, float shift, float mul) {
  __m512 s = _mm512_setzero_ps(), sh = _mm512_set1_ps(shift), mu = _mm512_set1_ps(mul);
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = tail_mask(n - j);
    __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), sh));
    s = _mm512_mask_add_ps(s, k, s, e);
    if (y) _mm512_mask_storeu_ps(y + j, k, _mm512_mul_ps(e, mu));
  }
  return _mm512_reduce_add_ps(s);
}

}  // namespace mpitron::cpu
