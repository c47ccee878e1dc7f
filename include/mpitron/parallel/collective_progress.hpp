// Non-blocking collectives in flight during one training step: who drives them forward, and how
// long communication took and how much of it the step actually waited for.
//
// Why progress needs care on the CPU backend: Open MPI's non-blocking collectives (coll/libnbc)
// advance only inside MPI calls ("OMPI progress: no" in ompi_info). A gradient bucket started at
// the top of backward with nobody calling MPI until the step waits has overlapped nothing: all
// rounds of its algorithm run inside the final wait. Three modes (parallel.dp_progress):
//   thread: a progress thread calls MPI_Test on every op in flight, then sleeps ~100 us
//           (needs MPI_THREAD_MULTIPLE, which mpitron requests). The default: see
//           bench/results/dp.md for the measurements behind it.
//   poll:   the model's unit hooks call poll() between layers (one MPI_Test per op per layer).
//   none:   nothing until wait() (the no-overlap baseline).
// Completion callbacks (copy a reduced shard, free a bucket) always run on the caller's thread,
// from poll() or wait(), never on the progress thread.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mpitron/distributed/comm.hpp"

namespace mpitron {

enum class ProgressMode { none, poll, thread };
ProgressMode parse_progress_mode(const std::string& s);  // UsageError naming the allowed values
const char* progress_mode_name(ProgressMode m);

// Communication time of one step. comm_ms: wall time during which at least one operation was in
// flight (the union of their intervals, blocking calls included); exposed_ms: time the compute
// thread sat blocked on communication. overlap = 1 - exposed / comm (1: fully hidden).
struct CommTiming {
  double comm_ms = 0, exposed_ms = 0;
  double overlap() const { return comm_ms > 0 ? 1.0 - exposed_ms / comm_ms : 1.0; }
};

class CommProgress {
 public:
  explicit CommProgress(ProgressMode mode);
  ~CommProgress();
  CommProgress(const CommProgress&) = delete;
  CommProgress& operator=(const CommProgress&) = delete;

  using Handle = size_t;
  // Takes a started operation; on_done runs (on this thread) once it has completed.
  Handle add(Request r, std::function<void()> on_done = {});
  // Tests the ops in flight (poll mode) and runs the callbacks of completed ones (every mode).
  void poll();
  void wait(Handle h);  // blocks until h completed and its callback ran (exposed time)
  void wait_all();
  bool done(Handle h) const;
  // A blocking collective: timed as both in flight and exposed.
  void blocking(const std::function<void()>& f);
  // Since the last call: the operations that finished (their callbacks ran), each counted in the
  // period it finishes in; one still in flight stays for the next call (ZeRO-1/2's parameter
  // gathers, launched after the optimizer step and waited for in the next step's forward).
  CommTiming take_timing();
  ProgressMode mode() const { return mode_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Op {
    std::function<void()> on_done;  // may own the op's buffers: declared first, destroyed last
    Request req;                    // (a request still in flight waits in its destructor)
    Clock::time_point start, end;
    bool complete = false;  // request finished (guarded by mu_)
    bool finished = false;  // callback ran (caller thread only)
  };
  void finish(Op& op);  // caller thread: run the callback once
  static std::string op_name(const Op& op);  // for the timeline: "MPI_Iallreduce (31168 x f32)"
  void progress_loop();

  ProgressMode mode_;
  mutable std::mutex mu_;
  std::condition_variable cv_done_, cv_work_;
  std::map<Handle, std::shared_ptr<Op>> ops_;  // not yet taken by take_timing, by handle
  Handle next_handle_ = 0;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> intervals_;
  double exposed_ms_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mpitron
