#include "mpitron/train/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/core/trace.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/distributed/activity.hpp"
#include "mpitron/distributed/fault_inject.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/parallel/memory_report.hpp"
#include "mpitron/parallel/pipeline.hpp"
#include "mpitron/plan/check.hpp"
#include "mpitron/train/lr_schedule.hpp"
#include "mpitron/train/metrics.hpp"
#include "mpitron/train/param_dump.hpp"
#include "mpitron/train/train_backend.hpp"
#include "mpitron/train/train_checkpoint.hpp"
#include "mpitron/train/train_data.hpp"
#include "mpitron/train/train_loop.hpp"

namespace mpitron {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Mean loss over the validation set's first `batches` micro-batches per DP rank (all DP ranks
// together; the same batches every time), through the pipeline (the last stage has the loss).
double evaluate(PipelineExecutor& pipe, ValidationLoader& val, ProcessGrid& grid) {
  ActivityPhase phase("eval");
  fault_point("eval");
  val.reset();
  Batch b;
  double v[2] = {0, 0};  // loss sum, target tokens
  while (val.next(b)) {
    int64_t n = 0;
    v[0] += pipe.forward_only(b, &n);
    v[1] += static_cast<double>(n);
  }
  grid.dp_cp().all_reduce_host_f64(v, 2, ReduceOp::sum);  // cp: each rank's share of the tokens
  if (grid.shape().pp > 1) grid.pp().all_reduce_host_f64(v, 2, ReduceOp::sum);
  return v[0] / std::max(1.0, v[1]);
}

// The start-up model line after "model NAME: ": the architecture and every size a job can override.
std::string model_line(const ModelConfig& mc, int tp, size_t num_params) {
  const bool llama = mc.arch == Arch::llama;
  std::string heads = llama && mc.n_kv_head != mc.n_head ? fmt::format("{} heads ({} kv)", mc.n_head, mc.n_kv_head)
                                                          : fmt::format("{} heads", mc.n_head);
  std::string arch = llama ? fmt::format("llama (RMSNorm eps {:g}, RoPE theta {:g}, SwiGLU, {} head)", mc.norm_eps,
                                         mc.rope_theta, mc.tied_embeddings ? "tied" : "untied")
                           : std::string(mc.tied_embeddings ? "gpt2" : "gpt2 (untied head)");
  return fmt::format("{}, {} layers, {}, d_model {}, d_ff {}, vocab {} (padded {}), seq {}, {:.2f}M parameters", arch,
                     mc.n_layer, heads, mc.d_model, mc.d_ff, mc.vocab_size, mc.padded_vocab(tp), mc.seq_len,
                     num_params / 1e6);
}

// Settings that are valid but cannot take effect on this run, said once on rank 0 (stderr).
void warn_ineffective_settings(const JobConfig& cfg, int start_step) {
  auto warn = [](const std::string& m) { std::fprintf(stderr, "mpitron: warning: %s\n", m.c_str()); };
  const int steps = cfg.train.steps;
  if (const auto& tr = cfg.train.trace_steps; tr.size() == 2) {
    if (tr[0] > steps)
      warn(fmt::format("train.trace_steps = [{}, {}] starts after the last step (train.steps = {}): no trace is written",
                       tr[0], tr[1], steps));
    else if (tr[1] <= start_step)
      warn(fmt::format("train.trace_steps = [{}, {}] ends before this run's first step ({}, resumed): no trace is "
                       "written", tr[0], tr[1], start_step + 1));
    else if (tr[1] > steps)
      warn(fmt::format("train.trace_steps = [{}, {}] ends after the last step: the trace covers steps {}..{}", tr[0],
                       tr[1], std::max(tr[0], start_step + 1), steps));
  }
  if (cfg.eval.every > 0 && cfg.eval.batches == 0)
    warn(fmt::format("eval.every = {} has no effect: eval.batches = 0 turns validation off", cfg.eval.every));
  else if (cfg.eval.every >= steps)
    warn(fmt::format("eval.every = {} is not below train.steps = {}: validation runs only at the start and the end",
                     cfg.eval.every, steps));
  if (cfg.checkpoint.every > steps)
    warn(fmt::format("checkpoint.every = {} is above train.steps = {}: only the final checkpoint is written",
                     cfg.checkpoint.every, steps));
  if (cfg.optim.warmup_steps > steps)
    warn(fmt::format("optim.warmup_steps = {} is above train.steps = {}: the learning rate never reaches optim.lr",
                     cfg.optim.warmup_steps, steps));
  if (cfg.optim.min_lr > cfg.optim.lr)
    warn(fmt::format("optim.min_lr = {} is above optim.lr = {}: the cosine schedule rises instead of decaying",
                     cfg.optim.min_lr, cfg.optim.lr));
  std::fflush(stderr);
}

}  // namespace

