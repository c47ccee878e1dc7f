// A reference for the FP8 formats written from the OCP 8-bit floating point specification by
// another route than core/fp8.hpp (for test_fp8 and test_fp8_linear): the 256 codes' values from
// the formula (-1)^s 2^(e - bias) (1 + m / 2^M), subnormals m 2^(1 - bias - M), the special codes
// as the specification lists them; a float's code by a search for the nearest finite value in
// double (ties to the even code), saturated at the largest finite value.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace fp8_spec {

struct SpecFormat {
  int E, M, bias;
  bool ieee_specials;  // E5M2: exponent all ones is infinity / NaN; E4M3: only S.1111.111 is NaN
};
constexpr SpecFormat kE4m3{4, 3, 7, false}, kE5m2{5, 2, 15, true};

// The code's value by the specification's formula (NaN for NaN codes, +-inf for E5M2's infinities).
inline double spec_value(const SpecFormat& f, int code) {
  const int s = code >> 7, e = (code >> f.M) & ((1 << f.E) - 1), m = code & ((1 << f.M) - 1);
  const double sign = s ? -1.0 : 1.0;
  if (f.ieee_specials && e == (1 << f.E) - 1)
    return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (!f.ieee_specials && e == (1 << f.E) - 1 && m == (1 << f.M) - 1) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(double(m), 1 - f.bias - f.M);
  return sign * std::ldexp(1.0 + double(m) / (1 << f.M), e - f.bias);
}

// The positive finite codes in increasing value (0 first).
inline std::vector<int> positive_finite(const SpecFormat& f) {
  std::vector<int> v;
  for (int c = 0; c < 128; ++c)
    if (std::isfinite(spec_value(f, c))) v.push_back(c);
  std::sort(v.begin(), v.end(), [&](int a, int b) { return spec_value(f, a) < spec_value(f, b); });
  return v;
}

// x's code: nearest finite value (ties to the even code), saturated; NaN -> a NaN code (checked by
// class, its bits are the format's choice).
inline int spec_encode(const SpecFormat& f, const std::vector<int>& pos, float x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  const double top = spec_value(f, pos.back());
  if (a >= top) return sign | pos.back();  // saturation (infinity included)
  auto it = std::upper_bound(pos.begin(), pos.end(), a, [&](double v, int c) { return v < spec_value(f, c); });
  const int hi = *it, lo = *(it - 1);
  const double dl = a - spec_value(f, lo), dh = spec_value(f, hi) - a;
  const int c = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | c;
}

}  // namespace fp8_spec
