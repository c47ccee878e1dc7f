// Finite-difference checks of every CPU kernel's backward (fp32 kernels, loss sums in double).
// Loss = <out, R> for a fixed random R, so d loss / d out = R. Error norm per tensor:
// max|numeric - analytic| / max|analytic| over the checked entries; tolerance 5e-3 (central
// differences, eps 1e-2: fp32 rounding of the loss ~1e-5 relative / 2eps, truncation O(eps^2)).
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <vector>

#include "grad_check.hpp"
#include "mpitron/core/dtype.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/ops/ops.hpp"

using namespace mpitron;
using namespace mpitron::testing;

namespace {
constexpr double kTol = 5e-3;
Ops& ops() {
  static auto o = make_cpu_ops();
  return *o;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(ops_grad)

BOOST_AUTO_TEST_CASE(matmul) {
  const int M = 13, K = 24, N = 17;
  auto x = randn(M * K, 1), w = randn(N * K, 2, 0.3f), b = randn(N, 3), R = randn(M * N, 4);
  std::vector<float> out(M * N), dx(M * K, 0.f), dw(N * K, 0.f), db(N, 0.f);
  auto loss = [&] {
    ops().matmul_forward(out.data(), x.data(), w.data(), b.data(), M, K, N);
    return dot(out.data(), R.data(), out.size());
  };
  loss();
  // forward against a double reference
  double err = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = b[j];
      for (int k = 0; k < K; ++k) s += static_cast<double>(x[i * K + k]) * w[j * K + k];
      err = std::max(err, std::fabs(s - out[i * N + j]));
    }
  BOOST_TEST(err < 1e-5);
  ops().matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), M, K, N);
  BOOST_TEST(fd_rel_error(x.data(), x.size(), dx.data(), loss) < kTol);
  BOOST_TEST(fd_rel_error(w.data(), w.size(), dw.data(), loss) < kTol);
  BOOST_TEST(fd_rel_error(b.data(), b.size(), db.data(), loss) < kTol);
  // accumulate_dinp adds; dweight accumulates
  std::vector<float> dx2 = dx, dw2 = dw;
  ops().matmul_backward(dx2.data(), dw2.data(), nullptr, R.data(), x.data(), w.data(), M, K, N, true);
  for (size_t i = 0; i < dx.size(); ++i) BOOST_TEST(std::fabs(dx2[i] - 2 * dx[i]) < 1e-5);
  for (size_t i = 0; i < dw.size(); ++i) BOOST_TEST(std::fabs(dw2[i] - 2 * dw[i]) < 1e-5);
}

BOOST_AUTO_TEST_CASE(layernorm) {
  const int rows = 7, C = 40;
  auto x = randn(rows * C, 5), w = randn(C, 6), b = randn(C, 7), R = randn(rows * C, 8);
  std::vector<float> out(rows * C), mean(rows), rstd(rows), dx(rows * C, 0.f), dw(C, 0.f), db(C, 0.f);
  auto loss = [&] {
    ops().layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C);
    return dot(out.data(), R.data(), out.size());
  };
  loss();
  ops().layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(),
                           rows, C);
  BOOST_TEST(fd_rel_error(x.data(), x.size(), dx.data(), loss) < kTol);
  BOOST_TEST(fd_rel_error(w.data(), w.size(), dw.data(), loss) < kTol);
  BOOST_TEST(fd_rel_error(b.data(), b.size(), db.data(), loss) < kTol);
}

BOOST_AUTO_TEST_CASE(gelu) {
  const size_t n = 301;
  auto x = randn(n, 9, 2.f), R = randn(n, 10);
  std::vector<float> out(n), dx(n);
  auto loss = [&] {
    ops().gelu_forward(out.data(), x.data(), n);
    return dot(out.data(), R.data(), n);
  };
  loss();
  for (size_t i = 0; i < n; ++i) {  // forward against the libm formula
    double v = x[i], ref = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    BOOST_TEST(std::fabs(out[i] - ref) < 1e-6 * (1 + std::fabs(ref)));
  }
  ops().gelu_backward(dx.data(), x.data(), R.data(), n);
  BOOST_TEST(fd_rel_error(x.data(), n, dx.data(), loss, 1e-2f, n) < kTol);
}

