#include "mpitron/parallel/stage_model.hpp"

#include <fmt/format.h>

#include "mpitron/core/error.hpp"
#include "mpitron/parallel/tied_embedding.hpp"

namespace mpitron {

StageModel::StageModel(const ModelConfig& mc, const std::vector<ModelShard>& chunks, Ops& ops, ProcessGrid& grid,
                       const StageModelOptions& opt) {
  check(!chunks.empty() && opt.slots.size() == chunks.size(), "StageModel: {} chunks, {} slot counts", chunks.size(),
        opt.slots.size());
  Comm* tp = grid.shape().tp > 1 ? &grid.tp() : nullptr;
  for (size_t c = 0; c < chunks.size(); ++c) {
    models_.push_back(std::make_unique<GPT>(mc, chunks[c], ops, opt.micro_batch,
                                            ActivationOptions{opt.slots[c], opt.recompute}, tp));
    models_.back()->init_weights(opt.seed);
  }
  // The tie: the first virtual stage's embedding and the last one's head (pp = 1: one chunk holds
  // both and nothing is tied across ranks).
  for (auto& m : models_) {
    const bool end = m->shard().has_embedding || m->shard().has_head;
    if (!end || grid.shape().pp == 1) continue;
    sync_tied_embedding(*m, grid);
  }
  for (auto& m : models_) {
    DataParallelOptions o = opt.dp;
    const bool end = m->shard().has_embedding || m->shard().has_head;
    o.tied_group = end ? tied_embedding_group(*m, grid) : nullptr;
    o.tied_copy = o.tied_group && !m->shard().has_embedding;
    ddps_.push_back(std::make_unique<DataParallel>(*m, grid.dp(), ops, o));
  }
}

StageModel::~StageModel() { ddps_.clear(); }  // before the models they hook into

std::vector<GPT*> StageModel::chunks() {
  std::vector<GPT*> v;
  for (auto& m : models_) v.push_back(m.get());
  return v;
}

size_t StageModel::num_params() const {
  size_t n = 0;
  for (const auto& m : models_) n += m->num_params();
  return n;
}

double StageModel::tp_comm_seconds() const {
  double s = 0;
  for (const auto& m : models_) s += m->tp_comm_seconds();
  return s;
}

void StageModel::begin_step(int micro_batches) {
  for (auto& d : ddps_) d->begin_step(micro_batches);
}

void StageModel::finish_backward() {
  for (auto& d : ddps_) d->finish_backward();
}

double StageModel::grad_sum_squares(int tp_rank) {
  double s = 0;
  for (auto& d : ddps_) s += d->grad_sum_squares(tp_rank);
  return s;
}

void StageModel::scale_grads(float s) {
  for (auto& d : ddps_) d->scale_grads(s);
}

void StageModel::optimizer_step(double lr) {
  for (auto& d : ddps_) d->optimizer_step(lr);
}

CommTiming StageModel::take_timing() {
  CommTiming t;
  for (auto& d : ddps_) {
    CommTiming c = d->take_timing();
    t.comm_ms += c.comm_ms;
    t.exposed_ms += c.exposed_ms;
  }
  return t;
}

int StageModel::optimizer_steps() const { return ddps_.front()->optimizer().steps_taken(); }

void StageModel::set_optimizer_steps(int n) {
  for (auto& d : ddps_) d->optimizer().set_steps_taken(n);
}

std::string StageModel::describe() const {
  std::string s = ddps_.front()->describe();
  if (ddps_.size() > 1)
    s += fmt::format("\n  (and {} more model chunk(s) of this rank, each with its own buckets and shard)", ddps_.size() - 1);
  return s;
}

std::vector<ChunkParams> StageModel::full_params(std::vector<Buffer<float>>& scratch) {
  scratch.resize(ddps_.size());
  std::vector<ChunkParams> out;
  for (size_t c = 0; c < ddps_.size(); ++c) out.push_back({ddps_[c]->full_params(scratch[c]), models_[c]->num_params()});
  return out;
}

}  // namespace mpitron
