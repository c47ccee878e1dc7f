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

#include "calibrate_timing.hpp"

namespace mpitron {
namespace {

using namespace calib;

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

// Seconds per call of the mix, and of its elementwise set alone, on this rank over a window of
// `window` seconds (window_time: a throughput over the window, whatever else computes on the node).
double mix_window_time(Ops& ops, Mix& mix, double window) {
  return window_time([&] {
    mix.g.fwd(ops);
    mix.g.bwd(ops);
    mix.s.run(ops);
  }, window);
}
double stream_window_time(Ops& ops, Mix& mix, double window) {
  return window_time([&] { mix.s.run(ops); }, window);
}
double mix_time(Ops& ops, Mix& mix, bool quick) { return mix_window_time(ops, mix, mix_window(quick)); }

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
  const double t = mix_time(ops, mix, o.quick);
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

// A group's ranks (`act`) about to compute at once, t threads each: the mix untimed first, as
// ranks that just woke may share a core until the scheduler spreads them.
void warm_up_group(const Calib& c, Mix& mix, MPI_Comm act, int t) {
  omp_set_num_threads(t);
  MPI_Barrier(act);
  for (auto t0 = Clock::now(); since(t0) < 0.3;) mix.g.fwd(c.ops);
}

// The first k ranks of node 0 at once, t threads each: the mix, then the mix with an all-reduce
// in flight on a helper thread; their ratio on rank 0 (1 on the other ranks).
double overlap_slowdown(const Calib& c, Mix& mix, int k, int t) {
  const int local = c.node.local;
  if (local < 0) return 1.0;
  const bool me = local < k;
  MPI_Comm act;
  MPI_Comm_split(c.node.comm, me ? 0 : MPI_UNDEFINED, local, &act);
  if (!me) return 1.0;
  warm_up_group(c, mix, act, t);
  MPI_Barrier(act);
  double r[2] = {mix_time(c.ops, mix, c.o.quick), 0};
  MPI_Barrier(act);
  r[1] = mix_time_with_allreduce(c.ops, mix, act, c.o);
  MPI_Allreduce(MPI_IN_PLACE, r, 2, MPI_DOUBLE, MPI_SUM, act);
  MPI_Comm_free(&act);
  return std::max(1.0, r[1] / r[0]);
}

double median_or_one(std::vector<double> v) {
  if (v.empty()) return 1.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// k ranks computing at once against one of them alone: the per-rank rate of the mix and of the
// elementwise set, and the slowdown with an all-reduce in flight (1 for k = 1: not measured).
struct Scaling {
  double compute = 1, stream = 1, overlap = 1;
  int groups = 0;  // the groups of k ranks measured
};

// Each disjoint group of k of node 0's ranks in turn (8 ranks on the node: four pairs at k = 2),
// in short rounds: the group's first rank alone, the k at once, alone again, ...; a round's ratio
// is over the mean of the alone times on its either side (a machine's drift cancels), the result
// the median of all the groups' rounds. One group, once, is not the machine: on the shared 2-core
// AMD EPYC one pair's ratio ranged 0.83-1.04 (the mix) and 0.63-1.22 (elementwise) from one launch
// to the next, and pairs of the same launch as far apart, each steady over 80 rounds (a process's
// or a moment's own speed); the median of four pairs ranged 0.95-0.98 and 0.94-0.97.
Scaling measure_scaling(const Calib& c, Mix& mix, int k, int t, bool multiple) {
  Scaling s;
  if (k < 2) return s;
  const int rounds = c.o.quick ? 5 : 12;
  const double window = c.o.quick ? 0.04 : 0.1;  // the mix's; the elementwise set's 0.6 of it
  const int local = c.node.local, groups = c.node.ks.back() / k;
  // The mix's ratios of every group's rounds, then the elementwise set's (ratios[j * n + g * rounds
  // + i]), filled by each group's first rank.
  const int n = groups * rounds;
  std::vector<double> ratios(static_cast<size_t>(2 * n), 0.0);
  for (int g = 0; g < groups; ++g) {
    const bool me = local >= g * k && local < (g + 1) * k, first = local == g * k;
    MPI_Comm act = MPI_COMM_NULL;
    if (local >= 0) MPI_Comm_split(c.node.comm, me ? 0 : MPI_UNDEFINED, local, &act);
    if (me) warm_up_group(c, mix, act, t);
    std::array<std::vector<double>, 2> alone, together;  // {mix, elementwise} per round
    auto time_alone = [&] {
      idle_barrier(MPI_COMM_WORLD);  // the others asleep, not spinning
      if (!first) return;
      alone[0].push_back(mix_window_time(c.ops, mix, window));
      alone[1].push_back(stream_window_time(c.ops, mix, 0.6 * window));
    };
    time_alone();
    for (int i = 0; i < rounds; ++i) {
      idle_barrier(MPI_COMM_WORLD);
      if (me) {
        std::array<double, 2> r;
        MPI_Barrier(act);
        r[0] = mix_window_time(c.ops, mix, window);
        MPI_Barrier(act);
        r[1] = stream_window_time(c.ops, mix, 0.6 * window);
        MPI_Allreduce(MPI_IN_PLACE, r.data(), 2, MPI_DOUBLE, MPI_SUM, act);
        together[0].push_back(r[0] / k), together[1].push_back(r[1] / k);
      }
      time_alone();
    }
    for (int j = 0; first && j < 2; ++j) {
      const std::vector<double> r = alternating_ratios(alone[j], together[j]);
      std::copy(r.begin(), r.end(), ratios.begin() + j * n + g * rounds);
    }
    if (act != MPI_COMM_NULL) MPI_Comm_free(&act);
  }
  idle_barrier(MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, ratios.data(), static_cast<int>(ratios.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  s.compute = median_or_one({ratios.begin(), ratios.begin() + n});
  s.stream = median_or_one({ratios.begin() + n, ratios.end()});
  s.groups = groups;
  if (multiple) {
    double o = overlap_slowdown(c, mix, k, t);
    idle_barrier(MPI_COMM_WORLD);
    MPI_Bcast(&o, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    s.overlap = o;
  }
  return s;
}

// GFLOP/s of the reference GEMM (calibrate.hpp) with the current threads.
double reference_gemm_gflops(Ops& ops) {
  Gemm g(ReferenceGemm::M, ReferenceGemm::N, ReferenceGemm::K);
  return g.flops() / median_time([&] { g.fwd(ops); }, 0.3) / 1e9;
}

// The reference GEMM on rank 0 with all the cores (0 on the other ranks), every other rank asleep
// in an idle_barrier before and after it: ranks still filling their mixes' buffers, or spinning in
// the next phase's blocking MPI_Comm_split, took the cores from it (on 2 cores, 8 ranks: 215
// GFLOP/s before the rates and 302 after, or 314 and 134, where it runs at 340-370 alone) and
// calibrate warned of drift that was its own.
double reference_gemm_alone(const Calib& c) {
  idle_barrier(MPI_COMM_WORLD);
  double gflops = 0;
  if (c.launch.rank == 0) {
    omp_set_num_threads(c.cores);
    gflops = reference_gemm_gflops(c.ops);
  }
  idle_barrier(MPI_COMM_WORLD);
  return gflops;
}

// For k = 1, 2, 4, ... ranks of node 0, each rank with cores/k threads (the trainer's rule):
//   1. rank 0 alone: the rate grids of every thread count, interleaved (measure_rates), and per k
//      the mix (the reference of 2);
//   2. the first k ranks at once: the mix, then the mix with an all-reduce in flight on a
//      helper thread (the trainer's progress thread).
// Around them, the reference GEMM on rank 0. Returns the drift warnings on rank 0: the reference
// GEMM's (speed_drift_warning), then the rates' passes' (pass_drift_warning).
std::vector<std::string> measure_compute(MachineProfile& p, const Calib& c) {
  set_axes(p, c.o.quick);
  Mix mix(c.o.quick);
  const double reference_before = reference_gemm_alone(c);
  const bool multiple = c.launch.thread_level >= MPI_THREAD_MULTIPLE;
  std::vector<int> threads;  // per k, the trainer's threads per rank: each count once
  for (int k : c.node.ks)
    if (threads.empty() || threads.back() != p.threads_for(k)) threads.push_back(p.threads_for(k));
  std::vector<std::string> warnings;
  if (c.launch.rank == 0) p.rates = measure_rates(p, c.ops, c.o, c.pr, threads, warnings);
  idle_barrier(MPI_COMM_WORLD);
  p.active.clear(), p.compute_scale.clear(), p.stream_scale.clear(), p.overlap_slowdown.clear();
  for (int k : c.node.ks) {
    const int t = p.threads_for(k);
    if (c.launch.rank == 0) omp_set_num_threads(t);
    const Scaling s = measure_scaling(c, mix, k, t, multiple);
    p.active.push_back(k);
    p.compute_scale.push_back(s.compute);
    p.stream_scale.push_back(s.stream);
    p.overlap_slowdown.push_back(s.overlap);
    if (k > 1)
      c.pr.say(fmt::format("{} ranks computing at once ({} thread(s) each): {:.2f}x the rate of one alone, elementwise {:.2f}x "
                           "(medians over {} group(s)); {:.2f}x slower with an all-reduce in flight{}",
                           k, t, p.compute_scale.back(), p.stream_scale.back(), s.groups, s.overlap,
                           multiple ? "" : " (not measured: MPI is not MPI_THREAD_MULTIPLE)"));
  }
  const double reference_after = reference_gemm_alone(c);
  if (c.launch.rank != 0) return {};
  c.pr.say(fmt::format("reference GEMM {} ({} threads): {:.1f} GFLOP/s before the compute rates, {:.1f} after",
                       ReferenceGemm::name(), c.cores, reference_before, reference_after));
  const std::string reference = speed_drift_warning(reference_before, reference_after, c.cores);
  if (!reference.empty()) warnings.insert(warnings.begin(), reference);
  return warnings;
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

  const std::vector<std::string> drift = measure_compute(p, c);
  for (const std::string& w : drift) std::fprintf(stderr, "mpitron calibrate: warning: %s\n", w.c_str());
  omp_set_num_threads(std::max(1, cores / std::max(1, launch.local_size)));
  measure_node_collectives(p, c);
  if (launch.num_nodes > 1) measure_inter_node_collectives(p, c);

  if (node.comm != MPI_COMM_NULL) MPI_Comm_free(&node.comm);
  p.seconds = since(t_start);
  p.note = fmt::format("measured by `mpitron calibrate` with {} ranks{}; compute at one rank per node on {} cores",
                       launch.world, o.quick ? " (--quick: small grids)" : "", cores);
  for (const std::string& w : drift) p.note += "; " + w;
  if (launch.rank != 0) return MachineProfile{};
  return p;
}

}  // namespace mpitron
