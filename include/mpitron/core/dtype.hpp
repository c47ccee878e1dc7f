// Element types and the one place where fp32 <-> bf16 (and, for exported files, fp16) conversion
// is defined.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace mpitron {

enum class DType : uint8_t { f32, bf16 };

constexpr size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
constexpr std::string_view dtype_name(DType t) { return t == DType::f32 ? "f32" : "bf16"; }

// bf16 = the top 16 bits of an IEEE fp32. Conversion rounds to nearest, ties to even, and keeps
// NaN a (quiet) NaN — the same rule as torch and the CUDA __float2bfloat16_rn intrinsic.
struct bf16 {
  uint16_t bits = 0;
};

// The DType of an element type (float or bf16), for code typed by its buffers.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<bf16>() { return DType::bf16; }

inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

inline float to_f32(bf16 h) {
  uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16 (exports to Hugging Face and GGUF): round to nearest, ties to even; overflow to
// inf, NaN stays a quiet NaN, values below the smallest subnormal round to (signed) zero.
inline uint16_t to_fp16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    if (a < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(a >> 23);  // 14..24 low bits dropped
    const uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    return static_cast<uint16_t>(sign | (q + (rest > half || (rest == half && (q & 1u)))));
  }
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round the 13 dropped bits, ties to even
  return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
}

inline float fp16_bits_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (m << 13);
  } else if (e != 0) {
    u = sign | ((e + 112) << 23) | (m << 13);
  } else if (m == 0) {
    u = sign;
  } else {  // subnormal: m * 2^-24
    float f = static_cast<float>(m) * 5.9604644775390625e-8f;
    std::memcpy(&u, &f, 4);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace mpitron