std::string chunks_note(const TrainSetup& s) {
  const int v = s.schedule.virtual_stages;
  return v > 1 ? fmt::format(" (interleaved, {} model chunks per rank)", v) : "";
}

std::string batch_note(const TrainSetup& s) {
  return fmt::format("global batch {} = micro {} x dp {} x accum {} ({} tokens/step)", s.bp.global, s.bp.micro,
                     s.grid.shape().dp, s.bp.accum, int64_t{s.bp.global} * s.mc.seq_len);
}

DataParallelOptions dp_options(const JobConfig& cfg) {
  return {cfg.parallel.zero, cfg.parallel.bucket_mb, parse_progress_mode(cfg.parallel.dp_progress),
          AdamWOptions{cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay}};
}

void StageBackend::build(const TrainSetup& s, std::vector<std::unique_ptr<ModelChunk>> chunks,
                         std::vector<PipelineStage*> stages, FlatOps& ops, Comm& pp, const DataParallelOptions& dp) {
  tp_rank_ = s.grid.coord().tp;
  model_ = std::make_unique<StageModel>(std::move(chunks), ops, s.grid, dp);
  schedule_ = std::make_unique<PipelineSchedule>(s.schedule);
  pipe_ = std::make_unique<PipelineExecutor>(*schedule_, pp, std::move(stages));
  ckpt_state_ = std::make_unique<StageCheckpointState>(*model_, s.mc, s.grid.coord());
}

void StageBackend::release_stage() {
  ckpt_state_.reset();
  pipe_.reset();
  model_.reset();
}

void StageBackend::optimizer_step(double lr) {
  model_->optimizer_step(lr);
  model_->ops().synchronize();  // the update is complete on return: the loop reads the step time next
  if (fault_poison("params")) poison_state();
}

// MPITRON_FAULT=poison@params: this rank's parameters (its ZeRO-3 shard) and AdamW moments become
// NaN, as after a diverged update, for the tests of the checkpoint's finite guard.
void StageBackend::poison_state() {
  FlatOps& ops = model_->ops();
  for (int c = 0; c < model_->size(); ++c) {
    ModelChunk& chunk = model_->chunk(c);
    DataParallel& ddp = model_->ddp(c);
    ddp.sync_params();  // ZeRO-1/2: no gather may land on the poisoned buffer later
    const bool sharded = ddp.zero() >= 3;
    const size_t np = sharded ? ddp.shard().size() : chunk.num_params(), nm = ddp.shard().size();
    const std::vector<float> nan(std::max(np, nm), std::numeric_limits<float>::quiet_NaN());
    ops.from_host(sharded ? ddp.shard_params() : chunk.param_data(), nan.data(), np);
    ops.from_host(ddp.optimizer().exp_avg(), nan.data(), nm);
    if (!sharded) chunk.params_changed();
  }
  ops.synchronize();
}

StepComm StageBackend::take_comm() {
  const CommTiming t = model_->take_timing();
  return {t.comm_ms, t.overlap()};
}

