// What the one training loop (train_loop.cpp: run_training) needs from a device, and the factories
// that build one. The loop owns everything users see the same on every device: the data, the
// step (train_step.hpp), evaluation, the reporting (step_reporter.hpp), checkpoints and
// preemption, the non-finite policy and train.dump_params. A backend holds this rank's model
// chunks with their data parallel and optimizer, as a pipeline (TrainBackend below); what
// differs per device is only what is truly the device's:
//   cpu   (cpu_backend.cpp)        CPU TransformerModel chunks on Ops (host memory), a GEMM probe
//                                  for the peak
//   nccl  (cuda/gpu_backend.cpp)   TransformerModelCuda chunks (bf16 compute, fp32 master weights)
//                                  on CudaFlatOps (device memory), NCCL, the datasheet peak
// The loop decides the order of the collectives, so both backends reduce the loss and the grad
// norm the same way.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mpitron/config/job_config.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/distributed/launch.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/parallel/pipeline.hpp"
#include "mpitron/parallel/stage_model.hpp"
#include "mpitron/parallel/schedule.hpp"
#include "mpitron/train/param_dump.hpp"
#include "mpitron/train/train_checkpoint.hpp"
#include "mpitron/train/train_data.hpp"

namespace mpitron {

// What a backend is built from: the job, this rank's place, the model resolved against the
// data, the batch arithmetic and the pipeline schedule (its chunks come from model_chunks_for).
struct TrainSetup {
  const JobConfig& cfg;
  const LaunchInfo& launch;
  ProcessGrid& grid;
  const ModelConfig& mc;
  BatchPlan bp;
  PipelineSchedule schedule;
};

// Communication time of one step, for the step line: comm_ms and the fraction of it that
// backward hid (the GPU backend measures only the exposed wait, and claims no overlap).
struct StepComm {
  double comm_ms = 0, overlap = 0;
};

// What MFU is measured against, per rank: `peak` (0: unknown), how it was found, and a GEMM
// probe to report beside it (0: none).
struct PeakFlops {
  double peak = 0, probe = 0;
  std::string how;
};

// This rank's model chunks as a pipeline stage, ready to train: the StageModel (each chunk with
// its DataParallel, ZeRO shard and AdamW), the pipeline executor and the checkpoint state, the
// same on both devices. The step (train_step.hpp) drives stage() and pipeline() directly; a
// device's subclass adds only what is truly its own (virtual below) and builds its initialised
// chunks and flat ops, which it hands to build().
class TrainBackend {
 public:
  virtual ~TrainBackend() = default;

  // Start-up: the layout line (after the model line).
  virtual std::string layout_line(const PeakFlops& peak) const = 0;
  // Peak FLOP/s of one rank for MFU when train.peak_flops is 0 (peak_probe.hpp).
  virtual PeakFlops peak_flops() = 0;
  // The tracker of the memory the model lives in (host or device).
  virtual MemTracker& memory() = 0;
  virtual bool cpu_bf16_gemms() const { return false; }  // the CPU's train.precision resolved to bf16

  StageModel& stage() { return *model_; }
  PipelineExecutor& pipeline() { return *pipe_; }
  CheckpointState& checkpoint_state() { return *ckpt_state_; }
  int tp_rank() const { return tp_rank_; }
  // AdamW at `lr` on this rank's shard, the updated parameters gathered where ZeRO needs them;
  // the update is complete on return (the step time is read right after).
  void optimizer_step(double lr);
  // The step's communication time for the step line (also the step's collectives on the timeline).
  StepComm take_comm();

 protected:
  // chunks: initialised, in chunk order; ops: the flat ops of their device; pp: the pipeline's
  // Comm over host memory (the executor's messages).
  void build(const TrainSetup& s, std::vector<std::unique_ptr<ModelChunk>> chunks, FlatOps& ops, Comm& pp,
             const DataParallelOptions& dp);
  // The executor, checkpoint state and chunks go first: a backend's destructor calls this before
  // its own members (the ops the chunks compute with) are destroyed.
  void release_stage();

 private:
  void poison_state();

  int tp_rank_ = 0;
  std::unique_ptr<PipelineSchedule> schedule_;  // the executor keeps a reference
  std::unique_ptr<StageModel> model_;
  std::unique_ptr<PipelineExecutor> pipe_;
  std::unique_ptr<StageCheckpointState> ckpt_state_;
};

// DataParallel's options from the job (parallel.zero, bucket_mb, dp_progress, optim.*).
DataParallelOptions dp_options(const JobConfig& cfg);

// The parts of the start-up layout line every backend prints the same: " (interleaved, v model
// chunks per rank)" when the schedule has several chunks per rank (else ""), and
// "global batch G = micro m x dp d x accum a (N tokens/step)".
std::string chunks_note(const TrainSetup& s);
std::string batch_note(const TrainSetup& s);

std::unique_ptr<TrainBackend> make_cpu_backend(const TrainSetup& s);
// In the CUDA backend (train/cuda/gpu_backend.cpp); called as its entry point below, through
// MPITRON_CUDA_ENTRY (core/cuda_plugin.hpp), so that a CPU run never loads the CUDA libraries.
std::unique_ptr<TrainBackend> make_gpu_backend(const TrainSetup& s);

}  // namespace mpitron

extern "C" std::unique_ptr<mpitron::TrainBackend> mpitron_cuda_make_gpu_backend(const mpitron::TrainSetup& s);
