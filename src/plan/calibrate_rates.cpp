// `mpitron calibrate`'s compute rates: one rank alone, the GEMM grid, attention and the
// elementwise kernels at each thread count (calibrate_timing.hpp has the harness).
#include <fmt/format.h>
#include <omp.h>

#include <array>

#include "calibrate_timing.hpp"

namespace mpitron::calib {
namespace {

// The GEMM grid's passes and each shape's time budget over all of them (see measure_rates): per
// pass at least one timed call, at most 25 / kGridPasses.
constexpr int kGridPasses = 3;
constexpr double kGridBudget = 0.08;

}  // namespace

// The elementwise probes' activations [rows, C]: from cache-resident (a small model's micro-batch,
// which the kernels read from cache right after the GEMM that wrote it) to larger than the caches.
std::vector<std::pair<int64_t, int64_t>> stream_shapes(bool quick) {
  return {{128, 256}, {1024, 256}, {quick ? 1024 : 4096, 1024}};
}

// m reaches down to 32 rows: a MoE's experts each run a share of a micro-batch's tokens (64 rows
// per expert at 128 tokens, top 2 of 4), where a GEMM runs well below its rate at 128 rows.
void set_axes(MachineProfile& p, bool quick) {
  p.gemm_m = quick ? std::vector<double>{128, 512} : std::vector<double>{32, 128, 512, 2048};
  p.gemm_n = p.gemm_k = quick ? std::vector<double>{64, 512} : std::vector<double>{64, 256, 1024, 4096};
  p.attn_hd = 64;
  p.attn_t = quick ? std::vector<double>{64, 256} : std::vector<double>{64, 128, 256, 512, 1024};
  p.stream_bytes.clear();
  for (const auto& [rows, C] : stream_shapes(quick)) p.stream_bytes.push_back(4.0 * rows * C);
}

// One timed item: its work per call (FLOPs, or bytes for the elementwise kernels) and its seconds
// per call, appended pass by pass; its rate (GFLOP/s, GB/s) is the work over the median time.
struct Timed {
  double work = 0;
  std::vector<double> seconds;
  std::vector<size_t> pass_end;  // seconds.size() at the end of each pass
  double rate() const { return work / median_of(seconds) / 1e9; }
  std::vector<std::vector<double>> by_pass() const {
    std::vector<std::vector<double>> r;
    for (size_t p = 0, from = 0; p < pass_end.size(); from = pass_end[p++])
      r.emplace_back(seconds.begin() + from, seconds.begin() + pass_end[p]);
    return r;
  }
};

// Samples of one rank alone at one OpenMP thread count.
struct RateSamples {
  int threads = 1;
  std::array<std::vector<Timed>, 2> gemm_fwd, gemm_bwd;  // [fp32, bf16][grid cell]
  std::vector<Timed> attn_fwd, attn_bwd, stream;         // per attn_t, per stream shape
  Timed adamw, flat;                                     // the optimizer's kernels
  template <class F>
  void each(F f) {
    for (auto* v : {&gemm_fwd[0], &gemm_fwd[1], &gemm_bwd[0], &gemm_bwd[1], &attn_fwd, &attn_bwd, &stream})
      for (Timed& t : *v) f(t);
    f(adamw), f(flat);
  }
  void end_pass() {
    each([](Timed& t) { t.pass_end.push_back(t.seconds.size()); });
  }
  // The passes' speeds relative to all of them (relative_pass_speeds), over every item timed.
  std::vector<double> pass_speeds() {
    std::vector<std::vector<std::vector<double>>> seconds;
    each([&](Timed& t) { seconds.push_back(t.by_pass()); });
    return relative_pass_speeds(seconds);
  }
};

// One pass of the grids at the current OpenMP threads: each GEMM cell, attention length and
// elementwise shape timed for its share of the budget (at least one timed call).
void sample_rates(const MachineProfile& p, Ops& ops, bool bf16, bool quick, RateSamples& s) {
  const double budget = kGridBudget / kGridPasses;
  const int max_reps = 25 / kGridPasses;
  const size_t cells = p.gemm_m.size() * p.gemm_n.size() * p.gemm_k.size();
  for (int prec = 0; prec < (bf16 ? 2 : 1); ++prec) {
    ops.set_gemm_bf16(prec == 1);
    s.gemm_fwd[prec].resize(cells), s.gemm_bwd[prec].resize(cells);
    size_t cell = 0;
    for (double m : p.gemm_m)
      for (double n : p.gemm_n)
        for (double k : p.gemm_k) {
          Gemm g(static_cast<int64_t>(m), static_cast<int64_t>(n), static_cast<int64_t>(k), /*cold=*/true);
          if (prec) g.register_weights(ops);
          s.gemm_fwd[prec][cell].work = g.flops();
          s.gemm_bwd[prec][cell].work = 2 * g.flops();  // the two backward GEMMs
          time_into(s.gemm_fwd[prec][cell].seconds, [&] { g.fwd(ops); }, budget, 1, max_reps);
          time_into(s.gemm_bwd[prec][cell].seconds, [&] { g.bwd(ops); }, budget, 1, max_reps);
          if (prec) g.unregister_weights(ops);
          ++cell;
        }
  }
  ops.set_gemm_bf16(false);
  s.attn_fwd.resize(p.attn_t.size()), s.attn_bwd.resize(p.attn_t.size());
  for (size_t i = 0; i < p.attn_t.size(); ++i) {
    const int T = static_cast<int>(p.attn_t[i]), hd = 64, H = std::max(2, 4096 / T * 2);
    std::vector<float> qkv(int64_t{T} * 3 * H * hd), out(int64_t{T} * H * hd), att(int64_t{H} * T * T),
        dout(out.size()), dqkv(qkv.size());
    fill(qkv, 7), fill(dout, 8);
    s.attn_fwd[i].work = 4.0 * H * double(T) * T * hd;
    s.attn_bwd[i].work = 2 * s.attn_fwd[i].work;
    time_into(s.attn_fwd[i].seconds, [&] { ops.attention_forward(out.data(), att.data(), qkv.data(), 1, T, H, hd); },
              budget, 1, max_reps);
    time_into(s.attn_bwd[i].seconds,
              [&] { ops.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), 1, T, H, hd); }, budget, 1,
              max_reps);
  }
  const auto shapes = stream_shapes(quick);
  s.stream.resize(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    Stream st(shapes[i].first, shapes[i].second);
    s.stream[i].work = st.bytes();
    time_into(s.stream[i].seconds, [&] { st.run(ops); }, budget, 1, max_reps);
  }
  // 4 Mi floats an array (16 MiB; AdamW's four 64 MiB), with --quick too: out of cache, as a
  // model's parameters and moments are (at 1 Mi the 2-core AMD EPYC's AdamW read 100 GB/s, not 67).
  Flat f(size_t{4} << 20);
  s.adamw.work = f.adamw_bytes(), s.flat.work = f.passes_bytes();
  time_into(s.adamw.seconds, [&] { f.adamw(ops); }, budget, 1, max_reps);
  time_into(s.flat.seconds, [&] { f.passes(ops); }, budget, 1, max_reps);
}

