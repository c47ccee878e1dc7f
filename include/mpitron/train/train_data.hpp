// What the training loop (trainer.cpp) sets up before its first step, whatever the backend: the
// batch arithmetic, the model config resolved against the data's tokenizer, and this DP rank's
// training and validation loaders.
#pragma once
#include <memory>

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

}  // namespace mpitron
