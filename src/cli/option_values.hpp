// Typed values of command-line options (not job keys, which config/job_config.cpp parses): one place for
// the checks and the error wording every subcommand uses.
#pragma once
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

}  // namespace mpitron
