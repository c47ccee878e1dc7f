// Pieces of the training loop (trainer.cpp), kept apart to keep it short: fetching a step's
// micro-batches, the non-finite policy, the straggler probe, the per-step log line / metrics
// record, the validation record.
#pragma once
#include <vector>

#include "mpitron/config/job_config.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/train/metrics.hpp"
#include "mpitron/train/step_stats.hpp"
#include "mpitron/train/train_checkpoint.hpp"
#include "mpitron/train/trainer.hpp"

namespace mpitron {

// What one rank's micro-batches of a step hold, summed: target tokens (targets >= 0; the loss
// normaliser is the global batch's count, needed before the first backward) and, with document
// masking, the keys their queries see (each its position in its document + 1) and the keys
// causal attention would (its index + 1). The trainer sums them over dp in one reduction.
struct StepTokenCounts {
  double targets = 0, keys_seen = 0, keys_causal = 0;
  // The share of causal attention's work the documents need (1 without document masking).
  double attention_fraction() const { return keys_causal > 0 ? keys_seen / keys_causal : 1.0; }
};
// Fills every micro-batch of the step; returns this rank's counts.
StepTokenCounts fetch_step_batches(DataLoader& data, std::vector<Batch>& batches);

// train.nan_policy for a step whose loss or grad norm is not finite: "skip" -> true (the caller
// skips the optimizer step), an Error at train.nan_skip_limit consecutive ones; "stop" ->
// checkpoint of the last good step (unless it holds NaN/inf too), then an Error.
bool skip_non_finite_step(const JobConfig& cfg, TrainCheckpointer& ckpt, TrainResult& result, int step, double loss,
                          double grad_norm, bool rank0);

// Who was slowest: each rank's busy time in a step (step time minus the time its step thread sat
// in communication waits, distributed/comm_wait.hpp), gathered over the world only on logged steps (one
// small all-reduce of world doubles). A slow node computes longest and waits least; the others
// wait for it, so the wall step time alone cannot name it.
class StragglerProbe {
 public:
  explicit StragglerProbe(Comm& world) : world_(world) {}
  void begin_step();  // on the thread that runs the step
  // Collective over the world: call on every rank at the same steps (StepLogger::due). Fills
  // s.slowest_rank / slowest_busy_ms / median_busy_ms (left unset on a single rank).
  void gather(double step_ms, StepStats& s);

 private:
  Comm& world_;
  double wait_at_start_s_ = 0;
};

// Rank 0's step line and metrics.jsonl record, every log.every steps (and the first and last).
class StepLogger {
 public:
  // peak_flops: MFU's reference (0: unknown); probe_flops: a GEMM probe (0: none), reported as
  // "% of GEMM probe" beside it.
  // attention_flops_per_token: the part of flops_per_token that StepStats::attention_fraction scales.
  StepLogger(const JobConfig& cfg, MetricsSink& metrics, int64_t tokens_per_step, double flops_per_token,
             int world, double peak_flops, double probe_flops = 0, double attention_flops_per_token = 0)
      : cfg_(cfg), metrics_(metrics), tokens_(tokens_per_step), flops_(flops_per_token), world_(world), peak_(peak_flops),
        probe_(probe_flops), attn_flops_(attention_flops_per_token) {}
  bool due(int step) const { return step % cfg_.log.every == 0 || step == cfg_.train.steps || step == 1; }
  // Rates from step_ms; MFU 0 when the peak is unknown (0).
  // `s` carries what the caller measured beyond the arguments (the straggler report).
  void log(int step, double loss, double lr, double grad_norm, double step_ms, double data_ms, double comm_ms,
           double overlap, const MemStats& mem, StepStats s = {});
  // The validation loss line and record; also updates result's first/last val loss.
  void log_val(int step, double val_loss, TrainResult& result, bool rank0);

 private:
  const JobConfig& cfg_;
  MetricsSink& metrics_;
  int64_t tokens_;
  double flops_;
  int world_;
  double peak_, probe_, attn_flops_;
  bool warned_mfu_ = false, raised_peak_ = false;
};

}  // namespace mpitron
