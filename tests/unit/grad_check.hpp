// Finite-difference helpers shared by the gradient tests (fp32 kernels, double loss sums).
#pragma once
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "mpitron/core/rng.hpp"

namespace mpitron::testing {

inline std::vector<float> randn(size_t n, uint64_t seed, float sd = 1.f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = sd * static_cast<float>(normal_at(seed, 7, i));
  return v;
}

inline double dot(const float* a, const float* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Central differences of loss() w.r.t. x[i] for up to max_checks indices spread over x;
// returns max|numeric - analytic| / max|analytic| over the checked entries.
inline double fd_rel_error(float* x, size_t n, const float* analytic, const std::function<double()>& loss,
                           float eps = 1e-2f, size_t max_checks = 24) {
  double max_err = 0, max_ref = 1e-12;
  size_t stride = std::max<size_t>(1, n / max_checks);
  for (size_t i = (n > 1 ? 1 : 0) % n; i < n; i += stride) {
    float saved = x[i];
    x[i] = saved + eps;
    double lp = loss();
    x[i] = saved - eps;
    double lm = loss();
    x[i] = saved;
    double num = (lp - lm) / (2.0 * eps);
    max_err = std::max(max_err, std::fabs(num - analytic[i]));
  }
  for (size_t i = 0; i < n; ++i) max_ref = std::max(max_ref, std::fabs(static_cast<double>(analytic[i])));
  BOOST_TEST_MESSAGE("finite differences: rel err " << max_err / max_ref << " over " << n << " entries");
  return max_err / max_ref;
}

}  // namespace mpitron::testing
