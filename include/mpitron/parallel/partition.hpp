// Which part of the model a grid coordinate holds: the pipeline stage's blocks (balanced, or
// parallel.pp_layers given explicitly), embedding on the first stage, head on the last, and the
// tensor-parallel rank. Every rank can compute any other rank's shard (the parameter dump and
// checkpoints rely on that).
//
// Balanced rule: stage s of p holds blocks [s*L/p, (s+1)*L/p) (integer division), so the extra
// blocks of an uneven split are spread out. Example L=5, p=2: [0,2) and [2,5).
//
// Interleaved 1F1B (parallel.virtual_stages v > 1): the blocks are split the same way over pp*v
// virtual stages, and pipeline rank r holds v model chunks, chunk c being virtual stage c*pp + r
// (Megatron's assignment). The embedding is on virtual stage 0 (rank 0, chunk 0), the head on
// virtual stage pp*v - 1 (rank pp-1, chunk v-1). parallel.pp_layers then lists pp*v counts, in
// virtual stage order. Example L=8, pp=2, v=2: rank 0 holds blocks [0,2) and [4,6), rank 1 [2,4)
// and [6,8).
#pragma once
#include <vector>

#include "mpitron/distributed/grid.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/param_tables.hpp"

namespace mpitron {

// UsageError when the layout cannot hold the model (n_layer < pp, pp_layers not summing to
// n_layer or with a wrong count or an empty stage).
ModelShard model_shard_for(const ModelConfig& cfg, const GridShape& shape, const GridCoord& coord,
                           const std::vector<int>& pp_layers);
// The v model chunks of `coord` (v = 1: {model_shard_for(...)}).
std::vector<ModelShard> model_chunks_for(const ModelConfig& cfg, const GridShape& shape, const GridCoord& coord,
                                         const std::vector<int>& pp_layers, int virtual_stages);

}  // namespace mpitron
