// CommWait scopes and the registry of communication groups: see wait_registry.hpp.
#include "mpitron/distributed/wait_registry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <mutex>

namespace mpitron {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One slot per thread that ever waited (a few: main, the DDP progress thread, tests' threads).
// The mutex is uncontended but for the watchdog's reads, twice a second.
struct Slot {
  std::mutex mu;
  bool active = false;
  CommOpTag tag;
  int64_t since_ns = 0;
  uint64_t wait_id = 0;
};
constexpr int kSlots = 64;
Slot g_slots[kSlots];
std::atomic<int> g_slots_used{0};
std::atomic<uint64_t> g_next_wait_id{0};

thread_local int t_slot = -2;  // -2: not claimed yet, -1: no slot left (waits go unreported)
thread_local int t_depth = 0;
thread_local double t_waited_s = 0;

int my_slot() {
  if (t_slot == -2) {
    int s = g_slots_used.fetch_add(1);
    t_slot = s < kSlots ? s : -1;
  }
  return t_slot;
}

std::mutex g_groups_mu;
std::vector<const CommGroupInfo*> g_groups;

std::string ranks_str(const std::vector<int>& r) {
  std::string s;
  for (size_t i = 0; i < r.size(); ++i) {
    if (i == 8 && r.size() > 10) return s + fmt::format(",... ({} ranks)", r.size());
    if (i) s += ',';
    s += std::to_string(r[i]);
  }
  return s;
}

}  // namespace

CommGroupInfo::CommGroupInfo(std::string name, std::vector<int> world_ranks)
    : name_(std::move(name)), world_ranks_(std::move(world_ranks)) {
  std::lock_guard<std::mutex> lk(g_groups_mu);
  g_groups.push_back(this);
}

CommGroupInfo::~CommGroupInfo() {
  std::lock_guard<std::mutex> lk(g_groups_mu);
  g_groups.erase(std::remove(g_groups.begin(), g_groups.end(), this), g_groups.end());
}

std::string CommGroupInfo::describe() const { return fmt::format("'{}' (world ranks {})", name_, ranks_str(world_ranks_)); }

const CommGroupInfo* find_comm_group(const std::string& name) {
  std::lock_guard<std::mutex> lk(g_groups_mu);
  for (const auto* g : g_groups)
    if (g->name() == name) return g;
  return nullptr;
}

CommWait::CommWait(const CommOpTag& tag) : start_ns_(now_ns()) {
  ++t_depth;
  slot_ = my_slot();
  if (slot_ < 0) return;
  Slot& s = g_slots[slot_];
  std::lock_guard<std::mutex> lk(s.mu);
  saved_active_ = s.active;
  saved_tag_ = s.tag;
  saved_since_ns_ = s.since_ns;
  s.active = true;
  s.tag = tag;
  s.since_ns = start_ns_;
  s.wait_id = g_next_wait_id.fetch_add(1) + 1;
}

CommWait::~CommWait() {
  if (--t_depth == 0) t_waited_s += 1e-9 * static_cast<double>(now_ns() - start_ns_);
  if (slot_ < 0) return;
  Slot& s = g_slots[slot_];
  std::lock_guard<std::mutex> lk(s.mu);
  s.active = saved_active_;
  s.tag = saved_tag_;
  s.since_ns = saved_since_ns_;
}

double thread_comm_wait_seconds() { return t_waited_s; }

std::vector<WaitInProgress> waits_in_progress() {
  std::vector<WaitInProgress> out;
  const int n = std::min(g_slots_used.load(), kSlots);
  const int64_t now = now_ns();
  for (int i = 0; i < n; ++i) {
    Slot& s = g_slots[i];
    std::lock_guard<std::mutex> lk(s.mu);
    if (!s.active) continue;
    WaitInProgress w;
    w.tag = s.tag;
    if (s.tag.group) {  // alive: its Comm is inside this wait
      w.group_name = s.tag.group->name();
      w.world_ranks = s.tag.group->world_ranks();
    }
    w.waited_s = 1e-9 * static_cast<double>(now - s.since_ns);
    w.slot = i;
    w.wait_id = s.wait_id;
    out.push_back(std::move(w));
  }
  return out;
}

std::string describe_wait(const WaitInProgress& w) {
  if (!w.tag.group) return w.tag.what ? w.tag.what : "an unnamed wait";
  std::string s = fmt::format("{} on group '{}' (world ranks {}", w.tag.op, w.group_name, ranks_str(w.world_ranks));
  if (w.tag.seq > 0) s += fmt::format("; collective #{}", w.tag.seq);
  if (w.tag.peer >= 0) s += fmt::format("; peer world rank {}", w.tag.peer);
  if (w.tag.count > 0) s += fmt::format("; {} x {}", w.tag.count, dtype_name(w.tag.dtype));
  return s + ")";
}

}  // namespace mpitron
