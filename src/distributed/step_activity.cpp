#include "mpitron/distributed/step_activity.hpp"

#include <atomic>

namespace mpitron {
namespace {
std::atomic<int> g_step{-1};
std::atomic<const char*> g_phase{"start-up"};
}  // namespace

void set_activity_step(int step) { g_step.store(step, std::memory_order_relaxed); }
int activity_step() { return g_step.load(std::memory_order_relaxed); }
void set_activity_phase(const char* phase) { g_phase.store(phase, std::memory_order_relaxed); }
const char* activity_phase() { return g_phase.load(std::memory_order_relaxed); }

}  // namespace mpitron
