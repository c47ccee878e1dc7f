// Counter-based random numbers: the value at (seed, stream, index) is a pure function of the
// three, so a tensor's initialisation is defined on its full logical shape and any shard
// (tensor-, pipeline- or ZeRO-parallel) computes exactly its own elements without generating
// the rest. `stream` names the tensor (e.g. a hash of its name).
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

namespace mpitron {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a: stable across runs and platforms (std::hash is not).
constexpr uint64_t stable_hash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

inline uint64_t counter_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(seed ^ splitmix64(stream)) + index);
}

// Uniform in (0, 1], 53 bits.
inline double uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
  return (static_cast<double>(counter_bits(seed, stream, index) >> 11) + 1.0) * 0x1.0p-53;
}

// Standard normal by Box-Muller over two counter draws.
inline double normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = uniform_at(seed, stream, 2 * index);
  double u2 = uniform_at(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace mpitron
