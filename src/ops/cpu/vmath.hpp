// exp/tanh for the kernels (GCC does not vectorise libm's expf without -ffast-math, and its simd
// clones of a scalar version did not vectorise either). Cody-Waite range reduction + degree-6
// polynomial: relative error < 2e-7 over [-87, 88]; inputs below -87 give ~0 (softmax's masked
// tails), above 88 are clamped.
// Two forms of the same arithmetic: AVX-512 intrinsics where the variant has AVX-512 (isa.hpp),
// else scalar code the compiler vectorises for ARCH. The scalar form does each step as the
// intrinsics do (same clamps, fused multiply-adds, rounding, scaling and sum order); the two agree
// to float rounding (GCC may still fuse a multiply and an add differently in the two).
#pragma once
#include "isa.hpp"

namespace mpitron::cpu::MPITRON_CPU_ISA {

// exp of one float, step for step as exp16 below.
inline float exp1(float x) {
  x = x < 88.f ? x : 88.f;  // as minps/maxps: a NaN gives the second operand
  x = x > -87.f ? x : -87.f;
  float n = std::nearbyint(x * 1.44269504088896341f);  // to nearest even, as roundscale
  float r = std::fma(-n, 0.693359375f, x);
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p * r, r, r + 1.f);
  // p * 2^n: n is in [-126, 127], so 2^n is a normal float and the product is rounded once, as scalef.
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// tanh(x) = 1 - 2 / (exp(2x) + 1); abs error ~1e-7.
inline float tanh1(float x) { return 1.f - 2.f / (exp1(x + x) + 1.f); }

#if MPITRON_CPU_AVX512

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

#else

inline float max_n(const float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// Sixteen running sums (lane j % 16) reduced in _mm512_reduce_add_ps's order: halves, quarters, pairs.
inline float exp_shift_n(float* y, const float* x, int64_t n, float shift, float mul) {
  float s[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
#pragma omp simd
    for (int l = 0; l < 16; ++l) {
      float e = exp1(x[j + l] - shift);
      s[l] += e;
      if (y) y[j + l] = e * mul;
    }
  }
  for (int l = 0; j + l < n; ++l) {
    float e = exp1(x[j + l] - shift);
    s[l] += e;
    if (y) y[j + l] = e * mul;
  }
  float h[8], q[4];
  for (int l = 0; l < 8; ++l) h[l] = s[l + 8] + s[l];
  for (int l = 0; l < 4; ++l) q[l] = h[l + 4] + h[l];
  return (q[2] + q[0]) + (q[3] + q[1]);
}

#endif

}  // namespace mpitron::cpu::MPITRON_CPU_ISA
