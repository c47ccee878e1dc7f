// MPITRON_FAULT: see fault_inject.hpp. Parsed once, on the first fault_point() call.
#include "mpitron/distributed/fault_inject.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/step_activity.hpp"
#include "mpitron/distributed/launch.hpp"

namespace mpitron {
namespace {

// The points the code calls fault_point() at. A spec naming another one is an error, so a typo
// in a test cannot silently inject nothing.
constexpr const char* kPoints[] = {
    "step_begin",   // top of a training step, before its batches are fetched
    "forward",      // before the step's forward/backward (pipeline schedule)
    "grad_sync",    // before waiting for the data-parallel gradient reduction
    "optimizer",    // before the optimizer step
    "eval",         // start of an evaluation pass
    "ckpt_write",   // in the middle of writing a checkpoint (after its first tensor)
    "ckpt_rename",  // checkpoint file complete, before it is renamed into place
    "ckpt_load",    // before a checkpoint is read on resume
    "param_gather", // ZeRO-1/2's parameter gathers after the optimizer step (action late only)
    "params",       // after the optimizer step: parameters and AdamW moments (action poison only)
    "model_config", // the resolved model configuration at start-up (action poison only)
};
constexpr const char* kActions[] = {"hang", "stop", "kill", "exit", "usr1", "term", "slow", "late", "poison"};

struct Spec {
  std::string action, point;
  int rank = -1, step = -1, after = 1, ms = 100;
  int hits = 0;
  bool fired = false;
};

std::atomic<int> g_state{0};  // 0: not parsed yet, 1: off, 2: on
std::mutex g_mu;
std::vector<Spec> g_specs;

int parse_int(std::string_view v, const std::string& spec) {
  std::string s(v);
  char* end = nullptr;
  long x = std::strtol(s.c_str(), &end, 10);
  usage_check(!s.empty() && end && *end == '\0', "MPITRON_FAULT '{}': '{}' is not an integer", spec, s);
  return static_cast<int>(x);
}

template <size_t N>
std::string joined(const char* const (&names)[N]) {
  std::string out;
  for (const char* n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

template <size_t N>
bool one_of(const std::string& s, const char* const (&names)[N]) {
  for (const char* n : names)
    if (s == n) return true;
  return false;
}

Spec parse_one(const std::string& spec) {
  Spec s;
  size_t at = spec.find('@');
  usage_check(at != std::string::npos, "MPITRON_FAULT '{}': expected ACTION@POINT[,rank=R][,step=S][,after=N][,ms=M]",
              spec);
  s.action = spec.substr(0, at);
  std::string rest = spec.substr(at + 1);
  size_t comma = rest.find(',');
  s.point = rest.substr(0, comma);
  usage_check(one_of(s.action, kActions), "MPITRON_FAULT '{}': unknown action '{}' (allowed: {})", spec, s.action,
              joined(kActions));
  usage_check(one_of(s.point, kPoints), "MPITRON_FAULT '{}': unknown point '{}' (allowed: {})", spec, s.point,
              joined(kPoints));
  while (comma != std::string::npos) {
    size_t next = rest.find(',', comma + 1);
    std::string kv = rest.substr(comma + 1, next == std::string::npos ? std::string::npos : next - comma - 1);
    size_t eq = kv.find('=');
    usage_check(eq != std::string::npos, "MPITRON_FAULT '{}': '{}' is not key=value", spec, kv);
    std::string k = kv.substr(0, eq);
    int v = parse_int(std::string_view(kv).substr(eq + 1), spec);
    if (k == "rank") s.rank = v;
    else if (k == "step") s.step = v;
    else if (k == "after") s.after = std::max(1, v);
    else if (k == "ms") s.ms = std::max(0, v);
    else usage_fail("MPITRON_FAULT '{}': unknown key '{}' (allowed: rank, step, after, ms)", spec, k);
    comma = next;
  }
  return s;
}

void fire(const Spec& s) {
  if (s.action == "slow") {  // every time, silently: a slow node
    std::this_thread::sleep_for(std::chrono::milliseconds(s.ms));
    return;
  }
  std::fprintf(stderr, "mpitron: MPITRON_FAULT: %s at %s (step %d) on pid %d\n", s.action.c_str(), s.point.c_str(),
               activity_step(), static_cast<int>(getpid()));
  std::fflush(stderr);
  if (s.action == "hang") {
    for (;;) pause();  // signals are blocked here (core/signals.hpp), so this never returns
  } else if (s.action == "stop") {
    raise(SIGSTOP);
  } else if (s.action == "kill") {
    raise(SIGKILL);
  } else if (s.action == "exit") {
    _exit(3);
  } else if (s.action == "usr1") {
    kill(getpid(), SIGUSR1);  // process-directed, as a scheduler sends it
  } else if (s.action == "term") {
    kill(getpid(), SIGTERM);
  }
}

}  // namespace

void fault_inject_configure(const char* spec, int world_rank) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_specs.clear();
  std::string all = spec ? spec : "";
  size_t pos = 0;
  while (pos <= all.size() && !all.empty()) {
    size_t semi = all.find(';', pos);
    std::string one = all.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos);
    if (!one.empty()) {
      Spec s = parse_one(one);
      if (s.rank < 0 || s.rank == world_rank) g_specs.push_back(s);
    }
    if (semi == std::string::npos) break;
    pos = semi + 1;
  }
  g_state.store(g_specs.empty() ? 1 : 2);
}

void fault_inject_from_env() {
  const int rank = launcher_rank_from_env();
  fault_inject_configure(std::getenv("MPITRON_FAULT"), rank < 0 ? 0 : rank);
}

namespace {
bool fault_on() {
  int st = g_state.load(std::memory_order_relaxed);
  if (st == 0) {
    fault_inject_from_env();
    st = g_state.load();
  }
  return st == 2;
}

// Under g_mu: spec s fires now at `point` (its step, its after=N-th time; once, except slow). A
// hit counts toward after=N only at s's own point and step.
bool due(Spec& s, const char* point) {
  if (s.fired || s.point != point) return false;
  if (s.step >= 0 && s.step != activity_step()) return false;
  if (++s.hits < s.after) return false;
  s.fired = s.action != "slow";
  return true;
}

}  // namespace

bool fault_late(const char* point) {
  if (!fault_on()) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& s : g_specs)
    if (s.action == "late" && s.point == point && (s.step < 0 || s.step == activity_step())) return true;
  return false;
}

bool fault_poison(const char* point) {
  if (!fault_on()) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& s : g_specs) {
    if (s.action != "poison" || !due(s, point)) continue;
    std::fprintf(stderr, "mpitron: MPITRON_FAULT: poison at %s (step %d) on pid %d\n", point, activity_step(),
                 static_cast<int>(getpid()));
    std::fflush(stderr);
    return true;
  }
  return false;
}

void fault_point(const char* point) {
  if (!fault_on()) return;
  Spec* hit = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (auto& s : g_specs) {
      if (s.action == "late" || s.action == "poison" || !due(s, point)) continue;
      hit = &s;
      break;
    }
  }
  if (hit) fire(*hit);
}

}  // namespace mpitron
