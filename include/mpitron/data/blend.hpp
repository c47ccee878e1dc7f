// Weighted blends of corpora (data.paths), Megatron's BlendedDataset semantics, deterministic.
//
// Corpus k holds n[k] samples (of seq_len + 1 tokens) and has weight w[k] (normalised). A blended
// epoch has N = sum n[k] positions; position p is a draw of corpus corpus(p), filled greedily so
// that every prefix of the epoch is as close to the weights as it can be (Megatron's
// build_blending_indices: position i goes to the corpus with the largest w[k] (i + 1) - drawn[k],
// ties to the lowest k). Corpus k gets draws(k) = round(w[k] N) draws per epoch (within one).
// Draw j of corpus k over the whole run (epoch e's draws come after epoch e-1's) is sample
// perm_k,c[j mod n[k]] with c = j / n[k] the corpus's own pass: every pass a fresh permutation of
// the corpus seeded by (seed, k, c). A small corpus with a large weight is repeated, a large one
// with a small weight is read partly per blended epoch; no sample repeats inside a pass.
//
// The DistributedSampler shuffles the N positions per epoch and splits them over DP ranks as for
// one corpus, so every layout sees the same global batches (the golden rule), and a sampler state
// (epoch, position) fixes the blend's position exactly (resume).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace mpitron {

class BlendIndex {
 public:
  BlendIndex(std::vector<int64_t> samples, std::vector<double> weights, uint64_t seed);
  int64_t size() const { return static_cast<int64_t>(corpus_.size()); }  // N positions per epoch
  int corpora() const { return static_cast<int>(n_.size()); }
  int64_t draws(int k) const { return draws_[k]; }             // per blended epoch
  double weight(int k) const { return w_[k]; }                 // normalised
  // Position p (< size()) of blended epoch `epoch` -> (corpus, sample index in that corpus).
  std::pair<int, int64_t> sample(int64_t p, uint64_t epoch) const;

 private:
  std::vector<int64_t> n_, draws_;
  std::vector<double> w_;
  std::vector<uint8_t> corpus_;     // per position
  std::vector<int64_t> nth_;        // per position: which draw of its corpus in the epoch
  uint64_t seed_;
};

}  // namespace mpitron
