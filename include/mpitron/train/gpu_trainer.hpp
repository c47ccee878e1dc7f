// The GPU trainer (train.backend = "nccl"): one GPU per rank, the model (or its tensor-parallel
// slice) on each GPU (GptCuda: bf16 compute, fp32 master weights, gradients and AdamW moments),
// data parallel over NCCL. The step is the CPU trainer's (trainer.hpp): global batch = micro x dp x accumulation,
// loss normalised by the target tokens of the global batch, gradient buckets all-reduced on the
// DP communicator's own stream while backward continues on the compute stream (the communicator
// waits for the compute stream by event: Comm::set_compute_stream), global grad-norm clip, AdamW,
// the same log line, metrics.jsonl, evaluation and checkpoints (the file format of
// checkpoint.hpp, staged through host memory, so a GPU checkpoint resumes on CPU and back).
//
// ZeRO-1 (parallel.zero = 1): each DP rank holds the AdamW moments of its shard only and updates
// that shard; the fp32 master weights are then all-gathered over DP (the gradients are still
// all-reduced, so ZeRO-1 costs 1.5x DDP's communication for 8 bytes/param less memory).
// Tensor and sequence parallel (parallel.tp, parallel.sp): GptCuda's TP shard over the TP
// group's NCCL communicator.
// Activation recompute (train.recompute = "full"): GptCudaOptions::recompute.
// Pipeline parallel (gpipe, 1f1b, interleaved): the pipeline executor over this rank's GptCuda
// chunks, stage tensors staged through host memory on ProcessGrid::pp_host(); the tied wte as
// data_parallel.hpp. Not on GPU yet (clear error at start-up): context parallel, ZeRO 2-3. GPU builds only (MPITRON_CUDA=1).
#pragma once
#include "mpitron/config/job_config.hpp"
#include "mpitron/dist/grid.hpp"
#include "mpitron/dist/launch.hpp"
#include "mpitron/train/trainer.hpp"

namespace mpitron {

TrainResult run_training_gpu(const JobConfig& cfg, const LaunchInfo& launch, ProcessGrid& grid);

}  // namespace mpitron
