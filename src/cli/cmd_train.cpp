// `mpitron train JOB.toml [--section.key=value ...] [--dry-run]`
#include <fmt/format.h>
#include <sched.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "mpitron/cli/commands.hpp"
#include "env_vars.hpp"
#include "mpitron/cli/job_args.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/distributed/fault_inject.hpp"
#include "mpitron/distributed/launch.hpp"
#include "mpitron/distributed/watchdog.hpp"
#include "mpitron/train/preemption.hpp"
#include "mpitron/parallel/layout_rules.hpp"
#include "mpitron/train/train_data.hpp"
#include "mpitron/train/train_loop.hpp"

namespace mpitron {
namespace {

const char* kHelp =
    "usage: mpitron train JOB.toml [--section.key=value ...] [--dry-run]\n"
    "       mpirun -np N mpitron train JOB.toml --parallel.dp=N\n\n"
    "Trains the model the job file describes (see docs/jobs.md for every key and its default).\n"
    "Any job key can be overridden: --train.steps=50 --parallel.tp=2 --optim.lr=3e-4\n\n"
    "options:\n"
    "  --dry-run   print the fully resolved job (TOML) and the layout for this world size, then exit;\n"
    "              a layout the run would refuse is refused (exit 2) with the run's message\n"
    "  --help      this text\n\n"
    "Rank 0 prints one line per log.every steps: step, loss, lr, grad norm, ms/step, tokens/s,\n"
    "GFLOP/s per rank, MFU (against train.peak_flops, or a GEMM probe at start-up) and memory by\n"
    "category; the same values go to <job.run_dir>/metrics.jsonl.\n\n"
    "Checkpoints (docs/checkpoint.md): <job.run_dir>/ckpt/step_N.h5 every checkpoint.every steps and\n"
    "at the end; train.resume = auto continues from ckpt/latest, under any layout. On SIGUSR1 or\n"
    "SIGTERM every rank checkpoints at the next step boundary and exits with 75 (requeue me); on\n"
    "Ctrl-C (SIGINT) the same with exit 130, and a second Ctrl-C quits at once.\n";

// OpenMP threads per rank: train.threads, else OMP_NUM_THREADS, else the node's cores shared
// evenly among the ranks on it (two unbound ranks each using every core lose ~2x here), and no
// more than the cores the rank is bound to (`mpirun -np 1` binds to one core: two threads
// there run at half speed each).
int threads_per_rank(const JobConfig& cfg, const LaunchInfo& li) {
  if (cfg.train.threads > 0) return cfg.train.threads;
  if (auto it = cfg.env.find("OMP_NUM_THREADS"); it != cfg.env.end()) return std::max(1, std::atoi(it->second.c_str()));
  if (const char* e = std::getenv("OMP_NUM_THREADS"); e && std::atoi(e) > 0) return std::atoi(e);
  int threads = std::max(1, node_cpus() / std::max(1, li.local_size));
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) threads = std::min(threads, std::max(1, CPU_COUNT(&mask)));
  return threads;
}

// train.elastic: dp from the ranks of this launch (shape.dp = 0: world / (tp x cp x pp)), the rest of
// the layout and the global batch as the job says. Returns the line that says so ("" when nothing
// changes); the layout rules then refuse a world that cannot hold them, with the figures.
std::string elastic_dp(const JobConfig& cfg, int world, GridShape& shape) {
  if (!cfg.train.elastic) return "";
  usage_check(cfg.train.global_batch > 0,
              "train.elastic = true needs train.global_batch: the batch it keeps when the number of ranks changes "
              "(now it would follow dp)");
  const int mp = shape.tp * shape.cp * shape.pp;
  usage_check(world % mp == 0,
              "train.elastic: this launch has {} ranks, not a multiple of tp {} x cp {} x pp {} = {} (the layout it "
              "keeps); launch a multiple of {} ranks",
              world, shape.tp, shape.cp, shape.pp, mp, mp);
  const int dp = world / mp, asked = shape.dp;
  shape.dp = 0;
  const int micro = cfg.train.micro_batch, global = cfg.train.global_batch;
  const std::string accum = global % (micro * dp) == 0 ? fmt::format("{}", global / (micro * dp)) : "?";
  return fmt::format("elastic: {} ranks = tp {} x cp {} x pp {} x dp {}{}; global batch {} = micro {} x dp {} x "
                     "accumulation {}",
                     world, shape.tp, shape.cp, shape.pp, dp,
                     asked > 0 && asked != dp ? fmt::format(" (parallel.dp = {} is for {} ranks)", asked, asked * mp) : "",
                     global, micro, dp, accum);
}

}  // namespace

