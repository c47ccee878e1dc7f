#include "mpitron/parallel/param_gather.hpp"

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/fault_inject.hpp"

namespace mpitron {

ParamAllGather::ParamAllGather(ModelChunk& model, Comm& dp, CommProgress& progress, ParamSet set)
    : dp_(dp), progress_(progress), region_(param_set_range(model.params(), model.num_params(), set)),
      params_(model.param_data()) {
  const int layers = local_layers(model.config(), model.shard());
  for (UnitRange& r : unit_ranges(model.params(), model.num_params(), model.shard(), layers, set))
    units_.push_back({std::move(r)});
  // Forward order: the embedding, block 0 .. L-1, the head.
  std::vector<size_t> order{unit_index(ModelChunk::kEmbeddingUnit)};
  for (int l = 0; l < layers; ++l) order.push_back(unit_index(l));
  order.push_back(unit_index(ModelChunk::kHeadUnit));
  for (size_t u : order)
    if (!units_[u].range.params.empty()) order_.push_back(u);
}

void ParamAllGather::launch() {
  const bool late = fault_late("param_gather");  // tests: nothing arrives before it is waited for
  for (size_t u : order_) {
    Unit& un = units_[u];
    check(!un.pending, "ParamAllGather: unit {} launched while its previous gather is in flight", u);
    un.pending = true;
    un.started = !late;
    if (!late) start(un);
  }
}

void ParamAllGather::start(Unit& un) {
  // In place: this rank's part of the unit is already where it belongs (MPI_IN_PLACE).
  const std::vector<size_t> counts = shard_counts(region_, un.range.begin, un.range.end, dp_.size());
  size_t mine = un.range.begin;
  for (int r = 0; r < dp_.rank(); ++r) mine += counts[r];
  un.handle = progress_.add(dp_.iall_gatherv(params_ + mine, params_ + un.range.begin, counts.data(), DType::f32));
  un.started = true;
}

void ParamAllGather::wait(Unit& un) {
  if (!un.pending) return;
  if (!un.started) start(un);
  progress_.wait(un.handle);
  un.pending = false;
}

void ParamAllGather::wait_unit(int unit) { wait(units_[unit_index(unit)]); }

void ParamAllGather::wait_all() {
  for (size_t u : order_) wait(units_[u]);
}

}  // namespace mpitron
