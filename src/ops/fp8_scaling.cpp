// FP8 current scaling on the host (ops/fp8_scaling.hpp).
#include "mpitron/ops/fp8_scaling.hpp"

#include <algorithm>
#include <cstdint>

namespace mpitron {
namespace {

// Blocks of kBlock elements over the threads, each block one vectorised loop (its counts in int,
// the selects branch-free, the loop written out in each caller: with 64-bit counters under an omp
// reduction, a short-circuit &&, or the element's work behind a lambda, gcc left it scalar). Max
// and integer counts are exact in any order: the result does not depend on the thread count.
constexpr int64_t kBlock = 4096, kThreaded = 65536;

// body(b, e, sat, under) casts elements [b, e), adding to the block's counts.
template <class Body>
void count_blocks(Fp8CastStats& s, int64_t len, Body body) {
  int64_t saturated = 0, underflowed = 0;
#pragma omp parallel for reduction(+ : saturated, underflowed) schedule(static) if (len > kThreaded)
  for (int64_t b = 0; b < len; b += kBlock) {
    int sat = 0, under = 0;
    body(b, std::min(len, b + kBlock), sat, under);
    saturated += sat, underflowed += under;
  }
  s.saturated = saturated, s.underflowed = underflowed;
}

Fp8CastStats stats_for(Fp8Format f, float amax) {
  Fp8CastStats s;
  s.amax = amax;
  s.scale = fp8_scale_for(f, amax);
  return s;
}

// out[i] = round(x[i] scale) times `factor` (1, or 1 / scale), the format a template argument.
// out may be x (each element reads its x before it writes its out).
template <int EB, int MB>
Fp8CastStats round_to(Fp8Format f, const float* x, float* out, size_t n, float amax, bool unscale) {
  Fp8CastStats s = stats_for(f, amax);
  const float scale = s.scale, factor = unscale ? 1.f / scale : 1.f, top = fp8_saturation_threshold(f);
  count_blocks(s, static_cast<int64_t>(n), [=](int64_t b, int64_t e, int& sat, int& under) {
    // Locals, not the closure's members: a store through `o` might alias those, and gcc then took
    // the scalar version of the loop.
    const float* xs = x;
    const float sc = scale, fac = factor, lim = top;
    float* o = out;
    int sb = 0, ub = 0;
#pragma omp simd reduction(+ : sb, ub)
    for (int64_t i = b; i < e; ++i) {
      const float xi = xs[i], y = xi * sc, v = fp8_detail::round_to_grid<EB, MB>(y);
      o[i] = v * fac;
      sb += std::fabs(y) >= lim ? 1 : 0;
      ub += (xi != 0.f) & (v == 0.f);
    }
    sat += sb, under += ub;
  });
  return s;
}
Fp8CastStats round_to(Fp8Format f, const float* x, float* out, size_t n, float amax, bool unscale) {
  return f == Fp8Format::e4m3 ? round_to<4, 3>(f, x, out, n, amax, unscale) : round_to<5, 2>(f, x, out, n, amax, unscale);
}

}  // namespace

float fp8_amax(const float* x, size_t n) {
  const int64_t len = static_cast<int64_t>(n);
  float m = 0.f;
#pragma omp parallel for reduction(max : m) schedule(static) if (len > kThreaded)
  for (int64_t b = 0; b < len; b += kBlock) {
    const int64_t e = std::min(len, b + kBlock);
    float mb = 0.f;
#pragma omp simd reduction(max : mb)
    for (int64_t i = b; i < e; ++i) {
      const float a = std::fabs(x[i]);
      mb = a > mb ? a : mb;
    }
    m = std::max(m, mb);
  }
  return m;
}

Fp8CastStats fp8_quantize(Fp8Format f, const float* x, size_t n, uint8_t* q) {
  Fp8CastStats s = stats_for(f, fp8_amax(x, n));
  const float scale = s.scale, top = fp8_saturation_threshold(f);
  count_blocks(s, static_cast<int64_t>(n), [=](int64_t b, int64_t e, int& sat, int& under) {
    for (int64_t i = b; i < e; ++i) {
      const float y = x[i] * scale;
      q[i] = fp8_from_float(f, y);
      sat += std::fabs(y) >= top;
      under += x[i] != 0.f && (q[i] & 0x7f) == 0;
    }
  });
  return s;
}

Fp8CastStats fp8_fake_quantize(Fp8Format f, float* x, size_t n) {
  return round_to(f, x, x, n, fp8_amax(x, n), /*unscale=*/true);
}

Fp8CastStats fp8_decode_quantized(Fp8Format f, const float* x, float* out, size_t n, float amax) {
  return round_to(f, x, out, n, amax, /*unscale=*/false);
}

}  // namespace mpitron
