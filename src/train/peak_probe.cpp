#include "mpitron/train/peak_probe.hpp"

#include <algorithm>
#include <chrono>

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
