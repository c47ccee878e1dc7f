#include "mpitron/parallel/exact_sum.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/comm.hpp"

namespace mpitron {

void ExactSum::add_scaled(int64_t v, int exp2) {
  if (v == 0) return;
  const bool neg = v < 0;
  const uint64_t u = neg ? uint64_t(0) - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const int p = exp2 - kLowExp;
  check(p >= 0 && p / 32 + 2 < kBins, "ExactSum: 2^{} outside the accumulator's range", exp2);
  const int k = p / 32, off = p % 32;
  const unsigned __int128 w = static_cast<unsigned __int128>(u) << off;  // at most 95 bits
  const int64_t piece[3] = {static_cast<int64_t>(w & 0xffffffffu), static_cast<int64_t>((w >> 32) & 0xffffffffu),
                            static_cast<int64_t>(w >> 64)};
  for (int j = 0; j < 3; ++j) bins_[k + j] += neg ? -piece[j] : piece[j];
}

void ExactSum::add(double x) {
  if (!std::isfinite(x)) {
    ++bins_[kBins];
    return;
  }
  if (x == 0) return;
  int e = 0;
  const double m = std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1: m * 2^53 is an integer
  add_scaled(static_cast<int64_t>(std::ldexp(m, 53)), e - 53);
}

void ExactSum::add_squares(const float* g, size_t n, double sign) {
  // g = m * 2^(E - 150) for a biased exponent E >= 1 (m < 2^24 with its hidden bit), or m * 2^-149
  // for a subnormal (E = 0): g^2 = m^2 * 2^(2 * (max(E, 1) - 150)), m^2 < 2^48.
  constexpr size_t kChunk = size_t{1} << 15;  // 2^15 terms below 2^48 fit an int64
  std::array<int64_t, 256> by_exp{};
  const int64_t s = sign < 0 ? -1 : 1;
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t end = std::min(n, begin + kChunk);
    for (size_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, g + i, 4);
      const uint32_t E = (bits >> 23) & 0xff;
      const uint64_t m = (bits & 0x7fffff) | (E ? 0x800000u : 0u);
      if (E == 0xff) {
        ++bins_[kBins];
        continue;
      }
      by_exp[E] += static_cast<int64_t>(m * m);
    }
    for (int E = 0; E < 255; ++E)
      if (by_exp[E]) {
        add_scaled(s * by_exp[E], 2 * (std::max(E, 1) - 150));
        by_exp[E] = 0;
      }
  }
}

void ExactSum::merge(const ExactSum& o) {
  for (size_t k = 0; k < bins_.size(); ++k) bins_[k] += o.bins_[k];
}

void ExactSum::all_reduce(Comm& c) {
  if (c.size() > 1) c.all_reduce_host_i64(bins_.data(), bins_.size(), ReduceOp::sum);
}

bool ExactSum::empty() const {
  for (int64_t b : bins_)
    if (b) return false;
  return true;
}

double ExactSum::value() const {
  if (bins_[kBins] != 0) return std::numeric_limits<double>::quiet_NaN();
  // Carries first, to balanced digits in [-2^31, 2^31) (a negative sum does not carry up to the
  // top bin as it would with digits in [0, 2^32)), so the top non-zero bins hold the leading bits;
  // then from the top down, where the small bins change nothing once the sum has 53 bits.
  std::array<int64_t, kBins> b;
  std::copy(bins_.begin(), bins_.begin() + kBins, b.begin());
  for (int k = 0; k + 1 < kBins; ++k) {
    const int64_t carry = (b[k] + (int64_t{1} << 31)) >> 32;  // arithmetic shift: floor
    b[k] -= carry * (int64_t{1} << 32);
    b[k + 1] += carry;
  }
  double v = 0;
  for (int k = kBins - 1; k >= 0; --k)
    if (b[k]) v += std::ldexp(static_cast<double>(b[k]), 32 * k + kLowExp);
  return v;
}

}  // namespace mpitron
