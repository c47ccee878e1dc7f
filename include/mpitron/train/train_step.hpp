// One training step, the same on every device and layout: forward and backward of every
// micro-batch through the pipeline schedule (pp = 1: plain accumulation), gradient sync over data
// parallel, the loss and the gradient norm over the whole grid, clipping, AdamW; and what happens
// to a step whose loss or gradient norm is not finite (train.nan_policy). The loss is
// normalised by the target tokens of the whole global batch, so every layout takes
// the single-rank run's update.
#pragma once
#include <vector>

#include "mpitron/data/loader.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/parallel/pipeline.hpp"
#include "mpitron/train/train_backend.hpp"
#include "mpitron/train/train_checkpoint.hpp"
#include "mpitron/train/train_result.hpp"

namespace mpitron {

struct StepOutcome {
  double loss = 0, grad_norm = 0;  // over the whole grid: every rank holds the same values
  double trained_tokens = 0;       // the targets the loss counted (train_step's n_tokens)
  double attention_fraction = 1;   // StepTokenCounts::attention_fraction of the global batch
  // false: the loss or the gradient norm is not finite; nothing was updated (train.nan_policy
  // decides what happens next).
  bool updated = false;
  PipelineStepStats schedule;  // the schedule's timings on this rank (pipeline idle per stage)
};

// `batches`: this rank's micro-batches of the step; `n_tokens`: the global batch's target tokens.
// grad_clip <= 0: no clipping. reproducible: the loss and gradient norm summed exactly
// (train.reproducible). Collective over the grid.
StepOutcome train_step(TrainBackend& backend, ProcessGrid& grid, const std::vector<Batch>& batches, double n_tokens,
                       double lr, double grad_clip, bool reproducible = false);

// train.nan_policy for a step whose loss or grad norm is not finite: "skip" -> true (the caller
// skips the optimizer step), an Error at train.nan_skip_limit consecutive ones; "stop" ->
// checkpoint of the last good step (unless it holds NaN/inf too), then an Error.
bool skip_non_finite_step(const JobConfig& cfg, TrainCheckpointer& ckpt, TrainResult& result, int step, double loss,
                          double grad_norm, bool rank0);

}  // namespace mpitron
