// Which part of the model a grid coordinate holds: the pipeline stage's blocks (balanced, or
// parallel.pp_layers given explicitly), embedding on the first stage, head on the last, and the
// tensor-parallel rank. Every rank can compute any other rank's shard (the parameter dump and
// checkpoints rely on that).
//
// Balanced rule: stage s of p holds blocks [s*L/p, (s+1)*L/p) (integer division), so the extra
// blocks of an uneven split are spread out. Example L=5, p=2: [0,2) and [2,5).
#pragma once
#include <vector>

#include "mpitron/dist/grid.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/gpt.hpp"

namespace mpitron {

// UsageError when the layout cannot hold the model (n_layer < pp, pp_layers not summing to
// n_layer or with a wrong count or an empty stage).
ModelShard model_shard_for(const ModelConfig& cfg, const GridShape& shape, const GridCoord& coord,
                           const std::vector<int>& pp_layers);

}  // namespace mpitron
