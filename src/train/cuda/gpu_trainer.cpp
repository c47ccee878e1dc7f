// The GPU trainer: see gpu_trainer.hpp. Its loop mirrors trainer.cpp step for step (the CPU
// trainer is the reference the device check compares against).
#include "mpitron/dist/activity.hpp"
#include "mpitron/dist/fault_inject.hpp"
#include "mpitron/train/gpu_trainer.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/model/cuda/gpt_cuda.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"
#include "mpitron/parallel/grad_buckets.hpp"
#include "mpitron/parallel/partition.hpp"
#include "mpitron/parallel/pipeline.hpp"
#include "mpitron/train/checkpoint.hpp"
#include "mpitron/train/lr_schedule.hpp"
#include "mpitron/train/metrics.hpp"
#include "mpitron/train/train_checkpoint.hpp"
#include "mpitron/train/train_data.hpp"
#include "mpitron/train/train_loop.hpp"

namespace mpitron {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Dense bf16 tensor-core peak of one GPU from its datasheet, by device name; 0 when unknown
// (then MFU needs train.peak_flops).
double datasheet_bf16_peak(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H100") && has("PCIe")) return 756e12;
  if (has("H100") || has("H200") || has("GH200")) return 989e12;
  if (has("A100")) return 312e12;
  return 0;
}

// Data parallel for GptCuda (ZeRO 0): the flat fp32 gradients cut into buckets (grad_buckets.hpp,
// the CPU trainer's plan), each all-reduced on the DP communicator's stream as soon as backward
// has finished its last unit in the step's last micro-batch. The communicator orders itself
// after the compute stream by event, so launching a bucket costs the host nothing; the host
// waits for the requests only in finish_backward, before the optimizer reads the gradients.
//
// Pipeline parallel with the tied wte (first and last stage each hold a copy, `tied` = the
// embedding group): wte is a deferred bucket of its own, summed over the tie and then over DP in
// finish_backward, as the CPU DataParallel does (data_parallel.hpp says why in that order).
class GpuDataParallel {
 public:
  GpuDataParallel(GptCuda& model, Comm& dp, cudaStream_t compute, double bucket_mb, Comm* tied)
      : model_(model), dp_(dp), tied_(tied), n_layers_(local_layers(model.config(), model.shard())) {
    usage_check(bucket_mb > 0, "parallel.bucket_mb must be > 0 (got {})", bucket_mb);
    dp_.set_compute_stream(compute);
    if (tied_) tied_->set_compute_stream(compute);
    const size_t cap = std::max<size_t>(1, static_cast<size_t>(bucket_mb * (1 << 20) / sizeof(float)));
    buckets_ = plan_grad_buckets(model.params(), model.num_params(), cap, model.shard(), n_layers_, tied_ != nullptr);
    model_.set_backward_hook([this](int unit) { on_unit_done(unit); });
  }
  ~GpuDataParallel() { model_.set_backward_hook({}); }

  size_t num_buckets() const { return buckets_.size(); }
  void begin_step(int micro_batches) {
    micro_ = micro_batches;
    done_ = 0;
    model_.zero_grad();
  }
  // Host milliseconds the step waited for communication (the part backward did not hide).
  double finish_backward() {
    auto t0 = Clock::now();
    for (auto& r : pending_) r->wait();
    pending_.clear();
    for (const auto& b : buckets_) {
      if (!b.deferred) continue;
      float* g = model_.device_grads() + b.begin;
      tied_->all_reduce(g, b.end - b.begin, DType::f32, ReduceOp::sum);
      if (dp_.size() > 1) dp_.all_reduce(g, b.end - b.begin, DType::f32, ReduceOp::sum);
    }
    return ms_since(t0);
  }

 private:
  void on_unit_done(int unit) {
    const int pos = backward_position(unit, n_layers_);
    if (done_ + 1 == micro_ && dp_.size() > 1)
      for (const auto& b : buckets_)
        if (b.ready_at == pos && !b.deferred)
          pending_.push_back(dp_.iall_reduce(model_.device_grads() + b.begin, b.end - b.begin, DType::f32, ReduceOp::sum));
    if (unit == GPT::kEmbeddingUnit) ++done_;  // the last unit of a backward
  }

