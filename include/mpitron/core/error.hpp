// Errors are exceptions with context, caught once at the top (src/main.cpp) and turned into
// one message and an exit code. Two kinds:
//  - Error: something went wrong on this rank (bad file, I/O, internal). The top level prints
//    rank + host + cause and aborts the whole job, because the other ranks may be waiting on us.
//  - UsageError: bad user input that every rank detects identically (bad layout, unknown option,
//    bad TOML key). Rank 0 prints it once; every rank exits non-zero without MPI_Abort's dump.
//  - AgreedError: a run-time failure every rank reaches together, after a collective verdict (a
//    non-finite loss, a model that holds NaN): rank 0 prints it once; every rank exits with 1
//    (an error, not bad input) without MPI_Abort.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>
#include <utility>

namespace mpitron {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UsageError : public Error {
 public:
  using Error::Error;
};

class AgreedError : public Error {
 public:
  using Error::Error;
};

template <class... A>
[[noreturn]] void agreed_fail(fmt::format_string<A...> f, A&&... a) {
  throw AgreedError(fmt::format(f, std::forward<A>(a)...));
}

template <class... A>
[[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) {
  throw Error(fmt::format(f, std::forward<A>(a)...));
}

template <class... A>
[[noreturn]] void usage_fail(fmt::format_string<A...> f, A&&... a) {
  throw UsageError(fmt::format(f, std::forward<A>(a)...));
}

// check(cond, "fmt", args...): throws Error when cond is false. Formatting happens only on failure.
template <class... A>
void check(bool cond, fmt::format_string<A...> f, A&&... a) {
  if (!cond) throw Error(fmt::format(f, std::forward<A>(a)...));
}

template <class... A>
void usage_check(bool cond, fmt::format_string<A...> f, A&&... a) {
  if (!cond) throw UsageError(fmt::format(f, std::forward<A>(a)...));
}

}  // namespace mpitron
