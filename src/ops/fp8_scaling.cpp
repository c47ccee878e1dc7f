// FP8 current scaling on the host (ops/fp8_scaling.hpp).
#include "mpitron/ops/fp8_scaling.hpp"

#include <algorithm>
#include <cstdint>

namespace mpitron {
namespace {

// Threaded: max and integer counts are exact in any order, so the result does not depend on
// the thread count.
template <class Out>
Fp8CastStats cast(Fp8Format f, const float* x, size_t n, float amax, Out out) {
  Fp8CastStats s;
  s.amax = amax;
  const float scale = s.scale = fp8_scale_for(f, amax);
  const float top = fp8_saturation_threshold(f);
  const int64_t len = static_cast<int64_t>(n);
  int64_t saturated = 0, underflowed = 0;
#pragma omp parallel for reduction(+ : saturated, underflowed) if (len > 65536)
  for (int64_t i = 0; i < len; ++i) {
    const float y = x[i] * scale;
    const uint8_t q = fp8_from_float(f, y);
    saturated += std::fabs(y) >= top;
    underflowed += x[i] != 0.f && (q & 0x7f) == 0;
    out(i, q, scale);
  }
  s.saturated = saturated, s.underflowed = underflowed;
  return s;
}

}  // namespace

float fp8_amax(const float* x, size_t n) {
  const int64_t len = static_cast<int64_t>(n);
  float m = 0.f;
#pragma omp parallel for reduction(max : m) if (len > 65536)
  for (int64_t i = 0; i < len; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

Fp8CastStats fp8_quantize(Fp8Format f, const float* x, size_t n, uint8_t* q) {
  return cast(f, x, n, fp8_amax(x, n), [q](int64_t i, uint8_t c, float) { q[i] = c; });
}

Fp8CastStats fp8_fake_quantize(Fp8Format f, float* x, size_t n) { return fp8_fake_quantize(f, x, n, fp8_amax(x, n)); }

Fp8CastStats fp8_decode_quantized(Fp8Format f, float* x, size_t n, float amax) {
  return cast(f, x, n, amax, [f, x](int64_t i, uint8_t c, float) { x[i] = float_from_fp8(f, c); });
}

Fp8CastStats fp8_fake_quantize(Fp8Format f, float* x, size_t n, float amax) {
  return cast(f, x, n, amax, [f, x](int64_t i, uint8_t c, float scale) { x[i] = float_from_fp8(f, c) * (1.f / scale); });
}

}  // namespace mpitron
