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
  double mfu = 0;              // achieved / peak per rank
  double data_wait_ms = 0;     // time next() blocked on the loader
  double comm_ms = 0;          // DP communication in flight (gradient buckets, ZeRO gathers)
  double overlap = 1;          // fraction of comm_ms hidden behind compute (1 - exposed / comm)
  MemStats mem;
};

std::string format_step_line(const StepStats& s);
void write_step_metrics(MetricsWriter& w, const StepStats& s);

}  // namespace mpitron
