#include "mpitron/parallel/partition.hpp"

#include <fmt/format.h>

#include <numeric>

#include "mpitron/core/error.hpp"
#include "mpitron/parallel/schedule.hpp"

namespace mpitron {
namespace {

// Virtual stage vs of nv (the pipeline stage itself when nv = pp): blocks, embedding, head.
ModelShard virtual_stage_shard(const ModelConfig& cfg, const GridShape& shape, const GridCoord& coord,
                               const std::vector<int>& pp_layers, int vs, int nv) {
  ModelShard s;
  s.tp_rank = coord.tp;
  s.tp_size = shape.tp;
  s.cp_rank = coord.cp;
  s.cp_size = shape.cp;
  s.ep_size = shape.ep;
  s.ep_rank = data_context_rank(coord, shape.cp) % shape.ep;  // grid.cpp's ep group
  const std::vector<int> layers = pipeline_stage_layers(cfg.n_layer, nv, pp_layers);  // schedule.hpp: the same rule for `plan`
  s.layer_begin = std::accumulate(layers.begin(), layers.begin() + vs, 0);
  s.layer_end = s.layer_begin + layers[vs];
  s.has_embedding = vs == 0;
  s.has_head = vs == nv - 1;
  return s;
}

}  // namespace

ModelShard model_shard_for(const ModelConfig& cfg, const GridShape& shape, const GridCoord& coord,
                           const std::vector<int>& pp_layers) {
  return virtual_stage_shard(cfg, shape, coord, pp_layers, coord.pp, shape.pp);
}

std::vector<ModelShard> model_chunks_for(const ModelConfig& cfg, const GridShape& shape, const GridCoord& coord,
                                         const std::vector<int>& pp_layers, int virtual_stages) {
  check(virtual_stages >= 1, "model_chunks_for: {} virtual stages", virtual_stages);
  std::vector<ModelShard> out;
  for (int c = 0; c < virtual_stages; ++c)
    out.push_back(virtual_stage_shard(cfg, shape, coord, pp_layers, c * shape.pp + coord.pp, shape.pp * virtual_stages));
  return out;
}

}  // namespace mpitron
