// The training loop: data -> micro-batches -> forward/backward -> gradient sync over DP ->
// global grad-norm clip -> AdamW -> log (rank 0) -> evaluate. Loss is normalised by the number
// of target tokens in the whole global batch, so every layout computes the same
// update as the single-rank run.
#pragma once
#include <memory>

#include "mpitron/config/job_config.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/distributed/launch.hpp"
#include "mpitron/train/train_result.hpp"

namespace mpitron {

// Runs cfg.train.steps steps on this rank's share of the grid. Collective: every rank calls it.
TrainResult run_training(const JobConfig& cfg, const LaunchInfo& launch, ProcessGrid& grid);

}  // namespace mpitron