TrainResult run_training(const JobConfig& cfg, const LaunchInfo& launch, ProcessGrid& grid) {
  const GridShape& gs = grid.shape();
  usage_check(!cfg.parallel.sp || gs.tp > 1, "parallel.sp needs parallel.tp > 1 (got tp {})", gs.tp);
  usage_check(cfg.train.backend == "cpu" || cfg.train.backend == "nccl", "train.backend=\"{}\" is not one of: cpu, nccl",
              cfg.train.backend);
#if !MPITRON_CUDA
  usage_check(cfg.train.backend == "cpu", "train.backend = \"nccl\" needs a CUDA build of mpitron (make CUDA=1)");
#endif
  usage_check(cfg.train.steps > 0, "train.steps must be > 0 (got {})", cfg.train.steps);
  usage_check(cfg.log.every > 0, "log.every must be > 0 (got {})", cfg.log.every);
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

  usage_check(mc.n_head % gs.tp == 0, "model.n_head ({}) must be divisible by parallel.tp ({}): attention heads are "
              "split over the TP ranks", mc.n_head, gs.tp);
  usage_check(mc.seq_len % (2 * gs.cp) == 0,
              "parallel.cp = {}: model.seq_len ({}) must be divisible by 2 x cp = {} (each cp rank holds two chunks of "
              "every sequence, for causal load balance)",
              gs.cp, mc.seq_len, 2 * gs.cp);
  usage_check(!cfg.parallel.sp || (mc.seq_len / gs.cp) % gs.tp == 0,
              "parallel.sp: model.seq_len / parallel.cp ({}) must be divisible by parallel.tp ({})", mc.seq_len / gs.cp,
              gs.tp);

  // The backend: this rank's model chunks with their data parallel and optimizer, as a pipeline
  // (train_backend.hpp). The schedule decides how many micro-batches' activations each chunk keeps.
  const TrainSetup setup{cfg, launch, grid, mc, bp, pipeline_schedule_for_job(cfg.parallel, gs.pp, bp.accum)};
  std::unique_ptr<TrainBackend> backend;
#if MPITRON_CUDA
  if (cfg.train.backend == "nccl") backend = make_gpu_backend(setup);  // ProcessGrid has checked every rank has a GPU
#endif
  if (!backend) backend = make_cpu_backend(setup);
  PipelineExecutor& pipe = backend->pipeline();
  MemTracker& memory = backend->memory();
  LrSchedule sched{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.steps};
  // Resume (train.resume) now; save in the loop (checkpoint.every, last step, preemption).
  TrainCheckpointer ckpt(cfg, grid, mc, backend->checkpoint_state(), train_data);
  const int start_step = ckpt.resume();
  if (rank0) warn_ineffective_settings(cfg, start_step);

  const double flops_per_token = gpt_flops_per_token(mc);
  const int64_t tokens_per_step = int64_t{bp.global} * mc.seq_len;
  PeakFlops peak = cfg.train.peak_flops > 0 ? PeakFlops{cfg.train.peak_flops, 0, "train.peak_flops"} : backend->peak_flops();

  MetricsWriter metrics(rank0 ? cfg.run_dir() + "/metrics.jsonl" : "", /*append=*/start_step > 0, start_step);
  if (rank0) {
    std::printf("model %s: %s\n%s\n"
                "data %s: %lld samples per rank per epoch | run dir %s\n%s\n",
                mc.name.c_str(), model_line(mc, gs.tp, backend->num_params()).c_str(),
                backend->layout_line(peak).c_str(), train_data.describe().c_str(),
                static_cast<long long>(train_data.samples_per_epoch()), cfg.run_dir().c_str(),
                backend->describe().c_str());
    std::fflush(stdout);
  }
  // Every rank's tracked bytes by category, printed by rank 0 and recorded in metrics.jsonl.
  auto log_memory = [&](const char* when) {
    auto all = gather_rank_memory(grid.world(), memory);
    if (!rank0) return;
    for (const auto& m : all) {
      std::printf("memory %s %s\n", when, format_rank_memory(m, std::string(when) != "at start").c_str());
      std::vector<std::pair<std::string, MetricsWriter::Value>> rec = {{"memory", std::string(when)},
                                                                        {"rank", int64_t{m.rank}}};
      for (size_t c = 0; c < kMemCategories; ++c) {
        std::string name(mem_name(static_cast<Mem>(c)));
        rec.push_back({name, m.mem.live[c]});
        rec.push_back({name + "_peak", m.mem.peak[c]});
      }
      metrics.write(rec);
    }
    std::fflush(stdout);
  };
  log_memory("at start");
  // train.check_ledger: every rank's tracked bytes against the memory ledger's prediction (src/plan).
  PlanInput plan_in = plan_input_from_job(cfg, mc, launch.world);
  plan_in.cpu_bf16_gemms = backend->cpu_bf16_gemms();  // train.precision = auto decided at start-up
  const RankLedger predicted = cfg.train.check_ledger ? rank_ledger(plan_in, grid.rank()) : RankLedger{};
  auto check_ledger = [&](const char* when) {
    if (!cfg.train.check_ledger) return;
    std::printf("%s\n", check_against_ledger(predicted, memory.stats(), when).text.c_str());
    std::fflush(stdout);
  };
  check_ledger("at start");

  TrainResult result;
  std::vector<Batch> batches(bp.accum);

  StepLogger logger(cfg, metrics, tokens_per_step, flops_per_token, launch.world, peak.peak, peak.probe);
  StragglerProbe straggler(grid.world());
  auto run_eval = [&](int step) {
    if (val_data) logger.log_val(step, evaluate(pipe, *val_data, grid), result, rank0);
  };
  run_eval(start_step);

  double tp_comm_after_first = 0;  // seconds in TP collectives (backend->tp_comm_seconds) after the first step
  double cp_wait_after_first = 0, cp_wait_prev = std::max(0.0, backend->cp_wait_seconds());
  // The timeline of steps [a, b] (train.trace_steps, core/trace.hpp): one file per rank.
  const std::vector<int>& tr = cfg.train.trace_steps;
  auto write_trace = [&] {  // at the window's last step, or when the run ends inside it
    trace::set_enabled(false);
    trace::write(fmt::format("{}/trace/rank_{}.json", cfg.run_dir(), launch.rank), launch.rank);
  };
  // Checkpoint (when due) and the agreed preemption signal, on every step, skipped ones too. True:
  // preempted, the checkpoint is written and every rank stops here.
  auto end_of_step = [&](int step, double loss) {
    set_activity_phase("checkpoint");
    result.preempted = ckpt.end_of_step(step, loss);
    return result.preempted != 0;
  };
  for (int step = start_step + 1; step <= cfg.train.steps; ++step) {
    auto t0 = Clock::now();
    if (!tr.empty() && step >= tr[0] && step <= tr[1]) trace::set_enabled(true);
    std::optional<trace::Span> step_span;
    if (trace::enabled()) step_span.emplace(fmt::format("step {}", step));
    set_activity_step(step);
    set_activity_phase("data");
    fault_point("step_begin");
    straggler.begin_step();
    ckpt.begin_step();
    memory.reset_peaks();
    double counts[2] = {0, fetch_step_batches(train_data, batches)};  // [loss sum, target tokens]
    double data_ms = ms_since(t0);
    if (trace::enabled()) trace::event("next batches", trace::data, t0, Clock::now());
    const double n_tokens = dp > 1 ? grid.dp().all_reduce_scalar(counts[1], ReduceOp::sum) : counts[1];

    set_activity_phase("forward/backward");
    fault_point("forward");
    backend->begin_step(bp.accum);
    // The schedule's forwards and backwards (pp = 1: plain accumulation); backward launches the
    // gradient buckets as their last unit finishes.
    const PipelineStepStats ps = pipe.run(batches, static_cast<float>(1.0 / n_tokens));
    counts[0] = ps.loss_sum;  // last stage; 0 elsewhere
    set_activity_phase("grad sync");
    fault_point("grad_sync");
    {
      trace::Span sp("finish backward (gradients reduced)");
      backend->finish_backward();
    }
    set_activity_phase("loss and grad norm");
    // The loss over DP and CP (each cp rank holds a share of every sequence's tokens).
    if (dp * gs.cp > 1) counts[0] = grid.dp_cp().all_reduce_scalar(counts[0], ReduceOp::sum);
    if (gs.pp > 1) counts[0] = grid.pp().all_reduce_scalar(counts[0], ReduceOp::sum);  // loss to every stage
    double loss = counts[0] / n_tokens;
    // TP: sharded parameters summed over the TP group, replicated ones counted once (TP rank 0).
    double grad_sq = backend->grad_sum_squares();
    if (gs.pp > 1) grad_sq = grid.pp().all_reduce_scalar(grad_sq, ReduceOp::sum);
    if (gs.tp > 1) grad_sq = grid.tp().all_reduce_scalar(grad_sq, ReduceOp::sum);
    double grad_norm = std::sqrt(grad_sq);
    double lr = sched.at(step);

    if ((!std::isfinite(loss) || !std::isfinite(grad_norm)) &&
        skip_non_finite_step(cfg, ckpt, result, step, loss, grad_norm, rank0)) {
      // The state is the previous step's, unchanged: checkpoints and preemption as on any step.
      step_span.reset();
      backend->take_comm();
      if (end_of_step(step, result.last_loss)) return result;
      result.steps_done = step;
      continue;
    }
    result.consecutive_skips = 0;
    if (cfg.optim.grad_clip > 0 && grad_norm > cfg.optim.grad_clip) {
      // torch.nn.utils.clip_grad_norm_'s rule.
      backend->scale_grads(static_cast<float>(cfg.optim.grad_clip / (grad_norm + 1e-6)));
    }
    set_activity_phase("optimizer");
    fault_point("optimizer");
    {
      trace::Span sp("optimizer step");
      backend->optimizer_step(lr);
    }
    set_activity_phase("logging");
    double step_ms = ms_since(t0);
    step_span.reset();
    const StepComm comm = backend->take_comm();  // also the step's collectives on the timeline
    if (trace::enabled() && step == tr[1]) {
      write_trace();
      if (rank0) std::printf("trace: steps %d-%d of every rank in %s/trace/rank_*.json (ui.perfetto.dev)\n", tr[0], tr[1],
                             cfg.run_dir().c_str());
    }
    if (step == 1) log_memory("step 1");
    if (step == 1) check_ledger("after step 1");

    if (step == start_step + 1) tp_comm_after_first = backend->tp_comm_seconds();  // the first step warms up
    if (const double w = backend->cp_wait_seconds(); w >= 0) {  // the ring's exposed wait this step (bench/cp)
      if (step == start_step + 1) cp_wait_after_first = w;
      if (rank0) metrics.write({{"step", int64_t{step}}, {"cp_wait_ms", 1e3 * (w - cp_wait_prev)}});
      cp_wait_prev = w;
    }
    if (step == start_step + 1) result.first_loss = loss;  // this run's first step (after a resume too)
    result.last_loss = loss;
    result.steps_done = step;
    if (logger.due(step)) {
      StepStats extra;
      straggler.gather(step_ms, extra);  // collective: every rank, on the logged steps
      if (rank0) logger.log(step, loss, lr, grad_norm, step_ms, data_ms, comm.comm_ms, comm.overlap, memory.stats(), extra);
    }
    if (gs.pp > 1) {  // each stage's idle fraction in this step's schedule (bench/pp)
      const std::vector<double> idle = pipeline_idle_by_stage(ps, grid.pp());
      std::vector<std::pair<std::string, MetricsWriter::Value>> row{{"step", int64_t{step}}};
      for (size_t k = 0; k < idle.size(); ++k) row.push_back({"pp_idle_" + std::to_string(k), idle[k]});
      if (rank0) metrics.write(row);
    }
    if (cfg.eval.every > 0 && step % cfg.eval.every == 0 && step != cfg.train.steps) run_eval(step);
    if (end_of_step(step, loss)) return result;
  }
  if (trace::enabled()) write_trace();  // the run ended inside the traced steps
  if (rank0 && gs.tp > 1 && result.steps_done > start_step + 1 && tp_comm_after_first >= 0)
    std::printf("tensor parallel: tp comm %.1f ms/step on rank 0 (steps %d..%d, TP collectives in forward and backward)\n",
                1e3 * (backend->tp_comm_seconds() - tp_comm_after_first) / (result.steps_done - start_step - 1),
                start_step + 2, result.steps_done);
  if (rank0 && gs.cp > 1 && result.steps_done > start_step + 1 && backend->cp_wait_seconds() >= 0)
    std::printf("context parallel: ring wait %.1f ms/step on rank 0 (steps %d..%d; k|v transfers not hidden behind "
                "attention)\n",
                1e3 * (backend->cp_wait_seconds() - cp_wait_after_first) / (result.steps_done - start_step - 1),
                start_step + 2, result.steps_done);
  set_activity_step(-1);
  run_eval(cfg.train.steps);
  if (!cfg.train.dump_params.empty()) {
    std::vector<Buffer<float>> gathered;  // ZeRO-3 and device memory: the full parameters exist on the host only for the dump
    dump_full_params(cfg.train.dump_params, mc, cfg.parallel.pp_layers, setup.schedule.virtual_stages, grid,
                     backend->full_params(gathered));
  }
  return result;
}

}  // namespace mpitron
