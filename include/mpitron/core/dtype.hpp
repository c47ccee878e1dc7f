// Element types and the one place where fp32 <-> bf16 conversion is defined.
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

}  // namespace mpitron
