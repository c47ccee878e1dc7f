// FP8 (the OCP 8-bit floating point formats, as Hopper's tensor cores take them): E4M3 (4
// exponent bits, bias 7, 3 mantissa bits; no infinity, S.1111.111 the only NaN; largest finite 448)
// for weights and activations, E5M2 (5 exponent bits, bias 15, 2 mantissa bits; IEEE-like
// infinities and NaNs; largest finite 57344) for gradients. One code per float: round to nearest,
// ties to even; saturating, so anything beyond the largest finite value (infinity included)
// becomes the largest finite value of its sign (CUDA's __NV_SATFINITE, TransformerEngine's casts);
// every NaN becomes the canonical 0x7f, as CUDA's conversion makes it (E4M3: 0.1111.111; E5M2:
// 0.11111.11). Magnitudes at or below half the smallest subnormal become zero of their sign.
// Host and device (the CUDA cast kernels use these functions; tests/unit/test_fp8.cpp checks them
// against a reference written from the specification and, on CUDA builds, against cuda_fp8.h).
#pragma once
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define MPITRON_FP8_HD __host__ __device__ __forceinline__
#else
#define MPITRON_FP8_HD inline
#endif

namespace mpitron {

enum class Fp8Format : uint8_t { e4m3, e5m2 };

// The largest finite magnitudes (the current-scaling recipe's targets: scale = max / amax), and
// where saturation begins: the midpoint between the largest finite value and the next
// power-of-two step, from which round-to-nearest would pass the largest finite value. Below it,
// x scale may exceed the largest finite value by fp32 rounding (the amax element itself:
// amax x (max / amax)) and still round to it: not saturated.
constexpr float kFp8E4m3Max = 448.f, kFp8E5m2Max = 57344.f;
constexpr float kFp8E4m3Saturation = 464.f, kFp8E5m2Saturation = 61440.f;

namespace fp8_detail {

template <int EB, int MB>
struct Fmt {
  static constexpr int kBias = (1 << (EB - 1)) - 1;
  // The largest finite magnitude's code: E4M3 0.1111.110 (its 1111.111 is NaN); E5M2 0.11110.11.
  static constexpr uint32_t kMaxCode = EB == 4 ? 0x7e : 0x7b;
};

MPITRON_FP8_HD uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
MPITRON_FP8_HD float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

template <int EB, int MB>
MPITRON_FP8_HD uint8_t encode(float x) {
  using F = Fmt<EB, MB>;
  const uint32_t u = bits_of(x), a = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
  if (a > 0x7f800000u) return 0x7f;
  if (a == 0x7f800000u) return static_cast<uint8_t>(sign | F::kMaxCode);
  const int e = static_cast<int>(a >> 23);
  if (e == 0) return static_cast<uint8_t>(sign);  // fp32 subnormals: far below half FP8's smallest
  const int te = e - 127 + F::kBias;              // the biased FP8 exponent of x
  const uint64_t sig = (a & 0x7fffffu) | 0x800000u;
  // Normal: keep MB mantissa bits under the exponent field; subnormal (te < 1): shift the whole
  // significand right by 1 - te more. Rounding carries into the exponent by itself.
  const int shift = 23 - MB + (te < 1 ? 1 - te : 0);
  if (shift > 40) return static_cast<uint8_t>(sign);
  uint64_t q = sig >> shift;
  if (te >= 1) q = (uint64_t(te) << MB) | (q & ((1u << MB) - 1));
  const uint64_t rem = sig & ((uint64_t{1} << shift) - 1), half = uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  if (q > F::kMaxCode) q = F::kMaxCode;
  return static_cast<uint8_t>(sign | q);
}

template <int EB, int MB>
MPITRON_FP8_HD float decode(uint8_t c) {
  using F = Fmt<EB, MB>;
  const uint32_t sign = uint32_t{c & 0x80u} << 24, e = (c >> MB) & ((1u << EB) - 1), m = c & ((1u << MB) - 1);
  if (EB == 4 && e == 15 && m == 7) return float_of(sign | 0x7fc00000u);
  if (EB == 5 && e == 31) return float_of(sign | (m == 0 ? 0x7f800000u : 0x7fc00000u));
  if (e == 0) {  // subnormal: m x 2^(1 - bias - MB), exact in fp32
    const float v = static_cast<float>(m) * float_of(static_cast<uint32_t>(127 + 1 - F::kBias - MB) << 23);
    return float_of(sign | bits_of(v));
  }
  return float_of(sign | ((e - F::kBias + 127) << 23) | (m << (23 - MB)));
}

// decode(encode(x)) without the code: x rounded to the format's nearest value (ties to even),
// saturated, the same value as the two calls give (a NaN stays a NaN, its sign x's), branch-free
// so that loops over it vectorise (the CPU's FP8 emulation casts every operand of every GEMM).
// Normal range: round to nearest even on the fp32 bits, MB mantissa bits kept (a carry moves the
// exponent). Subnormal range (below 2^(1 - bias)): a + 2^(23) q - 2^(23) q rounds a to a multiple
// of the subnormal step q = 2^(1 - bias - MB) in fp32's own rounding (nearest even). Saturation:
// from the midpoint above the largest finite value (E4M3 464, E5M2 61440).
template <int EB, int MB>
MPITRON_FP8_HD float round_to_grid(float x) {
  using F = Fmt<EB, MB>;
  const uint32_t u = bits_of(x), sign = u & 0x80000000u, au = u & 0x7fffffffu;
  const float a = float_of(au);
  const uint32_t low = (1u << (23 - MB)) - 1u;
  const uint32_t normal = (au + (low >> 1) + ((au >> (23 - MB)) & 1u)) & ~low;
  const float big = float_of(static_cast<uint32_t>(127 + 1 - F::kBias - MB + 23) << 23);
  const float min_normal = float_of(static_cast<uint32_t>(127 + 1 - F::kBias) << 23);
  const float top = EB == 4 ? kFp8E4m3Max : kFp8E5m2Max, threshold = EB == 4 ? kFp8E4m3Saturation : kFp8E5m2Saturation;
  // Selects as masks (ternaries left a branch in the vectorised loop).
  const uint32_t sub = 0u - static_cast<uint32_t>(a < min_normal), sat = 0u - static_cast<uint32_t>(a >= threshold),
                 nan = 0u - static_cast<uint32_t>(a != a);
  uint32_t r = (bits_of((a + big) - big) & sub) | (normal & ~sub);
  r = (bits_of(top) & sat) | (r & ~sat);
  r = (au & nan) | (r & ~nan);
  return float_of(r | sign);
}

}  // namespace fp8_detail

MPITRON_FP8_HD uint8_t fp8_e4m3_from_float(float x) { return fp8_detail::encode<4, 3>(x); }
MPITRON_FP8_HD uint8_t fp8_e5m2_from_float(float x) { return fp8_detail::encode<5, 2>(x); }
MPITRON_FP8_HD float float_from_fp8_e4m3(uint8_t c) { return fp8_detail::decode<4, 3>(c); }
MPITRON_FP8_HD float float_from_fp8_e5m2(uint8_t c) { return fp8_detail::decode<5, 2>(c); }
MPITRON_FP8_HD uint8_t fp8_from_float(Fp8Format f, float x) {
  return f == Fp8Format::e4m3 ? fp8_e4m3_from_float(x) : fp8_e5m2_from_float(x);
}
MPITRON_FP8_HD float float_from_fp8(Fp8Format f, uint8_t c) {
  return f == Fp8Format::e4m3 ? float_from_fp8_e4m3(c) : float_from_fp8_e5m2(c);
}
// float_from_fp8(f, fp8_from_float(f, x)) in one branch-free step (fp8_detail::round_to_grid).
MPITRON_FP8_HD float fp8_round(Fp8Format f, float x) {
  return f == Fp8Format::e4m3 ? fp8_detail::round_to_grid<4, 3>(x) : fp8_detail::round_to_grid<5, 2>(x);
}

}  // namespace mpitron
