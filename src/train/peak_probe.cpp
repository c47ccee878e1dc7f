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
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    ops.matmul_forward(out.data(), a.data(), w.data(), nullptr, M, K, N);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * M * K * N / best;
}

}  // namespace mpitron
