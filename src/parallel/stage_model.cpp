#include "mpitron/parallel/stage_model.hpp"

#include <fmt/format.h>

#include "mpitron/core/error.hpp"
#include "mpitron/parallel/tied_embedding.hpp"

namespace mpitron {

StageModel::StageModel(std::vector<std::unique_ptr<ModelChunk>> chunks, FlatOps& ops, ProcessGrid& grid,
                       const DataParallelOptions& dp)
    : ops_(ops), models_(std::move(chunks)) {
  check(!models_.empty(), "StageModel: no model chunks");
  // The tie: the first virtual stage's embedding and the last one's head (pp = 1: one chunk holds
  // both and nothing is tied across ranks).
  for (auto& m : models_) {
    const bool end = m->shard().has_embedding || m->shard().has_head;
    if (!end || grid.shape().pp == 1) continue;
    sync_tied_embedding(*m, grid);
  }
  for (auto& m : models_) {
    DataParallelOptions o = dp;
    const bool end = m->shard().has_embedding || m->shard().has_head;
    o.tied_group = end ? tied_embedding_group(*m, grid) : nullptr;
    o.tied_copy = o.tied_group && !m->shard().has_embedding;
    // Over DP and CP together (Megatron's rule: the cp ranks of a replica hold the same parameters,
    // each with its tokens' gradient); ZeRO shards over that group too. cp = 1: the DP group.
    ddps_.push_back(std::make_unique<DataParallel>(*m, grid.dp_cp(), ops, o));
  }
}

StageModel::~StageModel() { ddps_.clear(); }  // before the models they hook into

size_t StageModel::num_params() const {
  size_t n = 0;
  for (const auto& m : models_) n += m->num_params();
  return n;
}

double StageModel::tp_comm_seconds() const {
  double s = 0;
  for (const auto& m : models_) {
    const double t = m->tp_comm_seconds();
    if (t < 0) return -1.0;  // not measured
    s += t;
  }
  return s;
}

std::vector<std::pair<int, MoeStats>> StageModel::take_moe_stats() {
  std::vector<std::pair<int, MoeStats>> out;
  for (auto& m : models_)
    for (auto& x : m->take_moe_stats()) out.push_back(std::move(x));
  return out;
}

double StageModel::ep_seconds() const {
  double s = -1.0;
  for (const auto& m : models_)
    if (const double t = m->ep_seconds(); t >= 0) s = std::max(s, 0.0) + t;
  return s;
}

double StageModel::cp_wait_seconds() const {
  double s = 0;
  for (const auto& m : models_) {
    const double t = m->cp_wait_seconds();
    if (t < 0) return -1.0;
    s += t;
  }
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
