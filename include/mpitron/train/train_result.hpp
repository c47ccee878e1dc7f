// What a training run reports back to its caller (cmd_train, the GPU emulation): the steps done,
// the losses, the non-finite steps skipped and whether the job signal stopped it.
#pragma once

namespace mpitron {

struct TrainResult {
  int steps_done = 0;
  double first_loss = 0, last_loss = 0;
  double first_val_loss = -1, last_val_loss = -1;
  int skipped_steps = 0, consecutive_skips = 0;  // train.nan_policy = "skip"
  int preempted = 0;  // the agreed job signal (SIGUSR1/SIGTERM/SIGINT): checkpointed, the caller exits
                     // with preemption_exit_code(preempted)
};

}  // namespace mpitron
