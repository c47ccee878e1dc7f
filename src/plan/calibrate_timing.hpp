// calibrate's timing harness and the kernels it times (calibrate.cpp, calibrate_rates.cpp).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mpitron/ops/ops.hpp"
#include "mpitron/plan/calibrate.hpp"
#include "mpitron/plan/profile.hpp"

namespace mpitron::calib {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

inline double median_of(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
// Seconds of fn appended to t: one untimed call (warm caches, buffers just made), then at least
// min_reps timed ones and as many as fit in `budget` seconds (at most max_reps).
inline void time_into(std::vector<double>& t, const std::function<void()>& fn, double budget, int min_reps, int max_reps) {
  fn();
  const auto start = Clock::now();
  for (int n = 0; n < min_reps || (n < max_reps && since(start) < budget); ++n) {
    auto t0 = Clock::now();
    fn();
    t.push_back(since(t0));
  }
}
// Median seconds of fn over 3 to 25 timed calls in `budget` seconds.
inline double median_time(const std::function<void()>& fn, double budget = 0.08) {
  std::vector<double> t;
  time_into(t, fn, budget, 3, 25);
  return median_of(t);
}

// Seconds per call of fn as a throughput: calls run back to back for `window` seconds, the calls
// done by then over the time the last of them ended (at least one call). calibrate times the ranks
// computing at once with it, and rank 0 alone against them. Not a median of the calls: with more
// ranks than cores the scheduler gives each rank whole time slices, and a kernel shorter than a
// slice mostly runs uninterrupted, so the median call measured a rank that had a core (on 2 cores
// the elementwise set at 8 ranks read 0.56-0.67x the rate of one alone in five calibrations, 4.5-5.4
// cores' worth; the mix at 4 ranks 0.36-0.51x). Nor may a rank that is done wait beside the others:
// MPI's blocking calls spin, on the cores the others need. Every rank computes until the window
// ends, and only then goes on to the next barrier.
inline double window_time(const std::function<void()>& fn, double window) {
  const auto t0 = Clock::now();
  double last = 0;
  int n = 0;
  while (true) {
    fn();
    const double t = since(t0);
    if (t > window) {
      if (n == 0) last = t, n = 1;
      break;
    }
    last = t, ++n;
  }
  return last / n;
}
// Per round i of an alternation alone, together, alone, ..., alone (alone one longer than
// together): the time alone over the time together, alone taken as the mean of the two alone
// times on either side of round i, so that a drift of the machine's speed linear over the rounds
// cancels (calibrate's concurrency ratios).
inline std::vector<double> alternating_ratios(const std::vector<double>& alone, const std::vector<double>& together) {
  std::vector<double> r;
  for (size_t i = 0; i < together.size() && i + 1 < alone.size(); ++i)
    r.push_back(0.5 * (alone[i] + alone[i + 1]) / together[i]);
  return r;
}

// The window of the mix (a GEMM forward and backward and the elementwise set): several calls even
// at 8 ranks per core.
inline double mix_window(bool quick) { return quick ? 0.15 : 0.4; }

// Values in [-0.11, 0.11], as activations and weights are in scale. The offset is taken in signed
// arithmetic: in size_t, 11 of the 23 residues wrapped to 1.8e17, attention's softmax then held
// exp(-87) ~ 1.6e-38 where it should hold 0.01, and P V's products were subnormal: on Intel cores
// (a microcode assist per subnormal operand; AMD's have none) calibrate measured attention at
// 3-7 GFLOP/s where the trainer's runs at 100 and more, and plan over-predicted every step.
inline void fill(std::vector<float>& v, int seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + seed) % 23) - 11) * 0.01f;
}

// One GEMM shape's operands, forward out = a w^T and backward (dinp, dw += ...), in sets used in
// turn. cold: enough sets (kColdBytes in all, at most 256) that each call finds its operands out of
// cache, as the trainer's GEMMs do: a layer's weights and their gradients were last touched a
// micro-batch ago, the backward's saved input a whole forward ago (gpt 4 x 256's block GEMMs in
// the trainer ran 10-15% slower than one set hot in cache on the 2-core AMD EPYC, at 128 and 512
// rows; rotated sets, 1.02-1.25x slower than hot). The rate grid is cold; the mix and the reference
// GEMM keep one set: they are ratios of the same work.
struct Gemm {
  static constexpr double kColdBytes = 64.0 * (1 << 20);
  struct Operands {
    std::vector<float> a, w, out, dout, dinp, dw;
  };
  std::vector<Operands> sets;
  size_t next = 0;
  int64_t M, N, K;
  Gemm(int64_t M_, int64_t N_, int64_t K_, bool cold = false) : M(M_), N(N_), K(K_) {
    const double set_bytes = 4.0 * (2 * M * K + 2 * M * N + 2 * N * K);
    const size_t copies = cold ? static_cast<size_t>(std::clamp(kColdBytes / set_bytes, 1.0, 256.0)) : 1;
    Operands o;
    o.a.resize(M * K), o.w.resize(N * K), o.out.resize(M * N), o.dout.resize(M * N), o.dinp.resize(M * K), o.dw.resize(N * K);
    fill(o.a, 1), fill(o.w, 2), fill(o.dout, 3);
    sets.assign(copies, o);  // copies of one filled set: the addresses, not the values, keep them out of cache
  }
  Operands& take() {
    Operands& o = sets[next];
    next = (next + 1) % sets.size();
    return o;
  }
  void fwd(Ops& ops) {
    Operands& o = take();
    ops.matmul_forward(o.out.data(), o.a.data(), o.w.data(), nullptr, M, K, N);
  }
  void bwd(Ops& ops) {
    Operands& o = take();
    ops.matmul_backward(o.dinp.data(), o.dw.data(), nullptr, o.dout.data(), o.a.data(), o.w.data(), M, K, N);
  }
  // bf16 GEMMs: the weights registered as the trainer's are (rounded once per change).
  void register_weights(Ops& ops) {
    for (Operands& o : sets) ops.register_weights(o.w.data(), o.w.size());
  }
  void unregister_weights(Ops& ops) {
    for (Operands& o : sets) ops.unregister_weights(o.w.data());
  }
  double flops() const { return 2.0 * M * N * K; }
};

