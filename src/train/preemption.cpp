#include "mpitron/train/preemption.hpp"

#include <csignal>
#include <cstring>

namespace mpitron {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_preemption_signal(int sig) {
  if (g_signal == 0) g_signal = sig;  // the first one wins; later ones are no-ops
}

}  // namespace

void install_preemption_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_preemption_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI / file I/O calls in flight just continue
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int preemption_signal() { return g_signal; }

int preemption_agreed(Comm& world) {
  if (world.size() == 1) return g_signal;
  return static_cast<int>(world.all_reduce_scalar(static_cast<double>(g_signal), ReduceOp::max));
}

void reset_preemption() { g_signal = 0; }

}  // namespace mpitron
