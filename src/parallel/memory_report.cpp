#include "mpitron/parallel/memory_report.hpp"

#include <fmt/format.h>

namespace mpitron {

std::vector<RankMemory> gather_rank_memory(Comm& comm, const MemTracker& tracker) {
  // fp64 sums of one-hot rows: exact for byte counts below 2^53.
  const size_t k = 2 * kMemCategories + 1, n = static_cast<size_t>(comm.size());
  std::vector<double> v(n * k, 0.0);
  MemStats s = tracker.stats();
  double* mine = v.data() + comm.rank() * k;
  for (size_t c = 0; c < kMemCategories; ++c) {
    mine[c] = static_cast<double>(s.live[c]);
    mine[kMemCategories + c] = static_cast<double>(s.peak[c]);
  }
  mine[2 * kMemCategories] = static_cast<double>(s.total_peak);
  comm.all_reduce_host_f64(v.data(), v.size(), ReduceOp::sum);
  std::vector<RankMemory> out(n);
  for (size_t r = 0; r < n; ++r) {
    out[r].rank = static_cast<int>(r);
    for (size_t c = 0; c < kMemCategories; ++c) {
      out[r].mem.live[c] = static_cast<int64_t>(v[r * k + c]);
      out[r].mem.peak[c] = static_cast<int64_t>(v[r * k + kMemCategories + c]);
      out[r].mem.total_live += out[r].mem.live[c];
    }
    out[r].mem.total_peak = static_cast<int64_t>(v[r * k + 2 * kMemCategories]);
  }
  return out;
}

std::string format_rank_memory(const RankMemory& m, bool with_peaks) {
  std::string s = fmt::format("rank {}:", m.rank);
  for (size_t c = 0; c < kMemCategories; ++c) {
    Mem cat = static_cast<Mem>(c);
    if (m.mem.live[c] == 0 && m.mem.peak[c] == 0) continue;
    s += fmt::format(" {} {}", mem_name(cat), format_bytes(m.mem.live[c]));
    if (with_peaks && m.mem.peak[c] != m.mem.live[c]) s += fmt::format(" (peak {})", format_bytes(m.mem.peak[c]));
  }
  s += fmt::format(" | total {}{}", format_bytes(m.mem.total_live),
                   with_peaks ? fmt::format(" (peak {})", format_bytes(m.mem.total_peak)) : "");
  return s;
}

}  // namespace mpitron
