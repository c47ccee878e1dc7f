// Branch-free float exp that GCC vectorises inside `#pragma omp simd` loops (glibc's expf only
// vectorises under -ffast-math). Cody-Waite range reduction + degree-6 polynomial: relative
// error < 2e-7 over [-87, 88]; inputs below -87 return 0 (used for softmax's masked tails).
#pragma once
#include <bit>
#include <cstdint>

namespace mpitron::cpu {

#pragma omp declare simd notinbranch
inline float vexp(float x) {
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  float n = __builtin_roundevenf(x * 1.44269504088896341f);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(e);
}

// tanh(x) = 1 - 2 / (exp(2x) + 1), exact enough (abs error ~1e-7) for GELU.
#pragma omp declare simd notinbranch
inline float vtanh(float x) { return 1.f - 2.f / (vexp(2.f * x) + 1.f); }

}  // namespace mpitron::cpu
