#include "mpitron/data/sampler.hpp"

#include <numeric>

#include "mpitron/core/error.hpp"
#include "mpitron/core/rng.hpp"

namespace mpitron {

DistributedSampler::DistributedSampler(int64_t num_total, int num_replicas, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last, int block, int64_t round)
    : n_(num_total), replicas_(num_replicas), rank_(rank), block_(block), shuffle_(shuffle), seed_(seed) {
  usage_check(num_replicas >= 1 && rank >= 0 && rank < num_replicas, "sampler: rank {} is not in [0, {})", rank,
              num_replicas);
  usage_check(num_total >= 1, "sampler: the dataset has no samples");
  if (round > 0) {
    usage_check(block >= 1 && round % (int64_t{block} * replicas_) == 0,
                "sampler: a round of {} samples is not whole blocks of {} for each of {} ranks", round, block, replicas_);
    usage_check(!drop_last || n_ >= round,
                "sampler: {} samples hold no whole global batch of {} (drop_last; use more data or a smaller batch)", n_,
                round);
    num_samples_ = (drop_last ? n_ / round : (n_ + round - 1) / round) * (round / replicas_);
  } else {
    num_samples_ = drop_last ? n_ / replicas_ : (n_ + replicas_ - 1) / replicas_;
  }
  usage_check(num_samples_ >= 1, "sampler: {} samples cannot give each of {} data-parallel ranks one (drop_last)", n_,
              replicas_);
  set_epoch(0);
}

void DistributedSampler::set_epoch(uint64_t epoch) {
  epoch_ = epoch;
  if (!shuffle_) return;
  perm_.resize(n_);
  std::iota(perm_.begin(), perm_.end(), int64_t{0});
  // Fisher-Yates, draw i from the counter stream (seed, epoch): the same on every rank.
  const uint64_t stream = stable_hash("sampler") ^ splitmix64(epoch);
  for (int64_t i = n_ - 1; i > 0; --i) {
    uint64_t bits = counter_bits(seed_, stream, static_cast<uint64_t>(i));
    int64_t j = static_cast<int64_t>(static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(i + 1) >> 64);
    std::swap(perm_[i], perm_[j]);
  }
}

int64_t DistributedSampler::operator[](int64_t i) const {
  check(i >= 0 && i < num_samples_, "sampler: position {} outside the epoch's {} samples", i, num_samples_);
  int64_t slot = ((i / block_) * replicas_ + rank_) * block_ + i % block_;
  slot %= n_;  // padding repeats the order from its start (torch: indices += indices[:padding])
  return shuffle_ ? perm_[slot] : slot;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> out(num_samples_);
  for (int64_t i = 0; i < num_samples_; ++i) out[i] = (*this)[i];
  return out;
}

}  // namespace mpitron
