// Typed values of command-line options (not job keys, which config/job_config.cpp parses): one place for
// the checks and the error wording every subcommand uses.
#pragma once
#include <cstdint>
#include <string>

#include "mpitron/core/error.hpp"

namespace mpitron {

// "--iters 20" -> 20; UsageError naming the option unless the whole text is an integer >= lo.
inline int option_int(const std::string& opt, const std::string& v, int lo) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  usage_check(used == v.size() && used > 0 && n >= lo, "option {} expects an integer >= {}, not '{}'", opt, lo, v);
  return n;
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

}  // namespace mpitron
