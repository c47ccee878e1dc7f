// `mpitron env`: who is who. Every rank builds the ProcessGrid exactly as training would and
// sends one row (identity, device, coordinates, group members) to rank 0, which prints the table,
// the MPI thread level, the backend and the NCCL_*/CUDA_VISIBLE_DEVICES variables in effect.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "env_vars.hpp"
#include "mpitron/cli/commands.hpp"
#include "mpitron/cli/job_args.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/distributed/launch.hpp"

extern char** environ;

namespace mpitron {
namespace {

constexpr const char* kEnvHelp =
    "usage: mpirun -np N mpitron env [job.toml] [--section.key=value ...]\n\n"
    "Prints, from rank 0, one row per rank: rank, local rank, node, host, device, the (tp,cp,dp,pp)\n"
    "coordinates and the world ranks of each group the rank belongs to; then the MPI thread level,\n"
    "the communication backend and every NCCL_* / CUDA_VISIBLE_DEVICES variable in effect, with the\n"
    "job's [env] warnings (e.g. an NCCL_* name NCCL does not read) as `train` prints them.\n\n"
    "options:\n"
    "  job.toml               optional job file; its [parallel] and [env] sections are applied\n"
    "  --parallel.tp=N        tensor-parallel size (also .pp, .cp, .dp; dp=0 infers world/(tp*cp*pp))\n"
    "  --train.backend=B      cpu (MPI) or nccl (GPU builds with a GPU)\n"
    "  --section.key=value    any other job key (see docs/jobs.md)\n"
    "  --help                 this text\n\n"
    "environment: MPITRON_FAKE_NODES=N pretends the ranks of one host sit on N nodes (tests).\n";

std::string join_ranks(const std::vector<int>& v) { return fmt::format("[{}]", fmt::join(v, ",")); }

// Variables the user wants to see: NCCL_*, CUDA_VISIBLE_DEVICES, and our test switches.
std::vector<std::string> comm_env_vars() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("NCCL_", 0) == 0 || kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0 || kv.rfind("MPITRON_", 0) == 0 ||
        kv.rfind("OMPI_MCA_mpi_yield_when_idle=", 0) == 0)  // launch.cpp sets it on an oversubscribed node
      out.push_back(kv);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) line += fmt::format("{:<{}}  ", r[i], w[i]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

int cmd_env(const Args& args) {
  const LaunchInfo& launch = init_launch();
  if (wants_help(args)) {
    if (launch.rank == 0) std::printf("%s", kEnvHelp);
    return 0;
  }
  JobConfig cfg;
  Args rest = load_job_args(cfg, args);
  if (!rest.empty())
    usage_fail("unknown option '{}' for `mpitron env` (allowed: [job.toml], --section.key=value job overrides, "
               "--help)",
               rest[0]);
  // The same [env] rules and warnings as `train` (a misspelt NCCL variable is exactly what
  // someone running this command is looking for).
  const std::vector<std::string> env_warnings = apply_job_env(cfg.env, cfg.env_override);

  GridShape shape{cfg.parallel.tp, cfg.parallel.cp, cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.ep};
  ProcessGrid grid(launch, shape, cfg.train.backend);

  // Test-only hook: one rank fails after start-up, so tests can check the job aborts with its message.
  if (const char* f = std::getenv("MPITRON_TEST_FAIL_RANK"); f && std::atoi(f) == launch.rank)
    fail("injected failure on this rank (MPITRON_TEST_FAIL_RANK={})", f);

  const GridCoord& c = grid.coord();
  std::string device = launch.device >= 0 ? fmt::format("cuda:{}", launch.device) : "cpu";
  std::vector<std::string> row = {std::to_string(launch.rank), std::to_string(launch.local_rank),
                                  std::to_string(launch.node), launch.host, device,
                                  fmt::format("({},{},{},{})", c.tp, c.cp, c.dp, c.pp)};
  for (Group g : kAllGroups)
    if (g != Group::world) row.push_back(join_ranks(grid.members(g)));
  std::string line = fmt::format("{}", fmt::join(row, "\t"));
  auto lines = gather_strings(line);
  if (launch.rank != 0) return 0;

  const GridShape& s = grid.shape();
  std::printf("mpitron env: %d rank%s on %d node%s%s, %s, backend %s (train.backend=%s)\n", launch.world,
              launch.world == 1 ? "" : "s", launch.num_nodes, launch.num_nodes == 1 ? "" : "s",
              launch.fake_nodes ? " (MPITRON_FAKE_NODES)" : "", launch.thread_level_name.c_str(),
              grid.backend().c_str(), cfg.train.backend.c_str());
  std::printf("layout: tp=%d cp=%d dp=%d pp=%d ep=%d   rank = tp + %d*(cp + %d*(dp + %d*pp))\n\n", s.tp, s.cp, s.dp,
              s.pp, s.ep, s.tp, s.cp, s.dp);
  std::vector<std::vector<std::string>> rows = {
      {"rank", "local", "node", "host", "device", "(tp,cp,dp,pp)", "tp", "cp", "dp", "pp", "dp_cp",
       "model_parallel", "embedding", "ep", "expert_dp"}};
  for (const auto& l : lines) {
    std::vector<std::string> cells;
    std::stringstream ss(l);
    for (std::string cell; std::getline(ss, cell, '\t');) cells.push_back(cell);
    rows.push_back(cells);
  }
  print_table(rows);
  std::printf("\nenvironment (rank 0):\n");
  auto vars = comm_env_vars();
  if (vars.empty()) std::printf("  (no NCCL_* or CUDA_VISIBLE_DEVICES variables set)\n");
  for (const auto& v : vars) std::printf("  %s\n", v.c_str());
  for (const auto& w : env_warnings) std::printf("warning: %s\n", w.c_str());
  // The device note and layout warnings were already printed once, on stderr, by rank 0.
  std::fflush(stdout);
  return 0;
}

}  // namespace mpitron
