// Every parameter at its full logical shape (as if tp = pp = dp = 1), gathered to world rank 0
// and written there as an HDF5 file with one float32 dataset per parameter name. Used by the
// golden-rule tests to compare parallel layouts with the single-rank run (job key
// train.dump_params). Collective over the world.
//
// Contributors are the ranks with dp = cp = 0 (one copy of each model shard; under expert
// parallel also the other ranks of their ep group, for their experts); rank 0 knows each
// contributor's parameter tables from model_chunks_for(), so only the values travel.
#pragma once
#include <string>
#include <vector>

#include "mpitron/distributed/grid.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/parallel/stage_model.hpp"

namespace mpitron {

// chunk_params[c]: this rank's model chunk c's flat parameter buffer (one chunk unless the
// pipeline is interleaved; StageModel::full_params gathers them under ZeRO-3).
void dump_full_params(const std::string& path, const ModelConfig& cfg, const std::vector<int>& pp_layers,
                      int virtual_stages, ProcessGrid& grid, const std::vector<ChunkParams>& chunk_params);

}  // namespace mpitron
