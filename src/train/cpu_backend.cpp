// The CPU backend of the training loop (train_backend.hpp): this rank's CPU GPT chunks with their
// DataParallel (buckets, ZeRO 0-3) and AdamW (StageModel), run by the pipeline executor.
#include <fmt/format.h>
#include <omp.h>

#include "mpitron/ops/ops.hpp"
#include "mpitron/parallel/partition.hpp"
#include "mpitron/parallel/stage_model.hpp"
#include "mpitron/parallel/adamw.hpp"
#include "mpitron/train/peak_probe.hpp"
#include "mpitron/train/train_backend.hpp"

namespace mpitron {
namespace {

class CpuBackend final : public TrainBackend {
 public:
  explicit CpuBackend(const TrainSetup& s)
      : cfg_(s.cfg),
        grid_(s.grid),
        schedule_(s.schedule),
        chunks_note_(chunks_note(s)),
        batch_note_(batch_note(s)),
        ops_(make_cpu_ops()) {
    const GridShape& gs = grid_.shape();
    // The schedule decides how many micro-batches' activations each model chunk keeps
    // (pipeline.hpp); interleaved 1F1B gives this rank parallel.virtual_stages chunks (partition.hpp).
    std::vector<ModelShard> shards = model_chunks_for(s.mc, gs, grid_.coord(), s.cfg.parallel.pp_layers,
                                                      schedule_.virtual_stages);
    StageModelOptions so;
    so.micro_batch = s.bp.micro;
    so.recompute = s.cfg.train.recompute == "full";
    so.seed = s.cfg.train.seed;
    for (size_t c = 0; c < shards.size(); ++c) {
      shards[c].sequence_parallel = s.cfg.parallel.sp;
      so.slots.push_back(schedule_.max_in_flight(grid_.coord().pp, static_cast<int>(c)));
    }
    // Gradient buckets over DP, ZeRO sharding, and the (sharded) AdamW, per chunk: data_parallel.hpp.
    so.dp = {s.cfg.parallel.zero, s.cfg.parallel.bucket_mb, parse_progress_mode(s.cfg.parallel.dp_progress),
             AdamWOptions{s.cfg.optim.beta1, s.cfg.optim.beta2, s.cfg.optim.eps, s.cfg.optim.weight_decay}};
    model_ = std::make_unique<StageModel>(s.mc, shards, *ops_, grid_, so);
    pipe_ = std::make_unique<PipelineExecutor>(schedule_, grid_.pp(), model_->chunks());
    ckpt_state_ = std::make_unique<StageCheckpointState>(*model_, s.mc, grid_.coord());
  }

  std::string layout_line(double peak) const override {
    const GridShape& gs = grid_.shape();
    return fmt::format("layout world {} = dp {} x tp {} x pp {}{} | {} | {} threads/rank | peak {:.1f} GFLOP/s/rank{}",
                       grid_.world().size(), gs.dp, gs.tp, gs.pp, chunks_note_, batch_note_, omp_get_max_threads(),
                       peak / 1e9, cfg_.train.peak_flops > 0 ? " (train.peak_flops)" : " (measured GEMM probe)");
  }
  std::string describe() const override { return model_->describe(); }
  size_t num_params() const override { return model_->num_params(); }
  double measured_peak_flops() override { return measure_peak_flops(*ops_); }
  MemTracker& memory() override { return MemTracker::host(); }
  PipelineExecutor& pipeline() override { return *pipe_; }
  CheckpointState& checkpoint_state() override { return *ckpt_state_; }

  void begin_step(int micro_batches) override { model_->begin_step(micro_batches); }
  void finish_backward() override { model_->finish_backward(); }  // gradient buckets were reducing during backward
  double grad_sum_squares() override { return model_->grad_sum_squares(grid_.coord().tp); }
  void scale_grads(float s) override { model_->scale_grads(s); }
  void optimizer_step(double lr) override { model_->optimizer_step(lr); }
  StepComm take_comm() override {
    const CommTiming t = model_->take_timing();
    return {t.comm_ms, t.overlap()};
  }
  double tp_comm_seconds() const override { return model_->tp_comm_seconds(); }
  std::vector<ChunkParams> full_params(std::vector<Buffer<float>>& scratch) override {
    return model_->full_params(scratch);
  }

 private:
  const JobConfig& cfg_;
  ProcessGrid& grid_;
  PipelineSchedule schedule_;  // the executor keeps a reference
  std::string chunks_note_, batch_note_;
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<StageModel> model_;
  std::unique_ptr<PipelineExecutor> pipe_;
  std::unique_ptr<StageCheckpointState> ckpt_state_;
};

}  // namespace

std::unique_ptr<TrainBackend> make_cpu_backend(const TrainSetup& s) { return std::make_unique<CpuBackend>(s); }

}  // namespace mpitron
