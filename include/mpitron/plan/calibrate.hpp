// `mpitron calibrate`: measures a machine profile (plan/profile.hpp) under mpirun/srun.
//
// What runs, in order (ranks that are not measuring wait in a sleeping barrier, so they leave the
// cores to those that are):
//   1. world rank 0 alone, at each thread count the trainer gives a rank (cores/k for k ranks on
//      a node), the counts interleaved pass by pass: GEMM forward and backward over an (M, N, K)
//      grid in fp32 (and bf16 where the CPU has bf16 GEMMs), causal attention by sequence length,
//      and the elementwise kernels (layernorm, GELU, residual add);
//   2. for k = 1, 2, 4, ... up to the ranks of node 0: k ranks compute a fixed mix at once with
//      cores/k threads each (the trainer's rule): the per-rank slowdown (memory bandwidth,
//      oversubscription), each disjoint group of k ranks in turn, in short rounds alternating the
//      group's first rank alone and the k at once;
//   3. for each k and group size n <= k: k/n groups of n ranks run each collective at once over
//      message sizes from 4 KiB up, and alpha and busbw are fitted (least squares on relative
//      error) to t = alpha + factor * S / busbw; across nodes, groups of one rank per node;
//   4. with every rank busy: the mix's time while an all-reduce is in flight on a helper thread
//      (the trainer's progress thread) over its time alone.
// Rank 0 gets the profile; the other ranks an empty one.
#pragma once
#include <string>
#include <vector>

#include "mpitron/plan/profile.hpp"

namespace mpitron {

struct LaunchInfo;

struct CalibrateOptions {
  bool quick = false;           // small grids and sizes (tests): seconds instead of a minute
  double max_bytes = 16 << 20;  // largest collective message
  bool progress = true;         // rank 0 prints what it measures
};

MachineProfile calibrate_machine(const LaunchInfo& launch, const CalibrateOptions& opt);

// The reference GEMM (out[M, N] = in[M, K] w[N, K]^T, fp32, forward): calibrate times it before and
// after the compute rates, and its summary reports each thread count's rate at it.
struct ReferenceGemm {
  static constexpr int M = 512, N = 1024, K = 1024;
  static std::string name() { return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K); }
};

// The machine's speed while calibrate measured the compute rates: a reference GEMM's GFLOP/s
// before and after. Beyond 10% apart, the warning that calibrate prints and keeps in the profile's
// note (a shared host's load moves every rate, and every prediction with it); else empty.
std::string speed_drift_warning(double gflops_before, double gflops_after, int threads);

// The machine's speed in each pass of the compute rates (step 1), from the samples themselves:
// seconds[item][pass] holds an item's timed calls (a GEMM cell, an attention length, an elementwise
// shape) in that pass. Per item, its median over all the passes over its median in the pass; per
// pass, the median of that over the items (1.10: the pass ran 10% faster than the passes together).
// Items with a pass empty are left out.
std::vector<double> relative_pass_speeds(const std::vector<std::vector<std::vector<double>>>& seconds);

// Passes over 10% apart (fastest over slowest): the warning that calibrate prints and keeps in the
// profile's note, with each pass's speed; else empty. A slowdown that starts and ends inside the
// rates, which the reference GEMM before and after them cannot see.
std::string pass_drift_warning(const std::vector<double>& speeds, int threads);
// The passes' speeds as calibrate prints them: "1.00x, 0.90x, 1.01x".
std::string pass_speeds_text(const std::vector<double>& speeds);

// One-line summary per part, for the end of `mpitron calibrate`.
std::string format_profile_summary(const MachineProfile& p);

}  // namespace mpitron