int cmd_train(const Args& args) {
  arm_preemption();  // first: a preemption signal must never kill a rank mid-save (main() blocked them)
  JobConfig cfg;
  bool dry_run = false;
  std::string job_path;
  if (wants_help(args)) {
    std::printf("%s", kHelp);
    return 0;
  }
  // The job file comes first so command-line overrides win over it.
  for (const auto& a : load_job_args(cfg, args, &job_path)) {
    if (a == "--dry-run") dry_run = true;
    else usage_fail("train: unknown option '{}' (allowed: --dry-run, --help, --section.key=value; see docs/jobs.md)", a);
  }
  usage_check(!job_path.empty() || args.size() > 0, "train: give a job file (e.g. jobs/tiny.toml); see --help");
  fault_inject_from_env();  // tests only (distributed/fault_inject.hpp): a malformed MPITRON_FAULT fails here
  // [env] before MPI/NCCL/OpenMP start (NCCL reads its variables at communicator creation).
  std::vector<std::string> env_warnings = apply_job_env(cfg.env, cfg.env_override);

  const LaunchInfo& li = init_launch();
  GridShape shape{cfg.parallel.tp, cfg.parallel.cp, cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.ep};
  const std::string elastic = elastic_dp(cfg, li.world, shape);
  usage_check(!cfg.train.reproducible || cfg.train.backend != "nccl" || cfg.model.attention == "naive",
              "train.reproducible = true on the GPU needs model.attention = \"naive\" (got \"{}\"): cuDNN's fused "
              "attention backward is not guaranteed deterministic (on Hopper it may accumulate dQ with atomics), so "
              "one micro-batch's gradients could differ from run to run; mpitron's own kernels are deterministic "
              "(docs/reproducible.md)",
              cfg.model.attention);
  if (dry_run) {
    // A job file for a cluster is checked on a workstation: print the job first, then the layout
    // this world would get, or how many ranks the job needs. A layout of this world that the run
    // would refuse is refused here, with the run's message (parallel/layout_rules.hpp).
    const int mp = shape.tp * shape.cp * shape.pp;
    const bool this_world = mp >= 1 && (shape.dp > 0 ? mp * shape.dp == li.world : li.world % mp == 0);
    std::optional<GridShape> world_grid;
    std::string problem;
    if (this_world) {
      try {
        world_grid = resolve_grid_shape(shape, li.world);
        problem = layout_problem(job_model_config(cfg), layout_request(cfg, *world_grid));
      } catch (const UsageError& e) {  // the grid's own rules (sizes, ep)
        problem = e.what();
      }
    }
    if (li.rank == 0) {
      std::printf("# resolved job%s%s\n%s\n", job_path.empty() ? "" : " from ", job_path.c_str(),
                  job_to_toml(cfg).c_str());
      if (world_grid) {
        const GridShape& g = *world_grid;
        std::printf("# layout: world %d = tp %d x cp %d x dp %d x pp %d; run dir %s\n", li.world, g.tp, g.cp, g.dp,
                    g.pp, cfg.run_dir().c_str());
      } else if (!this_world) {
        if (shape.dp > 0)
          std::printf("# layout: needs %d ranks = tp %d x cp %d x dp %d x pp %d (this launch has %d); run dir %s\n",
                      mp * shape.dp, shape.tp, shape.cp, shape.dp, shape.pp, li.world, cfg.run_dir().c_str());
        else
          std::printf("# layout: needs a multiple of tp %d x cp %d x pp %d = %d ranks (this launch has %d); run dir %s\n",
                      shape.tp, shape.cp, shape.pp, mp, li.world, cfg.run_dir().c_str());
      }
      // The [env] warnings the real run would print, as comments so the output stays valid TOML.
      for (const auto& w : env_warnings) std::printf("# warning: %s\n", w.c_str());
      std::fflush(stdout);
    }
    usage_check(problem.empty(), "{}", problem);
    return 0;
  }
  shape = resolve_grid_shape(shape, li.world);
  if (li.rank == 0) {
    if (!elastic.empty()) std::printf("%s\n", elastic.c_str());
    if (cfg.train.reproducible)
      std::printf("reproducible: micro-batches dealt whole, gradients, loss and grad norm summed exactly: the same bits "
                  "at any dp, ZeRO stage and accumulation with the micro-batch size, tp %d x cp %d x pp %d x ep %d and "
                  "%s kept%s\n",
                  shape.tp, shape.cp, shape.pp, shape.ep,
                  cfg.train.backend == "nccl" ? "the GPU model"
                                              : fmt::format("{} threads per rank", threads_per_rank(cfg, li)).c_str(),
                  shape.ep > 1 ? " (not with ep > 1: an expert's GEMM takes several dp ranks' tokens at once)" : "");
    for (const auto& w : env_warnings) std::printf("warning: %s\n", w.c_str());
    for (const auto& line : effective_env_lines(cfg.env)) std::printf("env %s\n", line.c_str());
  }
  omp_set_num_threads(threads_per_rank(cfg, li));
  ProcessGrid grid(li, shape, cfg.train.backend == "nccl" ? "nccl" : "cpu", cfg.comm.timeout_s);
  HangWatchdog watchdog(li, WatchdogOptions{cfg.comm.timeout_s});  // every backend: distributed/watchdog.hpp
  TrainResult r = run_training(cfg, li, grid);
  if (r.preempted) return preemption_exit_code(r.preempted);
  finish_preemption();  // a signal after the last step boundary: said on stderr, exit 0
  if (li.rank == 0 && r.skipped_steps > 0)
    std::printf("note: %d of %d steps were skipped for a non-finite loss or grad norm (train.nan_policy = \"skip\")\n",
                r.skipped_steps, r.steps_done);
  if (li.rank == 0 && r.first_val_loss >= 0)
    std::printf("done: %d steps | train loss %.4f -> %.4f | val loss %.4f -> %.4f\n", r.steps_done, r.first_loss,
                r.last_loss, r.first_val_loss, r.last_val_loss);
  else if (li.rank == 0)
    std::printf("done: %d steps | train loss %.4f -> %.4f\n", r.steps_done, r.first_loss, r.last_loss);
  return 0;
}

}  // namespace mpitron
