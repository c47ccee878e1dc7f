// A timeline of training steps (train.trace_steps = [a, b]): Chrome / Perfetto trace-event JSON,
// one file per rank (<run_dir>/trace/rank_<r>.json; open in ui.perfetto.dev or chrome://tracing).
//
// Events are complete events ("ph": "X": a start and a duration in microseconds of
// CLOCK_MONOTONIC, so the ranks of one node line up) on tracks ("tid"), named by metadata events:
//   compute  the step, each unit's forward / backward (embedding, block l, head: DataParallel's
//            unit events), waits for communication, the gradient finish, the optimizer step;
//   data     waiting for the loader's next batch;
//   comm N   each data-parallel collective from launch to completion (CommProgress), one lane
//            per collective in flight at once, so events on a track never overlap.
// Within a track events nest or are disjoint. Recording costs one clock read per event and only
// while enabled; nothing is recorded otherwise.
#pragma once
#include <chrono>
#include <string>

namespace mpitron::trace {

using Clock = std::chrono::steady_clock;

enum Track : int { compute = 1, data = 2, comm = 10 };  // comm + lane

bool enabled();
void set_enabled(bool on);
// One complete event [b, e] on `track`.
void event(const std::string& name, int track, Clock::time_point b, Clock::time_point e);
// Writes the events recorded so far (and clears them) to `path` as trace-event JSON for `rank`.
void write(const std::string& path, int rank);

// Records [construction, destruction] on `track` when tracing is enabled at construction.
class Span {
 public:
  Span(std::string name, int track = compute) : on_(enabled()) {
    if (on_) name_ = std::move(name), track_ = track, b_ = Clock::now();
  }
  ~Span() {
    if (on_) event(name_, track_, b_, Clock::now());
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  bool on_;
  std::string name_;
  int track_ = compute;
  Clock::time_point b_;
};

}  // namespace mpitron::trace
