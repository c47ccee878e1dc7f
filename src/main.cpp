// build/mpitron: dispatches to a subcommand (src/cli/commands.cpp has the table).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "mpitron/cli/commands.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/signals.hpp"
#include "mpitron/distributed/fatal.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

namespace {

void print_help() {
  std::printf(
      "mpitron: an MPI-native trainer for GPT-style transformers.\n\n"
      "usage: mpitron <command> [options]        (launch with mpirun/srun for more ranks)\n\n"
      "commands:\n");
  for (const auto& c : mpitron::commands()) std::printf("  %-12s %s\n", c.name, c.summary);
  std::printf(
      "\n`mpitron <command> --help` explains each command's options.\n"
      "Job keys can be overridden on any command that takes a job: --section.key=value\n");
}

}  // namespace

int main(int argc, char** argv) {
  // The checkpoint check's child process (checkpoint/checkpoint.hpp): a fresh image, no threads.
  if (argc >= 2 && !std::strcmp(argv[1], "__checkpoint-check")) mpitron::checkpoint_check_main(argc, argv);
  mpitron::enable_checkpoint_check_exec();
  // Before anything can start a thread: job-control signals are blocked in every thread and taken
  // synchronously by one watcher (core/signals.hpp: oneDNN's JIT GEMM makes async handlers unsafe).
  mpitron::block_job_signals_and_watch();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_help();
    return argc < 2 ? mpitron::kExitUsage : 0;
  }
  std::string name = argv[1];
  if (name == "--version") name = "version";  // what users try first
  mpitron::Args args(argv + 2, argv + argc);
  try {
    for (const auto& c : mpitron::commands()) {
      if (name == c.name) {
        int rc = c.run(args);
        mpitron::finalize_mpi_if_initialized();
        return rc;
      }
    }
    std::string names;
    for (const auto& c : mpitron::commands()) names += (names.empty() ? "" : ", ") + std::string(c.name);
    mpitron::usage_fail("unknown command '{}' (allowed: {}); see `mpitron --help`", name, names);
  } catch (const std::exception& e) {
    mpitron::exit_on_exception(e);
  }
}
