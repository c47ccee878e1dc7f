// Batches for one data-parallel rank, read from HDF5 shards (docs/data.md).
//
// DataLoader: training. Sample i = tokens [i*seq_len, i*seq_len + seq_len + 1) of the
// concatenated <split>_*.h5 shards; a DistributedSampler (sampler.hpp) picks this rank's samples
// each epoch; a background thread keeps up to `prefetch` batches ready in a bounded queue.
// An epoch gives this rank samples_per_epoch() samples = batches_per_epoch() full micro-batches
// (a tail shorter than micro_batch is skipped); then next() moves to the next epoch by itself.
//
// ValidationLoader: fixed, unshuffled batches over <val>_*.h5, spread over DP ranks: batch k of
// rank r holds samples (k*dp + r)*micro_batch + j, j < micro_batch.
//
// Blends (LoaderOptions::blend, data.paths): several corpora, each a prep folder, sampled by
// weight through a BlendIndex (blend.hpp) over their samples; validation blends their val
// splits the same way, unshuffled.
//
// Loss masks (a shard's /loss_mask, shard.hpp): a target whose mask byte is 0 becomes -1.
// Document masking (document_mask): a document's segment is the token before its first one (the
// previous document's end-of-text, which opens it as GPT-2's <|endoftext|> opens a prompt) and its
// tokens, so its own end-of-text is its last target; Batch::positions restart at every segment.
//
// Both throw UsageError naming the folder/file for bad input (no shards, not HDF5, no /tokens,
// disagreeing shards or tokenizers, seq_len larger than the data) and Error for tokens >= vocab_size.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mpitron {

struct SamplerState {
  uint64_t epoch = 0;
  uint64_t position = 0;  // samples already taken by this rank in this epoch
  bool operator==(const SamplerState&) const = default;
};

struct Batch {
  int batch = 0, seq_len = 0;
  // [batch * seq_len] row-major; targets = inputs shifted by one, -1 where the data's loss mask
  // says the token is not trained on.
  std::vector<int32_t> inputs, targets;
  // data.document_mask: each input token's position in its document ([batch * seq_len]; a window
  // starts at position 0 and every document's segment at its own), which attention is masked
  // by (a token sees the tokens of its own segment); empty: positions 0 .. seq_len - 1, causal.
  std::vector<int32_t> positions;
};

struct LoaderOptions {
  std::string dir;  // one corpus, or (blend not empty) ignored
  std::vector<std::pair<std::string, double>> blend;  // corpora and weights (data.paths)
  std::string split = "train";
  int seq_len = 0;
  int micro_batch = 1;
  int dp_size = 1;
  int dp_rank = 0;
  uint64_t seed = 1234;
  bool shuffle = true;
  bool drop_last = true;
  int prefetch = 4;  // batches kept ready; 0 = read synchronously in next()
  bool document_mask = false;  // fill Batch::positions from the shards' /doc_offsets
  // > 0 (train.reproducible): the global batch in samples; the sampler deals whole micro-batches
  // and epochs of whole global batches, the same at any dp (sampler.hpp "Blocks").
  int64_t global_batch = 0;
};

class TokenDataset;

class DataLoader {
 public:
  explicit DataLoader(const LoaderOptions& opt);  // opens all <split>_*.h5 shards in dir
  ~DataLoader();                                   // stops the prefetch thread
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  void next(Batch& b);  // next micro-batch for this DP rank; rolls over to the next epoch by itself
  SamplerState state() const;  // restore(state()) on a fresh loader yields exactly the next batch
  void restore(const SamplerState& s);
  int64_t samples_per_epoch() const;  // per rank
  int64_t batches_per_epoch() const;  // per rank: samples_per_epoch() / micro_batch
  int64_t num_tokens() const;         // in the split's shards (all corpora)
  int vocab_size() const;
  int eot() const;
  const std::string& tokenizer_json() const;
  // One line on the data: the folder and its samples, or the blend's realised mix per epoch
  // ("data/web 0.700 (7000 of 10000 samples, 1.40 passes), ...").
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Corpora;  // one corpus or a blend (loader.cpp)

class ValidationLoader {
 public:
  // max_batches <= 0: every full batch the data allows (per rank).
  explicit ValidationLoader(const LoaderOptions& opt, int64_t max_batches = 0);
  ValidationLoader(const ValidationLoader&) = delete;
  ValidationLoader& operator=(const ValidationLoader&) = delete;
  ~ValidationLoader();
  bool next(Batch& b);  // false after the last batch (until reset())
  void reset();
  int64_t num_batches() const;  // per rank, the same on every rank
  int vocab_size() const;
  int eot() const;

 private:
  std::unique_ptr<Corpora> data_;
  LoaderOptions opt_;
  int64_t num_batches_ = 0, next_ = 0;
};

}  // namespace mpitron
