#include "mpitron/train/train_loop.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "mpitron/core/cuda_plugin.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/trace.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/distributed/step_activity.hpp"
#include "mpitron/distributed/fault_inject.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/parallel/layout_rules.hpp"
#include "mpitron/parallel/pipeline.hpp"
#include "mpitron/train/lr_schedule.hpp"
#include "mpitron/train/metrics.hpp"
#include "mpitron/train/param_dump.hpp"
#include "mpitron/train/train_backend.hpp"
#include "mpitron/train/train_checkpoint.hpp"
#include "mpitron/train/train_data.hpp"
#include "mpitron/train/step_reporter.hpp"
#include "mpitron/train/train_step.hpp"

namespace mpitron {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Mean loss over the validation set's first `batches` micro-batches per DP rank (all DP ranks
// together; the same batches every time), through the pipeline (the last stage has the loss).
double evaluate(PipelineExecutor& pipe, ValidationLoader& val, ProcessGrid& grid, bool reproducible) {
  ActivityPhase phase("eval");
  fault_point("eval");
  val.reset();
  Batch b;
  double v[2] = {0, 0};  // loss sum, target tokens
  ExactSum exact;        // reproducible: the loss sum in any order and over any dp, the same bits
  while (val.next(b)) {
    int64_t n = 0;
    const double loss = pipe.forward_only(b, &n);
    v[0] += loss;
    exact.add(loss);
    v[1] += static_cast<double>(n);
  }
  grid.dp_cp().all_reduce_host_f64(v, 2, ReduceOp::sum);  // cp: each rank's share of the tokens
  if (grid.shape().pp > 1) grid.pp().all_reduce_host_f64(v, 2, ReduceOp::sum);
  if (reproducible) {
    exact.all_reduce(grid.dp_cp());
    if (grid.shape().pp > 1) exact.all_reduce(grid.pp());
    v[0] = exact.value();
  }
  return v[0] / std::max(1.0, v[1]);
}

}  // namespace

