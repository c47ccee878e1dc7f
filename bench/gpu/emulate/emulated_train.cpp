// The GPU trainer (train.backend = "nccl", src/train/cuda/gpu_backend.cpp) on the CPU emulation
// of CudaOps and of the CUDA runtime (fake_cuda.cpp): its loop (DataParallel's gradient buckets
// and ZeRO 0-3 on the emulated device memory, loss normalisation over the global batch, clipping,
// AdamW, evaluation, metrics, checkpoints staged through host memory) runs without a GPU, so tests can compare it
// with the CPU trainer. NCCL is not emulated: the process groups are MPI communicators (the
// emulated "device" memory is host memory), which the trainer only sees through Comm.
//   mpirun -np N emulated_train JOB.toml [--section.key=value ...]    (as `mpitron train`)
#include <cstdio>
#include <exception>

#include "mpitron/cli/commands.hpp"
#include "mpitron/cli/job_args.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/distributed/fatal.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/distributed/launch.hpp"
#include "mpitron/distributed/watchdog.hpp"
#include "mpitron/core/signals.hpp"
#include "mpitron/train/preemption.hpp"
#include "mpitron/train/train_loop.hpp"

using namespace mpitron;

int main(int argc, char** argv) {
  try {
    block_job_signals_and_watch();
    arm_preemption();
    JobConfig cfg;
    Args args(argv + 1, argv + argc);
    for (const auto& a : load_job_args(cfg, args, nullptr)) usage_fail("emulated_train: unknown option '{}'", a);
    cfg.train.backend = "nccl";  // the GPU trainer ...
    const LaunchInfo& li = init_launch(&argc, &argv);
    GridShape shape = resolve_grid_shape(
        {cfg.parallel.tp, cfg.parallel.cp, cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.ep}, li.world);
    TrainResult r;
    {  // the grid's communicators and the watchdog's are freed before MPI_Finalize
      ProcessGrid grid(li, shape, "cpu");  // ... on MPI groups
      HangWatchdog watchdog(li, WatchdogOptions{cfg.comm.timeout_s});
      r = run_training(cfg, li, grid);
    }
    if (li.rank == 0) std::printf("done: %d steps | train loss %.4f -> %.4f\n", r.steps_done, r.first_loss, r.last_loss);
    finalize_mpi_if_initialized();
    return r.preempted ? preemption_exit_code(r.preempted) : 0;
  } catch (const std::exception& e) {
    exit_on_exception(e);
  }
}
