// Every rule that ties a model, a batch and a backend to a parallel layout, in one place.
//
// `train` checks its job with check_layout before it builds anything; `train --dry-run`, `plan`
// (its check of a layout, `--advise`'s search, `--emit-job`) ask the same function, so each approves
// exactly the layouts a run accepts, and refuses the others with the run's own message. The rules
// of single keys (a size >= 1, a schedule's name) are the job-key registry's; the rules of a
// pipeline schedule live with it (schedule.hpp: check_schedule), and are asked from here.
#pragma once
#include <string>

#include "mpitron/config/job_config.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/model/config.hpp"

namespace mpitron {

// A layout as the rules see it: the grid with dp resolved, what splits the model and the batch.
struct LayoutRequest {
  GridShape grid;            // dp > 0 (resolve_grid_shape)
  ParallelSection parallel;  // sp, zero, schedule, virtual_stages, pp_layers, microbatches
  int micro_batch = 1;
  int global_batch = 0;  // 0: micro_batch x dp
  bool gpu = false;      // train.backend = "nccl"
  bool fp8 = false;      // train.precision = "fp8"
};

// The layout a job asks for, on the grid it resolved to.
LayoutRequest layout_request(const JobConfig& job, const GridShape& grid);

// Throws UsageError with the first rule `model` under `layout` breaks, worded as `train` says it.
void check_layout(const ModelConfig& model, const LayoutRequest& layout);

// The same as a value: "" when the model fits the layout, else check_layout's message.
std::string layout_problem(const ModelConfig& model, const LayoutRequest& layout);

// Sequences per step: train.global_batch, or micro-batch x dp when the job leaves it 0.
int layout_global_batch(const LayoutRequest& layout);
// Micro-batches per step and pipeline: global batch / (micro-batch x dp), for a checked layout.
int layout_accumulation(const LayoutRequest& layout);

}  // namespace mpitron
