#include "mpitron/parallel/zero3_params.hpp"

#include <algorithm>
#include <cstring>

#include "mpitron/core/error.hpp"

namespace mpitron {

using Ev = ModelChunk::UnitEvent;

ShardedParams::ShardedParams(ModelChunk& model, Comm& dp, FlatOps& ops, CommProgress& progress, ParamSet set)
    : model_(model), dp_(dp), ops_(ops), progress_(progress),
      region_(param_set_range(model.params(), model.num_params(), set)) {
  check(model.param_data() != nullptr, "ZeRO-3: the model's flat parameters were already released");
  range_ = zero_shard(region_, dp.size(), dp.rank());
  shard_ = Buffer<float>(Mem::params, range_.size(), ops.allocator());
  ops.copy(shard_.data(), model.param_data() + range_.begin, range_.size());
  const ModelShard& ms = model.shard();
  n_layers_ = local_layers(model.config(), ms);
  for (UnitRange& r : unit_ranges(model.params(), model.num_params(), ms, n_layers_, set)) {
    units_.emplace_back();
    static_cast<UnitRange&>(units_.back()) = std::move(r);
  }
}

ShardedParams::Unit* ShardedParams::unit(int u) {
  Unit* p = &units_[unit_index(u)];
  return p->params.empty() ? nullptr : p;
}

size_t ShardedParams::largest_unit_floats() const {
  size_t m = 0;
  for (const auto& u : units_) m = std::max(m, u.end - u.begin);
  return m;
}

void ShardedParams::start_gather(int u) {
  Unit* un = unit(u);
  if (!un || un->present || un->pending) return;
  un->buf = Buffer<float>(Mem::params, un->end - un->begin, ops_.allocator(), Fill::none);  // the gather writes it all
  for (size_t i : un->params) model_.bind_param(i, un->buf.data() + (model_.params()[i].offset - un->begin));
  std::vector<size_t> counts = shard_counts(region_, un->begin, un->end, dp_.size());
  size_t lo = std::max(un->begin, range_.begin);
  const float* send = counts[dp_.rank()] > 0 ? shard_.data() + (lo - range_.begin) : shard_.data();
  if (dp_.size() == 1) {
    ops_.copy(un->buf.data(), send, un->end - un->begin);
    un->present = true;
    return;
  }
  un->handle = progress_.add(dp_.iall_gatherv(send, un->buf.data(), counts.data(), DType::f32));
  un->pending = true;
}

void ShardedParams::ensure(int u) {
  Unit* un = unit(u);
  if (!un || un->present) return;
  if (!un->pending) start_gather(u);
  if (un->pending) progress_.wait(un->handle);
  un->pending = false;
  un->present = true;
}

void ShardedParams::release(int u) {
  Unit* un = unit(u);
  if (!un) return;
  if (un->pending) progress_.wait(un->handle);  // never free memory MPI still writes
  for (size_t i : un->params) model_.bind_param(i, nullptr);
  un->buf.reset();
  un->pending = un->present = false;
}

void ShardedParams::on_event(Ev ev, int u) {
  const bool grad = model_.grad_enabled();
  const int last = n_layers_ - 1;
  const bool block = u >= 0;
  switch (ev) {
    case Ev::pre_forward:  // start this unit's gather (if not prefetched), then the next one's, then wait
      start_gather(u);
      if (u == ModelChunk::kEmbeddingUnit) start_gather(n_layers_ > 0 ? 0 : ModelChunk::kHeadUnit);
      if (block) start_gather(u < last ? u + 1 : ModelChunk::kHeadUnit);
      ensure(u);
      break;
    case Ev::post_forward:
      if (u == ModelChunk::kEmbeddingUnit) release(u);
      if (block && !(grad && u == last)) release(u);
      if (u == ModelChunk::kHeadUnit && !grad) release(u);
      break;
    case Ev::pre_backward:
      if (u == ModelChunk::kEmbeddingUnit) break;  // the embedding's backward reads no weights
      start_gather(u);
      if (u == ModelChunk::kHeadUnit && last >= 0) start_gather(last);
      if (block && u > 0) start_gather(u - 1);
      ensure(u);
      break;
    case Ev::post_backward:
      if (u != ModelChunk::kEmbeddingUnit) release(u);
      break;
  }
}

void ShardedParams::gather_full(float* out) {
  std::vector<size_t> counts = shard_counts(region_, region_.begin, region_.end, dp_.size());
  progress_.blocking([&] { dp_.all_gatherv(shard_.data(), out + region_.begin, counts.data(), DType::f32); });
}

}  // namespace mpitron
