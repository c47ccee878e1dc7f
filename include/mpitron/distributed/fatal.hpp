// The single place where an exception escaping a subcommand becomes an exit.
//  - UsageError: every rank saw the same bad input. Rank 0 (or the only process) prints it once;
//    every rank finalizes MPI and exits with kExitUsage. No MPI_Abort dump, no hang.
//  - anything else: this rank prints "rank R on HOST: error: ..." and, if MPI is running with
//    more than one rank, MPI_Abort()s the job so no peer waits forever.
#pragma once
#include <exception>

namespace mpitron {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

[[noreturn]] void exit_on_exception(const std::exception& e);

// Finalize MPI if this process initialized it (safe to call when it never did).
void finalize_mpi_if_initialized();

}  // namespace mpitron
