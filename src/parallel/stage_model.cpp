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
    // Expert parallel: this rank's routed experts (the end of the flat buffer) are another rank's
    // in the next ep run, so they synchronise and shard over expert_dp, the ranks holding the same
    // experts (Megatron's expert-data-parallel); the rest over dp x cp as without ep.
    const bool experts = grid.shape().ep > 1 && param_set_range(m->params(), m->num_params(), ParamSet::experts).size();
    if (!experts) {
      ddps_.push_back(std::make_unique<DataParallel>(*m, grid.dp_cp(), ops, o));
      edps_.emplace_back();
      continue;
    }
    o.params = ParamSet::dense;
    ddps_.push_back(std::make_unique<DataParallel>(*m, grid.dp_cp(), ops, o));
    DataParallelOptions e = dp;
    e.params = ParamSet::experts;
    e.ep = &grid.ep();
    edps_.push_back(std::make_unique<DataParallel>(*m, grid.expert_dp(), ops, e));
    DataParallel *d = ddps_.back().get(), *x = edps_.back().get();
    m->set_unit_hook([d, x](ModelChunk::UnitEvent ev, int unit) {
      d->on_unit_event(ev, unit);
      x->on_unit_event(ev, unit);
    });
  }
  for (int c = 0; c < size(); ++c)
    for (DataParallel* d : sets(c)) all_sets_.push_back(d);
}

StageModel::~StageModel() {  // before the models they hook into
  for (size_t c = 0; c < models_.size(); ++c)
    if (edps_[c]) models_[c]->set_unit_hook({});
  all_sets_.clear();
  edps_.clear();
  ddps_.clear();
}

std::vector<DataParallel*> StageModel::sets(int c) {
  std::vector<DataParallel*> out{ddps_[c].get()};
  if (edps_[c]) out.push_back(edps_[c].get());
  return out;
}

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

Fp8Stats StageModel::take_fp8_stats() {
  Fp8Stats out{};
  for (auto& m : models_) {
    const Fp8Stats s = m->take_fp8_stats();
    for (int k = 0; k < kFp8Operands; ++k) out[k].merge(s[k]);
  }
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
  for (DataParallel* d : all_sets_) d->begin_step(micro_batches);
}

void StageModel::finish_backward() {
  for (DataParallel* d : all_sets_) d->finish_backward();
}

double StageModel::grad_sum_squares(int tp_rank) {
  double s = 0;
  for (DataParallel* d : all_sets_) s += d->grad_sum_squares(tp_rank);
  return s;
}

ExactSum StageModel::grad_sum_squares_exact(int tp_rank) {
  ExactSum s;
  for (DataParallel* d : all_sets_) d->grad_sum_squares_exact(tp_rank, s);
  return s;
}

void StageModel::scale_grads(float s) {
  for (DataParallel* d : all_sets_) d->scale_grads(s);
}

void StageModel::optimizer_step(double lr) {
  for (DataParallel* d : all_sets_) d->optimizer_step(lr);
}

CommTiming StageModel::take_timing() {
  CommTiming t;
  for (DataParallel* d : all_sets_) {
    CommTiming c = d->take_timing();
    t.comm_ms += c.comm_ms;
    t.exposed_ms += c.exposed_ms;
  }
  return t;
}

int StageModel::optimizer_steps() const { return ddps_.front()->optimizer().steps_taken(); }

void StageModel::set_optimizer_steps(int n) {
  for (DataParallel* d : all_sets_) d->optimizer().set_steps_taken(n);
}

std::string StageModel::describe() const {
  std::string s = ddps_.front()->describe();
  if (edps_.front()) s += "\n  " + edps_.front()->describe();
  if (ddps_.size() > 1)
    s += fmt::format("\n  (and {} more model chunk(s) of this rank, each with its own buckets and shard)", ddps_.size() - 1);
  return s;
}

std::vector<ChunkParams> StageModel::full_params(std::vector<Buffer<float>>& scratch) {
  scratch.resize(ddps_.size());
  std::vector<ChunkParams> out;
  for (size_t c = 0; c < ddps_.size(); ++c) {
    const size_t n = models_[c]->num_params();
    if (!edps_[c]) {
      out.push_back({ddps_[c]->full_params(scratch[c]), n});
      continue;
    }
    // Two parameter sets (expert parallel, the CPU backend): the flat buffer, or under ZeRO-3 each
    // set gathered over its own group into its range.
    ddps_[c]->sync_params(), edps_[c]->sync_params();
    if (ddps_[c]->zero() < 3) {
      out.push_back({models_[c]->param_data(), n});
      continue;
    }
    scratch[c] = Buffer<float>(Mem::workspace, n);
    ddps_[c]->gather_params_into(scratch[c].data());
    edps_[c]->gather_params_into(scratch[c].data());
    out.push_back({scratch[c].data(), n});
  }
  return out;
}

}  // namespace mpitron
