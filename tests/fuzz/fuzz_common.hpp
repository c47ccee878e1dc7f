// Shared by the libFuzzer targets in tests/fuzz (README "Fuzzing"; tests/fuzz/run_fuzz.sh runs them).
//
// The contract every target checks: a parser fed arbitrary bytes either accepts them or throws
// mpitron's Error/UsageError with a non-empty message (naming the file when it read one). Any
// other exception escaping (std::out_of_range, a nlohmann or toml++ exception, std::bad_alloc)
// is a bug in our code: the harness prints it and aborts, which libFuzzer records as a crash
// with the input saved. Crashes, sanitizer reports and timeouts are libFuzzer's to catch.
//
// Counts (inputs, rejections) are printed at exit as one line that run_fuzz.sh collects:
//   fuzz-stats <target> inputs=N checks=C rejected=R accepted=A
#pragma once
#include <cxxabi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <typeinfo>

#include "mpitron/core/error.hpp"

namespace fuzz {

namespace fs = std::filesystem;

struct Stats {
  const char* target = "?";
  long inputs = 0;                 // LLVMFuzzerTestOneInput calls (begin_input)
  long rejected = 0, accepted = 0;  // run_one outcomes (a target may check an input more than once)
  std::string scratch;  // this process's scratch folder (removed at exit)
  pid_t pid = 0;        // the fuzzer's own process (a forked checking child is another)
  bool in_input = false, finished = false;
};

inline Stats& stats() {
  static Stats s;
  return s;
}

// At exit, in the fuzzer's own process only (a child forked by the checkpoint check that exits
// must not remove the parent's scratch folder): the scratch folder removed, the counts printed.
inline void finish() {
  Stats& st = stats();
  if (st.finished || getpid() != st.pid) return;
  st.finished = true;
  std::error_code e;
  fs::remove_all(st.scratch, e);
  std::fprintf(stderr, "fuzz-stats %s inputs=%ld checks=%ld rejected=%ld accepted=%ld\n", st.target, st.inputs,
               st.rejected + st.accepted, st.rejected, st.accepted);
  std::fflush(stderr);
}

// Registered after the first input, so it runs before the exit handlers that the libraries'
// initialisation registered (HDF5's H5_term_library, MPI's, static destructors): after all the
// inputs, it finishes and ends the process without that teardown, which is not under test. In CI
// it once died with a wild jump (fuzz_checkpoint: all 10005 inputs passed, after thousands of
// checking children forked and crashed in HDF5 on purpose; not reproduced in a rerun). An exit()
// from inside an input is left alone: libFuzzer reports it as the bug it is.
inline void finish_and_quit() {
  Stats& st = stats();
  if (st.in_input || getpid() != st.pid) return;
  finish();
  std::_Exit(0);
}

inline std::string type_name(const std::exception& e) {
  int status = 0;
  char* d = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : typeid(e).name();
  std::free(d);
  return out;
}

// MPITRON_FUZZ_VERBOSE=1: print every rejection's message (to read them when reproducing).
inline bool verbose() {
  static const bool v = std::getenv("MPITRON_FUZZ_VERBOSE") != nullptr;
  return v;
}

// Once, from LLVMFuzzerInitialize: names the target, makes a scratch folder in /dev/shm (RAM:
// thousands of tiny files per run never touch the disk) and prints the counts at exit.
inline void init(const char* target) {
  Stats& s = stats();
  s.target = target;
  std::error_code ec;
  fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
  s.scratch = (base / ("mpitron-fuzz-" + std::string(target) + "-" + std::to_string(getpid()))).string();
  fs::remove_all(s.scratch, ec);
  fs::create_directories(s.scratch);
  s.pid = getpid();
  std::atexit(finish);
}

// First thing in LLVMFuzzerTestOneInput.
inline void begin_input() {
  ++stats().inputs;
  stats().in_input = true;
}

inline std::string scratch(const std::string& name) { return stats().scratch + "/" + name; }

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
}

[[noreturn]] inline void bug(const std::string& what) {
  std::fprintf(stderr, "\nfuzz %s: BUG: %s\n", stats().target, what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs one input through f. Error/UsageError with a message (containing `must_name` when that
// is given: the file the parser read) counts as a clear rejection; anything else is a bug.
// Returns true when f accepted the input.
template <class F>
bool run_one(F&& f, std::string_view must_name = {}) {
  Stats& s = stats();
  s.in_input = true;
  struct Done {  // the input is over (also when f throws); the late exit handler, once
    ~Done() {
      stats().in_input = false;
      static const bool registered = (std::atexit(finish_and_quit), true);
      (void)registered;
    }
  } done;
  try {
    f();
    ++s.accepted;
    return true;
  } catch (const mpitron::Error& e) {
    std::string msg = e.what();
    if (msg.empty()) bug("an Error with an empty message");
    if (!must_name.empty() && msg.find(must_name) == std::string::npos)
      bug("a rejection that does not name the file '" + std::string(must_name) + "': " + msg);
    ++s.rejected;
    if (verbose()) std::fprintf(stderr, "fuzz %s: rejected: %s\n", s.target, msg.c_str());
    return false;
  } catch (const std::exception& e) {
    bug("escaped " + type_name(e) + " (not mpitron::Error): " + e.what());
  } catch (...) {
    bug("escaped a non-std exception");
  }
}

}  // namespace fuzz
