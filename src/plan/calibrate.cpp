// `mpitron calibrate`'s measurements (plan/calibrate.hpp says what and in which order).
#include "mpitron/plan/calibrate.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/launch.hpp"
#include "mpitron/distributed/mpi_comm.hpp"
#include "mpitron/ops/ops.hpp"

namespace mpitron {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A barrier that sleeps while it waits: ranks with nothing to measure must not take the cores
// (MPI's blocking calls spin), nor wake often (seven ranks polling every 200 us cost a lone
// measuring thread ~10%).
void idle_barrier(MPI_Comm c) {
  MPI_Request r;
  MPI_Ibarrier(c, &r);
  int done = 0;
  while (true) {
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

double median_of(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
// Seconds of fn appended to t: one untimed call (warm caches, buffers just made), then at least
// min_reps timed ones and as many as fit in `budget` seconds (at most max_reps).
void time_into(std::vector<double>& t, const std::function<void()>& fn, double budget, int min_reps, int max_reps) {
  fn();
  const auto start = Clock::now();
  for (int n = 0; n < min_reps || (n < max_reps && since(start) < budget); ++n) {
    auto t0 = Clock::now();
    fn();
    t.push_back(since(t0));
  }
}
// Median seconds of fn over 3 to 25 timed calls in `budget` seconds.
double median_time(const std::function<void()>& fn, double budget = 0.08) {
  std::vector<double> t;
  time_into(t, fn, budget, 3, 25);
  return median_of(t);
}

// The GEMM grid's passes and each shape's time budget over all of them (see measure_rates): per
// pass at least one timed call, at most 25 / kGridPasses.
constexpr int kGridPasses = 3;
constexpr double kGridBudget = 0.08;

// Values in [-0.11, 0.11], as activations and weights are in scale. The offset is taken in signed
// arithmetic: in size_t, 11 of the 23 residues wrapped to 1.8e17, attention's softmax then held
// exp(-87) ~ 1.6e-38 where it should hold 0.01, and P V's products were subnormal: on Intel cores
// (a microcode assist per subnormal operand; AMD's have none) calibrate measured attention at
// 3-7 GFLOP/s where the trainer's runs at 100 and more, and plan over-predicted every step.
void fill(std::vector<float>& v, int seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + seed) % 23) - 11) * 0.01f;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto k = line.find(':');
      if (k != std::string::npos) return line.substr(k + 2);
    }
  return "unknown CPU";
}

struct Gemm {
  std::vector<float> a, w, out, dout, dinp, dw;
  int64_t M, N, K;
  Gemm(int64_t M_, int64_t N_, int64_t K_) : a(M_ * K_), w(N_ * K_), out(M_ * N_), dout(M_ * N_), dinp(M_ * K_), dw(N_ * K_), M(M_), N(N_), K(K_) {
    fill(a, 1), fill(w, 2), fill(dout, 3);
  }
  void fwd(Ops& ops) { ops.matmul_forward(out.data(), a.data(), w.data(), nullptr, M, K, N); }
  void bwd(Ops& ops) { ops.matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), a.data(), w.data(), M, K, N); }
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

// Samples of one rank alone at one OpenMP thread count (seconds per call), appended pass by pass.
struct RateSamples {
  int threads = 1;
  std::array<std::vector<std::vector<double>>, 2> gemm_fwd, gemm_bwd;  // [fp32, bf16][grid cell]
  std::vector<std::vector<double>> attn_fwd, attn_bwd, stream;         // per attn_t, per stream shape
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
          Gemm g(static_cast<int64_t>(m), static_cast<int64_t>(n), static_cast<int64_t>(k));
          if (prec) ops.register_weights(g.w.data(), g.w.size());
          time_into(s.gemm_fwd[prec][cell], [&] { g.fwd(ops); }, budget, 1, max_reps);
          time_into(s.gemm_bwd[prec][cell], [&] { g.bwd(ops); }, budget, 1, max_reps);
          if (prec) ops.unregister_weights(g.w.data());
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
    time_into(s.attn_fwd[i], [&] { ops.attention_forward(out.data(), att.data(), qkv.data(), 1, T, H, hd); }, budget, 1,
              max_reps);
    time_into(s.attn_bwd[i],
              [&] { ops.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), 1, T, H, hd); }, budget, 1,
              max_reps);
  }
  const auto shapes = stream_shapes(quick);
  s.stream.resize(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    Stream st(shapes[i].first, shapes[i].second);
    time_into(s.stream[i], [&] { st.run(ops); }, budget, 1, max_reps);
  }
}

