// What the one training loop (trainer.cpp: run_training) needs from a backend, and the
// factories that build one. The loop owns everything users see the same on every backend: the
// data, the step (fetch, forward/backward through the pipeline, gradient sync, loss and grad
// norm over the grid, clipping, the optimizer), evaluation, the step line and metrics.jsonl,
// the memory log and ledger check, checkpoints and preemption, the non-finite policy and
// train.dump_params. A backend holds this rank's model chunks with their data parallel and
// optimizer, as a pipeline. Both are a StageBackend (below): the same StageModel (DataParallel
// with ZeRO, AdamW), pipeline executor and checkpoint state over their own model chunks and flat
// ops; what differs is only what is truly the device's:
//   cpu   (cpu_backend.cpp)        CPU GPT chunks on Ops (host memory), a GEMM probe for the peak
//   nccl  (cuda/gpu_backend.cpp)   GptCuda chunks (bf16 compute, fp32 master weights) on
//                                  CudaFlatOps (device memory), NCCL, the datasheet peak
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

class TrainBackend {
 public:
  virtual ~TrainBackend() = default;

  // Start-up: the layout line (after the model line) and the lines after the data line.
  virtual std::string layout_line(const PeakFlops& peak) const = 0;
  virtual std::string describe() const = 0;
  virtual size_t num_params() const = 0;  // floats over this rank's chunks
  // Peak FLOP/s of one rank for MFU when train.peak_flops is 0 (peak_probe.hpp).
  virtual PeakFlops peak_flops() = 0;
  // The tracker of the memory the model lives in (host or device).
  virtual MemTracker& memory() = 0;

  virtual PipelineExecutor& pipeline() = 0;
  virtual CheckpointState& checkpoint_state() = 0;

  // The step protocol, over every chunk of this rank.
  virtual void begin_step(int micro_batches) = 0;
  virtual void finish_backward() = 0;  // every gradient reduced (over DP, and over the tied embedding)
  // Sum of squares of this rank's gradients over its DP group, every element once: TP-sharded
  // parameters by every TP rank, replicated ones by TP rank 0 (tp_grad_norm.hpp), the tied wte
  // by the first stage. The loop sums it over the pipeline and then over TP.
  virtual double grad_sum_squares() = 0;
  virtual void scale_grads(float s) = 0;
  // AdamW at `lr` on this rank's shard, the updated parameters gathered where ZeRO needs them;
  // the update is complete on return (the step time is read right after).
  virtual void optimizer_step(double lr) = 0;
  virtual StepComm take_comm() = 0;
  // Seconds in TP collectives so far (the loop prints the per-step mean); < 0: not measured.
  virtual double tp_comm_seconds() const { return -1; }
  virtual double cp_wait_seconds() const { return -1; }  // < 0: no context parallel or not measured
  virtual bool cpu_bf16_gemms() const { return false; }  // the CPU's train.precision resolved to bf16
  // Every chunk's full flat parameters in host memory (train.dump_params; collective under ZeRO-3).
  virtual std::vector<ChunkParams> full_params(std::vector<Buffer<float>>& scratch) = 0;
};

// The step protocol over this rank's StageModel, shared by both backends. A backend's
// constructor builds its ops and initialised chunks and hands them to build().
class StageBackend : public TrainBackend {
 public:
  std::string describe() const override { return model_->describe(); }
  size_t num_params() const override { return model_->num_params(); }
  PipelineExecutor& pipeline() override { return *pipe_; }
  CheckpointState& checkpoint_state() override { return *ckpt_state_; }
  void begin_step(int micro_batches) override { model_->begin_step(micro_batches); }
  void finish_backward() override { model_->finish_backward(); }  // buckets were reducing during backward
  double grad_sum_squares() override { return model_->grad_sum_squares(tp_rank_); }
  void scale_grads(float s) override { model_->scale_grads(s); }
  void optimizer_step(double lr) override;
  StepComm take_comm() override;
  double tp_comm_seconds() const override { return model_->tp_comm_seconds(); }
  double cp_wait_seconds() const override { return model_->cp_wait_seconds(); }
  std::vector<ChunkParams> full_params(std::vector<Buffer<float>>& scratch) override {
    return model_->full_params(scratch);
  }

 protected:
  // chunks: initialised, in chunk order; stages: the same chunks as pipeline stages; ops: the
  // flat ops of their device; pp: the pipeline's Comm over host memory (the executor's messages).
  void build(const TrainSetup& s, std::vector<std::unique_ptr<ModelChunk>> chunks, std::vector<PipelineStage*> stages,
             FlatOps& ops, Comm& pp, const DataParallelOptions& dp);
  StageModel& model() { return *model_; }
  // The executor, checkpoint state and chunks go first: a backend's destructor calls this before
  // its own members (the ops the chunks compute with, the stage adapters) are destroyed.
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
#if MPITRON_CUDA
std::unique_ptr<TrainBackend> make_gpu_backend(const TrainSetup& s);
#endif

}  // namespace mpitron
