// The hang watchdog, on every backend: a collective or point-to-point
// operation that has not completed within comm.timeout_s is a fatal error for the whole job,
// and the message says which operation, on which group (its world ranks), at which step and
// phase, and which ranks did not arrive.
//
// How: every blocking wait is registered while it lasts (wait_registry.hpp). A thread of the
// watchdog's own looks at the waits twice a second. When one has lasted past its limit, it
//   1. asks every other member of that group (or the peer of a point-to-point operation), over a
//      duplicate of MPI_COMM_WORLD reserved for this, where they are: each rank's watchdog thread
//      answers with how many collectives it has started on that group, its step and phase and
//      what it is waiting in. A member whose count is below the hung collective's number has not
//      arrived; one that does not answer within a few seconds is stopped, dead or unreachable;
//   2. prints the hang, the ranks that did not arrive and why, and tells every rank, whose
//      watchdog then prints where that rank is (so every rank that can still run says where it
//      waited);
//   3. after a short grace period, MPI_Abort()s the job with kExitHang.
// A SIGSTOPped rank answers nothing (its watchdog thread is stopped too); a rank stuck in a
// computation answers "not waiting on communication". Needs MPI_THREAD_MULTIPLE for the questions
// (mpitron asks for it); without it the watchdog reports its own wait only, then aborts.
#pragma once
#include <mpi.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mpitron/distributed/wait_registry.hpp"
#include "mpitron/distributed/launch.hpp"

namespace mpitron {

constexpr int kExitHang = 124;  // as coreutils timeout: "the job timed out waiting"

struct WatchdogOptions {
  double timeout_s = 300;      // comm.timeout_s: a wait longer than this is a hang
  double answer_wait_s = 2;    // how long the reporting rank waits for its peers' answers (they answer in ~0.2 s)
  double grace_s = 3;          // report -> MPI_Abort: time for the other ranks to print theirs
};

class HangWatchdog {
 public:
  // Collective over MPI_COMM_WORLD (duplicates it). Starts nothing on a single rank or when
  // timeout_s <= 0 (the watchdog is off).
  HangWatchdog(const LaunchInfo& launch, const WatchdogOptions& opt);
  ~HangWatchdog();  // stops the thread (not collective)
  HangWatchdog(const HangWatchdog&) = delete;
  HangWatchdog& operator=(const HangWatchdog&) = delete;

 private:
  void run();
  void serve();                   // answers questions, prints notices
  [[noreturn]] void fire(const WaitInProgress& w, double limit);
  std::string where() const;      // "at step 12 (phase 'grad sync'), waiting 3.1 s in ..."
  void say(const std::string& text) const;

  LaunchInfo launch_;
  WatchdogOptions opt_;
  bool multiple_ = false;  // MPI_THREAD_MULTIPLE: questions and answers possible
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool noticed_ = false;
  struct Outgoing {  // an answer or notice in flight: its buffer lives until MPI is done with it
    MPI_Request req = MPI_REQUEST_NULL;
    std::string text;
  };
  std::vector<std::unique_ptr<Outgoing>> outgoing_;
  void post(int dest, int tag, std::string text);
};

// True while a HangWatchdog thread runs in this process (NcclComm then leaves the reporting to it).
bool hang_watchdog_running();

}  // namespace mpitron
