// The data side of training, whatever the backend: what the loop (train_loop.cpp) sets up before
// its first step (the batch arithmetic, the model config resolved against the data's tokenizer,
// this DP rank's training and validation loaders) and each step's micro-batches.
#pragma once
#include <memory>
#include <vector>

#include "mpitron/config/job_config.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/model/config.hpp"

namespace mpitron {

// global_batch sequences per step = micro_batch x dp x accumulation steps (the layout rules,
// parallel/layout_rules.hpp, refuse a batch that does not split so).
struct BatchPlan {
  int micro = 1, global = 1, accum = 1;
};
BatchPlan plan_batches(const JobConfig& cfg, int dp);

// The job's model: model.* (a preset and its overrides), or an HF folder's config.json when
// train.init_from = "hf:DIR"; vocab_size still 0 when the data's tokenizer is to decide it.
ModelConfig job_model_config(const JobConfig& cfg);

struct TrainData {
  ModelConfig model;  // cfg.model with vocab_size taken from the data when the job leaves it 0
  std::unique_ptr<DataLoader> train;
  std::unique_ptr<ValidationLoader> val;  // nullptr: eval.batches = 0 or no val_*.h5 (noted on `print_notes`)
};
// eval.batches counts global batches, so every layout evaluates the same sequences.
TrainData open_train_data(const JobConfig& cfg, const BatchPlan& bp, int dp, int dp_rank, bool print_notes);

// What one rank's micro-batches of a step hold, summed: target tokens (targets >= 0; the loss
// normaliser is the global batch's count, needed before the first backward) and, with document
// masking, the keys their queries see (each its position in its document + 1) and the keys
// causal attention would (its index + 1). The trainer sums them over dp in one reduction.
struct StepTokenCounts {
  double targets = 0, keys_seen = 0, keys_causal = 0;
  // The share of causal attention's work the documents need (1 without document masking).
  double attention_fraction() const { return keys_causal > 0 ? keys_seen / keys_causal : 1.0; }
};
// Fills every micro-batch of the step; returns this rank's counts.
StepTokenCounts fetch_step_batches(DataLoader& data, std::vector<Batch>& batches);

}  // namespace mpitron