// The rates of one thread count from all its passes' samples (each the median over them), in the
// grid's order, as the passes walked it.
MachineProfile::Rates rates_of(const MachineProfile& p, const RateSamples& s, const Progress& pr) {
  MachineProfile::Rates rt;
  rt.threads = s.threads;
  auto rates = [](const std::vector<Timed>& v) {
    std::vector<double> r;
    for (const Timed& t : v) r.push_back(t.rate());
    return r;
  };
  for (int prec = 0; prec < 2; ++prec) {
    if (s.gemm_fwd[prec].empty()) continue;
    auto& fw = prec ? rt.gemm_fwd_bf16 : rt.gemm_fwd_f32;
    auto& bw = prec ? rt.gemm_bwd_bf16 : rt.gemm_bwd_f32;
    fw = rates(s.gemm_fwd[prec]);
    bw = rates(s.gemm_bwd[prec]);
    pr.say(fmt::format("{} thread(s): GEMM {} over {} shapes: {:.1f} .. {:.1f} GFLOP/s forward", rt.threads, prec ? "bf16" : "fp32",
                       fw.size(), *std::min_element(fw.begin(), fw.end()), *std::max_element(fw.begin(), fw.end())));
  }
  rt.attn_fwd = rates(s.attn_fwd);
  rt.attn_bwd = rates(s.attn_bwd);
  rt.stream_gbs_by_size = rates(s.stream);
  rt.stream_gbs = rt.stream_gbs_by_size.back();
  rt.adamw_gbs = s.adamw.rate();
  rt.flat_gbs = s.flat.rate();
  std::string by_size;
  for (size_t i = 0; i < p.stream_bytes.size(); ++i)
    by_size += fmt::format("{}{:.1f} at {:g} KiB", i ? ", " : "", rt.stream_gbs_by_size[i], p.stream_bytes[i] / 1024);
  pr.say(fmt::format("{} thread(s): attention (hd 64) T {} .. {}: {:.1f} .. {:.1f} GFLOP/s forward; elementwise GB/s {}; "
                     "optimizer: AdamW {:.1f} GB/s, one-pass {:.1f} GB/s",
                     rt.threads, p.attn_t.front(), p.attn_t.back(), rt.attn_fwd.front(), rt.attn_fwd.back(), by_size,
                     rt.adamw_gbs, rt.flat_gbs));
  return rt;
}

