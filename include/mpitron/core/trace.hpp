// A timeline of training steps (train.trace_steps = [a, b]): Chrome / Perfetto trace-event JSON,
// one file per rank (<run_dir>/trace/rank_<r>.json; open in ui.perfetto.dev or chrome://tracing).
//
// Events are complete events ("ph": "X": a start and a duration in microseconds of
// CLOCK_MONOTONIC, so the ranks of one node line up) on tracks ("tid"), named by metadata events:
//   compute  the step, each unit's forward / backward (embedding, block l, head: DataParallel's
//            unit events), waits for communication, the gradient finish, the optimizer step;
//   data     waiting for the loader's next batch;
//   comm N   each data-parallel collective from launch to completion (CommProgress), one lane
//            per collective in flight at once, so events on a track never overlap;
//   tp       each tensor-parallel collective (blocking, on the compute thread);
//   ep       each expert-parallel token exchange (MoE dispatch and combine, blocking);
//   checkpoint  checkpoint.async: the snapshot (blocking the step) and the background write
//            (its own thread, while training goes on);
//   cp N     each context-parallel ring hop from its post to the end of its wait;
//   pp recv  each pipeline receive from its post to the end of its wait; pp send N: each send
//            from its post until it was seen complete.
// On compute, the pipeline schedule of a step ("pipeline schedule") holds one event per forward
// or backward of a micro-batch ("forward mb 3"), the units' events inside them; the waits for a
// collective, a ring hop or a pipeline message are their own events ("waiting for ...").
// tools/trace_summary.py reads the files back: per step, the data-parallel comm time, the part
// exposed, the overlap, and each stage's pipeline idle fraction, as the log computes them.
// Within a track events nest or are disjoint. Recording costs one clock read per event and only
// while enabled; nothing is recorded otherwise.
#pragma once
#include <chrono>
#include <string>

namespace mpitron::trace {

using Clock = std::chrono::steady_clock;

enum Track : int { compute = 1, data = 2, tp = 3, ep = 4, pp_recv = 5, checkpoint = 6, comm = 10, pp_send = 30, cp = 40 };  // comm, pp_send, cp: + lane

bool enabled();
void set_enabled(bool on);
// One complete event [b, e] on `track`.
void event(const std::string& name, int track, Clock::time_point b, Clock::time_point e);
// On the first lane of `base` (comm, pp_send, cp) whose events all ended by b: events in flight at
// once go on different lanes, so a lane's events never overlap.
void lane_event(const std::string& name, int base, Clock::time_point b, Clock::time_point e);
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
