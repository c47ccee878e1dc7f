// train.reproducible's exact sums: ExactSum (doubles, squares of floats) and FixedPointGrads
// (per-element binned sums) give the same bits in any order, and agree with references computed
// another way: __int128 sums of values on a common grid, and double sums of exact squares.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mpitron/parallel/exact_sum.hpp"
#include "mpitron/parallel/fixed_point_grads.hpp"

using namespace mpitron;

namespace {

uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return b;
}

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// Values on the grid 2^-80 below 2^40: their exact sum is an __int128 count of 2^-80.
std::vector<double> grid_values(std::mt19937_64& rng, int n) {
  std::vector<double> v(n);
  std::uniform_int_distribution<int> ex(-80, 8);  // 2^ex x a 31-bit integer: on the grid, below 2^40
  std::uniform_int_distribution<int64_t> mant(-(int64_t{1} << 30), int64_t{1} << 30);
  for (double& x : v) x = std::ldexp(static_cast<double>(mant(rng)), ex(rng));
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(exact_sums)

BOOST_AUTO_TEST_CASE(exact_sum_is_order_free_and_within_an_ulp_of_the_integer_reference) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> v = grid_values(rng, 2000);
    __int128 units = 0;
    for (double x : v) units += static_cast<__int128>(std::ldexp(x, 80));
    const double ref = std::ldexp(static_cast<double>(units), -80);  // correctly rounded
    ExactSum a;
    for (double x : v) a.add(x);
    std::shuffle(v.begin(), v.end(), rng);
    ExactSum b, c;  // another order, split in two "ranks" and merged
    for (size_t i = 0; i < v.size(); ++i) (i % 3 ? b : c).add(v[i]);
    c.merge(b);
    BOOST_TEST(bits_of(a.value()) == bits_of(c.value()));
    BOOST_TEST(std::fabs(a.value() - ref) <= std::fabs(ref) * 0x1p-52);
  }
}

BOOST_AUTO_TEST_CASE(exact_sum_cancels_exactly_and_flags_non_finite_terms) {
  ExactSum s;
  s.add(1e300);
  s.add(3.0);
  s.add(-1e300);
  s.add(0x1p-1074);  // the smallest subnormal
  BOOST_TEST(s.value() == 3.0);  // a double sum in this order gives 0
  s.add(std::numeric_limits<double>::infinity());
  BOOST_TEST(std::isnan(s.value()));
}

BOOST_AUTO_TEST_CASE(add_squares_equals_the_sum_of_exact_double_squares) {
  std::mt19937_64 rng(11);
  std::vector<float> g(70000);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> ex(-140, 60);
  for (float& x : g) x = std::ldexp(nd(rng), ex(rng));
  g[5] = 0x1p-149f;  // subnormals
  g[6] = -3e-42f;
  ExactSum fast, slow;
  fast.add_squares(g.data(), g.size());
  for (float x : g) slow.add(static_cast<double>(x) * x);  // exact: 48 bits
  BOOST_TEST(bits_of(fast.value()) == bits_of(slow.value()));
  ExactSum back = fast;  // a signed copy cancels to zero exactly
  back.add_squares(g.data(), g.size(), -1.0);
  BOOST_TEST(back.empty());
  g[9] = std::numeric_limits<float>::quiet_NaN();
  ExactSum nan;
  nan.add_squares(g.data(), g.size());
  BOOST_TEST(std::isnan(nan.value()));
}

BOOST_AUTO_TEST_CASE(top_bin_of_a_term_is_the_smallest_that_holds_it) {
  constexpr int B = FixedPointGrads::kBinBits;
  for (float x : {1.f, -1.f, 0x1p38f, 0x1p39f, 0x1p-149f, 3e38f, 1e-20f, 0.75f}) {
    const int t = FixedPointGrads::top_of(x);
    BOOST_TEST(std::fabs(x) < std::ldexp(1.0, B * (t + 1) - 1));
    BOOST_TEST(!(std::fabs(x) < std::ldexp(1.0, B * t - 1)));  // t - 1 would not hold it
  }
  BOOST_TEST(FixedPointGrads::top_of(0.f) == FixedPointGrads::kEmpty);
  BOOST_TEST(FixedPointGrads::top_of(std::numeric_limits<float>::infinity()) == FixedPointGrads::kNonFinite);
}

// Terms of one element spanning many binades, added in ascending, descending and random order
// (ascending moves the element up a bin many times): the same bits, and within 2^-38 of the
// largest term of the exact sum (fp32 accumulation: 2^-24).
BOOST_AUTO_TEST_CASE(fixed_point_sums_are_order_free_and_exact_to_39_bits) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int trial = 0; trial < 50; ++trial) {
    const int n_terms = 64, n = 5;
    std::vector<std::vector<float>> terms(n_terms, std::vector<float>(n));
    std::uniform_int_distribution<int> ex(-60, 20);
    for (auto& t : terms)
      for (float& x : t) x = std::ldexp(nd(rng), ex(rng));
    terms[0][1] = 0.f;
    auto sum_in = [&](const std::vector<int>& order) {
      FixedPointGrads f(n);
      for (int j : order) f.add(terms[j].data(), 0, n);
      std::vector<float> out(n);
      f.to_float(0, n, out.data());
      return out;
    };
    std::vector<int> order(n_terms);
    for (int j = 0; j < n_terms; ++j) order[j] = j;
    for (int e = 0; e < n; ++e) {  // ascending magnitude of element e
      std::vector<int> asc = order;
      std::sort(asc.begin(), asc.end(), [&](int a, int b) { return std::fabs(terms[a][e]) < std::fabs(terms[b][e]); });
      std::vector<int> desc(asc.rbegin(), asc.rend()), rnd = order;
      std::shuffle(rnd.begin(), rnd.end(), rng);
      const auto a = sum_in(asc), d = sum_in(desc), r = sum_in(rnd);
      BOOST_TEST(bits_of(a[e]) == bits_of(d[e]));
      BOOST_TEST(bits_of(a[e]) == bits_of(r[e]));
      ExactSum exact;
      double biggest = 0;
      for (auto& t : terms) {
        exact.add(t[e]);
        biggest = std::max(biggest, std::fabs(double(t[e])));
      }
      const double err = std::fabs(a[e] - exact.value());
      BOOST_TEST(err <= biggest * 0x1p-38 + std::fabs(exact.value()) * 0x1p-24);  // + the final float rounding
    }
  }
}

BOOST_AUTO_TEST_CASE(fixed_point_flags_non_finite_and_zero) {
  FixedPointGrads f(3);
  const float a[3] = {1.f, 0.f, std::numeric_limits<float>::infinity()};
  const float b[3] = {-1.f, 0.f, 2.f};
  f.add(a, 0, 3);
  f.add(b, 0, 3);
  float out[3];
  f.to_float(0, 3, out);
  BOOST_TEST(out[0] == 0.f);
  BOOST_TEST(out[1] == 0.f);
  BOOST_TEST(std::isnan(out[2]));
}

BOOST_AUTO_TEST_SUITE_END()
