#include "mpitron/train/step_reporter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>
#include <cstdio>

#include "mpitron/distributed/wait_registry.hpp"
#include "mpitron/model/arch.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/rope_scaling.hpp"
#include "mpitron/parallel/memory_report.hpp"
#include "mpitron/plan/ledger_check.hpp"

namespace mpitron {
namespace {

// The start-up model line after "model NAME: ": the architecture and every size a job can override.
std::string model_line(const ModelConfig& mc, int tp, size_t num_params) {
  const bool llama = mc.arch == Arch::llama;
  std::string heads = llama && mc.n_kv_head != mc.n_head ? fmt::format("{} heads ({} kv)", mc.n_head, mc.n_kv_head)
                                                          : fmt::format("{} heads", mc.n_head);
  if (mc.head_size > 0) heads += fmt::format(" of {}", mc.head_size);
  const std::string family = !(mc.qkv_bias || mc.qk_norm) ? "llama"
                             : fmt::format("{} = llama + {}", family_name(mc),
                                           mc.qkv_bias && mc.qk_norm ? "q/k/v biases + q/k RMSNorm"
                                           : mc.qkv_bias             ? "q/k/v biases"
                                                                     : "q/k RMSNorm");
  std::string arch = llama ? fmt::format("{} (RMSNorm eps {:g}, RoPE theta {:g}{}, SwiGLU, {} head)", family, mc.norm_eps,
                                         mc.rope_theta, rope_scaling_summary(mc.rope_scaling),
                                         mc.tied_embeddings ? "tied" : "untied")
                           : std::string(mc.tied_embeddings ? "gpt2" : "gpt2 (untied head)");
  const MoeConfig& m = mc.moe;
  const std::string moe =
      m.enabled() ? fmt::format(", MoE every {} block(s): top {} of {} experts of d_ff {}{} ({} router{})", m.layer_freq,
                                m.top_k, m.n_experts, m.d_ff, m.n_shared ? fmt::format(" + {} shared", m.n_shared) : "",
                                m.router == MoeRouter::softmax_topk ? "softmax_topk" : "topk_softmax",
                                m.capacity_factor > 0 ? fmt::format(", capacity factor {:g}", m.capacity_factor)
                                                      : ", dropless")
                  : "";
  return fmt::format("{}, {} layers, {}, d_model {}, d_ff {}, vocab {} (padded {}), seq {}{}, {:.2f}M parameters", arch,
                     mc.n_layer, heads, mc.d_model, mc.d_ff, mc.vocab_size, mc.padded_vocab(tp), mc.seq_len, moe,
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

RankLedger predicted_ledger(const TrainSetup& s, const TrainBackend& backend) {
  if (!s.cfg.train.check_ledger) return {};
  PlanInput in = plan_input_from_job(s.cfg, s.mc, s.launch.world);
  in.cpu_bf16_gemms = backend.cpu_bf16_gemms();  // train.precision = auto decided at start-up
  // The snapshot is host memory: a GPU backend's tracker (the device's) does not hold it.
  in.async_checkpoint &= in.precision == Precision::fp32;
  return rank_ledger(in, s.grid.rank());
}

// train.check_prediction: the step-time model's prediction for this job (plan/step_time.hpp), on
// every rank alike (a bad profile stops them all with the same message).
std::optional<StepPrediction> predicted_step(const TrainSetup& s, const TrainBackend& backend, std::string* text) {
  if (!s.cfg.train.check_prediction) return std::nullopt;
  usage_check(!s.cfg.train.profile.empty(),
              "train.check_prediction needs train.profile: a file from `mpirun -np N mpitron calibrate --out FILE`, or h100 | "
              "h200 | a100");
  PlanInput in = plan_input_from_job(s.cfg, s.mc, s.launch.world);
  in.cpu_bf16_gemms = backend.cpu_bf16_gemms();
  in.cluster.gpus_per_node = std::max(1, s.launch.local_size);  // ranks sharing a node, as launched
  const MachineProfile prof = load_profile(s.cfg.train.profile);
  StepPrediction p = predict_step(in, prof);
  *text = format_prediction(in, prof, p);
  return p;
}

}  // namespace

StepReporter::StepReporter(const TrainSetup& s, TrainBackend& backend, MetricsSink& metrics, int start_step,
                           const PeakFlops& peak)
    : s_(s), backend_(backend), metrics_(metrics), start_step_(start_step), rank0_(s.grid.rank() == 0), peak_(peak),
      predicted_(predicted_ledger(s, backend)),
      predicted_step_(predicted_step(s, backend, &prediction_text_)),
      logger_(s.cfg, metrics, int64_t{s.bp.global} * s.mc.seq_len, gpt_flops_per_token(s.mc), s.launch.world, peak.peak,
              peak.probe, gpt_attention_flops_per_token(s.mc)),
      straggler_(s.grid.world()),
      cp_wait_prev_(std::max(0.0, backend.stage().cp_wait_seconds())) {}

StepReporter::~StepReporter() = default;

void StepReporter::start(const DataLoader& train_data) {
  if (rank0_) {
    warn_ineffective_settings(s_.cfg, start_step_);
    std::printf("model %s: %s\n%s\n"
                "data %s: %lld samples per rank per epoch | run dir %s\n%s\n",
                s_.mc.name.c_str(), model_line(s_.mc, s_.grid.shape().tp, backend_.stage().num_params()).c_str(),
                backend_.layout_line(peak_).c_str(), train_data.describe().c_str(),
                static_cast<long long>(train_data.samples_per_epoch()), s_.cfg.run_dir().c_str(),
                backend_.stage().describe().c_str());
    std::fflush(stdout);
  }
  log_memory("at start");
  check_ledger("at start");
  if (rank0_ && predicted_step_) {
    std::printf("prediction (train.profile %s):\n%s", s_.cfg.train.profile.c_str(), prediction_text_.c_str());
    std::fflush(stdout);
  }
}

// train.check_prediction: each step after the first beside the prediction (the first 10 printed),
// and a metrics record of both.
void StepReporter::check_prediction(int step, double step_ms) {
  if (!predicted_step_ || !rank0_ || step <= start_step_ + 1) return;
  const double pred_ms = 1e3 * predicted_step_->step_s;
  measured_ms_.push_back(step_ms);
  metrics_.write({{"step", int64_t{step}}, {"predicted_step_ms", pred_ms}, {"measured_step_ms", step_ms}});
  if (measured_ms_.size() <= 10) {
    std::printf("prediction check step %d: measured %.1f ms | predicted %.1f ms | error %+.1f%%\n", step, step_ms, pred_ms,
                100 * (pred_ms / step_ms - 1));
    std::fflush(stdout);
  }
}

// Every rank's tracked bytes by category, printed by rank 0 and recorded in the metrics.
void StepReporter::log_memory(const char* when) {
  auto all = gather_rank_memory(s_.grid.world(), backend_.memory());
  if (!rank0_) return;
  for (const auto& m : all) {
    std::printf("memory %s %s\n", when, format_rank_memory(m, std::string(when) != "at start").c_str());
    MetricsSink::Record rec = {{"memory", std::string(when)}, {"rank", int64_t{m.rank}}};
    for (size_t c = 0; c < kMemCategories; ++c) {
      std::string name(mem_name(static_cast<Mem>(c)));
      rec.push_back({name, m.mem.live[c]});
      rec.push_back({name + "_peak", m.mem.peak[c]});
    }
    metrics_.write(rec);
  }
  std::fflush(stdout);
}

// train.check_ledger: every rank's tracked bytes against the memory ledger's prediction (src/plan).
void StepReporter::check_ledger(const char* when) {
  if (!s_.cfg.train.check_ledger) return;
  std::printf("%s\n", check_against_ledger(predicted_, backend_.memory().stats(), when).text.c_str());
  std::fflush(stdout);
}

// The timeline of steps [a, b] (train.trace_steps, core/trace.hpp): one file per rank.
void StepReporter::write_trace() {
  trace::set_enabled(false);
  trace::write(fmt::format("{}/trace/rank_{}.json", s_.cfg.run_dir(), s_.launch.rank), s_.launch.rank);
}

void StepReporter::begin_step(int step) {
  const std::vector<int>& tr = s_.cfg.train.trace_steps;
  if (!tr.empty() && step >= tr[0] && step <= tr[1]) trace::set_enabled(true);
  if (trace::enabled()) step_span_.emplace(fmt::format("step {}", step));
  straggler_.begin_step();
  backend_.memory().reset_peaks();
}

void StepReporter::skipped_step() {
  step_span_.reset();
  backend_.take_comm();
}

// MoE blocks' routing this step, summed over the data-parallel and pipeline ranks (tensor-parallel
// ranks route the same rows: not summed): per block the kept copies per expert (min, max), the
// dropped copies, the mean aux and z losses; a metrics record every step, a log line when due.
void StepReporter::report_moe(int step, bool log_line) {
  const MoeConfig& m = s_.mc.moe;
  if (!m.enabled()) return;
  const int E = m.n_experts, W = E + 5;
  std::vector<int> layers;
  for (int l = 0; l < s_.mc.n_layer; ++l)
    if (m.is_moe_layer(l)) layers.push_back(l);
  std::vector<double> v(layers.size() * W, 0.0);
  for (const auto& [l, st] : backend_.stage().take_moe_stats()) {
    const size_t i = static_cast<size_t>(std::find(layers.begin(), layers.end(), l) - layers.begin()) * W;
    for (int e = 0; e < E && e < static_cast<int>(st.tokens.size()); ++e) v[i + e] += double(st.tokens[e]);
    v[i + E] += double(st.dropped), v[i + E + 1] += double(st.routed), v[i + E + 2] += st.aux;
    v[i + E + 3] += st.z, v[i + E + 4] += double(st.rows);
  }
  const GridShape& gs = s_.grid.shape();
  if (gs.dp * gs.cp > 1) s_.grid.dp_cp().all_reduce_host_f64(v.data(), v.size(), ReduceOp::sum);
  if (gs.pp > 1) s_.grid.pp().all_reduce_host_f64(v.data(), v.size(), ReduceOp::sum);
  if (!rank0_) return;
  MetricsSink::Record rec{{"step", int64_t{step}}};
  std::string line = fmt::format("step {} moe |", step);
  for (size_t k = 0; k < layers.size(); ++k) {
    const double* x = v.data() + k * W;
    const double rows = std::max(1.0, x[E + 4]);
    const auto [lo, hi] = std::minmax_element(x, x + E);
    const std::string p = fmt::format("moe_l{}_", layers[k]);
    rec.emplace_back(p + "tokens_min", static_cast<int64_t>(*lo));
    rec.emplace_back(p + "tokens_max", static_cast<int64_t>(*hi));
    rec.emplace_back(p + "dropped", static_cast<int64_t>(x[E]));
    rec.emplace_back(p + "aux", x[E + 2] / rows);
    rec.emplace_back(p + "z", x[E + 3] / rows);
    note_moe_load(step, x, E);
    line += fmt::format(" L{} tokens/expert {:.0f}..{:.0f}{} aux {:.3f} z {:.2f} |", layers[k], *lo, *hi,
                        x[E] > 0 ? fmt::format(" dropped {:.0f} of {:.0f}", x[E], x[E + 1]) : "", x[E + 2] / rows,
                        x[E + 3] / rows);
  }
  metrics_.write(rec);
  if (log_line) std::printf("%s\n", line.substr(0, line.size() - 2).c_str());
}

// train.check_prediction on a MoE model: one block's kept copies per expert (summed over the
// ranks) against the balanced share the prediction prices, on the steps it is checked against.
// Under expert parallel each rank owns n_experts / ep consecutive experts and waits in the
// exchange for the busiest.
void StepReporter::note_moe_load(int step, const double* tokens, int E) {
  if (!predicted_step_ || step <= start_step_ + 1) return;
  const double total = std::accumulate(tokens, tokens + E, 0.0);
  if (total <= 0) return;
  moe_expert_load_.push_back(*std::max_element(tokens, tokens + E) / (total / E));
  const int ep = s_.grid.shape().ep, per = E / std::max(1, ep);
  if (ep <= 1) return;
  double busiest = 0;
  for (int r = 0; r < ep; ++r) busiest = std::max(busiest, std::accumulate(tokens + r * per, tokens + (r + 1) * per, 0.0));
  moe_ep_load_.push_back(busiest / (total / ep));
}

// FP8 casts this step over every rank, per operand kind: the largest amax and the fractions of
// the cast elements that saturated or underflowed (an element a tensor-parallel group casts on
// every rank counts once per rank: the fractions are per cast, as each rank's GEMMs see them).
void StepReporter::report_fp8(int step, bool log_line) {
  if (s_.cfg.train.precision != "fp8") return;
  const Fp8Stats st = backend_.stage().take_fp8_stats();
  std::vector<double> sums, amax;
  for (const Fp8KindStats& k : st) {
    sums.insert(sums.end(), {double(k.elements), double(k.saturated), double(k.underflowed)});
    amax.push_back(k.amax);
  }
  s_.grid.world().all_reduce_host_f64(sums.data(), sums.size(), ReduceOp::sum);
  s_.grid.world().all_reduce_host_f64(amax.data(), amax.size(), ReduceOp::max);
  if (!rank0_) return;
  MetricsSink::Record rec{{"step", int64_t{step}}};
  std::string line = fmt::format("step {} fp8 |", step);
  for (int k = 0; k < kFp8Operands; ++k) {
    const double n = std::max(1.0, sums[3 * k]), sat = sums[3 * k + 1] / n, under = sums[3 * k + 2] / n;
    const std::string p = fmt::format("fp8_{}_", fp8_operand_name(static_cast<Fp8Operand>(k)));
    rec.emplace_back(p + "amax", amax[k]);
    rec.emplace_back(p + "saturated", sat);
    rec.emplace_back(p + "underflow", under);
    line += fmt::format(" {} amax {:.3g} underflow {:.2f}%{} |", fp8_operand_name(static_cast<Fp8Operand>(k)), amax[k],
                        100 * under, sat > 0 ? fmt::format(" saturated {:.2f}%", 100 * sat) : "");
  }
  metrics_.write(rec);
  if (log_line) std::printf("%s\n", line.substr(0, line.size() - 2).c_str());
}

void StepReporter::end_step(int step, const StepOutcome& r, double lr, double step_ms, double data_ms) {
  step_span_.reset();
  const StepComm comm = backend_.take_comm();  // also the step's collectives on the timeline
  const std::vector<int>& tr = s_.cfg.train.trace_steps;
  if (trace::enabled() && step == tr[1]) {
    write_trace();
    if (rank0_)
      std::printf("trace: steps %d-%d of every rank in %s/trace/rank_*.json (ui.perfetto.dev)\n", tr[0], tr[1],
                  s_.cfg.run_dir().c_str());
  }
  if (step == 1) log_memory("step 1");
  if (step == 1) check_ledger("after step 1");
  StageModel& model = backend_.stage();
  if (step == start_step_ + 1) tp_comm_after_first_ = model.tp_comm_seconds();
  if (const double e = model.ep_seconds(); e >= 0) {  // the MoE token exchanges this step (bench/moe)
    if (rank0_) metrics_.write({{"step", int64_t{step}}, {"ep_exchange_ms", 1e3 * (e - ep_prev_)}});
    ep_prev_ = e;
  }
  if (const double w = model.cp_wait_seconds(); w >= 0) {  // the ring's exposed wait this step (bench/cp)
    if (step == start_step_ + 1) cp_wait_after_first_ = w;
    if (rank0_) metrics_.write({{"step", int64_t{step}}, {"cp_wait_ms", 1e3 * (w - cp_wait_prev_)}});
    cp_wait_prev_ = w;
  }
  check_prediction(step, step_ms);
  report_moe(step, logger_.due(step));
  report_fp8(step, logger_.due(step));
  if (logger_.due(step)) {
    StepStats extra;
    extra.trained_tokens = static_cast<int64_t>(r.trained_tokens);
    extra.attention_fraction = r.attention_fraction;
    straggler_.gather(step_ms, extra);  // collective: every rank, on the logged steps
    if (rank0_)
      logger_.log(step, r.loss, lr, r.grad_norm, step_ms, data_ms, comm.comm_ms, comm.overlap,
                  backend_.memory().stats(), extra);
  }
  if (s_.grid.shape().pp > 1) {  // each stage's idle fraction in this step's schedule (bench/pp)
    const std::vector<double> idle = pipeline_idle_by_stage(r.schedule, s_.grid.pp());
    MetricsSink::Record row{{"step", int64_t{step}}};
    for (size_t k = 0; k < idle.size(); ++k) row.push_back({"pp_idle_" + std::to_string(k), idle[k]});
    if (rank0_) metrics_.write(row);
  }
}

void StepReporter::validation(int step, double val_loss, TrainResult& result) {
  logger_.log_val(step, val_loss, result, rank0_);
}

void StepReporter::finish(const TrainResult& result) {
  if (trace::enabled()) write_trace();  // the run ended inside the traced steps
  const StageModel& model = backend_.stage();
  const GridShape& gs = s_.grid.shape();
  const int measured = result.steps_done - start_step_ - 1;  // steps after the first
  if (rank0_ && predicted_step_ && !measured_ms_.empty()) {
    std::vector<double> v = measured_ms_;
    std::sort(v.begin(), v.end());
    const double med = v[v.size() / 2], pred = 1e3 * predicted_step_->step_s;
    std::printf("prediction check: median step %.1f ms over steps %d..%d vs predicted %.1f ms: error %+.1f%% (dominant: %s)\n", med,
                start_step_ + 2, result.steps_done, pred, 100 * (pred / med - 1), predicted_step_->dominant().c_str());
    if (!moe_expert_load_.empty()) {
      auto mean = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); };
      const std::string ep =
          moe_ep_load_.empty()
              ? ""
              : fmt::format(", {:.2f}x on the busiest expert-parallel rank, whose experts the exchange waits for", mean(moe_ep_load_));
      std::printf("prediction check: MoE routing (mean over the steps and MoE blocks) kept %.2fx the balanced share on the "
                  "busiest expert%s; the prediction prices balanced routing\n",
                  mean(moe_expert_load_), ep.c_str());
    }
  }
  if (rank0_ && gs.tp > 1 && measured > 0 && tp_comm_after_first_ >= 0)
    std::printf("tensor parallel: tp comm %.1f ms/step on rank 0 (steps %d..%d, TP collectives in forward and backward)\n",
                1e3 * (model.tp_comm_seconds() - tp_comm_after_first_) / measured, start_step_ + 2, result.steps_done);
  if (rank0_ && gs.cp > 1 && measured > 0 && model.cp_wait_seconds() >= 0)
    std::printf("context parallel: ring wait %.1f ms/step on rank 0 (steps %d..%d; k|v transfers not hidden behind "
                "attention)\n",
                1e3 * (model.cp_wait_seconds() - cp_wait_after_first_) / measured, start_step_ + 2, result.steps_done);
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
