// What this rank is doing right now: the training step and the phase of it ("forward/backward",
// "grad sync", "optimizer", "eval", "checkpoint save", ...). Written by the thread that runs the
// step, read by the hang watchdog (distributed/watchdog.hpp) for its messages and by the test-only
// fault-injection points (distributed/fault_inject.hpp). Lock-free: a phase is a string literal.
#pragma once

namespace mpitron {

void set_activity_step(int step);  // -1: not in a training step (start-up, shutdown)
int activity_step();
void set_activity_phase(const char* phase);  // a string literal (kept by pointer)
const char* activity_phase();

// Sets the phase for a scope and restores the previous one on exit.
class ActivityPhase {
 public:
  explicit ActivityPhase(const char* phase) : prev_(activity_phase()) { set_activity_phase(phase); }
  ~ActivityPhase() { set_activity_phase(prev_); }
  ActivityPhase(const ActivityPhase&) = delete;
  ActivityPhase& operator=(const ActivityPhase&) = delete;

 private:
  const char* prev_;
};

}  // namespace mpitron