BOOST_AUTO_TEST_CASE(attention) {
  for (int T : {5, 50}) {  // below and above one row block / micro-tile; tails in every dim
    const int B = 2, H = 3, hd = 20, C = H * hd;
    auto qkv = randn(B * T * 3 * C, 11 + T), R = randn(B * T * C, 12);
    std::vector<float> out(B * T * C), att(B * H * T * T), dqkv(qkv.size());
    auto loss = [&] {
      ops().attention_forward(out.data(), att.data(), qkv.data(), B, T, H, hd);
      return dot(out.data(), R.data(), out.size());
    };
    loss();
    // forward against a naive double reference for one (b, h)
    {
      int b = 1, h = 2;
      double err = 0;
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double mx = -1e30, z = 0;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int e = 0; e < hd; ++e)
            d += static_cast<double>(qkv[(b * T + t) * 3 * C + h * hd + e]) * qkv[(b * T + j) * 3 * C + C + h * hd + e];
          s[j] = d / std::sqrt(hd);
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j <= t; ++j) z += (s[j] = std::exp(s[j] - mx));
        for (int e = 0; e < hd; ++e) {
          double o = 0;
          for (int j = 0; j <= t; ++j) o += s[j] / z * qkv[(b * T + j) * 3 * C + 2 * C + h * hd + e];
          err = std::max(err, std::fabs(o - out[(b * T + t) * C + h * hd + e]));
        }
      }
      BOOST_TEST(err < 1e-5);
    }
    ops().attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, H, hd);
    BOOST_TEST(fd_rel_error(qkv.data(), qkv.size(), dqkv.data(), loss, 1e-2f, 60) < kTol);
  }
}

// Grouped-query attention (LLaMA): H query heads over KV key/value heads, qkv = [q | k | v].
BOOST_AUTO_TEST_CASE(attention_gqa) {
  for (int KV : {2, 1}) {  // groups of 2 and multi-query attention
    const int B = 2, T = 50, H = 4, hd = 16, C = H * hd, C3 = (H + 2 * KV) * hd, g = H / KV;
    auto qkv = randn(B * T * C3, 40 + KV), R = randn(B * T * C, 41);
    std::vector<float> out(B * T * C), att(B * H * T * T), dqkv(qkv.size());
    auto loss = [&] {
      ops().attention_forward(out.data(), att.data(), qkv.data(), B, T, H, hd, KV);
      return dot(out.data(), R.data(), out.size());
    };
    loss();
    double err = 0;  // every (b, h) against a naive double reference
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t) {
          const float* q = qkv.data() + (b * T + t) * C3 + h * hd;
          std::vector<double> s(t + 1);
          double mx = -1e30, z = 0;
          for (int j = 0; j <= t; ++j) {
            const float* k = qkv.data() + (b * T + j) * C3 + C + (h / g) * hd;
            double d = 0;
            for (int e = 0; e < hd; ++e) d += static_cast<double>(q[e]) * k[e];
            mx = std::max(mx, s[j] = d / std::sqrt(hd));
          }
          for (int j = 0; j <= t; ++j) z += (s[j] = std::exp(s[j] - mx));
          for (int e = 0; e < hd; ++e) {
            double o = 0;
            for (int j = 0; j <= t; ++j) o += s[j] / z * qkv[(b * T + j) * C3 + C + KV * hd + (h / g) * hd + e];
            err = std::max(err, std::fabs(o - out[(b * T + t) * C + h * hd + e]));
          }
        }
    BOOST_TEST(err < 1e-5);
    ops().attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, H, hd, KV);
    BOOST_TEST(fd_rel_error(qkv.data(), qkv.size(), dqkv.data(), loss, 1e-2f, 90) < kTol);
  }
  // KV = H is the GPT-2 kernel: the same outputs and gradients as kv_heads = 0.
  const int B = 1, T = 20, H = 3, hd = 8, C = H * hd;
  auto qkv = randn(B * T * 3 * C, 45), R = randn(B * T * C, 46);
  std::vector<float> o1(B * T * C), o2(o1.size()), att(B * H * T * T), d1(qkv.size()), d2(qkv.size());
  ops().attention_forward(o1.data(), att.data(), qkv.data(), B, T, H, hd);
  ops().attention_backward(d1.data(), R.data(), qkv.data(), att.data(), B, T, H, hd);
  ops().attention_forward(o2.data(), att.data(), qkv.data(), B, T, H, hd, H);
  ops().attention_backward(d2.data(), R.data(), qkv.data(), att.data(), B, T, H, hd, H);
  BOOST_TEST(o1 == o2);
  BOOST_TEST(d1 == d2);
  BOOST_CHECK_THROW(ops().attention_forward(o2.data(), att.data(), qkv.data(), B, T, H, hd, 2), Error);
}

