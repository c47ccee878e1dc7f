#include "mpitron/train/peak_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "mpitron/core/memory.hpp"

namespace mpitron {

double measure_peak_flops(Ops& ops) {
  const int64_t M = 1024, K = 768, N = 3072;  // the GPT-2 small MLP up-projection
  Buffer<float> a(Mem::workspace, M * K), w(Mem::workspace, N * K), out(Mem::workspace, M * N);
  for (int64_t i = 0; i < M * K; ++i) a[i] = static_cast<float>((i % 17) - 8) * 0.01f;
  for (int64_t i = 0; i < N * K; ++i) w[i] = static_cast<float>((i % 13) - 6) * 0.01f;
  ops.matmul_forward(out.data(), a.data(), w.data(), nullptr, M, K, N);  // warm-up (JIT, caches)
  // Best of as many runs as fit in ~0.3 s (at least 5): on a shared machine a few runs can all
  // land in someone else's busy moment, and a low probe makes MFU read above 100%.
  double best = 1e30;
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 200; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    ops.matmul_forward(out.data(), a.data(), w.data(), nullptr, M, K, N);
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    if (rep >= 4 && std::chrono::duration<double>(t1 - start).count() > 0.3) break;
  }
  return 2.0 * M * K * N / best;
}

}  // namespace mpitron

namespace mpitron {

CpuPeak cpu_hardware_peak(int threads, bool bf16) {
  CpuPeak p;
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags, vendor;
  int family = 0, siblings = 1, cores_per_pkg = 1;
  double mhz = 0;
  auto value = [](const std::string& l) -> std::string {  // the text after "key\t: "
    const size_t c = l.find(':');
    if (c == std::string::npos) return {};
    const size_t v = l.find_first_not_of(' ', c + 1);
    return v == std::string::npos ? std::string() : std::string(l, v);
  };
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0 && flags.empty()) (flags = value(line)).insert(0, 1, ' ').push_back(' ');
    else if (line.rfind("vendor_id", 0) == 0) vendor = value(line);
    else if (line.rfind("cpu family", 0) == 0) family = std::atoi(value(line).c_str());
    else if (line.rfind("siblings", 0) == 0) siblings = std::max(1, std::atoi(value(line).c_str()));
    else if (line.rfind("cpu cores", 0) == 0) cores_per_pkg = std::max(1, std::atoi(value(line).c_str()));
    else if (line.rfind("cpu MHz", 0) == 0) mhz = std::max(mhz, std::atof(value(line).c_str()));
  }
  std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (f >> khz && khz > 0) mhz = khz / 1e3;
  auto has = [&](const char* flag) {
    std::string word(1, ' ');
    word.append(flag).push_back(' ');
    return flags.find(word) != std::string::npos;
  };
  if (has("avx512f")) {
    const bool amd = vendor == "AuthenticAMD";
    p.flop_per_cycle = amd && family < 26 ? 32 : 64;
    p.isa = amd && family < 26 ? "AVX-512 on 256-bit pipes" : "AVX-512, 2 FMA units";
  } else if (has("avx2") && has("fma")) {
    p.flop_per_cycle = 32, p.isa = "AVX2+FMA";
  } else if (has("avx")) {
    p.flop_per_cycle = 16, p.isa = "AVX";
  } else {
    p.flop_per_cycle = 8, p.isa = "SSE";
  }
  if (bf16 && has("amx_bf16")) p.flop_per_cycle = 1024, p.isa = "AMX-BF16";
  else if (bf16 && has("avx512_bf16")) p.flop_per_cycle *= 2, p.isa += ", AVX512-BF16 dot products";
  const int smt = std::max(1, siblings / cores_per_pkg);
  p.cores = std::max(1, threads / smt);
  p.ghz = mhz / 1e3;
  p.flops = p.ghz > 0 ? p.cores * p.ghz * 1e9 * p.flop_per_cycle : 0;
  return p;
}

}  // namespace mpitron
