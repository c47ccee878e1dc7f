#include "mpitron/parallel/fixed_point_grads.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/comm.hpp"

namespace mpitron {
namespace {

constexpr int B = FixedPointGrads::kBinBits;

// Round to nearest even for |y| < 2^51, in the default rounding mode, without a libm call:
// adding 1.5 * 2^52 leaves no fraction bits.
inline double round_even(double y) {
  constexpr double kMagic = 6755399441055744.0;
  return (y + kMagic) - kMagic;  // not folded: the build has no -ffast-math
}

// 2^(B t) for the bins' range of t (every float has t in [-4, 3]; lo's is t - 1).
inline double unit(int t) { return std::ldexp(1.0, B * t); }

}  // namespace

FixedPointGrads::FixedPointGrads(size_t n) : top_(n, kEmpty), bins_(2 * n, 0) {}

void FixedPointGrads::clear() {
  std::fill(top_.begin(), top_.end(), kEmpty);
  std::fill(bins_.begin(), bins_.end(), 0);
}

int8_t FixedPointGrads::top_of(float x) {
  if (x == 0) return kEmpty;
  if (!std::isfinite(x)) return kNonFinite;
  // |x| in [2^e, 2^(e+1)): the smallest t with 2^(e+1) <= 2^(B (t+1) - 1), t = ceil((e + 2) / B) - 1.
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const int E = static_cast<int>((bits >> 23) & 0xff);
  const int e = E ? E - 127 : std::ilogb(x), a = e + 2;  // a libm call for subnormals only
  const int ceil_div = a >= 0 ? (a + B - 1) / B : -((-a) / B);
  return static_cast<int8_t>(ceil_div - 1);
}

void FixedPointGrads::raise(size_t i, int8_t t) {
  const int8_t old = top_[i];
  top_[i] = t;
  if (old == kEmpty) return;  // the bins are 0
  int64_t* b = &bins_[2 * i];
  if (t == kNonFinite || t - old >= 2) {
    b[0] = b[1] = 0;
  } else if (t - old == 1) {  // every earlier term is below half the new top bin: its hi is 0
    b[1] = b[0];
    b[0] = 0;
  }
}

void FixedPointGrads::add(const float* g, size_t at, size_t n) {
  check(at + n <= size(), "FixedPointGrads::add: [{}, {}) outside {} elements", at, at + n, size());
  double inv[8], up[8];  // t + 4 for t in [-4, 3]: 2^(-B t), and 2^(B t)
  for (int t = -4; t <= 3; ++t) {
    inv[t + 4] = unit(-t);
    up[t + 4] = unit(t);
  }
  const double lo_scale = unit(1);  // 2^(-B (t-1)) = 2^(-B t) * 2^B
  // Element by element, so the rank's threads may share the work without changing a bit.
#pragma omp parallel for schedule(static) if (n >= (size_t{1} << 16))
  for (size_t k = 0; k < n; ++k) {
    const float x = g[k];
    if (x == 0) continue;
    const size_t i = at + k;
    const int8_t tx = top_of(x);
    if (tx > top_[i]) raise(i, tx);
    const int t = top_[i];
    if (t == kNonFinite) continue;
    const double xd = x;
    const double hi = round_even(xd * inv[t + 4]);
    const double rem = xd - hi * up[t + 4];  // exact: both are multiples of min(ulp(x), 2^(B t))
    const double lo = round_even(rem * inv[t + 4] * lo_scale);
    bins_[2 * i] += static_cast<int64_t>(hi);
    bins_[2 * i + 1] += static_cast<int64_t>(lo);
  }
}

void FixedPointGrads::align_to_max(Comm& c, size_t at, size_t n) {
  std::vector<int8_t> t(top_.begin() + at, top_.begin() + at + n);
  c.all_reduce_host_i8_max(t.data(), n);
  for (size_t k = 0; k < n; ++k)
    if (t[k] > top_[at + k]) raise(at + k, t[k]);
}

void FixedPointGrads::all_reduce(Comm& c, size_t at, size_t n) {
  check(at + n <= size(), "FixedPointGrads::all_reduce: [{}, {}) outside {} elements", at, at + n, size());
  if (c.size() == 1 || n == 0) return;
  align_to_max(c, at, n);
  c.all_reduce_host_i64(&bins_[2 * at], 2 * n, ReduceOp::sum);
}

void FixedPointGrads::reduce_scatter_to(Comm& c, size_t at, const size_t* counts, float* out) {
  size_t total = 0, before = 0;
  for (int r = 0; r < c.size(); ++r) {
    if (r < c.rank()) before += counts[r];
    total += counts[r];
  }
  check(at + total <= size(), "FixedPointGrads::reduce_scatter_to: [{}, {}) outside {} elements", at, at + total, size());
  if (c.size() > 1) {
    align_to_max(c, at, total);
    std::vector<size_t> pairs(counts, counts + c.size());
    for (size_t& p : pairs) p *= 2;
    std::vector<int64_t> mine(2 * counts[c.rank()]);
    c.reduce_scatterv_host_i64(&bins_[2 * at], mine.data(), pairs.data());
    std::copy(mine.begin(), mine.end(), bins_.begin() + 2 * (at + before));
  }
  to_float(at + before, counts[c.rank()], out);
}

void FixedPointGrads::to_float(size_t at, size_t n, float* out) const {
#pragma omp parallel for schedule(static) if (n >= (size_t{1} << 16))
  for (size_t k = 0; k < n; ++k) {
    const size_t i = at + k;
    const int t = top_[i];
    if (t == kEmpty) out[k] = 0.f;
    else if (t == kNonFinite) out[k] = std::numeric_limits<float>::quiet_NaN();
    else
      out[k] = static_cast<float>(static_cast<double>(bins_[2 * i]) * unit(t) +
                                  static_cast<double>(bins_[2 * i + 1]) * unit(t - 1));
  }
}

}  // namespace mpitron
