// Every blocking wait on communication is registered while it lasts (a CommWait scope), so that
//  - the hang watchdog (distributed/watchdog.hpp) can tell which operation on which group a rank has
//    been waiting in, and for how long, and answer its peers' questions about it;
//  - the straggler report can split a rank's step time into work and waiting (a slow rank waits
//    least: the others wait for it).
// Comm implementations open the scopes (MpiComm around every blocking call and Request::wait,
// NcclComm around its stream waits, CommProgress around a thread-mode wait); code that blocks in
// something else collective (parallel HDF5 I/O) opens one with a description of its own.
//
// Cost: a scope is a clock read and an uncontended mutex per wait; nothing when not waiting.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpitron/core/dtype.hpp"

namespace mpitron {

// One communication group as the watchdog sees it: its name, its members' world ranks, and how
// many collectives this rank has started on it. Every member calls a group's collectives in the
// same order, so "collective #n of group dp" names the same operation on every member, and a
// member whose count is below n has not called it yet. Registered by name while it exists.
class CommGroupInfo {
 public:
  CommGroupInfo(std::string name, std::vector<int> world_ranks);
  ~CommGroupInfo();
  CommGroupInfo(const CommGroupInfo&) = delete;
  CommGroupInfo& operator=(const CommGroupInfo&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  uint64_t next_collective() { return started_.fetch_add(1, std::memory_order_relaxed) + 1; }
  uint64_t collectives_started() const { return started_.load(std::memory_order_relaxed); }
  std::string describe() const;  // "'dp' (world ranks 0,2)"

 private:
  std::string name_;
  std::vector<int> world_ranks_;
  std::atomic<uint64_t> started_{0};
};

// The registered group named `name` (the first one, when tests make several), or nullptr.
// Answers to peers go through it; the group must not be destroyed while the answer is built,
// which holds because groups live as long as the ProcessGrid, beyond the watchdog's life.
const CommGroupInfo* find_comm_group(const std::string& name);

// What a wait waits for.
struct CommOpTag {
  const CommGroupInfo* group = nullptr;  // nullptr: not a Comm (see `what`)
  const char* op = "";                   // "MPI_Allreduce", "MPI_Wait(MPI_Iallgatherv)", ...
  uint64_t seq = 0;                      // collective number on the group (0: point-to-point / unknown)
  int peer = -1;                         // point-to-point: the peer's world rank
  size_t count = 0;
  DType dtype = DType::f32;
  const char* what = nullptr;  // a free description when group is nullptr ("parallel HDF5 checkpoint write")
  double limit_s = 0;          // seconds before the watchdog calls it a hang (0: comm.timeout_s)
};

// The scope of one blocking wait on this thread. Nests (the inner wait is the one reported).
class CommWait {
 public:
  explicit CommWait(const CommOpTag& tag);
  ~CommWait();
  CommWait(const CommWait&) = delete;
  CommWait& operator=(const CommWait&) = delete;

 private:
  int slot_ = -1;
  bool saved_active_ = false;
  CommOpTag saved_tag_;
  int64_t saved_since_ns_ = 0;
  int64_t start_ns_ = 0;
};

// Seconds the calling thread has spent inside CommWait scopes (outermost ones) since it started.
double thread_comm_wait_seconds();

// A wait in progress, as the watchdog reads it.
struct WaitInProgress {
  CommOpTag tag;
  std::string group_name;        // copied: readable after the wait ended
  std::vector<int> world_ranks;  // the group's members
  double waited_s = 0;
  int slot = 0;       // identifies the waiting thread
  uint64_t wait_id = 0;  // unique per wait: the watchdog fires once per wait
};
std::vector<WaitInProgress> waits_in_progress();

// "MPI_Allreduce on group 'dp' (world ranks 0,2; collective #12; 1024 x f32)" and the like.
std::string describe_wait(const WaitInProgress& w);

}  // namespace mpitron
