// A machine profile: what the step-time model (plan/step_time.hpp) needs to know of the machine
// a job will run on. `mpitron calibrate` measures one (plan/calibrate.hpp) and writes it as TOML;
// datasheet profiles for H100, H200 and A100 clusters are built in, stated as such.
//
// Every rate is per rank. Compute rates are taken with one rank per node using all its cores
// (GPUs: one rank per GPU); `active`/`compute_scale` say how much slower each rank computes
// when k ranks of a node compute at once, each with the trainer's threads (cores / k): on a CPU
// node that is where oversubscription shows (k > cores).
//
// Collectives: per (operation, group size n, ranks active on the node k, inside / across nodes)
// a latency alpha and a bus bandwidth, so that one call of S bytes takes
//   t = alpha + factor(op, n) * S / busbw,
// factor = 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter, all_to_all), 1
// (broadcast, sendrecv): the textbook ring costs nccl-tests reports busbw by. S is the full
// buffer (all_gather: the gathered output; reduce_scatter: the input).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

namespace mpitron {

struct CollectiveFit {
  std::string op;          // all_reduce | all_gather | reduce_scatter | broadcast | sendrecv | all_to_all
  int group = 2;           // ranks in the group
  int active = 1;          // ranks of the node busy (with collectives of their own groups) meanwhile
  bool inter_node = false; // the group spans nodes (one rank per node)
  double alpha_s = 0;      // latency, seconds
  double busbw_gbs = 0;    // bus bandwidth, GB/s (1e9)
};

// The textbook factor above; 0 for a group of one.
double collective_factor(const std::string& op, int n);

struct MachineProfile {
  std::string source = "calibrated";  // calibrated | datasheet
  std::string device;                 // CPU model / GPU name
  std::string backend = "cpu";        // cpu | nccl
  std::string mpi;                    // MPI library and version
  std::string transports;             // what carried the collectives (shared memory, IB, NVLink, ...)
  std::string date;
  std::string note;                   // what the profile is and is not
  int cores_per_node = 1;             // CPU cores (GPUs: GPUs per node)
  int nodes = 1, ranks = 1;           // of the calibration run
  double seconds = 0;                 // the calibration's run time
  double datasheet_peak_gflops = 0;   // datasheet profiles: dense bf16 peak per GPU

  // Compute rates of one rank alone with `threads` threads (GPUs: one entry, threads 1). GEMM
  // GFLOP/s (1e9) on the grid gemm_m x gemm_n x gemm_k: out[M,N] = in[M,K] w[N,K]^T forward, the
  // two GEMMs of its backward (2x the FLOPs) as "bwd"; arrays [m][n][k] flattened. Causal
  // attention GFLOP/s by sequence length (head dim attn_hd), FLOPs counted as 4*T*T*hd per head
  // and sequence forward (QK^T and AV, the whole square, as 6N+12LTd counts). Elementwise kernels
  // (norms, activations, residual adds, the loss, AdamW): GB/s of the bytes each reads and writes.
  struct Rates {
    int threads = 1;
    std::vector<double> gemm_fwd_f32, gemm_bwd_f32, gemm_fwd_bf16, gemm_bwd_bf16;  // bf16: empty if none
    // FP8 GEMMs (train.precision = "fp8" on a GPU; the GEMMs alone, the casts apart): empty if
    // none. GPU profiles only: a CPU's FP8 is its bf16 GEMMs (the emulation).
    std::vector<double> gemm_fwd_fp8, gemm_bwd_fp8;
    std::vector<double> attn_fwd, attn_bwd;
    double stream_gbs = 10;  // on activations larger than the caches (stream_bytes' last)
    // The rate per entry of stream_bytes: a block's kernels read what the GEMM before them just
    // wrote, from cache when it fits (a 2-core Xeon: 24-37 GB/s at 128 KiB, 17-24 at 16 MiB).
    // Empty: stream_gbs at every size.
    std::vector<double> stream_gbs_by_size;
    // The optimizer's kernels (FlatOps) over arrays larger than the caches, as calibrate times them:
    // AdamW in GB/s of its 7 fp32 arrays (p, g, m, v read; p, m, v written), and the one-pass ones
    // (zeroing, the sum of squares, y += a x) in GB/s of the bytes each reads and writes. 0: not
    // measured (a datasheet or an older profile): stream_gbs. AdamW's square root and division are
    // not the elementwise set's GELU and layernorm: on a 2-core AMD EPYC it ran at 24-28 GB/s on one
    // thread and 67 on two where the elementwise set ran at 10-12 and 20.
    double adamw_gbs = 0, flat_gbs = 0;
    static constexpr double kAdamwBytesPerParam = 4.0 * 7;  // the bytes adamw_gbs counts a parameter
  };
  std::vector<double> gemm_m, gemm_n, gemm_k, attn_t;
  std::vector<double> stream_bytes;  // bytes of the [rows, C] activation of each elementwise probe
  double attn_hd = 64;
  std::vector<Rates> rates;
  // k ranks of a node computing at once, each with max(1, cores / k) threads: the per-rank rate
  // over that of one rank alone with as many threads (memory bandwidth shared; beyond the cores,
  // oversubscription). GEMMs and elementwise kernels apart.
  std::vector<int> active = {1};
  std::vector<double> compute_scale = {1.0}, stream_scale = {1.0};
  // Compute time multiplier while a collective is in flight on the rank (its progress thread,
  // the copies of shared-memory transports), per entry of `active` (1 for a lone rank).
  std::vector<double> overlap_slowdown = {1.0};
  double overlap_factor(int k) const;
  std::vector<CollectiveFit> comm;