// The rates of one thread count from all its passes' samples (each the median over them).
MachineProfile::Rates rates_of(const MachineProfile& p, const RateSamples& s, bool quick, const Progress& pr) {
  MachineProfile::Rates rt;
  rt.threads = s.threads;
  for (int prec = 0; prec < 2; ++prec) {
    if (s.gemm_fwd[prec].empty()) continue;
    auto& fw = prec ? rt.gemm_fwd_bf16 : rt.gemm_fwd_f32;
    auto& bw = prec ? rt.gemm_bwd_bf16 : rt.gemm_bwd_f32;
    size_t cell = 0;  // the grid's order, as the passes walked it
    for (double m : p.gemm_m)
      for (double n : p.gemm_n)
        for (double k : p.gemm_k) {
          const double flops = 2.0 * m * n * k;
          fw.push_back(flops / median_of(s.gemm_fwd[prec][cell]) / 1e9);
          bw.push_back(2 * flops / median_of(s.gemm_bwd[prec][cell]) / 1e9);
          ++cell;
        }
    pr.say(fmt::format("{} thread(s): GEMM {} over {} shapes: {:.1f} .. {:.1f} GFLOP/s forward", rt.threads, prec ? "bf16" : "fp32",
                       fw.size(), *std::min_element(fw.begin(), fw.end()), *std::max_element(fw.begin(), fw.end())));
  }
  for (size_t i = 0; i < p.attn_t.size(); ++i) {
    const double T = p.attn_t[i], H = std::max(2, 4096 / static_cast<int>(T) * 2);
    const double flops = 4.0 * H * T * T * 64;
    rt.attn_fwd.push_back(flops / median_of(s.attn_fwd[i]) / 1e9);
    rt.attn_bwd.push_back(2 * flops / median_of(s.attn_bwd[i]) / 1e9);
  }
  const auto shapes = stream_shapes(quick);
  for (size_t i = 0; i < shapes.size(); ++i)
    rt.stream_gbs_by_size.push_back(Stream(shapes[i].first, shapes[i].second).bytes() / median_of(s.stream[i]) / 1e9);
  rt.stream_gbs = rt.stream_gbs_by_size.back();
  std::string by_size;
  for (size_t i = 0; i < p.stream_bytes.size(); ++i)
    by_size += fmt::format("{}{:.1f} at {:g} KiB", i ? ", " : "", rt.stream_gbs_by_size[i], p.stream_bytes[i] / 1024);
  pr.say(fmt::format("{} thread(s): attention (hd 64) T {} .. {}: {:.1f} .. {:.1f} GFLOP/s forward; elementwise GB/s {}",
                     rt.threads, p.attn_t.front(), p.attn_t.back(), rt.attn_fwd.front(), rt.attn_fwd.back(), by_size));
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
                                                 const Progress& pr, const std::vector<int>& threads) {
  const bool bf16 = ops.set_gemm_bf16(true);
  ops.set_gemm_bf16(false);
  std::vector<RateSamples> samples(threads.size());
  for (int pass = 0; pass < kGridPasses; ++pass)
    for (size_t i = 0; i < threads.size(); ++i) {
      omp_set_num_threads(threads[i]);
      samples[i].threads = threads[i];
      sample_rates(p, ops, bf16, o.quick, samples[i]);
    }
  std::vector<MachineProfile::Rates> rates;
  for (const RateSamples& s : samples) rates.push_back(rates_of(p, s, o.quick, pr));
  return rates;
}

// Seconds of the mix on this rank (median).
double mix_time(Ops& ops, Mix& mix) {
  return median_time([&] {
    mix.g.fwd(ops);
    mix.g.bwd(ops);
    mix.s.run(ops);
  }, 0.3);
}