// One rank alone at each of `threads` OpenMP thread counts. Everything is timed in kGridPasses
// passes, each pass over every thread count in turn, and each rate is the median over all its
// samples: on a shared or virtual machine a transient slowdown of a second or two (the host busy on
// a vCPU's core) then lands on a few samples of many shapes, not on all the samples of a few (two
// calibrations of one Xeon VM differed by up to 2.2x on single shapes when each shape was timed in
// one burst); and a drift of the machine's speed over the minute calibrate takes (the reference
// GEMM +15% from before the rates to after, on that VM) lands on every thread count alike. Timed
// one thread count after the other (two threads first, one thread 30 s later), a calibration read
// the reference GEMM 2.24x faster at two threads than at one where the two, interleaved in one
// harness, ran 1.93x apart: the layouts whose ranks run one thread were priced against the single
// rank on both cores at a ratio the machine did not have (interleaved: 2.09x).
std::vector<MachineProfile::Rates> measure_rates(const MachineProfile& p, Ops& ops, const CalibrateOptions& o,
                                                 const Progress& pr, const std::vector<int>& threads,
                                                 std::vector<std::string>& warnings) {
  const bool bf16 = ops.set_gemm_bf16(true);
  ops.set_gemm_bf16(false);
  std::vector<RateSamples> samples(threads.size());
  for (size_t i = 0; i < threads.size(); ++i) samples[i].threads = threads[i];
  for (int pass = 0; pass < kGridPasses; ++pass)
    for (RateSamples& s : samples) {
      omp_set_num_threads(s.threads);
      sample_rates(p, ops, bf16, o.quick, s);
      s.end_pass();
    }
  std::vector<MachineProfile::Rates> rates;
  for (RateSamples& s : samples) {
    rates.push_back(rates_of(p, s, pr));
    const std::vector<double> speeds = s.pass_speeds();
    pr.say(fmt::format("{} thread(s): the passes ran at {} of their median speed", s.threads, pass_speeds_text(speeds)));
    const std::string w = pass_drift_warning(speeds, s.threads);
    if (!w.empty()) warnings.push_back(w);
  }
  return rates;
}

}  // namespace mpitron::calib
