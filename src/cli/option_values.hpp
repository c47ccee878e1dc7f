// Typed values of command-line options (not job keys, which config/job_config.cpp parses): one place for
// the checks and the error wording every subcommand uses.
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "mpitron/config/value_rules.hpp"
#include "mpitron/core/error.hpp"

namespace mpitron {

// "--iters 20" -> 20; UsageError naming the option unless the whole text is an integer in the range
// (config/value_rules.hpp: the same rules and wording as job keys and config.json fields).
inline int option_int(const std::string& opt, const std::string& v, const Range& r) {
  return checked_int<int>("option " + opt, v, r);
}
inline int option_int(const std::string& opt, const std::string& v, int lo) { return option_int(opt, v, at_least(lo)); }

// "--mfu 0.4" -> 0.4; UsageError naming the option unless the whole text is a number in the range
// (finite always: inf and nan are refused by name).
inline double option_float(const std::string& opt, const std::string& v, const Range& r) {
  return checked_float("option " + opt, v, r);
}

// "--seed 18446744073709551615" -> that uint64; UsageError naming the option unless the whole text
// is a non-negative integer that fits.
inline uint64_t option_u64(const std::string& opt, const std::string& v) {
  size_t used = 0;
  uint64_t n = 0;
  try {
    if (!v.empty() && v[0] != '-') n = std::stoull(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  usage_check(used == v.size() && used > 0, "option {} expects an integer >= 0, not '{}'", opt, v);
  return n;
}

// "--max-shard-size 5GB" -> 5e9: a number with an optional unit B, KB, MB, GB, TB (powers of 1000,
// as Hugging Face's) or KiB, MiB, GiB, TiB (powers of 1024); > 0.
inline uint64_t option_bytes(const std::string& opt, const std::string& v) {
  static const std::pair<const char*, double> units[] = {{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                                                         {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},
                                                         {"GB", 1e9}, {"TB", 1e12}, {"B", 1.0}};
  double scale = 1;
  std::string num = v;
  for (const auto& [u, f] : units) {
    const std::string us(u);
    if (num.size() > us.size() && num.compare(num.size() - us.size(), us.size(), us) == 0) {
      num.resize(num.size() - us.size());
      scale = f;
      break;
    }
  }
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(num, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const double bytes = x * scale;
  usage_check(used == num.size() && used > 0 && bytes >= 1 && bytes < 1.8e19,
              "option {} expects a size > 0 such as 5GB, 500MB or 2GiB, not '{}'", opt, v);
  return static_cast<uint64_t>(bytes);
}

}  // namespace mpitron