// The mix's time while a helper thread runs all-reduces of max_bytes over `group` (a duplicate).
double mix_time_with_allreduce(Ops& ops, Mix& mix, MPI_Comm group, const CalibrateOptions& o) {
  MPI_Comm dup;
  MPI_Comm_dup(group, &dup);
  std::vector<float> buf(static_cast<size_t>(o.max_bytes) / 4 / 4);
  std::atomic<int> stop{0};
  // The helper's loop ends on every rank after the same call: each round also agrees (MAX) on
  // whether some rank has finished computing.
  std::thread comm_thread([&] {
    for (int done = 0; !done;) {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, dup);
      done = stop.load();
      MPI_Allreduce(MPI_IN_PLACE, &done, 1, MPI_INT, MPI_MAX, dup);
    }
  });
  const double t = mix_time(ops, mix);
  stop = 1;
  comm_thread.join();
  MPI_Comm_free(&dup);
  return t;
}

// Fitted alpha and busbw of t = alpha + f*S/busbw over (S, t) points, weights 1/t^2.
CollectiveFit fit(const std::string& op, int n, const std::vector<std::pair<double, double>>& pts) {
  const double f = op == "sendrecv" || op == "broadcast" ? 1.0 : collective_factor(op, n);
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [S, t] : pts) {
    const double w = 1.0 / (t * t), x = f * S;
    sw += w, sx += w * x, sy += w * t, sxx += w * x * x, sxy += w * x * t;
  }
  const double det = sw * sxx - sx * sx;
  double slope = det > 0 ? (sw * sxy - sx * sy) / det : 0, alpha = det > 0 ? (sy - slope * sx) / sw : 0;
  if (slope <= 0) {  // flat: latency-bound over the range; bandwidth from the largest message
    auto [S, t] = pts.back();
    slope = t / (f * S);
    alpha = 0;
  }
  if (alpha < 0) {  // bandwidth-bound; through the smallest point
    alpha = 0;
    slope = 0;
    for (auto [S, t] : pts) slope = std::max(slope, t / (f * S));
  }
  CollectiveFit c;
  c.op = op;
  c.group = n;
  c.alpha_s = alpha;
  c.busbw_gbs = 1.0 / slope / 1e9;
  return c;
}

// One collective on `c` (group of n) with S bytes of floats.
void run_collective(const std::string& op, MpiComm& c, std::vector<float>& a, std::vector<float>& b, size_t floats) {
  const int n = c.size(), me = c.rank();
  if (op == "all_reduce") c.all_reduce(b.data(), floats, DType::f32, ReduceOp::sum);
  else if (op == "all_gather") c.all_gather(a.data(), b.data(), floats / n, DType::f32);
  else if (op == "reduce_scatter") c.reduce_scatter(a.data(), b.data(), floats / n, DType::f32, ReduceOp::sum);
  else if (op == "broadcast") c.broadcast(b.data(), floats, DType::f32, 0);
  else if (op == "sendrecv") c.sendrecv(a.data(), floats, (me + 1) % n, b.data(), floats, (me + n - 1) % n, DType::f32);
  else MPI_Alltoall(a.data(), static_cast<int>(floats / n), MPI_FLOAT, b.data(), static_cast<int>(floats / n), MPI_FLOAT, c.mpi_comm());
}

const char* kOps[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "all_to_all"};

// Every op over sizes on group `g` (this rank's); the time of a size is the slowest rank's mean.
std::vector<CollectiveFit> measure_group(MpiComm& g, const CalibrateOptions& o) {
  std::vector<CollectiveFit> fits;
  const int n = g.size();
  const size_t max_floats = static_cast<size_t>(o.max_bytes) / 4;
  std::vector<float> a(max_floats), b(max_floats);
  fill(a, 9);
  for (const char* op : kOps) {
    std::vector<std::pair<double, double>> pts;
    for (size_t bytes = 4096; bytes <= static_cast<size_t>(o.max_bytes); bytes *= 4) {
      size_t floats = bytes / 4;
      floats -= floats % n;
      run_collective(op, g, a, b, floats);
      run_collective(op, g, a, b, floats);
      // Iterations: as many as fit in ~40 ms on the slowest rank (agreed over the group), 3..50.
      auto t0 = Clock::now();
      run_collective(op, g, a, b, floats);
      double one = since(t0);
      MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_DOUBLE, MPI_MAX, g.mpi_comm());
      const int iters = std::clamp(static_cast<int>(0.04 / std::max(one, 1e-7)), 3, 50);
      // Each call timed on its own; the rank's median (an oversubscribed rank descheduled for a
      // time slice now and then would otherwise own the mean), the slowest rank's.
      MPI_Barrier(g.mpi_comm());
      std::vector<double> each;
      for (int i = 0; i < iters; ++i) {
        t0 = Clock::now();
        run_collective(op, g, a, b, floats);
        each.push_back(since(t0));
      }
      std::nth_element(each.begin(), each.begin() + iters / 2, each.end());
      double t = each[iters / 2];
      MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, g.mpi_comm());
      pts.push_back({4.0 * floats, t});
    }
    fits.push_back(fit(op, n, pts));
  }
  return fits;
}

