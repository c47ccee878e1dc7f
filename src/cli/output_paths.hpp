// No output destroys an input: the commands that read files and write others (export, import,
// calibrate, prep) check their output path against their inputs before they read or write
// anything. Private to src/cli, like option_values.hpp.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "mpitron/core/error.hpp"

namespace mpitron {

// UsageError unless `out` (the value of option `opt` of command `cmd`) is apart from every input:
// not the same file (through symbolic links, `..` and hard links) and not inside an input folder.
inline void check_output_apart(const std::string& cmd, const std::string& opt, const std::string& out,
                               const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path o = fs::weakly_canonical(fs::absolute(out, ec), ec);
  for (const std::string& in : inputs) {
    if (in.empty()) continue;
    std::error_code ei;
    const fs::path i = fs::weakly_canonical(fs::absolute(in, ei), ei);
    const bool same = o == i || (fs::exists(out, ei) && fs::exists(in, ei) && fs::equivalent(out, in, ei));
    usage_check(!same, "{}: {} '{}' is the input '{}': the output would destroy it; write somewhere else", cmd, opt,
                out, in);
    if (fs::is_directory(i, ei)) {
      const auto rel = o.lexically_relative(i);
      const bool inside = !rel.empty() && *rel.begin() != "..";
      usage_check(!inside, "{}: {} '{}' lies inside the input folder '{}': the output could replace its files; write "
                  "outside it", cmd, opt, out, in);
    }
  }
}

}  // namespace mpitron
