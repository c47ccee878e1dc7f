// Formatting of the per-step log line and the metrics record (rank 0).
#pragma once
#include <string>

#include "mpitron/core/memory.hpp"
#include "mpitron/train/metrics.hpp"

namespace mpitron {

struct StepStats {
  int step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double step_ms = 0;
  double tokens_per_s = 0;
  double gflops_per_rank = 0;  // achieved model FLOP/s per rank / 1e9
  double mfu = 0;              // achieved / hardware peak per rank (peak_probe.hpp)
  double probe_frac = 0;       // achieved / the start-up GEMM probe (0: no probe)
  double data_wait_ms = 0;     // time next() blocked on the loader
  double comm_ms = 0;          // DP communication in flight (gradient buckets, ZeRO gathers)
  double overlap = 1;          // fraction of comm_ms hidden behind compute (1 - exposed / comm)
  // Targets the loss counted (the global batch's, all but the loss-masked ones) of step_tokens.
  int64_t trained_tokens = -1, step_tokens = 0;
  // Document masking: the share of causal attention's work the step's documents needed (the
  // model FLOPs, and so MFU, count only that share of the attention term).
  double attention_fraction = 1;
  MemStats mem;
  // The straggler report (several ranks): the rank that was busy longest in this step (step
  // time minus the time it sat waiting on communication) and by how much, against the median.
  int slowest_rank = -1;
  double slowest_busy_ms = 0, median_busy_ms = 0;
};

std::string format_step_line(const StepStats& s);
void write_step_metrics(MetricsSink& w, const StepStats& s);

}  // namespace mpitron