std::string mpi_library() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, static_cast<size_t>(len));
  if (auto k = s.find_first_of(",\n"); k != std::string::npos) s.resize(k);
  return s;
}

std::string utc_date() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

// What the profile says of the machine and the run, before any measurement.
void describe_machine(MachineProfile& p, const LaunchInfo& launch, int cores) {
  p.source = "calibrated";
  p.device = cpu_model();
  p.backend = "cpu";
  p.mpi = mpi_library();
  p.transports = "MPI (the CPU backend's collectives); shared memory inside a node";
  p.cores_per_node = cores;
  p.nodes = launch.num_nodes;
  p.ranks = launch.world;
  p.date = utc_date();
}

// Node 0's ranks in world order: the first k of them compute (and communicate) at once.
struct Node0 {
  MPI_Comm comm = MPI_COMM_NULL;  // node 0's ranks (MPI_COMM_NULL on the other nodes)
  int local = -1;                 // this rank's place among them (-1 on the other nodes)
  std::vector<int> ks;            // the counts measured: 1, 2, 4, ... and all of node 0's ranks
};

Node0 split_node0(const LaunchInfo& launch) {
  Node0 n;
  MPI_Comm_split(MPI_COMM_WORLD, launch.node == 0 ? 0 : MPI_UNDEFINED, launch.rank, &n.comm);
  n.local = launch.node == 0 ? launch.local_rank : -1;
  int node0_ranks = launch.local_size;
  MPI_Bcast(&node0_ranks, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int k = 1; k < node0_ranks; k *= 2) n.ks.push_back(k);
  n.ks.push_back(node0_ranks);
  return n;
}

// What every measurement step of calibrate_machine shares.
struct Calib {
  const LaunchInfo& launch;
  const CalibrateOptions& o;
  const Progress& pr;
  Ops& ops;
  int cores;
  const Node0& node;
};

// The first k ranks of node 0 at once, t threads each: {the mix, the elementwise set, the mix
// with an all-reduce in flight (the mix's own time unless `with_allreduce`)}, the k ranks' mean
// (zeros on the other ranks).
std::array<double, 3> time_together(const Calib& c, Mix& mix, int k, int t, bool with_allreduce) {
  std::array<double, 3> r = {0, 0, 0};  // mix, stream, mix with an all-reduce in flight
  const int local = c.node.local;
  const bool me = local >= 0 && local < k;
  if (local < 0) return r;
  MPI_Comm act;
  MPI_Comm_split(c.node.comm, me ? 0 : MPI_UNDEFINED, local, &act);
  if (!me) return r;
  omp_set_num_threads(t);
  MPI_Barrier(act);
  // Untimed first: ranks that just woke may share a core until the scheduler spreads them.
  for (auto t0 = Clock::now(); since(t0) < 0.3;) mix.g.fwd(c.ops);
  MPI_Barrier(act);
  r[0] = mix_time(c.ops, mix);
  MPI_Barrier(act);
  r[1] = median_time([&] { mix.s.run(c.ops); }, 0.2);
  r[2] = r[0];
  if (with_allreduce) {
    MPI_Barrier(act);
    r[2] = mix_time_with_allreduce(c.ops, mix, act, c.o);
  }
  MPI_Allreduce(MPI_IN_PLACE, r.data(), 3, MPI_DOUBLE, MPI_SUM, act);
  MPI_Comm_free(&act);
  for (double& x : r) x /= k;
  return r;
}