  GptCuda& model_;
  Comm& dp_;
  Comm* tied_;
  int n_layers_;
  std::vector<GradBucket> buckets_;
  std::vector<Request> pending_;
  int micro_ = 1, done_ = 0;
};

// The GPU model as a pipeline stage (pipeline_stage.hpp): stage tensors staged through host
// memory for the executor's MPI messages (ProcessGrid::pp_host).
class GptCudaStage final : public PipelineStage {
 public:
  explicit GptCudaStage(GptCuda& m) : m_(m) {}
  const ModelShard& shard() const override { return m_.shard(); }
  size_t stage_floats(int B) const override { return m_.stage_floats(B); }
  double forward(const Batch& b, int64_t* n, int slot) override {
    return m_.forward(b.inputs.data(), b.targets.data(), b.batch, n, slot);
  }
  void backward(float loss_scale, int slot) override { m_.backward(loss_scale, slot); }
  void put_input(int slot, const float* x, size_t n) override { m_.set_stage_input(slot, x, n); }
  void get_output(int slot, float* x, size_t n) override { m_.get_stage_output(slot, x, n); }
  void put_output_grad(const float* g, size_t n) override { m_.set_stage_output_grad(g, n); }
  void get_input_grad(float* g, size_t n) override { m_.get_stage_input_grad(g, n); }
  void set_grad_enabled(bool on) override { m_.set_grad_enabled(on); }

 private:
  GptCuda& m_;
};

// Checkpoints of the GPU model: the device state staged through host buffers, in the common
// file format (full logical tensors), so they load under any layout and on either backend.
class GpuCheckpointState final : public CheckpointState {
 public:
  GpuCheckpointState(std::vector<GptCuda*> chunks, const ModelConfig& mc, const GridCoord& coord, int zero)
      : chunks_(std::move(chunks)), mc_(mc), coord_(coord), zero_(zero), host_(chunks_.size()) {}
  std::vector<CheckpointShard> shards() override {
    std::vector<CheckpointShard> out;
    for (size_t c = 0; c < chunks_.size(); ++c) {
      GptCuda& m = *chunks_[c];
      Host& h = host_[c];
      const size_t n = m.num_params();
      const GptCuda::Range r = m.optim_range();  // ZeRO-1: this DP rank's shard of the moments
      h.p.resize(n), h.m.resize(r.size()), h.v.resize(r.size());
      m.copy_params_to_host(h.p.data(), n);
      m.copy_optimizer_state_to_host(h.m.data(), h.v.data(), r.size());
      CheckpointShard s = checkpoint_shard_of(mc_, m.shard(), coord_, zero_);
      s.params = {h.p.data(), 0, n, s.params.owner};
      s.exp_avg = {h.m.data(), r.begin, r.end, s.exp_avg.owner};
      s.exp_avg_sq = {h.v.data(), r.begin, r.end, s.exp_avg_sq.owner};
      out.push_back(std::move(s));
    }
    return out;
  }
  void loaded() override {
    for (size_t c = 0; c < chunks_.size(); ++c) {
      chunks_[c]->load_params(host_[c].p.data(), host_[c].p.size());
      chunks_[c]->load_optimizer_state(host_[c].m.data(), host_[c].v.data(), host_[c].m.size());
    }
  }
  int optimizer_steps() const override { return steps_; }
  void set_optimizer_steps(int n) override { steps_ = n; }
  int zero() const override { return zero_; }
  int next_step() { return ++steps_; }

 private:
  struct Host {
    std::vector<float> p, m, v;
  };
  std::vector<GptCuda*> chunks_;
  ModelConfig mc_;
  GridCoord coord_;
  int zero_;
  std::vector<Host> host_;
  int steps_ = 0;
};

// One model chunk of this rank (the stage; interleaved 1F1B: virtual stage c*pp + rank) with its
// data parallel, pipeline adapter and ZeRO-1 shard of its flat layout.
struct GpuChunk {
  std::unique_ptr<GptCuda> model;
  std::unique_ptr<GpuDataParallel> ddp;
  std::unique_ptr<GptCudaStage> stage;
  size_t n_flat = 0;
  FlatRange shard;
  bool tied_copy = false;  // the head's wte copy on a chunk without the embedding
};

}  // namespace

