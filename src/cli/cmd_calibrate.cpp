// `mpitron calibrate`: measures this machine for the step-time model and writes a profile
// (plan/calibrate.hpp says what it measures, plan/profile.hpp what the file holds).
#include <cstdio>
#include <filesystem>
#include <string>

#include "mpitron/cli/commands.hpp"
#include "mpitron/cli/job_args.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/distributed/launch.hpp"
#include "mpitron/plan/calibrate.hpp"
#include "mpitron/plan/profile.hpp"
#include "option_values.hpp"

namespace mpitron {
namespace {

constexpr const char* kHelp =
    "usage: mpirun -np N mpitron calibrate [--out FILE] [--quick] [--max-bytes BYTES]\n\n"
    "Measures what `mpitron plan --predict` / `plan --advise --profile` need to predict step time on\n"
    "this machine, and writes it as a profile (TOML; rank 0 writes). Launch it the way jobs run: the\n"
    "same number of ranks per node (it also measures fewer ranks at once) and nodes. About a minute:\n"
    "  - GEMM GFLOP/s forward and backward over an (M, N, K) grid, fp32 and bf16 where the CPU has\n"
    "    bf16 GEMMs; causal attention by sequence length; elementwise kernels in GB/s (rank 0, on\n"
    "    all the cores of its node);\n"
    "  - the per-rank slowdown when 1, 2, 4, ... ranks of a node compute at once with the trainer's\n"
    "    threads (cores / ranks): oversubscription, memory bandwidth shared;\n"
    "  - latency and bus bandwidth of all_reduce, all_gather, reduce_scatter, broadcast, sendrecv and\n"
    "    all_to_all for groups of 2, 4, ... ranks inside a node (groups running side by side), and\n"
    "    across nodes (one rank per node) when there are several;\n"
    "  - how much slower compute runs while an all-reduce is in flight (the progress thread).\n"
    "It records the CPU model, cores, MPI library and the ranks it ran with. It measures the CPU\n"
    "backend (CPU kernels, MPI collectives); for GPU nodes use the datasheet profiles h100 | h200 |\n"
    "a100 (`plan --profile h100`) until calibrate measures CUDA kernels and NCCL.\n\n"
    "options:\n"
    "  --out FILE         where to write the profile (default profile.toml)\n"
    "  --quick            small grids and messages (seconds; for tests, not for predictions)\n"
    "  --max-bytes BYTES  largest collective message in bytes (default 16777216)\n"
    "  --help             this text\n\n"
    "then:  mpitron plan JOB.toml --predict --profile FILE\n"
    "       mpitron plan --advise --model gpt2-124m --gpus 4 --profile FILE\n"
    "       train with --train.profile=FILE --train.check_prediction=true\n";

}  // namespace

int cmd_calibrate(const Args& args) {
  if (wants_help(args)) {
    std::printf("%s", kHelp);
    return 0;
  }
  std::string out = "profile.toml";
  CalibrateOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto val = [&]() -> const std::string& {
      usage_check(i + 1 < args.size(), "calibrate: option {} needs a value (see `mpitron calibrate --help`)", a);
      return args[++i];
    };
    if (a == "--out") out = val();
    else if (a == "--quick") o.quick = true;
    else if (a == "--max-bytes") o.max_bytes = option_int(a, val(), 4096);
    else usage_fail("calibrate: unknown option '{}' (allowed: --out, --quick, --max-bytes, --help)", a);
  }
  // Refused before a minute of measuring, not after: the profile replaces a file, never a folder.
  std::error_code ec;
  usage_check(!std::filesystem::is_directory(out, ec), "calibrate: --out '{}' is a folder; give a file name", out);
  const LaunchInfo& launch = init_launch();
  const MachineProfile p = calibrate_machine(launch, o);
  if (launch.rank == 0) {
    write_profile(p, out);
    std::printf("%s", format_profile_summary(p).c_str());
    std::printf("wrote %s\n", out.c_str());
  }
  return 0;
}

}  // namespace mpitron