double median_or_one(std::vector<double> v) {
  if (v.empty()) return 1.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// k ranks computing at once against rank 0 alone: the per-rank rate of the mix and of the
// elementwise set, and the slowdown with an all-reduce in flight (1 for k = 1: not measured).
struct Scaling {
  double compute = 1, stream = 1, overlap = 1;
};

Scaling measure_scaling(const Calib& c, Mix& mix, int k, int t, bool multiple) {
  // Rank 0 alone, then the k ranks at once, three times over: the median of the three ratios
  // (a shared machine's slow moments fall on either side).
  std::vector<double> ratio_mix, ratio_stream;
  double overlap = 1.0;
  for (int round = 0; round < (k > 1 ? 3 : 0); ++round) {
    double alone[2] = {0, 0};
    if (c.launch.rank == 0) {
      alone[0] = mix_time(c.ops, mix);
      alone[1] = median_time([&] { mix.s.run(c.ops); }, 0.2);
    }
    idle_barrier(MPI_COMM_WORLD);  // before the broadcast: its waiting ranks would spin
    MPI_Bcast(alone, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    std::array<double, 3> r = time_together(c, mix, k, t, multiple && round == 2);
    idle_barrier(MPI_COMM_WORLD);
    MPI_Bcast(r.data(), 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    ratio_mix.push_back(alone[0] / r[0]);
    ratio_stream.push_back(alone[1] / r[1]);
    if (round == 2) overlap = std::max(1.0, r[2] / r[0]);
  }
  return Scaling{median_or_one(ratio_mix), median_or_one(ratio_stream), overlap};
}

// GFLOP/s of the reference GEMM (calibrate.hpp) with the current threads.
double reference_gemm_gflops(Ops& ops) {
  Gemm g(ReferenceGemm::M, ReferenceGemm::N, ReferenceGemm::K);
  return g.flops() / median_time([&] { g.fwd(ops); }, 0.3) / 1e9;
}

// For k = 1, 2, 4, ... ranks of node 0, each rank with cores/k threads (the trainer's rule):
//   1. rank 0 alone: the rate grids of every thread count, interleaved (measure_rates), and per k
//      the mix (the reference of 2);
//   2. the first k ranks at once: the mix, then the mix with an all-reduce in flight on a
//      helper thread (the trainer's progress thread).
// Around them, the reference GEMM on rank 0; returns its drift warning (speed_drift_warning).
std::string measure_compute(MachineProfile& p, const Calib& c) {
  set_axes(p, c.o.quick);
  Mix mix(c.o.quick);
  double reference_before = 0;
  if (c.launch.rank == 0) {
    omp_set_num_threads(c.cores);
    reference_before = reference_gemm_gflops(c.ops);
  }
  const bool multiple = c.launch.thread_level >= MPI_THREAD_MULTIPLE;
  std::vector<int> threads;  // per k, cores / k threads: each count once
  for (int k : c.node.ks)
    if (threads.empty() || threads.back() != std::max(1, c.cores / k)) threads.push_back(std::max(1, c.cores / k));
  if (c.launch.rank == 0) p.rates = measure_rates(p, c.ops, c.o, c.pr, threads);
  idle_barrier(MPI_COMM_WORLD);
  p.active.clear(), p.compute_scale.clear(), p.stream_scale.clear(), p.overlap_slowdown.clear();
  for (int k : c.node.ks) {
    const int t = std::max(1, c.cores / k);
    if (c.launch.rank == 0) omp_set_num_threads(t);
    const Scaling s = measure_scaling(c, mix, k, t, multiple);
    p.active.push_back(k);
    p.compute_scale.push_back(s.compute);
    p.stream_scale.push_back(s.stream);
    p.overlap_slowdown.push_back(s.overlap);
    if (k > 1)
      c.pr.say(fmt::format("{} ranks computing at once ({} thread(s) each): {:.2f}x the rate of one alone, elementwise {:.2f}x "
                           "(medians of 3); {:.2f}x slower with an all-reduce in flight{}",
                           k, t, p.compute_scale.back(), p.stream_scale.back(), s.overlap,
                           multiple ? "" : " (not measured: MPI is not MPI_THREAD_MULTIPLE)"));
  }
  if (c.launch.rank != 0) return "";
  omp_set_num_threads(c.cores);
  const double reference_after = reference_gemm_gflops(c.ops);
  c.pr.say(fmt::format("reference GEMM {} ({} threads): {:.1f} GFLOP/s before the compute rates, {:.1f} after",
                       ReferenceGemm::name(), c.cores, reference_before, reference_after));
  return speed_drift_warning(reference_before, reference_after, c.cores);
}

// 3. Collectives inside a node: k active ranks in groups of n.
void measure_node_collectives(MachineProfile& p, const Calib& c) {
  const int rank = c.launch.rank, local = c.node.local;
  for (int k : c.node.ks) {
    if (k < 2) continue;
    for (int n = 2; n <= k; n *= 2) {
      if (k % n) continue;
      const bool me = local >= 0 && local < k;
      MPI_Comm gc;
      MPI_Comm_split(MPI_COMM_WORLD, me ? local / n : MPI_UNDEFINED, rank, &gc);
      std::vector<CollectiveFit> fits;
      if (me) {
        MpiComm g(gc, fmt::format("calib{}", n));
        fits = measure_group(g, c.o);
      }
      idle_barrier(MPI_COMM_WORLD);
      if (rank == 0) {
        for (CollectiveFit& f : fits) {
          f.active = k;
          p.comm.push_back(f);
        }
        c.pr.say(fmt::format("collectives, {} group(s) of {} at once: all_reduce alpha {:.1f} us, busbw {:.2f} GB/s", k / n, n,
                             fits[0].alpha_s * 1e6, fits[0].busbw_gbs));
      }
    }
  }
}

// Across nodes: one rank per node, every local rank's group at once.
void measure_inter_node_collectives(MachineProfile& p, const Calib& c) {
  const LaunchInfo& launch = c.launch;
  MPI_Comm gc;
  MPI_Comm_split(MPI_COMM_WORLD, launch.local_rank, launch.rank, &gc);
  std::vector<CollectiveFit> fits;
  {
    MpiComm g(gc, "calib_inter");
    fits = measure_group(g, c.o);
  }
  if (launch.rank == 0) {
    for (CollectiveFit& f : fits) {
      f.active = launch.local_size;
      f.inter_node = true;
      p.comm.push_back(f);
    }
    c.pr.say(fmt::format("collectives across {} nodes: all_reduce alpha {:.1f} us, busbw {:.2f} GB/s", launch.num_nodes,
                         fits[0].alpha_s * 1e6, fits[0].busbw_gbs));
  }
}

}  // namespace

MachineProfile calibrate_machine(const LaunchInfo& launch, const CalibrateOptions& o) {
  MachineProfile p;
  const Progress pr{o.progress && launch.rank == 0};
  const auto t_start = Clock::now();
  const int cores = node_cpus();
  describe_machine(p, launch, cores);
  pr.say(fmt::format("{} ranks on {} node(s), {} cores per node ({}), {}", launch.world, launch.num_nodes, cores, p.device,
                     p.mpi));
  auto ops = make_cpu_ops();
  Node0 node = split_node0(launch);
  const Calib c{launch, o, pr, *ops, cores, node};

  const std::string drift = measure_compute(p, c);
  if (!drift.empty()) std::fprintf(stderr, "mpitron calibrate: warning: %s\n", drift.c_str());
  omp_set_num_threads(std::max(1, cores / std::max(1, launch.local_size)));
  measure_node_collectives(p, c);
  if (launch.num_nodes > 1) measure_inter_node_collectives(p, c);

  if (node.comm != MPI_COMM_NULL) MPI_Comm_free(&node.comm);
  p.seconds = since(t_start);
  p.note = fmt::format("measured by `mpitron calibrate` with {} ranks{}; compute at one rank per node on {} cores",
                       launch.world, o.quick ? " (--quick: small grids)" : "", cores);
  if (!drift.empty()) p.note += "; " + drift;
  if (launch.rank != 0) return MachineProfile{};
  return p;
}

}  // namespace mpitron
