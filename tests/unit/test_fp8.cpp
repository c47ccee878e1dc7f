// FP8 casts (core/fp8.hpp) against the specification's reference (fp8_spec_reference.hpp) over
// every code and every fp32 pattern class: each of the 2^20 leading bit patterns (sign, exponent,
// 11 mantissa bits) with the low 12 bits 0, 1, 0x7ff, 0x800, 0x801 and 0xfff (every FP8 midpoint,
// and one fp32 ulp either side of it), infinities and NaNs; fp8_round (the value of the code, in
// one branch-free step) the same way. On CUDA builds the same patterns also
// against NVIDIA's own host conversion (cuda_fp8.h, __NV_SATFINITE).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mpitron/core/fp8.hpp"
#include "mpitron/ops/fp8_scaling.hpp"
#include "fp8_spec_reference.hpp"
#if MPITRON_CUDA
#include <cuda_fp8.h>
#endif

using namespace mpitron;
using namespace fp8_spec;

namespace {

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

template <class Fn>
void for_each_pattern(Fn fn) {
  const uint32_t lows[] = {0x0, 0x1, 0x7ff, 0x800, 0x801, 0xfff};
  for (uint32_t hi = 0; hi < (1u << 20); ++hi)
    for (uint32_t lo : lows) fn(float_of(hi << 12 | lo));
}

void check_format(const SpecFormat& f, Fp8Format which) {
  const std::vector<int> pos = positive_finite(f);
  // Every code decodes to the formula's value (NaN codes to a NaN), and every non-NaN code
  // encodes back to itself.
  for (int c = 0; c < 256; ++c) {
    const double want = spec_value(f, c);
    const float got = float_from_fp8(which, static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      BOOST_TEST_REQUIRE(std::isnan(got), "code " << c << " decodes to " << got << ", not NaN");
      BOOST_TEST_REQUIRE(std::isnan(float_from_fp8(which, fp8_from_float(which, got))));
      continue;
    }
    BOOST_TEST_REQUIRE(double(got) == want, "code " << c << ": " << got << " vs " << want);
    BOOST_TEST_REQUIRE((std::signbit(got) != 0) == (c >= 128), "code " << c << ": sign");
    if (std::isfinite(want))
      BOOST_TEST_REQUIRE(int(fp8_from_float(which, got)) == c, "code " << c << " does not encode back");
  }
  // Every fp32 pattern class: the code, and fp8_round's value (the emulation's branch-free cast)
  // against the specification's code's value, sign of zero included.
  int64_t n = 0, bad = 0, bad_round = 0;
  for_each_pattern([&](float x) {
    ++n;
    const int got = fp8_from_float(which, x);
    const float r = fp8_round(which, x);
    bool ok, ok_round;
    if (std::isnan(x)) {
      ok = std::isnan(float_from_fp8(which, static_cast<uint8_t>(got)));
      ok_round = std::isnan(r);
    } else {
      const int want = spec_encode(f, pos, x);
      ok = got == want;
      ok_round = double(r) == spec_value(f, want) && (std::signbit(r) != 0) == (want >= 128);
    }
    if (!ok && ++bad <= 5)
      BOOST_ERROR("x = " << x << " (bits " << std::hex << [&] { uint32_t u; std::memcpy(&u, &x, 4); return u; }()
                         << std::dec << "): code " << got << ", the specification's " << spec_encode(f, pos, x));
    if (!ok_round && ++bad_round <= 5)
      BOOST_ERROR("fp8_round(" << x << ") = " << r << ", the specification's " << spec_value(f, spec_encode(f, pos, x)));
  });
  BOOST_TEST(bad == 0, bad << " of " << n << " patterns differ");
  BOOST_TEST(bad_round == 0, bad_round << " of " << n << " patterns round differently");
  BOOST_TEST(n == int64_t{6} << 20);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fp8)

BOOST_AUTO_TEST_CASE(e4m3_against_the_specification) {
  check_format(kE4m3, Fp8Format::e4m3);
  BOOST_TEST(float_from_fp8_e4m3(0x7e) == kFp8E4m3Max);
  BOOST_TEST(int(fp8_e4m3_from_float(464.f)) == 0x7e);  // the midpoint to 480 (a NaN code): to even
  BOOST_TEST(int(fp8_e4m3_from_float(-1e30f)) == 0xfe);
  BOOST_TEST(int(fp8_e4m3_from_float(std::numeric_limits<float>::infinity())) == 0x7e);
}

BOOST_AUTO_TEST_CASE(e5m2_against_the_specification) {
  check_format(kE5m2, Fp8Format::e5m2);
  BOOST_TEST(float_from_fp8_e5m2(0x7b) == kFp8E5m2Max);
  BOOST_TEST(std::isinf(float_from_fp8_e5m2(0x7c)));
  BOOST_TEST(int(fp8_e5m2_from_float(-std::numeric_limits<float>::infinity())) == 0xfb);
}

#if MPITRON_CUDA
// NVIDIA's host conversion (cuda_fp8.hpp) bit for bit, NaNs included.
BOOST_AUTO_TEST_CASE(equal_to_cuda_fp8_satfinite) {
  int64_t bad[2] = {0, 0};
  for_each_pattern([&](float x) {
    bad[0] += fp8_e4m3_from_float(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    bad[1] += fp8_e5m2_from_float(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
  });
  BOOST_TEST(bad[0] == 0);
  BOOST_TEST(bad[1] == 0);
}
#endif

// Current scaling: the amax element lands exactly on the largest finite value, nothing saturates,
// the fake quantisation is decode(code) / scale, and the underflow count is the non-zeros that
// became zero (here the elements 2^-30 below the amax, under E4M3's smallest subnormal).
BOOST_AUTO_TEST_CASE(current_scaling) {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    std::vector<float> x = {0.f, 3.f, -7.5f, 1e-3f, -12.f, std::ldexp(12.f, -30), 5.f};
    std::vector<uint8_t> q(x.size());
    const Fp8CastStats s = fp8_quantize(f, x.data(), x.size(), q.data());
    BOOST_TEST(s.amax == 12.f);
    BOOST_TEST(s.scale == fp8_max_finite(f) / 12.f);
    BOOST_TEST(float_from_fp8(f, q[4]) == -fp8_max_finite(f));
    BOOST_TEST(s.saturated == 0);
    BOOST_TEST(s.underflowed == (f == Fp8Format::e4m3 ? 1 : 0));  // E5M2 reaches 2^-16 x 57344 / 12
    std::vector<float> y = x;
    const Fp8CastStats t = fp8_fake_quantize(f, y.data(), y.size());
    BOOST_TEST(t.scale == s.scale);
    for (size_t i = 0; i < x.size(); ++i) BOOST_TEST(y[i] == float_from_fp8(f, q[i]) * (1.f / s.scale));
    BOOST_TEST(y[4] == -12.f);
  }
  // An amax from elsewhere (smaller than the tensor's, here scale 1): what lands past the threshold
  // saturates; 465 rounds to 448 by saturating, 463 by rounding (not saturated).
  std::vector<float> big = {465.f, 463.f, 2000.f};
  const Fp8CastStats b = fp8_decode_quantized(Fp8Format::e4m3, big.data(), big.data(), big.size(), 448.f);
  BOOST_TEST(b.saturated == 2);
  BOOST_TEST((big[0] == 448.f && big[1] == 448.f && big[2] == 448.f));
  std::vector<float> zeros(5, 0.f);
  BOOST_TEST(fp8_fake_quantize(Fp8Format::e4m3, zeros.data(), zeros.size()).scale == 1.f);
}

BOOST_AUTO_TEST_SUITE_END()
