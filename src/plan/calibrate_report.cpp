// What `mpitron calibrate` says of what it measured: the drift warnings and the profile's summary.
#include "mpitron/plan/calibrate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "calibrate_timing.hpp"

namespace mpitron {

std::string speed_drift_warning(double before, double after, int threads) {
  if (!(before > 0 && after > 0) || std::abs(after / before - 1) <= 0.10) return "";
  return fmt::format("the reference GEMM ({}, {} threads) ran at {:.1f} GFLOP/s before the compute rates and "
                     "{:.1f} after ({:+.0f}%): the machine's speed changed while they were measured (other load, a "
                     "shared host), and the rates with it; calibrate again when the machine is quiet",
                     ReferenceGemm::name(), threads, before, after, 100 * (after / before - 1));
}

std::vector<double> relative_pass_speeds(const std::vector<std::vector<std::vector<double>>>& seconds) {
  using calib::median_of;  // the median each rate is taken as
  size_t passes = 0;
  for (const auto& item : seconds) passes = std::max(passes, item.size());
  std::vector<std::vector<double>> ratios(passes);
  for (const auto& item : seconds) {
    if (item.size() != passes || std::any_of(item.begin(), item.end(), [](const auto& s) { return s.empty(); })) continue;
    std::vector<double> all;
    for (const auto& s : item) all.insert(all.end(), s.begin(), s.end());
    const double whole = median_of(all);
    for (size_t p = 0; p < passes; ++p) ratios[p].push_back(whole / median_of(item[p]));
  }
  std::vector<double> speeds;
  for (const auto& r : ratios)
    if (!r.empty()) speeds.push_back(median_of(r));
  return speeds;
}

std::string pass_speeds_text(const std::vector<double>& speeds) {
  std::string each;
  for (size_t p = 0; p < speeds.size(); ++p) each += fmt::format("{}{:.2f}x", p ? ", " : "", speeds[p]);
  return each;
}

std::string pass_drift_warning(const std::vector<double>& speeds, int threads) {
  if (speeds.size() < 2) return "";
  const auto [lo, hi] = std::minmax_element(speeds.begin(), speeds.end());
  if (!(*lo > 0) || *hi / *lo <= 1.10) return "";
  return fmt::format("the compute rates' {} passes at {} thread(s) ran at {} of their median speed ({:.0f}% apart): the "
                     "machine's speed changed while they were measured (other load, a shared host), and the rates with "
                     "it; calibrate again when the machine is quiet",
                     speeds.size(), threads, pass_speeds_text(speeds), 100 * (*hi / *lo - 1));
}

std::string format_profile_summary(const MachineProfile& p) {
  std::string o = fmt::format("profile: {} ({}), {} cores per node, {} node(s), {} ranks, calibrated in {:.1f} s\n", p.device,
                              p.source, p.cores_per_node, p.nodes, p.ranks, p.seconds);
  using G = ReferenceGemm;
  for (const MachineProfile::Rates& r : p.rates)
    o += fmt::format("  {} thread(s): GEMM fp32 {:.1f} GFLOP/s at {} forward{}; attention {:.1f} GFLOP/s at T 256; "
                     "elementwise {:.1f} GB/s{}{}\n",
                     r.threads, p.gemm_gflops(G::M, G::N, G::K, false, false, r.threads), G::name(),
                     p.has_bf16() ? fmt::format(", bf16 {:.1f}", p.gemm_gflops(G::M, G::N, G::K, false, true, r.threads)) : "",
                     p.attention_gflops(256, false, r.threads), r.stream_gbs,
                     r.stream_gbs_by_size.empty() ? ""
                                                  : fmt::format(" ({:.1f} on {:g} KiB activations)", r.stream_gbs_by_size.front(),
                                                                p.stream_bytes.front() / 1024),
                     r.adamw_gbs > 0 ? fmt::format("; AdamW {:.1f} GB/s, one-pass {:.1f}", r.adamw_gbs, r.flat_gbs) : "");
  o += "  ranks computing at once / per-rank rate:";
  for (size_t i = 0; i < p.active.size(); ++i) o += fmt::format(" {}:{:.2f}", p.active[i], p.compute_scale[i]);
  o += "; compute with a collective in flight:";
  for (size_t i = 0; i < p.active.size(); ++i) o += fmt::format(" {}:x{:.2f}", p.active[i], p.overlap_slowdown[i]);
  o += "\n";
  for (const CollectiveFit& f : p.comm)
    if (f.op == "all_reduce")
      o += fmt::format("  all_reduce group {} ({} active{}): alpha {:.1f} us, busbw {:.2f} GB/s\n", f.group, f.active,
                       f.inter_node ? ", across nodes" : "", f.alpha_s * 1e6, f.busbw_gbs);
  return o;
}

}  // namespace mpitron
