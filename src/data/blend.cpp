// BlendIndex (blend.hpp).
#include "mpitron/data/blend.hpp"

#include <cmath>
#include <memory>
#include <numeric>

#include "mpitron/core/error.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/data/sampler.hpp"

namespace mpitron {

BlendIndex::BlendIndex(std::vector<int64_t> samples, std::vector<double> weights, uint64_t seed)
    : n_(std::move(samples)), w_(std::move(weights)), seed_(seed) {
  check(!n_.empty() && n_.size() == w_.size() && n_.size() <= 255, "BlendIndex: {} corpora, {} weights (1..255)",
        n_.size(), w_.size());
  const double total_w = std::accumulate(w_.begin(), w_.end(), 0.0);
  for (size_t k = 0; k < n_.size(); ++k) {
    check(n_[k] > 0 && w_[k] > 0, "BlendIndex: corpus {} has {} samples and weight {}", k, n_[k], w_[k]);
    w_[k] /= total_w;
  }
  const int64_t N = std::accumulate(n_.begin(), n_.end(), int64_t{0});
  corpus_.resize(static_cast<size_t>(N));
  nth_.resize(static_cast<size_t>(N));
  draws_.assign(n_.size(), 0);
  for (int64_t i = 0; i < N; ++i) {
    size_t best = 0;
    double best_err = -INFINITY;
    for (size_t k = 0; k < n_.size(); ++k) {
      const double err = w_[k] * static_cast<double>(i + 1) - static_cast<double>(draws_[k]);
      if (err > best_err) best_err = err, best = k;
    }
    corpus_[static_cast<size_t>(i)] = static_cast<uint8_t>(best);
    nth_[static_cast<size_t>(i)] = draws_[best]++;
  }
}

std::pair<int, int64_t> BlendIndex::sample(int64_t p, uint64_t epoch) const {
  check(p >= 0 && p < size(), "BlendIndex: position {} outside [0, {})", p, size());
  const int k = corpus_[static_cast<size_t>(p)];
  const uint64_t j = epoch * static_cast<uint64_t>(draws_[k]) + static_cast<uint64_t>(nth_[static_cast<size_t>(p)]);
  const uint64_t pass = j / static_cast<uint64_t>(n_[k]);
  // This corpus's permutation for its pass (cached per thread: consecutive draws share it).
  thread_local std::vector<std::pair<uint64_t, std::unique_ptr<DistributedSampler>>> cache;
  const uint64_t key = splitmix64(seed_ ^ (0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(k) + 1)));
  auto& slot = cache.size() > static_cast<size_t>(k) ? cache[k] : (cache.resize(k + 1), cache[k]);
  if (!slot.second || slot.first != key || slot.second->epoch() != pass || slot.second->num_samples() != n_[k]) {
    slot.second = std::make_unique<DistributedSampler>(n_[k], 1, 0, true, key);
    slot.second->set_epoch(pass);
    slot.first = key;
  }
  return {k, (*slot.second)[static_cast<int64_t>(j % static_cast<uint64_t>(n_[k]))]};
}

}  // namespace mpitron
