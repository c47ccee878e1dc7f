#include "mpitron/parallel/partition.hpp"

#include <fmt/ranges.h>

#include <numeric>

#include "mpitron/core/error.hpp"

namespace mpitron {

ModelShard model_shard_for(const ModelConfig& cfg, const GridShape& shape, const GridCoord& coord,
                           const std::vector<int>& pp_layers) {
  const int L = cfg.n_layer, p = shape.pp;
  usage_check(L >= p, "model.n_layer ({}) must be >= parallel.pp ({}): every stage needs a block", L, p);
  ModelShard s;
  s.tp_rank = coord.tp;
  s.tp_size = shape.tp;
  if (pp_layers.empty()) {
    s.layer_begin = static_cast<int>(int64_t{coord.pp} * L / p);
    s.layer_end = static_cast<int>(int64_t{coord.pp + 1} * L / p);
  } else {
    usage_check(static_cast<int>(pp_layers.size()) == p, "parallel.pp_layers has {} entries; parallel.pp is {}",
                pp_layers.size(), p);
    usage_check(std::accumulate(pp_layers.begin(), pp_layers.end(), 0) == L,
                "parallel.pp_layers [{}] sums to {}; model.n_layer is {}", fmt::join(pp_layers, ", "),
                std::accumulate(pp_layers.begin(), pp_layers.end(), 0), L);
    for (int n : pp_layers)
      usage_check(n > 0, "parallel.pp_layers [{}]: every stage needs at least one block", fmt::join(pp_layers, ", "));
    s.layer_begin = std::accumulate(pp_layers.begin(), pp_layers.begin() + coord.pp, 0);
    s.layer_end = s.layer_begin + pp_layers[coord.pp];
  }
  s.has_embedding = coord.pp == 0;
  s.has_head = coord.pp == p - 1;
  return s;
}

}  // namespace mpitron