  // Lookups (log-log interpolation inside the grid, clamped at its edges) for a rank with
  // `threads` threads (the nearest measured count).
  const Rates& rates_for(int threads) const;
  double gemm_gflops(double M, double N, double K, bool backward, bool bf16, int threads = 0) const;
  double fp8_gemm_gflops(double M, double N, double K, bool backward) const;  // has_fp8()
  double attention_gflops(double T, bool backward, int threads = 0) const;
  // Elementwise GB/s on activations of `act_bytes` each (0: larger than the caches).
  double stream_gbs(int threads = 0, double act_bytes = 0) const;
  // Seconds of AdamW over `elements` parameters: at adamw_gbs (kAdamwBytesPerParam each), or
  // where it was not measured 32 B each at stream_gbs (a GPU's AdamW also writes the bf16 copy).
  double adamw_seconds(double elements, int threads = 0) const;
  double flat_gbs(int threads = 0) const;  // Rates::flat_gbs, or stream_gbs where not measured
  // Per-rank slowdown factors (<= 1 when oversubscribed) with k ranks of a node computing at once.
  double compute_factor(int k) const;
  double stream_factor(int k) const;
  // Seconds of one collective; `active`: ranks of the node at work at the same time. The nearest
  // measured group size and activity is used, across nodes when measured (else inside).
  double collective_s(const std::string& op, int n, double bytes, int active, bool inter_node) const;
  const CollectiveFit* nearest_fit(const std::string& op, int n, int active, bool inter_node) const;
  bool has_inter_node() const;
  bool has_bf16() const { return !rates.empty() && !rates.front().gemm_fwd_bf16.empty(); }
  bool has_fp8() const { return !rates.empty() && !rates.front().gemm_fwd_fp8.empty(); }
  // The trainer's threads per rank with k ranks on a node (cores / k, at least 1).
  int threads_for(int k) const { return std::max(1, cores_per_node / std::max(1, k)); }
  // MFU's reference: the datasheet peak, else the best GEMM rate calibrated.
  double peak_gflops() const;

 private:
  // A GEMM rate grid [m][n][k] at (M, N, K): log-log interpolation, clamped at the edges.
  double gemm_interp(const std::vector<double>& v, double M, double N, double K) const;
};

// TOML text and back. read_profile checks every value as it reads it: UsageError naming the
// file, the line, the table and the key on a TOML error, an unknown table or key, or a value
// missing, of the wrong type or outside its range (README "Predicting step time").
std::string profile_to_toml(const MachineProfile& p);
MachineProfile read_profile(const std::string& path);
void write_profile(const MachineProfile& p, const std::string& path);  // atomically (tmp + rename)

// `h100`, `h200`, `a100`: datasheet profiles (dense bf16 peak x typical GEMM efficiency, HBM
// bandwidth, NVLink and 400 Gb/s InfiniBand busbw as published nccl-tests runs report). Else a
// file path. UsageError for an unknown name that is not a readable file.
MachineProfile load_profile(const std::string& name_or_path);
std::vector<std::string> builtin_profile_names();

}  // namespace mpitron
