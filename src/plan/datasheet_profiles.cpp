// The built-in datasheet profiles (profile.hpp: `h100`, `h200`, `a100`) and load_profile, which
// takes one of their names or a profile file.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/plan/profile.hpp"

namespace mpitron {

namespace {

struct Sheet {
  const char* name;
  const char* device;
  double peak_tflops;   // dense bf16
  double hbm_gbs;       // HBM bandwidth, datasheet
  double nvlink_busbw;  // nccl-tests all_reduce busbw on 8 GPUs of a node, large messages
  double ib_busbw;      // per GPU across nodes (one 400 or 200 Gb/s NIC per GPU)
  bool fp8;             // FP8 tensor cores (compute capability >= 8.9)
};

MachineProfile datasheet(const Sheet& s) {
  MachineProfile p;
  p.source = "datasheet";
  p.device = s.device;
  p.backend = "nccl";
  p.transports = "NVLink inside a node, InfiniBand (one NIC per GPU) across";
  p.note = fmt::format(
      "not measured: dense bf16 peak {} TFLOP/s x GEMM efficiency 0.78*x/(x+384) (x = the smallest GEMM dimension: 57% at "
      "1024, 71% at 4096), {}, attention at 45%/35% of peak (forward/backward, "
      "flash kernels), elementwise at 80% of {} GB/s HBM, NVLink all_reduce busbw {} GB/s and {} GB/s per GPU across "
      "nodes (published nccl-tests figures); run `mpitron calibrate` on the machine to replace them",
      s.peak_tflops,
      s.fp8 ? "FP8 GEMMs (the GEMMs alone) at twice that peak x 0.70*x/(x+512) (1.6x bf16 at 1024, 1.7x at 4096: "
              "TransformerEngine's and torchao's published GEMM gains)"
            : "no FP8 tensor cores",
      s.hbm_gbs, s.nvlink_busbw, s.ib_busbw);
  p.cores_per_node = 8;
  p.datasheet_peak_gflops = s.peak_tflops * 1e3;
  p.gemm_m = p.gemm_n = p.gemm_k = {256, 1024, 4096, 16384};
  MachineProfile::Rates r;
  r.threads = 1;
  for (double m : p.gemm_m)
    for (double n : p.gemm_n)
      for (double k : p.gemm_k) {
        const double x = std::min({m, n, k});
        const double g = s.peak_tflops * 1e3 * 0.78 * x / (x + 384);
        r.gemm_fwd_bf16.push_back(g);
        r.gemm_bwd_bf16.push_back(g);
        r.gemm_fwd_f32.push_back(g / 2);  // TF32 tensor cores
        r.gemm_bwd_f32.push_back(g / 2);
        if (!s.fp8) continue;
        const double g8 = 2 * s.peak_tflops * 1e3 * 0.70 * x / (x + 512);  // FP8 tensor cores: 2x bf16's peak
        r.gemm_fwd_fp8.push_back(g8);
        r.gemm_bwd_fp8.push_back(g8);
      }
  p.attn_hd = 128;
  p.attn_t = {512, 2048, 8192};
  r.attn_fwd = {s.peak_tflops * 1e3 * 0.30, s.peak_tflops * 1e3 * 0.42, s.peak_tflops * 1e3 * 0.45};
  r.attn_bwd = {s.peak_tflops * 1e3 * 0.22, s.peak_tflops * 1e3 * 0.32, s.peak_tflops * 1e3 * 0.35};
  r.stream_gbs = 0.8 * s.hbm_gbs;
  p.rates = {r};
  // One rank per GPU: no sharing between the GPUs of a node; NCCL's kernels take SMs from the
  // compute they overlap (~5%).
  p.active = {1, 8};
  p.compute_scale = p.stream_scale = {1.0, 1.0};
  p.overlap_slowdown = {1.0, 1.05};
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"})
    for (int n : {2, 8}) {
      p.comm.push_back({op, n, 8, false, n == 2 ? 8e-6 : 15e-6, s.nvlink_busbw});
      p.comm.push_back({op, n, 8, true, n == 2 ? 20e-6 : 35e-6, s.ib_busbw});
    }
  p.comm.push_back({"sendrecv", 2, 8, false, 8e-6, s.nvlink_busbw / 2});
  p.comm.push_back({"sendrecv", 2, 8, true, 15e-6, s.ib_busbw});
  return p;
}

const Sheet kSheets[] = {
    {"h100", "NVIDIA H100 SXM5 80GB (datasheet)", 989, 3350, 450, 45, true},
    {"h200", "NVIDIA H200 SXM 141GB (datasheet)", 989, 4800, 450, 45, true},
    {"a100", "NVIDIA A100 SXM4 80GB (datasheet)", 312, 2039, 230, 22, false},
};

}  // namespace

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> v;
  for (const Sheet& s : kSheets) v.push_back(s.name);
  return v;
}

MachineProfile load_profile(const std::string& name) {
  for (const Sheet& s : kSheets)
    if (name == s.name) return datasheet(s);
  std::ifstream f(name);
  usage_check(static_cast<bool>(f), "--profile {}: neither a built-in profile (h100, h200, a100) nor a readable file "
                                    "(write one with `mpirun -np N mpitron calibrate --out FILE`)", name);
  return read_profile(name);
}

}  // namespace mpitron
