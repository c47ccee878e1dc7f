// train.precision = "fp8" on the CPU (model/fp8_recipe.hpp, CpuDevice::fp8_matmul_*): a linear
// layer's three GEMMs against a reference computed here in double from the specification's
// codes (fp8_spec_reference.hpp): each operand scaled by (largest finite / its amax) in fp32,
// encoded to the nearest code, decoded and divided by the scale; E4M3 for the input and the
// weight, E5M2 for the output gradient; the bias gradient from the unquantised output gradient.
// Operand magnitudes spread over eight decades (twelve for the gradient), so some elements underflow (counted in the
// statistics) and the result differs from the unquantised GEMM by FP8's rounding, not fp32's.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "fp8_spec_reference.hpp"
#include "mpitron/model/cpu_device.hpp"
#include "mpitron/ops/ops.hpp"

using namespace mpitron;
using namespace fp8_spec;

namespace {

// Signs random, magnitudes log-uniform in [10^lo, 10]: E4M3 keeps 5.7 decades below the amax,
// E5M2 9.6.
std::vector<float> spread(size_t n, std::mt19937& g, double lo = -7) {
  std::uniform_real_distribution<double> e(lo, 1), s(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>((s(g) < 0.5 ? -1 : 1) * std::pow(10.0, e(g)));
  return v;
}

// The operand as the recipe reads it, and how many non-zeros became zero.
std::vector<double> reference_cast(const std::vector<float>& x, const SpecFormat& f, float top, int64_t* underflowed) {
  float amax = 0.f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = top / amax;
  const std::vector<int> pos = positive_finite(f);
  std::vector<double> q(x.size());
  *underflowed = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const int code = spec_encode(f, pos, x[i] * scale);
    q[i] = spec_value(f, code) / double(scale);
    *underflowed += x[i] != 0.f && (code & 0x7f) == 0;
  }
  return q;
}

double max_rel(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::fabs(want[i]));
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]));
  return err / scale;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fp8_linear)

BOOST_AUTO_TEST_CASE(three_gemms_against_the_specification) {
  const int64_t M = 24, K = 40, N = 16;
  std::mt19937 g(7);
  const std::vector<float> x = spread(M * K, g), w = spread(N * K, g), dy = spread(M * N, g, -11), b = spread(N, g);
  auto ops = make_cpu_ops();
  CpuDevice dev(*ops);
  Fp8Recipe recipe(nullptr, nullptr);

  int64_t ux = 0, uw = 0, ud = 0;
  const std::vector<double> qx = reference_cast(x, kE4m3, 448.f, &ux), qw = reference_cast(w, kE4m3, 448.f, &uw),
                            qd = reference_cast(dy, kE5m2, 57344.f, &ud);
  BOOST_TEST_REQUIRE((ux > 0 && uw > 0 && ud > 0));  // the spread reaches below each format's range

  // forward: y = qx qw^T + b
  std::vector<float> y(M * N);
  dev.fp8_matmul_forward(recipe, y.data(), x.data(), w.data(), b.data(), M, K, N);
  std::vector<double> y_ref(M * N), y_plain(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = b[j], p = b[j];
      for (int64_t k = 0; k < K; ++k) s += qx[i * K + k] * qw[j * K + k], p += double(x[i * K + k]) * w[j * K + k];
      y_ref[i * N + j] = s, y_plain[i * N + j] = p;
    }
  BOOST_TEST(max_rel(y, y_ref) < 1e-5);
  BOOST_TEST(max_rel(y, y_plain) > 1e-3);  // FP8's rounding, not fp32's: the casts happened

  // backward: dx = qd qw, dw += qd^T qx, db += column sums of dy (unquantised)
  std::vector<float> dx(M * K), dw(N * K, 1.f), db(N, 1.f);
  dev.fp8_matmul_backward(recipe, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), M, K, N);
  std::vector<double> dx_ref(M * K, 0.0), dw_ref(N * K, 1.0), db_ref(N, 1.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      db_ref[j] += dy[i * N + j];
      for (int64_t k = 0; k < K; ++k) {
        dx_ref[i * K + k] += qd[i * N + j] * qw[j * K + k];
        dw_ref[j * K + k] += qd[i * N + j] * qx[i * K + k];
      }
    }
  BOOST_TEST(max_rel(dx, dx_ref) < 1e-5);
  BOOST_TEST(max_rel(dw, dw_ref) < 1e-5);
  BOOST_TEST(max_rel(db, db_ref) < 1e-6);

  // The statistics: per kind the amax, every element cast, the reference's underflow counts.
  const Fp8Stats st = recipe.take_stats();
  const Fp8KindStats &a = st[0], &wt = st[1], &gr = st[2];
  BOOST_TEST(a.casts == 2);  // forward, and the weight gradient's
  BOOST_TEST(wt.casts == 2);  // forward, and the input gradient's
  BOOST_TEST(gr.casts == 1);
  BOOST_TEST(a.elements == 2 * M * K);
  BOOST_TEST(a.underflowed == 2 * ux);
  BOOST_TEST(wt.underflowed == 2 * uw);
  BOOST_TEST(gr.underflowed == ud);
  BOOST_TEST((a.saturated == 0 && wt.saturated == 0 && gr.saturated == 0));
  float amax = 0.f;
  for (float v : dy) amax = std::max(amax, std::fabs(v));
  BOOST_TEST(gr.amax == amax);
  BOOST_TEST(recipe.take_stats()[0].casts == 0);  // taken
}

// The fused GELUs: forward, gelu_pre is the FP8 GEMM's output and y its GELU; backward (the layer
// after a GELU), the input gradient times gelu'(gelu_pre), gelu_pre then being that GELU's input
// [M, K].
BOOST_AUTO_TEST_CASE(gelu_epilogue) {
  const int64_t M = 8, K = 16, N = 12;
  std::mt19937 g(11);
  const std::vector<float> x = spread(M * K, g), w = spread(N * K, g), dy = spread(M * N, g), pre_in = spread(M * K, g);
  auto ops = make_cpu_ops();
  CpuDevice dev(*ops);
  Fp8Recipe recipe(nullptr, nullptr);
  std::vector<float> y(M * N), pre(M * N), y2(M * N), dx(M * K), dx2(M * K);
  dev.fp8_matmul_forward(recipe, y.data(), x.data(), w.data(), nullptr, M, K, N, pre.data());
  dev.fp8_matmul_forward(recipe, y2.data(), x.data(), w.data(), nullptr, M, K, N);
  BOOST_TEST(pre == y2);
  ops->gelu_forward(y2.data(), pre.data(), y2.size());
  BOOST_TEST(y == y2);
  dev.fp8_matmul_backward(recipe, dx.data(), nullptr, nullptr, dy.data(), x.data(), w.data(), M, K, N, pre_in.data());
  dev.fp8_matmul_backward(recipe, dx2.data(), nullptr, nullptr, dy.data(), x.data(), w.data(), M, K, N);
  ops->gelu_backward(dx2.data(), pre_in.data(), dx2.data(), dx2.size());
  BOOST_TEST(dx == dx2);
}

BOOST_AUTO_TEST_SUITE_END()
