// Preemption: SIGUSR1 / SIGTERM ask the trainer to checkpoint at the next step boundary and exit
// with kExitPreempted (75, EX_TEMPFAIL: "checkpointed, requeue me"; slurm/train.sbatch requeues
// on it). The handler only records the signal (async-signal-safe); the ranks agree at the step
// boundary with one tiny all-reduce (a signal may reach only some ranks, or reach them during
// different steps), so they all save the same step and leave together. Further signals while the
// checkpoint is being written change nothing: the flag is already set, and the file appears only
// by rename when complete.
#pragma once
#include "mpitron/dist/comm.hpp"

namespace mpitron {

constexpr int kExitPreempted = 75;

// Installs the handlers (idempotent). cmd_train calls it first thing.
void install_preemption_handlers();
// The first signal this process received (SIGUSR1 or SIGTERM), 0 when none.
int preemption_signal();
// Collective over `world`: the largest signal number any rank received (0: none, keep going).
int preemption_agreed(Comm& world);
// For tests: forget a received signal.
void reset_preemption();

}  // namespace mpitron
