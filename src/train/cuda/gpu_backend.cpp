// The GPU backend of the training loop (train_backend.hpp; train.backend = "nccl"): one GPU per
// rank, the model (or its tensor-parallel slice, its pipeline chunks) on each GPU (GptCuda: bf16
// compute, fp32 master weights, gradients and AdamW moments), data parallel over NCCL with the
// gradient buckets all-reduced on the DP communicator's own stream while backward continues on
// the compute stream (the communicator waits for the compute stream by event:
// Comm::set_compute_stream). Checkpoints use the file format of checkpoint.hpp, staged through
// host memory, so a GPU checkpoint resumes on CPU and back.
//
// ZeRO-1 (parallel.zero = 1): each DP rank holds the AdamW moments of its shard only and updates
// that shard; the fp32 master weights are then all-gathered over DP (the gradients are still
// all-reduced, so ZeRO-1 costs 1.5x DDP's communication for 8 bytes/param less memory).
// Tensor and sequence parallel: GptCuda's TP shard over the TP group's NCCL communicator.
// Activation recompute (train.recompute = "full"): GptCudaOptions::recompute.
// Pipeline parallel (gpipe, 1f1b, interleaved): the pipeline executor over this rank's GptCuda
// chunks, stage tensors staged through host memory on ProcessGrid::pp_host(); the tied wte as
// data_parallel.hpp. Not on GPU yet (clear error at start-up): ZeRO 2-3. GPU builds only.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <chrono>
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
#include "mpitron/train/train_backend.hpp"

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

