// DistributedSampler with torch.utils.data.DistributedSampler's semantics.
//
// N samples, D = num_replicas (the DP size), r = rank (the DP rank):
//   order   = shuffle ? a permutation of 0..N-1 seeded by (seed, epoch) : 0..N-1
//   drop_last: num_samples = floor(N / D), the tail of `order` is dropped;
//   else:      num_samples = ceil(N / D), `order` is padded by repeating its start;
//   rank r takes order[r], order[r + D], order[r + 2D], ... (num_samples of them).
// Worked example: N = 10, D = 4, no shuffle. drop_last: rank 1 gets 1, 5. Padded (12 slots,
// order = 0..9,0,1): rank 1 gets 1, 5, 9; rank 3 gets 3, 7, 1.
//
// Blocks (train.reproducible): with block = b and round = R (the global batch in samples, a
// multiple of D x b), rank r takes whole blocks of b: its i-th sample is order[((i / b) D + r) b
// + i % b], so global micro-batch g of a step is order[g b, (g+1) b) at any D; and an epoch is
// whole rounds (drop_last: floor(N / R) x R samples; else ceil, padded), the same at any D.
// Every rank with the same DP index (its tensor/pipeline peers) computes the same indices;
// no communication is needed. The permutation is Fisher-Yates over the counter RNG
// (core/rng.hpp), so it is the same on every machine and compiler.
#pragma once
#include <cstdint>
#include <vector>

namespace mpitron {

class DistributedSampler {
 public:
  DistributedSampler(int64_t num_total, int num_replicas, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false, int block = 1, int64_t round = 0);
  void set_epoch(uint64_t epoch);
  uint64_t epoch() const { return epoch_; }
  int64_t num_samples() const { return num_samples_; }  // per rank per epoch
  int64_t total_size() const { return num_samples_ * replicas_; }
  // The i-th sample index of this rank in the current epoch, 0 <= i < num_samples().
  int64_t operator[](int64_t i) const;
  std::vector<int64_t> indices() const;  // all of this rank's indices this epoch

 private:
  int64_t n_, num_samples_;
  int replicas_, rank_, block_ = 1;
  bool shuffle_;
  uint64_t seed_, epoch_ = 0;
  std::vector<int64_t> perm_;  // only when shuffle
};

}  // namespace mpitron