BOOST_AUTO_TEST_CASE(rmsnorm) {
  const int rows = 7, C = 40;
  const float eps = 1e-6f;
  auto x = randn(rows * C, 50), w = randn(C, 51), R = randn(rows * C, 52);
  std::vector<float> out(rows * C), rstd(rows), dx(rows * C, 0.f), dw(C, 0.f);
  auto loss = [&] {
    ops().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), rows, C, eps);
    return dot(out.data(), R.data(), out.size());
  };
  loss();
  double err = 0;
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < C; ++i) ss += static_cast<double>(x[r * C + i]) * x[r * C + i];
    const double rs = 1 / std::sqrt(ss / C + eps);
    for (int i = 0; i < C; ++i) err = std::max(err, std::fabs(x[r * C + i] * rs * w[i] - out[r * C + i]));
  }
  BOOST_TEST(err < 1e-5);
  ops().rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), rows, C);
  BOOST_TEST(fd_rel_error(x.data(), x.size(), dx.data(), loss) < kTol);
  BOOST_TEST(fd_rel_error(w.data(), w.size(), dw.data(), loss) < kTol);
}

BOOST_AUTO_TEST_CASE(rope) {
  // Two of three heads rotated in rows of stride 3 hd (the q or k part of a fused qkv row): plain
  // RoPE's table, and a scaled one (frequencies of no formula, cos and sin times 1.25 as YaRN's).
  const int B = 2, T = 9, nh = 2, hd = 8, stride = 3 * hd, pos0 = 5;
  RopeFreqs scaled{{0.9, 0.03, 0.2, 1e-3}, 1.25};
  for (const RopeFreqs& f : {rope_freqs_plain(10000.0, hd), scaled}) {
    auto x0 = randn(B * T * stride, 60), R = randn(B * T * stride, 61);
    std::vector<float> x = x0;
    ops().rope(x.data(), B, T, nh, hd, stride, f, pos0, false);
    double err = 0;  // Meta's reference: pairs (2i, 2i+1) as complex numbers times scale exp(i pos inv_freq[i])
    for (int bt = 0; bt < B * T; ++bt)
      for (int h = 0; h < 3; ++h)
        for (int i = 0; i < hd / 2; ++i) {
          const int at = bt * stride + h * hd + 2 * i;
          const double a = (pos0 + bt % T) * f.inv_freq[i], re = x0[at], im = x0[at + 1];
          const double c = f.scale * std::cos(a), s = f.scale * std::sin(a);
          const double want_re = h < nh ? re * c - im * s : re;
          const double want_im = h < nh ? re * s + im * c : im;
          err = std::max({err, std::fabs(want_re - x[at]), std::fabs(want_im - x[at + 1])});
        }
    BOOST_TEST(err < 1e-5);
    // The backward is the transpose: applied to the output it gives scale^2 times the input on the
    // rotated heads (the input itself without a scale), and to R it is the gradient of <rope(x), R>
    // (checked by finite differences).
    ops().rope(x.data(), B, T, nh, hd, stride, f, pos0, true);
    double back = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const bool rotated = static_cast<int>(i % stride) < nh * hd;
      const double want = x0[i] * (rotated ? f.scale * f.scale : 1.0);
      back = std::max(back, std::fabs(x[i] - want));
    }
    BOOST_TEST(back < 1e-5);
    x = x0;
    std::vector<float> dx = R, y(x.size());
    ops().rope(dx.data(), B, T, nh, hd, stride, f, pos0, true);
    auto loss = [&] {
      y = x;
      ops().rope(y.data(), B, T, nh, hd, stride, f, pos0, false);
      return dot(y.data(), R.data(), y.size());
    };
    BOOST_TEST(fd_rel_error(x.data(), x.size(), dx.data(), loss, 1e-2f, 80) < kTol);
  }
}