TrainResult run_training_gpu(const JobConfig& cfg, const LaunchInfo& launch, ProcessGrid& grid) {
  const GridShape& gs = grid.shape();
  usage_check(gs.cp == 1, "context parallel (cp {}) is not available", gs.cp);
  usage_check(cfg.parallel.zero == 0 || cfg.parallel.zero == 1,
              "parallel.zero = {} is not available with train.backend = \"nccl\" yet (0 or 1)", cfg.parallel.zero);
  usage_check(cfg.train.recompute == "none" || cfg.train.recompute == "full",
              "train.recompute must be \"none\" or \"full\" (got \"{}\")", cfg.train.recompute);
  usage_check(launch.device >= 0, "train.backend = \"nccl\" needs a GPU on every rank ({})", launch.device_note);
  usage_check(cfg.train.dump_params.empty(), "train.dump_params is not available with train.backend = \"nccl\" yet");
  usage_check(cfg.train.steps > 0, "train.steps must be > 0 (got {})", cfg.train.steps);
  usage_check(cfg.log.every > 0, "log.every must be > 0 (got {})", cfg.log.every);
  const bool rank0 = grid.rank() == 0;
  const int dp = gs.dp;
  const BatchPlan bp = plan_batches(cfg, dp);
  TrainData data = open_train_data(cfg, bp, dp, grid.coord().dp, rank0);
  const ModelConfig& mc = data.model;
  usage_check(mc.n_head % gs.tp == 0, "model.n_head ({}) must be divisible by parallel.tp ({}): attention heads are "
              "split over the TP ranks", mc.n_head, gs.tp);
  usage_check(!cfg.parallel.sp || mc.seq_len % gs.tp == 0,
              "parallel.sp: model.seq_len ({}) must be divisible by parallel.tp ({})", mc.seq_len, gs.tp);

  CudaOpsOptions oo;
  oo.attention = cfg.model.attention;
  oo.device = launch.device;
  std::unique_ptr<CudaOps> ops = make_cuda_ops(oo);
  // ZeRO-1: this DP rank keeps and updates the AdamW state of its shard of the flat layout only;
  // after the update every rank's shard of the fp32 master weights is all-gathered.
  const int zero = cfg.parallel.zero;
  // This rank's pipeline stage(s) and tensor-parallel slice (partition.hpp: one chunk, or
  // parallel.virtual_stages under interleaved 1F1B), and the schedule that decides how many
  // micro-batches' activations each chunk keeps.
  const PipelineSchedule schedule = pipeline_schedule_for_job(cfg.parallel, gs.pp, bp.accum);
  std::vector<ModelShard> shards = model_chunks_for(mc, gs, grid.coord(), cfg.parallel.pp_layers, schedule.virtual_stages);
  std::vector<GpuChunk> chunks(shards.size());
  for (size_t c = 0; c < shards.size(); ++c) {
    GpuChunk& k = chunks[c];
    shards[c].sequence_parallel = cfg.parallel.sp;  // run_training has checked tp > 1
    const auto table = gpt_param_table(mc, shards[c]);
    k.n_flat = flat_param_floats(table);
    k.shard = zero >= 1 ? zero_shard(k.n_flat, dp, grid.coord().dp) : FlatRange{0, k.n_flat};
    GptCudaOptions go;
    go.optim_begin = k.shard.begin;
    go.optim_end = k.shard.end;
    go.recompute = cfg.train.recompute == "full";
    go.slots = schedule.max_in_flight(grid.coord().pp, static_cast<int>(c));
    k.model = std::make_unique<GptCuda>(mc, *ops, bp.micro, shards[c], go, gs.tp > 1 ? &grid.tp() : nullptr);
    GptCuda& model = *k.model;
    check(model.num_params() == k.n_flat, "GPU trainer: flat layout of {} floats, expected {}", model.num_params(),
          k.n_flat);
    model.init_weights(cfg.train.seed);  // the CPU model's values (counter-based init)
    // The tied wte across stages: the last stage's copy starts as the first stage's (Megatron).
    const bool tied = gs.pp > 1 && (shards[c].has_embedding || shards[c].has_head);
    k.tied_copy = tied && !shards[c].has_embedding;
    if (tied) {
      const ParamInfo* wte = nullptr;
      for (const auto& p : model.params())
        if (p.name == "wte.weight") wte = &p;
      check(wte != nullptr, "GPU trainer: chunk {} of stage {} has no wte", c, grid.coord().pp);
      grid.embedding().set_compute_stream(ops->stream());
      grid.embedding().broadcast(model.device_master_params() + wte->offset, wte->numel, DType::f32, /*root=*/0);
      model.refresh_bf16_params();
    }
    k.ddp = std::make_unique<GpuDataParallel>(model, grid.dp(), ops->stream(), cfg.parallel.bucket_mb,
                                              tied ? &grid.embedding() : nullptr);
    k.stage = std::make_unique<GptCudaStage>(model);
  }
  std::vector<PipelineStage*> stages;
  std::vector<GptCuda*> models;
  for (auto& k : chunks) stages.push_back(k.stage.get()), models.push_back(k.model.get());
  PipelineExecutor pipe(schedule, grid.pp_host(), stages);
  const CudaAdamWOptions ao{cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay};
  LrSchedule sched{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.steps};
  GpuCheckpointState state(models, mc, grid.coord(), zero);
  TrainCheckpointer ckpt(cfg, grid, mc, state, *data.train);
  const int start_step = ckpt.resume();
  size_t n_params = 0, n_buckets = 0;
  std::string memory;
  for (auto& k : chunks) {
    n_params += k.model->num_params(), n_buckets += k.ddp->num_buckets();
    memory += (memory.empty() ? "" : " | ") + k.model->memory_summary();
  }

  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, launch.device);
  const std::string gpu = prop.name;
  const double flops_per_token = gpt_flops_per_token(mc);
  const int64_t tokens_per_step = int64_t{bp.global} * mc.seq_len;
  const double peak = cfg.train.peak_flops > 0 ? cfg.train.peak_flops : datasheet_bf16_peak(gpu);

  MetricsWriter metrics(rank0 ? cfg.run_dir() + "/metrics.jsonl" : "", /*append=*/start_step > 0, start_step);
  if (rank0) {
    std::printf(
        "model %s: %d layers, %d heads, d_model %d, vocab %d (padded %d), seq %d, %.2fM parameters\n"
        "layout world %d = dp %d x tp %d%s x pp %d%s (one %s per rank, bf16, attention %s) | global batch %d = micro %d x dp %d x "
        "accum %d (%lld tokens/step) | peak %g TFLOP/s/GPU%s\n"
        "data %s: %lld samples per rank per epoch | run dir %s\n"
        "data parallel: NCCL, zero %d, %zu gradient bucket(s) (cap %g MiB) on the communication stream | GPU "
        "memory %s\n",
        mc.name.c_str(), mc.n_layer, mc.n_head, mc.d_model, mc.vocab_size, mc.padded_vocab(gs.tp), mc.seq_len,
        n_params / 1e6, launch.world, dp, gs.tp, cfg.parallel.sp ? " + sp" : "", gs.pp,
        schedule.virtual_stages > 1 ? fmt::format(" (interleaved, {} model chunks per rank)", schedule.virtual_stages).c_str()
                                    : "",
        gpu.c_str(), ops->attention_kind().c_str(), bp.global, bp.micro,
        dp, bp.accum, static_cast<long long>(tokens_per_step), peak / 1e12,
        cfg.train.peak_flops > 0 ? " (train.peak_flops)"
        : peak > 0             ? " (datasheet dense bf16)"
                               : " (unknown GPU: set train.peak_flops for MFU)",
        cfg.data.path.c_str(), static_cast<long long>(data.train->samples_per_epoch()), cfg.run_dir().c_str(),
        zero, n_buckets, cfg.parallel.bucket_mb, memory.c_str());
    std::fflush(stdout);
  }

  TrainResult result;
  std::vector<Batch> batches(bp.accum);
  StepLogger logger(cfg, metrics, tokens_per_step, flops_per_token, launch.world, peak);
  StragglerProbe straggler(grid.world());
  auto run_eval = [&](int step) {
    if (!data.val) return;
    ActivityPhase phase("eval");
    fault_point("eval");
    data.val->reset();
    Batch b;
    double v[2] = {0, 0};  // loss sum, target tokens (the head's stage)
    while (data.val->next(b)) {
      int64_t n = 0;
      v[0] += pipe.forward_only(b, &n);
      v[1] += static_cast<double>(n);
    }
    grid.dp().all_reduce_host_f64(v, 2, ReduceOp::sum);
    if (gs.pp > 1) grid.pp().all_reduce_host_f64(v, 2, ReduceOp::sum);
    logger.log_val(step, v[0] / std::max(1.0, v[1]), result, rank0);
  };
  run_eval(start_step);

  for (int step = start_step + 1; step <= cfg.train.steps; ++step) {
    auto t0 = Clock::now();
    set_activity_step(step);
    set_activity_phase("data");
    fault_point("step_begin");
    straggler.begin_step();
    ckpt.begin_step();
    MemTracker::cuda().reset_peaks();
    double counts[2] = {0, fetch_step_batches(*data.train, batches)};  // [loss sum, target tokens]
    const double data_ms = ms_since(t0);
    grid.dp().all_reduce_host_f64(&counts[1], 1, ReduceOp::sum);
    const double n_tokens = counts[1];

    set_activity_phase("forward/backward");
    fault_point("forward");
    for (auto& k : chunks) k.ddp->begin_step(bp.accum);
    // The schedule's forwards and backwards (pp = 1: plain accumulation); the last backward
    // launches the DP buckets.
    counts[0] = pipe.run(batches, static_cast<float>(1.0 / n_tokens)).loss_sum;  // the head's stage; 0 elsewhere
    set_activity_phase("grad sync");
    fault_point("grad_sync");
    double exposed_ms = 0;
    for (auto& k : chunks) exposed_ms += k.ddp->finish_backward();  // chunk order on every rank
    set_activity_phase("loss and grad norm");
    grid.dp().all_reduce_host_f64(&counts[0], 1, ReduceOp::sum);
    if (gs.pp > 1) grid.pp().all_reduce_host_f64(&counts[0], 1, ReduceOp::sum);  // loss to every stage
    const double loss = counts[0] / n_tokens;
    // The same on every DP rank; under TP sharded parameters summed over the group, replicated
    // ones counted by TP rank 0 (tp_grad_norm.hpp's rule); over the pipeline, the tied wte once.
    double grad_sq = 0;
    for (auto& k : chunks) grad_sq += k.model->grad_sum_squares(grid.coord().tp == 0, /*skip_tied_copy=*/k.tied_copy);
    if (gs.tp > 1) grid.tp().all_reduce_host_f64(&grad_sq, 1, ReduceOp::sum);
    if (gs.pp > 1) grid.pp().all_reduce_host_f64(&grad_sq, 1, ReduceOp::sum);
    const double grad_norm = std::sqrt(grad_sq);
    const double lr = sched.at(step);
    if ((!std::isfinite(loss) || !std::isfinite(grad_norm)) &&
        skip_non_finite_step(cfg, ckpt, result, step, loss, grad_norm, rank0))
      continue;
    if (cfg.optim.grad_clip > 0 && grad_norm > cfg.optim.grad_clip)
      for (auto& k : chunks) k.model->scale_grads(static_cast<float>(cfg.optim.grad_clip / (grad_norm + 1e-6)));  // torch's rule
    set_activity_phase("optimizer");
    fault_point("optimizer");
    const int opt_step = state.next_step();
    for (auto& k : chunks) {
      k.model->adamw_step(static_cast<float>(lr), ao, opt_step);
      if (zero >= 1 && dp > 1) {  // everyone's updated shard of the master weights, in place, then the bf16 copy
        const std::vector<size_t> counts = shard_counts(0, k.n_flat, k.n_flat, dp);
        float* master = k.model->device_master_params();
        grid.dp().all_gatherv(master + k.shard.begin, master, counts.data(), DType::f32);
        k.model->refresh_bf16_params();
      }
    }
    ops->synchronize();
    const double step_ms = ms_since(t0);

    if (step == start_step + 1) result.first_loss = loss;
    result.last_loss = loss;
    result.steps_done = step;
    // Only the wait is measured on GPU (the reductions run on their own stream): comm is the
    // exposed part, and no overlap is claimed.
    set_activity_phase("logging");
    if (logger.due(step)) {
      StepStats extra;
      straggler.gather(step_ms, extra);  // collective: every rank, on the logged steps
      if (rank0)
        logger.log(step, loss, lr, grad_norm, step_ms, data_ms, exposed_ms, 0.0, MemTracker::cuda().stats(), extra);
    }
    if (cfg.eval.every > 0 && step % cfg.eval.every == 0 && step != cfg.train.steps) run_eval(step);
    set_activity_phase("checkpoint");
    if (int sig = ckpt.end_of_step(step, loss)) {
      result.preempted = sig;
      return result;
    }
  }
  set_activity_step(-1);
  run_eval(cfg.train.steps);
  return result;
}

}  // namespace mpitron
