// The results file of gpu_check (bench/gpu): markdown lines to stdout and the file, a failure count.
#pragma once
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

namespace mpitron::gpu_check {

constexpr double kPeakTflops = 989.0;  // H200 SXM dense bf16, datasheet

// Every line goes to stdout and, flushed at once, to the results file: a run cut short by the
// time limit still leaves what it measured.
struct Report {
  explicit Report(const char* path, bool append = false)
      : file(path, append ? std::ios::out | std::ios::app : std::ios::out) {}
  std::ofstream file;
  int failures = 0;
  template <class... A>
  void line(fmt::format_string<A...> f, A&&... a) {
    std::string s = fmt::format(f, std::forward<A>(a)...);
    file << s << "\n" << std::flush;
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  }
};

}  // namespace mpitron::gpu_check