BOOST_AUTO_TEST_CASE(swiglu) {
  const int rows = 5, F = 37;
  auto gu = randn(rows * 2 * F, 70, 2.f), R = randn(rows * F, 71);
  std::vector<float> out(rows * F), dgu(gu.size());
  auto loss = [&] {
    ops().swiglu_forward(out.data(), gu.data(), rows, F);
    return dot(out.data(), R.data(), out.size());
  };
  loss();
  double err = 0;
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < F; ++i) {
      const double g = gu[r * 2 * F + i], u = gu[r * 2 * F + F + i];
      err = std::max(err, std::fabs(g / (1 + std::exp(-g)) * u - out[r * F + i]));
    }
  BOOST_TEST(err < 1e-5);
  ops().swiglu_backward(dgu.data(), gu.data(), R.data(), rows, F);
  BOOST_TEST(fd_rel_error(gu.data(), gu.size(), dgu.data(), loss, 1e-2f, 100) < kTol);
}

BOOST_AUTO_TEST_CASE(embedding) {
  const int B = 2, T = 5, C = 24, V = 11;
  auto wte = randn(V * C, 13), wpe = randn(T * C, 14), R = randn(B * T * C, 15);
  std::vector<int32_t> tok = {3, 3, 0, 10, 7, 3, 1, 2, 10, 3};
  std::vector<float> out(B * T * C), dwte(V * C, 0.f), dwpe(T * C, 0.f);
  auto loss = [&] {
    ops().embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, 0, V);
    return dot(out.data(), R.data(), out.size());
  };
  loss();
  ops().embedding_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C, 0, V);
  BOOST_TEST(fd_rel_error(wte.data(), wte.size(), dwte.data(), loss, 1e-2f, wte.size()) < kTol);
  BOOST_TEST(fd_rel_error(wpe.data(), wpe.size(), dwpe.data(), loss, 1e-2f, wpe.size()) < kTol);
  // vocab-parallel shard [4, 11): rows outside contribute nothing
  std::vector<float> out2(B * T * C);
  ops().embedding_forward(out2.data(), tok.data(), wte.data() + 4 * C, nullptr, B, T, C, 4, V);
  BOOST_TEST(out2[0] == 0.f);                        // token 3 not in the shard
  BOOST_TEST(out2[3 * C + 1] == wte[10 * C + 1]);   // token 10 is
}

BOOST_AUTO_TEST_CASE(crossentropy) {
  const int rows = 6, Vp = 64, V = 50;
  auto logits = randn(rows * Vp, 16, 3.f);
  std::vector<int32_t> tg = {0, 49, -1, 7, 23, 7};
  std::vector<float> losses(rows), lse(rows), d(rows * Vp);
  const float scale = 0.25f;
  auto loss = [&] {
    ops().crossentropy_forward(losses.data(), lse.data(), logits.data(), tg.data(), rows, Vp, V);
    double s = 0;
    for (float l : losses) s += l;
    return s * scale;
  };
  loss();
  // forward against a double reference; padded columns never count
  for (int r = 0; r < rows; ++r) {
    double mx = -1e30, z = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, static_cast<double>(logits[r * Vp + j]));
    for (int j = 0; j < V; ++j) z += std::exp(logits[r * Vp + j] - mx);
    double ref = tg[r] < 0 ? 0.0 : mx + std::log(z) - logits[r * Vp + tg[r]];
    BOOST_TEST(std::fabs(losses[r] - ref) < 1e-5);
  }
  d = logits;
  ops().crossentropy_backward(d.data(), lse.data(), tg.data(), rows, Vp, V, scale);
  for (int j = V; j < Vp; ++j) BOOST_TEST(d[j] == 0.f);
  for (int j = 0; j < Vp; ++j) BOOST_TEST(d[2 * Vp + j] == 0.f);  // ignored row
  BOOST_TEST(fd_rel_error(logits.data(), logits.size(), d.data(), loss, 1e-2f, 200) < kTol);
}