// The elementwise kernels on rows x C (and rows x 4C for GELU): returns {seconds, bytes}.
struct Stream {
  int64_t rows, C;
  std::vector<float> x, y, dy, dx, mean, rstd, g, b, dg, db, h, dh;
  Stream(int64_t r, int64_t c)
      : rows(r), C(c), x(r * c), y(r * c), dy(r * c), dx(r * c), mean(r), rstd(r), g(c, 1.f), b(c), dg(c), db(c),
        h(r * c * 4), dh(r * c * 4) {
    fill(x, 4), fill(dy, 5), fill(h, 6);
  }
  void run(Ops& ops) {
    ops.layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), rows, C);
    ops.layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), g.data(), mean.data(), rstd.data(), rows, C);
    ops.gelu_forward(dh.data(), h.data(), h.size());
    ops.gelu_backward(dh.data(), h.data(), dh.data(), h.size());
    ops.residual_forward(y.data(), x.data(), dy.data(), x.size());
  }
  // Bytes each kernel reads and writes once: layernorm forward 2 (x, y), backward 4 (x, dy, dx
  // read and written), GELU forward 2 (of 4C), backward 3 (of 4C), residual 3.
  double bytes() const { return 4.0 * (rows * C * (2 + 4 + 3) + rows * C * 4 * (2 + 3)); }
};

// The optimizer's kernels (FlatOps) on n floats per array, larger than the caches as a model's
// parameters and moments are: AdamW over p, g, m, v, and the one-pass ones the step adds (the
// gradient's sum of squares, zeroing it, a reduced part added into the shard).
struct Flat {
  std::vector<float> p, g, m, v, acc;
  int step = 0;
  explicit Flat(size_t n) : p(n), g(n), m(n), v(n), acc(n) { fill(p, 9), fill(g, 10); }
  void adamw(Ops& ops) {
    ops.adamw(p.data(), nullptr, g.data(), 1.f, m.data(), v.data(), p.size(), 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
              ++step % 1000 + 1);
  }
  void passes(Ops& ops) {
    volatile double s = ops.sum_squares(g.data(), g.size());
    (void)s;
    ops.zero(acc.data(), acc.size());
    ops.axpy(acc.data(), 0.5f, g.data(), acc.size());
  }
  double adamw_bytes() const { return MachineProfile::Rates::kAdamwBytesPerParam * p.size(); }
  double passes_bytes() const { return 4.0 * (1 + 1 + 3) * p.size(); }  // read g; write acc; read two, write one
};

// The mix timed for concurrency and overlap: one GEMM forward + backward and the elementwise set.
struct Mix {
  Gemm g;
  Stream s;
  explicit Mix(bool quick) : g(quick ? 256 : 512, 512, 512), s(quick ? 256 : 1024, 256) {}
};

struct Progress {
  bool on;
  Clock::time_point t0 = Clock::now();
  void say(const std::string& s) const {
    if (!on) return;
    std::printf("calibrate [%5.1f s] %s\n", since(t0), s.c_str());
    std::fflush(stdout);
  }
};

// The elementwise probes' activations [rows, C] (calibrate_rates.cpp).
std::vector<std::pair<int64_t, int64_t>> stream_shapes(bool quick);
// The profile's grid axes: GEMM (m, n, k), attention lengths, elementwise sizes.
void set_axes(MachineProfile& p, bool quick);
// One rank alone at each of `threads` OpenMP thread counts, interleaved (calibrate_rates.cpp).
// The passes' drift warnings (pass_drift_warning) go to `warnings`.
std::vector<MachineProfile::Rates> measure_rates(const MachineProfile& p, Ops& ops, const CalibrateOptions& o,
                                                 const Progress& pr, const std::vector<int>& threads,
                                                 std::vector<std::string>& warnings);

}  // namespace mpitron::calib
