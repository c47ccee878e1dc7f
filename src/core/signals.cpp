// The job-control signal watcher: see include/mpitron/core/signals.hpp for why signals are
// blocked everywhere and read from a signalfd in this one thread.
#include "mpitron/core/signals.hpp"

#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <mutex>

namespace mpitron {
namespace {

// The watcher's mode (signals.hpp): terminate, record, or late (training has ended). The mutex
// makes "read the mode, record the signal" one step against finish_job_signal_recording(), so a
// signal is either recorded before the trainer's last look or reported as late, never lost.
enum Mode { kTerminate, kRecord, kLate };
std::mutex g_mode_mutex;
Mode g_mode = kTerminate;
std::atomic<int> g_recorded{0};
std::atomic<int> g_interrupts{0};
std::once_flag g_started;

sigset_t job_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// The launcher's rank variable (OMPI_COMM_WORLD_RANK, SLURM_PROCID, ...), nullptr outside a
// launcher. (distributed/launch.hpp's launcher_rank_from_env parses the same list; core/ stays below distributed/.)
const char* launcher_rank_env() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* e = std::getenv(v)) return e;
  return nullptr;
}

// Only the launcher's rank 0 says "interrupt".
bool launcher_rank0() {
  const char* e = launcher_rank_env();
  return !e || std::atoi(e) == 0;
}

// The signal's default action (terminate), as if it had never been blocked: the launcher and the
// shell see the process die of that signal, exactly as before any of this.
[[noreturn]] void die_of(int sig) {
  std::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);  // this thread only: the signal lands here
  raise(sig);
  _exit(128 + sig);  // not reached
}

// A signal after the last step boundary: the run is complete and checkpointed; say why this
// process still exits with 0 (a scheduler's SIGTERM at the very end is not a preemption).
void say_late(int sig) {
  char msg[160];
  const char* rank = launcher_rank_env();
  const int n = std::snprintf(msg, sizeof msg,
                              "mpitron: rank %s: signal %d (%s) after the last step: training is complete and "
                              "checkpointed; exiting normally\n",
                              rank ? rank : "0", sig, strsignal(sig));
  ssize_t w = write(STDERR_FILENO, msg, static_cast<size_t>(std::max(0, std::min(n, int(sizeof msg) - 1))));
  (void)w;
}

// signalfd rather than sigwait: sigwait unblocks the signals in its thread for the duration of
// the wait (the kernel's real_blocked swap), so /proc would show one thread open to them; with
// signalfd they stay blocked in every thread, always, and are read like data.
void* watch(void* arg) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  for (;;) {
    signalfd_siginfo info;
    ssize_t got = read(fd, &info, sizeof info);
    if (got != static_cast<ssize_t>(sizeof info)) continue;  // EINTR and the like
    const int sig = static_cast<int>(info.ssi_signo);
    std::unique_lock lock(g_mode_mutex);
    if (g_mode == kTerminate) die_of(sig);
    if (sig == SIGINT && g_interrupts.fetch_add(1) >= 1) die_of(sig);  // Ctrl-C twice: quit now
    if (g_mode == kLate) {
      lock.unlock();
      say_late(sig);
      continue;
    }
    int none = 0;
    g_recorded.compare_exchange_strong(none, sig);  // the first one wins
    lock.unlock();
    if (sig == SIGINT && launcher_rank0()) {
      static const char msg[] =
          "\nmpitron: interrupt: checkpointing at the end of this step, then exiting; Ctrl-C again quits at once\n";
      ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
      (void)n;
    }
  }
  return nullptr;
}

}  // namespace

void block_job_signals_and_watch() {
  std::call_once(g_started, [] {
    const sigset_t set = job_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    const int fd = signalfd(-1, &set, SFD_CLOEXEC);
    const int fd_errno = errno;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    // The default stack size: a small custom one fails (EINVAL) once the CUDA libraries' static
    // TLS is loaded, and a CUDA build would then run with the signals unblocked.
    const int rc = fd < 0 ? fd_errno : pthread_create(&t, &attr, watch, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
    if (rc != 0) {
      // Without a watcher the signals would stay pending forever: restore their delivery.
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      std::fprintf(stderr, "mpitron: warning: cannot start the signal watcher thread (%s): %s\n",
                   fd < 0 ? "signalfd" : "pthread_create", std::strerror(rc));
    } else {
      pthread_setname_np(t, "mpitron-signals");
    }
    pthread_attr_destroy(&attr);
  });
}

void arm_job_signal_recording() {
  std::lock_guard lock(g_mode_mutex);
  g_mode = kRecord;
}

void finish_job_signal_recording() {
  std::unique_lock lock(g_mode_mutex);
  if (g_mode != kRecord) return;
  g_mode = kLate;
  int sig = g_recorded.exchange(0);
  if (!sig) {
    // One sent but not yet read by the watcher (blocked in every thread, so still pending on the
    // process): take it here, or the process could exit before the watcher says anything.
    const sigset_t set = job_set();
    const timespec now{0, 0};
    sig = std::max(0, sigtimedwait(&set, nullptr, &now));
  }
  lock.unlock();
  if (sig) say_late(sig);
}

int recorded_job_signal() { return g_recorded.load(); }

void clear_recorded_job_signal() {
  g_recorded.store(0);
  g_interrupts.store(0);
}

bool is_job_signal(int sig) { return sig == SIGUSR1 || sig == SIGTERM || sig == SIGINT; }

}  // namespace mpitron