BOOST_AUTO_TEST_CASE(residual_scale_axpy) {
  auto a = randn(100, 17), b = randn(100, 18);
  std::vector<float> o(100);
  ops().residual_forward(o.data(), a.data(), b.data(), 100);
  for (int i = 0; i < 100; ++i) BOOST_TEST(o[i] == a[i] + b[i]);
  ops().add_inplace(o.data(), a.data(), 100);
  ops().scale_inplace(o.data(), 0.5f, 100);
  for (int i = 0; i < 100; ++i) BOOST_TEST(o[i] == (a[i] + b[i] + a[i]) * 0.5f);
  std::vector<float> y = a;
  ops().axpy(y.data(), 0.25f, b.data(), 100);
  for (int i = 0; i < 100; ++i) BOOST_TEST(y[i] == a[i] + 0.25f * b[i]);
}

BOOST_AUTO_TEST_CASE(adamw_matches_double_reference) {
  const size_t n = 1000;
  auto p = randn(n, 19), g0 = randn(n, 20);
  std::vector<float> m(n, 0.f), v(n, 0.f);
  std::vector<double> pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
  const double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  for (int step = 1; step <= 3; ++step) {
    auto g = randn(n, 20 + step);
    const float scale = step == 2 ? 0.5f : 1.f;  // a clipping step: the gradients are used times scale
    ops().adamw(p.data(), nullptr, g.data(), scale, m.data(), v.data(), n, lr, b1, b2, eps, wd, step);
    for (auto& x : g) x *= scale;
    for (size_t i = 0; i < n; ++i) {
      pd[i] *= 1 - lr * wd;
      md[i] = b1 * md[i] + (1 - b1) * g[i];
      vd[i] = b2 * vd[i] + (1 - b2) * g[i] * g[i];
      double mh = md[i] / (1 - std::pow(b1, step)), vh = vd[i] / (1 - std::pow(b2, step));
      pd[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  double err = 0;
  for (size_t i = 0; i < n; ++i) err = std::max(err, std::fabs(pd[i] - p[i]));
  BOOST_TEST(err < 1e-6);
}

BOOST_AUTO_TEST_CASE(sum_squares) {
  auto x = randn(100003, 21);
  double ref = 0;
  for (float f : x) ref += static_cast<double>(f) * f;
  BOOST_TEST(std::fabs(ops().sum_squares(x.data(), x.size()) - ref) < 1e-9 * ref);
}

// train.precision = bf16 (Ops::set_gemm_bf16): every GEMM of matmul_forward / _backward equals the
// fp32 GEMM of the bf16-rounded inputs (fp32 accumulation; only the summation order differs),
// bias and accumulate included; and it differs from the unrounded fp32 result (rounding happens).
BOOST_AUTO_TEST_CASE(bf16_gemm_is_fp32_gemm_of_rounded_inputs) {
  auto ops = make_cpu_ops();
  const int64_t M = 37, K = 64, N = 48;
  auto rnd = [](size_t n, uint64_t seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(normal_at(seed, 1, i));
    return v;
  };
  auto rounded = [](std::vector<float> v) {
    for (float& x : v) x = to_f32(to_bf16(x));
    return v;
  };
  const std::vector<float> x = rnd(M * K, 1), w = rnd(N * K, 2), b = rnd(N, 3), dy = rnd(M * N, 4);
  auto rel = [](const std::vector<float>& a, const std::vector<float>& r) {
    double e = 0, m = 1e-30;
    for (size_t i = 0; i < a.size(); ++i) e = std::max(e, double(std::fabs(a[i] - r[i]))), m = std::max(m, double(std::fabs(r[i])));
    return e / m;
  };
  std::vector<float> y16(M * N), yref(M * N), y32(M * N), dx16(M * K, 0.5f), dxref(M * K, 0.5f), dw16(N * K, 0.25f),
      dwref(N * K, 0.25f);
  if (!ops->set_gemm_bf16(true)) {  // an AVX2-only CPU: oneDNN has no bf16 matmul
    BOOST_TEST_MESSAGE("skipped: this CPU has no bf16 GEMM in oneDNN");
    return;
  }
  BOOST_TEST(ops->gemm_bf16());
  ops->matmul_forward(y16.data(), x.data(), w.data(), b.data(), M, K, N);
  ops->matmul_backward(dx16.data(), dw16.data(), nullptr, dy.data(), x.data(), w.data(), M, K, N, true);
  ops->set_gemm_bf16(false);
  const std::vector<float> xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
  ops->matmul_forward(yref.data(), xr.data(), wr.data(), b.data(), M, K, N);
  ops->matmul_backward(dxref.data(), dwref.data(), nullptr, dyr.data(), xr.data(), wr.data(), M, K, N, true);
  ops->matmul_forward(y32.data(), x.data(), w.data(), b.data(), M, K, N);
  BOOST_TEST(rel(y16, yref) < 1e-5);
  BOOST_TEST(rel(dx16, dxref) < 1e-5);
  BOOST_TEST(rel(dw16, dwref) < 1e-5);
  BOOST_TEST(rel(y16, y32) > 1e-4);  // the inputs were rounded
}

BOOST_AUTO_TEST_SUITE_END()

// bf16 GEMMs with registered weights (Ops::register_weights): the weight is rounded into a bf16
// copy (2 bytes per float under Mem::params) on first use and read from there until
// weights_changed; the result stays the fp32 GEMM of the rounded inputs, and a changed weight is
// rounded again (a stale copy would give the old weight's product).
BOOST_AUTO_TEST_CASE(bf16_registered_weights_rounded_once_per_change) {
  auto ops = make_cpu_ops();
  const int64_t M = 19, K = 32, N = 24;
  std::vector<float> x(M * K), w(N * K + 40);  // w: a flat buffer, the weight at offset 40
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(normal_at(5, 1, i));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(normal_at(6, 1, i));
  auto reference = [&](const std::vector<float>& wv) {  // fp32 GEMM of the rounded inputs
    std::vector<float> y(M * N, 0.f);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += double(to_f32(to_bf16(x[m * K + k]))) * to_f32(to_bf16(wv[40 + n * K + k]));
        y[m * N + n] = static_cast<float>(s);
      }
    return y;
  };
  auto err = [](const std::vector<float>& a, const std::vector<float>& r) {
    double e = 0;
    for (size_t i = 0; i < a.size(); ++i) e = std::max(e, double(std::fabs(a[i] - r[i])) / (1 + std::fabs(r[i])));
    return e;
  };
  const int64_t before = MemTracker::host().stats().of(Mem::params);
  ops->register_weights(w.data(), w.size());
  BOOST_TEST(MemTracker::host().stats().of(Mem::params) == before);  // fp32 mode: no copy
  if (!ops->set_gemm_bf16(true)) {  // an AVX2-only CPU: oneDNN has no bf16 matmul
    BOOST_TEST_MESSAGE("skipped: this CPU has no bf16 GEMM in oneDNN");
    return;
  }
  BOOST_TEST(MemTracker::host().stats().of(Mem::params) == before + int64_t(2 * w.size()));
  std::vector<float> y(M * N);
  ops->matmul_forward(y.data(), x.data(), w.data() + 40, nullptr, M, K, N);
  BOOST_TEST(err(y, reference(w)) < 1e-5);
  for (float& v : w) v = -2.f * v + 0.25f;  // an optimizer step
  ops->weights_changed(w.data());
  ops->matmul_forward(y.data(), x.data(), w.data() + 40, nullptr, M, K, N);
  BOOST_TEST(err(y, reference(w)) < 1e-5);
  std::vector<float> dx(M * K), dxref(M * K);  // the backward reads the same copy
  ops->matmul_backward(dx.data(), nullptr, nullptr, y.data(), x.data(), w.data() + 40, M, K, N);
  ops->set_gemm_bf16(false);
  std::vector<float> wr(w.size()), yr(M * N);
  for (size_t i = 0; i < w.size(); ++i) wr[i] = to_f32(to_bf16(w[i]));
  for (size_t i = 0; i < y.size(); ++i) yr[i] = to_f32(to_bf16(y[i]));
  ops->matmul_backward(dxref.data(), nullptr, nullptr, yr.data(), x.data(), wr.data() + 40, M, K, N);
  BOOST_TEST(err(dx, dxref) < 1e-5);
  BOOST_TEST(MemTracker::host().stats().of(Mem::params) == before);  // fp32 again: the copy is freed
  ops->unregister_weights(w.data());
}