class GpuBackend final : public TrainBackend {
 public:
  explicit GpuBackend(const TrainSetup& s)
      : cfg_(s.cfg),
        launch_(s.launch),
        grid_(s.grid),
        mc_(s.mc),
        schedule_(s.schedule),
        chunks_note_(chunks_note(s)),
        batch_note_(batch_note(s)),
        zero_(s.cfg.parallel.zero),
        adamw_{s.cfg.optim.beta1, s.cfg.optim.beta2, s.cfg.optim.eps, s.cfg.optim.weight_decay} {
    const JobConfig& cfg = s.cfg;
    const GridShape& gs = grid_.shape();
    usage_check(zero_ == 0 || zero_ == 1,
                "parallel.zero = {} is not available with train.backend = \"nccl\" yet (0 or 1)", zero_);
    usage_check(cfg.train.recompute == "none" || cfg.train.recompute == "full",
                "train.recompute must be \"none\" or \"full\" (got \"{}\")", cfg.train.recompute);
    usage_check(launch_.device >= 0, "train.backend = \"nccl\" needs a GPU on every rank ({})", launch_.device_note);
    CudaOpsOptions oo;
    oo.attention = cfg.model.attention;
    oo.device = launch_.device;
    ops_ = make_cuda_ops(oo);
    // ZeRO-1: this DP rank keeps and updates the AdamW state of its shard of the flat layout
    // only; after the update every rank's shard of the fp32 master weights is all-gathered.
    // This rank's pipeline stage(s) and tensor-parallel slice (partition.hpp: one chunk, or
    // parallel.virtual_stages under interleaved 1F1B).
    std::vector<ModelShard> shards =
        model_chunks_for(mc_, gs, grid_.coord(), cfg.parallel.pp_layers, schedule_.virtual_stages);
    chunks_.resize(shards.size());
    for (size_t c = 0; c < shards.size(); ++c) {
      GpuChunk& k = chunks_[c];
      shards[c].sequence_parallel = cfg.parallel.sp;  // run_training has checked tp > 1
      const auto table = gpt_param_table(mc_, shards[c]);
      k.n_flat = flat_param_floats(table);
      k.shard = zero_ >= 1 ? zero_shard(k.n_flat, gs.dp, grid_.coord().dp) : FlatRange{0, k.n_flat};
      GptCudaOptions go;
      go.optim_begin = k.shard.begin;
      go.optim_end = k.shard.end;
      go.recompute = cfg.train.recompute == "full";
      go.slots = schedule_.max_in_flight(grid_.coord().pp, static_cast<int>(c));
      k.model = std::make_unique<GptCuda>(mc_, *ops_, s.bp.micro, shards[c], go, gs.tp > 1 ? &grid_.tp() : nullptr);
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
        check(wte != nullptr, "GPU trainer: chunk {} of stage {} has no wte", c, grid_.coord().pp);
        grid_.embedding().set_compute_stream(ops_->stream());
        grid_.embedding().broadcast(model.device_master_params() + wte->offset, wte->numel, DType::f32, /*root=*/0);
        model.refresh_bf16_params();
      }
      k.ddp = std::make_unique<GpuDataParallel>(model, grid_.dp(), ops_->stream(), cfg.parallel.bucket_mb,
                                                tied ? &grid_.embedding() : nullptr);
      k.stage = std::make_unique<GptCudaStage>(model);
    }
    std::vector<PipelineStage*> stages;
    std::vector<GptCuda*> models;
    for (auto& k : chunks_) stages.push_back(k.stage.get()), models.push_back(k.model.get());
    pipe_ = std::make_unique<PipelineExecutor>(schedule_, grid_.pp_host(), stages);
    state_ = std::make_unique<GpuCheckpointState>(models, mc_, grid_.coord(), zero_);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, launch_.device);
    gpu_ = prop.name;
  }

  std::string layout_line(double peak) const override {
    const GridShape& gs = grid_.shape();
    return fmt::format("layout world {} = dp {} x tp {}{} x pp {}{} (one {} per rank, bf16, attention {}) | {} | "
                       "peak {:g} TFLOP/s/GPU{}",
                       launch_.world, gs.dp, gs.tp, cfg_.parallel.sp ? " + sp" : "", gs.pp, chunks_note_, gpu_,
                       ops_->attention_kind(), batch_note_, peak / 1e12,
                       cfg_.train.peak_flops > 0 ? " (train.peak_flops)"
                       : peak > 0                ? " (datasheet dense bf16)"
                                                 : " (unknown GPU: set train.peak_flops for MFU)");
  }
  std::string describe() const override {
    size_t n_buckets = 0;
    std::string memory;
    for (auto& k : chunks_) {
      n_buckets += k.ddp->num_buckets();
      memory += (memory.empty() ? "" : " | ") + k.model->memory_summary();
    }
    return fmt::format(
        "data parallel: NCCL, zero {}, {} gradient bucket(s) (cap {:g} MiB) on the communication stream | GPU memory {}",
        zero_, n_buckets, cfg_.parallel.bucket_mb, memory);
  }
  size_t num_params() const override {
    size_t n = 0;
    for (auto& k : chunks_) n += k.model->num_params();
    return n;
  }
  double measured_peak_flops() override { return datasheet_bf16_peak(gpu_); }
  MemTracker& memory() override { return MemTracker::cuda(); }
  PipelineExecutor& pipeline() override { return *pipe_; }
  CheckpointState& checkpoint_state() override { return *state_; }

  void begin_step(int micro_batches) override {
    for (auto& k : chunks_) k.ddp->begin_step(micro_batches);
  }
  void finish_backward() override {
    exposed_ms_ = 0;
    for (auto& k : chunks_) exposed_ms_ += k.ddp->finish_backward();  // chunk order on every rank
  }
  // The same on every DP rank (gradients all-reduced); replicated parameters counted by TP rank
  // 0 (tp_grad_norm.hpp's rule); over the pipeline, the tied wte once.
  double grad_sum_squares() override {
    double sq = 0;
    for (auto& k : chunks_) sq += k.model->grad_sum_squares(grid_.coord().tp == 0, /*skip_tied_copy=*/k.tied_copy);
    return sq;
  }
  void scale_grads(float s) override {
    for (auto& k : chunks_) k.model->scale_grads(s);
  }
  void optimizer_step(double lr) override {
    const int opt_step = state_->next_step();
    const int dp = grid_.shape().dp;
    for (auto& k : chunks_) {
      k.model->adamw_step(static_cast<float>(lr), adamw_, opt_step);
      if (zero_ >= 1 && dp > 1) {  // everyone's updated shard of the master weights, in place, then the bf16 copy
        const std::vector<size_t> counts = shard_counts(0, k.n_flat, k.n_flat, dp);
        float* master = k.model->device_master_params();
        grid_.dp().all_gatherv(master + k.shard.begin, master, counts.data(), DType::f32);
        k.model->refresh_bf16_params();
      }
    }
    ops_->synchronize();
  }
  // Only the wait is measured on GPU (the reductions run on their own stream): comm is the
  // exposed part, and no overlap is claimed.
  StepComm take_comm() override { return {exposed_ms_, 0.0}; }
  std::vector<ChunkParams> full_params(std::vector<Buffer<float>>& scratch) override {
    std::vector<ChunkParams> out;
    scratch.clear();
    for (auto& k : chunks_) {
      const size_t n = k.model->num_params();
      scratch.emplace_back(Mem::workspace, n);
      k.model->copy_params_to_host(scratch.back().data(), n);
      out.push_back({scratch.back().data(), n});
    }
    return out;
  }

 private:
  const JobConfig& cfg_;
  const LaunchInfo& launch_;
  ProcessGrid& grid_;
  ModelConfig mc_;
  PipelineSchedule schedule_;  // the executor keeps a reference
  std::string chunks_note_, batch_note_;
  int zero_;
  CudaAdamWOptions adamw_;
  std::unique_ptr<CudaOps> ops_;
  std::vector<GpuChunk> chunks_;
  std::unique_ptr<PipelineExecutor> pipe_;
  std::unique_ptr<GpuCheckpointState> state_;
  std::string gpu_;
  double exposed_ms_ = 0;
};

}  // namespace

std::unique_ptr<TrainBackend> make_gpu_backend(const TrainSetup& s) { return std::make_unique<GpuBackend>(s); }

}  // namespace mpitron
