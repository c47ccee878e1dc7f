#include "mpitron/train/train_loop.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/comm_wait.hpp"

namespace mpitron {

StepTokenCounts fetch_step_batches(DataLoader& data, std::vector<Batch>& batches) {
  StepTokenCounts c;
  for (auto& b : batches) {
    data.next(b);
    for (int32_t t : b.targets) c.targets += t >= 0;
    for (size_t i = 0; i < b.positions.size(); ++i) {
      c.keys_seen += b.positions[i] + 1.0;
      c.keys_causal += static_cast<double>(i % static_cast<size_t>(b.seq_len)) + 1.0;
    }
  }
  return c;
}

bool skip_non_finite_step(const JobConfig& cfg, TrainCheckpointer& ckpt, TrainResult& result, int step, double loss,
                          double grad_norm, bool rank0) {
  // x86 makes a NaN with the sign bit set ("-nan") out of an invalid operation and passes a NaN
  // operand on as it is: the message says "nan" either way.
  if (std::isnan(loss)) loss = std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(grad_norm)) grad_norm = std::numeric_limits<double>::quiet_NaN();
  if (cfg.train.nan_policy == "skip") {
    ++result.skipped_steps;
    const int run = ++result.consecutive_skips;
    if (run >= cfg.train.nan_skip_limit)
      agreed_fail("step {}: {} consecutive steps with a non-finite loss or grad norm (this one: loss {}, grad norm {}); "
           "stopping at train.nan_skip_limit = {} (train.nan_policy = \"skip\"): the run is not recovering ({})",
           step, run, loss, grad_norm, cfg.train.nan_skip_limit, ckpt.last_saved_note());
    if (rank0)
      std::printf("step %d: non-finite loss %g or grad norm %g: step skipped (%d in a row; the run stops at "
                  "train.nan_skip_limit = %d)\n",
                  step, loss, grad_norm, run, cfg.train.nan_skip_limit);
    return true;
  }
  std::string why;
  const std::string saved = ckpt.save_last_good(step, result.last_loss, &why);
  if (saved.empty())
    agreed_fail("step {}: non-finite loss ({}) or grad norm ({}); stopping (train.nan_policy = \"stop\"). The state "
         "before this step is not saved either: {}; {}",
         step, loss, grad_norm, why, ckpt.last_saved_note());
  agreed_fail("step {}: non-finite loss ({}) or grad norm ({}); stopping (train.nan_policy = \"stop\"); the state before "
       "it is saved: {}",
       step, loss, grad_norm, ckpt.last_saved_note());
}

void StragglerProbe::begin_step() { wait_at_start_s_ = thread_comm_wait_seconds(); }

void StragglerProbe::gather(double step_ms, StepStats& s) {
  const int n = world_.size();
  if (n <= 1) return;
  const double busy_ms = std::max(0.0, step_ms - 1e3 * (thread_comm_wait_seconds() - wait_at_start_s_));
  std::vector<double> all(static_cast<size_t>(n), 0.0);
  all[static_cast<size_t>(world_.rank())] = busy_ms;
  world_.all_reduce_host_f64(all.data(), all.size(), ReduceOp::sum);  // a gather: one slot per rank
  const auto slowest = std::max_element(all.begin(), all.end());
  s.slowest_rank = static_cast<int>(slowest - all.begin());
  s.slowest_busy_ms = *slowest;
  std::vector<double> sorted = all;
  std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.end());
  s.median_busy_ms = sorted[static_cast<size_t>(n / 2)];
}

void StepLogger::log(int step, double loss, double lr, double grad_norm, double step_ms, double data_ms,
                     double comm_ms, double overlap, const MemStats& mem, StepStats s) {
  s.step = step;
  s.total_steps = cfg_.train.steps;
  s.loss = loss;
  s.lr = lr;
  s.grad_norm = grad_norm;
  s.step_ms = step_ms;
  s.tokens_per_s = tokens_ / (step_ms / 1e3);
  s.step_tokens = static_cast<int64_t>(tokens_);
  // Document masking: only the attention work the queries' documents need counts.
  const double flops = flops_ - attn_flops_ * (1.0 - s.attention_fraction);
  s.gflops_per_rank = flops * tokens_ / world_ / (step_ms / 1e3) / 1e9;
  // A measured peak (the clock estimate, or a probe taken in a busy moment) below what a step
  // achieves is raised to it, once said: MFU never reads above 100%. A peak the job sets stays.
  if (peak_ > 0 && cfg_.train.peak_flops <= 0 && s.gflops_per_rank * 1e9 > peak_) {
    if (!raised_peak_)
      std::printf("note: step %d ran at %.1f GFLOP/s/rank, above the start-up peak (%.1f: the larger of the ISA/clock "
                  "estimate and the GEMM probe; the clock may run above the one the estimate read, or the probe "
                  "ran in a busy moment): MFU is measured against the highest rate achieved from here\n",
                  step, s.gflops_per_rank, peak_ / 1e9);
    raised_peak_ = true;
    peak_ = s.gflops_per_rank * 1e9;
  }
  s.mfu = peak_ > 0 ? s.gflops_per_rank * 1e9 / peak_ : 0;
  s.probe_frac = probe_ > 0 ? s.gflops_per_rank * 1e9 / probe_ : 0;
  s.data_wait_ms = data_ms;
  s.comm_ms = comm_ms;
  s.overlap = overlap;
  s.mem = mem;
  std::printf("%s\n", format_step_line(s).c_str());
  if (s.mfu > 1.0 && !warned_mfu_) {
    warned_mfu_ = true;
    std::printf("note: MFU above 100%%: the peak it is measured against (%.1f GFLOP/s/rank, train.peak_flops) is "
                "below what the machine does; leave train.peak_flops at 0 for the hardware peak\n",
                peak_ / 1e9);
  }
  std::fflush(stdout);
  write_step_metrics(metrics_, s);
}

void StepLogger::log_val(int step, double val_loss, TrainResult& result, bool rank0) {
  if (result.first_val_loss < 0) result.first_val_loss = val_loss;
  result.last_val_loss = val_loss;
  if (!rank0) return;
  std::printf("step %d | val loss %.4f\n", step, val_loss);
  std::fflush(stdout);
  metrics_.write({{"step", int64_t{step}}, {"val_loss", val_loss}});
}

}  // namespace mpitron
