#include "mpitron/train/preemption.hpp"

#include <csignal>

#include "mpitron/core/signals.hpp"

namespace mpitron {

void arm_preemption() {
  block_job_signals_and_watch();  // no-op when main() did it (it must: before any thread starts)
  arm_job_signal_recording();
}

void finish_preemption() { finish_job_signal_recording(); }

int preemption_signal() { return recorded_job_signal(); }

int preemption_agreed(Comm& world) {
  // Rank the signals so that the max over ranks picks a scheduler's signal over an interrupt.
  auto rank_of = [](int sig) { return sig == 0 ? 0.0 : sig == SIGINT ? 1.0 : 2.0 + sig; };
  const int mine = recorded_job_signal();
  if (world.size() == 1) return mine;
  const double agreed = world.all_reduce_scalar(rank_of(mine), ReduceOp::max);
  if (agreed == 0.0) return 0;
  if (agreed == 1.0) return SIGINT;
  return static_cast<int>(agreed - 2.0);
}

int preemption_exit_code(int sig) { return sig == SIGINT ? kExitInterrupted : kExitPreempted; }

void reset_preemption() { clear_recorded_job_signal(); }

}  // namespace mpitron
