#include "mpitron/train/train_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "mpitron/distributed/fault_inject.hpp"

namespace mpitron {

std::string chunks_note(const TrainSetup& s) {
  const int v = s.schedule.virtual_stages;
  return v > 1 ? fmt::format(" (interleaved, {} model chunks per rank)", v) : "";
}

std::string batch_note(const TrainSetup& s) {
  return fmt::format("global batch {} = micro {} x dp {} x accum {} ({} tokens/step)", s.bp.global, s.bp.micro,
                     s.grid.shape().dp, s.bp.accum, int64_t{s.bp.global} * s.mc.seq_len);
}

DataParallelOptions dp_options(const JobConfig& cfg) {
  DataParallelOptions o{cfg.parallel.zero, cfg.parallel.bucket_mb, parse_progress_mode(cfg.parallel.dp_progress),
                        AdamWOptions{cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay}};
  o.reproducible = cfg.train.reproducible;
  return o;
}

void TrainBackend::build(const TrainSetup& s, std::vector<std::unique_ptr<ModelChunk>> chunks, FlatOps& ops, Comm& pp,
                         const DataParallelOptions& dp) {
  tp_rank_ = s.grid.coord().tp;
  std::vector<ModelChunk*> stages;  // the executor runs the chunks the StageModel owns
  for (const auto& c : chunks) stages.push_back(c.get());
  model_ = std::make_unique<StageModel>(std::move(chunks), ops, s.grid, dp);
  schedule_ = std::make_unique<PipelineSchedule>(s.schedule);
  pipe_ = std::make_unique<PipelineExecutor>(*schedule_, pp, std::move(stages));
  ckpt_state_ = std::make_unique<StageCheckpointState>(*model_, s.mc, s.grid.shape(), s.grid.coord());
}

void TrainBackend::release_stage() {
  ckpt_state_.reset();
  pipe_.reset();
  model_.reset();
}

void TrainBackend::optimizer_step(double lr) {
  model_->optimizer_step(lr);
  model_->ops().synchronize();  // the update is complete on return: the loop reads the step time next
  if (fault_poison("params")) poison_state();
}

// MPITRON_FAULT=poison@params: this rank's parameters (its ZeRO-3 shard) and AdamW moments become
// NaN, as after a diverged update, for the tests of the checkpoint's finite guard.
void TrainBackend::poison_state() {
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

StepComm TrainBackend::take_comm() {
  const CommTiming t = model_->take_timing();
  return {t.comm_ms, t.overlap()};
}

}  // namespace mpitron
