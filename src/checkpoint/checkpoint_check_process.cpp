// The metadata check of a checkpoint in a child process, so that HDF5 itself cannot crash or hang
// the job on a corrupted file. Found with random bit flips: a damaged global-heap collection (where
// variable-length strings live; it has no checksum) sends HDF5 1.10.8 into an endless loop, and a
// damaged fractal heap (dense link storage, files of older mpitron) into free() of a bad pointer.
// The child does only HDF5 reads and _exit()s; once it reports "usable", the parent's own reads
// walk the same, now known-good, bytes.
//
// The mpitron binary starts the child with posix_spawn of itself (enable_checkpoint_check_exec,
// checkpoint.hpp): the child never touches MPI, CUDA or the network, and shares nothing with the
// parent. Not fork(): a fork copies the locks other threads hold at that moment (under
// AddressSanitizer, whose allocator has no fork handler, a child forked while the data loader's
// thread was inside malloc waited forever on its first free()), and it marks every page of the
// parent copy-on-write, so the reads into the model's buffers that follow took a write fault per
// 4 KiB page (0.2 s of a gpt2-124m resume's 0.7). posix_spawn shares the address space until the
// exec. Programs that do not enable it (tests, fuzzers: small processes) fork and run the check
// in the forked child. hdf5_mutex() is held across fork() so no thread of ours is inside HDF5 when
// its state is copied.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "checkpoint_format.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/hdf5_lock.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

namespace mpitron {
namespace {

// Seconds the check may take; MPITRON_CKPT_CHECK_TIMEOUT_S overrides (tests use a few seconds,
// the checkpoint fuzzer a fraction of one). Metadata only: a few MB even for a large model, so
// 2 minutes is ample on a slow file system.
double timeout_s() {
  const char* e = std::getenv("MPITRON_CKPT_CHECK_TIMEOUT_S");
  double v = e ? std::strtod(e, nullptr) : 0;
  return v > 0 && v < 1e6 ? v : 120;
}

bool g_exec_child = false;

[[noreturn]] void child(int fd, const std::string& path, bool has_optimizer) {
  // Verdict: '0' usable, '1' + why; then a NUL so the parent can tell a complete report.
  std::string out = "0";
  try {
    ckpt_format::check_structure_unlocked(path, has_optimizer);
  } catch (const CorruptCheckpoint& e) {
    out = std::string("1") + e.what();
  } catch (const std::exception& e) {
    out = "1" + fmt::format("checkpoint '{}' is unreadable: {}", path, e.what());
  }
  out.push_back('\0');
  for (size_t at = 0; at < out.size();) {
    ssize_t n = ::write(fd, out.data() + at, out.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
  ::_exit(0);  // no atexit handlers, no MPI, no flushing of the parent's stdio buffers
}

// The check dies with its parent: a parent killed mid-check (a cancelled job, a test's time limit)
// would otherwise leave HDF5's endless loop spinning on a core for good (seen: 11 minutes at 93%,
// starving the next test's ranks). The parent waits for the child in
// check_checkpoint_structure_isolated, so the thread that started it outlives it.
void die_with_parent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
}

}  // namespace

void enable_checkpoint_check_exec() { g_exec_child = true; }

// argv: mpitron __checkpoint-check FD HAS_OPTIMIZER PATH PARENT_PID
[[noreturn]] void checkpoint_check_main(int argc, char** argv) {
  if (argc != 6) ::_exit(2);
  die_with_parent(static_cast<pid_t>(std::atoll(argv[5])));
  child(std::atoi(argv[2]), argv[4], argv[3][0] == '1');
}

void check_checkpoint_structure_isolated(const std::string& path, bool has_optimizer) {
  check_checkpoint_structure_isolated(path, has_optimizer, g_exec_child);
}

void check_checkpoint_structure_isolated(const std::string& path, bool has_optimizer, bool exec_child) {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  int fds[2];
  check(::pipe2(fds, O_CLOEXEC) == 0, "cannot check checkpoint '{}': pipe: {}", path, std::strerror(errno));
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = -1;
  if (exec_child) {
    const std::string fd_arg = std::to_string(fds[1]), parent_arg = std::to_string(parent);
    char* const argv[] = {const_cast<char*>("mpitron"), const_cast<char*>("__checkpoint-check"),
                          const_cast<char*>(fd_arg.c_str()), const_cast<char*>(has_optimizer ? "1" : "0"),
                          const_cast<char*>(path.c_str()), const_cast<char*>(parent_arg.c_str()), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], fds[1]);  // onto itself: the write end survives the exec
    const int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {  // no exec: check with a plain fork
      ::close(fds[0]);
      ::close(fds[1]);
      return check_checkpoint_structure_isolated(path, has_optimizer, false);
    }
  } else {
    pid = ::fork();
    if (pid == 0) {
      die_with_parent(parent);
      ::close(fds[0]);
      child(fds[1], path, has_optimizer);
    }
  }
  ::close(fds[1]);
  if (pid < 0) {
    int err = errno;
    ::close(fds[0]);
    fail("cannot check checkpoint '{}': fork: {}", path, std::strerror(err));
  }
  const double limit = timeout_s();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long long>(limit * 1000));
  std::string report;
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child is gone
    report.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    throw CorruptCheckpoint(fmt::format(
        "checkpoint '{}' is corrupted: reading its HDF5 metadata did not finish within {:g} s (HDF5 stuck in a damaged "
        "block)",
        path, limit));
  if (exec_child && report.empty() && WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return check_checkpoint_structure_isolated(path, has_optimizer, false);
  if (report.empty() || report.back() != '\0') {
    std::string how = WIFSIGNALED(status) ? fmt::format("signal {}, {}", WTERMSIG(status), strsignal(WTERMSIG(status)))
                                          : fmt::format("exit {}", WEXITSTATUS(status));
    throw CorruptCheckpoint(
        fmt::format("checkpoint '{}' is corrupted: HDF5 crashed reading its metadata ({})", path, how));
  }
  report.pop_back();
  if (report[0] != '0') throw CorruptCheckpoint(report.substr(1));
}

}  // namespace mpitron
