// FP8 current scaling on the host (ops/fp8_scaling.hpp).
#include "mpitron/ops/fp8_scaling.hpp"

#include <algorithm>

namespace mpitron {
namespace {

float amax_of(const float* x, size_t n) {
  float m = 0.f;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

template <class Out>
Fp8CastStats cast(Fp8Format f, const float* x, size_t n, Out out) {
  Fp8CastStats s;
  s.amax = amax_of(x, n);
  s.scale = fp8_scale_for(f, s.amax);
  const float top = fp8_max_finite(f);
  for (size_t i = 0; i < n; ++i) {
    const float y = x[i] * s.scale;
    const uint8_t q = fp8_from_float(f, y);
    s.saturated += std::fabs(y) > top;
    s.underflowed += x[i] != 0.f && (q & 0x7f) == 0;
    out(i, q, s.scale);
  }
  return s;
}

}  // namespace

Fp8CastStats fp8_quantize(Fp8Format f, const float* x, size_t n, uint8_t* q) {
  return cast(f, x, n, [q](size_t i, uint8_t c, float) { q[i] = c; });
}

Fp8CastStats fp8_fake_quantize(Fp8Format f, float* x, size_t n) {
  return cast(f, x, n, [f, x](size_t i, uint8_t c, float scale) { x[i] = float_from_fp8(f, c) * (1.f / scale); });
}

}  // namespace mpitron
