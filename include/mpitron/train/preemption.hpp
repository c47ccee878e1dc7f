// Preemption: SIGUSR1 / SIGTERM ask the trainer to checkpoint at the next step boundary and exit
// with kExitPreempted (75, EX_TEMPFAIL: "checkpointed, requeue me"; slurm/train.sbatch requeues
// on it); SIGINT (Ctrl-C) does the same and exits with 130, and a second Ctrl-C quits at once.
// The signals are never handled asynchronously (core/signals.hpp says why): the watcher thread
// records them and the ranks agree at the step boundary with one tiny all-reduce (a signal may
// reach only some ranks, or reach them during different steps), so they all save the same step
// and leave together. Further signals while the checkpoint is being written change nothing: the
// first one is already recorded, and the file appears only by rename when complete.
#pragma once
#include "mpitron/distributed/comm.hpp"

namespace mpitron {

constexpr int kExitPreempted = 75;
constexpr int kExitInterrupted = 130;  // 128 + SIGINT, what shells report for Ctrl-C

// Training from here on: job signals are recorded for the step boundary (idempotent). main() has
// already blocked them in every thread (block_job_signals_and_watch).
void arm_preemption();
// Training ended without an agreed signal: a signal from here on (or since the last boundary)
// is reported as late and the process exits normally (core/signals.hpp).
void finish_preemption();
// The first signal this process received (SIGUSR1, SIGTERM or SIGINT), 0 when none.
int preemption_signal();
// Collective over `world`: the signal to act on (0: none, keep going). SIGUSR1/SIGTERM on any
// rank win over SIGINT, so a scheduler's preemption is always a requeue.
int preemption_agreed(Comm& world);
// The exit code for an agreed signal: kExitInterrupted for SIGINT, kExitPreempted otherwise.
int preemption_exit_code(int sig);
// For tests: forget a received signal.
void reset_preemption();

}  // namespace mpitron
