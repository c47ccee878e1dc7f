// The training loop: data -> micro-batches -> forward/backward -> gradient sync over DP ->
// global grad-norm clip -> AdamW -> log (rank 0) -> evaluate. Loss is normalised by the number
// of target tokens in the whole global batch (DESIGN.md), so every layout computes the same
// update as the single-rank run.
#pragma once
#include <memory>

#include "mpitron/config/job_config.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/distributed/launch.hpp"

namespace mpitron {

struct TrainResult {
  int steps_done = 0;
  double first_loss = 0, last_loss = 0;
  double first_val_loss = -1, last_val_loss = -1;
  int skipped_steps = 0, consecutive_skips = 0;  // train.nan_policy = "skip"
  int preempted = 0;  // the agreed job signal (SIGUSR1/SIGTERM/SIGINT): checkpointed, the caller exits
                     // with preemption_exit_code(preempted)
};

// Runs cfg.train.steps steps on this rank's share of the grid. Collective: every rank calls it.
TrainResult run_training(const JobConfig& cfg, const LaunchInfo& launch, ProcessGrid& grid);

}  // namespace mpitron