TrainResult run_training(const JobConfig& cfg, const LaunchInfo& launch, ProcessGrid& grid) {
  const GridShape& gs = grid.shape();
  // The ranges of single keys (train.steps, log.every, train.backend's names) are the key registry's.
#if !MPITRON_CUDA
  usage_check(cfg.train.backend == "cpu", "train.backend = \"nccl\" needs a CUDA build of mpitron (make CUDA=1)");
#endif
  {
    const std::vector<int>& tr = cfg.train.trace_steps;
    usage_check(tr.empty() || (tr.size() == 2 && tr[0] >= 1 && tr[0] <= tr[1]),
                "bad value for 'train.trace_steps': {} (allowed: [first, last] steps with 1 <= first <= last, or [] "
                "for off)",
                fmt::format("[{}]", fmt::join(tr, ", ")));
  }
  const bool rank0 = grid.rank() == 0;
  const int dp = gs.dp, dp_rank = grid.coord().dp;
  const BatchPlan bp = plan_batches(cfg, dp);

  TrainData data = open_train_data(cfg, bp, dp, dp_rank, rank0);
  if (fault_poison("model_config")) data.model.rope_theta = INFINITY;  // past the ranges: the start-up save check's test
  const ModelConfig& mc = data.model;
  DataLoader& train_data = *data.train;
  ValidationLoader* val_data = data.val.get();

  // Every rule that ties the model, the batch and the backend to this layout (also what `plan` and
  // `train --dry-run` ask): parallel/layout_rules.hpp.
  check_layout(mc, layout_request(cfg, gs));

  // The backend: this rank's model chunks with their data parallel and optimizer, as a pipeline
  // (train_backend.hpp). The schedule decides how many micro-batches' activations each chunk keeps.
  const TrainSetup setup{cfg, launch, grid, mc, bp, pipeline_schedule_for_job(cfg.parallel, gs.pp, bp.accum)};
  std::unique_ptr<TrainBackend> backend;
  // ProcessGrid has checked that every rank has a GPU (and so has loaded the CUDA backend).
  if (cfg.train.backend == "nccl") backend = MPITRON_CUDA_ENTRY(mpitron_cuda_make_gpu_backend)(setup);
  if (!backend) backend = make_cpu_backend(setup);
  LrSchedule sched{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.steps};
  // Resume (train.resume) now; save in the loop (checkpoint.every, last step, preemption).
  TrainCheckpointer ckpt(cfg, grid, mc, backend->checkpoint_state(), train_data);
  const int start_step = ckpt.resume();
  const PeakFlops peak =
      cfg.train.peak_flops > 0 ? PeakFlops{cfg.train.peak_flops, 0, "train.peak_flops"} : backend->peak_flops();
  MetricsWriter metrics(rank0 ? cfg.run_dir() + "/metrics.jsonl" : "", /*append=*/start_step > 0, start_step);
  StepReporter report(setup, *backend, metrics, start_step, peak);
  report.start(train_data);

  TrainResult result;
  std::vector<Batch> batches(bp.accum);
  auto run_eval = [&](int step) {
    if (val_data) report.validation(step, evaluate(backend->pipeline(), *val_data, grid, cfg.train.reproducible), result);
  };
  run_eval(start_step);
  // Checkpoint (when due) and the agreed preemption signal, on every step, skipped ones too. True:
  // preempted, the checkpoint is written and every rank stops here.
  auto end_of_step = [&](int step, double loss) {
    set_activity_phase("checkpoint");
    const auto t = Clock::now();
    result.preempted = ckpt.end_of_step(step, loss);
    // What a save (or the wait for a background one) held the step up: bench/checkpoint's figure.
    if (ckpt.last_started() == step && rank0)
      metrics.write({{"step", int64_t{step}}, {"checkpoint_blocked_ms", ms_since(t)},
                     {"checkpoint_mode", std::string(cfg.checkpoint.async && !result.preempted && step != cfg.train.steps
                                                         ? "background" : "foreground")}});
    return result.preempted != 0;
  };
  for (int step = start_step + 1; step <= cfg.train.steps; ++step) {
    const auto t0 = Clock::now();
    report.begin_step(step);
    set_activity_step(step);
    set_activity_phase("data");
    fault_point("step_begin");
    ckpt.begin_step();
    const StepTokenCounts mine = fetch_step_batches(train_data, batches);
    const double data_ms = ms_since(t0);
    if (trace::enabled()) trace::event("next batches", trace::data, t0, Clock::now());
    double sums[3] = {mine.targets, mine.keys_seen, mine.keys_causal};  // the global batch's: one reduction
    if (dp > 1) grid.dp().all_reduce_host_f64(sums, 3, ReduceOp::sum);
    const StepTokenCounts global{sums[0], sums[1], sums[2]};

    const double lr = sched.at(step);
    StepOutcome r = train_step(*backend, grid, batches, global.targets, lr, cfg.optim.grad_clip,
                                 cfg.train.reproducible);
    r.attention_fraction = global.attention_fraction();
    if (!r.updated) {  // throws unless train.nan_policy = "skip" allows one more
      skip_non_finite_step(cfg, ckpt, result, step, r.loss, r.grad_norm, rank0);
      report.skipped_step();  // the state is the previous step's: checkpoints and preemption as on any step
      if (end_of_step(step, result.last_loss)) return result;
      result.steps_done = step;
      continue;
    }
    result.consecutive_skips = 0;
    set_activity_phase("logging");
    report.end_step(step, r, lr, ms_since(t0), data_ms);
    if (step == start_step + 1) result.first_loss = r.loss;  // this run's first step (after a resume too)
    result.last_loss = r.loss;
    result.steps_done = step;
    if (cfg.eval.every > 0 && step % cfg.eval.every == 0 && step != cfg.train.steps) run_eval(step);
    if (end_of_step(step, r.loss)) return result;
  }
  report.finish(result);
  set_activity_step(-1);
  run_eval(cfg.train.steps);
  if (!cfg.train.dump_params.empty()) {
    std::vector<Buffer<float>> gathered;  // ZeRO-3 and device memory: the full parameters exist on the host only for the dump
    dump_full_params(cfg.train.dump_params, mc, cfg.parallel.pp_layers, setup.schedule.virtual_stages, grid,
                     backend->stage().full_params(gathered));
  }
  return result;
}

}  // namespace mpitron
