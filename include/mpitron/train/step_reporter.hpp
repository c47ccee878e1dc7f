// Everything a training run tells its user, apart from the step itself (train_step.hpp): the
// start-up lines and warnings, the memory by rank (at start, after step 1) and the memory
// ledger check (train.check_ledger), the step line and its metrics record (StepLogger, with the
// straggler probe), the pipeline's idle fraction per stage and the context-parallel ring's
// wait per step (metrics records), the timeline of train.trace_steps, and the closing tensor-
// and context-parallel communication figures. Records go to a MetricsSink (metrics.hpp; the
// metrics.jsonl file on rank 0). Collective where it gathers (memory, straggler probe, pipeline
// idle): every rank calls every method at the same steps.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpitron/core/trace.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/plan/ledger.hpp"
#include "mpitron/plan/step_time.hpp"
#include "mpitron/train/metrics.hpp"
#include "mpitron/train/train_backend.hpp"
#include "mpitron/train/train_result.hpp"
#include "mpitron/train/step_stats.hpp"
#include "mpitron/distributed/comm.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/train/train_step.hpp"

namespace mpitron {

// Who was slowest: each rank's busy time in a step (step time minus the time its step thread sat
// in communication waits, distributed/wait_registry.hpp), gathered over the world only on logged steps (one
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

class StepReporter {
 public:
  // metrics: where every record goes (rank 0's metrics.jsonl; a disabled writer elsewhere).
  StepReporter(const TrainSetup& s, TrainBackend& backend, MetricsSink& metrics, int start_step, const PeakFlops& peak);
  ~StepReporter();
  // Start-up (after the resume decided start_step): the model, layout and data lines and the
  // ineffective-settings warnings (rank 0), the memory at start, the ledger check at start.
  void start(const DataLoader& train_data);
  void begin_step(int step);  // the step's trace span (inside train.trace_steps), the straggler clock
  // After the optimizer step (step_ms read just before): closes the step's span, takes the step's
  // communication timing, writes the trace at the window's end, logs memory and checks the ledger
  // after step 1, writes the step line (when due), the ring wait and the pipeline idle records.
  void end_step(int step, const StepOutcome& r, double lr, double step_ms, double data_ms);
  void skipped_step();  // a non-finite step: its span closed, its communication timing dropped
  void validation(int step, double val_loss, TrainResult& result);
  // The end of the run: the trace if the run ended inside its window, per-step TP and CP figures.
  void finish(const TrainResult& result);

 private:
  void log_memory(const char* when);
  void check_ledger(const char* when);
  void check_prediction(int step, double step_ms);
  void report_moe(int step, bool log_line);  // collective (dp x cp, pp) on MoE models, every step
  void note_moe_load(int step, const double* tokens, int n_experts);  // rank 0, train.check_prediction
  void report_fp8(int step, bool log_line);  // collective (world) under train.precision = "fp8", every step
  void write_trace();

  const TrainSetup& s_;
  TrainBackend& backend_;
  MetricsSink& metrics_;
  const int start_step_;
  const bool rank0_;
  PeakFlops peak_;
  RankLedger predicted_;
  std::string prediction_text_;
  std::optional<StepPrediction> predicted_step_;  // train.check_prediction
  std::vector<double> measured_ms_;               // steps after the first, rank 0
  // MoE routing beside the prediction (which prices balanced routing): per step after the first and
  // MoE block, the busiest expert's and the busiest expert-parallel rank's kept copies over the
  // balanced share (rank 0).
  std::vector<double> moe_expert_load_, moe_ep_load_;
  StepLogger logger_;
  StragglerProbe straggler_;
  std::optional<trace::Span> step_span_;
  double tp_comm_after_first_ = 0;  // seconds in TP collectives after the first step (it warms up)
  double cp_wait_after_first_ = 0, cp_wait_prev_ = 0;
  double ep_prev_ = 0;  // seconds in MoE token exchanges before this step
};

}  // namespace mpitron
